// rdma_getaddrinfo and rdma_freeaddrinfo: the system's getaddrinfo for IPv4 and IPv6 names,
// every address then reached through the simnic (RC over RDMA_PS_TCP unless the hints say
// otherwise).
#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "simnic/cm/cm_internal.h"

namespace {

sockaddr* CopyAddress(const sockaddr* address, socklen_t length) {
  auto* copy = static_cast<sockaddr*>(std::calloc(1, sizeof(sockaddr_storage)));
  if (copy != nullptr) std::memcpy(copy, address, length);
  return copy;
}

}  // namespace

extern "C" {

void rdma_freeaddrinfo(rdma_addrinfo* info) {
  while (info != nullptr) {
    rdma_addrinfo* next = info->ai_next;
    std::free(info->ai_src_addr);
    std::free(info->ai_dst_addr);
    std::free(info->ai_src_canonname);
    std::free(info->ai_dst_canonname);
    std::free(info->ai_route);
    std::free(info->ai_connect);
    std::free(info);
    info = next;
  }
}

int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                     rdma_addrinfo** out) {
  if (out == nullptr) {
    errno = EINVAL;
    return -1;
  }
  const int flags = hints ? hints->ai_flags : 0;
  if (node == nullptr && service == nullptr) {
    // Addresses given in the hints themselves (libfabric's verbs provider asks this way).
    if (hints == nullptr || (hints->ai_src_addr == nullptr && hints->ai_dst_addr == nullptr)) {
      errno = EINVAL;
      return -1;
    }
    auto* info = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
    info->ai_flags = flags;
    const sockaddr* any = hints->ai_dst_addr ? hints->ai_dst_addr : hints->ai_src_addr;
    info->ai_family = any->sa_family;
    info->ai_qp_type = hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
    info->ai_port_space = hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
    if (hints->ai_src_addr) {
      info->ai_src_addr = CopyAddress(hints->ai_src_addr, hints->ai_src_len);
      info->ai_src_len = hints->ai_src_len;
    }
    if (hints->ai_dst_addr) {
      info->ai_dst_addr = CopyAddress(hints->ai_dst_addr, hints->ai_dst_len);
      info->ai_dst_len = hints->ai_dst_len;
    }
    *out = info;
    return 0;
  }
  addrinfo ask{};
  ask.ai_family = hints && hints->ai_family ? hints->ai_family : AF_UNSPEC;
  ask.ai_socktype = SOCK_STREAM;
  if (flags & RAI_PASSIVE) ask.ai_flags |= AI_PASSIVE;
  if (flags & RAI_NUMERICHOST) ask.ai_flags |= AI_NUMERICHOST;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(node, service, &ask, &found); rc != 0) {
    errno = rc == EAI_SYSTEM ? errno : ENOENT;
    return rc;  // librdmacm returns getaddrinfo's code too
  }
  // The first IPv4 or IPv6 address (an IPv4 one first, as most tools expect).
  const addrinfo* chosen = nullptr;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      chosen = a;
      break;
    }
    if (a->ai_family == AF_INET6 && chosen == nullptr) chosen = a;
  }
  if (chosen == nullptr) {
    freeaddrinfo(found);
    errno = EAFNOSUPPORT;
    return EAI_FAMILY;
  }
  auto* info = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
  info->ai_flags = flags;
  info->ai_family = chosen->ai_family;
  info->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
  info->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
  if (flags & RAI_PASSIVE) {
    info->ai_src_addr = CopyAddress(chosen->ai_addr, chosen->ai_addrlen);
    info->ai_src_len = chosen->ai_addrlen;
  } else {
    info->ai_dst_addr = CopyAddress(chosen->ai_addr, chosen->ai_addrlen);
    info->ai_dst_len = chosen->ai_addrlen;
    if (hints && hints->ai_src_addr) {
      info->ai_src_addr = CopyAddress(hints->ai_src_addr, hints->ai_src_len);
      info->ai_src_len = hints->ai_src_len;
    }
  }
  freeaddrinfo(found);
  *out = info;
  return 0;
}

}  // extern "C"
