// PendingHellos on its own, with socketpairs standing in for accepted connections: partial
// Hellos accumulate, a whole one moves on, and the bounds evict the oldest in the way.
#include "transport/rdma/pending_hellos.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <vector>

namespace bx::rdma {
namespace {

using namespace std::chrono_literals;

// The server end of a connection (non-blocking, as the acceptor takes it) and the client end.
struct Pair {
  int server = -1, client = -1;
  Pair() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
    server = fds[0];
    client = fds[1];
  }
};

// One poll-and-service round, as the accept loop runs it.
void Round(PendingHellos& hellos, std::vector<PendingHellos::Arrived>& arrived,
           std::vector<PendingHellos::Dropped>& dropped, int timeout_ms = 100) {
  std::vector<pollfd> fds;
  hellos.AppendPollFds(fds);
  ASSERT_GE(poll(fds.data(), fds.size(), timeout_ms), 0);
  hellos.Service(fds, 0, arrived, dropped);
}

bool PeerClosed(int client) {
  char c;
  return recv(client, &c, 1, MSG_DONTWAIT) == 0;
}

TEST(PendingHellosTest, AHelloInPiecesMovesOnWhole) {
  PendingHellos hellos({});
  std::vector<PendingHellos::Arrived> arrived;
  std::vector<PendingHellos::Dropped> dropped;
  Pair p;
  hellos.Add(p.server, "rdma://a:1", "a", dropped);
  uint8_t record[kRecordBytes];
  for (size_t i = 0; i < kRecordBytes; ++i) record[i] = uint8_t(i);
  ASSERT_EQ(send(p.client, record, 10, 0), 10);
  Round(hellos, arrived, dropped);
  EXPECT_TRUE(arrived.empty());
  EXPECT_EQ(hellos.size(), 1u);
  ASSERT_EQ(send(p.client, record + 10, kRecordBytes - 10, 0), ssize_t(kRecordBytes - 10));
  Round(hellos, arrived, dropped);
  ASSERT_EQ(arrived.size(), 1u);
  EXPECT_EQ(arrived[0].fd, p.server);
  EXPECT_EQ(arrived[0].host, "a");
  EXPECT_EQ(std::vector<uint8_t>(arrived[0].raw.begin(), arrived[0].raw.end()),
            std::vector<uint8_t>(record, record + kRecordBytes));
  EXPECT_TRUE(dropped.empty());
  EXPECT_EQ(hellos.size(), 0u);
  close(p.server);
  close(p.client);
}

TEST(PendingHellosTest, BoundsEvictTheOldestInTheWay) {
  PendingHellos hellos({/*per_host=*/2, /*total=*/3, 10s});
  std::vector<PendingHellos::Dropped> dropped;
  Pair a1, a2, b1, a3, c1;
  hellos.Add(a1.server, "a1", "a", dropped);
  hellos.Add(a2.server, "a2", "a", dropped);
  hellos.Add(b1.server, "b1", "b", dropped);
  EXPECT_TRUE(dropped.empty());
  hellos.Add(a3.server, "a3", "a", dropped);  // a's bound: a1 goes
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0].peer, "a1");
  EXPECT_EQ(dropped[0].why.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(PeerClosed(a1.client));
  hellos.Add(c1.server, "c1", "c", dropped);  // the total: the oldest of all (a2) goes
  ASSERT_EQ(dropped.size(), 2u);
  EXPECT_EQ(dropped[1].peer, "a2");
  EXPECT_EQ(hellos.size(), 3u);
  hellos.CloseAll();
  for (Pair* p : {&a1, &a2, &b1, &a3, &c1}) {
    EXPECT_TRUE(PeerClosed(p->client));
    close(p->client);
  }
}

TEST(PendingHellosTest, SilenceRunsOutItsTimeAndAHangUpIsDropped) {
  PendingHellos hellos({64, 4096, 50ms});
  std::vector<PendingHellos::Arrived> arrived;
  std::vector<PendingHellos::Dropped> dropped;
  Pair silent, gone;
  hellos.Add(silent.server, "silent", "a", dropped);
  hellos.Add(gone.server, "gone", "b", dropped);
  ASSERT_EQ(send(gone.client, "xy", 2, 0), 2);
  close(gone.client);
  // Rounds as the accept loop runs them, each waiting at most until the next deadline.
  for (int i = 0; i < 100 && dropped.size() < 2; ++i) {
    int wait = hellos.MillisecondsToNextDeadline();
    ASSERT_GE(wait, 0);
    Round(hellos, arrived, dropped, wait);
  }
  ASSERT_EQ(dropped.size(), 2u);
  EXPECT_TRUE(arrived.empty());
  for (const auto& d : dropped) {
    EXPECT_EQ(d.why.code(),
              d.peer == "silent" ? StatusCode::kDeadlineExceeded : StatusCode::kAborted)
        << d.peer << ": " << d.why.ToString();
  }
  EXPECT_TRUE(PeerClosed(silent.client));
  EXPECT_EQ(hellos.MillisecondsToNextDeadline(), -1);
  close(silent.client);
}

}  // namespace
}  // namespace bx::rdma
