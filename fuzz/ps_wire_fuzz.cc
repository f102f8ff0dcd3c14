// Fuzzes the parameter server's messages (src/ps/wire.cc) as peers send them: fetch and push
// requests (any client that passed the secret), fetch responses and push acks (to a client),
// forwarded pushes (a primary to its backups) and error replies.
//
// Input: any bytes, given to every decoder, each from its own exactly-sized copy (a read past
// the message is an ASan report). Properties beyond "no crash, leak or sanitizer report":
//   - PeekMessageType accepts exactly the messages whose decoder it names, when that accepts;
//   - what a decoder accepts encodes to EncodedSize bytes and decodes again to the same value
//     (floats compared bit for bit), so no field is lost or read twice;
//   - a refusal is DataLoss with a message (what a server answers), never another code.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ps/wire.h"

namespace {

using bx::ps::MessageType;

void Check(bool condition) {
  if (!condition) std::abort();
}

template <typename T>
bool SameBits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

bool SamePush(const bx::ps::PushRequest& a, const bx::ps::PushRequest& b) {
  return a.id == b.id && a.client_key == b.client_key && a.table_id == b.table_id &&
         a.dim == b.dim && SameBits(a.keys, b.keys) && SameBits(a.gradients, b.gradients);
}

template <typename Result>
void CheckRefusal(const Result& result) {
  if (!result.ok()) {
    Check(result.status().code() == bx::StatusCode::kDataLoss);
    Check(!result.status().message().empty());
  }
}

// Encodes `value` into exactly `size` bytes and decodes it back.
template <typename Value, typename Encode, typename Decode>
auto RoundTrip(const Value& value, size_t size, Encode encode, Decode decode) {
  std::vector<std::byte> out(size);
  Check(encode(value, std::span<std::byte>(out)).ok());
  auto again = decode(std::span<const std::byte>(out));
  Check(again.ok());
  return again;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::byte> copy(reinterpret_cast<const std::byte*>(data),
                              reinterpret_cast<const std::byte*>(data) + size);
  copy.shrink_to_fit();
  const std::span<const std::byte> bytes(copy);
  auto type = bx::ps::PeekMessageType(bytes);
  CheckRefusal(type);
  auto accepted_as = [&](MessageType t) { Check(type.ok() && *type == t); };

  if (auto fetch = bx::ps::DecodeFetchRequest(bytes); fetch.ok()) {
    accepted_as(MessageType::kFetchRequest);
    auto again = RoundTrip(*fetch, bx::ps::FetchRequestSize(fetch->keys.size()),
                           bx::ps::EncodeFetchRequest, bx::ps::DecodeFetchRequest);
    Check(again->table_id == fetch->table_id && SameBits(again->keys, fetch->keys));
  } else {
    CheckRefusal(fetch);
  }

  if (auto response = bx::ps::DecodeFetchResponse(bytes); response.ok()) {
    accepted_as(MessageType::kFetchResponse);
    Check(response->value_bytes().size() == response->key_count() * response->dim() * 4);
    Check(bx::ps::FetchResponseSize(response->key_count(), response->dim()) == size);
    std::vector<float> row(response->dim());
    for (uint64_t i = 0; i < response->key_count(); ++i) response->CopyRow(i, row);
  } else {
    CheckRefusal(response);
  }

  if (auto push = bx::ps::DecodePushRequest(bytes); push.ok()) {
    accepted_as(MessageType::kPushRequest);
    auto again = RoundTrip(*push, bx::ps::PushRequestSize(push->keys.size(), push->dim),
                           bx::ps::EncodePushRequest, bx::ps::DecodePushRequest);
    Check(SamePush(*again, *push));
  } else {
    CheckRefusal(push);
  }

  if (auto ack = bx::ps::DecodePushAck(bytes); ack.ok()) {
    accepted_as(MessageType::kPushAck);
    auto again =
        RoundTrip(*ack, bx::ps::PushAckSize(), bx::ps::EncodePushAck, bx::ps::DecodePushAck);
    Check(again->id == ack->id && again->duplicate == ack->duplicate &&
          again->session_expired == ack->session_expired &&
          again->min_generation == ack->min_generation);
  } else {
    CheckRefusal(ack);
  }

  if (auto forwarded = bx::ps::DecodeForwardedPush(bytes); forwarded.ok()) {
    accepted_as(MessageType::kForwardedPush);
    auto again = RoundTrip(
        *forwarded, bx::ps::ForwardedPushSize(forwarded->push.keys.size(), forwarded->push.dim),
        bx::ps::EncodeForwardedPush, bx::ps::DecodeForwardedPush);
    Check(again->epoch == forwarded->epoch && again->lsn == forwarded->lsn &&
          SamePush(again->push, forwarded->push));
  } else {
    CheckRefusal(forwarded);
  }

  // An error reply decodes to its Status (never OK) or to DataLoss when malformed.
  bx::Status error = bx::ps::DecodeErrorMessage(bytes);
  Check(!error.ok());
  if (type.ok() && *type == MessageType::kError && error.code() != bx::StatusCode::kDataLoss) {
    std::vector<std::byte> out(bx::ps::ErrorMessageSize(error));
    Check(bx::ps::EncodeErrorMessage(error, out).ok());
    bx::Status again = bx::ps::DecodeErrorMessage(out);
    Check(again.code() == error.code() && again.message() == error.message());
  }
  return 0;
}
