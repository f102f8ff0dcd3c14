// _bexpress: the extension module behind the bexpress Python package (bexpress/__init__.py).
// Process set-up, devices and metrics here; the parameter server in ps_*_binding.cc.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "bindings.h"
#include "bx/devices.h"
#include "bx/init.h"
#include "bx/log.h"
#include "bx/metrics.h"
#include "completion_thread.h"
#include "status_error.h"

namespace py = pybind11;

namespace bx::python {
namespace {

void Init(bool rdma, const std::string& device) {
  InitOptions options;
  options.rdma = rdma;
  options.device = device;
  Status status;
  {
    py::gil_scoped_release release;
    status = bx::Init(options);
  }
  ThrowIfError(status);
}

// The library's messages at `name` ("debug", "info", "warning", "error") and above, on stderr.
void SetLogLevel(const std::string& name) {
  for (LogLevel level : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning, LogLevel::kError}) {
    if (LogLevelName(level) == name) return SetLogSink(StderrLogSink(level));
  }
  throw py::value_error("log level must be \"debug\", \"info\", \"warning\" or \"error\", not \"" +
                        name + "\"");
}

py::list Devices() {
  Result<DeviceList> list = ListDevices();
  ThrowIfError(list.status());
  py::list out;
  for (const DeviceInfo& d : list->devices) {
    py::dict one;
    one["name"] = d.name;
    one["kind"] = d.kind;
    one["backend"] = list->backend;
    one["port"] = d.port;
    one["port_state"] = d.port_state;
    one["link_layer"] = d.link_layer;
    one["active_mtu"] = d.active_mtu;
    one["lid"] = d.lid;
    one["numa_node"] = d.numa_node;
    one["gid_index"] = d.gid_index;
    one["gid_reason"] = d.gid_reason;
    py::list gids;
    for (const DeviceInfo::Gid& g : d.gids) {
      gids.append(py::make_tuple(g.index, g.address, g.type));
    }
    one["gids"] = gids;
    one["max_qp"] = d.max_qp;
    one["max_qp_wr"] = d.max_qp_wr;
    out.append(one);
  }
  return out;
}

}  // namespace
}  // namespace bx::python

PYBIND11_MODULE(_bexpress, m) {
  using namespace bx::python;
  m.doc() = "bexpress: zero-copy messaging over RDMA and a sharded parameter server";
  RegisterStatusError(m);
  // Warnings and errors on stderr, as the bx command prints them; connection state changes
  // (info) only when asked for: bexpress/__init__.py applies BX_LOG_LEVEL.
  bx::SetLogSink(bx::StderrLogSink(bx::LogLevel::kWarning));
  m.def("set_log_level", &SetLogLevel, py::arg("level"),
        "Which of the library's messages reach stderr: \"debug\", \"info\", \"warning\" "
        "(the default) or \"error\" and above.");
  m.def("init", &Init, py::arg("rdma") = true, py::arg("device") = "",
        "Sets up the process (bx::Init): rdma:// and tcp://, or tcp:// only with rdma=False.");
  m.def("is_initialized", &bx::IsInitialized);
  m.def("version", [] { return std::string(bx::Version()); });
  m.def("devices", &Devices, "The RDMA devices this process can see, as `bx devices` lists them.");
  m.def(
      "metrics", [] { return SamplesToDict(bx::metrics::Registry::Default()); },
      "The process's metrics (the default registry), {\"name{labels}\": value}.");
  m.def("_shutdown", &CompletionThread::Shutdown,
        "Delivers pending completions and stops their thread (registered with atexit).");
  BindTransport(m);
  BindPsClient(m);
  BindPsServer(m);
  BindCheckpoint(m);
}
