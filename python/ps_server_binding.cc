// bexpress.PsServer: one replica of one shard in this process (bx/ps/server.h), for tests and
// small clusters. Production clusters run `bx ps serve`, one process per replica.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "bx/observe.h"
#include "bx/ps/cluster.h"
#include "bx/ps/server.h"
#include "status_error.h"

namespace py = pybind11;

namespace bx::python {
namespace {

class PyPsServer {
 public:
  PyPsServer(const ps::ClusterSpec& spec, float max_abs_gradient) {
    ps::PsServerOptions options;
    options.auth_secret = spec.secret;
    options.replica_secret = spec.replica_secret;
    options.max_abs_gradient = max_abs_gradient;
    Result<std::unique_ptr<ps::PsServer>> server = ps::PsServer::Create(spec.tables, options);
    ThrowIfError(server.status());
    server_ = std::move(server).value();
  }

  ps::PsServer& server() {
    if (!server_) throw StatusError(FailedPrecondition("the PsServer is stopped"));
    return *server_;
  }

  void Start(const std::vector<std::string>& urls) {
    ps::PsServer& s = server();
    Status status;
    {
      py::gil_scoped_release release;
      status = s.Start(urls);
    }
    ThrowIfError(status);
  }

  // Backups as "rdma://host:port,tcp://host:port" (rpc::ReplicaAddress's text form).
  void BecomePrimary(uint64_t epoch, const std::vector<std::string>& backups) {
    std::vector<rpc::ReplicaAddress> addresses;
    for (const std::string& text : backups) {
      Result<rpc::ReplicaAddress> address = rpc::ReplicaAddress::Parse(text);
      ThrowIfError(address.status());
      addresses.push_back(std::move(address).value());
    }
    ps::PsServer& s = server();
    Status status;
    {
      py::gil_scoped_release release;
      status = s.BecomePrimary(epoch, addresses);
    }
    ThrowIfError(status);
  }

  void RestoreFrom(const std::string& dir, uint32_t shard, uint32_t shard_count) {
    ps::PsServer& s = server();
    Status status;
    {
      py::gil_scoped_release release;
      status = s.RestoreFrom(dir, shard, shard_count);
    }
    ThrowIfError(status);
  }

  void Stop() {
    std::unique_ptr<ps::PsServer> stopping = std::move(server_);
    py::gil_scoped_release release;
    stopping.reset();
  }

  py::dict Address() {
    rpc::ReplicaAddress address = server().address();
    py::dict out;
    out["rdma"] = address.rdma_url;
    out["tcp"] = address.tcp_url;
    out["text"] = address.ToString();
    return out;
  }

  py::dict Counters() {
    ps::PsServerCounters c = server().counters();
    py::dict out;
    out["fetches"] = c.fetches;
    out["pushes_acked"] = c.pushes_acked;
    out["pushes_duplicate"] = c.pushes_duplicate;
    out["push_errors"] = c.push_errors;
    out["forwards"] = c.forwards;
    return out;
  }

  // The replica's Prometheus samples (bx_ps_server_*, bx_rpc_server_*), "name{labels}" -> value.
  py::dict Metrics() {
    metrics::Registry registry;
    metrics::CollectorHandle handle = observe::ExportPsServer(server(), {}, registry);
    return SamplesToDict(registry);
  }

  ~PyPsServer() {
    if (server_) Stop();
  }

 private:
  std::unique_ptr<ps::PsServer> server_;
};

}  // namespace

py::dict SamplesToDict(const metrics::Registry& registry) {
  py::dict out;
  for (const metrics::Sample& sample : registry.Collect()) {
    std::string key = sample.name;
    if (!sample.labels.empty()) {
      key += '{';
      for (size_t i = 0; i < sample.labels.size(); ++i) {
        if (i > 0) key += ',';
        key += sample.labels[i].first + "=\"" + sample.labels[i].second + '"';
      }
      key += '}';
    }
    out[py::str(key)] = sample.value;
  }
  return out;
}

void BindPsServer(py::module_& m) {
  py::class_<PyPsServer>(m, "PsServer")
      .def(py::init<const ps::ClusterSpec&, float>(), py::arg("cluster"),
           py::arg("max_abs_gradient") = ps::PsServerOptions{}.max_abs_gradient,
           "A backup replica holding the cluster's tables (empty), not listening yet. A push "
           "with a gradient element above max_abs_gradient (0: no bound), or not finite, is "
           "refused.")
      .def("start", &PyPsServer::Start, py::arg("urls"),
           "Listens on each url (port 0: any free port; .address says which).")
      .def("become_primary", &PyPsServer::BecomePrimary, py::arg("epoch"),
           py::arg("backups") = std::vector<std::string>{})
      .def("restore_from", &PyPsServer::RestoreFrom, py::arg("dir"), py::arg("shard"),
           py::arg("shard_count"),
           "Before start: takes the rows of the checkpoint in `dir` that shard `shard` of "
           "`shard_count` owns (any shard count; bexpress.checkpoint).")
      .def("stop", &PyPsServer::Stop)
      .def_property_readonly("address", &PyPsServer::Address)
      .def("counters", &PyPsServer::Counters)
      .def("metrics", &PyPsServer::Metrics);
}

}  // namespace bx::python
