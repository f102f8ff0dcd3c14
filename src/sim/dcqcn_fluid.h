// DCQCN checked against its fluid model: N identical long RDMA flows into one
// 25G port, in the packet simulator (rdma_stack.h and dcqcn.h, the code every `bx sim` run uses)
// and in a fluid model of the same mechanism, written the way the DCQCN paper (Zhu et al.,
// SIGCOMM 2015, section 5) writes its own: each flow's current rate RC, target rate RT and alpha
// as continuous variables, moved by the expected rates of the events that change them, with the
// RED marking probability seen one feedback delay late. ns-3 has no DCQCN, so this is the
// independent check of the congestion control the way `bx sim validate` is of TCP.
//
// The fluid model follows the variant we simulate (HPCC's Mellanox DCQCN: a CNP at most once per
// cnp_interval per QP, alpha ticks of alpha_interval, a cut at the next decrease check, one
// increase timer restarted at every cut, fast recovery then additive then hyper increase), not
// the paper's original (byte counter, 55 us alpha timer), whose published figures use other
// parameters. Its equations, with p the marking probability and R = RC in cells per second:
//   CNPs (per flow)   lambda = p R / (1 + p R tau_cnp)        (a renewal: tau_cnp, then a mark)
//   alpha             dA/dt  = g lambda - g A / tau_alpha      (a tick sees a CNP w.p. lambda tau)
//   increase events   with x = lambda T: fast recovery lambda e^-x, additive lambda e^-2x,
//                     hyper lambda e^-3x / (1 - e^-x)         (Poisson cuts, timer T after each)
//   dRC/dt = -lambda RC A / 2 + (all increases) (RT - RC) / 2 + (additive R_AI + hyper R_HAI) / 2
//   dRT/dt = additive R_AI + hyper R_HAI - lambda e^-x (RT - RC)   (a cut after an increase)
//   dq/dt  = N RC - C   (q >= 0)
// docs/SIMULATION.md ("DCQCN against its fluid model") derives each term and compares the two.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/config.h"

namespace bx::sim {

struct DcqcnFlowsScenario {
  std::string name;
  uint32_t flows = 2;
  double gbps = 25;  // every link
  TimeNs link_delay_ns = 1 * kMicrosecond;
  // RED at the bottleneck (the simulator's defaults; stated for a 25G port).
  uint64_t ecn_kmin_bytes = 100000;
  uint64_t ecn_kmax_bytes = 400000;
  double ecn_pmax = 0.2;
  DcqcnConfig dcqcn;
  // The packet model's switch buffer: large enough that PFC never pauses, as the fluid model
  // has no PFC (the simulator's default 32 MB pauses from 8 flows on).
  uint64_t buffer_bytes = 1ull << 30;
  TimeNs warmup_ns = 5 * kMillisecond;     // measured after this
  TimeNs duration_ns = 25 * kMillisecond;  // in all
  TimeNs trace_ns = 50 * kMicrosecond;
};

// What either model says about the measured stretch [warmup, duration).
struct DcqcnFlowsResult {
  double queue_mean_bytes = 0;  // the bottleneck's data queue
  double queue_sd_bytes = 0;    // its standard deviation: how much it swings
  double queue_empty = 0;       // fraction of the time it is empty (the link may idle)
  double cnps_per_flow_ms = 0;  // CNPs each flow receives per millisecond
  uint64_t pfc_pauses = 0;      // packet model only
  // The queue over the whole run, every trace_ns (for plots).
  std::vector<double> queue_trace_bytes;
  // One flow's current rate over the whole run, every trace_ns (the packet model's first flow).
  std::vector<double> rate_trace_gbps;
};

// The paper-style scenarios: 2, 4, 8 and 16 flows at the simulator's defaults.
std::vector<DcqcnFlowsScenario> DcqcnFlowsScenarios();

// How the fluid model times the increase events, which a timer restarted at every cut drives.
enum class DcqcnFluidTimer {
  // As the DCQCN paper's model does: cuts a Poisson process at the current CNP rate, so each
  // stage's increases are a fixed fraction of it.
  kStationary,
  // From the run's own history: a flow's timer fires k periods after its last cut, with no CNP
  // since (no mark once tau_cnp has passed). Keeps the recovery that follows a burst of cuts.
  // Flows cut longer ago than the first hyper increase are counted together, one increase per
  // period each.
  kRemembered,
};

// The fluid model, integrated with explicit Euler steps of `step_ns`.
DcqcnFlowsResult SolveDcqcnFluid(const DcqcnFlowsScenario& scenario, DcqcnFluidTimer timer,
                                 TimeNs step_ns = 10);

// The packet model: each flow one message far larger than the run, from host i + 1 to host 0 on
// one switch, window off, DCQCN on.
DcqcnFlowsResult SimulateDcqcnFlows(const DcqcnFlowsScenario& scenario, uint64_t seed = 1);

}  // namespace bx::sim
