// Authenticated peers and per-peer limits (TransportOptions::auth_secret,
// max_connections_per_peer), for every transport: the right secret connects, a wrong or missing
// one is refused on both sides before the accepting side allocates anything (no socket reaches
// on_accept; for rdma:// no engine, hence no QP, is created), and the N+1th connection from one
// address is refused. Also the proof itself: a replayed or reflected proof does not verify, and
// a peer is held to the receiver's max_message_bytes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bx/log.h"
#include "bx/transport.h"
#include "transport/auth.h"
#include "transport/rdma/bootstrap.h"
#include "transport/rdma/rdma_transport.h"
#include "transport/tcp/handshake.h"
#include "transport/tests/transports_under_test.h"

namespace bx::transport::testing {
namespace {

using namespace std::chrono_literals;

constexpr std::chrono::milliseconds kConnectTimeout{5000};

class AuthTest : public ::testing::TestWithParam<std::string> {
 protected:
  void TearDown() override {
    listener_.reset();
    clients_.clear();
    server_.reset();
  }

  std::unique_ptr<Transport> Make(const TransportOptions& options) {
    auto t = FindTransport(GetParam()).create(options);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }

  // A server transport with `options`, listening with an echo handler that counts on_accept.
  void StartServer(const TransportOptions& options) {
    server_ = Make(options);
    ASSERT_TRUE(server_);
    auto listener = server_->Listen(
        GetParam() + "://127.0.0.1:0", [this](const std::shared_ptr<Socket>& socket) {
          accepted_.fetch_add(1);
          waiter_.Notify([&] { sockets_.push_back(socket); });
          return SocketHandlers{[](Socket& s, Buffer message) { s.Send(std::move(message)); }, {}};
        });
    ASSERT_TRUE(listener.ok()) << listener.status().ToString();
    listener_ = std::move(listener).value();
  }

  // A new client transport (its own engines for rdma://) with `secret`, connecting once.
  Result<std::shared_ptr<Socket>> ConnectWith(const std::string& secret,
                                              const std::string& privileged_secret = {}) {
    TransportOptions options;
    options.auth_secret = secret;
    options.privileged_secret = privileged_secret;
    clients_.push_back(Make(options));
    if (!clients_.back()) return Internal("no client transport");
    return clients_.back()->Connect(listener_->url(), {}, kConnectTimeout);
  }

  static void ExpectEcho(Socket& socket, uint64_t seed) {
    socket.Send(PatternMessage(3000, seed));
    Result<Buffer> echoed = socket.Receive(5s);
    ASSERT_TRUE(echoed.ok()) << echoed.status().ToString();
    EXPECT_TRUE(HasPattern(*echoed, 3000, seed));
  }

  // The accepting side allocated nothing for a refused peer.
  void ExpectNothingAccepted() {
    std::this_thread::sleep_for(100ms);  // a wrongly accepted socket would have shown by now
    if (GetParam() == "rdma") {
      // The server counts the refusal on its own thread, possibly after the client has its
      // answer: wait for it before looking at what it allocated.
      auto refused = [&] {
        auto info = rdma::GetRdmaTransportInfo(*server_);
        return info.ok() && info->peers_refused >= 1;
      };
      const auto give_up = std::chrono::steady_clock::now() + 5s;
      while (!refused() && std::chrono::steady_clock::now() < give_up) {
        std::this_thread::sleep_for(5ms);
      }
    }
    EXPECT_EQ(accepted_.load(), 0);
    if (GetParam() == "rdma") {
      auto info = rdma::GetRdmaTransportInfo(*server_);
      ASSERT_TRUE(info.ok());
      EXPECT_TRUE(info->engines.empty());
      EXPECT_EQ(info->engines_created, 0u) << "a QP was created for a refused peer";
      EXPECT_GE(info->peers_refused, 1u);
    }
  }

