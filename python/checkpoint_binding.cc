// bexpress.checkpoint, bexpress.export_table and PsServer.restore_from's helpers: the
// parameter server's checkpoints (bx/ps/checkpoint.h) from Python.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <string>

#include "bindings.h"
#include "bx/ps/checkpoint.h"
#include "bx/ps/cluster.h"
#include "status_error.h"

namespace py = pybind11;

namespace bx::python {
namespace {

py::dict ManifestToDict(const ps::CheckpointManifest& manifest) {
  py::dict out;
  out["shard_count"] = manifest.shard_count;
  out["created_unix_ms"] = manifest.created_unix_ms;
  py::list shards;
  for (const ps::CheckpointShard& s : manifest.shards) {
    py::dict shard;
    shard["shard"] = s.shard;
    shard["file"] = s.file;
    shard["epoch"] = s.epoch;
    shard["lsn"] = s.lsn;
    shard["bytes"] = s.bytes;
    shards.append(shard);
  }
  out["shards"] = shards;
  return out;
}

py::dict Checkpoint(const ps::ClusterSpec& cluster, const std::string& dir, double shard_timeout) {
  ps::CheckpointOptions options;
  options.shard_timeout = std::chrono::milliseconds(int64_t(shard_timeout * 1000));
  options.client.log = [](std::string_view) {};
  Result<ps::CheckpointManifest> manifest = [&] {
    py::gil_scoped_release release;
    return ps::WriteCheckpoint(cluster, dir, options);
  }();
  ThrowIfError(manifest.status());
  return ManifestToDict(*manifest);
}

py::dict ReadManifest(const std::string& dir) {
  Result<ps::CheckpointManifest> manifest = ps::ReadCheckpointManifest(dir);
  ThrowIfError(manifest.status());
  return ManifestToDict(*manifest);
}

uint64_t ExportTable(const std::string& dir, const std::string& table, const std::string& path,
                     bool optimizer_state) {
  ps::ExportOptions options;
  options.optimizer_state = optimizer_state;
  Result<uint64_t> rows = [&] {
    py::gil_scoped_release release;
    return ps::ExportCheckpointTable(dir, table, path, options);
  }();
  ThrowIfError(rows.status());
  return *rows;
}

}  // namespace

void BindCheckpoint(py::module_& m) {
  m.def("checkpoint", &Checkpoint, py::arg("cluster"), py::arg("dir"),
        py::arg("shard_timeout") = 120.0,
        "Writes every shard's rows, at a durable position of its push stream, to `dir` while "
        "pushes go on (as `bx ps checkpoint`); returns the manifest as a dict. `dir` must not "
        "hold a checkpoint already.");
  m.def("read_checkpoint", &ReadManifest, py::arg("dir"),
        "The manifest of the checkpoint in `dir` (NotFound: none, or an unfinished one).");
  m.def("export_table", &ExportTable, py::arg("dir"), py::arg("table"), py::arg("path"),
        py::arg("optimizer_state") = false,
        "Writes table `table` of the checkpoint in `dir` as a NumPy .npz at `path`: keys "
        "(uint64) and rows (float32, n x dim), and state (the optimiser's) with "
        "optimizer_state. Returns n.");
}

}  // namespace bx::python
