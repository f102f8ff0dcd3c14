// The plain pieces: wire header, method table, replica addresses, histogram, budget, backoff.
#include <gtest/gtest.h>

#include "rpc/frame.h"
#include "rpc/retry.h"
#include "rpc/tests/rpc_test_util.h"

namespace bx::rpc {
namespace {

TEST(RpcFrameTest, HeaderRoundTrips) {
  FrameHeader header;
  header.kind = FrameKind::kResponse;
  header.flags = kFlagIdempotent;
  header.call_id = 0x1122334455667788ULL;
  header.method_id = 7;
  header.status = static_cast<uint32_t>(StatusCode::kNotFound);
  header.budget_us = 123456;
  Result<Buffer> frame = MakeFrame(header, "payload");
  ASSERT_TRUE(frame.ok());
  Result<FrameHeader> decoded = DecodeHeader(*frame);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->kind, FrameKind::kResponse);
  EXPECT_EQ(decoded->flags, kFlagIdempotent);
  EXPECT_EQ(decoded->call_id, header.call_id);
  EXPECT_EQ(decoded->method_id, 7u);
  EXPECT_EQ(decoded->status, header.status);
  EXPECT_EQ(decoded->budget_us, 123456u);
  Message message = MessageFrame::Wrap(std::move(frame).value());
  EXPECT_EQ(message.view(), "payload");
}

TEST(RpcFrameTest, MalformedHeadersAreRefusedSayingWhy) {
  Result<Buffer> frame = MakeFrame({}, "");
  ASSERT_TRUE(frame.ok());
  frame->data()[0] = std::byte{0};
  EXPECT_NE(DecodeHeader(*frame).status().message().find("magic"), std::string::npos);
  frame = MakeFrame({}, "");
  frame->data()[5] = std::byte{99};
  EXPECT_NE(DecodeHeader(*frame).status().message().find("kind"), std::string::npos);
  frame->Resize(8);
  EXPECT_EQ(DecodeHeader(*frame).status().code(), StatusCode::kDataLoss);
}

TEST(RpcFrameTest, MethodTableRoundTrips) {
  std::unordered_map<std::string, uint32_t> methods{{"ps.Fetch", 1}, {"ps.Push", 2}};
  auto decoded = DecodeMethodTable(EncodeMethodTable(methods));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, methods);
  EXPECT_FALSE(DecodeMethodTable("1ps.Fetch\n").ok());
  EXPECT_FALSE(DecodeMethodTable("1 ps.Fetch").ok());
}

TEST(RpcReplicaAddressTest, ParsesBothForms) {
  auto pair = ReplicaAddress::Parse("rdma://10.0.0.1:7000,tcp://10.0.0.1:7001");
  ASSERT_TRUE(pair.ok()) << pair.status().ToString();
  EXPECT_EQ(pair->rdma_url, "rdma://10.0.0.1:7000");
  EXPECT_EQ(pair->tcp_url, "tcp://10.0.0.1:7001");
  auto ports = ReplicaAddress::Parse("host-a:7000,7001");
  ASSERT_TRUE(ports.ok());
  EXPECT_EQ(ports->ToString(), "rdma://host-a:7000,tcp://host-a:7001");
  auto tcp_only = ReplicaAddress::Parse("tcp://h:1");
  ASSERT_TRUE(tcp_only.ok());
  EXPECT_TRUE(tcp_only->rdma_url.empty());
  EXPECT_FALSE(ReplicaAddress::Parse("nonsense,").ok());
}

TEST(RpcHistogramTest, PercentilesWithinBucketError) {
  LatencyHistogram histogram;
  for (int us = 1; us <= 1000; ++us) histogram.Record(std::chrono::microseconds(us));
  EXPECT_EQ(histogram.count(), 1000u);
  EXPECT_NEAR(histogram.PercentileUs(0.5), 500, 500 * 0.13);
  EXPECT_NEAR(histogram.PercentileUs(0.99), 990, 990 * 0.13);
  EXPECT_LE(histogram.PercentileUs(1.0), 1000);
}

TEST(RpcRetryTest, BudgetAllowsRatioOfCallsPlusBurst) {
  RetryBudget budget(0.1, 5);
  int granted = 0;
  for (int i = 0; i < 1000; ++i) {
    budget.OnCall();
    if (budget.TryWithdraw()) ++granted;
  }
  EXPECT_LE(granted, 5 + 100);
  EXPECT_GE(granted, 100);
}

TEST(RpcRetryTest, BackoffGrowsWithJitterAndIsCapped) {
  RetryOptions options;
  options.initial_backoff = std::chrono::milliseconds(10);
  options.max_backoff = std::chrono::milliseconds(50);
  options.jitter = 0.5;
  std::mt19937_64 rng(1);
  for (int i = 0; i < 100; ++i) {
    auto first = Backoff(options, 1, rng);
    EXPECT_GE(first, std::chrono::milliseconds(5));
    EXPECT_LE(first, std::chrono::milliseconds(10));
    auto later = Backoff(options, 6, rng);
    EXPECT_GE(later, std::chrono::milliseconds(25));
    EXPECT_LE(later, std::chrono::milliseconds(50));
  }
}

}  // namespace
}  // namespace bx::rpc
