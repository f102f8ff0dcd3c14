// libibverbs entry points for what the simnic does not implement: UD address handles, shared
// receive queues and multicast. Each fails as the man pages say a device without the feature
// fails (NULL or an errno of EOPNOTSUPP). Without them a program's call would fall through to
// the system libibverbs, which takes the simnic's context for its own and crashes.
#include <infiniband/verbs.h>

#include <cerrno>

extern "C" {

ibv_ah* ibv_create_ah(ibv_pd*, ibv_ah_attr*) {
  errno = EOPNOTSUPP;
  return nullptr;
}

ibv_ah* ibv_create_ah_from_wc(ibv_pd*, ibv_wc*, ibv_grh*, uint8_t) {
  errno = EOPNOTSUPP;
  return nullptr;
}

int ibv_init_ah_from_wc(ibv_context*, uint8_t, ibv_wc*, ibv_grh*, ibv_ah_attr*) {
  errno = EOPNOTSUPP;
  return -1;
}

int ibv_destroy_ah(ibv_ah*) {
  return EOPNOTSUPP;  // no address handle can exist
}

ibv_srq* ibv_create_srq(ibv_pd*, ibv_srq_init_attr*) {
  errno = EOPNOTSUPP;
  return nullptr;
}

int ibv_modify_srq(ibv_srq*, ibv_srq_attr*, int) {
  return EOPNOTSUPP;
}

int ibv_query_srq(ibv_srq*, ibv_srq_attr*) {
  return EOPNOTSUPP;
}

int ibv_destroy_srq(ibv_srq*) {
  return EOPNOTSUPP;
}

int ibv_attach_mcast(ibv_qp*, const ibv_gid*, uint16_t) {
  return EOPNOTSUPP;
}

int ibv_detach_mcast(ibv_qp*, const ibv_gid*, uint16_t) {
  return EOPNOTSUPP;
}

}  // extern "C"
