// The comparison columns of `bx demo`'s tables, apart so that their signs and labels are tested
// (tools/tests/bx_tools_test.cc).
#pragma once

#include <string>

namespace bx::tools {

// RDMA's reduction of a figure where lower is better, relative to TCP: "+12.5%" when RDMA is
// lower, "-3.0%" when it is higher; "n/a" without a TCP figure.
std::string Reduction(double rdma, double tcp);

// RDMA's change of a figure where higher is better (requests per second), relative to TCP:
// "+12.5% (gain)" when RDMA is higher, "-26.2% (loss)" when it is lower; "n/a" without a TCP
// figure.
std::string Gain(double rdma, double tcp);

}  // namespace bx::tools
