#include "alloc/testing/test_memory.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "alloc/verbs_registrar.h"

namespace bx::test_support {
namespace {

[[noreturn]] void Die(const char* what, const Status& status) {
  std::fprintf(stderr, "test set-up: %s: %s\n", what, status.ToString().c_str());
  std::exit(2);
}

}  // namespace

verbs::Device& InitTestMemory(const bemalloc::Options& options) {
  static std::once_flag once;
  static verbs::Device* device = nullptr;
  std::call_once(once, [&] {
    setenv("BX_VERBS", "sim", /*overwrite=*/0);
    const char* name = std::getenv("BX_DEVICE");
    Result<verbs::Device> opened = verbs::Device::Open(name != nullptr ? name : "bxsim0");
    if (!opened.ok()) Die("opening the device", opened.status());
    // Kept until exit: bemalloc's regions are registered with it.
    device = new verbs::Device(std::move(opened).value());
    if (Status s = bemalloc::Init(*device, options); !s.ok()) Die("bemalloc::Init", s);
  });
  return *device;
}

}  // namespace bx::test_support
