#include "transport/rdma/io_thread_set.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "bx/log.h"

namespace bx::rdma {
namespace {

// Transports share threads only when they would have made the same ones.
using SharedKey = std::tuple<ibv_context*, int, bool, int, bool, std::vector<int>>;

}  // namespace

struct IoThreadSet::SharedEntry {
  SharedKey key;
  std::vector<std::shared_ptr<IoThread>> threads;
  int users = 0;
};

namespace {

struct SharedThreads {
  std::mutex mu;
  // Node addresses are stable, so sets point at their entry.
  std::map<SharedKey, IoThreadSet::SharedEntry> entries;
};

SharedThreads& Shared() {
  static auto* shared = new SharedThreads;  // never destroyed: sets may outlive static teardown
  return *shared;
}

// Thread `index` of a set: its name gets the number, and it runs on the set's CPUs round robin.
Result<std::shared_ptr<IoThread>> CreateThread(verbs::Device& device, IoThreadOptions options,
                                               const std::string& name, size_t index) {
  options.name = name + std::to_string(index);
  if (!options.cpus.empty()) options.cpu = options.cpus[index % options.cpus.size()];
  auto io = engine::EnginePoller::StartThread(device.lib(), device.context(), device.pd(), options);
  if (!io.ok()) return io.status().WithContext("rdma transport");
  if (!engine::EnginePoller::Of(**io).has_own_domain()) {
    // Works without (the provider locks instead); said once per process, not per thread.
    static std::once_flag said;
    std::call_once(said, [&] {
      bx::Log(LogLevel::kWarning, "bx rdma: " + device.name() +
                                      " refuses thread or parent domains; QPs share its "
                                      "protection domain and the provider's locks");
    });
  }
  return io;
}

}  // namespace

Result<IoThreadSet> IoThreadSet::Acquire(verbs::Device& device, const IoThreadOptions& options,
                                         int count, bool shared) {
  count = std::max(1, count);
  IoThreadSet set;
  if (!shared) {
    for (int i = 0; i < count; ++i) {
      BX_ASSIGN_OR_RETURN(auto io, CreateThread(device, options, options.name, size_t(i)));
      set.threads_.push_back(std::move(io));
    }
    return set;
  }
  SharedThreads& all = Shared();
  std::lock_guard lock(all.mu);
  const SharedKey key{device.context(),      options.busy_poll_us,      options.adaptive_polling,
                      options.spin_limit_us, options.detect_contention, options.cpus};
  SharedEntry& entry = all.entries[key];
  entry.key = key;
  while (int(entry.threads.size()) < count) {
    auto io = CreateThread(device, options, options.name + "s", entry.threads.size());
    if (!io.ok()) {
      if (entry.users == 0 && entry.threads.empty()) all.entries.erase(key);
      return io.status();
    }
    entry.threads.push_back(std::move(io).value());
  }
  ++entry.users;
  set.threads_.assign(entry.threads.begin(), entry.threads.begin() + count);
  set.shared_ = &entry;
  return set;
}

IoThreadSet::IoThreadSet(IoThreadSet&& other) noexcept
    : threads_(std::move(other.threads_)), shared_(std::exchange(other.shared_, nullptr)) {
  other.threads_.clear();
}

IoThreadSet& IoThreadSet::operator=(IoThreadSet&& other) noexcept {
  if (this != &other) {
    Release();
    threads_ = std::move(other.threads_);
    other.threads_.clear();
    shared_ = std::exchange(other.shared_, nullptr);
  }
  return *this;
}

void IoThreadSet::Release() {
  std::vector<std::shared_ptr<IoThread>> to_stop;
  if (shared_ == nullptr) {
    to_stop = std::move(threads_);
  } else {
    SharedThreads& all = Shared();
    std::lock_guard lock(all.mu);
    if (--shared_->users == 0) {
      to_stop = std::move(shared_->threads);
      all.entries.erase(shared_->key);
    }
    shared_ = nullptr;
  }
  threads_.clear();
  // Outside the lock: a thread runs what its connections left it before it ends.
  for (auto& io : to_stop) io->Stop();
}

}  // namespace bx::rdma
