// The metrics registry and its Prometheus text exposition.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "base/log_internal.h"
#include "bx/metrics.h"
#include "metrics/text_format.h"

namespace bx::metrics {

size_t Counter::ShardIndex() {
  static std::atomic<size_t> next{0};
  thread_local size_t index = next.fetch_add(1, std::memory_order_relaxed) % kShards;
  return index;
}

uint64_t Counter::Value() const {
  uint64_t sum = 0;
  for (const Shard& s : shards_) sum += s.value.load(std::memory_order_relaxed);
  return sum;
}

void Gauge::Add(double delta) {
  double v = value_.load(std::memory_order_relaxed);
  while (!value_.compare_exchange_weak(v, v + delta, std::memory_order_relaxed)) {
  }
}

namespace {

enum Type { kCounterType, kGaugeType, kHistogramType };
const char* TypeName(int type) {
  return type == kCounterType ? "counter" : type == kGaugeType ? "gauge" : "histogram";
}

[[noreturn]] void Misuse(const std::string& what) {
  FatalError("bx::metrics: " + what);
}

Labels Sorted(Labels labels) {
  std::sort(labels.begin(), labels.end());
  return labels;
}

// The lines of one family as the exposition prints them, gathered from owned metrics and
// collectors before printing, so a family fed by several collectors is printed once.
struct OutFamily {
  std::string help;
  int type;
  std::vector<std::string> lines;
};
using OutFamilies = std::map<std::string, OutFamily>;

void AddLine(OutFamilies& out, const std::string& name, std::string_view help, int type,
             std::string line) {
  auto [it, inserted] = out.try_emplace(name, OutFamily{std::string(help), type, {}});
  if (!inserted && it->second.type != type) return;  // first type wins; a clash is dropped
  it->second.lines.push_back(std::move(line));
}

class CollectingWriter : public SampleWriter {
 public:
  explicit CollectingWriter(OutFamilies& out) : out_(out) {}
  void Counter(std::string_view name, std::string_view help, const Labels& labels,
               double value) override {
    Add(name, help, labels, value, kCounterType);
  }
  void Gauge(std::string_view name, std::string_view help, const Labels& labels,
             double value) override {
    Add(name, help, labels, value, kGaugeType);
  }

 private:
  void Add(std::string_view name, std::string_view help, const Labels& labels, double value,
           int type) {
    std::string clean = IsValidMetricName(name) ? std::string(name) : SanitizeName(name);
    Labels clean_labels;
    for (const auto& [k, v] : labels)
      clean_labels.emplace_back(IsValidLabelName(k) ? k : SanitizeName(k), v);
    AddLine(out_, clean, help, type, clean + FormatLabels(clean_labels) + " " + FormatValue(value));
  }
  OutFamilies& out_;
};

}  // namespace

struct Registry::Series {
  Labels labels;
  std::unique_ptr<metrics::Counter> counter;
  std::unique_ptr<metrics::Gauge> gauge;
  std::unique_ptr<metrics::Histogram> histogram;
};

struct Registry::Family {
  std::string help;
  int type;
  std::map<Labels, std::unique_ptr<Series>> series;
};

Registry::Registry() = default;
Registry::~Registry() = default;

Registry& Registry::Default() {
  static Registry* registry = new Registry();  // never destroyed: metrics outlive static dtors
  return *registry;
}

Registry::Series& Registry::GetSeries(std::string_view name, std::string_view help,
                                      const Labels& labels, int type,
                                      const HistogramOptions* options) {
  if (!IsValidMetricName(name)) Misuse("invalid metric name '" + std::string(name) + "'");
  for (const auto& [key, value] : labels)
    if (!IsValidLabelName(key) || (type == kHistogramType && key == "le"))
      Misuse("invalid label name '" + key + "' on " + std::string(name));
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) {
    auto family = std::make_unique<Family>();
    family->help = std::string(help);
    family->type = type;
    it = families_.emplace(std::string(name), std::move(family)).first;
  } else if (it->second->type != type) {
    Misuse(std::string(name) + " is a " + TypeName(it->second->type) + ", asked for as a " +
           TypeName(type));
  }
  Labels key = Sorted(labels);
  auto& slot = it->second->series[key];
  if (!slot) {
    slot = std::make_unique<Series>();
    slot->labels = key;
    if (type == kCounterType) slot->counter = std::make_unique<metrics::Counter>();
    if (type == kGaugeType) slot->gauge = std::make_unique<metrics::Gauge>();
    if (type == kHistogramType) slot->histogram = std::make_unique<metrics::Histogram>(*options);
  }
  return *slot;
}