  static void ExpectAuthFailure(const Result<std::shared_ptr<Socket>>& r) {
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("peer failed authentication"), std::string::npos)
        << r.status().ToString();
  }

  std::unique_ptr<Transport> server_;
  std::unique_ptr<Listener> listener_;
  std::vector<std::unique_ptr<Transport>> clients_;
  std::atomic<int> accepted_{0};
  Waiter waiter_;
  std::vector<std::shared_ptr<Socket>> sockets_;  // guarded by waiter_.mutex
};

TEST_P(AuthTest, RightSecretConnectsAndExchangesMessages) {
  TransportOptions options;
  options.auth_secret = "correct horse battery staple";
  StartServer(options);
  auto socket = ConnectWith(options.auth_secret);
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();
  ExpectEcho(**socket, 1);
  ExpectEcho(**socket, 2);
  EXPECT_EQ(accepted_.load(), 1);
  if (GetParam() == "rdma") {
    auto info = rdma::GetRdmaTransportInfo(*server_);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->engines.size(), 1u);
    EXPECT_EQ(info->peers_refused, 0u);
  }
}

TEST_P(AuthTest, WrongSecretIsRefusedBeforeAnythingIsAllocated) {
  TransportOptions options;
  options.auth_secret = "server secret";
  StartServer(options);
  auto refused = ConnectWith("not the server secret");
  ExpectAuthFailure(refused);
  EXPECT_NE(refused.status().message().find("refused by"), std::string::npos)
      << refused.status().ToString();
  ExpectNothingAccepted();
  // The listener keeps serving peers that know the secret.
  auto socket = ConnectWith(options.auth_secret);
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();
  ExpectEcho(**socket, 3);
}

// The library says what it refused through the program's log sink (bx/log.h), never on stderr
// by itself.
TEST_P(AuthTest, ARefusalIsLoggedThroughTheSinkNotOnStderr) {
  Waiter logged;
  std::vector<std::string> lines;  // guarded by logged.mutex
  SetLogSink(
      [&](LogLevel, std::string_view line) { logged.Notify([&] { lines.emplace_back(line); }); });
  ::testing::internal::CaptureStderr();
  TransportOptions options;
  options.auth_secret = "server secret";
  StartServer(options);
  ExpectAuthFailure(ConnectWith("not the server secret"));
  const bool seen = logged.WaitFor([&] {
    for (const std::string& line : lines)
      if (line.find("refused") != std::string::npos) return true;
    return false;
  });
  const std::string err = ::testing::internal::GetCapturedStderr();
  SetLogSink(nullptr);
  EXPECT_TRUE(seen) << "the refusal never reached the sink";
  EXPECT_EQ(err.find("refused"), std::string::npos) << err;
}

TEST_P(AuthTest, PeerWithoutSecretIsRefusedByServerWithOne) {
  TransportOptions options;
  options.auth_secret = "server secret";
  StartServer(options);
  auto refused = ConnectWith("");
  ExpectAuthFailure(refused);
  ExpectNothingAccepted();
}

TEST_P(AuthTest, PeerWithSecretIsRefusedByServerWithout) {
  StartServer(TransportOptions{});
  auto refused = ConnectWith("client secret");
  ExpectAuthFailure(refused);
  ExpectNothingAccepted();
  auto socket = ConnectWith("");  // no secret on either side: as before
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();
  ExpectEcho(**socket, 4);
}

