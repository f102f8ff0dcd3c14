#include "simnic/fabric.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "simnic/device_sysfs.h"
#include "simnic/ib_timers.h"

namespace bx::simnic {
namespace {

int EnvInt(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  int n = std::atoi(v);
  return std::clamp(n, lo, hi);
}

// One inline service in this many is timed for the hardware CPU figure (HardwareCpuNs).
constexpr uint64_t kInlineCpuSample = 64;

inline void CpuRelax() {
  __builtin_ia32_pause();
}

// A yield that kept the hardware thread off its core this long lost it to another busy thread
// (a scheduler slice is a millisecond or more); it then sleeps between doorbells for a while.
constexpr uint64_t kSlowYieldNs = 500'000;
constexpr uint64_t kContendedNs = 20'000'000;

// While the hardware thread is awake, a doorbell serviced inline leaves requests larger than this
// to it (measured with bx bench rpc, 16 KB x 64 outstanding, idle: 4 KiB 179-211k calls/s, 32 KiB
// 109-127k).
constexpr uint64_t kInlineBytesBesideThread = 4096;

// BX_SIM_CPU_REPORT=FILE: at exit, a line "pid P hardware_cpu_ns N" is appended to FILE, so that
// a benchmark can take the simulated NIC's CPU out of an outside program's (ucx_perftest's) own.
void ReportHardwareCpuAtExit() {
  const char* path = std::getenv("BX_SIM_CPU_REPORT");
  if (path == nullptr || *path == '\0') return;
  if (FILE* report = std::fopen(path, "a")) {
    std::fprintf(report, "pid %d hardware_cpu_ns %llu\n", int(getpid()),
                 static_cast<unsigned long long>(Fabric::Get().HardwareCpuNs()));
    std::fclose(report);
  }
}

}  // namespace

Fabric& Fabric::Get() {
  // Never destroyed: the hardware thread may outlive static destructors at exit.
  static Fabric* fabric = new Fabric();
  return *fabric;
}

Fabric::Fabric() : pid_(uint32_t(getpid())) {
  int count = EnvInt("BX_SIM_DEVICES", 2, 1, 64);
  for (int i = 0; i < count; ++i)
    devices_.push_back(std::make_unique<Device>(i, pid_, ProfileForDevice(i)));
  WriteSysfs(pid_, devices());
  // How long the hardware thread keeps polling after its last work before it sleeps. Polling keeps
  // post-to-completion latency low; sleeping gives the two cores of a small machine back.
  spin_ns_ = uint64_t(EnvInt("BX_SIM_SPIN_US", 50, 0, 1'000'000)) * 1000;
  // A doorbell rung while the hardware is idle is serviced by the ringing thread, as if the NIC
  // had picked it up at once: no wake-up of the hardware thread, which on a host whose cores are
  // all busy waits for a scheduler slice. BX_SIM_INLINE=0: always the thread.
  inline_service_ = EnvInt("BX_SIM_INLINE", 1, 0, 1) == 1;
  // A doorbell serviced inline moves at most this much payload per QP on the ringing thread;
  // larger requests go to the hardware thread, which copies them while the application goes on
  // (as a NIC's DMA engines do).
  inline_bytes_ = uint64_t(EnvInt("BX_SIM_INLINE_BYTES", 32 << 10, 0, 1 << 30));
}

std::vector<Device*> Fabric::devices() const {
  std::vector<Device*> out;
  for (auto& d : devices_) out.push_back(d.get());
  return out;
}

Device* Fabric::device(uint32_t index) const {
  return index < devices_.size() ? devices_[index].get() : nullptr;
}

void Fabric::Start() {
  std::call_once(started_, [this] {
    if (EnvInt("BX_SIM_IPC", 1, 0, 1) == 1) {
      ipc_ = std::make_unique<IpcLink>(pid_, [this] { WakeHardware(); });
    }
    thread_ = std::thread([this] { Run(); });
    thread_.detach();
    while (!hardware_cpu_clock_.captured()) std::this_thread::yield();
    if (const char* report = std::getenv("BX_SIM_CPU_REPORT"); report != nullptr && *report != 0) {
      std::atexit(ReportHardwareCpuAtExit);
    }
  });
}

Fabric::ControlLock::ControlLock(Fabric& f) : fabric_(f) {
  fabric_.control_waiting_.fetch_add(1, std::memory_order_acq_rel);
  fabric_.hw_mu_.lock();
  fabric_.control_waiting_.fetch_sub(1, std::memory_order_acq_rel);
}

Fabric::ControlLock::~ControlLock() {
  fabric_.hw_mu_.unlock();
  // A doorbell rung meanwhile found the lock taken and left its QP queued for whoever held it;
  // the hardware thread or an inline poster would look again, a control verb does not.
  fabric_.WakeForPending(/*only_if_queued=*/true);
}

void Fabric::Doorbell(SimQp* qp) {
  qp->device->counters().doorbells.fetch_add(1, std::memory_order_relaxed);
  // Only post_send and post_recv ring here, on application threads, never under hw_mu_: the
  // hardware's own paths (FailQp, vanish) use Enqueue, so the try_lock below is never its
  // holder's. (No thread_local flag: LeakSanitizer's tracer crashes on a dlopened library's TLS.)
  Enqueue(qp, /*wake=*/!inline_service_);
  if (inline_service_) ServiceInline();
}

void Fabric::ServiceInline() {
  for (;;) {
    // A control operation waiting for the lock goes first; the thread takes the QPs after it.
    if (control_waiting_.load(std::memory_order_acquire) > 0) return WakeForPending();
    std::unique_lock hw(hw_mu_, std::try_to_lock);
    // Whoever holds the lock looks at the ready list again after releasing it (below, or the
    // thread's loop, which sees doorbell_seq_ move), so a QP queued meanwhile is not stranded.
    if (!hw.owns_lock()) return;
    std::vector<SimQp*> batch;
    uint64_t version, budget;
    {
      std::lock_guard lock(ready_mu_);
      batch.swap(ready_);
      version = ready_version_;
      // An awake hardware thread copies large requests in parallel with this one; a sleeping one
      // would first have to be woken, which on a busy host costs a scheduler slice.
      budget = sleeping_ ? inline_bytes_ : std::min(inline_bytes_, kInlineBytesBesideThread);
    }
    const bool timed =
        inline_services_.fetch_add(1, std::memory_order_relaxed) % kInlineCpuSample == 0;
    const uint64_t start = timed ? ThreadCpuClock::CallingThreadNs() : 0;
    const size_t timers = timers_.size();
    ServiceBatch(batch, budget);
    const bool new_timer = timers_.size() > timers;
    if (timed) {
      inline_ns_.fetch_add((ThreadCpuClock::CallingThreadNs() - start) * kInlineCpuSample,
                           std::memory_order_relaxed);
    }
    hw.unlock();
    bool queued_meanwhile, left_over;
    {
      std::lock_guard lock(ready_mu_);
      queued_meanwhile = ready_version_ != version;
      left_over = !ready_.empty();
    }
    // What is left (a large request, an RNR or transport timer) is the hardware thread's.
    if (new_timer || (left_over && !queued_meanwhile)) WakeForPending();
    if (!queued_meanwhile) return;
  }
}

void Fabric::WakeForPending(bool only_if_queued) {
  std::lock_guard lock(ready_mu_);
  if (only_if_queued && ready_.empty()) return;
  if (sleeping_) ready_cv_.notify_one();
  doorbell_seq_.fetch_add(1, std::memory_order_release);
}

void Fabric::Enqueue(SimQp* qp, bool wake) {
  if (!qp->queued.exchange(true, std::memory_order_seq_cst)) {
    std::lock_guard lock(ready_mu_);
    ready_.push_back(qp);
    ++ready_version_;
    if (wake && sleeping_) ready_cv_.notify_one();
  }
  doorbell_seq_.fetch_add(1, std::memory_order_release);
}

void Fabric::WakeHardware() {
  std::lock_guard lock(ready_mu_);
  ipc_wake_ = true;
  if (sleeping_) ready_cv_.notify_one();
  doorbell_seq_.fetch_add(1, std::memory_order_release);
}

void Fabric::FailQp(SimQp* qp, bool fatal_event) {
  if (qp->SetErrorState() && fatal_event) PostAsyncEvent(qp->device, IBV_EVENT_QP_FATAL, &qp->qp);
  Enqueue(qp);
}

void Fabric::SettleArrivals(const SimQp* qp) {
  // Only a request sent to another process and not yet completed can have an answer on the way.
  if (!ipc_ || qp->state.load(std::memory_order_acquire) != IBV_QPS_RTS ||
      qp->sq_hw_done >= qp->sq_hw_next)
    return;
  ipc_->Settle();
  HandleArrivals();
}

bool Fabric::HandleArrivals() {
  std::vector<IpcFrame> frames;
  std::vector<uint32_t> lost;
  ipc_->Drain(&frames, &lost);
  for (IpcFrame& f : frames) OnIpcFrame(f);
  for (uint32_t pid : lost) OnIpcPeerLost(pid);
  return !frames.empty() || !lost.empty();
}

void Fabric::ForgetQp(SimQp* qp) {
  qp->destroyed = true;
  {
    std::lock_guard lock(ready_mu_);
    std::erase(ready_, qp);
  }
  // Like mlx5's CQ clean on destroy: completions of a destroyed QP are never returned.
  for (ibv_cq* c : {qp->qp.send_cq, qp->qp.recv_cq}) {
    SimCq* cq = ToSim(c);
    while (cq->poll_lock.test_and_set(std::memory_order_acquire)) CpuRelax();
    for (uint64_t i = cq->head.load(); i < cq->tail; ++i) {
      CqEntry& e = cq->ring[i % cq->ring.size()];
      if (e.qp != qp) continue;
      // A receive CQE never to be polled gives its SRQ WQE back to the count.
      if (!e.is_send && qp->srq != nullptr) qp->srq->used.fetch_sub(1, std::memory_order_acq_rel);
      e.qp = nullptr;
    }
    cq->poll_lock.clear(std::memory_order_release);
  }
}

void Fabric::PostAsyncEvent(SimContext* context, ibv_event_type type, void* object) {
  AsyncRecord record{type, object};
  // The pipe is non-blocking: an application that never reads async events loses the overflow,
  // as the kernel's async event queue does.
  ssize_t n = write(context->async_pipe[1], &record, sizeof(record));
  (void)n;
}

void Fabric::PostAsyncEvent(Device* device, ibv_event_type type, void* object) {
  if (type == IBV_EVENT_PORT_ACTIVE || type == IBV_EVENT_PORT_ERR) {
    for (SimContext* c : device->Contexts()) PostAsyncEvent(c, type, object);
    return;
  }
  // QP and CQ events go to the context that owns the object.
  ibv_context* owner = nullptr;
  if (type == IBV_EVENT_CQ_ERR) {
    owner = static_cast<ibv_cq*>(object)->context;
  } else {
    owner = static_cast<ibv_qp*>(object)->context;
  }
  PostAsyncEvent(ToSim(owner), type, object);
}

bool Fabric::PushCompletion(SimCq* cq, const ibv_wc& wc, SimQp* qp, uint64_t retire_up_to,
                            bool is_send, bool solicited) {
  if (cq->broken.load(std::memory_order_relaxed)) return false;
  uint64_t head = cq->head.load(std::memory_order_acquire);
  if (cq->tail - head >= uint64_t(cq->capacity)) {
    cq->broken.store(true, std::memory_order_release);
    qp->device->counters().cq_overruns.fetch_add(1, std::memory_order_relaxed);
    PostAsyncEvent(ToSim(cq->cq.context), IBV_EVENT_CQ_ERR, &cq->cq);
    return false;
  }
  CqEntry& e = cq->ring[cq->tail % cq->ring.size()];
  e.wc = wc;
  e.qp = qp;
  e.retire_up_to = retire_up_to;
  e.is_send = is_send;
  // Store-then-load against ReqNotifyCq (Dekker): we store the CQE and load `armed`, it stores
  // `armed` and the poller then loads the CQE. Unless all four are seq_cst, both loads can see
  // the old values (a store still in a store buffer) and the event is lost. (Not a standalone
  // fence: TSan does not model those, and GCC refuses them under -fsanitize=thread.)
  e.sequence.store(cq->tail + 1, std::memory_order_seq_cst);
  ++cq->tail;
  int mode = cq->armed.load(std::memory_order_seq_cst);
  if (mode != 0 && (mode == 1 || solicited || wc.status != IBV_WC_SUCCESS) &&
      cq->armed.exchange(0, std::memory_order_acq_rel) != 0 && cq->cq.channel != nullptr) {
    auto* channel = reinterpret_cast<SimChannel*>(cq->cq.channel);
    ChannelEvent event{cq, cq->serial};  // one write below PIPE_BUF: never interleaved
    ssize_t n = write(channel->write_fd, &event, sizeof(event));
    (void)n;
  }
  return true;
}

uint64_t Fabric::HardwareCpuNs() const {
  // Inline work is sampled: one service in kInlineCpuSample is timed by the ringing thread's CPU
  // clock and counted kInlineCpuSample times. It was steady time around every service, which on
  // a host with more busy threads than cores counted the time a thread sat preempted
  // mid-request as hardware work (48 processes on 2 cores: the simnic charged more CPU than all
  // of them used); timing every service by the CPU clock (a system call of microseconds on this
  // project's VMs) halved `bx bench rpc`'s 64 B x 1 rate.
  return hardware_cpu_clock_.Ns() + (ipc_ ? ipc_->ThreadCpuNs() : 0) +
         inline_ns_.load(std::memory_order_relaxed);
}

void Fabric::Run() {
  pthread_setname_np(pthread_self(), "bxsim-hw");
  hardware_cpu_clock_.CaptureCurrentThread();

  uint64_t last_work = NowNs();
  uint64_t contended_until = 0;  // no polling before this: see below
  for (;;) {
    // A control operation waiting for the lock goes first.
    while (control_waiting_.load(std::memory_order_acquire) > 0) std::this_thread::yield();
    const uint64_t seen = doorbell_seq_.load(std::memory_order_acquire);
    bool worked;
    uint64_t timer_at;
    {
      // Held only while working: a doorbell rung while this thread polls or sleeps finds the
      // lock free and is serviced inline.
      std::lock_guard hw(hw_mu_);
      worked = RunOnce();
      timer_at = timers_.empty() ? 0 : timers_.top().at_ns;
    }
    if (worked) {
      last_work = NowNs();
      continue;
    }
    // Nothing to do: poll for new work (without the lock) for a while, then sleep. Every source of
    // work (a doorbell left to this thread, frames from another process) advances doorbell_seq_.
    while (doorbell_seq_.load(std::memory_order_acquire) == seen) {
      const uint64_t now = NowNs();
      if (timer_at != 0 && now >= timer_at) break;
      const bool timer_soon = timer_at != 0 && timer_at <= now + spin_ns_;
      if ((now - last_work >= spin_ns_ || now < contended_until) && !timer_soon) {
        IdleWait(seen, timer_at);
        last_work = NowNs();
        break;
      }
      // Poll, but give the core away when another thread wants it: on a small machine the
      // thread that will ring the next doorbell may be waiting for this very core. A yield
      // that cost a scheduler slice means busy threads share the core: a doorbell rung
      // meanwhile would wait for the slice, so sleep (a doorbell wakes a sleeping NIC at once)
      // until the contention has been gone a while.
      std::this_thread::yield();
      const uint64_t after = NowNs();
      if (after - now > kSlowYieldNs) contended_until = after + kContendedNs;
    }
  }
}

void Fabric::IdleWait(uint64_t seen, uint64_t timer_at) {
  std::unique_lock lock(ready_mu_);
  auto wake = [&] {
    return !ready_.empty() || ipc_wake_ || doorbell_seq_.load(std::memory_order_acquire) != seen;
  };
  if (wake()) return;
  sleeping_ = true;
  if (timer_at == 0) {
    ready_cv_.wait(lock, wake);
  } else {
    uint64_t now = NowNs();
    uint64_t at = timer_at;
    auto until =
        std::chrono::steady_clock::now() + std::chrono::nanoseconds(at > now ? at - now : 0);
    ready_cv_.wait_until(lock, until, wake);
  }
  sleeping_ = false;
}

void Fabric::ServiceBatch(const std::vector<SimQp*>& batch, uint64_t byte_budget) {
  for (SimQp* qp : batch) {
    // Cleared before the QP is read: a doorbell rung from here on queues it again.
    qp->queued.store(false, std::memory_order_seq_cst);
    ServiceQp(qp, byte_budget);
  }
}

bool Fabric::RunOnce() {
  std::vector<SimQp*> batch;
  bool ipc_pending;
  {
    std::lock_guard lock(ready_mu_);
    batch.swap(ready_);
    ipc_pending = ipc_wake_;
    ipc_wake_ = false;
  }
  ServiceBatch(batch, UINT64_MAX);
  bool worked = !batch.empty();
  if (ipc_ && (ipc_pending || ipc_->HasInbound())) worked |= HandleArrivals();
  uint64_t now = NowNs();
  if (!timers_.empty() && timers_.top().at_ns <= now) {
    RunTimers(now);
    worked = true;
  }
  return worked;
}

void Fabric::ScheduleTimer(SimQp* qp, uint64_t at_ns) {
  qp->wake_at_ns = at_ns;
  timers_.push(Timer{at_ns, uint32_t(qp->device->index()), qp->qp.qp_num});
}

void Fabric::RunTimers(uint64_t now) {
  while (!timers_.empty() && timers_.top().at_ns <= now) {
    Timer t = timers_.top();
    timers_.pop();
    Device* d = device(t.device);
    SimQp* qp = d ? d->FindQp(t.qpn) : nullptr;
    if (qp == nullptr || qp->destroyed || qp->wake_at_ns != t.at_ns) continue;
    qp->wake_at_ns = 0;
    ServiceQp(qp);
  }
}

}  // namespace bx::simnic
