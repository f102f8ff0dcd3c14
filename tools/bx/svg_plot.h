// SvgPlot: the SVG plots `bx sim` writes beside its CSVs. One gnuplot script per plot, named
// like the CSV it reads (<base>.csv in, <base>.gp and <base>.svg out), with push P99 on the left
// axis and a PFC paused fraction on the right, as every plot of the simulator has.
#pragma once

#include <string>
#include <string_view>

namespace bx::tools {

struct SvgPlot {
  std::string base;  // path without extension
  std::string x_label;
  std::string y2_label;  // the right axis
  std::string settings;  // further `set` lines, each ending in a newline
  std::string series;    // what follows `plot '<base>.csv' `
};

// Writes the script and runs gnuplot on it; a failure (gnuplot missing, say) is printed on
// stderr under `who`'s name, and the CSV stays as it was.
void RenderSvgPlot(const SvgPlot& plot, std::string_view who);

}  // namespace bx::tools
