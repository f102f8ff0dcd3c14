#include "simnic/ipc_frame.h"

#include <algorithm>
#include <cstring>

namespace bx::simnic {
namespace {

constexpr size_t kFirstPayloadChunk = size_t{1} << 20;

}  // namespace

IpcCookie MakeIpcCookie(std::string_view text) {
  IpcCookie cookie{};
  std::memcpy(cookie.data(), text.data(), std::min(text.size(), cookie.size()));
  return cookie;
}

std::string_view CheckIpcHeader(const IpcHeader& header, uint32_t peer_pid) {
  if (header.magic != kIpcMagic) return "bad magic";
  if (header.src_pid != peer_pid) return "the frame names another process as its sender";
  if (header.kind != kIpcRequest && header.kind != kIpcReply && header.kind != kIpcDatagram)
    return "unknown frame kind";
  if (header.payload_length > kIpcMaxPayload) return "payload above the largest message";
  if (header.kind == kIpcDatagram && header.payload_length > kIpcMaxDatagram)
    return "datagram above the largest MTU";
  return {};
}

std::span<uint8_t> IpcFrameParser::Next() {
  if (!error_.empty()) return {};
  if (cookie_have_ < kIpcCookieBytes)
    return {cookie_seen_.data() + cookie_have_, kIpcCookieBytes - cookie_have_};
  if (header_have_ < sizeof(IpcHeader)) {
    auto* header = reinterpret_cast<uint8_t*>(&frame_.header);
    return {header + header_have_, sizeof(IpcHeader) - header_have_};
  }
  std::vector<uint8_t>& payload = frame_.payload;
  if (payload_have_ == payload.size()) {
    // Grown as bytes arrive: the first 1 MiB at once, then four times what has come.
    const size_t total = frame_.header.payload_length;
    const size_t grown = std::max(kFirstPayloadChunk, payload_have_ * 4);
    payload.resize(std::min(total, grown));
  }
  return {payload.data() + payload_have_, payload.size() - payload_have_};
}

bool IpcFrameParser::Commit(size_t n, std::vector<IpcFrame>* frames) {
  if (!error_.empty()) return false;
  if (cookie_have_ < kIpcCookieBytes) {
    cookie_have_ += n;
    if (cookie_have_ == kIpcCookieBytes && cookie_seen_ != cookie_) {
      error_ = "wrong fabric cookie";
      impostor_ = true;
      return false;
    }
    return true;
  }
  if (header_have_ < sizeof(IpcHeader)) {
    header_have_ += n;
    if (header_have_ < sizeof(IpcHeader)) return true;
    error_ = CheckIpcHeader(frame_.header, peer_pid_);
    if (!error_.empty()) {
      impostor_ = frame_.header.magic == kIpcMagic && frame_.header.src_pid != peer_pid_;
      return false;
    }
  } else {
    payload_have_ += n;
  }
  if (payload_have_ < frame_.header.payload_length) return true;
  frames->push_back(std::move(frame_));
  frame_ = IpcFrame{};
  header_have_ = payload_have_ = 0;
  return true;
}

}  // namespace bx::simnic
