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

constexpr uint16_t kHelloOldestShift = 8;  // version 2 on: the Hello's oldest version

struct Record {
  uint8_t version = 0;
  uint8_t type = 0;
  uint16_t arg = 0;
  std::array<uint8_t, 32> data{};
};

HandshakeRecord Encode(uint8_t version, uint8_t type, uint16_t arg, const uint8_t* data) {
  HandshakeRecord r{};
  WireWriter w{std::span<uint8_t>(r)};
  w.PutU32(kHandshakeMagic);
  w.PutU8(version);
  w.PutU8(type);
  w.PutU16(arg);
  if (data != nullptr) w.PutBytes(data, 32);  // otherwise the zeros r starts with
  return r;
}

// Our Hello offering `versions` (a version 1 Hello has no room for the oldest).
HandshakeRecord EncodeHello(VersionRange versions, bool auth, const uint8_t* nonce) {
  uint16_t arg = auth ? kFlagAuth : 0;
  if (versions.newest >= 2) arg |= uint16_t(versions.oldest << kHelloOldestShift);
  return Encode(uint8_t(versions.newest), kHello, arg, nonce);
}

bool AllZero(const std::array<uint8_t, 32>& a) {
  uint8_t any = 0;
  for (uint8_t b : a) any |= b;
  return any == 0;
}

// The versions a Hello offers, or DataLoss for a malformed one.
Result<VersionRange> HelloVersions(const Record& hello) {
  if (hello.version <= 1) {
    if ((hello.arg & ~kFlagAuth) != 0 || hello.version == 0)
      return DataLoss("tcp handshake: malformed version 1 Hello (arg " + std::to_string(hello.arg) +
                      ")");
    return VersionRange{1, 1};
  }
  const uint16_t oldest = hello.arg >> kHelloOldestShift;
  if ((hello.arg & 0xff & ~kFlagAuth) != 0 || oldest < 1 || oldest > hello.version)
    return DataLoss("tcp handshake: malformed Hello (version " + std::to_string(hello.version) +
                    ", arg " + std::to_string(hello.arg) + ")");
  return VersionRange{oldest, hello.version};
}

// `agreed`: the version the two sides agreed on, which every record after the Hellos carries
// (0 before: a Hello's own versions are checked by HelloVersions). A Refuse is read whatever its
// version, so that its reason reaches the user.
Result<Record> Decode(const HandshakeRecord& r, uint8_t agreed) {
  // A whole record: none of these reads can fail.
  WireReader in{std::span<const uint8_t>(r)};
  uint32_t magic = 0;
  Record out;
  in.GetU32(&magic);
  in.GetU8(&out.version);
  in.GetU8(&out.type);
  in.GetU16(&out.arg);
  in.GetBytes(out.data.data(), out.data.size());
  if (magic != kHandshakeMagic)
    return DataLoss("tcp handshake: not a bexpress tcp:// peer (magic " + std::to_string(magic) +
                    ")");
  if (out.type == kRefuse) {
    if (out.arg == 0 || !AllZero(out.data))
      return DataLoss("tcp handshake: malformed Refuse record");
    return out;
  }
  if (out.type == kHello) {
    BX_RETURN_IF_ERROR(HelloVersions(out).status());
    if ((out.arg & kFlagAuth) == 0 && !AllZero(out.data))
      return DataLoss("tcp handshake: a Hello without auth carries a nonce");
    return out;
  }
  if (agreed != 0 && out.version != agreed)
    return DataLoss("tcp handshake: a record of version " + std::to_string(out.version) +
                    " after version " + std::to_string(agreed) + " was agreed");
  if ((out.type != kProof && out.type != kAccept) || out.arg != 0)
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
                       const char* what, uint8_t agreed) {
  BX_RETURN_IF_ERROR(transport::ReadExactly(fd, raw.data(), raw.size(), deadline, what));
  return Decode(raw, agreed);
}

}  // namespace

Result<uint8_t> ConnectingHandshake(int fd, const std::string& secret, const std::string& peer,
                                    std::chrono::steady_clock::time_point deadline,
                                    VersionRange versions, bool* unanswered) {
  if (unanswered != nullptr) *unanswered = false;
  const bool auth = !secret.empty();
  Nonce nonce{};
  if (auth) {
    BX_ASSIGN_OR_RETURN(nonce, transport::auth::NewNonce());
  }
  const HandshakeRecord hello = EncodeHello(versions, auth, auth ? nonce.data() : nullptr);
  BX_RETURN_IF_ERROR(transport::WriteAll(fd, hello.data(), hello.size(), deadline, "tcp hello"));
  HandshakeRecord raw;
  Result<Record> reply = Receive(fd, raw, deadline, "the tcp handshake reply", 0);
  if (!reply.ok()) {
    if (unanswered != nullptr) *unanswered = reply.status().code() == StatusCode::kAborted;
    return reply.status().WithContext("tcp handshake with " + peer);
  }
  if (reply->type == kRefuse) return transport::auth::RefusedBy(peer, reply->arg);
  // The accepting side answers at the version it chose (its Hello offers up to it).
  const uint8_t agreed = reply->version;
  if (!versions.Contains(agreed))
    return FailedPrecondition("tcp handshake with " + peer + ": the accepting side answered at " +
                              "version " + std::to_string(agreed) + ", this build offered " +
                              versions.ToString());
  if (!auth) {
    if (reply->type == kAccept && AllZero(reply->data)) return agreed;
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
  const HandshakeRecord proof_record = Encode(agreed, kProof, 0, proof.data());
  BX_RETURN_IF_ERROR(
      transport::WriteAll(fd, proof_record.data(), proof_record.size(), deadline, "tcp proof"));
  reply = Receive(fd, raw, deadline, "the tcp handshake verdict", agreed);
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
  return agreed;
}

AcceptingHandshake::Step AcceptingHandshake::OnRecord(const HandshakeRecord& raw) {
  auto refuse = [this](Refusal code) {
    return Step{Outcome::kRefused, Refuse(code, version_ != 0 ? version_ : 1),
                FailedPrecondition(transport::auth::RefusalText(uint16_t(code)))};
  };
  Result<Record> record = Decode(raw, version_);
  if (!record.ok()) return Step{Outcome::kRefused, {}, record.status()};
  const int index = received_++;
  if (index == 0) {
    if (record->type != kHello)
      return Step{Outcome::kRefused, {}, DataLoss("tcp handshake: the first record is no Hello")};
    const Result<VersionRange> offered = HelloVersions(*record);  // checked by Decode
    Result<uint16_t> agreed =
        NegotiateVersion("tcp handshake", kHandshakeVersions, offered.value());
    if (!agreed.ok()) return Step{Outcome::kRefused, Refuse(Refusal::kVersion), agreed.status()};
    version_ = uint8_t(*agreed);
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
    // Offering up to the agreed version: a version 1 peer gets a version 1 Hello.
    server_hello_ = EncodeHello({kHandshakeVersions.oldest, version_}, true, server_nonce_.data());
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
  if (secret_.empty()) return AsString(Encode(version_, kAccept, 0, nullptr));
  Proof proof = transport::auth::ComputeProof(
      privileged_ ? privileged_secret_ : secret_, kAuthContext, Role::kAccepting, server_nonce_,
      client_nonce_, std::span<const uint8_t>(server_hello_));
  return AsString(Encode(version_, kAccept, 0, proof.data()));
}

std::string AcceptingHandshake::Refuse(Refusal code, uint8_t version) {
  return AsString(Encode(version, kRefuse, uint16_t(code), nullptr));
}

}  // namespace bx::tcp
