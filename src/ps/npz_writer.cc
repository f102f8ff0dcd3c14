#include "ps/npz_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>

namespace bx::ps {

namespace {

constexpr uint64_t kNoZip64 = 0xFFFFFFFFull;

constexpr std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = MakeCrcTable();

void Put16(std::vector<std::byte>& out, uint16_t v) {
  for (int i = 0; i < 2; ++i) out.push_back(std::byte(v >> (8 * i)));
}
void Put32(std::vector<std::byte>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(std::byte(v >> (8 * i)));
}
void PutText(std::vector<std::byte>& out, const std::string& text) {
  for (char c : text) out.push_back(std::byte(c));
}

// The .npy header (format 1.0) of `array`, padded so that its data starts 64-byte aligned.
std::vector<std::byte> NpyHeader(const std::string& dtype, uint64_t rows, uint64_t columns) {
  std::string dict = "{'descr': '" + dtype + "', 'fortran_order': False, 'shape': (" +
                     std::to_string(rows) + (columns == 0 ? "," : ", " + std::to_string(columns)) +
                     "), }";
  const size_t unpadded = 10 + dict.size() + 1;  // magic, version, length; the newline
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  std::vector<std::byte> out;
  out.push_back(std::byte{0x93});
  PutText(out, "NUMPY");
  out.push_back(std::byte{1});
  out.push_back(std::byte{0});
  Put16(out, uint16_t(dict.size()));
  PutText(out, dict);
  return out;
}

Status WriteAll(int fd, std::span<const std::byte> bytes, const std::string& what) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(errno, "npz: write " + what);
    bytes = bytes.subspan(size_t(n));
  }
  return Status::Ok();
}

// A zip record's fixed part (local header or central directory entry), name appended.
std::vector<std::byte> ZipRecord(bool central, uint32_t crc, uint64_t size, const std::string& name,
                                 uint64_t local_offset) {
  std::vector<std::byte> out;
  Put32(out, central ? 0x02014b50u : 0x04034b50u);
  if (central) Put16(out, 20);  // made by
  Put16(out, 20);               // needed: 2.0
  Put16(out, 0);                // flags
  Put16(out, 0);                // stored
  Put16(out, 0);                // time
  Put16(out, 0x21);             // date: 1980-01-01
  Put32(out, crc);
  Put32(out, uint32_t(size));  // compressed
  Put32(out, uint32_t(size));  // uncompressed
  Put16(out, uint16_t(name.size()));
  Put16(out, 0);  // extra
  if (central) {
    Put16(out, 0);  // comment
    Put16(out, 0);  // disk
    Put16(out, 0);  // internal attributes
    Put32(out, 0);  // external attributes
    Put32(out, uint32_t(local_offset));
  }
  PutText(out, name);
  return out;
}

}  // namespace

