// Address handles (ibv_create_ah(3), ibv_init_ah_from_wc(3)). The simnic has no UD QPs, so no
// work request uses one; they exist so that programs that build a path before choosing a QP
// type, or check one, find what a RoCE device gives them:
//   create          port 1; the address vector must be global (RoCE carries a GRH on every
//                   packet: EINVAL otherwise, as rdma-core's test_create_ah_roce expects), with
//                   a source GID index inside the GID table. The attributes are kept.
//   init from wc    needs the GRH (IBV_WC_GRH and a buffer holding it): the reply path goes to
//                   the sender's GID, from the local GID the packet was sent to.
#include <endian.h>

#include <cerrno>
#include <cstring>

#include "simnic/verbs_internal.h"

namespace bx::simnic {
namespace {

struct SimAh {
  ibv_ah ah;
  ibv_ah_attr attr;
  SimPd* protection_domain;
};

}  // namespace
}  // namespace bx::simnic

using namespace bx::simnic;

extern "C" {

ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  if (pd == nullptr || attr == nullptr || !ToSim(pd->context)->device->PortExists(attr->port_num)) {
    errno = EINVAL;
    return nullptr;
  }
  // RoCE needs a GRH with a valid source GID; InfiniBand may address by LID alone.
  const Device& device = *ToSim(pd->context)->device;
  const bool lid_only =
      device.profile().link_layer == IBV_LINK_LAYER_INFINIBAND && !attr->is_global;
  if (!lid_only &&
      (!attr->is_global || attr->grh.sgid_index >= device.gid_table(attr->port_num).size())) {
    errno = EINVAL;
    return nullptr;
  }
  auto* sim = new SimAh{};
  sim->attr = *attr;
  sim->protection_domain = Protection(pd);
  sim->ah.context = pd->context;
  sim->ah.pd = pd;
  sim->ah.handle = uint32_t(reinterpret_cast<uintptr_t>(sim) >> 4);
  sim->protection_domain->users.fetch_add(1);
  return &sim->ah;
}

int ibv_destroy_ah(ibv_ah* ah) {
  if (ah == nullptr) return EINVAL;
  auto* sim = reinterpret_cast<SimAh*>(ah);
  sim->protection_domain->users.fetch_sub(1);
  delete sim;
  return 0;
}

int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc, ibv_grh* grh,
                        ibv_ah_attr* ah_attr) {
  if (context == nullptr || wc == nullptr || ah_attr == nullptr ||
      !ToSim(context)->device->PortExists(port_num) || (wc->wc_flags & IBV_WC_GRH) == 0 ||
      grh == nullptr) {
    errno = EINVAL;  // RoCE needs the GRH to find the way back
    return -1;
  }
  // The packet was sent to one of our GIDs: the reply leaves from it.
  const ibv_gid& ours = ToSim(context)->device->gid();
  if (std::memcmp(grh->dgid.raw, ours.raw, sizeof(ours.raw)) != 0) {
    errno = ENOENT;
    return -1;
  }
  std::memset(ah_attr, 0, sizeof(*ah_attr));
  ah_attr->dlid = wc->slid;
  ah_attr->sl = wc->sl;
  ah_attr->src_path_bits = wc->dlid_path_bits;
  ah_attr->port_num = port_num;
  ah_attr->is_global = 1;
  ah_attr->grh.dgid = grh->sgid;
  const uint32_t version = be32toh(grh->version_tclass_flow);
  ah_attr->grh.flow_label = version & 0xfffff;
  ah_attr->grh.traffic_class = uint8_t((version >> 20) & 0xff);
  ah_attr->grh.hop_limit = 0xff;
  ah_attr->grh.sgid_index = 0;
  return 0;
}

ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
  ibv_ah_attr attr;
  if (pd == nullptr || ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr) != 0) {
    if (pd == nullptr) errno = EINVAL;
    return nullptr;
  }
  return ibv_create_ah(pd, &attr);
}

}  // extern "C"
