// Helpers shared by the verbs tests. Tests run one at a time in one thread.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "verbs/verbs.h"

namespace bx::verbs::testing {

// Sets (or with nullopt, unsets) an environment variable for one scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// True when this build has the simnic target, so tests that need it must pass, not skip.
constexpr bool kBuildHasSimnic =
#ifdef BX_HAVE_SIMNIC_TARGET
    true;
#else
    false;
#endif

// True when the system libibverbs lists at least one device (a machine with an RNIC).
inline bool SystemHasDevices() {
  auto lib = Library::Load("system");
  if (!lib.ok()) return false;
  int count = 0;
  ibv_device** list = lib.value()->get_device_list(&count);
  if (list != nullptr) lib.value()->free_device_list(list);
  return list != nullptr && count > 0;
}

}  // namespace bx::verbs::testing

// Skips the test when the build has no simnic (a checkout where src/simnic is not there yet).
#define BX_REQUIRE_SIMNIC()                                                            \
  do {                                                                                 \
    if (!::bx::verbs::testing::kBuildHasSimnic) GTEST_SKIP() << "no bx_simnic target"; \
  } while (0)
