// The Prometheus text exposition format, version 0.0.4: writing it (the registry) and reading it
// back (`bx stats`, the tests). https://prometheus.io/docs/instrumenting/exposition_formats/
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "bx/metrics.h"

namespace bx::metrics {

bool IsValidMetricName(std::string_view name);  // [a-zA-Z_:][a-zA-Z0-9_:]*
bool IsValidLabelName(std::string_view name);   // [a-zA-Z_][a-zA-Z0-9_]*, not starting "__"
// Replaces what a name may not contain with '_' (and prefixes '_' to a leading digit).
std::string SanitizeName(std::string_view name);

// A sample value: integers without a fraction, otherwise the shortest exact decimal form;
// "+Inf", "-Inf", "NaN" as the format spells them.
std::string FormatValue(double value);
// {a="x",b="y"} with keys sorted and values escaped (\\, \", \n); "" for no labels. `le`, when
// not empty, is appended as the histogram bucket label.
std::string FormatLabels(const Labels& labels, std::string_view le = {});
std::string EscapeHelp(std::string_view help);  // \\ and \n

// One sample line read back: name, labels (sorted by key) and value.
using ParsedSample = Sample;
struct ParsedText {
  std::map<std::string, std::string> types;  // family name -> counter, gauge, histogram, ...
  std::map<std::string, std::string> help;
  std::vector<ParsedSample> samples;
};
// Parses exposition text; malformed lines are skipped and counted in `*skipped` when given.
ParsedText ParseText(std::string_view text, size_t* skipped = nullptr);

// A histogram read back from its `le` buckets (upper bound, cumulative count; any order), so
// its percentiles can be computed as in the process that recorded it.
HistogramSnapshot SnapshotFromBuckets(std::vector<std::pair<double, double>> buckets, double sum);

}  // namespace bx::metrics
