#include "base/cpu_nodes.h"

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/cpu_list.h"

namespace bx {

Result<CpuNodes> CpuNodes::Parse(std::string_view text) {
  CpuNodes nodes;
  nodes.source_ = "BX_TEST_CPU_NODES";
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(';', start), text.size());
    const std::string_view entry = text.substr(start, end - start);
    start = end + 1;
    if (entry.empty()) continue;
    const size_t colon = entry.find(':');
    int node = -1;
    const std::string_view node_text = entry.substr(0, colon);
    auto [ptr, error] =
        std::from_chars(node_text.data(), node_text.data() + node_text.size(), node);
    if (colon == std::string_view::npos || error != std::errc() ||
        ptr != node_text.data() + node_text.size() || node < 0)
      return InvalidArgument("BX_TEST_CPU_NODES entry '" + std::string(entry) +
                             "' is not <node>:<cpu list>");
    BX_ASSIGN_OR_RETURN(std::vector<int> cpus, ParseCpuList(entry.substr(colon + 1)));
    for (int cpu : cpus) nodes.node_of_cpu_[cpu] = node;
  }
  return nodes;
}

Result<CpuNodes> CpuNodes::Read() {
  if (const char* text = std::getenv("BX_TEST_CPU_NODES"); text != nullptr && *text != '\0')
    return Parse(text);
  namespace fs = std::filesystem;
  CpuNodes nodes;
  std::error_code ec;
  for (const fs::directory_entry& dir : fs::directory_iterator("/sys/devices/system/node", ec)) {
    const std::string name = dir.path().filename().string();
    if (name.rfind("node", 0) != 0) continue;
    int node = -1;
    auto [ptr, error] = std::from_chars(name.data() + 4, name.data() + name.size(), node);
    if (error != std::errc() || ptr != name.data() + name.size()) continue;
    std::ifstream in(dir.path() / "cpulist");
    std::string list;
    if (!std::getline(in, list) || list.empty()) continue;  // a node with memory only
    auto cpus = ParseCpuList(list);
    if (!cpus.ok()) continue;  // unreadable: that node's CPUs stay unknown
    for (int cpu : *cpus) nodes.node_of_cpu_[cpu] = node;
  }
  return nodes;
}

int CpuNodes::NodeOf(int cpu) const {
  auto it = node_of_cpu_.find(cpu);
  return it == node_of_cpu_.end() ? -1 : it->second;
}

}  // namespace bx
