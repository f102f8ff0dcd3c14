// Metrics: counters, gauges and latency histograms in one registry, exposed in the Prometheus
// text format (version 0.0.4) and, optionally, over HTTP at /metrics.
//
// Names follow Prometheus conventions: bx_<layer>_<what>_<unit>, counters end in _total, times
// are in seconds (bx_engine_credit_stalls_total, bx_rpc_call_latency_seconds). A metric family
// has one name, one type and one help text; each label set is one series of it.
//
// Two ways to publish:
//   - Own the metric: Registry::Default().GetCounter(...) returns a counter that lives as long as
//     the registry; keep the reference and Increment() it on the hot path.
//   - Export what an object already counts: AddCollector(...) registers a callback that writes
//     samples when a scrape happens. An object with a counter struct (EngineCounters::ToMap(),
//     Socket::counters()) adds a MapCollector and keeps the returned handle; destroying the
//     handle unregisters it. No counter needs rewriting.
//
// Threads: every method of Registry, Counter, Gauge and Histogram may be called from any
// thread. Recording (Increment, Add, Set, Observe) never locks or allocates; scraping locks.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bx/export.h"
#include "bx/status.h"

namespace bx::metrics {

// Label pairs, e.g. {{"transport", "rdma"}, {"peer", "10.0.0.2:7000"}}. Order does not matter.
using Labels = std::vector<std::pair<std::string, std::string>>;

// A monotonically increasing count. Increment is a relaxed atomic add on one of a few shards
// chosen by thread, so threads that count the same event do not bounce one cache line.
class BX_EXPORT Counter {
 public:
  void Increment(uint64_t n = 1) {
    shards_[ShardIndex()].value.fetch_add(n, std::memory_order_relaxed);
  }
  uint64_t Value() const;

 private:
  static constexpr size_t kShards = 8;
  static size_t ShardIndex();
  struct alignas(64) Shard {
    std::atomic<uint64_t> value{0};
  };
  Shard shards_[kShards];
};

// A value that goes up and down (queue depth, bytes in flight).
class BX_EXPORT Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double delta);
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Log-linear buckets: each power of two between `min` and `max` is split into `sub_buckets`
// equal parts, so a bucket is at most 1/sub_buckets of its value wide (12.5% with the default
// 8) at any scale, with a fixed, small number of buckets. Values below `min` (including 0 and
// negatives) fall in the first bucket, values above `max` in an overflow bucket.
struct BX_EXPORT HistogramOptions {
  double min = 1e-7;  // 100 ns, for latencies in seconds
  double max = 100;   // 100 s
  int sub_buckets = 8;
};

// A snapshot of a histogram: read once, then queried.
struct BX_EXPORT HistogramSnapshot {
  uint64_t count = 0;
  double sum = 0;
  // Upper bound of each bucket (the last is +infinity) and the observations in it (not
  // cumulative).
  std::vector<double> upper_bounds;
  std::vector<uint64_t> counts;
  // The value below which a fraction `q` (0..1) of the observations lie, interpolated linearly
  // inside the bucket that holds it; 0 when empty. Accurate to the bucket width.
  double Percentile(double q) const;
};

class BX_EXPORT Histogram {
 public:
  explicit Histogram(const HistogramOptions& options = {});
  // Lock-free: a few relaxed atomic adds.
  void Observe(double value);
  HistogramSnapshot Snapshot() const;

 private:
  // The library's one log-linear scheme (src/base/log_linear_buckets.h, which a public header
  // does not include): octaves_ powers of two from 2^min_exponent_, each cut in sub_buckets_.
  int min_exponent_;
  int octaves_;
  int sub_buckets_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // the count is their sum
  std::atomic<double> sum_{0};
};

// What a collector writes at scrape time. Names that are not valid Prometheus names are made
// valid (invalid characters become '_'); the first help text given for a name is kept.
class BX_EXPORT SampleWriter {
 public:
  virtual ~SampleWriter() = default;
  virtual void Counter(std::string_view name, std::string_view help, const Labels& labels,
                       double value) = 0;
  virtual void Gauge(std::string_view name, std::string_view help, const Labels& labels,
                     double value) = 0;
};

class Registry;

