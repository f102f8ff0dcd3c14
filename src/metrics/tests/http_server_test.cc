// The /metrics endpoint over a real TCP connection: a scrape while a counter moves sees it move;
// what is not a well-formed GET /metrics is answered or dropped without harm.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

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

// Opens a connection to the endpoint that sends `bytes` and then nothing. The connect waits
// at most 2 s: a server that does not accept leaves it pending (its backlog full), which does
// not hang the test.
int Lurker(uint16_t port, const std::string& bytes = "") {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, 2000) != 1) return fd;
  }
  if (!bytes.empty()) (void)!send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  return fd;
}

// Sends `request` raw and returns everything the server answers before it closes.
std::string RawExchange(uint16_t port, const std::string& request) {
  int fd = Lurker(port, request);
  fcntl(fd, F_SETFL, 0);  // blocking: read to the end
  std::string answer;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) answer.append(buf, size_t(n));
  close(fd);
  return answer;
}

// An endpoint on a registry of its own, at any free port.
class Endpoint {
 public:
  explicit Endpoint(const HttpServerOptions& options) {
    auto started = StartHttpServer(options, registry_);
    EXPECT_TRUE(started.ok()) << started.status().ToString();
    if (started.ok()) server_ = std::move(started).value();
  }
  uint16_t port() const { return server_ ? server_->port() : 0; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()) + "/metrics"; }

 private:
  Registry registry_;
  std::unique_ptr<MetricsServer> server_;
};

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
  Endpoint endpoint(HttpServerOptions{.request_timeout_ms = 100});
  const uint16_t port = endpoint.port();
  std::thread silent([port] { EXPECT_EQ(RawExchange(port, ""), ""); });  // sends nothing
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(HttpGet(endpoint.url(), kTimeout).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  silent.join();
}

// Slow scrapers hold descriptors, not the endpoint: with 30 silent connections and 10 that sent
// half a request, all within their (long) deadline, a scrape is answered at once. One connection
// at a time, the first silent one held the endpoint for its whole 30 s deadline.
TEST(HttpServerTest, SlowScrapersDoNotStallOthers) {
  Endpoint endpoint(HttpServerOptions{.request_timeout_ms = 30000});
  const uint16_t port = endpoint.port();
  std::vector<int> lurkers;
  for (int i = 0; i < 30; ++i) lurkers.push_back(Lurker(port));
  for (int i = 0; i < 10; ++i) lurkers.push_back(Lurker(port, "GET /metrics HTTP/1.1\r\nHo"));
  for (int i = 0; i < 3; ++i) {
    auto start = std::chrono::steady_clock::now();
    auto answer = HttpGet(endpoint.url(), kTimeout);
    ASSERT_TRUE(answer.ok()) << answer.status().ToString();
    // Far below the lurkers' 30 s deadline, with room for a loaded machine.
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  }
  for (int fd : lurkers) close(fd);
}

// Past max_connections the oldest connection is closed for the newest, which is served.
TEST(HttpServerTest, BeyondTheBoundTheOldestConnectionIsDropped) {
  Endpoint endpoint(HttpServerOptions{.request_timeout_ms = 30000, .max_connections = 4});
  std::vector<int> lurkers;
  for (int i = 0; i < 4; ++i) lurkers.push_back(Lurker(endpoint.port()));
  auto answer = HttpGet(endpoint.url(), kTimeout);
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  // The oldest lurker was closed by the server: its next read sees the end, not a timeout.
  timeval tv{5, 0};
  setsockopt(lurkers[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  fcntl(lurkers[0], F_SETFL, 0);  // blocking, for the timed read
  char byte;
  EXPECT_EQ(recv(lurkers[0], &byte, 1, 0), 0);
  for (int fd : lurkers) close(fd);
  Registry registry;
  EXPECT_FALSE(StartHttpServer(HttpServerOptions{.max_connections = 0}, registry).ok());
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
