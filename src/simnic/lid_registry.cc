#include "simnic/lid_registry.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace bx::simnic {
namespace {

std::string RegistryDir() {
  const char* fabric = std::getenv("BX_SIM_FABRIC_DIR");
  if (fabric != nullptr && *fabric != '\0') return std::string(fabric) + "/lids";
  // Per user: the fabric refuses other users' processes anyway (ipc_link.cc), and a directory
  // of one's own cannot be filled with someone else's claims.
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/bxsim-lids." +
         std::to_string(getuid());
}

std::string LidPath(const std::string& dir, uint16_t lid) {
  char name[16];
  std::snprintf(name, sizeof name, "/%04x", lid);
  return dir + name;
}

bool ReadClaim(const std::string& path, uint32_t* pid, uint32_t* index) {
  char target[64];
  ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  unsigned p = 0, i = 0;
  if (std::sscanf(target, "%u:%u", &p, &i) != 2) return false;
  *pid = p;
  *index = i;
  return true;
}

bool Alive(uint32_t pid) {
  return kill(pid_t(pid), 0) == 0 || errno == EPERM;
}

// LIDs this process claimed, unlinked at exit.
std::mutex claimed_mu;
std::vector<std::string>& Claimed() {
  static auto* claimed = new std::vector<std::string>;
  return *claimed;
}
pid_t claimed_by = 0;

void ReleaseAtExit() {
  std::lock_guard lock(claimed_mu);
  if (getpid() != claimed_by) return;  // a forked child must not release its parent's LIDs
  for (const std::string& path : Claimed()) unlink(path.c_str());
}

}  // namespace

uint16_t ClaimLid(uint32_t pid, uint32_t index) {
  const std::string dir = RegistryDir();
  mkdir(dir.c_str(), 0700);
  int lock_fd = open((dir + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (lock_fd < 0) return 0;
  flock(lock_fd, LOCK_EX);
  const std::string target = std::to_string(pid) + ":" + std::to_string(index);
  // Start where this device's id points, so processes rarely probe each other's LIDs.
  const uint32_t start = (pid * 4 + index) % kMaxUnicastLid;
  uint16_t claimed = 0;
  for (uint32_t i = 0; i < kMaxUnicastLid && claimed == 0; ++i) {
    const auto lid = uint16_t(1 + (start + i) % kMaxUnicastLid);
    const std::string path = LidPath(dir, lid);
    if (symlink(target.c_str(), path.c_str()) == 0) {
      claimed = lid;
      break;
    }
    if (errno != EEXIST) break;
    uint32_t owner = 0, owner_index = 0;
    if (ReadClaim(path, &owner, &owner_index) && Alive(owner)) continue;
    unlink(path.c_str());  // its process is gone: the claim is stale
    if (symlink(target.c_str(), path.c_str()) == 0) claimed = lid;
  }
  flock(lock_fd, LOCK_UN);
  close(lock_fd);
  if (claimed != 0) {
    std::lock_guard lock(claimed_mu);
    if (claimed_by != getpid()) {
      Claimed().clear();
      claimed_by = getpid();
      std::atexit(ReleaseAtExit);
    }
    Claimed().push_back(LidPath(dir, claimed));
  }
  return claimed;
}

bool LookupLid(uint16_t lid, uint32_t* pid, uint32_t* index) {
  if (lid == 0 || lid > kMaxUnicastLid) return false;
  return ReadClaim(LidPath(RegistryDir(), lid), pid, index);
}

}  // namespace bx::simnic
