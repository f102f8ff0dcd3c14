#include "svg_plot.h"

#include <fmt/core.h>

#include <cstdlib>
#include <fstream>

namespace bx::tools {

void RenderSvgPlot(const SvgPlot& plot, std::string_view who) {
  const std::string script = plot.base + ".gp";
  std::ofstream gp(script);
  gp << "set terminal svg size 900,500\n"
     << "set output '" << plot.base << ".svg'\n"
     << "set datafile separator ','\n"
     << "set xlabel '" << plot.x_label << "'\n"
     << "set ylabel 'push P99 (us)'\nset y2label '" << plot.y2_label << "'\n"
     << "set ytics nomirror\nset y2tics\n"
     << plot.settings << "plot '" << plot.base << ".csv' " << plot.series << '\n';
  gp.close();
  const std::string command = "gnuplot '" + script + "' 2>&1";
  if (std::system(command.c_str()) != 0) {
    fmt::print(stderr, "{}: gnuplot failed (is gnuplot-nox installed?); the CSV is {}.csv\n", who,
               plot.base);
  }
}

}  // namespace bx::tools
