// Receive-credit flow control (paper section 5.4.2), as two small classes with no verbs in them,
// so that tests and the fabric simulator drive exactly the code production runs.
//
// SendCredits (sender side): one credit per receive the peer has posted for us. A SEND or a
// WRITE_WITH_IMM spends one; a plain WRITE spends none. Data never spends the last credit: it is
// reserved for a credit update, so two peers that have both run dry can always tell each other
// about the receives they have reposted, and neither waits forever.
//
// CreditReturner (receiver side): counts consumed receives; once k = depth/2 have been consumed
// it asks the engine to repost k receives with one ibv_post_recv and owes the peer k credits,
// returned piggybacked on the next outgoing message or, if none is going, as a credit message.
//
// Both are single-threaded (the engine's I/O thread).
#pragma once

#include <cassert>
#include <cstdint>

namespace bx::flow_control {

class SendCredits {
 public:
  // `initial` = the peer's receive-queue depth, learnt at connection set-up.
  explicit SendCredits(uint32_t initial) : credits_(initial), limit_(initial) {}

  uint32_t available() const { return credits_; }
  // Data (eager sends, rendezvous control, the final WRITE_WITH_IMM) keeps one credit back.
  bool CanSendData() const { return credits_ >= 2; }
  // A credit update may take the last credit.
  bool CanSendCreditUpdate() const { return credits_ >= 1; }

  void Spend() {
    assert(credits_ > 0);
    --credits_;
  }
  // The peer returned `n` credits (piggybacked or in a credit message).
  void Return(uint32_t n) {
    credits_ += n;
    // Never more than the receives the peer can have posted: a violation is a protocol bug.
    assert(credits_ <= limit_);
  }
  uint32_t limit() const { return limit_; }

 private:
  uint32_t credits_;
  uint32_t limit_;
};

class CreditReturner {
 public:
  // `depth` = our receive-queue depth d; receives are reposted in batches of k = d/2.
  explicit CreditReturner(uint32_t depth) : batch_(depth / 2 > 0 ? depth / 2 : 1) {}

  uint32_t batch() const { return batch_; }

  // A receive completed. Returns true when a batch of `batch()` receives should be reposted now.
  bool OnReceiveConsumed() { return ++consumed_ >= batch_; }
  uint32_t consumed() const { return consumed_; }

  // The engine reposted `n` receives: the peer may be told about them.
  void OnReposted(uint32_t n) {
    assert(n <= consumed_);
    consumed_ -= n;
    owed_ += n;
  }

  // Credits owed to the peer, not yet sent.
  uint32_t owed() const { return owed_; }
  // Takes up to `max` owed credits to put on an outgoing message.
  uint32_t Take(uint32_t max) {
    uint32_t n = owed_ < max ? owed_ : max;
    owed_ -= n;
    return n;
  }
  // Whether owed credits justify a message of their own (nothing else is going out): once a
  // whole batch is owed, the peer may be about to run out.
  bool NeedsCreditMessage() const { return owed_ >= batch_; }

 private:
  uint32_t batch_;
  uint32_t consumed_ = 0;
  uint32_t owed_ = 0;
};

}  // namespace bx::flow_control
