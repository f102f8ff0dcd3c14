// Planned handover (docs/PS.md "Planned handover"): a primary that knows it is leaving gives
// its shard to a backup that holds every push, so the shard waits milliseconds for its next
// primary instead of a lease. The steps, on the old primary's monitor thread:
//   1. stop taking pushes (clients move on) and wait until every applied push is durable;
//   2. pick a backup of the set whose position equals the primary's: it holds every push;
//   3. name it the successor of this epoch in the store (a commit under the primary's lease);
//   4. step down, give the lease back (revoke: the lease key goes at once), wake the successor.
// The successor, seeing the lease gone and itself named, promotes itself without the usual
// wait for fuller members; other backups leave the promotion to it for one lease ttl. Until
// step 3 commits, any failure leaves the primary in office and taking pushes again.
#include <algorithm>
#include <future>
#include <utility>

#include "ps/service/ps_service.h"
#include "ps/wire.h"

namespace bx::ps {

namespace {
using Clock = std::chrono::steady_clock;

std::chrono::milliseconds Until(Clock::time_point deadline) {
  return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                  std::chrono::milliseconds(1));
}
}  // namespace

// ---- The server's methods ---------------------------------------------------------------------

void PsServerCore::SetHandoverService(std::shared_ptr<HandoverService> service) {
  handover_service_.Store(std::move(service));
}

void PsServerCore::OnHandover(rpc::ServerCall call) {
  std::shared_ptr<HandoverService> service = handover_service_.Load();
  if (!service) {
    return call.Fail(FailedPrecondition(
        "this replica hands nothing over: it runs no failover monitor with a configuration "
        "store"));
  }
  uint64_t to = 0, timeout_ms = 0;
  if (!GetU64s(Bytes(call.request()), {&to, &timeout_ms}) ||
      (to != kAnyBackup && to > UINT32_MAX) || timeout_ms == 0 || timeout_ms > 600'000) {
    return call.Fail(InvalidArgument("ps.Handover: malformed request"));
  }
  auto shared = std::make_shared<rpc::ServerCall>(std::move(call));
  service->HandOver(
      to == kAnyBackup ? std::nullopt : std::optional(static_cast<uint32_t>(to)),
      std::chrono::milliseconds(timeout_ms), [shared](Result<HandoverResult> result) {
        if (!result.ok()) return shared->Fail(result.status());
        Result<rpc::Message> reply = U64Message({result->successor, result->epoch, result->lsn});
        if (!reply.ok()) return shared->Fail(reply.status());
        shared->Respond(std::move(reply).value());
      });
}

void PsServerCore::OnTakeOver(rpc::ServerCall call) {
  if (std::shared_ptr<HandoverService> service = handover_service_.Load()) service->TakeOver();
  Result<rpc::Message> empty = rpc::Message::Allocate(0);
  if (!empty.ok()) return call.Fail(empty.status());
  call.Respond(std::move(empty).value());
}

// ---- The monitor's side -----------------------------------------------------------------------

// Behind the server's methods: hands requests to the monitor thread through the inbox, which
// outlives the monitor (a request arriving after it stopped is Aborted).
class LeasedFailoverCore::HandoverDesk : public HandoverService {
 public:
  explicit HandoverDesk(std::shared_ptr<Inbox> inbox) : inbox_(std::move(inbox)) {}
  void HandOver(std::optional<uint32_t> to, std::chrono::milliseconds timeout,
                std::function<void(Result<HandoverResult>)> done) override {
    {
      std::unique_lock lock(inbox_->mu);
      if (!inbox_->closed) {
        inbox_->handovers.push_back({to, Clock::now() + timeout, std::move(done)});
        lock.unlock();
        inbox_->cv.notify_all();
        return;
      }
    }
    done(Aborted("failover monitor stopped"));
  }
  void TakeOver() override {
    {
      std::lock_guard lock(inbox_->mu);
      inbox_->take_over = true;
    }
    inbox_->cv.notify_all();
  }

 private:
  const std::shared_ptr<Inbox> inbox_;
};

void LeasedFailoverCore::OpenHandoverDesk() {
  server_->SetHandoverService(std::make_shared<HandoverDesk>(inbox_));
}

void LeasedFailoverCore::CloseHandoverDesk() {
  server_->SetHandoverService(nullptr);
}

Result<HandoverResult> LeasedFailoverCore::HandOver(std::optional<uint32_t> to,
                                                    std::chrono::milliseconds timeout) {
  auto promise = std::make_shared<std::promise<Result<HandoverResult>>>();
  std::future<Result<HandoverResult>> future = promise->get_future();
  HandoverDesk(inbox_).HandOver(to, timeout, [promise](Result<HandoverResult> result) {
    promise->set_value(std::move(result));
  });
  return future.get();
}

