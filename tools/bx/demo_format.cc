#include "demo_format.h"

#include <fmt/format.h>

namespace bx::tools {

std::string Reduction(double rdma, double tcp) {
  if (tcp <= 0) return "n/a";
  return fmt::format("{:+.1f}%", 100.0 * (tcp - rdma) / tcp);
}

std::string Gain(double rdma, double tcp) {
  if (tcp <= 0) return "n/a";
  const double change = 100.0 * (rdma - tcp) / tcp;
  // Labelled by the sign as printed: a change that rounds to 0.0 is neither.
  const std::string text = fmt::format("{:+.1f}%", change);
  if (text == "+0.0%" || text == "-0.0%") return "+0.0%";
  return text + (change > 0 ? " (gain)" : " (loss)");
}

}  // namespace bx::tools