Counter& Registry::GetCounter(std::string_view name, std::string_view help, const Labels& labels) {
  return *GetSeries(name, help, labels, kCounterType, nullptr).counter;
}

Gauge& Registry::GetGauge(std::string_view name, std::string_view help, const Labels& labels) {
  return *GetSeries(name, help, labels, kGaugeType, nullptr).gauge;
}

Histogram& Registry::GetHistogram(std::string_view name, std::string_view help,
                                  const Labels& labels, const HistogramOptions& options) {
  return *GetSeries(name, help, labels, kHistogramType, &options).histogram;
}

CollectorHandle Registry::AddCollector(std::function<void(SampleWriter&)> collect) {
  std::lock_guard lock(mu_);
  uint64_t id = next_collector_id_++;
  collectors_.emplace(id, std::move(collect));
  return CollectorHandle(this, id);
}

CollectorHandle Registry::AddMapCollector(std::string prefix, Labels labels, SampleKind kind,
                                          std::function<std::map<std::string, uint64_t>()> read) {
  return AddCollector([prefix = std::move(prefix), labels = std::move(labels), kind,
                       read = std::move(read)](SampleWriter& w) {
    for (const auto& [key, value] : read()) {
      std::string name = prefix + "_" + key;
      if (kind == SampleKind::kCounter) {
        if (!name.ends_with("_total")) name += "_total";
        w.Counter(name, "", labels, double(value));
      } else {
        w.Gauge(name, "", labels, double(value));
      }
    }
  });
}

void Registry::RemoveCollector(uint64_t id) {
  std::lock_guard lock(mu_);  // waits for a scrape that may be running the collector
  collectors_.erase(id);
}

CollectorHandle& CollectorHandle::operator=(CollectorHandle&& other) noexcept {
  if (this != &other) {
    Reset();
    registry_ = std::exchange(other.registry_, nullptr);
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

void CollectorHandle::Reset() {
  if (registry_ != nullptr) registry_->RemoveCollector(id_);
  registry_ = nullptr;
}

std::string Registry::ExposeText() const {
  OutFamilies out;
  std::lock_guard lock(mu_);
  for (const auto& [name, family] : families_) {
    for (const auto& [labels, series] : family->series) {
      if (family->type == kCounterType) {
        AddLine(out, name, family->help, kCounterType,
                name + FormatLabels(labels) + " " + FormatValue(double(series->counter->Value())));
      } else if (family->type == kGaugeType) {
        AddLine(out, name, family->help, kGaugeType,
                name + FormatLabels(labels) + " " + FormatValue(series->gauge->Value()));
      } else {
        HistogramSnapshot s = series->histogram->Snapshot();
        uint64_t cumulative = 0;
        for (size_t b = 0; b + 1 < s.counts.size(); ++b) {
          if (s.counts[b] == 0) continue;
          // The lower edge of a bucket after an empty one, so a reader interpolates inside the
          // bucket itself, not across the empty ones before it.
          if (b > 0 && s.counts[b - 1] == 0) {
            AddLine(out, name, family->help, kHistogramType,
                    name + "_bucket" + FormatLabels(labels, FormatValue(s.upper_bounds[b - 1])) +
                        " " + FormatValue(double(cumulative)));
          }
          cumulative += s.counts[b];
          AddLine(out, name, family->help, kHistogramType,
                  name + "_bucket" + FormatLabels(labels, FormatValue(s.upper_bounds[b])) + " " +
                      FormatValue(double(cumulative)));
        }
        AddLine(
            out, name, family->help, kHistogramType,
            name + "_bucket" + FormatLabels(labels, "+Inf") + " " + FormatValue(double(s.count)));
        AddLine(out, name, family->help, kHistogramType,
                name + "_sum" + FormatLabels(labels) + " " + FormatValue(s.sum));
        AddLine(out, name, family->help, kHistogramType,
                name + "_count" + FormatLabels(labels) + " " + FormatValue(double(s.count)));
      }
    }
  }
  CollectingWriter writer(out);
  for (const auto& [id, collect] : collectors_) collect(writer);

  std::string text;
  for (const auto& [name, family] : out) {
    if (!family.help.empty()) text += "# HELP " + name + " " + EscapeHelp(family.help) + "\n";
    text += "# TYPE " + name + " " + TypeName(family.type) + "\n";
    for (const std::string& line : family.lines) text += line + "\n";
  }
  return text;
}

std::vector<Sample> Registry::Collect() const {
  // Through the text, so that a program reading its own metrics sees exactly what a scraper
  // would (names made valid, collectors' duplicates, histogram buckets), at a scrape's cost.
  return ParseText(ExposeText()).samples;
}

}  // namespace bx::metrics
