// The little HTTP/1.x the metrics endpoint and `bx stats` speak: parsing a request head (the
// bytes a scraper sends, which the server must treat as hostile; fuzzed by fuzz_http_request),
// and a client GET.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "bx/status.h"

namespace bx::metrics {

// The most a request head may take, request line and headers; a larger one is refused.
inline constexpr size_t kMaxRequestHeadBytes = 8192;

struct HttpRequest {
  std::string method;  // "GET", "HEAD", ...: an HTTP token
  std::string path;    // the target without its query string, always starting with '/'
};

// Parses the head of a request (everything before the blank line). InvalidArgument with the
// reason when the request line is not `METHOD SP /target SP HTTP/1.0|1.1`.
Result<HttpRequest> ParseRequestHead(std::string_view head);

// GET `url` (http://host[:port]/path) and return the body of a 200 answer; any other status,
// a malformed answer, more than `max_bytes` or no answer within `timeout` is an error.
Result<std::string> HttpGet(std::string_view url, std::chrono::milliseconds timeout,
                            size_t max_bytes = 64u << 20);

}  // namespace bx::metrics
