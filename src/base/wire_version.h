// Wire-format versions and their negotiation, shared by every handshake (the rdma bootstrap,
// the tcp handshake, the RPC Hello). A build speaks a window of versions, its oldest to its
// newest; two peers use the highest version both speak. Keeping the previous version in the
// window is what lets a cluster be upgraded one process at a time (docs/DEPLOYING.md).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "bx/status.h"

namespace bx {

struct VersionRange {
  uint16_t oldest = 0;
  uint16_t newest = 0;

  bool Contains(uint16_t v) const { return oldest <= v && v <= newest; }
  std::string ToString() const {
    return oldest == newest ? std::to_string(oldest)
                            : std::to_string(oldest) + ".." + std::to_string(newest);
  }
};

// The highest version in both windows, or FailedPrecondition naming `what` and both windows
// (the peer is too old or too new for this build: upgrade one of them).
inline Result<uint16_t> NegotiateVersion(std::string_view what, VersionRange ours,
                                         VersionRange theirs) {
  const uint16_t agreed = std::min(ours.newest, theirs.newest);
  if (theirs.oldest > theirs.newest || agreed < std::max(ours.oldest, theirs.oldest)) {
    return FailedPrecondition(std::string(what) + ": peer speaks version " + theirs.ToString() +
                              ", this build speaks " + ours.ToString());
  }
  return agreed;
}

}  // namespace bx
