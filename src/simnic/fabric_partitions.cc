#include "simnic/fabric_partitions.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace bx::simnic {

namespace {
constexpr uint64_t kRecheckNs = 20'000'000;
}

FabricPartitions::FabricPartitions(uint32_t self_pid) : self_(self_pid) {
  if (const char* path = std::getenv("BX_SIM_PARTITIONS"); path != nullptr && *path != '\0') {
    path_ = path;
  }
}

bool FabricPartitions::Cut(uint32_t peer, uint64_t now_ns) {
  if (path_.empty()) return false;
  std::lock_guard lock(mu_);
  if (now_ns >= next_check_ns_) {
    next_check_ns_ = now_ns + kRecheckNs;
    ReloadIfChanged();
  }
  return cut_.contains(peer);
}

void FabricPartitions::ReloadIfChanged() {
  struct stat st {};
  if (stat(path_.c_str(), &st) != 0) {
    cut_.clear();  // no file: no cuts
    size_ = -1;
    return;
  }
  if (st.st_size == size_ && st.st_mtim.tv_sec == mtime_.tv_sec &&
      st.st_mtim.tv_nsec == mtime_.tv_nsec) {
    return;
  }
  mtime_ = st.st_mtim;
  size_ = st.st_size;
  cut_.clear();
  std::ifstream in(path_);
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream fields(line);
    uint64_t a = 0, b = 0;
    if (!(fields >> a >> b)) continue;
    if (a == self_) cut_.insert(uint32_t(b));
    if (b == self_) cut_.insert(uint32_t(a));
  }
}

}  // namespace bx::simnic
