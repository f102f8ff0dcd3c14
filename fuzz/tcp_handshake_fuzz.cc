// Fuzzes the accepting side of the tcp:// handshake (AcceptingHandshake::OnRecord,
// src/transport/tcp/handshake.cc): the records a peer sends before it has a socket, with the
// cluster secret and the replica role's privileged secret behind them.
//
// Input: byte 0 picks the server's secrets (0: none, 1: the cluster secret, 2: both); byte 1 how
// the harness treats the second record's 32 data bytes, since a fuzzer cannot forge an HMAC:
// 0 as given, 1 a valid proof of the cluster secret, 2 of the privileged secret, 3 of a secret
// the server does not hold. Then records of 40 bytes, fed in order until an outcome is final.
// Properties checked beyond "no crash, leak or sanitizer report":
//   - a server without a secret accepts exactly a first Hello without the auth flag;
//   - with a secret, only a valid proof authenticates, and the peer is privileged exactly when
//     it proved the privileged secret (which the server holds);
//   - the server's Accept carries a proof the client verifies with the secret it proved;
//   - a refusal says why; nothing follows a final outcome.
#include <cstdlib>
#include <cstring>
#include <string>

#include "transport/auth.h"
#include "transport/tcp/handshake.h"

namespace {

using bx::tcp::AcceptingHandshake;
using bx::tcp::HandshakeRecord;
using bx::tcp::kHandshakeRecordBytes;
namespace auth = bx::transport::auth;

void Check(bool condition) {
  if (!condition) std::abort();
}

constexpr char kClusterSecret[] = "cluster secret";
constexpr char kPrivilegedSecret[] = "replica secret";
constexpr char kStrangerSecret[] = "a secret nobody holds";

auth::Nonce NonceAt(const uint8_t* record) {
  auth::Nonce nonce;
  std::memcpy(nonce.data(), record + 8, nonce.size());
  return nonce;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 + kHandshakeRecordBytes) return 0;
  const int secrets = data[0] % 3;
  const int proof_mode = data[1] % 4;
  AcceptingHandshake server(secrets >= 1 ? kClusterSecret : "",
                            secrets == 2 ? kPrivilegedSecret : "");
  HandshakeRecord client_hello{}, server_hello{};
  bool answered = false;  // the server has sent its Hello
  const uint8_t* records = data + 2;
  const size_t count = (size - 2) / kHandshakeRecordBytes;
  for (size_t i = 0; i < count; ++i) {
    HandshakeRecord record;
    std::memcpy(record.data(), records + i * kHandshakeRecordBytes, record.size());
    const char* proved = nullptr;
    if (i == 1 && proof_mode != 0 && answered) {
      proved = proof_mode == 1   ? kClusterSecret
               : proof_mode == 2 ? kPrivilegedSecret
                                 : kStrangerSecret;
      const auth::Proof proof = auth::ComputeProof(
          proved, bx::tcp::kAuthContext, auth::Role::kConnecting, NonceAt(client_hello.data()),
          NonceAt(server_hello.data()), client_hello);
      std::memcpy(record.data() + 8, proof.data(), proof.size());
    }
    if (i == 0) client_hello = record;
    const AcceptingHandshake::Step step = server.OnRecord(record);
    switch (step.outcome) {
      case AcceptingHandshake::Outcome::kContinue:
        // Only a server with a secret answers a first Hello with its own, and goes on.
        Check(i == 0 && secrets >= 1 && step.reply.size() == kHandshakeRecordBytes);
        std::memcpy(server_hello.data(), step.reply.data(), server_hello.size());
        answered = true;
        continue;
      case AcceptingHandshake::Outcome::kRefused:
        Check(!step.why.ok() && !step.why.message().empty());
        return 0;
      case AcceptingHandshake::Outcome::kAuthenticated: {
        if (secrets == 0) {
          Check(i == 0 && !server.privileged());
          return 0;
        }
        // A fuzzer cannot produce an HMAC: only the proofs the harness made get here.
        Check(i == 1 && (proof_mode == 1 || (proof_mode == 2 && secrets == 2)));
        Check(server.privileged() == (proof_mode == 2));
        const std::string accept = server.Accept();
        Check(accept.size() == kHandshakeRecordBytes);
        auth::Proof accept_proof;
        std::memcpy(accept_proof.data(), accept.data() + 8, accept_proof.size());
        Check(auth::VerifyProof(proved, bx::tcp::kAuthContext, auth::Role::kAccepting,
                                NonceAt(server_hello.data()), NonceAt(client_hello.data()),
                                server_hello, accept_proof));
        return 0;
      }
    }
  }
  return 0;
}