uint32_t Crc32(uint32_t crc, std::span<const std::byte> bytes) {
  crc = ~crc;
  for (std::byte b : bytes) crc = kCrcTable[(crc ^ uint8_t(b)) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

Result<std::unique_ptr<NpzWriter>> NpzWriter::Create(const std::string& path) {
  return std::unique_ptr<NpzWriter>(new NpzWriter(path));
}

NpzWriter::~NpzWriter() {
  for (const auto& array : arrays_) {
    if (array->fd >= 0) ::close(array->fd);
    ::unlink(array->temp.c_str());
  }
  ::unlink((path_ + ".tmp").c_str());
}

Result<NpzWriter::Array*> NpzWriter::AddArray(const std::string& name, const std::string& dtype,
                                              size_t item_bytes, uint64_t columns) {
  auto array = std::make_unique<Array>();
  array->name = name + ".npy";
  array->dtype = dtype;
  array->item_bytes = item_bytes;
  array->columns = columns;
  array->temp = path_ + "." + name + ".tmp";
  array->fd = ::open(array->temp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (array->fd < 0) return Status::FromErrno(errno, "npz: create " + array->temp);
  arrays_.push_back(std::move(array));
  return arrays_.back().get();
}

Status NpzWriter::Append(Array* array, std::span<const std::byte> bytes) {
  BX_RETURN_IF_ERROR(WriteAll(array->fd, bytes, array->temp));
  array->bytes += bytes.size();
  return Status::Ok();
}

Status NpzWriter::WriteMember(int out, uint64_t* offset, Array& array,
                              std::vector<std::byte>* directory) {
  const uint64_t row_bytes = array.item_bytes * std::max<uint64_t>(array.columns, 1);
  const std::vector<std::byte> npy = NpyHeader(array.dtype, array.bytes / row_bytes, array.columns);
  const uint64_t size = npy.size() + array.bytes;
  if (size >= kNoZip64 || *offset >= kNoZip64) {
    return ResourceExhausted("npz: " + array.name + " would be " + std::to_string(size) +
                             " bytes at offset " + std::to_string(*offset) +
                             "; members and files of 4 GiB or more need ZIP64, not written here");
  }
  // The local header is written with a CRC of 0 and patched once the data has been read.
  std::vector<std::byte> local = ZipRecord(false, 0, size, array.name, 0);
  BX_RETURN_IF_ERROR(WriteAll(out, local, path_));
  BX_RETURN_IF_ERROR(WriteAll(out, npy, path_));
  uint32_t crc = Crc32(0, npy);
  std::vector<std::byte> buffer(size_t{1} << 20);
  if (::lseek(array.fd, 0, SEEK_SET) != 0) return Status::FromErrno(errno, "npz: seek");
  for (uint64_t done = 0; done < array.bytes;) {
    ssize_t n = ::read(array.fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::FromErrno(n == 0 ? EIO : errno, "npz: read " + array.temp);
    std::span<const std::byte> piece(buffer.data(), size_t(n));
    crc = Crc32(crc, piece);
    BX_RETURN_IF_ERROR(WriteAll(out, piece, path_));
    done += uint64_t(n);
  }
  std::byte patched[4];
  for (int i = 0; i < 4; ++i) patched[i] = std::byte(crc >> (8 * i));
  if (::pwrite(out, patched, 4, off_t(*offset + 14)) != 4) {
    return Status::FromErrno(errno, "npz: patch " + path_);
  }
  const std::vector<std::byte> entry = ZipRecord(true, crc, size, array.name, *offset);
  directory->insert(directory->end(), entry.begin(), entry.end());
  *offset += local.size() + size;
  return Status::Ok();
}

Status NpzWriter::Finish() {
  const std::string temp = path_ + ".tmp";
  int out = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) return Status::FromErrno(errno, "npz: create " + temp);
  std::vector<std::byte> directory;
  uint64_t offset = 0;
  Status s;
  for (const auto& array : arrays_) {
    s = WriteMember(out, &offset, *array, &directory);
    if (!s.ok()) break;
  }
  if (s.ok() && offset + directory.size() >= kNoZip64) {
    s = ResourceExhausted("npz: " + path_ +
                          " would reach 4 GiB; that needs ZIP64, not written here");
  }
  if (s.ok()) {
    std::vector<std::byte> end;
    Put32(end, 0x06054b50u);
    Put16(end, 0);
    Put16(end, 0);
    Put16(end, uint16_t(arrays_.size()));
    Put16(end, uint16_t(arrays_.size()));
    Put32(end, uint32_t(directory.size()));
    Put32(end, uint32_t(offset));
    Put16(end, 0);
    s = WriteAll(out, directory, path_);
    if (s.ok()) s = WriteAll(out, end, path_);
  }
  if (s.ok() && ::fsync(out) != 0) s = Status::FromErrno(errno, "npz: fsync " + temp);
  ::close(out);
  if (s.ok() && std::rename(temp.c_str(), path_.c_str()) != 0) {
    s = Status::FromErrno(errno, "npz: rename to " + path_);
  }
  return s;
}

}  // namespace bx::ps
