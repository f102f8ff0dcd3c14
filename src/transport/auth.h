// Shared-secret peer authentication for both transports (TransportOptions::auth_secret).
//
// Each side of a new connection sends a fresh 32-byte nonce (getrandom) and proves it knows the
// secret with
//
//   proof = HMAC-SHA256(secret, context || role || own nonce || peer nonce || own hello bytes)
//
// `context` names the protocol and its version (one per transport), `role` is the prover's side
// ('C' connecting, 'A' accepting). The verifier recomputes the proof it expects for the peer's
// role and compares in constant time (CRYPTO_memcmp). Why a recorded or reflected proof fails:
//   - replay: every proof covers the verifier's own nonce, fresh for this connection;
//   - reflection: a proof made by one side carries that side's role byte and its nonces in
//     "own, peer" order, so it never equals the proof the other side is asked for, even when an
//     attacker relays it between two connections or echoes the other side's nonce (which is
//     refused outright anyway).
// Each proof also covers its sender's hello, so the parameters in it cannot be altered in flight.
// This authenticates the connection set-up only; the data that follows is neither encrypted nor
// MACed.
//
// Also here: the reasons a connection is refused before anything is allocated for it, which both
// wire formats carry as a 16-bit code, so that the refused side reports the same clear error.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "bx/status.h"
#include "bx/transport.h"

namespace bx::transport::auth {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kProofBytes = 32;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Proof = std::array<uint8_t, kProofBytes>;

enum class Role : uint8_t { kConnecting = 'C', kAccepting = 'A' };

// 32 bytes from getrandom(2); an error only if the kernel cannot supply them.
Result<Nonce> NewNonce();

// HMAC-SHA256(secret, context || role || own || peer || hello), with OpenSSL's libcrypto.
Proof ComputeProof(std::string_view secret, std::string_view context, Role role, const Nonce& own,
                   const Nonce& peer, std::span<const uint8_t> hello);

// Whether `received` is the proof a `role` peer knowing `secret` makes; constant time in the
// proof bytes. `prover_nonce`/`verifier_nonce` are the prover's own and its peer's nonces.
bool VerifyProof(std::string_view secret, std::string_view context, Role role,
                 const Nonce& prover_nonce, const Nonce& verifier_nonce,
                 std::span<const uint8_t> prover_hello, const Proof& received);

// Which secret a connecting peer's proof shows it knows, on a side that admits two: `secret`,
// else `privileged_secret` (when not empty; TransportOptions::privileged_secret), else neither.
enum class Proven { kNeither, kSecret, kPrivilegedSecret };
Proven VerifyProofOfEither(std::string_view secret, std::string_view privileged_secret,
                           std::string_view context, const Nonce& prover_nonce,
                           const Nonce& verifier_nonce, std::span<const uint8_t> prover_hello,
                           const Proof& received);

// Why an accepting side refuses a connection; on the wire as a little-endian u16.
enum class Refusal : uint16_t {
  kAuthFailed = 1,          // the proof does not match the accepting side's secret
  kAuthMissing = 2,         // the accepting side requires a secret; the peer sent no proof
  kAuthUnexpected = 3,      // the peer offers a secret; the accepting side has none configured
  kTooManyConnections = 4,  // max_connections_per_peer reached for the peer's address
  kVersion = 5,             // the two sides speak no wire version in common
};

// The secret a connecting side proves: privileged_secret when set, else auth_secret.
inline const std::string& ProvenSecret(const TransportOptions& options) {
  return options.privileged_secret.empty() ? options.auth_secret : options.privileged_secret;
}
// InvalidArgument when privileged_secret is set without auth_secret, or equal to it.
Status CheckSecrets(const TransportOptions& options);

// The text both sides use for `code`; every authentication reason starts with
// "peer failed authentication".
std::string RefusalText(uint16_t code);
// The status the refused (connecting) side returns: "refused by <peer>: <text>".
Status RefusedBy(const std::string& peer, uint16_t code);

}  // namespace bx::transport::auth
