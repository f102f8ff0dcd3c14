// InfiniBand LIDs for simnic ports with an InfiniBand profile. A subnet manager hands out LIDs
// on a real fabric; here processes claim them in a directory every simnic process on the host
// shares ($BX_SIM_FABRIC_DIR/lids, else ${TMPDIR:-/tmp}/bxsim-lids.<uid>): a LID is a symlink named
// after it whose target is "<pid>:<device index>". Claims are serialised by a lock file; a LID
// whose process is gone is reclaimed. A process releases its LIDs at exit.
#pragma once

#include <cstdint>

namespace bx::simnic {

inline constexpr uint16_t kMaxUnicastLid = 0xbfff;

// A LID for device `index` of process `pid`; 0 when the registry cannot be written.
uint16_t ClaimLid(uint32_t pid, uint32_t index);
// The device a LID names; false when no live claim holds it.
bool LookupLid(uint16_t lid, uint32_t* pid, uint32_t* index);

}  // namespace bx::simnic
