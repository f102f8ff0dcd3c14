// The tcp:// connection handshake: before the first frame (frame.h), each new connection
// exchanges 40-byte handshake records, so that the accepting side can authenticate the peer
// (TransportOptions::auth_secret) and apply max_connections_per_peer before it creates a socket
// for it or calls on_accept.
//
// Record, little-endian:
//   offset  size  field
//   0       4     magic    0x48545842, the bytes "BXTH"
//   4       1     version  Hello: the newest version the sender speaks; others: the version
//                          the two sides agreed on (a Refuse: any)
//   5       1     type     1 Hello, 2 Proof, 3 Accept, 4 Refuse
//   6       2     arg      Hello: bit 0, the sender authenticates; bits 8-15 (version 2 on),
//                          the oldest version the sender speaks. Refuse: the reason
//                          (transport/auth.h). Otherwise 0
//   8       32    data     Hello: the sender's nonce (zero without auth); Proof, Accept: an
//                          HMAC-SHA256 proof (zero in an Accept without auth); Refuse: zero
//
// Flow without a secret:                     With a secret on both sides:
//   C -> A  Hello                              C -> A  Hello (auth, client nonce)
//   A -> C  Accept | Refuse                    A -> C  Hello (auth, server nonce) | Refuse
//                                              C -> A  Proof (client proof)
//                                              A -> C  Accept (server proof) | Refuse
// Proofs (transport/auth.h), with context kAuthContext and each Hello as its 40 bytes sent:
//   client proof = HMAC(secret, ctx || 'C' || client nonce || server nonce || client Hello)
//   server proof = HMAC(secret, ctx || 'A' || server nonce || client nonce || server Hello)
// The accepting side checks the per-address limit after authentication, before Accept. The
// connecting side's Connect returns only after Accept (and the server's proof) checked out; a
// Refuse becomes an error that says why. Frames follow the Accept directly.
//
// Versions 1 and 2 (kHandshakeVersions); 2 adds the oldest version to the Hello. The two sides
// use the highest version both speak. A version 1 acceptor closes the connection on a version 2
// Hello without answering (it checks the version byte first), so a connecting side whose Hello
// met silence connects again offering version 1 alone: a cluster can be upgraded one process at
// a time. A Hello whose versions do not meet ours is refused with Refusal::kVersion.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/wire_version.h"
#include "bx/status.h"
#include "transport/auth.h"

namespace bx::tcp {

inline constexpr size_t kHandshakeRecordBytes = 40;
inline constexpr uint32_t kHandshakeMagic = 0x48545842;  // "BXTH" read as a little-endian u32
inline constexpr VersionRange kHandshakeVersions{1, 2};
inline constexpr std::string_view kAuthContext = "bexpress tcp handshake v1";

using HandshakeRecord = std::array<uint8_t, kHandshakeRecordBytes>;

// Connecting side, on a connected socket (blocking or not): runs the whole handshake before
// `deadline`, offering `versions`. The version agreed once the peer accepted; otherwise why not
// (RefusedBy for a refusal, "peer failed authentication ..." when the accepting side's proof is
// wrong or missing). `*unanswered` says whether the peer closed before answering our Hello (a
// version 1 peer does so to a version 2 Hello).
Result<uint8_t> ConnectingHandshake(int fd, const std::string& secret, const std::string& peer,
                                    std::chrono::steady_clock::time_point deadline,
                                    VersionRange versions = kHandshakeVersions,
                                    bool* unanswered = nullptr);

// Accepting side, fed one record at a time by a non-blocking reader. Allocates nothing per peer
// beyond itself.
class AcceptingHandshake {
 public:
  enum class Outcome {
    kContinue,       // send `reply`, then feed the next record
    kAuthenticated,  // the peer may be accepted: check the limit, then send Accept()
    kRefused,        // send `reply` (a Refuse, possibly empty), then close; `why` says why
  };
  struct Step {
    Outcome outcome = Outcome::kContinue;
    std::string reply;  // bytes to send before going on
    Status why;
  };

  // `privileged_secret` (may be empty): a second secret a peer may prove instead; it is then
  // privileged(), and the server's own proof is made with the secret the peer proved.
  explicit AcceptingHandshake(std::string secret, std::string privileged_secret = {})
      : secret_(std::move(secret)), privileged_secret_(std::move(privileged_secret)) {}
  Step OnRecord(const HandshakeRecord& record);
  // The Accept record (carrying the server's proof when a secret is set).
  std::string Accept() const;
  static std::string Refuse(transport::auth::Refusal code, uint8_t version = 1);
  // After kAuthenticated: the peer proved the privileged secret.
  bool privileged() const { return privileged_; }
  // After the peer's Hello: the version agreed with it.
  uint8_t version() const { return version_; }

 private:
  const std::string secret_;
  const std::string privileged_secret_;
  bool privileged_ = false;
  uint8_t version_ = 0;
  int received_ = 0;
  transport::auth::Nonce client_nonce_{};
  transport::auth::Nonce server_nonce_{};
  HandshakeRecord client_hello_{};
  HandshakeRecord server_hello_{};
};

}  // namespace bx::tcp
