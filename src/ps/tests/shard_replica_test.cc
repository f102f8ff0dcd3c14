// Primary-backup replication and exactly-once pushes through failover, over an in-process fake
// BackupLink that can deliver at once, hold forwards, lose them, or lose the acks.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>
#include <tuple>

#include "ps/shard_replica.h"

namespace bx::ps {
namespace {

constexpr uint32_t kTable = 1;
constexpr uint32_t kDim = 4;

TableConfig TestTable() {
  TableConfig c;
  c.id = kTable;
  c.dim = kDim;
  c.init.kind = InitializerKind::kNormal;
  c.init.seed = 5;
  c.optimizer.kind = OptimizerKind::kAdagrad;
  c.optimizer.learning_rate = 0.1f;
  return c;
}

std::unique_ptr<ShardReplica> NewReplica(ShardReplica::Options options = {}) {
  auto r = std::make_unique<ShardReplica>(options);
  EXPECT_TRUE(r->CreateTable(TestTable()).ok());
  return r;
}

// A link to a backup in the same process. Forwards go through the wire codec, as they would
// over RPC.
class FakeLink : public BackupLink {
 public:
  enum class Mode { kDeliver, kHold, kDead };
  explicit FakeLink(ShardReplica* backup, Mode mode = Mode::kDeliver)
      : backup_(backup), mode_(mode) {}

  void Forward(uint64_t epoch, uint64_t lsn, const PushRequest& push,
               std::function<void(Status)> done) override {
    std::vector<std::byte> bytes(ForwardSize(push));
    ASSERT_TRUE(EncodeForward(epoch, lsn, push, bytes).ok());
    Result<ForwardedPush> decoded = DecodeForwardedPush(bytes);
    ASSERT_TRUE(decoded.ok());
    ++forwarded_;
    switch (mode_) {
      case Mode::kDead:
        done(Unavailable("fake link: backup unreachable"));
        return;
      case Mode::kHold:
        held_.emplace_back(std::move(decoded).value(), std::move(done));
        return;
      case Mode::kDeliver:
        backup_->HandleForward(std::move(decoded).value(), std::move(done));
        return;
    }
  }
  // Delivers the held forwards. With lose_acks the backup applies them but the primary never
  // hears back (the primary died after forwarding).
  void DeliverHeld(bool lose_acks = false) {
    while (!held_.empty()) {
      auto [f, done] = std::move(held_.front());
      held_.pop_front();
      if (lose_acks) {
        backup_->HandleForward(std::move(f), [](Status) {});
      } else {
        backup_->HandleForward(std::move(f), std::move(done));
      }
    }
  }
  // The held forwards never leave (the primary died before sending them).
  void LoseHeld() { held_.clear(); }
  void set_mode(Mode mode) { mode_ = mode; }
  size_t held() const { return held_.size(); }
  int forwarded() const { return forwarded_; }

 private:
  ShardReplica* backup_;
  Mode mode_;
  std::deque<std::pair<ForwardedPush, std::function<void(Status)>>> held_;
  int forwarded_ = 0;
};

// A link whose forwards complete inside Forward, on the calling thread, as one that fails at
// once or an RPC answered on the caller's thread would: OK, or Unavailable from the
// `fail_from`th forward on. ShardReplica calls Forward holding its order lock, so a callback
// that finds itself inside Forward is running under that lock.
class InlineLink : public BackupLink {
 public:
  explicit InlineLink(int fail_from = 0) : fail_from_(fail_from) {}

  void Forward(uint64_t, uint64_t, const PushRequest&, std::function<void(Status)> done) override {
    ++inside_;
    ++forwarded_;
    done(fail_from_ > 0 && forwarded_ >= fail_from_ ? Unavailable("inline link: failed")
                                                    : Status::Ok());
    --inside_;
  }
  static bool InsideForward() { return inside_ > 0; }