void LeasedFailoverCore::RunHandovers() {
  std::vector<Handover> handovers;
  {
    std::lock_guard lock(inbox_->mu);
    handovers.swap(inbox_->handovers);
  }
  for (Handover& h : handovers) {
    Result<HandoverResult> result = HandOverNow(h.to, h.deadline);
    if (!result.ok()) Log("handover refused: " + result.status().ToString());
    h.done(std::move(result));
  }
}

Result<HandoverResult> LeasedFailoverCore::HandOverNow(std::optional<uint32_t> to,
                                                       Clock::time_point deadline) {
  const uint32_t self = static_cast<uint32_t>(options_.self);
  std::optional<VersionedConfig> office = coordinator_->office();
  if (primary_epoch_ == 0 || !office || office->config.epoch != primary_epoch_ ||
      server_->replica().role() != ShardReplica::Role::kPrimary) {
    return FailedPrecondition("replica " + std::to_string(self) +
                              " is not the shard's primary: ask the primary for a handover");
  }
  std::vector<uint32_t> candidates;
  for (const ShardMember& m : office->config.members) {
    if (m.replica != self && (!to || m.replica == *to)) candidates.push_back(m.replica);
  }
  if (candidates.empty()) {
    return to ? InvalidArgument("replica " + std::to_string(*to) +
                                " is not a backup in the shard's set")
              : FailedPrecondition("the shard's set has no backup to hand over to");
  }
  // Where the time goes, for the log: each step's end.
  const Clock::time_point start = Clock::now();
  auto ms_since = [](Clock::time_point from) {
    return std::to_string(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - from).count());
  };
  BX_ASSIGN_OR_RETURN(ShardReplica::Position at, server_->replica().BeginHandover(Until(deadline)));
  const std::string durable_ms = ms_since(start);
  // A backup at the primary's own position holds every push. At lsn 0 of its epoch the primary
  // has applied nothing since its promotion and re-forwarded no log: every member holds what it
  // holds (members join only caught up), and a backup still shows the epoch before.
  auto holds_everything = [&](const PingReply& ping) {
    return ping.role == ShardReplica::Role::kBackup && (ping.position == at || at.lsn == 0);
  };
  std::optional<uint32_t> chosen;
  std::unique_ptr<rpc::Client> successor;  // the ping's client, kept to wake the one chosen
  std::string passed_over;
  for (uint32_t r : candidates) {
    Result<std::unique_ptr<rpc::Client>> client =
        rpc::Client::Create({options_.replicas[r]}, options_.client);
    Result<PingReply> ping = client.ok()
                                 ? Ping(**client, std::min(Until(deadline), options_.lease_ttl / 2))
                                 : Result<PingReply>(client.status());
    if (ping.ok() && holds_everything(*ping)) {
      chosen = r;
      successor = std::move(client).value();
      break;
    }
    passed_over += "; replica " + std::to_string(r) + ": " +
                   (ping.ok() ? std::string(ShardReplica::RoleName(ping->role)) + " at lsn " +
                                    std::to_string(ping->position.lsn) + " of epoch " +
                                    std::to_string(ping->position.epoch)
                              : ping.status().ToString());
  }
  if (!chosen) {
    server_->replica().EndHandover();
    return Unavailable("no backup holds lsn " + std::to_string(at.lsn) + " of epoch " +
                       std::to_string(at.epoch) + passed_over);
  }
  const std::string chosen_ms = ms_since(start);
  if (Status s = coordinator_->NameSuccessor(*chosen); !s.ok()) {
    server_->replica().EndHandover();
    return s.WithContext("naming the successor");
  }
  const std::string named_ms = ms_since(start);
  // The shard is the successor's from here: nothing this replica could still do would be
  // acknowledged (it takes no pushes), and giving the lease back lets the successor in now.
  const std::string who = "replica " + std::to_string(*chosen);
  server_->replica().StepDown("handed the shard over to " + who);
  coordinator_->Resign();
  primary_epoch_ = 0;
  const std::string resigned_ms = ms_since(start);
  // Best effort: a successor not woken finds itself named at its next probe.
  if (Result<rpc::Message> empty = rpc::Message::Allocate(0); empty.ok()) {
    (void)CallOnce(*successor, kTakeOverMethod, std::move(empty).value(), options_.probe_interval);
  }
  Log("handed the shard over to " + who + " at lsn " + std::to_string(at.lsn) + " of epoch " +
      std::to_string(at.epoch) + " (ms from the start: pushes durable " + durable_ms +
      ", successor chosen " + chosen_ms + ", named " + named_ms + ", lease given back " +
      resigned_ms + ", successor told " + ms_since(start) + ")");
  return HandoverResult{*chosen, at.epoch, at.lsn};
}

std::optional<uint32_t> LeasedFailoverCore::NamedSuccessor(const VersionedConfig& seen) {
  Result<std::optional<uint32_t>> named = coordinator_->Successor(seen.config.epoch);
  if (!named.ok()) {
    LogOnce("cannot read the successor: " + named.status().ToString());
    return std::nullopt;
  }
  return *named;
}

}  // namespace bx::ps
