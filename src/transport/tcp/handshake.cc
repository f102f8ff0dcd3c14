#include "transport/tcp/handshake.h"

#include <cstring>
#include <span>

#include "base/wire_encoding.h"
#include "transport/blocking_io.h"

namespace bx::tcp {
namespace {

using transport::auth::Nonce;
using transport::auth::Proof;
using transport::auth::Refusal;
using transport::auth::Role;

enum Type : uint8_t { kHello = 1, kProof = 2, kAccept = 3, kRefuse = 4 };
constexpr uint16_t kFlagAuth = 1;

struct Record {
  uint8_t type = 0;
  uint16_t arg = 0;
  std::array<uint8_t, 32> data{};
};

HandshakeRecord Encode(uint8_t type, uint16_t arg, const uint8_t* data) {
  HandshakeRecord r{};
  WireWriter w{std::span<uint8_t>(r)};
  w.PutU32(kHandshakeMagic);
  w.PutU8(kHandshakeVersion);
  w.PutU8(type);
  w.PutU16(arg);
  if (data != nullptr) w.PutBytes(data, 32);  // otherwise the zeros r starts with
  return r;
}

bool AllZero(const std::array<uint8_t, 32>& a) {
  uint8_t any = 0;
  for (uint8_t b : a) any |= b;
  return any == 0;
}

Result<Record> Decode(const HandshakeRecord& r) {
  // A whole record: none of these reads can fail.
  WireReader in{std::span<const uint8_t>(r)};
  uint32_t magic = 0;
  uint8_t version = 0;
  Record out;
  in.GetU32(&magic);
  in.GetU8(&version);
  in.GetU8(&out.type);
  in.GetU16(&out.arg);
  in.GetBytes(out.data.data(), out.data.size());
  if (magic != kHandshakeMagic)
    return DataLoss("tcp handshake: not a bexpress tcp:// peer (magic " + std::to_string(magic) +
                    ")");
  if (version != kHandshakeVersion)
    return DataLoss("tcp handshake: peer speaks version " + std::to_string(version) +
                    ", this build speaks " + std::to_string(kHandshakeVersion));
  bool ok = false;
  switch (out.type) {
    case kHello:
      ok = (out.arg & ~kFlagAuth) == 0 && ((out.arg & kFlagAuth) != 0 || AllZero(out.data));
      break;
    case kProof:
    case kAccept:
      ok = out.arg == 0;
      break;
    case kRefuse:
      ok = out.arg != 0 && AllZero(out.data);
      break;
  }
  if (!ok)
    return DataLoss("tcp handshake: malformed record (type " + std::to_string(out.type) + ", arg " +
                    std::to_string(out.arg) + ")");
  return out;
}

std::string AsString(const HandshakeRecord& r) {
  return std::string(reinterpret_cast<const char*>(r.data()), r.size());
}

Status NotAuthenticated(const std::string& peer, const std::string& why) {
  return FailedPrecondition("tcp handshake with " + peer + ": peer failed authentication (" + why +
                            ")");
}

Result<Record> Receive(int fd, HandshakeRecord& raw, std::chrono::steady_clock::time_point deadline,
                       const char* what) {
  BX_RETURN_IF_ERROR(transport::ReadExactly(fd, raw.data(), raw.size(), deadline, what));
  return Decode(raw);
}

}  // namespace

Status ConnectingHandshake(int fd, const std::string& secret, const std::string& peer,
                           std::chrono::steady_clock::time_point deadline) {
  const bool auth = !secret.empty();
  Nonce nonce{};
  if (auth) {
    BX_ASSIGN_OR_RETURN(nonce, transport::auth::NewNonce());
  }
  const HandshakeRecord hello = Encode(kHello, auth ? kFlagAuth : 0, auth ? nonce.data() : nullptr);
  BX_RETURN_IF_ERROR(transport::WriteAll(fd, hello.data(), hello.size(), deadline, "tcp hello"));
  HandshakeRecord raw;
  Result<Record> reply = Receive(fd, raw, deadline, "the tcp handshake reply");
  if (!reply.ok()) return reply.status().WithContext("tcp handshake with " + peer);
  if (reply->type == kRefuse) return transport::auth::RefusedBy(peer, reply->arg);
  if (!auth) {
    if (reply->type == kAccept && AllZero(reply->data)) return Status::Ok();
    if (reply->type == kHello || reply->type == kAccept)
      return NotAuthenticated(peer, "the accepting side requires auth_secret; none is set here");
    return DataLoss("tcp handshake with " + peer + ": unexpected record type " +
                    std::to_string(reply->type));
  }
  if (reply->type != kHello || (reply->arg & kFlagAuth) == 0)
    return NotAuthenticated(peer, "the accepting side sent no challenge: it has no auth_secret");
  Nonce theirs;
  std::memcpy(theirs.data(), reply->data.data(), theirs.size());
  if (theirs == nonce) return NotAuthenticated(peer, "the accepting side echoed our nonce");
  const HandshakeRecord server_hello = raw;
  Proof proof = transport::auth::ComputeProof(secret, kAuthContext, Role::kConnecting, nonce,
                                              theirs, std::span<const uint8_t>(hello));
  const HandshakeRecord proof_record = Encode(kProof, 0, proof.data());
  BX_RETURN_IF_ERROR(
      transport::WriteAll(fd, proof_record.data(), proof_record.size(), deadline, "tcp proof"));
  reply = Receive(fd, raw, deadline, "the tcp handshake verdict");
  if (!reply.ok()) return reply.status().WithContext("tcp handshake with " + peer);
  if (reply->type == kRefuse) return transport::auth::RefusedBy(peer, reply->arg);
  if (reply->type != kAccept)
    return DataLoss("tcp handshake with " + peer + ": unexpected record type " +
                    std::to_string(reply->type));
  Proof server_proof;
  std::memcpy(server_proof.data(), reply->data.data(), server_proof.size());
  if (!transport::auth::VerifyProof(secret, kAuthContext, Role::kAccepting, theirs, nonce,
                                    std::span<const uint8_t>(server_hello), server_proof))
    return NotAuthenticated(peer, "the accepting side's proof does not match auth_secret");
  return Status::Ok();
}

AcceptingHandshake::Step AcceptingHandshake::OnRecord(const HandshakeRecord& raw) {
  auto refuse = [](Refusal code) {
    return Step{Outcome::kRefused, Refuse(code),
                FailedPrecondition(transport::auth::RefusalText(uint16_t(code)))};
  };
  Result<Record> record = Decode(raw);
  if (!record.ok()) return Step{Outcome::kRefused, {}, record.status()};
  const int index = received_++;
  if (index == 0) {
    if (record->type != kHello)
      return Step{Outcome::kRefused, {}, DataLoss("tcp handshake: the first record is no Hello")};
    const bool auth = (record->arg & kFlagAuth) != 0;
    if (secret_.empty()) {
      if (auth) return refuse(Refusal::kAuthUnexpected);
      return Step{Outcome::kAuthenticated, {}, Status::Ok()};
    }
    if (!auth) return refuse(Refusal::kAuthMissing);
    client_hello_ = raw;
    std::memcpy(client_nonce_.data(), record->data.data(), client_nonce_.size());
    Result<Nonce> nonce = transport::auth::NewNonce();
    if (!nonce.ok()) return Step{Outcome::kRefused, {}, nonce.status()};
    server_nonce_ = *nonce;
    server_hello_ = Encode(kHello, kFlagAuth, server_nonce_.data());
    return Step{Outcome::kContinue, AsString(server_hello_), Status::Ok()};
  }
  if (index == 1 && !secret_.empty()) {
    if (record->type != kProof)
      return Step{Outcome::kRefused, {}, DataLoss("tcp handshake: expected a Proof record")};
    Proof proof;
    std::memcpy(proof.data(), record->data.data(), proof.size());
    // A client echoing our nonce is trying to make us answer our own challenge.
    if (client_nonce_ == server_nonce_) return refuse(Refusal::kAuthFailed);
    const transport::auth::Proven proven = transport::auth::VerifyProofOfEither(
        secret_, privileged_secret_, kAuthContext, client_nonce_, server_nonce_,
        std::span<const uint8_t>(client_hello_), proof);
    if (proven == transport::auth::Proven::kNeither) return refuse(Refusal::kAuthFailed);
    privileged_ = proven == transport::auth::Proven::kPrivilegedSecret;
    return Step{Outcome::kAuthenticated, {}, Status::Ok()};
  }
  return Step{Outcome::kRefused, {}, DataLoss("tcp handshake: unexpected record")};
}

std::string AcceptingHandshake::Accept() const {
  if (secret_.empty()) return AsString(Encode(kAccept, 0, nullptr));
  Proof proof = transport::auth::ComputeProof(
      privileged_ ? privileged_secret_ : secret_, kAuthContext, Role::kAccepting, server_nonce_,
      client_nonce_, std::span<const uint8_t>(server_hello_));
  return AsString(Encode(kAccept, 0, proof.data()));
}

std::string AcceptingHandshake::Refuse(Refusal code) {
  return AsString(Encode(kRefuse, uint16_t(code), nullptr));
}

}  // namespace bx::tcp
