// `bx stats --url http://host:port/metrics`: scrapes a running process's metrics endpoint and
// prints counters and gauges as a table, and each histogram as count, mean and percentiles.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "metrics/http_request.h"
#include "metrics/text_format.h"

namespace bx::tools {
namespace {

using metrics::Labels;

std::string LabelText(const Labels& labels, std::string_view skip = {}) {
  std::string out;
  for (const auto& [key, value] : labels) {
    if (key == skip) continue;
    if (!out.empty()) out += ",";
    out += key + "=" + value;
  }
  return out.empty() ? "-" : out;
}

struct HistogramRows {
  std::vector<std::pair<double, double>> buckets;
  double sum = 0;
};

// Groups the _bucket/_sum samples of each histogram series by (family, labels without le).
std::map<std::pair<std::string, std::string>, HistogramRows> Histograms(
    const metrics::ParsedText& parsed) {
  std::map<std::pair<std::string, std::string>, HistogramRows> out;
  for (const auto& s : parsed.samples) {
    for (std::string_view suffix : {"_bucket", "_sum"}) {
      if (!s.name.ends_with(suffix)) continue;
      std::string family = s.name.substr(0, s.name.size() - suffix.size());
      auto type = parsed.types.find(family);
      if (type == parsed.types.end() || type->second != "histogram") continue;
      HistogramRows& rows = out[{family, LabelText(s.labels, "le")}];
      if (suffix == "_sum") {
        rows.sum = s.value;
        continue;
      }
      auto le = std::find_if(s.labels.begin(), s.labels.end(),
                             [](const auto& l) { return l.first == "le"; });
      if (le != s.labels.end())
        rows.buckets.emplace_back(std::strtod(le->second.c_str(), nullptr), s.value);
    }
  }
  return out;
}

bool IsHistogramPart(const metrics::ParsedText& parsed, const std::string& name) {
  for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (!name.ends_with(suffix)) continue;
    auto type = parsed.types.find(name.substr(0, name.size() - suffix.size()));
    if (type != parsed.types.end() && type->second == "histogram") return true;
  }
  return false;
}

int RunStats(const std::string& url, const std::string& filter, bool json, int timeout_ms) {
  auto body = metrics::HttpGet(url, std::chrono::milliseconds(timeout_ms));
  if (!body.ok()) {
    fmt::print(stderr, "bx stats: {}\n", body.status().ToString());
    return 1;
  }
  metrics::ParsedText parsed = metrics::ParseText(*body);
  auto wanted = [&filter](const std::string& name) {
    return filter.empty() || name.find(filter) != std::string::npos;
  };
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  if (!json) fmt::print("{:<52} {:<40} {:>16}\n", "METRIC", "LABELS", "VALUE");
  for (const auto& s : parsed.samples) {
    if (!wanted(s.name) || IsHistogramPart(parsed, s.name)) continue;
    if (json) {
      out.push_back({{"name", s.name}, {"labels", LabelText(s.labels)}, {"value", s.value}});
    } else {
      fmt::print("{:<52} {:<40} {:>16}\n", s.name, LabelText(s.labels),
                 metrics::FormatValue(s.value));
    }
  }
  auto histograms = Histograms(parsed);
  if (!json && !histograms.empty())
    fmt::print("\n{:<44} {:<28} {:>10} {:>11} {:>11} {:>11} {:>11} {:>11}\n", "HISTOGRAM", "LABELS",
               "COUNT", "MEAN", "P50", "P90", "P99", "P99.9");
  for (const auto& [key, rows] : histograms) {
    if (!wanted(key.first)) continue;
    auto snap = metrics::SnapshotFromBuckets(rows.buckets, rows.sum);
    double mean = snap.count ? snap.sum / double(snap.count) : 0;
    if (json) {
      out.push_back({{"name", key.first},
                     {"labels", key.second},
                     {"count", snap.count},
                     {"mean", mean},
                     {"p50", snap.Percentile(0.5)},
                     {"p90", snap.Percentile(0.9)},
                     {"p99", snap.Percentile(0.99)},
                     {"p999", snap.Percentile(0.999)}});
    } else {
      fmt::print("{:<44} {:<28} {:>10} {:>11.4g} {:>11.4g} {:>11.4g} {:>11.4g} {:>11.4g}\n",
                 key.first, key.second, snap.count, mean, snap.Percentile(0.5),
                 snap.Percentile(0.9), snap.Percentile(0.99), snap.Percentile(0.999));
    }
  }
  if (json) fmt::print("{}\n", out.dump(2));
  return 0;
}

}  // namespace

void AddStatsCommand(CLI::App* app) {
  auto* cmd = app->add_subcommand("stats", "Print the metrics of a running process (its /metrics)");
  auto url = std::make_shared<std::string>();
  auto filter = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto timeout_ms = std::make_shared<int>(5000);
  cmd->add_option("--url", *url, "The endpoint, e.g. http://127.0.0.1:9100/metrics")->required();
  cmd->add_option("--filter", *filter, "Only metrics whose name contains this");
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->add_option("--timeout-ms", *timeout_ms, "Give up after this long");
  cmd->callback([=] {
    if (int rc = RunStats(*url, *filter, *json, *timeout_ms); rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace bx::tools
