#include "simnic/device.h"

#include <endian.h>

#include <cstring>
#include <mutex>

#include "simnic/lid_registry.h"

namespace bx::simnic {

ibv_gid MakeGid(uint32_t pid, uint32_t index) {
  ibv_gid gid{};
  gid.raw[0] = 0xfe;
  gid.raw[1] = 0x80;
  uint32_t p = htobe32(pid), i = htobe32(index);
  std::memcpy(&gid.raw[8], &p, 4);
  std::memcpy(&gid.raw[12], &i, 4);
  return gid;
}

bool ParseGid(const ibv_gid& gid, uint32_t* pid, uint32_t* index) {
  static const uint8_t kPrefix[8] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0};
  if (std::memcmp(gid.raw, kPrefix, 8) != 0) return false;
  uint32_t p, i;
  std::memcpy(&p, &gid.raw[8], 4);
  std::memcpy(&i, &gid.raw[12], 4);
  *pid = be32toh(p);
  *index = be32toh(i);
  return true;
}

bool GidEqual(const ibv_gid& a, const ibv_gid& b) {
  return std::memcmp(a.raw, b.raw, sizeof(a.raw)) == 0;
}

Device::Device(int index, uint32_t pid, const DeviceProfile& profile)
    : index_(index), name_("bxsim" + std::to_string(index)), profile_(profile) {
  ibv_device_.node_type = IBV_NODE_CA;
  ibv_device_.transport_type = IBV_TRANSPORT_IB;
  std::snprintf(ibv_device_.name, sizeof(ibv_device_.name), "%s", name_.c_str());
  std::snprintf(ibv_device_.dev_name, sizeof(ibv_device_.dev_name), "uverbs-%s", name_.c_str());
  std::snprintf(ibv_device_.dev_path, sizeof(ibv_device_.dev_path), "/simnic/%s", name_.c_str());
  std::snprintf(ibv_device_.ibdev_path, sizeof(ibv_device_.ibdev_path), "/simnic/%s",
                name_.c_str());
  gid_ = MakeGid(pid, uint32_t(index));
  gid_table_ = MakeGidTable(profile, pid, uint32_t(index));
  if (profile.link_layer == IBV_LINK_LAYER_INFINIBAND) lid_ = ClaimLid(pid, uint32_t(index));
  guid_be_ = htobe64((uint64_t(0xb5) << 56) | (uint64_t(pid) << 16) | uint64_t(index));
}

SimMr* Device::RegisterMr(SimPd* pd, void* addr, size_t length, uint64_t iova, int access) {
  auto* mr = new SimMr{};
  std::unique_lock lock(mr_mu_);
  uint32_t slot;
  if (!mr_free_.empty()) {
    slot = mr_free_.back();
    mr_free_.pop_back();
  } else {
    if (mr_slots_.size() >= size_t(kMaxMr)) {
      delete mr;
      return nullptr;
    }
    slot = uint32_t(mr_slots_.size());
    mr_slots_.push_back(nullptr);
    mr_generation_.push_back(0);
  }
  uint8_t gen = ++mr_generation_[slot];
  uint32_t key = (slot << 8) | gen;
  mr_slots_[slot] = mr;
  mr->mr.addr = addr;
  mr->mr.length = length;
  mr->mr.lkey = key;
  mr->mr.rkey = key;
  mr->mr.handle = key;
  mr->protection_domain = pd;
  mr->iova = iova;
  mr->access = access;
  counters_.registered_bytes.fetch_add(length, std::memory_order_relaxed);
  counters_.memory_regions.fetch_add(1, std::memory_order_relaxed);
  return mr;
}

bool Device::DeregisterMr(SimMr* mr) {
  {
    std::unique_lock lock(mr_mu_);
    if (mr->bound_windows > 0) return false;
    uint32_t slot = mr->mr.lkey >> 8;
    mr_slots_[slot] = nullptr;
    mr_free_.push_back(slot);
  }
  counters_.registered_bytes.fetch_sub(mr->mr.length, std::memory_order_relaxed);
  counters_.memory_regions.fetch_sub(1, std::memory_order_relaxed);
  delete mr;
  return true;
}

bool Device::ReregisterMr(SimMr* mr, SimPd* pd, void* addr, size_t length, uint64_t iova,
                          int access) {
  std::unique_lock lock(mr_mu_);
  if (mr->bound_windows > 0) return false;
  counters_.registered_bytes.fetch_add(length, std::memory_order_relaxed);
  counters_.registered_bytes.fetch_sub(mr->mr.length, std::memory_order_relaxed);
  mr->mr.addr = addr;
  mr->mr.length = length;
  mr->iova = iova;
  mr->protection_domain = pd;
  mr->access = access;
  return true;
}

std::optional<MrView> Device::FindMr(uint32_t key) const {
  if (key & kMwKeyBit) return std::nullopt;
  std::shared_lock lock(mr_mu_);
  uint32_t slot = key >> 8;
  if (slot >= mr_slots_.size()) return std::nullopt;
  const SimMr* mr = mr_slots_[slot];
  if (mr == nullptr || mr->mr.lkey != key) return std::nullopt;
  return MrView{static_cast<uint8_t*>(mr->mr.addr), mr->iova, mr->mr.length, mr->access,
                mr->protection_domain};
}

bool Device::IsRegistered(SimPd* pd, const void* addr, size_t length, int access) const {
  auto begin = reinterpret_cast<uintptr_t>(addr);
  std::shared_lock lock(mr_mu_);
  for (const SimMr* mr : mr_slots_) {
    if (mr == nullptr || mr->protection_domain != pd) continue;
    auto mr_begin = reinterpret_cast<uintptr_t>(mr->mr.addr);
    if (begin >= mr_begin && begin + length <= mr_begin + mr->mr.length &&
        (mr->access & access) == access)
      return true;
  }
  return false;
}

uint32_t Device::AddQp(SimQp* qp) {
  std::unique_lock lock(qp_mu_);
  uint32_t qpn;
  do {
    qpn = next_qpn_;
    next_qpn_ = (next_qpn_ + 1) & 0xffffff;
    if (next_qpn_ < 0x100) next_qpn_ = 0x100;
  } while (qps_.count(qpn) != 0);
  qps_[qpn] = qp;
  return qpn;
}

void Device::RemoveQp(uint32_t qpn) {
  std::unique_lock lock(qp_mu_);
  qps_.erase(qpn);
}

SimQp* Device::FindQp(uint32_t qpn) const {
  std::shared_lock lock(qp_mu_);
  auto it = qps_.find(qpn);
  return it == qps_.end() ? nullptr : it->second;
}

std::vector<SimQp*> Device::AllQps() const {
  std::shared_lock lock(qp_mu_);
  std::vector<SimQp*> out;
  out.reserve(qps_.size());
  for (auto& [qpn, qp] : qps_) out.push_back(qp);
  return out;
}

void Device::AddContext(SimContext* c) {
  std::lock_guard lock(contexts_mu_);
  contexts_.push_back(c);
}

void Device::RemoveContext(SimContext* c) {
  std::lock_guard lock(contexts_mu_);
  std::erase(contexts_, c);
}

std::vector<SimContext*> Device::Contexts() const {
  std::lock_guard lock(contexts_mu_);
  return contexts_;
}

}  // namespace bx::simnic
