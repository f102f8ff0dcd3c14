// Small helpers around the BSD socket calls shared by the listener and the transport.
#pragma once

#include <netdb.h>
#include <sys/socket.h>

#include <memory>
#include <string>

#include "bx/status.h"
#include "bx/transport.h"

namespace bx::tcp {

// getaddrinfo() results, freed with freeaddrinfo.
using AddressList = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

// Resolves `url`'s host and port; `passive` for a listening address.
Result<AddressList> Resolve(const Url& url, bool passive);

// "tcp://10.0.0.1:7000" (IPv6 in brackets) for a socket address.
std::string FormatAddress(const sockaddr* address, socklen_t length);

// Sets TCP_NODELAY: messages are whole frames already, and Nagle would hold the last segment of
// each back for an acknowledgement (40 ms on a delayed ACK).
Status SetNoDelay(int fd);

}  // namespace bx::tcp
