// Parameters of the fabric simulation. Defaults follow the HPCC ns-3 setup and the DCQCN paper
// where those give a value; docs/SIMULATION.md explains each choice.
#pragma once

#include <cstdint>
#include <string>

namespace bx::sim {

using TimeNs = int64_t;
constexpr TimeNs kMicrosecond = 1000;
constexpr TimeNs kMillisecond = 1000 * 1000;
constexpr TimeNs kSecond = 1000 * 1000 * 1000;

struct FabricConfig {
  uint32_t hosts_per_leaf = 32;
  uint32_t spines = 8;  // 32 x 25G down = 8 x 100G up: no oversubscription
  double host_gbps = 25;
  double uplink_gbps = 100;
  TimeNs link_delay_ns = 1 * kMicrosecond;
  uint64_t buffer_bytes = 32ull << 20;  // shared buffer per switch
  uint32_t reserve_bytes = 4 << 10;     // per ingress port-queue
  uint32_t resume_offset_bytes = 3 << 10;
  uint32_t pfc_shift = 3;  // dynamic threshold alpha = 1/8
  // Headroom per port = headroom_rtts x rate x link delay + headroom_cells x (MTU + header): the
  // issue's 3 x rate x delay, plus two whole cells, because at 25G a 4 KB cell (1.33 us) takes
  // longer than the link delay and the upstream finishes the cell it has started.
  double headroom_rtts = 3;
  uint32_t headroom_cells = 2;
  uint32_t mtu_bytes = 4096;    // RoCE payload per cell
  uint32_t header_bytes = 64;   // Ethernet+IP+UDP+BTH+ICRC+FCS, rounded
  uint32_t control_bytes = 64;  // ACK, CNP, and SEND control messages on the wire
  // RED at dequeue, for a 25G port; scaled linearly with port rate (as HPCC's configs do).
  uint64_t ecn_kmin_bytes = 100000;
  uint64_t ecn_kmax_bytes = 400000;
  double ecn_pmax = 0.2;
  // Mark on arrival against the queue ahead (RED's and ns-3's place) instead of at dequeue. Only
  // `bx sim validate` uses it, to show how much of the gap to ns-3 the marking point explains.
  bool ecn_at_enqueue = false;
  // Switches queue TCP's ACKs with its data (one FIFO, as ns-3 and a single-class switch do)
  // instead of in the strict-priority control queue that RDMA's ACKs and CNPs use.
  bool tcp_acks_with_data = false;
  // true: host h on leaf h % leaves (servers and trainers mixed in every rack);
  // false: hosts fill racks in order (servers packed into the first racks).
  bool interleave_hosts = true;
  // Speed only: a port's serialisation end is scheduled only when something waits for the port
  // (network.h). false schedules every one; the results are the same either way (tested).
  bool skip_idle_port_events = true;
};

// Sets RED as stated for a port of `gbps`: FabricConfig holds it per 25G, and Network scales it by
// each port's rate.
inline void SetRedAtRate(FabricConfig& fabric, double gbps, uint64_t kmin_bytes,
                         uint64_t kmax_bytes, double pmax) {
  fabric.ecn_kmin_bytes = uint64_t(double(kmin_bytes) * 25 / gbps);
  fabric.ecn_kmax_bytes = uint64_t(double(kmax_bytes) * 25 / gbps);
  fabric.ecn_pmax = pmax;
}

struct DcqcnConfig {
  bool enabled = true;
  double g = 1.0 / 256;
  TimeNs alpha_interval_ns = 1 * kMicrosecond;
  TimeNs decrease_interval_ns = 4 * kMicrosecond;
  TimeNs increase_interval_ns = 300 * kMicrosecond;
  uint32_t fast_recovery_steps = 1;  // F
  double rate_ai_mbps = 5;           // per 25G of line rate
  double rate_hai_mbps = 50;         // per 25G of line rate
  double min_rate_mbps = 1000;
  TimeNs cnp_interval_ns = 50 * kMicrosecond;  // at most one CNP per QP per interval
};

// The simulated engine: the same knobs as bx::engine::EngineConfig.
struct EngineModelConfig {
  uint32_t send_queue_depth = 32;
  uint32_t recv_queue_depth = 64;
  uint32_t eager_limit = 16 << 10;
  uint32_t fragment_bytes = 64 << 10;
  uint64_t window_bytes = 0;  // 0 = window off
  // When the window is on, cut WRITE fragments to at most the window (see SIMULATION.md: with
  // one message per QP per iteration a window larger than a fragment never binds).
  bool fragment_fits_window = true;
};

struct TcpConfig {
  uint32_t mss_bytes = 4096;  // same cell as RoCE so the fabric sees the same packet count
  uint32_t initial_window_segments = 10;
  double dctcp_g = 1.0 / 16;
  TimeNs min_rto_ns = 1 * kMillisecond;
  // Kernel stack cost per message, on each side (send and receive), added as latency.
  TimeNs host_cost_ns = 5 * kMicrosecond;
  // Grow cwnd only while it is what limits the sender, as Linux does (tcp_is_cwnd_limited): in
  // slow start while cwnd < 2 x the most bytes in flight this window, later only in a window in
  // which the sender ran out of cwnd. Off (the default, as ns-3 3.37): every unmarked ACK grows
  // cwnd, so a flow that its NIC limits builds a window it cannot use (docs/SIMULATION.md).
  bool grow_only_when_cwnd_limited = false;
};

struct WorkloadConfig {
  uint32_t servers = 124;
  uint32_t trainers = 346;
  double mean_message_bytes = 20000;
  double p99_message_bytes = 50000;
  uint32_t fetch_request_bytes = 64;
  TimeNs compute_ns = 1 * kMillisecond;
  double compute_jitter = 0.1;  // uniform +-10% around compute_ns
  bool incast = true;           // false: trainers stay idle (a baseline for the victims)
  // Victim traffic (docs/SIMULATION.md, "Congestion spreading"); none while victim_clients is 0.
  // Cold servers receive only victim traffic. Each victim client, every victim_interval_ns (+-50%
  // uniform jitter, open loop), pushes one lognormal message to a random cold server and fetches
  // one (64 B request, lognormal response) from a random cold server, or from a random hot one if
  // victim_fetch_hot or there are no cold servers (then it only fetches).
  uint32_t victim_servers = 0;
  uint32_t victim_clients = 0;
  TimeNs victim_interval_ns = 100 * kMicrosecond;
  bool victim_fetch_hot = false;

  // Hosts in the order the fabric places them: servers, trainers, cold servers, victim clients.
  uint32_t hosts() const { return servers + trainers + victim_servers + victim_clients; }
  uint32_t first_victim_client() const { return servers + trainers + victim_servers; }
  // Victim fetches go to the parameter servers when asked to or when there is no cold server.
  bool victim_fetches_hot() const { return victim_fetch_hot || victim_servers == 0; }
};

enum class TransportKind { kRdma, kTcp };

struct SimConfig {
  FabricConfig fabric;
  DcqcnConfig dcqcn;
  EngineModelConfig engine;
  TcpConfig tcp;
  WorkloadConfig workload;
  TransportKind transport = TransportKind::kRdma;
  TimeNs duration_ns = 200 * kMillisecond;
  uint64_t seed = 1;
  // Partitions run in parallel, one thread each (RDMA only; at most one per leaf). Speed only:
  // every result is the same for any value (simulation.h).
  uint32_t threads = 1;
};

}  // namespace bx::sim
