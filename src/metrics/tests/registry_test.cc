// Registry semantics: one series per name and label set, types fixed per name, collectors that
// come and go, and counting from many threads.
#include <gtest/gtest.h>

#include <thread>

#include "bx/metrics.h"
#include "metrics/text_format.h"

namespace bx::metrics {
namespace {

TEST(RegistryTest, SameNameAndLabelsIsTheSameSeries) {
  Registry r;
  Counter& a = r.GetCounter("bx_test_events_total", "events", {{"x", "1"}, {"y", "2"}});
  Counter& b = r.GetCounter("bx_test_events_total", "events", {{"y", "2"}, {"x", "1"}});
  Counter& c = r.GetCounter("bx_test_events_total", "events", {{"x", "2"}});
  EXPECT_EQ(&a, &b) << "label order does not matter";
  EXPECT_NE(&a, &c);
  a.Increment();
  b.Increment(4);
  EXPECT_EQ(a.Value(), 5u);
  EXPECT_EQ(c.Value(), 0u);
}

TEST(RegistryTest, GaugeGoesUpAndDown) {
  Registry r;
  Gauge& g = r.GetGauge("bx_test_depth", "depth");
  g.Set(10);
  g.Add(-2.5);
  EXPECT_DOUBLE_EQ(g.Value(), 7.5);
}

TEST(RegistryDeathTest, ANameKeepsItsType) {
  Registry r;
  r.GetCounter("bx_test_thing", "a counter");
  EXPECT_DEATH(r.GetGauge("bx_test_thing", "now a gauge"), "bx_test_thing is a counter");
}

TEST(RegistryDeathTest, InvalidNamesAreRefused) {
  Registry r;
  EXPECT_DEATH(r.GetCounter("bx-bad", ""), "invalid metric name");
  EXPECT_DEATH(r.GetCounter("bx_ok", "", {{"__reserved", "x"}}), "invalid label name");
  EXPECT_DEATH(r.GetHistogram("bx_h", "", {{"le", "1"}}), "invalid label name");
}

TEST(RegistryTest, CountsFromManyThreads) {
  Registry r;
  Counter& c = r.GetCounter("bx_test_parallel_total", "");
  constexpr int kThreads = 8, kEach = 100000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&c] {
      for (int i = 0; i < kEach; ++i) c.Increment();
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.Value(), uint64_t(kThreads) * kEach);
}

TEST(RegistryTest, CollectorRunsAtEveryScrapeUntilItsHandleGoes) {
  Registry r;
  int runs = 0;
  {
    CollectorHandle handle = r.AddCollector([&runs](SampleWriter& w) {
      ++runs;
      w.Gauge("bx_test_collected", "from a callback", {{"k", "v"}}, 42);
    });
    std::string text = r.ExposeText();
    EXPECT_NE(text.find("bx_test_collected{k=\"v\"} 42\n"), std::string::npos) << text;
    r.ExposeText();
    EXPECT_EQ(runs, 2);
  }
  EXPECT_EQ(r.ExposeText().find("bx_test_collected"), std::string::npos);
  EXPECT_EQ(runs, 2);
}

TEST(RegistryTest, MapCollectorExportsACounterStructAsItIs) {
  Registry r;
  std::map<std::string, uint64_t> counters{{"credit_stalls", 3}, {"bytes_sent_total", 100}};
  CollectorHandle handle = r.AddMapCollector("bx_engine", {{"engine", "7"}}, SampleKind::kCounter,
                                             [&counters] { return counters; });
  counters["credit_stalls"] = 5;  // read at scrape time, not at registration
  ParsedText parsed = ParseText(r.ExposeText());
  EXPECT_EQ(parsed.types["bx_engine_credit_stalls_total"], "counter");
  EXPECT_EQ(parsed.types["bx_engine_bytes_sent_total"], "counter") << "no double _total";
  ASSERT_EQ(parsed.samples.size(), 2u);
  for (const ParsedSample& s : parsed.samples) {
    EXPECT_EQ(s.labels, (Labels{{"engine", "7"}}));
    EXPECT_EQ(s.value, s.name == "bx_engine_credit_stalls_total" ? 5 : 100);
  }
}

TEST(RegistryTest, CollectGivesWhatAScrapeReads) {
  Registry r;
  r.GetCounter("bx_test_events_total", "events", {{"b", "2"}, {"a", "1"}}).Increment(3);
  r.GetHistogram("bx_test_latency_seconds", "latency").Observe(0.5);
  CollectorHandle handle = r.AddCollector(
      [](SampleWriter& w) { w.Gauge("bx_test_collected", "from a callback", {}, 42); });
  std::map<std::string, double> by_name;
  for (const Sample& s : r.Collect()) {
    if (s.name == "bx_test_events_total") {
      EXPECT_EQ(s.labels, (Labels{{"a", "1"}, {"b", "2"}}));
    }
    if (s.name != "bx_test_latency_seconds_bucket") by_name[s.name] = s.value;
  }
  EXPECT_EQ(by_name, (std::map<std::string, double>{{"bx_test_collected", 42},
                                                    {"bx_test_events_total", 3},
                                                    {"bx_test_latency_seconds_count", 1},
                                                    {"bx_test_latency_seconds_sum", 0.5}}));
}

TEST(RegistryTest, SeveralCollectorsFeedOneFamily) {
  Registry r;
  auto one = r.AddMapCollector("bx_socket", {{"socket", "1"}}, SampleKind::kCounter, [] {
    return std::map<std::string, uint64_t>{{"messages", 1}};
  });
  auto two = r.AddMapCollector("bx_socket", {{"socket", "2"}}, SampleKind::kCounter, [] {
    return std::map<std::string, uint64_t>{{"messages", 2}};
  });
  std::string text = r.ExposeText();
  size_t first = text.find("# TYPE bx_socket_messages_total counter");
  ASSERT_NE(first, std::string::npos);
  EXPECT_EQ(text.find("# TYPE bx_socket_messages_total", first + 1), std::string::npos)
      << "one family header: " << text;
  EXPECT_EQ(ParseText(text).samples.size(), 2u);
}

TEST(RegistryTest, CollectorNamesAreMadeValid) {
  Registry r;
  auto h = r.AddCollector([](SampleWriter& w) { w.Counter("bx.odd-name", "", {{"9x", "v"}}, 1); });
  EXPECT_NE(r.ExposeText().find("bx_odd_name{_9x=\"v\"} 1\n"), std::string::npos);
}

TEST(RegistryTest, HandleCanBeMovedAndReset) {
  Registry r;
  CollectorHandle a = r.AddCollector([](SampleWriter& w) { w.Gauge("bx_test_g", "", {}, 1); });
  CollectorHandle b = std::move(a);
  EXPECT_NE(r.ExposeText().find("bx_test_g"), std::string::npos);
  b.Reset();
  EXPECT_EQ(r.ExposeText().find("bx_test_g"), std::string::npos);
}

}  // namespace
}  // namespace bx::metrics
