// The parts of the bexpress extension module (_bexpress), each binding one public header.
#pragma once

#include <pybind11/pybind11.h>

#include "bx/metrics.h"

namespace bx::python {

void BindPsClient(pybind11::module_& m);   // bx/ps/client.h, bx/ps/cluster.h
void BindPsServer(pybind11::module_& m);   // bx/ps/server.h
void BindTransport(pybind11::module_& m);  // bx/transport.h

// A registry's samples as {"name{label=\"value\",...}": value}, in the text format's order.
pybind11::dict SamplesToDict(const metrics::Registry& registry);

}  // namespace bx::python
