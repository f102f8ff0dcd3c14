// Address handles (ibv_create_ah(3), ibv_init_ah_from_wc(3)): where a UD send goes.
//   create          port 1; the address vector must be global (RoCE carries a GRH on every
//                   packet: EINVAL otherwise, as rdma-core's test_create_ah_roce expects), with
//                   a source GID index inside the GID table. InfiniBand may address by LID
//                   alone. The destination is resolved to a fabric address now, once.
//   init from wc    needs the GRH (IBV_WC_GRH and a buffer holding it): the reply path goes to
//                   the sender's GID, from the local GID the packet was sent to.
#include <endian.h>

#include <cerrno>
#include <cstring>

#include "simnic/verbs_internal.h"

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
  sim->peer_address = ResolveAddressVector(*attr);
  sim->source_gid =
      attr->is_global ? device.gid_table(attr->port_num)[attr->grh.sgid_index].gid : device.gid();
  sim->ah.context = pd->context;
  sim->ah.pd = pd;
  sim->ah.handle = uint32_t(reinterpret_cast<uintptr_t>(sim) >> 4);
  sim->protection_domain->users.fetch_add(1);
  return &sim->ah;
}

int ibv_destroy_ah(ibv_ah* ah) {
  if (ah == nullptr) return EINVAL;
  SimAh* sim = ToSim(ah);
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
  const auto& table = ToSim(context)->device->gid_table(port_num);
  uint8_t sgid_index = 0;
  while (sgid_index < table.size() &&
         std::memcmp(grh->dgid.raw, table[sgid_index].gid.raw, sizeof(grh->dgid.raw)) != 0)
    ++sgid_index;
  if (sgid_index == table.size()) {
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
  ah_attr->grh.sgid_index = sgid_index;
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
