// bexpress.PsClient and bexpress.Cluster: the parameter-server client over the public C++ API
// (bx/ps/client.h). Fetched rows reach NumPy without a copy where the C++ side allows it
// (bx::ps::FetchedRows): the array's base owns the received reply. Every blocking call releases
// the GIL, and asynchronous calls finish on the CompletionThread, never on a transport thread.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "bx/ps/client.h"
#include "bx/ps/cluster.h"
#include "completion_thread.h"
#include "status_error.h"

namespace py = pybind11;

namespace bx::python {
namespace {

using Keys = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>;

// Keys as 64-bit unsigned integers: any integer array (uint64 above 2^63 too), never a float
// (1.5 would become key 1) nor a negative number (-1 would become key 2^64 - 1).
Keys ToKeys(const py::object& keys) {
  py::array array = py::array::ensure(keys);
  if (!array) throw py::error_already_set();
  const char kind = array.dtype().kind();
  if (array.size() == 0 || kind == 'u') return Keys::ensure(array);
  if (kind != 'i') {
    throw py::type_error("keys must be integers (64-bit unsigned keys), not an array of " +
                         py::str(array.dtype()).cast<std::string>());
  }
  const auto signed_keys =
      py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(array);
  for (py::ssize_t i = 0; i < signed_keys.size(); ++i) {
    if (signed_keys.data()[i] < 0) {
      throw StatusError(InvalidArgument(
          "keys must not be negative (key " + std::to_string(signed_keys.data()[i]) +
          "); keys above 2^63 are passed as unsigned integers, e.g. numpy.uint64"));
    }
  }
  return Keys::ensure(array);
}

// The rows as an (n, dim) float32 array whose base owns them: no copy.
py::array ToArray(ps::FetchedRows rows) {
  const auto n = static_cast<py::ssize_t>(rows.rows());
  const auto dim = static_cast<py::ssize_t>(rows.dim());
  if (rows.data() == nullptr) return py::array_t<float>({n, dim});
  auto* data = const_cast<float*>(rows.data());  // the caller owns the reply: writable
  py::object owner = py::cast(std::move(rows));
  return py::array_t<float>(
      {n, dim}, {dim * py::ssize_t{sizeof(float)}, py::ssize_t{sizeof(float)}}, data, owner);
}

py::object NewFuture() {
  return py::module_::import("concurrent.futures").attr("Future")();
}

// Resolves `future` (on the CompletionThread, holding the GIL) unless the caller cancelled it.
void Resolve(py::object& future, const Status& status, const std::function<py::object()>& value) {
  if (future.attr("set_running_or_notify_cancel")().cast<bool>() == false) return;
  if (status.ok()) {
    future.attr("set_result")(value());
  } else {
    future.attr("set_exception")(ToException(status));
  }
}

// A Python object captured by a callback that may be destroyed on any thread: released under
// the GIL, on the CompletionThread.
std::shared_ptr<py::object> Shared(py::object object) {
  return std::shared_ptr<py::object>(new py::object(std::move(object)), [](py::object* o) {
    CompletionThread::Post([o] { delete o; });
  });
}

class PyPsClient {
 public:
  PyPsClient(const ps::ClusterSpec& spec, const std::string& transport, uint64_t client_id,
             double connect_timeout)
      : spec_(spec) {
    if (transport != "rdma" && transport != "tcp") {
      throw StatusError(
          InvalidArgument("transport must be \"rdma\" or \"tcp\", not \"" + transport + "\""));
    }
    ps::PsClientOptions options;
    options.transport = transport;
    options.client_id = client_id;
    options.rpc.connect_timeout =
        std::chrono::ceil<std::chrono::milliseconds>(TimeoutFromSeconds(connect_timeout));
    Result<std::unique_ptr<ps::PsClient>> client = ps::PsClient::Create(spec, options);
    ThrowIfError(client.status());
    client_ = std::move(client).value();
  }

  ps::PsClient& client() {
    if (!client_) throw StatusError(FailedPrecondition("the PsClient is closed"));
    return *client_;
  }

  // A table id, or a table name of the cluster file (PsClient::TableId).
  uint32_t Table(const py::object& table) {
    if (py::isinstance<py::str>(table)) {
      Result<uint32_t> id = client().TableId(table.cast<std::string>());
      ThrowIfError(id.status());
      return *id;
    }
    const int64_t id = table.cast<int64_t>();
    if (id < 0 || id > UINT32_MAX) throw StatusError(InvalidArgument("table id out of range"));
    return static_cast<uint32_t>(id);
  }

