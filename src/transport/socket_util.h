// Small helpers around the BSD socket calls, shared by the tcp transport and the rdma transport's
// bootstrap connections.
#pragma once

#include <netdb.h>
#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <string>

#include "bx/status.h"
#include "bx/transport.h"

namespace bx::transport {

// getaddrinfo() results, freed with freeaddrinfo.
using AddressList = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

// Resolves `url`'s host and port; `passive` for a listening address.
Result<AddressList> Resolve(const Url& url, bool passive);

// "scheme://10.0.0.1:7000" (IPv6 in brackets) for a socket address.
std::string FormatAddress(std::string_view scheme, const sockaddr* address, socklen_t length);
// The numeric host of a socket address without the port ("10.0.0.1", "::1"): the key
// TransportOptions::max_connections_per_peer counts by. IPv4-mapped IPv6 addresses give the IPv4
// form, so a peer counts the same over either family.
std::string FormatHost(const sockaddr* address, socklen_t length);

// Sets TCP_NODELAY: messages are whole frames already, and Nagle would hold the last segment of
// each back for an acknowledgement (40 ms on a delayed ACK).
Status SetNoDelay(int fd);

// Clears O_NONBLOCK: for code that reads a socket with poll()-based deadlines of its own.
void SetBlocking(int fd);

// Connects a non-blocking stream socket to `address`, waiting until `deadline`; TCP_NODELAY set.
// Returns the fd (still non-blocking).
Result<int> ConnectOne(const addrinfo& address, std::chrono::steady_clock::time_point deadline,
                       const std::string& url);

// Resolves `url` and connects to the first of its addresses that answers before `deadline`
// (non-blocking fd, TCP_NODELAY). `peer` is that address as "scheme://host:port".
struct ConnectedSocket {
  int fd;
  std::string peer;
};
Result<ConnectedSocket> ConnectFirst(const Url& url,
                                     std::chrono::steady_clock::time_point deadline);

// A socket listening on `url` (port 0: any free port), non-blocking, and the url it is bound to.
struct ListeningSocket {
  int fd;
  Url url;
};
Result<ListeningSocket> ListenOn(const Url& url, int backlog);

}  // namespace bx::transport
