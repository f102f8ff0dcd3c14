#include "ps/checkpoint_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "bx/ps/cluster.h"
#include "ps/npz_writer.h"

namespace bx::ps {
namespace {

using nlohmann::json;

Status FsyncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "checkpoint: open directory " + dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  return rc == 0 ? Status::Ok() : Status::FromErrno(err, "checkpoint: fsync " + dir);
}

Status BadManifest(const std::string& path, const std::string& why) {
  return DataLoss("checkpoint manifest " + path + ": " + why);
}

}  // namespace

std::string CheckpointShardFile(uint32_t shard) {
  return "shard-" + std::to_string(shard) + ".bxsnap";
}

Result<std::unique_ptr<AtomicFile>> AtomicFile::Create(const std::string& path) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno(errno, "checkpoint: create " + tmp);
  return std::unique_ptr<AtomicFile>(new AtomicFile(path, fd));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink((path_ + ".tmp").c_str());
}

Status AtomicFile::Append(std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "checkpoint: write " + path_ + ".tmp");
    bytes = bytes.subspan(size_t(n));
    bytes_ += uint64_t(n);
  }
  return Status::Ok();
}

Status AtomicFile::Commit() {
  if (::fsync(fd_) != 0) return Status::FromErrno(errno, "checkpoint: fsync " + path_ + ".tmp");
  ::close(fd_);
  fd_ = -1;
  if (std::rename((path_ + ".tmp").c_str(), path_.c_str()) != 0) {
    return Status::FromErrno(errno, "checkpoint: rename to " + path_);
  }
  committed_ = true;
  return FsyncDirectory(std::filesystem::path(path_).parent_path().string());
}

Status WriteCheckpointManifest(const std::string& dir, const CheckpointManifest& manifest) {
  json root;
  root["format"] = "bexpress checkpoint";
  root["version"] = 1;
  root["shard_count"] = manifest.shard_count;
  root["created_unix_ms"] = manifest.created_unix_ms;
  json shards = json::array();
  for (const CheckpointShard& s : manifest.shards) {
    shards.push_back({{"shard", s.shard},
                      {"file", s.file},
                      {"epoch", s.epoch},
                      {"lsn", s.lsn},
                      {"bytes", s.bytes}});
  }
  root["shards"] = std::move(shards);
  const std::string text = root.dump(2) + "\n";
  BX_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFile> file,
                      AtomicFile::Create(dir + "/" + kCheckpointManifestFile));
  BX_RETURN_IF_ERROR(file->Append(std::as_bytes(std::span(text.data(), text.size()))));
  return file->Commit();
}

