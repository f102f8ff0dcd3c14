// The environment variables of rdma_environment.h: parsed here, applied to RdmaOptions.
#include "transport/rdma/rdma_environment.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "verbs/port_address.h"

namespace bx::rdma {
namespace {

// An 8-bit setting from the environment, overriding `value` when set.
Status Uint8FromEnvironment(const char* name, uint8_t* value) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return Status::Ok();
  char* end = nullptr;
  long parsed = std::strtol(text, &end, 0);
  if (*end != '\0' || parsed < 0 || parsed > 255)
    return InvalidArgument(std::string(name) + "='" + text + "' is not a number 0..255");
  *value = uint8_t(parsed);
  return Status::Ok();
}

// A setting with two spellings from the environment: `*value` becomes true for `on`, false for
// `off`, and stays when the variable is unset.
Status ChoiceFromEnvironment(const char* name, std::string_view on, std::string_view off,
                             bool* value) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return Status::Ok();
  const std::string_view choice(text);
  if (choice != on && choice != off)
    return InvalidArgument(std::string(name) + "='" + std::string(choice) + "' is not " +
                           std::string(on) + " or " + std::string(off));
  *value = choice == on;
  return Status::Ok();
}

}  // namespace

// BX_POLLING and BX_SHARE_IO_THREADS are there to measure the I/O threads' policies without
// rebuilding; the others are what an operator sets per host.
Status ApplyEnvironment(RdmaOptions& rdma) {
  auto gid_index = verbs::GidIndexFromEnvironment(rdma.gid_index);
  if (!gid_index.ok()) return gid_index.status().WithContext("rdma transport");
  rdma.gid_index = *gid_index;
  BX_RETURN_IF_ERROR(Uint8FromEnvironment("BX_TRAFFIC_CLASS", &rdma.traffic_class));
  BX_RETURN_IF_ERROR(Uint8FromEnvironment("BX_SERVICE_LEVEL", &rdma.service_level));
  if (rdma.service_level > 15)
    return InvalidArgument("service level " + std::to_string(rdma.service_level) +
                           " is outside 0..15");
  BX_RETURN_IF_ERROR(
      ChoiceFromEnvironment("BX_POLLING", "adaptive", "fixed", &rdma.adaptive_polling));
  return ChoiceFromEnvironment("BX_SHARE_IO_THREADS", "1", "0", &rdma.share_io_threads);
}

bool DebugAddressing() {
  // Read once: the variable is the process's, and this is asked once per connection.
  static const bool on = [] {
    const char* v = std::getenv("BX_DEBUG");
    return v != nullptr && *v != '\0' && std::string_view(v) != "0";
  }();
  return on;
}

}  // namespace bx::rdma

namespace bx {

Result<RdmaOptions> ApplyRdmaEnvironment(RdmaOptions rdma) {
  BX_RETURN_IF_ERROR(rdma::ApplyEnvironment(rdma));
  return rdma;
}

}  // namespace bx