// Unregisters its collector when destroyed (or on Reset). Waits for a scrape that is running the
// collector to finish, so the collector's object may be destroyed right after; do not destroy it
// while holding a lock that the collector takes.
class BX_EXPORT CollectorHandle {
 public:
  CollectorHandle() = default;
  ~CollectorHandle() { Reset(); }
  CollectorHandle(CollectorHandle&& other) noexcept { *this = std::move(other); }
  CollectorHandle& operator=(CollectorHandle&& other) noexcept;
  CollectorHandle(const CollectorHandle&) = delete;
  CollectorHandle& operator=(const CollectorHandle&) = delete;
  void Reset();

 private:
  friend class Registry;
  CollectorHandle(Registry* registry, uint64_t id) : registry_(registry), id_(id) {}
  Registry* registry_ = nullptr;
  uint64_t id_ = 0;
};

enum class SampleKind { kCounter, kGauge };

// One sample as a scrape reads it: a histogram gives <name>_bucket (with an `le` label), _sum
// and _count samples, as in the text format.
struct BX_EXPORT Sample {
  std::string name;
  Labels labels;  // sorted by name
  double value = 0;
};

class BX_EXPORT Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The process-wide registry; never destroyed.
  static Registry& Default();

  // The metric of that name and labels, created on first use; the reference stays valid for the
  // registry's life. Asking for an existing name with another type, or an invalid metric or
  // label name, is a programming error: the process aborts with a message naming it.
  Counter& GetCounter(std::string_view name, std::string_view help, const Labels& labels = {});
  Gauge& GetGauge(std::string_view name, std::string_view help, const Labels& labels = {});
  Histogram& GetHistogram(std::string_view name, std::string_view help, const Labels& labels = {},
                          const HistogramOptions& options = {});

  // Runs `collect` at every scrape (on the scraping thread) until the handle goes.
  [[nodiscard]] CollectorHandle AddCollector(std::function<void(SampleWriter&)> collect);

  // Exports a counter struct as it is: each key of the map that `read` returns becomes
  // `<prefix>_<key>` (plus "_total" for counters that lack it), with `labels`.
  [[nodiscard]] CollectorHandle AddMapCollector(
      std::string prefix, Labels labels, SampleKind kind,
      std::function<std::map<std::string, uint64_t>()> read);

  // Every metric and collector sample, in the Prometheus text format 0.0.4, families sorted by
  // name. Histograms list the buckets that have held an observation, each preceded by its lower
  // edge when the bucket below is empty (a set that only grows, so series never vanish), then
  // +Inf, _sum and _count.
  std::string ExposeText() const;
  // The same samples as ExposeText, for a program that reads its own metrics (in the text's
  // order). Costs a scrape.
  std::vector<Sample> Collect() const;

 private:
  friend class CollectorHandle;
  struct Family;
  struct Series;
  Series& GetSeries(std::string_view name, std::string_view help, const Labels& labels, int type,
                    const HistogramOptions* options);
  void RemoveCollector(uint64_t id);

  mutable std::mutex mu_;  // guards families_ and collectors_, held for a whole scrape
  std::map<std::string, std::unique_ptr<Family>, std::less<>> families_;
  std::map<uint64_t, std::function<void(SampleWriter&)>> collectors_;
  uint64_t next_collector_id_ = 1;
};

// The embedded HTTP endpoint: GET /metrics answers Registry::ExposeText() with content type
// "text/plain; version=0.0.4". One thread serves one connection at a time (scrapes are rare and
// small); a connection that sends no complete request within the timeout is dropped, a request
// head above 8 KiB is refused, so a slow or hostile client cannot hold memory or the thread.
struct BX_EXPORT HttpServerOptions {
  uint16_t port = 0;                  // 0: the kernel picks one; see MetricsServer::port()
  std::string address = "127.0.0.1";  // "0.0.0.0" to let other hosts scrape
  int request_timeout_ms = 2000;      // to send the request head, and again to take the answer
  // Scrapers served at once; past it the oldest connection is dropped for the newest.
  int max_connections = 64;
};

class BX_EXPORT MetricsServer {
 public:
  virtual ~MetricsServer() = default;  // stops the thread and closes the socket
  virtual uint16_t port() const = 0;
};

BX_EXPORT Result<std::unique_ptr<MetricsServer>> StartHttpServer(
    const HttpServerOptions& options, Registry& registry = Registry::Default());
inline Result<std::unique_ptr<MetricsServer>> StartHttpServer(uint16_t port) {
  HttpServerOptions options;
  options.port = port;
  return StartHttpServer(options);
}

}  // namespace bx::metrics