  py::array Fetch(const py::object& table, const py::object& key_list, double timeout) {
    const uint32_t id = Table(table);
    const Keys keys = ToKeys(key_list);
    const auto deadline = TimeoutFromSeconds(timeout);
    std::span<const uint64_t> span(keys.data(), static_cast<size_t>(keys.size()));
    ps::PsClient& c = client();
    Result<ps::FetchedRows> rows = ps::FetchedRows{};
    {
      py::gil_scoped_release release;
      std::promise<Result<ps::FetchedRows>> promise;
      c.FetchRowsAsync(id, span, deadline,
                       [&promise](Result<ps::FetchedRows> r) { promise.set_value(std::move(r)); });
      rows = promise.get_future().get();
    }
    ThrowIfError(rows.status());
    return ToArray(std::move(rows).value());
  }

  py::object FetchAsync(const py::object& table, const py::object& key_list, double timeout) {
    const uint32_t id = Table(table);
    const Keys keys = ToKeys(key_list);
    const auto deadline = TimeoutFromSeconds(timeout);
    py::object future = NewFuture();
    std::shared_ptr<py::object> shared = Shared(future);
    std::span<const uint64_t> span(keys.data(), static_cast<size_t>(keys.size()));
    ps::PsClient& c = client();
    py::gil_scoped_release release;  // FetchRowsAsync may complete inline (no keys, no shard)
    c.FetchRowsAsync(id, span, deadline, [shared](Result<ps::FetchedRows> r) {
      auto result = std::make_shared<Result<ps::FetchedRows>>(std::move(r));
      CompletionThread::Post([shared, result] {
        Resolve(*shared, result->status(), [&] { return ToArray(std::move(*result).value()); });
      });
    });
    return future;
  }

  // (keys, grads) as the C++ call wants them: grads a C-contiguous float32 (n, dim) array,
  // read in place (other dtypes or layouts are converted, which copies).
  struct PushArgs {
    uint32_t table = 0;
    uint32_t dim = 0;
    std::chrono::microseconds timeout{0};
    Keys keys;
    py::array_t<float, py::array::c_style | py::array::forcecast> grads;
  };
  PushArgs Prepare(const py::object& table, const py::object& keys, const py::object& grads,
                   double timeout) {
    PushArgs args{Table(table), 0, TimeoutFromSeconds(timeout), ToKeys(keys),
                  py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(grads)};
    if (!args.grads) throw py::error_already_set();
    if (args.grads.ndim() != 2 || args.grads.shape(0) != args.keys.size()) {
      throw StatusError(InvalidArgument("grads must be a (len(keys), dim) array"));
    }
    args.dim = static_cast<uint32_t>(args.grads.shape(1));
    return args;
  }

  void Push(const py::object& table, const py::object& keys, const py::object& grads,
            double timeout) {
    PushArgs a = Prepare(table, keys, grads, timeout);
    ps::PsClient& c = client();
    Status status;
    {
      py::gil_scoped_release release;
      status = c.Push(a.table, a.dim, {a.keys.data(), size_t(a.keys.size())},
                      {a.grads.data(), size_t(a.grads.size())}, a.timeout);
    }
    ThrowIfError(status);
  }

  // PushAsync copies keys and grads before it returns, so the arrays need not stay alive.
  py::object PushAsync(const py::object& table, const py::object& keys, const py::object& grads,
                       double timeout) {
    PushArgs a = Prepare(table, keys, grads, timeout);
    py::object future = NewFuture();
    std::shared_ptr<py::object> shared = Shared(future);
    ps::PsClient& c = client();
    py::gil_scoped_release release;
    c.PushAsync(a.table, a.dim, {a.keys.data(), size_t(a.keys.size())},
                {a.grads.data(), size_t(a.grads.size())}, a.timeout, [shared](Status status) {
                  CompletionThread::Post(
                      [shared, status] { Resolve(*shared, status, [] { return py::none(); }); });
                });
    return future;
  }

  // Closes the connections; outstanding calls end with Aborted.
  void Close() {
    std::unique_ptr<ps::PsClient> closing = std::move(client_);
    py::gil_scoped_release release;
    closing.reset();
  }

