// Cuts in the simnic's inter-process fabric, for fault tests: what a switch ACL that drops the
// packets between two hosts does to RC traffic, which IP routes cannot do here (the fabric is a
// set of unix sockets, not IP).
//
// With BX_SIM_PARTITIONS=<file>, each line "A B" of the file (two pids: a device's GID carries
// its process's pid) cuts the fabric between processes A and B in both directions; "#" starts a
// comment. The file is read again when it changes (checked at most every 20 ms), so a test cuts
// and heals by rewriting it, and a missing file cuts nothing. A request across a cut gets no
// response: the requester retries after its ACK timeout and completes with
// IBV_WC_RETRY_EXC_ERR after retry_cnt retries, as on a real fabric. The cut applies to
// requests as they leave; the response to a request that crossed before the cut still arrives.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <ctime>
#include <mutex>
#include <string>
#include <unordered_set>

namespace bx::simnic {

class FabricPartitions {
 public:
  // Reads BX_SIM_PARTITIONS; without it, nothing is ever cut (and Cut costs one branch).
  explicit FabricPartitions(uint32_t self_pid);

  // Whether requests from this process to process `peer` are dropped now. Any thread.
  bool Cut(uint32_t peer, uint64_t now_ns);

 private:
  void ReloadIfChanged();  // mu_ held

  const uint32_t self_;
  std::string path_;  // empty: inactive
  std::mutex mu_;
  uint64_t next_check_ns_ = 0;
  timespec mtime_{};
  off_t size_ = -1;
  std::unordered_set<uint32_t> cut_;  // peers cut from this process
};

}  // namespace bx::simnic
