// The /metrics endpoint over a real TCP connection: a scrape while a counter moves sees it move;
// what is not a well-formed GET /metrics is answered or dropped without harm.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "bx/metrics.h"
#include "metrics/http_request.h"
#include "metrics/text_format.h"

namespace bx::metrics {
namespace {

constexpr auto kTimeout = std::chrono::seconds(5);

double ValueOf(const std::string& text, const std::string& name) {
  for (const ParsedSample& s : ParseText(text).samples)
    if (s.name == name) return s.value;
  return -1;
}

// Sends `request` raw and returns everything the server answers before it closes.
std::string RawExchange(uint16_t port, const std::string& request) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  if (!request.empty()) (void)!send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string answer;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) answer.append(buf, size_t(n));
  close(fd);
  return answer;
}

TEST(HttpServerTest, ScrapeSeesACounterMove) {
  Registry registry;
  Counter& messages = registry.GetCounter("bx_test_messages_total", "Messages moved.");
  HttpServerOptions options;  // port 0: the kernel picks
  auto server = StartHttpServer(options, registry);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string url = "http://127.0.0.1:" + std::to_string((*server)->port()) + "/metrics";

  std::atomic<bool> stop{false};
  std::thread transfer([&] {  // stands in for a transfer that counts as it goes
    while (!stop.load()) {
      messages.Increment();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  auto first = HttpGet(url, kTimeout);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  double before = ValueOf(*first, "bx_test_messages_total");
  EXPECT_GE(before, 0);
  double after = before;
  for (int i = 0; i < 100 && after <= before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    auto again = HttpGet(url, kTimeout);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    after = ValueOf(*again, "bx_test_messages_total");
  }
  stop = true;
  transfer.join();
  EXPECT_GT(after, before);
}

TEST(HttpServerTest, AnswersWithTheExpositionContentType) {
  Registry registry;
  auto server = StartHttpServer(HttpServerOptions{}, registry);
  ASSERT_TRUE(server.ok());
  std::string answer =
      RawExchange((*server)->port(), "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 200 OK\r\n")) << answer;
  EXPECT_NE(answer.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(answer.find("Connection: close"), std::string::npos);
}

TEST(HttpServerTest, RefusesWhatIsNotAGetOfMetrics) {
  Registry registry;
  auto server = StartHttpServer(HttpServerOptions{}, registry);
  ASSERT_TRUE(server.ok());
  uint16_t port = (*server)->port();
  EXPECT_TRUE(RawExchange(port, "GET /other HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
  EXPECT_TRUE(RawExchange(port, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
  EXPECT_TRUE(RawExchange(port, "garbage\r\n\r\n").starts_with("HTTP/1.1 400"));
  std::string huge = "GET /metrics HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n";
  EXPECT_TRUE(RawExchange(port, huge).starts_with("HTTP/1.1 431"));
  // And it still serves.
  EXPECT_TRUE(HttpGet("http://127.0.0.1:" + std::to_string(port) + "/metrics", kTimeout).ok());
}

TEST(HttpServerTest, ASilentClientIsDroppedAfterTheTimeout) {
  Registry registry;
  HttpServerOptions options;
  options.request_timeout_ms = 100;
  auto server = StartHttpServer(options, registry);
  ASSERT_TRUE(server.ok());
  uint16_t port = (*server)->port();
  std::thread silent([port] { EXPECT_EQ(RawExchange(port, ""), ""); });  // sends nothing
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(HttpGet("http://127.0.0.1:" + std::to_string(port) + "/metrics", kTimeout).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  silent.join();
}

TEST(HttpServerTest, BadAddressIsAnError) {
  HttpServerOptions options;
  options.address = "not-an-address";
  EXPECT_FALSE(StartHttpServer(options).ok());
}

TEST(HttpRequestTest, ParsesTheRequestLine) {
  auto r = ParseRequestHead("GET /metrics?name=x HTTP/1.1\r\nHost: h");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->method, "GET");
  EXPECT_EQ(r->path, "/metrics");
  EXPECT_FALSE(ParseRequestHead("GET metrics HTTP/1.1").ok());
  EXPECT_FALSE(ParseRequestHead("GET /metrics HTTP/2").ok());
  EXPECT_FALSE(ParseRequestHead("G(T /metrics HTTP/1.1").ok());
  EXPECT_FALSE(ParseRequestHead("").ok());
}

TEST(HttpClientTest, RejectsWhatItCannotFetch) {
  EXPECT_FALSE(HttpGet("https://example.com/", kTimeout).ok());
  EXPECT_FALSE(HttpGet("http://127.0.0.1:1/metrics", kTimeout).ok());  // nothing listens on 1
}

}  // namespace
}  // namespace bx::metrics
