// The libibverbs string helpers, with the wording rdma-core uses so logs read the same.
#include <infiniband/verbs.h>

extern "C" {

const char* ibv_wc_status_str(enum ibv_wc_status status) {
  static const char* const kNames[] = {"success",
                                       "local length error",
                                       "local QP operation error",
                                       "local EE context operation error",
                                       "local protection error",
                                       "Work Request Flushed Error",
                                       "memory management operation error",
                                       "bad response error",
                                       "local access error",
                                       "remote invalid request error",
                                       "remote access error",
                                       "remote operation error",
                                       "transport retry counter exceeded",
                                       "RNR retry counter exceeded",
                                       "local RDD violation error",
                                       "remote invalid RD request",
                                       "aborted error",
                                       "invalid EE context number",
                                       "invalid EE context state",
                                       "fatal error",
                                       "response timeout error",
                                       "general error",
                                       "TM error",
                                       "TM rendezvous error"};
  unsigned s = unsigned(status);
  return s < sizeof(kNames) / sizeof(kNames[0]) ? kNames[s] : "unknown";
}

const char* ibv_port_state_str(enum ibv_port_state state) {
  static const char* const kNames[] = {"PORT_NOP",   "PORT_DOWN",   "PORT_INIT",
                                       "PORT_ARMED", "PORT_ACTIVE", "PORT_ACTIVE_DEFER"};
  unsigned s = unsigned(state);
  return s < 6 ? kNames[s] : "invalid state";
}

const char* ibv_node_type_str(enum ibv_node_type type) {
  switch (type) {
    case IBV_NODE_CA:
      return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH:
      return "InfiniBand switch";
    case IBV_NODE_ROUTER:
      return "InfiniBand router";
    case IBV_NODE_RNIC:
      return "iWARP NIC";
    default:
      return "unknown";
  }
}

const char* ibv_event_type_str(enum ibv_event_type event) {
  static const char* const kNames[] = {"CQ error",
                                       "local work queue catastrophic error",
                                       "invalid request local work queue error",
                                       "local access violation work queue error",
                                       "communication established",
                                       "send queue drained",
                                       "path migrated",
                                       "path migration request error",
                                       "local catastrophic error",
                                       "port active",
                                       "port error",
                                       "LID change",
                                       "P_Key change",
                                       "SM change",
                                       "SRQ catastrophic error",
                                       "SRQ limit reached",
                                       "last WQE reached",
                                       "client reregistration",
                                       "GID table change",
                                       "WQ fatal"};
  unsigned e = unsigned(event);
  return e < sizeof(kNames) / sizeof(kNames[0]) ? kNames[e] : "unknown";
}

}  // extern "C"