// A second secret marks the peers that prove it (the parameter server's replicas): their accepted
// sockets say so, the others' do not, and a wrong second secret is refused like a wrong first.
TEST_P(AuthTest, APeerProvingThePrivilegedSecretIsMarkedPrivileged) {
  TransportOptions options;
  options.auth_secret = "cluster secret";
  options.privileged_secret = "replica secret";
  StartServer(options);
  auto accepted_socket = [&](size_t index) {
    EXPECT_TRUE(waiter_.WaitFor([&] { return sockets_.size() > index; }));
    std::lock_guard lock(waiter_.mutex);
    return sockets_.size() > index ? sockets_[index] : nullptr;
  };
  auto ordinary = ConnectWith(options.auth_secret);
  ASSERT_TRUE(ordinary.ok()) << ordinary.status().ToString();
  ExpectEcho(**ordinary, 5);
  auto first = accepted_socket(0);
  ASSERT_TRUE(first);
  EXPECT_FALSE(first->privileged_peer());

  auto privileged = ConnectWith(options.auth_secret, options.privileged_secret);
  ASSERT_TRUE(privileged.ok()) << privileged.status().ToString();
  ExpectEcho(**privileged, 6);
  auto second = accepted_socket(1);
  ASSERT_TRUE(second);
  EXPECT_TRUE(second->privileged_peer());
  EXPECT_FALSE((*privileged)->privileged_peer()) << "a connecting side's socket is never marked";

  ExpectAuthFailure(ConnectWith(options.auth_secret, "not the replica secret"));
  EXPECT_EQ(accepted_.load(), 2);
}

TEST(AuthSecretsTest, APrivilegedSecretNeedsADifferentAuthSecret) {
  TransportOptions options;
  options.privileged_secret = "replica secret";
  EXPECT_EQ(CreateTransport("tcp", options).status().code(), StatusCode::kInvalidArgument);
  options.auth_secret = options.privileged_secret;
  EXPECT_EQ(CreateTransport("tcp", options).status().code(), StatusCode::kInvalidArgument);
  options.auth_secret = "cluster secret";
  EXPECT_TRUE(auth::CheckSecrets(options).ok());
}

TEST_P(AuthTest, PerPeerLimitRefusesTheConnectionAboveIt) {
  constexpr int kLimit = 2;
  TransportOptions options;
  options.auth_secret = "s";
  options.max_connections_per_peer = kLimit;
  StartServer(options);
  std::vector<std::shared_ptr<Socket>> open;
  for (int i = 0; i < kLimit; ++i) {
    auto socket = ConnectWith("s");  // a transport each: for rdma:// an engine each
    ASSERT_TRUE(socket.ok()) << i << ": " << socket.status().ToString();
    open.push_back(*socket);
  }
  if (GetParam() == "rdma") {
    auto info = rdma::GetRdmaTransportInfo(*server_);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->engines_created, uint64_t(kLimit));
  }
  auto refused = ConnectWith("s");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("too many connections"), std::string::npos)
      << refused.status().ToString();
  EXPECT_EQ(accepted_.load(), kLimit);
  if (GetParam() == "rdma") {
    auto info = rdma::GetRdmaTransportInfo(*server_);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->engines_created, uint64_t(kLimit)) << "no QP for the refused connection";
  }
  // The open ones keep working; ending one frees its slot.
  ExpectEcho(*open[0], 5);
  open[1]->Close();
  open.pop_back();
  clients_[1].reset();  // rdma://: the client's engine closes with its last socket anyway
  Result<std::shared_ptr<Socket>> again = InvalidArgument("not tried");
  for (int attempt = 0; attempt < 500 && !again.ok(); ++attempt) {
    std::this_thread::sleep_for(20ms);  // the server notices the close on its I/O thread
    again = ConnectWith("s");
    if (!again.ok()) clients_.pop_back();  // a refused attempt's transport (for rdma://, threads)
  }
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ExpectEcho(**again, 6);
}

