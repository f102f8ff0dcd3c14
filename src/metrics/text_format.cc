#include "metrics/text_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace bx::metrics {
namespace {

bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool IsNameChar(char c) {
  return IsNameStart(c) || (c >= '0' && c <= '9');
}

}  // namespace

bool IsValidMetricName(std::string_view name) {
  if (name.empty() || !(IsNameStart(name[0]) || name[0] == ':')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return IsNameChar(c) || c == ':'; });
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || !IsNameStart(name[0]) || name.starts_with("__")) return false;
  return std::all_of(name.begin(), name.end(), IsNameChar);
}

std::string SanitizeName(std::string_view name) {
  std::string out;
  if (name.empty() || !IsNameStart(name[0])) out.push_back('_');
  for (char c : name) out.push_back(IsNameChar(c) ? c : '_');
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  // Counters are integers; print them without an exponent up to 2^53, where doubles are exact.
  if (value == std::trunc(value) && std::fabs(value) < 9007199254740992.0) {
    auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), int64_t(value));
    return std::string(buf, end);
  }
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);  // shortest round-trip form
  return std::string(buf, end);
}

std::string FormatLabels(const Labels& labels, std::string_view le) {
  if (labels.empty() && le.empty()) return "";
  Labels sorted = labels;
  std::sort(sorted.begin(), sorted.end());
  std::string out = "{";
  auto add = [&out](std::string_view key, std::string_view value) {
    if (out.size() > 1) out.push_back(',');
    out.append(key);
    out.append("=\"");
    for (char c : value) {
      if (c == '\\') {
        out.append("\\\\");
      } else if (c == '"') {
        out.append("\\\"");
      } else if (c == '\n') {
        out.append("\\n");
      } else {
        out.push_back(c);
      }
    }
    out.push_back('"');
  };
  for (const auto& [key, value] : sorted) add(key, value);
  if (!le.empty()) add("le", le);
  out.push_back('}');
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out.append("\\\\");
    } else if (c == '\n') {
      out.append("\\n");
    } else {
      out.push_back(c);
    }
  }
  return out;
}

namespace {

// Parses `{k="v",...}` at text[*pos]; advances *pos past it.
bool ParseLabelSet(std::string_view text, size_t* pos, Labels* labels) {
  size_t i = *pos + 1;
  while (i < text.size() && text[i] != '}') {
    size_t eq = text.find('=', i);
    if (eq == std::string_view::npos || eq + 1 >= text.size() || text[eq + 1] != '"') return false;
    std::string key(text.substr(i, eq - i));
    std::string value;
    size_t j = eq + 2;
    for (; j < text.size() && text[j] != '"'; ++j) {
      if (text[j] == '\\' && j + 1 < text.size()) {
        ++j;
        value.push_back(text[j] == 'n' ? '\n' : text[j]);
      } else {
        value.push_back(text[j]);
      }
    }
    if (j >= text.size()) return false;
    labels->emplace_back(std::move(key), std::move(value));
    i = j + 1;
    if (i < text.size() && text[i] == ',') ++i;
  }
  if (i >= text.size()) return false;
  *pos = i + 1;
  std::sort(labels->begin(), labels->end());
  return true;
}

bool ParseNumber(std::string_view s, double* out) {
  if (s == "+Inf" || s == "Inf") {
    *out = INFINITY;
    return true;
  }
  if (s == "-Inf") {
    *out = -INFINITY;
    return true;
  }
  if (s == "NaN") {
    *out = NAN;
    return true;
  }
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

ParsedText ParseText(std::string_view text, size_t* skipped) {
  ParsedText out;
  size_t bad = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty()) continue;
    if (line[0] == '#') {
      // "# TYPE name type" and "# HELP name text"; other comments are ignored.
      bool is_type = line.starts_with("# TYPE "), is_help = line.starts_with("# HELP ");
      if (!is_type && !is_help) continue;
      std::string_view rest = line.substr(7);
      size_t sp = rest.find(' ');
      if (sp == std::string_view::npos) {
        ++bad;
        continue;
      }
      (is_type ? out.types : out.help)[std::string(rest.substr(0, sp))] =
          std::string(rest.substr(sp + 1));
      continue;
    }
    ParsedSample sample;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    sample.name = std::string(line.substr(0, i));
    if (i < line.size() && line[i] == '{' && !ParseLabelSet(line, &i, &sample.labels)) {
      ++bad;
      continue;
    }
    while (i < line.size() && line[i] == ' ') ++i;
    std::string_view value = line.substr(i);
    value = value.substr(0, value.find(' '));  // drop an optional timestamp
    if (!IsValidMetricName(sample.name) || !ParseNumber(value, &sample.value)) {
      ++bad;
      continue;
    }
    out.samples.push_back(std::move(sample));
  }
  if (skipped != nullptr) *skipped = bad;
  return out;
}

HistogramSnapshot SnapshotFromBuckets(std::vector<std::pair<double, double>> buckets, double sum) {
  std::sort(buckets.begin(), buckets.end());
  HistogramSnapshot s;
  s.sum = sum;
  double below = 0;
  for (const auto& [le, cumulative] : buckets) {
    uint64_t n = cumulative > below ? uint64_t(cumulative - below) : 0;
    s.upper_bounds.push_back(le);
    s.counts.push_back(n);
    s.count += n;
    below = std::max(below, cumulative);
  }
  return s;
}

}  // namespace bx::metrics
