// libibverbs entry points for what the simnic does not implement: multicast,
// importing objects from another process's context (no kernel command fd), dma-buf memory, ECE and
// Ethernet L2 resolution. Each fails as the man pages say a device without the feature fails (NULL
// or an errno of EOPNOTSUPP). Without them a program's call would fall through to the system
// libibverbs, which takes the simnic's context for its own and crashes.
#include <infiniband/verbs.h>

#include <cerrno>

extern "C" {

int ibv_attach_mcast(ibv_qp*, const ibv_gid*, uint16_t) {
  return EOPNOTSUPP;
}

int ibv_detach_mcast(ibv_qp*, const ibv_gid*, uint16_t) {
  return EOPNOTSUPP;
}

ibv_context* ibv_import_device(int) {
  errno = EOPNOTSUPP;
  return nullptr;
}

ibv_pd* ibv_import_pd(ibv_context*, uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}

ibv_mr* ibv_import_mr(ibv_pd*, uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}

ibv_dm* ibv_import_dm(ibv_context*, uint32_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}

// Nothing can have been imported, so there is nothing to release.
void ibv_unimport_pd(ibv_pd*) {}
void ibv_unimport_mr(ibv_mr*) {}
void ibv_unimport_dm(ibv_dm*) {}

ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int, int) {
  errno = EOPNOTSUPP;
  return nullptr;
}

int ibv_set_ece(ibv_qp*, ibv_ece*) {
  return EOPNOTSUPP;
}

int ibv_query_ece(ibv_qp*, ibv_ece*) {
  return EOPNOTSUPP;
}

int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, uint8_t*, uint16_t*) {
  return EOPNOTSUPP;  // no Ethernet device behind the port
}

}  // extern "C"