// The receiver's max_message_bytes holds against a peer whose own limit is larger: the message
// never reaches the receiver's handler. rdma:// refuses at the sender (the limit came in the
// receiver's Hello); tcp:// at the receiver, which ends the connection on the frame header.
TEST_P(AuthTest, ReceiverMessageLimitHoldsAgainstThePeer) {
  TransportOptions options;
  options.max_message_bytes = 4096;
  StartServer(options);
  auto socket = ConnectWith("");
  ASSERT_TRUE(socket.ok()) << socket.status().ToString();
  // Shared with the callback: the I/O thread may still be leaving Notify when WaitFor returns.
  auto waiter = std::make_shared<Waiter>();
  bool done = false;
  Status sent;
  (*socket)->Send(PatternMessage(8192, 7), [&, waiter](const Status& s) {
    waiter->Notify([&] {
      done = true;
      sent = s;
    });
  });
  ASSERT_TRUE(waiter->WaitFor([&] { return done; }));
  Result<Buffer> echoed = (*socket)->Receive(2s);
  EXPECT_FALSE(echoed.ok()) << "a message above the receiver's limit came back";
  if (GetParam() == "rdma") {
    EXPECT_FALSE(sent.ok());
    EXPECT_NE(sent.message().find("limit"), std::string::npos) << sent.ToString();
  } else {
    EXPECT_FALSE((*socket)->status().ok()) << "the receiver ends the connection";
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, AuthTest, ::testing::ValuesIn(SchemesUnderTest()),
                         [](const auto& info) { return info.param; });

// The proof: bound to role, both nonces and the hello; compared in constant time.
TEST(AuthProofTest, ReplayedOrReflectedProofsDoNotVerify) {
  using auth::Role;
  auto a = auth::NewNonce();
  auto b = auth::NewNonce();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  const uint8_t hello[] = {1, 2, 3, 4};
  auth::Proof client = auth::ComputeProof("k", "ctx", Role::kConnecting, *a, *b, hello);
  EXPECT_TRUE(auth::VerifyProof("k", "ctx", Role::kConnecting, *a, *b, hello, client));
  EXPECT_FALSE(auth::VerifyProof("other", "ctx", Role::kConnecting, *a, *b, hello, client));
  // Reflection: the same proof offered for the other role, or with the nonces swapped.
  EXPECT_FALSE(auth::VerifyProof("k", "ctx", Role::kAccepting, *a, *b, hello, client));
  EXPECT_FALSE(auth::VerifyProof("k", "ctx", Role::kConnecting, *b, *a, hello, client));
  // Replay: a fresh verifier nonce.
  auto c = auth::NewNonce();
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(auth::VerifyProof("k", "ctx", Role::kConnecting, *a, *c, hello, client));
  // The hello and the protocol context are covered.
  const uint8_t other_hello[] = {1, 2, 3, 5};
  EXPECT_FALSE(auth::VerifyProof("k", "ctx", Role::kConnecting, *a, *b, other_hello, client));
  EXPECT_FALSE(auth::VerifyProof("k", "ctx2", Role::kConnecting, *a, *b, hello, client));
}

// Drives the tcp:// accepting side record by record: a proof recorded from one session is
// refused in the next, and a client that reflects the server's own Hello is refused.
TEST(AuthProofTest, TcpAcceptingSideRefusesReplayAndReflection) {
  using tcp::AcceptingHandshake;
  using tcp::HandshakeRecord;
  auto record = [](const std::string& bytes) {
    HandshakeRecord r{};
    EXPECT_EQ(bytes.size(), r.size());
    std::memcpy(r.data(), bytes.data(), r.size());
    return r;
  };
  // A client Hello with auth and a nonce, built as the wire format says.
  auto nonce = auth::NewNonce();
  ASSERT_TRUE(nonce.ok());
  HandshakeRecord hello{};
  const uint8_t head[] = {0x42, 0x58, 0x54, 0x48, 1, 1, 1, 0};
  std::memcpy(hello.data(), head, 8);
  std::memcpy(hello.data() + 8, nonce->data(), 32);

  AcceptingHandshake first("k");
  auto step = first.OnRecord(hello);
  ASSERT_EQ(step.outcome, AcceptingHandshake::Outcome::kContinue) << step.why.ToString();
  HandshakeRecord server_hello = record(step.reply);
  auth::Nonce server_nonce;
  std::memcpy(server_nonce.data(), server_hello.data() + 8, 32);
  auth::Proof proof = auth::ComputeProof("k", tcp::kAuthContext, auth::Role::kConnecting, *nonce,
                                         server_nonce, hello);
  HandshakeRecord proof_record{};
  const uint8_t proof_head[] = {0x42, 0x58, 0x54, 0x48, 1, 2, 0, 0};
  std::memcpy(proof_record.data(), proof_head, 8);
  std::memcpy(proof_record.data() + 8, proof.data(), 32);
  EXPECT_EQ(first.OnRecord(proof_record).outcome, AcceptingHandshake::Outcome::kAuthenticated);

  // Replay of the recorded Hello and proof against a new session.
  AcceptingHandshake second("k");
  ASSERT_EQ(second.OnRecord(hello).outcome, AcceptingHandshake::Outcome::kContinue);
  auto replayed = second.OnRecord(proof_record);
  EXPECT_EQ(replayed.outcome, AcceptingHandshake::Outcome::kRefused);
  EXPECT_NE(replayed.why.message().find("peer failed authentication"), std::string::npos);
  EXPECT_EQ(replayed.reply, AcceptingHandshake::Refuse(auth::Refusal::kAuthFailed));

  // Reflection: the server's own Hello sent back as the client's, then its own Accept proof.
  AcceptingHandshake third("k");
  auto challenge = third.OnRecord(hello);
  ASSERT_EQ(challenge.outcome, AcceptingHandshake::Outcome::kContinue);
  AcceptingHandshake fourth("k");
  auto reflected = fourth.OnRecord(record(challenge.reply));  // the server's Hello as a client's
  ASSERT_EQ(reflected.outcome, AcceptingHandshake::Outcome::kContinue);
  std::string accept_of_third = third.Accept();  // a server proof, offered as a client proof
  HandshakeRecord as_proof = record(accept_of_third);
  as_proof[5] = 2;
  EXPECT_EQ(fourth.OnRecord(as_proof).outcome, AcceptingHandshake::Outcome::kRefused);
}

// rdma:// bootstrap records: Challenge and Refusal round-trip, malformed ones are refused, and
// the Hello's auth flag is carried (unknown flags refused).
TEST(AuthProofTest, RdmaBootstrapRecords) {
  uint8_t nonce[rdma::kNonceBytes];
  for (size_t i = 0; i < sizeof(nonce); ++i) nonce[i] = uint8_t(i + 1);
  uint8_t record[64];
  rdma::EncodeChallenge(nonce, record);
  auto reply = rdma::DecodeReply(record);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->kind, rdma::Reply::Kind::kChallenge);
  EXPECT_EQ(std::memcmp(reply->nonce, nonce, sizeof(nonce)), 0);
  record[50] = 1;
  EXPECT_FALSE(rdma::DecodeReply(record).ok());

  rdma::EncodeRefusal(uint16_t(auth::Refusal::kAuthFailed), record);
  reply = rdma::DecodeReply(record);
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->kind, rdma::Reply::Kind::kRefusal);
  EXPECT_EQ(reply->refusal, uint16_t(auth::Refusal::kAuthFailed));
  rdma::EncodeRefusal(0, record);
  EXPECT_FALSE(rdma::DecodeReply(record).ok());

  rdma::Hello h;
  h.qp_num = 7;
  h.recv_queue_depth = 64;
  h.eager_limit = 4096;
  h.max_message_bytes = 1 << 20;
  h.auth = true;
  rdma::EncodeHello(h, record);
  auto decoded = rdma::DecodeHello(record);
  ASSERT_TRUE(decoded.ok());
  EXPECT_TRUE(decoded->auth);
  record[6] = 0x02;  // an unknown flag
  EXPECT_FALSE(rdma::DecodeHello(record).ok());
}

}  // namespace
}  // namespace bx::transport::testing
