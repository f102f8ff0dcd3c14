// OpenKvStore: a store by URL. "memory://<name>" stores live as long as the process and are
// shared by name, so the replicas of an in-process cluster (tests, `bx demo`) see one store.
#include <map>
#include <mutex>

#include "ps/coord/kv_store.h"

namespace bx::ps {

Result<std::shared_ptr<KvStore>> OpenKvStore(const std::string& url,
                                             std::chrono::milliseconds timeout) {
  static constexpr std::string_view kMemory = "memory://";
  if (url.starts_with(kMemory)) {
    static std::mutex mu;
    static auto* stores = new std::map<std::string, std::shared_ptr<KvStore>>();  // never freed
    std::lock_guard lock(mu);
    std::shared_ptr<KvStore>& store = (*stores)[url.substr(kMemory.size())];
    if (!store) store = NewMemoryKvStore();
    return store;
  }
  BX_ASSIGN_OR_RETURN(std::unique_ptr<KvStore> etcd, OpenEtcdKvStore(url, timeout));
  return std::shared_ptr<KvStore>(std::move(etcd));
}

}  // namespace bx::ps
