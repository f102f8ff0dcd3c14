#include "rpc/frame.h"

#include <cstring>

namespace bx::rpc {

void EncodeHeader(const FrameHeader& header, Buffer& frame) {
  EncodeHeaderBytes(header, frame.data());
}

Result<FrameHeader> DecodeHeader(const Buffer& frame) {
  return DecodeHeaderBytes(frame.data(), frame.size());
}

Result<Buffer> MakeFrame(const FrameHeader& header, std::string_view payload) {
  BX_ASSIGN_OR_RETURN(Buffer frame, Buffer::Allocate(kFrameHeaderBytes + payload.size()));
  EncodeHeader(header, frame);
  if (!payload.empty())
    std::memcpy(frame.data() + kFrameHeaderBytes, payload.data(), payload.size());
  return frame;
}

}  // namespace bx::rpc