  py::dict Stats() {
    ps::PsClientStats stats = client().stats();
    py::dict out;
    out["push_failovers"] = stats.push_failovers;
    out["calls"] = stats.rpc.calls;
    out["ok"] = stats.rpc.ok;
    out["attempts"] = stats.rpc.attempts;
    out["retries"] = stats.rpc.retries;
    out["fallbacks_to_tcp"] = stats.rpc.fallbacks_to_tcp;
    out["connections_opened"] = stats.rpc.connections_opened;
    out["connections_failed"] = stats.rpc.connections_failed;
    py::dict errors;
    for (const auto& [code, count] : stats.rpc.errors) {
      errors[py::str(std::string(StatusCodeName(code)))] = count;
    }
    out["errors"] = errors;
    py::dict latency;
    for (const auto& [method, histogram] : stats.rpc.latency) {
      py::dict one;
      one["count"] = histogram.count();
      one["p50_us"] = histogram.PercentileUs(0.5);
      one["p99_us"] = histogram.PercentileUs(0.99);
      one["mean_us"] = histogram.MeanUs();
      latency[py::str(method)] = one;
    }
    out["latency"] = latency;
    return out;
  }

  ~PyPsClient() {
    if (client_) Close();
  }

  const ps::ClusterSpec& spec() const { return spec_; }

 private:
  ps::ClusterSpec spec_;
  std::unique_ptr<ps::PsClient> client_;
};

ps::ClusterSpec LoadCluster(const std::string& path) {
  Result<ps::ClusterSpec> spec = ps::LoadClusterFile(path);
  ThrowIfError(spec.status());
  return std::move(spec).value();
}

ps::ClusterSpec ParseCluster(const std::string& json) {
  Result<ps::ClusterSpec> spec = ps::ParseClusterSpec(json);
  ThrowIfError(spec.status());
  return std::move(spec).value();
}

}  // namespace

void BindPsClient(py::module_& m) {
  py::class_<ps::ClusterSpec>(m, "Cluster", "A cluster file: tables, shards and replicas.")
      .def_static("load", &LoadCluster, py::arg("path"),
                  "Reads a cluster file (and its secret_file).")
      .def_static("parse", &ParseCluster, py::arg("json"), "Parses cluster-file JSON text.")
      .def("to_json", &ps::ClusterSpecToJson)
      .def_property_readonly("shard_count",
                             [](const ps::ClusterSpec& s) { return s.shards.size(); })
      .def_property_readonly("tables",
                             [](const ps::ClusterSpec& s) {
                               py::dict out;  // name -> (id, dim)
                               for (const ps::TableConfig& t : s.tables) {
                                 out[py::str(t.name)] = py::make_tuple(t.id, t.dim);
                               }
                               return out;
                             })
      .def_property_readonly("transport", [](const ps::ClusterSpec& s) { return s.transport; });

  m.def("shard_of_key", &ps::ShardOfKey, py::arg("key"), py::arg("shard_count"),
        "The shard that owns `key` (the cluster file's routing function).");

  py::class_<ps::FetchedRows>(m, "FetchedRows",
                              "Owns the memory of a fetched array (the array's .base).")
      .def_property_readonly("copied", &ps::FetchedRows::copied,
                             "False: the rows are read in place from the received reply.")
      .def_property_readonly(
          "address", [](const ps::FetchedRows& r) { return reinterpret_cast<uintptr_t>(r.data()); })
      .def_property_readonly("received_range", [](const ps::FetchedRows& r) {
        std::span<const std::byte> bytes = r.reply_bytes();
        const auto begin = reinterpret_cast<uintptr_t>(bytes.data());
        return py::make_tuple(begin, begin + bytes.size());
      });

  py::class_<PyPsClient>(m, "PsClient")
      .def(py::init<const ps::ClusterSpec&, const std::string&, uint64_t, double>(),
           py::arg("cluster"), py::arg("transport") = "rdma", py::arg("client_id") = 0,
           py::arg("connect_timeout") = 1.0)
      .def("fetch", &PyPsClient::Fetch, py::arg("table"), py::arg("keys"), py::arg("timeout") = 5.0)
      .def("fetch_async", &PyPsClient::FetchAsync, py::arg("table"), py::arg("keys"),
           py::arg("timeout") = 5.0)
      .def("push", &PyPsClient::Push, py::arg("table"), py::arg("keys"), py::arg("grads"),
           py::arg("timeout") = 5.0)
      .def("push_async", &PyPsClient::PushAsync, py::arg("table"), py::arg("keys"),
           py::arg("grads"), py::arg("timeout") = 5.0)
      .def("table_id", &PyPsClient::Table, py::arg("table"))
      .def("stats", &PyPsClient::Stats)
      .def("close", &PyPsClient::Close)
      .def_property_readonly("client_id", [](PyPsClient& c) { return c.client().client_id(); })
      .def_property_readonly("shard_count", [](PyPsClient& c) { return c.client().shard_count(); })
      .def_property_readonly("cluster", &PyPsClient::spec);
}

}  // namespace bx::python