 private:
  static inline thread_local int inside_ = 0;
  const int fail_from_;
  int forwarded_ = 0;  // Forward is serialised by the primary's order lock
};

// A client's view of one push: the callback's result, if it has run.
struct Outcome {
  std::optional<Result<PushAck>> result;
  bool acked() const { return result && result->ok(); }
  bool duplicate() const { return acked() && result->value().duplicate; }
  StatusCode code() const { return result ? result->status().code() : StatusCode::kInternal; }
};

std::shared_ptr<Outcome> Push(ShardReplica& replica, const PushRequest& push) {
  auto outcome = std::make_shared<Outcome>();
  replica.HandlePush(push, [outcome](Result<PushAck> r) {
    ASSERT_FALSE(outcome->result.has_value()) << "callback ran twice";
    outcome->result = std::move(r);
  });
  return outcome;
}

PushRequest MakePush(uint64_t client, uint64_t sequence, std::vector<uint64_t> keys,
                     float gradient = 1.0f) {
  PushRequest p;
  p.id = PushId{client, sequence};
  p.table_id = kTable;
  p.dim = kDim;
  p.keys = std::move(keys);
  for (size_t i = 0; i < p.keys.size() * kDim; ++i) p.gradients.push_back(gradient + 0.25f * i);
  return p;
}

std::vector<float> Values(const ShardReplica& r, const std::vector<uint64_t>& keys) {
  std::vector<float> v(keys.size() * kDim);
  EXPECT_TRUE(r.Fetch(kTable, keys, std::as_writable_bytes(std::span<float>(v))).ok());
  return v;
}

// What `pushes` give when each is applied exactly once, in order, on a fresh replica.
std::vector<float> AppliedOnce(const std::vector<PushRequest>& pushes,
                               const std::vector<uint64_t>& keys) {
  ShardState state;
  EXPECT_TRUE(state.CreateTable(TestTable()).ok());
  for (const PushRequest& p : pushes) EXPECT_TRUE(state.ApplyPush(p).ok());
  std::vector<float> v(keys.size() * kDim);
  EXPECT_TRUE(state.table(kTable)->Fetch(keys, std::span<float>(v)).ok());
  return v;
}

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const std::vector<uint64_t> kKeys = {11, 22, 33};

TEST(ShardReplica, PrimaryReplicatesToBackupsAndAcks) {
  auto p = NewReplica(), b1 = NewReplica(), b2 = NewReplica();
  ASSERT_TRUE(p->BecomePrimary(
                   1, {std::make_shared<FakeLink>(b1.get()), std::make_shared<FakeLink>(b2.get())})
                  .ok());
  std::vector<PushRequest> pushes = {MakePush(1, 1, {11, 22}), MakePush(2, 1, {22, 33}),
                                     MakePush(1, 2, {11, 11, 33}, -2)};
  for (const PushRequest& push : pushes) {
    auto o = Push(*p, push);
    ASSERT_TRUE(o->acked()) << (o->result ? o->result->status().ToString() : "no ack");
    EXPECT_FALSE(o->duplicate());
  }
  const std::vector<float> want = AppliedOnce(pushes, kKeys);
  EXPECT_TRUE(BitwiseEqual(Values(*p, kKeys), want));
  EXPECT_TRUE(BitwiseEqual(Values(*b1, kKeys), want));
  EXPECT_TRUE(BitwiseEqual(Values(*b2, kKeys), want));
  EXPECT_EQ(b1->position(), (ShardReplica::Position{1, 3}));
  EXPECT_EQ(p->position(), (ShardReplica::Position{1, 3}));
}

TEST(ShardReplica, RetryToThePrimaryIsAckedNotReapplied) {
  auto p = NewReplica(), b = NewReplica();
  ASSERT_TRUE(p->BecomePrimary(1, {std::make_shared<FakeLink>(b.get())}).ok());
  PushRequest x = MakePush(9, 1, {11});
  ASSERT_TRUE(Push(*p, x)->acked());
  auto retry = Push(*p, x);
  ASSERT_TRUE(retry->acked());
  EXPECT_TRUE(retry->duplicate());
  EXPECT_TRUE(BitwiseEqual(Values(*p, kKeys), AppliedOnce({x}, kKeys)));
  EXPECT_TRUE(BitwiseEqual(Values(*b, kKeys), AppliedOnce({x}, kKeys)));
}

TEST(ShardReplica, AckWaitsForEveryLiveBackup) {
  auto p = NewReplica(), b1 = NewReplica(), b2 = NewReplica();
  auto slow = std::make_shared<FakeLink>(b2.get(), FakeLink::Mode::kHold);
  ASSERT_TRUE(p->BecomePrimary(1, {std::make_shared<FakeLink>(b1.get()), slow}).ok());
  auto o = Push(*p, MakePush(1, 1, {11}));
  EXPECT_FALSE(o->result.has_value()) << "acked before the slow backup had the push";
  // A retry meanwhile must not be acked early either.
  auto retry = Push(*p, MakePush(1, 1, {11}));
  EXPECT_FALSE(retry->result.has_value());
  slow->DeliverHeld();
  EXPECT_TRUE(o->acked());
  EXPECT_TRUE(retry->duplicate());
}

TEST(ShardReplica, BackupRefusesClientPushes) {
  auto b = NewReplica();
  auto o = Push(*b, MakePush(1, 1, {11}));
  EXPECT_EQ(o->code(), StatusCode::kFailedPrecondition);
}

TEST(ShardReplica, InvalidPushIsRefusedAndNotRecordedAsApplied) {
  auto p = NewReplica();
  ASSERT_TRUE(p->BecomePrimary(1, {}).ok());
  PushRequest bad = MakePush(1, 1, {11});
  bad.table_id = 99;
  EXPECT_EQ(Push(*p, bad)->code(), StatusCode::kNotFound);
  EXPECT_TRUE(Push(*p, MakePush(1, 1, {11}))->acked()) << "the id stays free for a valid push";
}

// Failover case 1: the primary applies X, forwards it, the backup applies it, and the primary
// dies before it can ack. The client retries X at the promoted backup: acknowledged as a
// duplicate, applied once.
TEST(ShardReplica, FailoverPrimaryDiesAfterForwardingBeforeAck) {
  auto p = NewReplica(), b = NewReplica();
  auto link = std::make_shared<FakeLink>(b.get(), FakeLink::Mode::kHold);
  ASSERT_TRUE(p->BecomePrimary(1, {link}).ok());
  PushRequest earlier = MakePush(3, 1, {22});
  auto first = Push(*p, earlier);
  link->DeliverHeld();
  ASSERT_TRUE(first->acked());

  PushRequest x = MakePush(3, 2, {11, 22});
  auto lost = Push(*p, x);
  link->DeliverHeld(/*lose_acks=*/true);  // the primary dies here
  EXPECT_FALSE(lost->result.has_value());

  ASSERT_TRUE(b->BecomePrimary(2, {}).ok());
  auto retry = Push(*b, x);
  ASSERT_TRUE(retry->acked());
  EXPECT_TRUE(retry->duplicate());
  EXPECT_TRUE(BitwiseEqual(Values(*b, kKeys), AppliedOnce({earlier, x}, kKeys)));
}

// Failover case 2: the primary applies X and dies before the forward leaves. The retry at the
// promoted backup applies X (once); the acknowledged earlier push is still there.
TEST(ShardReplica, FailoverPrimaryDiesBeforeForwarding) {
  auto p = NewReplica(), b = NewReplica();
  auto link = std::make_shared<FakeLink>(b.get(), FakeLink::Mode::kHold);
  ASSERT_TRUE(p->BecomePrimary(1, {link}).ok());
  PushRequest earlier = MakePush(3, 1, {22});
  auto first = Push(*p, earlier);
  link->DeliverHeld();
  ASSERT_TRUE(first->acked());

  PushRequest x = MakePush(3, 2, {11, 22});
  auto lost = Push(*p, x);
  link->LoseHeld();  // the primary dies here
  EXPECT_FALSE(lost->result.has_value());

  ASSERT_TRUE(b->BecomePrimary(2, {}).ok());
  auto retry = Push(*b, x);
  ASSERT_TRUE(retry->acked());
  EXPECT_FALSE(retry->duplicate());
  auto again = Push(*b, x);
  EXPECT_TRUE(again->duplicate());
  EXPECT_TRUE(BitwiseEqual(Values(*b, kKeys), AppliedOnce({earlier, x}, kKeys)));
}

// Three replicas: the primary forwards X to backup 1 only, then dies. Backup 1 has the higher
// position, so it is promoted; it re-forwards its log, so backup 2 gets X too, and the retry is
// acked only once backup 2 has it. Both survivors end bitwise identical with X applied once.
TEST(ShardReplica, FailoverWithTwoBackupsConvergesThroughReforward) {
  auto p = NewReplica(), b1 = NewReplica(), b2 = NewReplica();
  auto to_b1 = std::make_shared<FakeLink>(b1.get());
  auto to_b2 = std::make_shared<FakeLink>(b2.get());
  ASSERT_TRUE(p->BecomePrimary(1, {to_b1, to_b2}).ok());
  PushRequest a = MakePush(1, 1, {11, 33});
  ASSERT_TRUE(Push(*p, a)->acked());

  to_b2->set_mode(FakeLink::Mode::kHold);
  PushRequest x = MakePush(1, 2, {11, 22});
  auto lost = Push(*p, x);
  to_b2->LoseHeld();  // the primary dies: b1 has x, b2 does not
  EXPECT_FALSE(lost->result.has_value());
  ASSERT_GT(b1->position(), b2->position());

  auto b1_to_b2 = std::make_shared<FakeLink>(b2.get(), FakeLink::Mode::kHold);
  ASSERT_TRUE(b1->BecomePrimary(2, {b1_to_b2}).ok());
  auto retry = Push(*b1, x);
  EXPECT_FALSE(retry->result.has_value()) << "acked before b2 had x";
  b1_to_b2->DeliverHeld();
  ASSERT_TRUE(retry->acked());
  EXPECT_TRUE(retry->duplicate());

  const std::vector<float> want = AppliedOnce({a, x}, kKeys);
  EXPECT_TRUE(BitwiseEqual(Values(*b1, kKeys), want));
  EXPECT_TRUE(BitwiseEqual(Values(*b2, kKeys), want));

  // Later pushes keep both identical.
  b1_to_b2->set_mode(FakeLink::Mode::kDeliver);
  PushRequest y = MakePush(2, 1, {33});
  ASSERT_TRUE(Push(*b1, y)->acked());
  EXPECT_TRUE(BitwiseEqual(Values(*b2, kKeys), AppliedOnce({a, x, y}, kKeys)));
}

// A primary that was replaced but is still running (a zombie) must not acknowledge: its
// forward is refused for its stale epoch, it steps down, and the client retries at the new
// primary, where the push is applied once.
TEST(ShardReplica, DeposedPrimaryIsFencedByEpoch) {
  auto p = NewReplica(), b = NewReplica();
  ASSERT_TRUE(p->BecomePrimary(1, {std::make_shared<FakeLink>(b.get())}).ok());
  ASSERT_TRUE(Push(*p, MakePush(1, 1, {11}))->acked());
  ASSERT_TRUE(b->BecomePrimary(2, {}).ok());  // p was wrongly declared dead

  PushRequest y = MakePush(1, 2, {22});
  auto zombie = Push(*p, y);
  ASSERT_TRUE(zombie->result.has_value());
  EXPECT_EQ(zombie->code(), StatusCode::kUnavailable);
  EXPECT_EQ(p->role(), ShardReplica::Role::kFenced);
  EXPECT_EQ(Push(*p, MakePush(1, 3, {22}))->code(), StatusCode::kFailedPrecondition);

  auto retry = Push(*b, y);
  ASSERT_TRUE(retry->acked());
  EXPECT_FALSE(retry->duplicate());
  EXPECT_TRUE(BitwiseEqual(Values(*b, kKeys), AppliedOnce({MakePush(1, 1, {11}), y}, kKeys)));
}

// Once a forged forward at epoch 2^64-1 fenced the primary, and the backup's promotion to
// 2^64-1 + 1 = 0 failed, leaving the shard without a primary for good.
TEST(ShardReplica, EpochsBeyondTheLimitAreRefusedAndChangeNothing) {
  auto p = NewReplica(), b = NewReplica();
  ASSERT_TRUE(p->BecomePrimary(1, {std::make_shared<FakeLink>(b.get())}).ok());
  ASSERT_TRUE(Push(*p, MakePush(1, 1, {11}))->acked());
  for (uint64_t forged : {ShardReplica::kMaxEpoch + 1, ~uint64_t{0}}) {
    for (ShardReplica* target : {p.get(), b.get()}) {
      std::optional<Status> done;
      target->HandleForward(ForwardedPush{forged, 1, MakePush(9, 1, {11})},
                            [&](Status s) { done = s; });
      ASSERT_TRUE(done.has_value());
      EXPECT_EQ(done->code(), StatusCode::kInvalidArgument) << done->ToString();
    }
    EXPECT_EQ(b->BecomePrimary(forged, {}).code(), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(p->role(), ShardReplica::Role::kPrimary) << "not fenced";
  EXPECT_EQ(p->position(), (ShardReplica::Position{1, 1}));
  EXPECT_EQ(b->position(), (ShardReplica::Position{1, 1}));
  ASSERT_TRUE(Push(*p, MakePush(1, 2, {11}))->acked());
  EXPECT_TRUE(b->BecomePrimary(ShardReplica::kMaxEpoch, {}).ok()) << "the limit itself is fine";
}

TEST(ShardReplica, DeadBackupIsDroppedAndPushesContinue) {
  auto p = NewReplica(), b1 = NewReplica(), b2 = NewReplica();
  auto to_b2 = std::make_shared<FakeLink>(b2.get());
  ASSERT_TRUE(p->BecomePrimary(1, {std::make_shared<FakeLink>(b1.get()), to_b2}).ok());
  EXPECT_EQ(p->live_backups(), 2u);
  to_b2->set_mode(FakeLink::Mode::kDead);
  ASSERT_TRUE(Push(*p, MakePush(1, 1, {11}))->acked());
  EXPECT_EQ(p->live_backups(), 1u);
  ASSERT_TRUE(Push(*p, MakePush(1, 2, {11}))->acked());
  EXPECT_EQ(to_b2->forwarded(), 1) << "a dead backup is not forwarded to again";
  EXPECT_TRUE(BitwiseEqual(Values(*b1, kKeys), Values(*p, kKeys)));
}

TEST(ShardReplica, BackupAppliesForwardsInLsnOrder) {
  auto b = NewReplica();
  PushRequest one = MakePush(1, 1, {11}, 1), two = MakePush(1, 2, {11}, -3);
  std::vector<Status> done;
  b->HandleForward(ForwardedPush{1, 2, two}, [&](Status s) { done.push_back(s); });
  EXPECT_TRUE(done.empty()) << "lsn 2 waits for lsn 1";
  b->HandleForward(ForwardedPush{1, 1, one}, [&](Status s) { done.push_back(s); });
  ASSERT_EQ(done.size(), 2u);
  EXPECT_TRUE(done[0].ok() && done[1].ok());
  EXPECT_TRUE(BitwiseEqual(Values(*b, kKeys), AppliedOnce({one, two}, kKeys)));
  // A resend of an applied lsn is acked without applying; an old epoch is refused.
  b->HandleForward(ForwardedPush{1, 1, one}, [&](Status s) { done.push_back(s); });
  EXPECT_TRUE(done.back().ok());
  b->HandleForward(ForwardedPush{2, 1, MakePush(2, 1, {33})}, [&](Status s) { done.push_back(s); });
  b->HandleForward(ForwardedPush{1, 3, MakePush(2, 2, {33})}, [&](Status s) { done.push_back(s); });
  EXPECT_EQ(done.back().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(b->position(), (ShardReplica::Position{2, 1}));
}

TEST(ShardReplica, TooManyUndurablePushesAreRefused) {
  ShardReplica::Options options;
  options.max_undurable_pushes = 2;
  auto p = NewReplica(options), b = NewReplica(options);
  auto link = std::make_shared<FakeLink>(b.get(), FakeLink::Mode::kHold);
  ASSERT_TRUE(p->BecomePrimary(1, {link}).ok());
  auto o1 = Push(*p, MakePush(1, 1, {11}));
  auto o2 = Push(*p, MakePush(1, 2, {11}));
  auto o3 = Push(*p, MakePush(1, 3, {11}));
  EXPECT_EQ(o3->code(), StatusCode::kResourceExhausted);
  link->DeliverHeld();
  EXPECT_TRUE(o1->acked() && o2->acked());
  link->set_mode(FakeLink::Mode::kDeliver);
  EXPECT_TRUE(Push(*p, MakePush(1, 3, {11}))->acked()) << "room again once durable";
}

// One push of one key: 8 bytes of key and kDim gradients.
constexpr size_t kOneKeyPushBytes = 8 + kDim * 4;

TEST(ShardReplica, TooManyUndurableBytesAreRefused) {
  ShardReplica::Options options;
  options.max_undurable_bytes = 2 * kOneKeyPushBytes;
  auto p = NewReplica(options), b = NewReplica(options);
  auto link = std::make_shared<FakeLink>(b.get(), FakeLink::Mode::kHold);
  ASSERT_TRUE(p->BecomePrimary(1, {link}).ok());
  auto o1 = Push(*p, MakePush(1, 1, {11}));
  auto o2 = Push(*p, MakePush(1, 2, {22}));
  auto o3 = Push(*p, MakePush(1, 3, {33}));
  EXPECT_EQ(o3->code(), StatusCode::kResourceExhausted);
  link->DeliverHeld();
  EXPECT_TRUE(o1->acked() && o2->acked());
  link->set_mode(FakeLink::Mode::kDeliver);
  EXPECT_TRUE(Push(*p, MakePush(1, 3, {33}))->acked()) << "room again once durable";
  // With nothing waiting, a push larger than the bound is still taken.
  EXPECT_TRUE(Push(*p, MakePush(1, 4, {11, 22, 33, 44}))->acked());
}

// Each replica's log holds at most max_undurable_bytes plus its newest push, and still every
// push a survivor may lack: after the primary dies with two pushes on one backup only, the
// promoted backup re-forwards both.
TEST(ShardReplica, ALogBoundedInBytesStillReforwardsWhatASurvivorLacks) {
  ShardReplica::Options options;
  options.max_undurable_bytes = 2 * kOneKeyPushBytes;
  auto p = NewReplica(options), b1 = NewReplica(options), b2 = NewReplica(options);
  auto to_b1 = std::make_shared<FakeLink>(b1.get());
  auto to_b2 = std::make_shared<FakeLink>(b2.get());
  ASSERT_TRUE(p->BecomePrimary(1, {to_b1, to_b2}).ok());
  std::vector<PushRequest> pushes;
  for (uint64_t s = 1; s <= 20; ++s) {
    pushes.push_back(MakePush(1, s, {kKeys[s % kKeys.size()]}));
    ASSERT_TRUE(Push(*p, pushes.back())->acked());
  }
  for (ShardReplica* r : {p.get(), b1.get(), b2.get()}) {
    EXPECT_LE(r->log_bytes(), options.max_undurable_bytes + kOneKeyPushBytes);
  }
  to_b2->set_mode(FakeLink::Mode::kHold);
  pushes.push_back(MakePush(1, 21, {11}));
  auto x1 = Push(*p, pushes.back());
  pushes.push_back(MakePush(1, 22, {22}));
  auto x2 = Push(*p, pushes.back());
  EXPECT_EQ(Push(*p, MakePush(1, 23, {33}))->code(), StatusCode::kResourceExhausted);
  to_b2->LoseHeld();  // the primary dies: b1 has x1 and x2, b2 neither
  EXPECT_FALSE(x1->result.has_value() || x2->result.has_value());

  ASSERT_TRUE(b1->BecomePrimary(2, {std::make_shared<FakeLink>(b2.get())}).ok());
  EXPECT_TRUE(Push(*b1, pushes[20])->duplicate());
  EXPECT_TRUE(Push(*b1, pushes[21])->duplicate());
  const std::vector<float> want = AppliedOnce(pushes, kKeys);
  EXPECT_TRUE(BitwiseEqual(Values(*b1, kKeys), want));
  EXPECT_TRUE(BitwiseEqual(Values(*b2, kKeys), want)) << "b2 lacks a push b1 no longer kept";
}

// Many client threads push to a primary with two backups (links deliver on the pushing thread,
// as an RPC completion might) while fetches run: every push acked once, replicas identical.
TEST(ShardReplica, ConcurrentPushesKeepReplicasIdentical) {
  auto p = NewReplica(), b1 = NewReplica(), b2 = NewReplica();
  ASSERT_TRUE(p->BecomePrimary(
                   1, {std::make_shared<FakeLink>(b1.get()), std::make_shared<FakeLink>(b2.get())})
                  .ok());
  constexpr int kClients = 4, kPushes = 300;
  std::atomic<int> acks{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      for (int s = 1; s <= kPushes; ++s) {
        PushRequest push = MakePush(100 + c, s, {11, 22, static_cast<uint64_t>(s % 7)}, 0.5f * c);
        for (int attempt = 0; attempt < 2; ++attempt) {  // every push is retried once
          p->HandlePush(push, [&](Result<PushAck> r) {
            ASSERT_TRUE(r.ok()) << r.status().ToString();
            if (!r->duplicate) ++acks;
          });
        }
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < 300; ++i) (void)Values(*b1, kKeys);
  });
  for (auto& t : threads) t.join();
  EXPECT_EQ(acks.load(), kClients * kPushes);
  std::vector<uint64_t> keys = {0, 1, 2, 3, 4, 5, 6, 11, 22};
  EXPECT_TRUE(BitwiseEqual(Values(*p, keys), Values(*b1, keys)));
  EXPECT_TRUE(BitwiseEqual(Values(*p, keys), Values(*b2, keys)));
  EXPECT_EQ(b2->position(), (ShardReplica::Position{1, kClients * kPushes}));
}

// Threads push to a primary whose backups complete forwards inline (one of them fails part way).
// The completion that makes a push durable then runs on the pushing thread while it holds the
// order lock; the ack must still wait until that lock is released, also when another thread is
// just leaving its own order section.
TEST(ShardReplica, InlineForwardCompletionsNeverAckUnderTheOrderLock) {
  auto p = NewReplica();
  auto failing = std::make_shared<InlineLink>(/*fail_from=*/10000);
  ASSERT_TRUE(p->BecomePrimary(1, {std::make_shared<InlineLink>(), failing}).ok());
  constexpr int kClients = 4, kPushes = 20000;
  std::atomic<int> acks{0}, under_lock{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      for (int s = 1; s <= kPushes; ++s) {
        p->HandlePush(MakePush(100 + c, s, {11}), [&](Result<PushAck> r) {
          EXPECT_TRUE(r.ok()) << r.status().ToString();
          if (InlineLink::InsideForward()) ++under_lock;
          ++acks;
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(under_lock.load(), 0) << "acks run inside Forward, under the order lock";
  EXPECT_EQ(acks.load(), kClients * kPushes);
  EXPECT_EQ(p->live_backups(), 1u);
}

// ---- PrimaryGuard: the committed configuration and the lease ----------------------------------

// A guard whose store answers drop requests when the test says so, and whose lease the test
// can end.
struct FakeGuard {
  std::vector<std::pair<size_t, std::function<void(Status)>>> drops;  // requested, unanswered
  std::atomic<bool> lease{true};

  ShardReplica::PrimaryGuard Make() {
    return {
        .drop_backup = [this](size_t b, const Status&,
                              std::function<void(Status)> done) { drops.emplace_back(b, done); },
        .lease_valid = [this] { return lease.load(); }};
  }
  void Answer(const Status& s) {
    auto pending = std::move(drops);
    drops.clear();
    for (auto& [b, done] : pending) done(s);
  }

  // Catch-up: the primary's requests to add a caught-up learner.
  std::vector<std::pair<size_t, std::function<void(Status)>>> adds;
  ShardReplica::AddMember Add() {
    return [this](size_t b, std::function<void(Status)> done) { adds.emplace_back(b, done); };
  }
  void AnswerAdds(const Status& s) {
    auto pending = std::move(adds);
    adds.clear();
    for (auto& [b, done] : pending) done(s);
  }
};

TEST(ShardReplica, AFailedBackupCountsUntilItsRemovalIsCommitted) {
  auto p = NewReplica(), b1 = NewReplica(), b2 = NewReplica();
  auto to_b2 = std::make_shared<FakeLink>(b2.get());
  FakeGuard guard;
  ASSERT_TRUE(
      p->BecomePrimary(1, {std::make_shared<FakeLink>(b1.get()), to_b2}, guard.Make()).ok());
  to_b2->set_mode(FakeLink::Mode::kDead);
  auto first = Push(*p, MakePush(1, 1, {11}));
  auto second = Push(*p, MakePush(1, 2, {11}));
  EXPECT_FALSE(first->result) << "acked on fewer replicas than the configuration names";
  EXPECT_FALSE(second->result);
  ASSERT_EQ(guard.drops.size(), 1u) << "one removal request per failed backup";
  EXPECT_EQ(guard.drops[0].first, 1u);
  EXPECT_EQ(to_b2->forwarded(), 1) << "a backup being dropped is not sent to again";
  guard.Answer(Status::Ok());
  EXPECT_TRUE(first->acked());
  EXPECT_TRUE(second->acked());
  EXPECT_EQ(p->live_backups(), 1u);
  EXPECT_TRUE(Push(*p, MakePush(1, 3, {11}))->acked());
  EXPECT_TRUE(BitwiseEqual(Values(*b1, kKeys), Values(*p, kKeys)));
}

TEST(ShardReplica, APrimaryThatCannotCommitARemovalStepsDownWithoutAcking) {
  auto p = NewReplica(), b1 = NewReplica();
  auto to_b1 = std::make_shared<FakeLink>(b1.get(), FakeLink::Mode::kDead);
  FakeGuard guard;
  ASSERT_TRUE(p->BecomePrimary(1, {to_b1}, guard.Make()).ok());
  auto push = Push(*p, MakePush(1, 1, {11}));
  ASSERT_EQ(guard.drops.size(), 1u);
  // The store refuses: another replica was promoted while this one was paused.
  guard.Answer(FailedPrecondition("configuration changed"));
  EXPECT_EQ(push->code(), StatusCode::kUnavailable);
  EXPECT_EQ(p->role(), ShardReplica::Role::kFenced);
  EXPECT_EQ(Push(*p, MakePush(1, 2, {11}))->code(), StatusCode::kFailedPrecondition);
}

TEST(ShardReplica, NoAckAfterTheLeaseRanOut) {
  auto p = NewReplica(), b1 = NewReplica();
  auto to_b1 = std::make_shared<FakeLink>(b1.get(), FakeLink::Mode::kHold);
  FakeGuard guard;
  ASSERT_TRUE(p->BecomePrimary(1, {to_b1}, guard.Make()).ok());
  auto push = Push(*p, MakePush(1, 1, {11}));
  guard.lease = false;   // e.g. the process was paused past its lease
  to_b1->DeliverHeld();  // the backup has it, but the primary may no longer speak for the shard
  EXPECT_FALSE(push->result) << "acked without a valid lease";
  EXPECT_FALSE(p->PrimaryWithLease());
  // The store says the lease is gone: the held push fails, the primary is out of service.
  p->StepDown("primary lost its lease");
  EXPECT_EQ(push->code(), StatusCode::kUnavailable);
  EXPECT_EQ(p->role(), ShardReplica::Role::kFenced);
  EXPECT_EQ(Push(*p, MakePush(1, 2, {11}))->code(), StatusCode::kFailedPrecondition);
}

// A store that did not answer for longer than the lease, then renewed it (etcd restarted): the
// primary held its acks meanwhile and releases them, still primary of its epoch.
TEST(ShardReplica, AckHeldWhileTheLeaseLapsedGoesOutOnceItIsRenewed) {
  auto p = NewReplica(), b1 = NewReplica();
  auto to_b1 = std::make_shared<FakeLink>(b1.get(), FakeLink::Mode::kHold);
  FakeGuard guard;
  ASSERT_TRUE(p->BecomePrimary(1, {to_b1}, guard.Make()).ok());
  auto push = Push(*p, MakePush(1, 1, {11}));
  guard.lease = false;
  to_b1->DeliverHeld();
  EXPECT_FALSE(push->result);
  EXPECT_EQ(p->role(), ShardReplica::Role::kPrimary);
  guard.lease = true;
  p->LeaseConfirmed();
  EXPECT_TRUE(push->acked());
  to_b1->set_mode(FakeLink::Mode::kDeliver);
  EXPECT_TRUE(Push(*p, MakePush(1, 2, {11}))->acked());
  EXPECT_EQ(p->position().epoch, 1u);
}

TEST(ShardReplica, ALeaseThatRanOutRefusesNewPushesBeforeApplyingThem) {
  auto p = NewReplica(), b1 = NewReplica();
  FakeGuard guard;
  ASSERT_TRUE(p->BecomePrimary(1, {std::make_shared<FakeLink>(b1.get())}, guard.Make()).ok());
  ASSERT_TRUE(Push(*p, MakePush(1, 1, {11}))->acked());
  guard.lease = false;
  const std::vector<float> before = Values(*p, kKeys);
  EXPECT_EQ(Push(*p, MakePush(1, 2, {11}))->code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(BitwiseEqual(before, Values(*p, kKeys)));
}

TEST(ShardReplica, StepDownFailsWaitingPushes) {
  auto p = NewReplica(), b1 = NewReplica();
  auto to_b1 = std::make_shared<FakeLink>(b1.get(), FakeLink::Mode::kHold);
  FakeGuard guard;
  ASSERT_TRUE(p->BecomePrimary(1, {to_b1}, guard.Make()).ok());
  auto push = Push(*p, MakePush(1, 1, {11}));
  p->StepDown("the store names another primary");
  EXPECT_EQ(push->code(), StatusCode::kUnavailable);
  to_b1->DeliverHeld();
  EXPECT_EQ(p->role(), ShardReplica::Role::kFenced);
}

TEST(ShardReplica, ABackupRefusesForwardsFromEpochsTheStoreHasLeftBehind) {
  auto old_primary = NewReplica(), b1 = NewReplica();
  ASSERT_TRUE(old_primary->BecomePrimary(1, {std::make_shared<FakeLink>(b1.get())}).ok());
  ASSERT_TRUE(Push(*old_primary, MakePush(1, 1, {11}))->acked());
  // The store moved to epoch 2; the new primary has not forwarded anything to b1 yet.
  b1->RefuseEpochsBelow(2);
  const std::vector<float> before = Values(*b1, kKeys);
  auto late = Push(*old_primary, MakePush(1, 2, {11}));
  EXPECT_EQ(late->code(), StatusCode::kUnavailable) << "refused as deposed, not acked";
  EXPECT_EQ(old_primary->role(), ShardReplica::Role::kFenced);
  EXPECT_TRUE(BitwiseEqual(before, Values(*b1, kKeys))) << "the stale forward was not applied";
}

// ---- Catch-up ---------------------------------------------------------------------------------

TEST(ShardReplica, AJoinerIsAddedOnlyOnceItHoldsEveryAcknowledgedPush) {
  auto p = NewReplica(), b1 = NewReplica(), joiner = NewReplica();
  FakeGuard guard;
  ASSERT_TRUE(p->BecomePrimary(1, {std::make_shared<FakeLink>(b1.get())}, guard.Make()).ok());
  std::vector<PushRequest> pushes;
  for (uint64_t i = 1; i <= 3; ++i) pushes.push_back(MakePush(1, i, {11, 22}));
  for (const PushRequest& push : pushes) ASSERT_TRUE(Push(*p, push)->acked());

  Result<ShardReplica::JoinSnapshot> snapshot = p->SnapshotForJoin(2);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  EXPECT_EQ(snapshot->position, (ShardReplica::Position{1, 3}));
  for (uint64_t i = 4; i <= 5; ++i) {  // acked while the snapshot travels
    pushes.push_back(MakePush(1, i, {22, 33}));
    ASSERT_TRUE(Push(*p, pushes.back())->acked());
  }
  ASSERT_TRUE(joiner->InstallSnapshot(snapshot->bytes).ok());
  EXPECT_EQ(joiner->position(), (ShardReplica::Position{1, 3}));
  EXPECT_EQ(joiner->role(), ShardReplica::Role::kBackup);
  EXPECT_TRUE(BitwiseEqual(Values(*joiner, kKeys),
                           AppliedOnce({pushes.begin(), pushes.begin() + 3}, kKeys)));

  auto to_joiner = std::make_shared<FakeLink>(joiner.get(), FakeLink::Mode::kHold);
  ASSERT_TRUE(p->AttachLearner(2, to_joiner, guard.Add()).ok());
  EXPECT_EQ(to_joiner->held(), 2u) << "the pushes after the snapshot, 4 and 5";
  pushes.push_back(MakePush(2, 1, {11}));
  EXPECT_TRUE(Push(*p, pushes.back())->acked()) << "a catching-up learner does not hold acks";
  EXPECT_TRUE(guard.adds.empty()) << "added before it holds the acknowledged pushes";

  to_joiner->DeliverHeld();  // now it holds 1..6, everything acked
  ASSERT_EQ(guard.adds.size(), 1u);
  EXPECT_EQ(guard.adds[0].first, 1u) << "its link index";
  pushes.push_back(MakePush(2, 2, {33}));
  auto counted = Push(*p, pushes.back());
  EXPECT_FALSE(counted->result) << "once caught up it counts, before its addition commits too";
  to_joiner->DeliverHeld();
  EXPECT_TRUE(counted->acked());
  guard.AnswerAdds(Status::Ok());
  EXPECT_EQ(p->live_backups(), 2u);
  to_joiner->set_mode(FakeLink::Mode::kDeliver);
  pushes.push_back(MakePush(2, 3, {11, 33}));
  EXPECT_TRUE(Push(*p, pushes.back())->acked());
  const std::vector<float> want = AppliedOnce(pushes, kKeys);
  EXPECT_TRUE(BitwiseEqual(Values(*p, kKeys), want));
  EXPECT_TRUE(BitwiseEqual(Values(*joiner, kKeys), want));
  EXPECT_EQ(joiner->position(), p->position());
}

// The store comes back from an outage without the old primary's lease: its monitor finds it
// out of the new epoch's set and rebuilds it as a backup from the new primary, while its lease's
// keep-alive thread learns that the lease is gone. That notice, arriving last, leaves the
// rebuilt backup serving (StepDown would fence it, and its new primary would drop it).
TEST(ShardReplica, ALeaseLostNoticeAfterARebuildAsBackupLeavesTheBackupServing) {
  auto old_primary = NewReplica(), promoted = NewReplica();
  FakeGuard old_guard, guard;
  ASSERT_TRUE(old_primary->BecomePrimary(1, {}, old_guard.Make()).ok());
  ASSERT_TRUE(Push(*old_primary, MakePush(1, 1, {11}))->acked());
  ASSERT_TRUE(promoted->BecomePrimary(2, {}, guard.Make()).ok());
  ASSERT_TRUE(Push(*promoted, MakePush(1, 2, {22}))->acked());

  old_primary->StepDown("not in the shard's replica set");  // the monitor, before its catch-up
  Result<ShardReplica::JoinSnapshot> snapshot = promoted->SnapshotForJoin(0);
  ASSERT_TRUE(snapshot.ok());
  ASSERT_TRUE(old_primary->InstallSnapshot(snapshot->bytes).ok());
  auto to_rebuilt = std::make_shared<FakeLink>(old_primary.get());
  ASSERT_TRUE(promoted->AttachLearner(0, to_rebuilt, guard.Add()).ok());

  old_primary->StepDownIfPrimary("primary lost its lease");  // the keep-alive thread, late
  EXPECT_EQ(old_primary->role(), ShardReplica::Role::kBackup);
  ASSERT_TRUE(Push(*promoted, MakePush(1, 3, {22}))->acked());
  EXPECT_EQ(old_primary->position(), promoted->position()) << "the forward was applied";
  EXPECT_EQ(guard.adds.size(), 1u) << "caught up: its addition is asked for";
}

TEST(ShardReplica, ALearnerThatFailsBeforeItsAdditionIsForgottenWithoutACommit) {
  auto p = NewReplica(), b1 = NewReplica(), joiner = NewReplica();
  FakeGuard guard;
  ASSERT_TRUE(p->BecomePrimary(1, {std::make_shared<FakeLink>(b1.get())}, guard.Make()).ok());
  ASSERT_TRUE(Push(*p, MakePush(1, 1, {11}))->acked());
  Result<ShardReplica::JoinSnapshot> snapshot = p->SnapshotForJoin(2);
  ASSERT_TRUE(snapshot.ok());
  ASSERT_TRUE(Push(*p, MakePush(1, 2, {11}))->acked());
  ASSERT_TRUE(joiner->InstallSnapshot(snapshot->bytes).ok());
  auto to_joiner = std::make_shared<FakeLink>(joiner.get(), FakeLink::Mode::kDead);
  ASSERT_TRUE(p->AttachLearner(2, to_joiner, guard.Add()).ok());
  EXPECT_TRUE(Push(*p, MakePush(1, 3, {11}))->acked());
  EXPECT_TRUE(guard.drops.empty()) << "it never was a member: nothing to commit";
  EXPECT_TRUE(guard.adds.empty());
  EXPECT_EQ(to_joiner->forwarded(), 1) << "not sent to again";
  EXPECT_EQ(p->live_backups(), 1u);
  // Its attach used the snapshot up: a second attach needs a new one.
  EXPECT_EQ(p->AttachLearner(2, to_joiner, guard.Add()).code(), StatusCode::kFailedPrecondition);
}

TEST(ShardReplica, AnAttachAfterTheLogMovedPastTheSnapshotIsRefused) {
  ShardReplica::Options options;
  options.max_undurable_pushes = 2;
  options.max_catch_up_pushes = 4;
  auto p = NewReplica(options), joiner = NewReplica(options);
  ASSERT_TRUE(p->BecomePrimary(1, {}).ok());
  Result<ShardReplica::JoinSnapshot> snapshot = p->SnapshotForJoin(1);
  ASSERT_TRUE(snapshot.ok());
  for (uint64_t i = 1; i <= 5; ++i) ASSERT_TRUE(Push(*p, MakePush(1, i, {11}))->acked());
  ASSERT_TRUE(joiner->InstallSnapshot(snapshot->bytes).ok());
  EXPECT_EQ(p->AttachLearner(1, std::make_shared<FakeLink>(joiner.get()), {}).code(),
            StatusCode::kFailedPrecondition);
  // Within the bound the log is kept for it, beyond max_undurable_pushes.
  snapshot = p->SnapshotForJoin(1);
  ASSERT_TRUE(snapshot.ok());
  for (uint64_t i = 6; i <= 9; ++i) ASSERT_TRUE(Push(*p, MakePush(1, i, {11}))->acked());
  ASSERT_TRUE(joiner->InstallSnapshot(snapshot->bytes).ok());
  FakeGuard guard;
  ASSERT_TRUE(p->AttachLearner(1, std::make_shared<FakeLink>(joiner.get()), guard.Add()).ok());
  EXPECT_EQ(joiner->position(), p->position());
  EXPECT_TRUE(BitwiseEqual(Values(*joiner, kKeys), Values(*p, kKeys)));
  EXPECT_EQ(guard.adds.size(), 1u);
}

TEST(ShardReplica, TheLogKeptForAJoinerIsBoundedInBytes) {
  ShardReplica::Options options;
  options.max_undurable_pushes = 2;
  // One push of one key: 8 bytes of key, 16 of gradient. Room for three.
  options.max_catch_up_bytes = 3 * (8 + kDim * 4);
  auto p = NewReplica(options), joiner = NewReplica(options), late = NewReplica(options);
  ASSERT_TRUE(p->BecomePrimary(1, {}).ok());
  Result<ShardReplica::JoinSnapshot> snapshot = p->SnapshotForJoin(1);
  ASSERT_TRUE(snapshot.ok());
  for (uint64_t i = 1; i <= 3; ++i) ASSERT_TRUE(Push(*p, MakePush(1, i, {11}))->acked());
  ASSERT_TRUE(joiner->InstallSnapshot(snapshot->bytes).ok());
  FakeGuard guard;
  ASSERT_TRUE(p->AttachLearner(1, std::make_shared<FakeLink>(joiner.get()), guard.Add()).ok())
      << "three pushes fit";
  snapshot = p->SnapshotForJoin(2);
  ASSERT_TRUE(snapshot.ok());
  for (uint64_t i = 4; i <= 7; ++i) ASSERT_TRUE(Push(*p, MakePush(1, i, {11}))->acked());
  ASSERT_TRUE(late->InstallSnapshot(snapshot->bytes).ok());
  EXPECT_EQ(p->AttachLearner(2, std::make_shared<FakeLink>(late.get()), guard.Add()).code(),
            StatusCode::kFailedPrecondition)
      << "four do not";
}

TEST(ShardReplica, APrimaryWhoseAdditionFailsStepsDown) {
  auto p = NewReplica(), joiner = NewReplica();
  FakeGuard guard;
  ASSERT_TRUE(p->BecomePrimary(1, {}, guard.Make()).ok());
  Result<ShardReplica::JoinSnapshot> snapshot = p->SnapshotForJoin(1);
  ASSERT_TRUE(snapshot.ok());
  ASSERT_TRUE(joiner->InstallSnapshot(snapshot->bytes).ok());
  auto to_joiner = std::make_shared<FakeLink>(joiner.get(), FakeLink::Mode::kHold);
  ASSERT_TRUE(p->AttachLearner(1, to_joiner, guard.Add()).ok());
  ASSERT_EQ(guard.adds.size(), 1u) << "nothing to catch up on";
  auto push = Push(*p, MakePush(1, 1, {11}));
  EXPECT_FALSE(push->result) << "the learner counts while its addition is pending";
  // The store's answer is unknown (timed out): the set may name it, so it may not be ignored.
  guard.AnswerAdds(Unavailable("store timed out"));
  EXPECT_EQ(push->code(), StatusCode::kUnavailable);
  EXPECT_EQ(p->role(), ShardReplica::Role::kFenced);
}

TEST(ShardReplica, InstallSnapshotRefusesCorruptOnesAndOnesFromALeftEpoch) {
  auto p = NewReplica(), joiner = NewReplica();
  ASSERT_TRUE(p->BecomePrimary(1, {}).ok());
  ASSERT_TRUE(Push(*p, MakePush(1, 1, {11}))->acked());
  Result<ShardReplica::JoinSnapshot> snapshot = p->SnapshotForJoin(1);
  ASSERT_TRUE(snapshot.ok());
  std::vector<std::byte> corrupt = snapshot->bytes;
  corrupt.back() ^= std::byte{1};
  EXPECT_EQ(joiner->InstallSnapshot(corrupt).code(), StatusCode::kDataLoss);
  EXPECT_EQ(joiner->role(), ShardReplica::Role::kFenced);
  joiner->RefuseEpochsBelow(2);
  EXPECT_EQ(joiner->InstallSnapshot(snapshot->bytes).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(joiner->role(), ShardReplica::Role::kFenced);
  EXPECT_EQ(p->InstallSnapshot(snapshot->bytes).code(), StatusCode::kFailedPrecondition)
      << "a primary installs nothing";
}

// min_in_sync 2 of 3: with both backups gone the primary acknowledges nothing (the control,
// min_in_sync 1, acknowledges alone what one crash would lose), and once a replica has caught up
// again the refused pushes go through, each applied once.
void BothBackupsGone(size_t min_in_sync) {
  ShardReplica::Options options;
  options.min_in_sync = min_in_sync;
  auto p = NewReplica(options), b1 = NewReplica(), b2 = NewReplica();
  auto to_b1 = std::make_shared<FakeLink>(b1.get()), to_b2 = std::make_shared<FakeLink>(b2.get());
  ASSERT_TRUE(p->BecomePrimary(1, {to_b1, to_b2}).ok());
  EXPECT_EQ(p->in_sync_replicas(), 3u);
  const PushRequest first = MakePush(1, 1, {11}), second = MakePush(1, 2, {22}),
                    third = MakePush(2, 1, {33});
  ASSERT_TRUE(Push(*p, first)->acked());
  to_b1->set_mode(FakeLink::Mode::kDead);
  to_b2->set_mode(FakeLink::Mode::kDead);
  auto applied_alone = Push(*p, second);  // applied, then both forwards fail
  EXPECT_EQ(p->in_sync_replicas(), 1u);
  if (min_in_sync == 1) {
    EXPECT_TRUE(applied_alone->acked()) << "the control acknowledges on the primary alone";
    return;
  }
  ASSERT_EQ(applied_alone->code(), StatusCode::kResourceExhausted)
      << "acknowledged with only the primary holding it";
  EXPECT_EQ(Push(*p, second)->code(), StatusCode::kResourceExhausted) << "a retry, neither";
  EXPECT_EQ(Push(*p, third)->code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(BitwiseEqual(Values(*p, kKeys), AppliedOnce({first, second}, kKeys)))
      << "the refused push was applied";
  EXPECT_EQ(p->below_min_in_sync_refusals(), 3u);

  // A replica comes back (a snapshot, then the pushes after it) and counts once caught up.
  auto joiner = NewReplica();
  Result<ShardReplica::JoinSnapshot> snapshot = p->SnapshotForJoin(7);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  ASSERT_TRUE(joiner->InstallSnapshot(snapshot->bytes).ok());
  bool added = false;
  ASSERT_TRUE(p->AttachLearner(7, std::make_shared<FakeLink>(joiner.get()),
                               [&added](size_t, std::function<void(Status)> committed) {
                                 added = true;
                                 committed(Status::Ok());
                               })
                  .ok());
  EXPECT_TRUE(added);
  EXPECT_EQ(p->in_sync_replicas(), 2u);
  auto retried = Push(*p, second);
  ASSERT_TRUE(retried->acked()) << retried->result->status().ToString();
  EXPECT_TRUE(retried->duplicate()) << "acknowledged, not applied again";
  ASSERT_TRUE(Push(*p, third)->acked());
  const std::vector<float> want = AppliedOnce({first, second, third}, kKeys);
  EXPECT_TRUE(BitwiseEqual(Values(*p, kKeys), want));
  EXPECT_TRUE(BitwiseEqual(Values(*joiner, kKeys), want));
}

TEST(ShardReplica, BelowMinInSyncNothingIsAcknowledgedUntilAReplicaCatchesUp) {
  BothBackupsGone(2);
}

TEST(ShardReplica, WithMinInSyncOneThePrimaryAcknowledgesAlone) {
  BothBackupsGone(1);
}

TEST(ShardReplica, APrimaryPromotedWithTooFewReplicasAcknowledgesNothing) {
  ShardReplica::Options options;
  options.min_in_sync = 3;
  auto p = NewReplica(options), b1 = NewReplica();
  ASSERT_TRUE(p->BecomePrimary(1, {std::make_shared<FakeLink>(b1.get())}).ok());
  EXPECT_EQ(Push(*p, MakePush(1, 1, {11}))->code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(b1->position(), (ShardReplica::Position{0, 0})) << "nothing applied or forwarded";
}

}  // namespace
}  // namespace bx::ps

namespace bx::ps {
namespace {

// Bounded tables (docs/PS.md "Bounded tables"): one replica's rows of the test table, least
// recently pushed first, with their whole state.
std::vector<std::pair<uint64_t, std::vector<float>>> BoundedRows(const ShardReplica& r) {
  std::vector<std::pair<uint64_t, std::vector<float>>> rows;
  r.ForEachTable([&](const Table& t) {
    t.ForEachRow([&](uint64_t key, std::span<const float> s) {
      rows.emplace_back(key, std::vector<float>(s.begin(), s.end()));
    });
  });
  return rows;
}
uint64_t Evicted(const ShardReplica& r) {
  uint64_t evicted = 0;
  r.ForEachTable([&](const Table& t) { evicted += t.evicted(); });
  return evicted;
}

// Pushes overflow a bounded table while a replica joins by snapshot mid-stream and then the
// primary dies with pushes only some replicas hold; the new primary re-forwards them. After
// all that, the two survivors hold exactly the same rows, in the same recency order, with the
// same values, as one table that applied every push in order: nothing resurrected, nothing
// silently lost. (With a snapshot that dropped the recency order, the joiner would evict other
// rows than its peers after installing it.)
TEST(ShardReplica, BoundedTablesEvictTheSameRowsOnEveryReplicaThroughJoinAndFailover) {
  TableConfig config = TestTable();
  config.max_rows = 50;
  auto make = [&] {
    auto r = std::make_unique<ShardReplica>();
    EXPECT_TRUE(r->CreateTable(config).ok());
    return r;
  };
  auto p = make(), b1 = make(), joiner = make();
  auto reference = Table::Create(config);
  ASSERT_TRUE(reference.ok());
  auto push_to = [&](ShardReplica& primary, uint64_t i) {
    // Five keys, three new and two pushed before (kept recent, or revived once evicted).
    PushRequest push = MakePush(1, i, {3 * i, 3 * i + 1, 3 * i + 2, i / 2, (i * 7) % 40});
    return std::make_pair(push, Push(primary, push));
  };
  auto apply = [&](const PushRequest& push) {
    ASSERT_TRUE((*reference)->Push(push.keys, push.gradients).ok());
  };

  FakeGuard guard;
  auto to_b1 = std::make_shared<FakeLink>(b1.get());
  ASSERT_TRUE(p->BecomePrimary(1, {to_b1}, guard.Make()).ok());
  uint64_t i = 1;
  for (; i <= 60; ++i) {
    auto [push, outcome] = push_to(*p, i);
    ASSERT_TRUE(outcome->acked());
    apply(push);
  }
  Result<ShardReplica::JoinSnapshot> snapshot = p->SnapshotForJoin(2);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  for (; i <= 80; ++i) {  // while the snapshot travels
    auto [push, outcome] = push_to(*p, i);
    ASSERT_TRUE(outcome->acked());
    apply(push);
  }
  ASSERT_TRUE(joiner->InstallSnapshot(snapshot->bytes).ok());
  auto to_joiner = std::make_shared<FakeLink>(joiner.get(), FakeLink::Mode::kHold);
  ASSERT_TRUE(p->AttachLearner(2, to_joiner, guard.Add()).ok());
  to_joiner->DeliverHeld();
  guard.AnswerAdds(Status::Ok());
  to_joiner->set_mode(FakeLink::Mode::kDeliver);
  for (; i <= 120; ++i) {
    auto [push, outcome] = push_to(*p, i);
    ASSERT_TRUE(outcome->acked());
    apply(push);
  }
  // The primary forwards three more; b1 never gets them, the joiner does; then it dies.
  to_b1->set_mode(FakeLink::Mode::kHold);
  std::vector<PushRequest> unacked;
  for (; i <= 123; ++i) {
    auto [push, outcome] = push_to(*p, i);
    EXPECT_FALSE(outcome->result);
    unacked.push_back(push);
    apply(push);
  }
  to_b1->LoseHeld();
  EXPECT_GT(joiner->position().lsn, b1->position().lsn);
  EXPECT_NE(BoundedRows(*joiner), BoundedRows(*b1)) << "b1 lacks the last three pushes";

  // The joiner holds the most: it takes over and re-forwards what b1 lacks.
  ASSERT_TRUE(joiner->BecomePrimary(2, {std::make_shared<FakeLink>(b1.get())}).ok());
  for (const PushRequest& retry : unacked) {
    EXPECT_TRUE(Push(*joiner, retry)->duplicate()) << "applied once, before the failover";
  }
  for (; i <= 200; ++i) {
    auto [push, outcome] = push_to(*joiner, i);
    ASSERT_TRUE(outcome->acked());
    apply(push);
  }
  const auto rows = BoundedRows(*joiner);
  EXPECT_EQ(rows.size(), 50u);
  EXPECT_EQ(rows, BoundedRows(*b1));
  EXPECT_EQ(Evicted(*joiner), Evicted(*b1));
  std::vector<std::pair<uint64_t, std::vector<float>>> want;
  (*reference)->ForEachRow([&](uint64_t key, std::span<const float> s) {
    want.emplace_back(key, std::vector<float>(s.begin(), s.end()));
  });
  EXPECT_EQ(rows, want);
  EXPECT_EQ(Evicted(*joiner), (*reference)->evicted());
  EXPECT_GT(Evicted(*joiner), 500u);
}

// The same join and failover with a table that expires rows and admits ids after two pushes,
// every replica's clock different (the new primary's 2 s behind the old one's): the survivors
// hold the same rows, stamps, expiries and admission counts as one ShardState fed every push
// with the primaries' stamps, so no replica read its own clock. (Checked to fail when a backup
// stamps forwarded pushes with its own clock instead.)
TEST(ShardReplica, ExpiryAndAdmissionAreTheSameOnEveryReplicaThroughJoinAndFailover) {
  TableConfig config = TestTable();
  config.ttl_seconds = 5;
  config.admit_after_pushes = 2;
  uint64_t now = 1'000'000'000;  // ms; every replica's clock is derived from it
  auto make = [&](int64_t skew_ms) {
    ShardReplica::Options options;
    options.clock_ms = [&now, skew_ms] { return uint64_t(int64_t(now) + skew_ms); };
    auto r = std::make_unique<ShardReplica>(options);
    EXPECT_TRUE(r->CreateTable(config).ok());
    return r;
  };
  auto p = make(0), b1 = make(+7'000), joiner = make(-2'000);
  ShardState reference;
  ASSERT_TRUE(reference.CreateTable(config).ok());
  auto push_to = [&](ShardReplica& primary, int64_t skew_ms, uint64_t i) {
    now += 400;
    // Keys pushed every push, every few pushes and once: some are admitted, some expire.
    PushRequest push = MakePush(1, i, {i % 3, 100 + i % 17, 1000 + i, 100 + (i * 7) % 29});
    auto outcome = Push(primary, push);
    push.stamp_ms = uint64_t(int64_t(now) + skew_ms);
    EXPECT_TRUE(reference.ApplyPush(push).ok());
    return outcome;
  };
  using Rows = std::vector<std::tuple<uint64_t, uint64_t, std::vector<float>>>;
  auto rows_of = [](const ShardState& s) {
    Rows rows;
    s.table(kTable)->ForEachRowPushedAt(
        [&](uint64_t key, uint64_t pushed_ms, std::span<const float> st) {
          rows.emplace_back(key, pushed_ms, std::vector<float>(st.begin(), st.end()));
        });
    return rows;
  };
  auto state_of = [&](const ShardState& s) {
    const PushAdmission& counts = *s.admission(kTable);
    return std::make_tuple(
        rows_of(s), s.clock_ms, s.table(kTable)->expired(), counts.admitted(), counts.rejected(),
        std::vector<uint16_t>(counts.counters().begin(), counts.counters().end()));
  };

  FakeGuard guard;
  auto to_b1 = std::make_shared<FakeLink>(b1.get());
  ASSERT_TRUE(p->BecomePrimary(1, {to_b1}, guard.Make()).ok());
  uint64_t i = 1;
  for (; i <= 40; ++i) ASSERT_TRUE(push_to(*p, 0, i)->acked());
  Result<ShardReplica::JoinSnapshot> snapshot = p->SnapshotForJoin(2);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  for (; i <= 55; ++i) ASSERT_TRUE(push_to(*p, 0, i)->acked());
  ASSERT_TRUE(joiner->InstallSnapshot(snapshot->bytes).ok());
  auto to_joiner = std::make_shared<FakeLink>(joiner.get(), FakeLink::Mode::kHold);
  ASSERT_TRUE(p->AttachLearner(2, to_joiner, guard.Add()).ok());
  to_joiner->DeliverHeld();
  guard.AnswerAdds(Status::Ok());
  to_joiner->set_mode(FakeLink::Mode::kDeliver);
  for (; i <= 80; ++i) ASSERT_TRUE(push_to(*p, 0, i)->acked());
  EXPECT_EQ(state_of(joiner->state()), state_of(b1->state()));
  // The primary forwards three more; b1 never gets them, the joiner does; then it dies.
  to_b1->set_mode(FakeLink::Mode::kHold);
  for (; i <= 83; ++i) EXPECT_FALSE(push_to(*p, 0, i)->result);
  to_b1->LoseHeld();
  EXPECT_NE(state_of(joiner->state()), state_of(b1->state())) << "b1 lacks three pushes";

  ASSERT_TRUE(joiner->BecomePrimary(2, {std::make_shared<FakeLink>(b1.get())}).ok());
  for (; i <= 140; ++i) ASSERT_TRUE(push_to(*joiner, -2'000, i)->acked());
  EXPECT_EQ(state_of(joiner->state()), state_of(b1->state()));
  EXPECT_EQ(state_of(joiner->state()), state_of(reference));
  EXPECT_GT(reference.table(kTable)->expired(), 50u);
  EXPECT_GT(reference.admission(kTable)->admitted(), 20u);
  EXPECT_GT(reference.admission(kTable)->rejected(), 100u);
}

// A checkpoint restores only into tables with its ttl and admission (stamps and counts mean
// nothing under others), keeping its push clock; the bounds may differ.
TEST(ShardReplica, ARestoreKeepsThePushClockAndRefusesAnotherTtlOrAdmission) {
  TableConfig config = TestTable();
  config.ttl_seconds = 60;
  config.admit_after_pushes = 2;
  ShardState checkpoint;
  ASSERT_TRUE(checkpoint.CreateTable(config).ok());
  PushRequest push = MakePush(1, 1, {4, 4, 5});
  push.stamp_ms = 123'456;
  ASSERT_TRUE(checkpoint.ApplyPush(push).ok());
  auto restore_into = [&](const TableConfig& mine) {
    ShardReplica fresh;
    EXPECT_TRUE(fresh.CreateTable(mine).ok());
    Result<std::unique_ptr<ShardState>> copy = checkpoint.Copy();
    EXPECT_TRUE(copy.ok());
    Status restored = fresh.Restore(**copy);
    return std::make_pair(restored, fresh.state().clock_ms);
  };
  TableConfig bounded = config;
  bounded.max_rows = 10;
  auto [same, clock] = restore_into(bounded);
  EXPECT_TRUE(same.ok()) << same.ToString();
  EXPECT_EQ(clock, 123'456u);
  TableConfig other_ttl = config;
  other_ttl.ttl_seconds = 30;
  Status refused = restore_into(other_ttl).first;
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("ttl_seconds 60"), std::string::npos) << refused.ToString();
  TableConfig no_admission = config;
  no_admission.admit_after_pushes = 0;
  EXPECT_EQ(restore_into(no_admission).first.code(), StatusCode::kFailedPrecondition);
}

// Serving sync (docs/PS.md "Serving sync"): a primary's changes since a position are the rows
// pushed after it and the keys evicted after it; a position of another epoch, or older than the
// tombstones kept, gets a full copy. A follower and its backup (the record forwarded through
// the wire codec) applying them end with the training rows, evicted ones gone, and refuse
// client pushes.
TEST(ShardReplica, ChangesSinceAPositionCarryRowsAndTombstonesAndAFollowerAppliesThemWhole) {
  TableConfig bounded = TestTable();
  bounded.max_rows = 4;
  ShardReplica::Options options;
  options.max_sync_tombstones = 3;
  ShardReplica training(options);
  ASSERT_TRUE(training.CreateTable(bounded).ok());
  ASSERT_TRUE(training.BecomePrimary(1, {}).ok());
  const uint64_t client = uint64_t{1} << 32;
  ASSERT_TRUE(Push(training, MakePush(client, 1, {1, 2, 3, 4}))->acked());

  ShardReplica::Options follows;
  follows.follower = true;
  ShardReplica serving(follows), serving_backup(follows);
  ASSERT_TRUE(serving.CreateTable(bounded).ok());
  ASSERT_TRUE(serving_backup.CreateTable(bounded).ok());
  ASSERT_TRUE(serving.BecomePrimary(1, {std::make_shared<FakeLink>(&serving_backup)}).ok());
  uint64_t sequence = 0;
  auto apply = [&](ShardReplica::Position since, bool want_full) {
    Result<SyncBatch> batch = training.ChangesSince(since);
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    EXPECT_EQ(batch->full, want_full);
    PushRequest record;
    record.id = PushId{client, ++sequence};
    record.dim = 1;
    record.sync = std::make_shared<const SyncBatch>(std::move(batch).value());
    ASSERT_TRUE(Push(serving, record)->acked());
  };
  apply({0, 0}, true);  // never synced: a full copy
  const std::vector<uint64_t> all = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(Values(serving, all), Values(training, all));

  // Keys 5 and 6 evict 1 and 2: the delta after lsn 1 holds rows 5, 6 and tombstones 1, 2.
  ASSERT_TRUE(Push(training, MakePush(client, 2, {5, 6}))->acked());
  Result<SyncBatch> delta = training.ChangesSince({1, 1});
  ASSERT_TRUE(delta.ok());
  EXPECT_FALSE(delta->full);
  ASSERT_EQ(delta->tables.size(), 1u);
  EXPECT_EQ(delta->tables[0].keys.size(), 2u);
  EXPECT_EQ(delta->tables[0].dropped, (std::vector<uint64_t>{1, 2}));
  apply(ShardReplica::Position{serving.synced().epoch, serving.synced().lsn}, false);
  EXPECT_EQ(Values(serving, all), Values(training, all));
  EXPECT_EQ(Values(serving_backup, all), Values(training, all));
  EXPECT_EQ(serving_backup.synced().lsn, 2u);
  EXPECT_EQ(serving.state().table(kTable)->row_count(), 4u);
  // Dropped by the tombstones, not by the serving table's own bound (which would hide them).
  EXPECT_EQ(serving.state().table(kTable)->evicted(), 0u);

  // Two more evictions: the first tombstone (key 1, lsn 2) is dropped beyond the bound of 3, so
  // a follower at lsn 1 needs a full copy; one at lsn 2 still gets a delta.
  ASSERT_TRUE(Push(training, MakePush(client, 3, {7, 8}))->acked());
  EXPECT_TRUE(training.ChangesSince({1, 1})->full);
  EXPECT_FALSE(training.ChangesSince({1, 2})->full);
  EXPECT_TRUE(training.ChangesSince({2, 3})->full);  // another epoch
  apply({1, 2}, false);
  const std::vector<uint64_t> more = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(Values(serving, more), Values(training, more));
  EXPECT_EQ(Values(serving_backup, more), Values(training, more));

  auto refused = Push(serving, MakePush(client + 1, 1, {9}));
  EXPECT_EQ(refused->code(), StatusCode::kInvalidArgument);
}

// Rows a ttl expires are tombstones too: serving drops what training expired. (Fails when only
// a bound's evictions are recorded.)
TEST(ShardReplica, RowsATtlExpiresReachFollowersAsTombstones) {
  TableConfig expiring = TestTable();
  expiring.ttl_seconds = 1;
  uint64_t now = 1'000'000;
  ShardReplica::Options options;
  options.clock_ms = [&now] { return now; };
  ShardReplica training(options);
  ASSERT_TRUE(training.CreateTable(expiring).ok());
  ASSERT_TRUE(training.BecomePrimary(1, {}).ok());
  const uint64_t client = uint64_t{1} << 32;
  ASSERT_TRUE(Push(training, MakePush(client, 1, {1, 2}))->acked());
  now += 600;
  ASSERT_TRUE(Push(training, MakePush(client, 2, {3}))->acked());
  now += 600;  // rows 1 and 2 were last pushed 1.2 s ago: this push expires them
  ASSERT_TRUE(Push(training, MakePush(client, 3, {4}))->acked());
  EXPECT_EQ(training.state().table(kTable)->expired(), 2u);
  Result<SyncBatch> delta = training.ChangesSince({1, 1});
  ASSERT_TRUE(delta.ok()) << delta.status().ToString();
  EXPECT_FALSE(delta->full);
  ASSERT_EQ(delta->tables.size(), 1u);
  EXPECT_EQ(delta->tables[0].dropped, (std::vector<uint64_t>{1, 2}));
  std::vector<uint64_t> changed = delta->tables[0].keys;  // in no particular order
  std::sort(changed.begin(), changed.end());
  EXPECT_EQ(changed, (std::vector<uint64_t>{3, 4}));
}

}  // namespace
}  // namespace bx::ps
