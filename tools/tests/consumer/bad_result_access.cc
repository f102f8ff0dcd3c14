// Result<T>::value() on an error, from a program built against the installed package: it throws
// bx::BadResultAccess carrying the Status. With an argument, or built with -fno-exceptions,
// value() is called uncaught: the terminate handler must print the Status
// (tools/test-install.sh checks).
#include <cstdio>
#include <cstring>
#include <string>

#include "bx/status.h"

int main(int argc, char**) {
  bx::Result<std::string> missing = bx::NotFound("no row for key 7");
#if defined(__cpp_exceptions)
  if (argc == 1) {
    try {
      std::printf("%s\n", missing.value().c_str());
    } catch (const bx::BadResultAccess& e) {
      if (std::strcmp(e.what(), "NOT_FOUND: no row for key 7") != 0 ||
          e.status().code() != bx::StatusCode::kNotFound) {
        std::fprintf(stderr, "wrong exception: %s\n", e.what());
        return 1;
      }
      std::printf("caught bx::BadResultAccess: %s\n", e.what());
      return 0;
    }
    std::fprintf(stderr, "value() on an error returned\n");
    return 1;
  }
#endif
  (void)argc;
  return static_cast<int>(missing.value().size());  // terminates
}
