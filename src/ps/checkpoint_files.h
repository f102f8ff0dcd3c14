// The files of a checkpoint directory (docs/PS.md "Checkpoints"): the manifest, written last,
// and each shard's snapshot file; and the state one shard of a cluster, of any size, takes from
// them. The RPC side (asking the primaries) is src/ps/service/checkpoint.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "bx/ps/checkpoint.h"
#include "bx/status.h"
#include "ps/shard_state.h"

namespace bx::ps {

inline constexpr char kCheckpointManifestFile[] = "manifest.json";
// "shard-<s>.bxsnap"
std::string CheckpointShardFile(uint32_t shard);

// A file that appears whole or not at all: bytes go to `path`.tmp; Commit fsyncs it, renames
// it to `path` and fsyncs the directory. Removed unless committed.
class AtomicFile {
 public:
  static Result<std::unique_ptr<AtomicFile>> Create(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  Status Append(std::span<const std::byte> bytes);
  Status Commit();
  uint64_t bytes() const { return bytes_; }

 private:
  AtomicFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  const std::string path_;
  int fd_;
  uint64_t bytes_ = 0;
  bool committed_ = false;
};

// Writes `manifest` to `dir`/manifest.json atomically: the checkpoint exists from then on.
Status WriteCheckpointManifest(const std::string& dir, const CheckpointManifest& manifest);

// The rows of the checkpoint in `dir` that shard `shard` of a cluster of `shard_count`
// shards owns (ShardOfKey), from every shard file of the checkpoint: a checkpoint of 2 shards
// restores into 3 or 1. The tables are the checkpoint's (configs from its files); no dedup
// record and position 0: the restored cluster's clients and epochs start anew. Each file is
// read whole, one at a time.
Result<std::unique_ptr<ShardState>> LoadCheckpointShard(const std::string& dir, uint32_t shard,
                                                        uint32_t shard_count);

}  // namespace bx::ps
