// The parts of the bexpress extension module (_bexpress), each binding one public header.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <cmath>
#include <string>

#include "bx/metrics.h"
#include "status_error.h"

namespace bx::python {

void BindPsClient(pybind11::module_& m);    // bx/ps/client.h, bx/ps/cluster.h
void BindPsServer(pybind11::module_& m);    // bx/ps/server.h
void BindCheckpoint(pybind11::module_& m);  // bx/ps/checkpoint.h
void BindTransport(pybind11::module_& m);   // bx/transport.h

// A Python timeout (seconds, a float) as the C++ calls take it, rounded up; InvalidArgument
// unless positive and finite (and under a year).
inline std::chrono::microseconds TimeoutFromSeconds(double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds) || seconds > 86400.0 * 365) {
    throw StatusError(InvalidArgument("timeout must be a positive number of seconds, not " +
                                      std::to_string(seconds)));
  }
  return std::chrono::microseconds(static_cast<int64_t>(std::ceil(seconds * 1e6)));
}

// A registry's samples as {"name{label=\"value\",...}": value}, in the text format's order.
pybind11::dict SamplesToDict(const metrics::Registry& registry);

}  // namespace bx::python