Result<CheckpointManifest> ReadCheckpointManifest(const std::string& dir) {
  const std::string path = dir + "/" + kCheckpointManifestFile;
  std::ifstream in(path);
  if (!in) {
    return NotFound("no checkpoint in " + dir + " (no " + kCheckpointManifestFile +
                    "; an unfinished checkpoint has none)");
  }
  std::stringstream text;
  text << in.rdbuf();
  json root = json::parse(text.str(), /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return BadManifest(path, "not a JSON object");
  if (root.value("format", "") != "bexpress checkpoint" || root.value("version", 0) != 1) {
    return BadManifest(path, "not a version 1 bexpress checkpoint");
  }
  CheckpointManifest manifest;
  const json& shards = root["shards"];
  if (!root["shard_count"].is_number_unsigned() || !root["created_unix_ms"].is_number() ||
      !shards.is_array()) {
    return BadManifest(path, "shard_count, created_unix_ms or shards missing");
  }
  manifest.shard_count = root["shard_count"].get<uint32_t>();
  manifest.created_unix_ms = root["created_unix_ms"].get<uint64_t>();
  if (manifest.shard_count == 0 || shards.size() != manifest.shard_count) {
    return BadManifest(path, "shards does not list shard_count shards");
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    const json& j = shards[i];
    CheckpointShard s;
    if (!j.is_object() || !j["shard"].is_number_unsigned() || !j["file"].is_string() ||
        !j["epoch"].is_number_unsigned() || !j["lsn"].is_number_unsigned() ||
        !j["bytes"].is_number_unsigned()) {
      return BadManifest(path, "shards[" + std::to_string(i) + "] is malformed");
    }
    s.shard = j["shard"].get<uint32_t>();
    s.file = j["file"].get<std::string>();
    s.epoch = j["epoch"].get<uint64_t>();
    s.lsn = j["lsn"].get<uint64_t>();
    s.bytes = j["bytes"].get<uint64_t>();
    if (s.shard != i || s.file != CheckpointShardFile(s.shard)) {
      return BadManifest(path, "shards[" + std::to_string(i) + "] is not shard " +
                                   std::to_string(i) + " in " + CheckpointShardFile(i));
    }
    std::error_code error;
    const uint64_t size = std::filesystem::file_size(dir + "/" + s.file, error);
    if (error || size != s.bytes) {
      return DataLoss("checkpoint " + dir + ": " + s.file +
                      (error ? " is missing"
                             : " has " + std::to_string(size) +
                                   " bytes, the "
                                   "manifest says " +
                                   std::to_string(s.bytes)));
    }
    manifest.shards.push_back(std::move(s));
  }
  return manifest;
}

Result<std::unique_ptr<ShardState>> LoadCheckpointShard(const std::string& dir, uint32_t shard,
                                                        uint32_t shard_count) {
  if (shard_count == 0 || shard >= shard_count) {
    return InvalidArgument("restore: shard " + std::to_string(shard) + " of " +
                           std::to_string(shard_count));
  }
  BX_ASSIGN_OR_RETURN(CheckpointManifest manifest, ReadCheckpointManifest(dir));
  auto restored = std::make_unique<ShardState>();
  for (const CheckpointShard& s : manifest.shards) {
    // The same shard count: only the shard's own file holds its keys.
    if (manifest.shard_count == shard_count && s.shard != shard) continue;
    Result<std::unique_ptr<ShardState>> loaded = ShardState::Load(dir + "/" + s.file);
    if (!loaded.ok()) return loaded.status().WithContext("restore from " + dir);
    for (uint32_t id : (*loaded)->table_ids()) {
      const Table& from = *(*loaded)->table(id);
      BX_RETURN_IF_ERROR(restored->CreateTable(from.config()));  // identical in every file
      Table& to = *restored->table(id);
      Status inserted;
      from.ForEachRow([&](uint64_t key, std::span<const float> state) {
        if (inserted.ok() && ShardOfKey(key, shard_count) == shard) {
          inserted = to.InsertRow(key, state);
        }
      });
      if (!inserted.ok()) return inserted.WithContext("restore from " + s.file);
    }
  }
  return restored;
}

Result<uint64_t> ExportCheckpointTable(const std::string& dir, const std::string& table,
                                       const std::string& npz_path, const ExportOptions& options) {
  BX_ASSIGN_OR_RETURN(CheckpointManifest manifest, ReadCheckpointManifest(dir));
  BX_ASSIGN_OR_RETURN(std::unique_ptr<NpzWriter> npz, NpzWriter::Create(npz_path));
  NpzWriter::Array *keys = nullptr, *rows = nullptr, *state = nullptr;
  std::set<std::string> names;
  uint64_t exported = 0;
  for (const CheckpointShard& s : manifest.shards) {
    Result<std::unique_ptr<ShardState>> loaded = ShardState::Load(dir + "/" + s.file);
    if (!loaded.ok()) return loaded.status().WithContext("export from " + dir);
    for (uint32_t id : (*loaded)->table_ids()) {
      const Table& from = *(*loaded)->table(id);
      names.insert(from.config().name);
      if (from.config().name != table) continue;
      const uint32_t dim = from.dim(), extra = from.stride() - from.dim();
      if (keys == nullptr) {
        BX_ASSIGN_OR_RETURN(keys, npz->AddArray("keys", "<u8", sizeof(uint64_t), 0));
        BX_ASSIGN_OR_RETURN(rows, npz->AddArray("rows", "<f4", sizeof(float), dim));
        if (options.optimizer_state && extra > 0) {
          BX_ASSIGN_OR_RETURN(state, npz->AddArray("state", "<f4", sizeof(float), extra));
        }
      }
      // One shard's rows at a time: it is in memory already.
      std::vector<uint64_t> shard_keys;
      std::vector<float> shard_rows, shard_state;
      from.ForEachRow([&](uint64_t key, std::span<const float> row) {
        shard_keys.push_back(key);
        shard_rows.insert(shard_rows.end(), row.begin(), row.begin() + dim);
        if (state != nullptr) shard_state.insert(shard_state.end(), row.begin() + dim, row.end());
      });
      BX_RETURN_IF_ERROR(npz->Append(keys, std::as_bytes(std::span(shard_keys))));
      BX_RETURN_IF_ERROR(npz->Append(rows, std::as_bytes(std::span(shard_rows))));
      if (state != nullptr) {
        BX_RETURN_IF_ERROR(npz->Append(state, std::as_bytes(std::span(shard_state))));
      }
      exported += shard_keys.size();
    }
  }
  if (keys == nullptr) {
    std::string known;
    for (const std::string& name : names) known += (known.empty() ? "" : ", ") + name;
    return NotFound("export: the checkpoint in " + dir + " has no table \"" + table +
                    "\" (it has: " + (known.empty() ? "none" : known) + ")");
  }
  BX_RETURN_IF_ERROR(npz->Finish());
  return exported;
}

}  // namespace bx::ps
