// The Prometheus text exposition format 0.0.4, exactly as a scraper reads it.
#include <gtest/gtest.h>

#include <cmath>

#include "bx/metrics.h"
#include "metrics/text_format.h"

namespace bx::metrics {
namespace {

TEST(TextFormatTest, ExpositionOfEachType) {
  Registry r;
  r.GetCounter("bx_engine_credit_stalls_total", "Sends that waited for a credit.",
               {{"transport", "rdma"}})
      .Increment(3);
  r.GetGauge("bx_engine_bytes_in_flight", "Bytes posted, not completed.").Set(65536);
  HistogramOptions o;
  o.min = 1;
  o.max = 4;
  o.sub_buckets = 2;
  Histogram& h = r.GetHistogram("bx_rpc_latency_seconds", "Call latency.", {}, o);
  h.Observe(1.25);  // buckets [1, 1.5) [1.5, 2) [2, 3) [3, 4) [4, 6) [6, 8)
  h.Observe(1.25);
  h.Observe(3);
  EXPECT_EQ(r.ExposeText(),
            "# HELP bx_engine_bytes_in_flight Bytes posted, not completed.\n"
            "# TYPE bx_engine_bytes_in_flight gauge\n"
            "bx_engine_bytes_in_flight 65536\n"
            "# HELP bx_engine_credit_stalls_total Sends that waited for a credit.\n"
            "# TYPE bx_engine_credit_stalls_total counter\n"
            "bx_engine_credit_stalls_total{transport=\"rdma\"} 3\n"
            "# HELP bx_rpc_latency_seconds Call latency.\n"
            "# TYPE bx_rpc_latency_seconds histogram\n"
            "bx_rpc_latency_seconds_bucket{le=\"1\"} 0\n"
            "bx_rpc_latency_seconds_bucket{le=\"1.5\"} 2\n"
            "bx_rpc_latency_seconds_bucket{le=\"3\"} 2\n"
            "bx_rpc_latency_seconds_bucket{le=\"4\"} 3\n"
            "bx_rpc_latency_seconds_bucket{le=\"+Inf\"} 3\n"
            "bx_rpc_latency_seconds_sum 5.5\n"
            "bx_rpc_latency_seconds_count 3\n");
}

TEST(TextFormatTest, EscapesHelpAndLabelValues) {
  Registry r;
  r.GetCounter("bx_test_total", "a \\ and\na newline", {{"peer", "say \"hi\"\\\n"}}).Increment();
  std::string text = r.ExposeText();
  EXPECT_NE(text.find("# HELP bx_test_total a \\\\ and\\na newline\n"), std::string::npos);
  EXPECT_NE(text.find("bx_test_total{peer=\"say \\\"hi\\\"\\\\\\n\"} 1\n"), std::string::npos)
      << text;
  ParsedText parsed = ParseText(text);
  ASSERT_EQ(parsed.samples.size(), 1u);
  EXPECT_EQ(parsed.samples[0].labels[0].second, "say \"hi\"\\\n");
}

TEST(TextFormatTest, Values) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(18446744073709551615.0), "18446744073709551616");  // shortest form
  EXPECT_EQ(FormatValue(123456789), "123456789");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(1e-7), "1e-07");
  EXPECT_EQ(FormatValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatValue(NAN), "NaN");
}

TEST(TextFormatTest, ParsesWhatItWrites) {
  Registry r;
  r.GetCounter("bx_a_total", "", {{"x", "1"}}).Increment(7);
  r.GetGauge("bx_b", "").Set(-1.5);
  size_t skipped = 0;
  ParsedText parsed = ParseText(r.ExposeText() + "garbage{\nbx_c 1 1700000000\n", &skipped);
  EXPECT_EQ(skipped, 1u);
  ASSERT_EQ(parsed.samples.size(), 3u);
  EXPECT_EQ(parsed.samples[0].name, "bx_a_total");
  EXPECT_EQ(parsed.samples[0].value, 7);
  EXPECT_EQ(parsed.samples[1].value, -1.5);
  EXPECT_EQ(parsed.samples[2].name, "bx_c") << "a timestamp is dropped";
  EXPECT_EQ(parsed.types["bx_b"], "gauge");
}

TEST(TextFormatTest, PercentilesSurviveTheExposition) {
  Registry r;
  Histogram& h = r.GetHistogram("bx_test_seconds", "");
  for (int i = 1; i <= 1000; ++i) h.Observe(i * 1e-6);  // 1 us .. 1 ms
  std::vector<std::pair<double, double>> buckets;
  double sum = 0;
  for (const ParsedSample& s : ParseText(r.ExposeText()).samples) {
    if (s.name == "bx_test_seconds_bucket")
      buckets.emplace_back(std::stod(s.labels[0].second), s.value);
    if (s.name == "bx_test_seconds_sum") sum = s.value;
  }
  HistogramSnapshot local = h.Snapshot();
  HistogramSnapshot remote = SnapshotFromBuckets(buckets, sum);
  EXPECT_EQ(remote.count, 1000u);
  for (double q : {0.5, 0.9, 0.99})
    EXPECT_NEAR(remote.Percentile(q), local.Percentile(q), local.Percentile(q) * 1e-9) << q;
}

TEST(TextFormatTest, Names) {
  EXPECT_TRUE(IsValidMetricName("bx_engine:rate_total"));
  EXPECT_FALSE(IsValidMetricName("9lives"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_TRUE(IsValidLabelName("peer"));
  EXPECT_FALSE(IsValidLabelName("__name__"));
  EXPECT_EQ(SanitizeName("rdma.bytes-sent"), "rdma_bytes_sent");
  EXPECT_EQ(SanitizeName("1x"), "_1x");
}

}  // namespace
}  // namespace bx::metrics
