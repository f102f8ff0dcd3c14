// The authenticated steps of the RDMA bootstrap handshake (bootstrap.h has the message flow and
// layouts; transport/auth.h how proofs are made and why a replayed or reflected one fails).
//
// Proofs, with context kAuthContext:
//   client proof = HMAC(secret, kAuthContext || 'C' || client nonce || server nonce || client
//   Hello) server proof = HMAC(secret, kAuthContext || 'A' || server nonce || client nonce ||
//   server Hello)
// where a Hello is its 64 bytes as sent. The server verifies the client's proof before it
// creates anything for the client; the client verifies the server's before it uses its Hello.
//
// Kept apart from bootstrap.cc so that the fuzzed codec needs no libcrypto.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "bx/status.h"
#include "transport/auth.h"
#include "transport/rdma/bootstrap.h"

namespace bx::rdma {

inline constexpr std::string_view kAuthContext = "bexpress rdma bootstrap v3";

using Deadline = std::chrono::steady_clock::time_point;

// The accepting side's nonces after the client proved itself, for the server's own proof.
struct AcceptedAuth {
  transport::auth::Nonce mine;
  transport::auth::Nonce theirs;
  bool privileged = false;  // the client proved the privileged secret, not the ordinary one
};

// Accepting side, after ReceiveHello gave `hello` (`hello_raw` as received): reads the nonce an
// authenticating Hello carries, and with `secret` set, challenges the client and verifies its
// proof, which may also be one of `privileged_secret` (when not empty). On any mismatch sends a
// Refusal and returns the reason ("peer failed authentication ..."); the caller closes fd.
// Allocates nothing for the peer. Returns the nonces when a secret is set, nothing when it is
// not.
Result<std::optional<AcceptedAuth>> AuthenticateConnectingPeer(int fd, const Hello& hello,
                                                               const uint8_t hello_raw[64],
                                                               const std::string& secret,
                                                               const std::string& privileged_secret,
                                                               Deadline deadline);

// Tells the client why it is refused (best effort: the caller closes fd next).
void SendRefusal(int fd, transport::auth::Refusal code, Deadline deadline);
// Refuses a Hello whose versions do not meet ours (Refusal::kVersion), reading its nonce first.
void SendVersionRefusal(int fd, const uint8_t hello_raw[64], Deadline deadline);

// Accepting side: its Hello, flagged and followed by its proof when `auth` is set, made with
// `secret`: the one the client proved.
Status SendAcceptingHello(int fd, Hello mine, const std::string& secret, const AcceptedAuth* auth,
                          Deadline deadline);

// Connecting side: sends `mine` (flagged, with a nonce, when `secret` is set), answers the
// challenge, and returns the server's Hello once its proof checks out. A Refusal becomes
// RefusedBy(peer, reason).
Result<Hello> ConnectingHandshake(int fd, Hello mine, const std::string& secret,
                                  const std::string& peer, Deadline deadline);

}  // namespace bx::rdma
