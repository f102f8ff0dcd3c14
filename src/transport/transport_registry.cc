#include "transport/transport_registry.h"

#include <mutex>
#include <utility>

#include "transport/auth.h"

namespace bx::transport {
namespace {

struct Entry {
  std::string scheme;
  TransportFactory factory;
};

std::mutex& RegistryMutex() {
  static std::mutex mutex;
  return mutex;
}

// A vector, not a map: there are two schemes, and registration order is the order tools show.
std::vector<Entry>& Registry() {
  static std::vector<Entry> entries;
  return entries;
}

}  // namespace

void RegisterTransport(std::string scheme, TransportFactory factory) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  for (Entry& entry : Registry()) {
    if (entry.scheme == scheme) {
      entry.factory = std::move(factory);
      return;
    }
  }
  Registry().push_back({std::move(scheme), std::move(factory)});
}

Result<std::unique_ptr<Transport>> CreateTransport(std::string_view scheme,
                                                   const TransportOptions& options) {
  BX_RETURN_IF_ERROR(auth::CheckSecrets(options));
  TransportFactory factory;
  std::string known;
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    for (const Entry& entry : Registry()) {
      if (entry.scheme == scheme) factory = entry.factory;
      known += (known.empty() ? "" : ", ") + entry.scheme;
    }
  }
  if (!factory) {
    return NotFound("no transport '" + std::string(scheme) + "' in this program (registered: " +
                    (known.empty() ? "none; bx::Init registers tcp and rdma" : known) + ")");
  }
  return factory(options);
}

std::vector<std::string> RegisteredTransports() {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  std::vector<std::string> schemes;
  for (const Entry& entry : Registry()) schemes.push_back(entry.scheme);
  return schemes;
}

}  // namespace bx::transport

namespace bx {

Result<std::unique_ptr<Transport>> CreateTransport(std::string_view scheme,
                                                   const TransportOptions& options) {
  return transport::CreateTransport(scheme, options);
}

}  // namespace bx
