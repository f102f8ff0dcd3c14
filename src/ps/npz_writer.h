// A NumPy .npz file (a zip of .npy arrays, stored uncompressed), written from arrays that grow
// in pieces: each goes to a temporary file first, because a zip member's header holds its size
// and CRC and an .npy header its shape. Without ZIP64: a member of 4 GiB or more is refused.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bx/status.h"

namespace bx::ps {

class NpzWriter {
 public:
  // One array: `dtype` as NumPy spells it ("<u8", "<f4"), of `columns` per row (0: 1-D),
  // its bytes so far in a temporary file.
  struct Array {
    std::string name, dtype, temp;
    size_t item_bytes = 0;
    uint64_t columns = 0;
    int fd = -1;
    uint64_t bytes = 0;
  };

  static Result<std::unique_ptr<NpzWriter>> Create(const std::string& path);
  ~NpzWriter();  // removes what Finish did not complete
  NpzWriter(const NpzWriter&) = delete;
  NpzWriter& operator=(const NpzWriter&) = delete;

  Result<Array*> AddArray(const std::string& name, const std::string& dtype, size_t item_bytes,
                          uint64_t columns);
  Status Append(Array* array, std::span<const std::byte> bytes);
  // Writes `path` (through path.tmp, renamed) and removes the temporary files.
  Status Finish();

 private:
  explicit NpzWriter(std::string path) : path_(std::move(path)) {}
  Status WriteMember(int out, uint64_t* offset, Array& array, std::vector<std::byte>* directory);
  const std::string path_;
  std::vector<std::unique_ptr<Array>> arrays_;
};

// CRC-32 (IEEE 802.3, as zip uses), continued from `crc` (0 to start).
uint32_t Crc32(uint32_t crc, std::span<const std::byte> bytes);

}  // namespace bx::ps
