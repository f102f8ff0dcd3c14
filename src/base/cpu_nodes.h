// CpuNodes: which NUMA node each CPU belongs to, as /sys/devices/system/node/node<N>/cpulist
// says. The RDMA transport uses it to prefer the NIC on its I/O threads' node.
//
// BX_TEST_CPU_NODES replaces the sysfs map, for tests on hosts with one node: "0:0-3;1:4-7"
// puts CPUs 0-3 on node 0 and 4-7 on node 1 (node, colon, a CPU list; entries split by ';').
// Operators have no reason to set it.
//
// Threads: a CpuNodes is a value; Read may be called from any thread.
#pragma once

#include <map>
#include <string_view>

#include "bx/status.h"

namespace bx {

class CpuNodes {
 public:
  // The map of this host: BX_TEST_CPU_NODES when set, else sysfs. A host without
  // /sys/devices/system/node (a kernel without NUMA) gives an empty map: every node unknown.
  // InvalidArgument for a malformed BX_TEST_CPU_NODES.
  static Result<CpuNodes> Read();
  // The BX_TEST_CPU_NODES syntax.
  static Result<CpuNodes> Parse(std::string_view text);

  // The node of `cpu`, or -1 when no node lists it.
  int NodeOf(int cpu) const;
  bool empty() const { return node_of_cpu_.empty(); }
  // Where the map came from: "sysfs" or "BX_TEST_CPU_NODES".
  std::string_view source() const { return source_; }

 private:
  std::map<int, int> node_of_cpu_;
  std::string_view source_ = "sysfs";
};

}  // namespace bx
