// ParseUrl and Url::ToString (include/bx/transport.h).
#include <charconv>
#include <string>

#include "bx/transport.h"

namespace bx {
namespace {

bool IsSchemeChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
}

}  // namespace

std::string Url::ToString() const {
  // An IPv6 literal needs its brackets back, or the port would read as part of the address.
  bool needs_brackets = host.find(':') != std::string::npos;
  std::string text = scheme + "://";
  text += needs_brackets ? "[" + host + "]" : host;
  return text + ":" + std::to_string(port);
}

Result<Url> ParseUrl(std::string_view url) {
  auto invalid = [&](std::string_view why) {
    return InvalidArgument("bad url '" + std::string(url) + "': " + std::string(why) +
                           " (expected scheme://host:port)");
  };
  size_t separator = url.find("://");
  if (separator == std::string_view::npos || separator == 0) return invalid("no scheme");
  Url parsed;
  parsed.scheme = std::string(url.substr(0, separator));
  for (char c : parsed.scheme) {
    if (!IsSchemeChar(c)) return invalid("the scheme has a character other than a-z 0-9 + - .");
  }
  std::string_view rest = url.substr(separator + 3);
  std::string_view port_text;
  if (!rest.empty() && rest.front() == '[') {  // [IPv6]:port
    size_t close = rest.find(']');
    if (close == std::string_view::npos) return invalid("unclosed '['");
    parsed.host = std::string(rest.substr(1, close - 1));
    if (close + 1 >= rest.size() || rest[close + 1] != ':') return invalid("no port");
    port_text = rest.substr(close + 2);
  } else {
    size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) return invalid("no port");
    parsed.host = std::string(rest.substr(0, colon));
    if (parsed.host.find(':') != std::string::npos) {
      return invalid("an IPv6 address needs brackets");
    }
    port_text = rest.substr(colon + 1);
  }
  if (parsed.host.empty()) return invalid("no host");
  if (port_text.empty()) return invalid("no port");
  unsigned port = 0;
  auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (error != std::errc() || end != port_text.data() + port_text.size() || port > 65535) {
    return invalid("the port is not a number from 0 to 65535");
  }
  parsed.port = static_cast<uint16_t>(port);
  return parsed;
}

}  // namespace bx
