#include "transport/rdma/bootstrap_auth.h"

#include <cstring>

#include "transport/blocking_io.h"

namespace bx::rdma {
namespace {

using transport::auth::Nonce;
using transport::auth::Proof;
using transport::auth::Refusal;
using transport::auth::Role;

Status NotAuthenticated(const std::string& peer, const std::string& why) {
  return FailedPrecondition("bootstrap with " + peer + ": peer failed authentication (" + why +
                            ")");
}

Result<Reply> ReceiveReply(int fd, Deadline deadline, uint8_t raw[64], const char* what) {
  BX_RETURN_IF_ERROR(
      transport::ReadExactly(fd, raw, kRecordBytes, deadline, what, "bootstrap connection"));
  return DecodeReply(raw);
}

}  // namespace

void SendRefusal(int fd, Refusal code, Deadline deadline) {
  uint8_t record[kRecordBytes];
  EncodeRefusal(static_cast<uint16_t>(code), record);
  (void)transport::WriteAll(fd, record, sizeof(record), deadline, "refusal");
}

void SendVersionRefusal(int fd, const uint8_t hello_raw[64], Deadline deadline) {
  // An authenticating Hello's nonce is read first, so the refusal is not lost to a reset over
  // unread bytes. The flags are where every version put them.
  if ((hello_raw[6] & kHelloFlagAuth) != 0) {
    uint8_t nonce[kNonceBytes];
    (void)transport::ReadExactly(fd, nonce, sizeof(nonce), deadline, "client nonce",
                                 "bootstrap connection");
  }
  SendRefusal(fd, Refusal::kVersion, deadline);
}

Result<std::optional<AcceptedAuth>> AuthenticateConnectingPeer(int fd, const Hello& hello,
                                                               const uint8_t hello_raw[64],
                                                               const std::string& secret,
                                                               const std::string& privileged_secret,
                                                               Deadline deadline) {
  auto refuse = [&](Refusal code) {
    SendRefusal(fd, code, deadline);
    return FailedPrecondition(transport::auth::RefusalText(static_cast<uint16_t>(code)));
  };
  Nonce theirs{};
  if (hello.auth) {
    // Read even when refusing, so the refusal is not lost to a reset over unread bytes.
    BX_RETURN_IF_ERROR(transport::ReadExactly(fd, theirs.data(), theirs.size(), deadline,
                                              "client nonce", "bootstrap connection"));
  }
  if (secret.empty()) {
    if (hello.auth) return refuse(Refusal::kAuthUnexpected);
    return std::optional<AcceptedAuth>();
  }
  if (!hello.auth) return refuse(Refusal::kAuthMissing);
  BX_ASSIGN_OR_RETURN(Nonce mine, transport::auth::NewNonce());
  uint8_t challenge[kRecordBytes];
  EncodeChallenge(mine.data(), challenge);
  BX_RETURN_IF_ERROR(transport::WriteAll(fd, challenge, sizeof(challenge), deadline, "challenge"));
  Proof proof{};
  BX_RETURN_IF_ERROR(transport::ReadExactly(fd, proof.data(), proof.size(), deadline,
                                            "client proof", "bootstrap connection"));
  // A client echoing our nonce is trying to make us answer our own challenge.
  if (theirs == mine) return refuse(Refusal::kAuthFailed);
  const transport::auth::Proven proven = transport::auth::VerifyProofOfEither(
      secret, privileged_secret, kAuthContext, theirs, mine,
      std::span<const uint8_t>(hello_raw, kRecordBytes), proof);
  if (proven == transport::auth::Proven::kNeither) return refuse(Refusal::kAuthFailed);
  return std::optional<AcceptedAuth>(
      AcceptedAuth{mine, theirs, proven == transport::auth::Proven::kPrivilegedSecret});
}

Status SendAcceptingHello(int fd, Hello mine, const std::string& secret, const AcceptedAuth* auth,
                          Deadline deadline) {
  uint8_t out[kRecordBytes + kProofBytes];
  mine.auth = auth != nullptr;
  EncodeHello(mine, out);
  size_t size = kRecordBytes;
  if (auth != nullptr) {
    Proof proof =
        transport::auth::ComputeProof(secret, kAuthContext, Role::kAccepting, auth->mine,
                                      auth->theirs, std::span<const uint8_t>(out, kRecordBytes));
    std::memcpy(out + kRecordBytes, proof.data(), proof.size());
    size += proof.size();
  }
  return transport::WriteAll(fd, out, size, deadline, "hello");
}

Result<Hello> ConnectingHandshake(int fd, Hello mine, const std::string& secret,
                                  const std::string& peer, Deadline deadline) {
  const bool auth = !secret.empty();
  mine.auth = auth;
  uint8_t out[kRecordBytes + kNonceBytes];
  EncodeHello(mine, out);
  Nonce nonce{};
  if (auth) {
    BX_ASSIGN_OR_RETURN(nonce, transport::auth::NewNonce());
    std::memcpy(out + kRecordBytes, nonce.data(), nonce.size());
  }
  BX_RETURN_IF_ERROR(
      transport::WriteAll(fd, out, auth ? sizeof(out) : kRecordBytes, deadline, "hello"));

  uint8_t raw[kRecordBytes];
  BX_ASSIGN_OR_RETURN(Reply reply, ReceiveReply(fd, deadline, raw, auth ? "challenge" : "hello"));
  if (reply.kind == Reply::Kind::kRefusal) return transport::auth::RefusedBy(peer, reply.refusal);
  if (!auth) {
    if (reply.kind == Reply::Kind::kChallenge || reply.hello.auth)
      return NotAuthenticated(peer, "the accepting side requires auth_secret; none is set here");
    return reply.hello;
  }
  if (reply.kind != Reply::Kind::kChallenge)
    return NotAuthenticated(peer, "the accepting side sent no challenge: it has no auth_secret");
  Nonce theirs;
  std::memcpy(theirs.data(), reply.nonce, theirs.size());
  if (theirs == nonce) return NotAuthenticated(peer, "the accepting side echoed our nonce");
  Proof proof = transport::auth::ComputeProof(secret, kAuthContext, Role::kConnecting, nonce,
                                              theirs, std::span<const uint8_t>(out, kRecordBytes));
  BX_RETURN_IF_ERROR(transport::WriteAll(fd, proof.data(), proof.size(), deadline, "proof"));

  BX_ASSIGN_OR_RETURN(reply, ReceiveReply(fd, deadline, raw, "hello"));
  if (reply.kind == Reply::Kind::kRefusal) return transport::auth::RefusedBy(peer, reply.refusal);
  if (reply.kind != Reply::Kind::kHello || !reply.hello.auth)
    return NotAuthenticated(peer, "the accepting side's Hello carries no proof");
  Proof theirs_proof{};
  BX_RETURN_IF_ERROR(transport::ReadExactly(fd, theirs_proof.data(), theirs_proof.size(), deadline,
                                            "server proof", "bootstrap connection"));
  if (!transport::auth::VerifyProof(secret, kAuthContext, Role::kAccepting, theirs, nonce,
                                    std::span<const uint8_t>(raw, kRecordBytes), theirs_proof))
    return NotAuthenticated(peer, "the accepting side's proof does not match auth_secret");
  return reply.hello;
}

}  // namespace bx::rdma
