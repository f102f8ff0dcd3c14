// RemoteBuffer::Of (include/bx/transport.h).
#include "bx/bemalloc.h"
#include "bx/transport.h"

namespace bx {

RemoteBuffer RemoteBuffer::Of(const Buffer& buffer) {
  return RemoteBuffer{reinterpret_cast<uint64_t>(buffer.data()), buffer.rkey(), buffer.size()};
}

}  // namespace bx
