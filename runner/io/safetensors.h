// The safetensors file format (https://github.com/huggingface/safetensors),
// read through a read-only memory map and written atomically. Torch-free.
//
// Layout: an 8-byte little-endian unsigned header length N, N bytes of a
// JSON object {name: {"dtype", "shape", "data_offsets": [begin, end]},
// "__metadata__": {str: str}}, then the byte buffer; offsets are relative to
// the start of the buffer and tensors are stored row-major, little-endian.
// Not supported: big-endian hosts (a static_assert stops the build there),
// the 8-bit float and unsigned 16/32/64-bit dtypes (an "unsupported dtype"
// error on open).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tailor::runner::io {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// Bytes per element (kBool: 1).
std::size_t dtype_size(DType);
// The format's name: "F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL".
const char* to_string(DType);

// One tensor of an open file. `data` points into the file's memory map: it
// is valid while the SafetensorsFile that owns it lives (moving the file
// keeps it valid). It carries no alignment guarantee beyond one byte.
struct TensorView {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;  // prod(shape) * dtype_size(dtype) bytes
};

// Gives the whole pages under `bytes` (a view into a SafetensorsFile's
// read-only map) back to the kernel; a later read faults them in again from
// the file. A loader that copies each tensor out once calls it after the
// copy, so that the mapped file does not stay resident beside the copies
// (a 1.1B model's fp32 file is 4.4 GB). Pages shared with a neighbouring
// tensor are kept.
void drop_mapped_pages(std::span<const std::byte> bytes);

// A safetensors file, memory-mapped read-only and fully validated on open:
// every tensor's dtype, shape and offsets are checked, so the views can be
// used without further checks. Movable, not copyable; not thread-safe to
// move while another thread reads, but concurrent reads are fine. As with
// any memory map, truncating the file while it is open makes reads of the
// lost part fault (SIGBUS): the writer here replaces files by rename, which
// leaves open maps intact.
class SafetensorsFile {
 public:
  // Errors (InvalidArgument unless the file cannot be opened or mapped,
  // which is NotFound / IOError) name the file and, where there is one, the
  // tensor: file shorter than 8 bytes; header length beyond the file or over
  // 100 MB; header not a JSON object; an entry that is not {dtype, shape,
  // data_offsets}; unknown dtype; negative or overflowing shape; end < begin;
  // offsets beyond the buffer; byte size != prod(shape) * dtype size;
  // overlapping tensors; __metadata__ not an object of strings.
  // inside_read_root: a file a spec names (a model's weights), which under
  // tailord must lie inside the spec root (runner/data/file_io.h), checked
  // on the file opened; InvalidArgument when it does not.
  static Result<SafetensorsFile> open(const std::string& path, bool inside_read_root = false);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  // In file order: by position in the byte buffer (ties, which only
  // zero-size tensors can have, in header order).
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // nullptr when there is no tensor of that name.
  const TensorView* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  void release();

  std::string path_;
  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;  // row-major, little-endian, prod(shape) * dtype_size(dtype) bytes
};

// Writes `tensors` in the given order, contiguously, after a header padded
// with spaces to a multiple of 8 bytes (so the buffer starts 8-aligned).
// Atomic: writes path + ".tmp", flushes it to disk, then renames it over
// `path`; on error the temporary file is removed and `path` is untouched.
// InvalidArgument for an empty or duplicate name, "__metadata__" as a name,
// a negative dimension or a data size that does not match the shape;
// IOError naming the file when writing fails.
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace tailor::runner::io
