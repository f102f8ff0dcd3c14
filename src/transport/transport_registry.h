// The transports a program can create by scheme ("tcp", "rdma"). bx_transport knows none of them
// itself, so that it links no transport: each transport library offers a registration function
// (tcp::RegisterTcpTransport() in src/transport/tcp/tcp_transport.h) that the program calls once.
//
// Threads: all functions are thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bx/status.h"
#include "bx/transport.h"

namespace bx::transport {

using TransportFactory =
    std::function<Result<std::unique_ptr<Transport>>(const TransportOptions& options)>;

// Makes `scheme` creatable. Registering a scheme again replaces its factory.
void RegisterTransport(std::string scheme, TransportFactory factory);

// A new transport for `scheme`; NotFound (listing the registered schemes) when none is registered.
Result<std::unique_ptr<Transport>> CreateTransport(std::string_view scheme,
                                                   const TransportOptions& options);

// The registered schemes in registration order.
std::vector<std::string> RegisteredTransports();

}  // namespace bx::transport
