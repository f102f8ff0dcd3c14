#include "transport/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <vector>

namespace bx::transport::auth {

Result<Nonce> NewNonce() {
  Nonce nonce{};
  size_t got = 0;
  while (got < nonce.size()) {
    ssize_t n = getrandom(nonce.data() + got, nonce.size() - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "getrandom");
    }
    got += size_t(n);
  }
  return nonce;
}

Proof ComputeProof(std::string_view secret, std::string_view context, Role role, const Nonce& own,
                   const Nonce& peer, std::span<const uint8_t> hello) {
  std::vector<uint8_t> message;
  message.reserve(context.size() + 1 + own.size() + peer.size() + hello.size());
  message.insert(message.end(), context.begin(), context.end());
  message.push_back(static_cast<uint8_t>(role));
  message.insert(message.end(), own.begin(), own.end());
  message.insert(message.end(), peer.begin(), peer.end());
  message.insert(message.end(), hello.begin(), hello.end());
  Proof proof{};
  unsigned int length = 0;
  // HMAC() cannot fail for SHA-256 with these arguments; a null result would leave the proof all
  // zeros, which no honest peer's proof equals.
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), message.data(), message.size(),
       proof.data(), &length);
  return proof;
}

bool VerifyProof(std::string_view secret, std::string_view context, Role role,
                 const Nonce& prover_nonce, const Nonce& verifier_nonce,
                 std::span<const uint8_t> prover_hello, const Proof& received) {
  Proof expected = ComputeProof(secret, context, role, prover_nonce, verifier_nonce, prover_hello);
  return CRYPTO_memcmp(expected.data(), received.data(), expected.size()) == 0;
}

Proven VerifyProofOfEither(std::string_view secret, std::string_view privileged_secret,
                           std::string_view context, const Nonce& prover_nonce,
                           const Nonce& verifier_nonce, std::span<const uint8_t> prover_hello,
                           const Proof& received) {
  if (VerifyProof(secret, context, Role::kConnecting, prover_nonce, verifier_nonce, prover_hello,
                  received)) {
    return Proven::kSecret;
  }
  if (!privileged_secret.empty() &&
      VerifyProof(privileged_secret, context, Role::kConnecting, prover_nonce, verifier_nonce,
                  prover_hello, received)) {
    return Proven::kPrivilegedSecret;
  }
  return Proven::kNeither;
}

std::string RefusalText(uint16_t code) {
  switch (static_cast<Refusal>(code)) {
    case Refusal::kAuthFailed:
      return "peer failed authentication (its proof does not match the accepting side's "
             "auth_secret)";
    case Refusal::kAuthMissing:
      return "peer failed authentication (the accepting side requires auth_secret; the "
             "connecting side has none configured)";
    case Refusal::kAuthUnexpected:
      return "peer failed authentication (the connecting side has an auth_secret; the accepting "
             "side has none configured)";
    case Refusal::kTooManyConnections:
      return "too many connections from this address (max_connections_per_peer)";
    case Refusal::kVersion:
      return "no wire version in common with the accepting side (it is too old or too new for "
             "this build: upgrade the older one)";
  }
  return "refused for an unknown reason (code " + std::to_string(code) + ")";
}

Status RefusedBy(const std::string& peer, uint16_t code) {
  std::string text = "refused by " + peer + ": " + RefusalText(code);
  if (code == static_cast<uint16_t>(Refusal::kTooManyConnections))
    return ResourceExhausted(std::move(text));
  return FailedPrecondition(std::move(text));
}

Status CheckSecrets(const TransportOptions& options) {
  if (options.privileged_secret.empty()) return Status::Ok();
  if (options.auth_secret.empty()) {
    return InvalidArgument("TransportOptions: privileged_secret needs an auth_secret");
  }
  if (options.privileged_secret == options.auth_secret) {
    return InvalidArgument("TransportOptions: privileged_secret equals auth_secret");
  }
  return Status::Ok();
}

}  // namespace bx::transport::auth
