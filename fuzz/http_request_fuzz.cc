// Fuzzes the request-head parser of the /metrics endpoint (src/metrics/http_request.cc): the
// bytes any client that reaches the metrics port sends.
//
// Properties checked: an accepted request has a token method and a path that starts with '/'
// and carries no query string or control characters; a refusal says why.
#include <cstdlib>
#include <string_view>

#include "metrics/http_request.h"

namespace {

void Check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The server never passes more than this; beyond it the parser refuses at once.
  if (size > bx::metrics::kMaxRequestHeadBytes + 1) return -1;
  std::string_view head(reinterpret_cast<const char*>(data), size);
  auto request = bx::metrics::ParseRequestHead(head);
  if (request.ok()) {
    Check(!request->method.empty());
    Check(!request->path.empty() && request->path[0] == '/');
    Check(request->path.find('?') == std::string::npos);
    for (char c : request->path) Check(static_cast<unsigned char>(c) > ' ' && c != 0x7f);
  } else {
    Check(!request.status().message().empty());
  }
  return 0;
}
