#include "runner/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>

#include "core/text.h"
#include "platform/files.h"
#include "runner/data/file_io.h"
#include "runner/io/mapped_file.h"

// The format stores little-endian values and the reader hands out views of
// the mapped bytes unchanged; a big-endian host would need byte swapping.
static_assert(std::endian::native == std::endian::little, "safetensors I/O supports little-endian hosts only");

namespace tailor::runner::io {
namespace {

using platform::errno_text;
using platform::write_all;

// The reference implementation refuses headers above 100 MB (safetensors
// lib.rs, MAX_HEADER_SIZE = 100_000_000); so do we, so that a corrupt length
// cannot make us parse gigabytes.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

constexpr struct {
  DType dtype;
  const char* name;
  std::size_t size;
} kDTypes[] = {
    {DType::kF64, "F64", 8}, {DType::kF32, "F32", 4}, {DType::kF16, "F16", 2}, {DType::kBF16, "BF16", 2},
    {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4}, {DType::kI16, "I16", 2}, {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},   {DType::kBool, "BOOL", 1},
};

std::optional<DType> parse_dtype(std::string_view s) {
  for (const auto& d : kDTypes) {
    if (s == d.name) return d.dtype;
  }
  return std::nullopt;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// prod(shape) * elem, or nullopt on a negative dimension or overflow.
std::optional<std::uint64_t> byte_size(const std::vector<std::int64_t>& shape, std::size_t elem) {
  std::uint64_t n = elem;
  for (std::int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n)) return std::nullopt;
  }
  return n;
}

// A JSON integer that fits in uint64 (nlohmann keeps large positive values
// unsigned and negative ones signed).
std::optional<std::uint64_t> as_u64(const nlohmann::ordered_json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(v.get<std::int64_t>());
  return std::nullopt;
}

Status parse_entry(const std::string& file, const std::string& name, const nlohmann::ordered_json& e, std::uint64_t buffer_size,
                   TensorView& out, std::uint64_t& begin, std::uint64_t& end) {
  auto bad = [&](const std::string& what) { return Status::invalid_argument(file + ": tensor " + quote(name) + ": " + what); };
  if (!e.is_object()) return bad("entry is not a JSON object");
  const auto dt = e.find("dtype");
  const auto sh = e.find("shape");
  const auto off = e.find("data_offsets");
  if (dt == e.end() || !dt->is_string()) return bad("missing string \"dtype\"");
  if (sh == e.end() || !sh->is_array()) return bad("missing array \"shape\"");
  if (off == e.end() || !off->is_array() || off->size() != 2) return bad("\"data_offsets\" must be [begin, end]");
  const auto dtype = parse_dtype(dt->get<std::string>());
  if (!dtype) return bad("unknown or unsupported dtype " + quote(dt->get<std::string>()));
  out.name = name;
  out.dtype = *dtype;
  for (const auto& d : *sh) {
    if (!d.is_number_integer()) return bad("shape holds a non-integer " + quote(d.dump()));
    if (d.is_number_unsigned() && d.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
      return bad("shape dimension " + d.dump() + " overflows");
    }
    const std::int64_t v = d.get<std::int64_t>();
    if (v < 0) return bad("negative dimension in shape " + sh->dump());
    out.shape.push_back(v);
  }
  const auto nbytes = byte_size(out.shape, dtype_size(*dtype));
  if (!nbytes) return bad("shape " + shape_text(out.shape) + " overflows");
  const auto b = as_u64((*off)[0]), en = as_u64((*off)[1]);
  if (!b || !en) return bad("data_offsets must be non-negative integers, got " + off->dump());
  begin = *b;
  end = *en;
  if (end < begin) return bad("data_offsets end " + std::to_string(end) + " < begin " + std::to_string(begin));
  if (end > buffer_size) {
    return bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] beyond the " +
               std::to_string(buffer_size) + "-byte buffer");
  }
  if (end - begin != *nbytes) {
    return bad(std::to_string(end - begin) + " bytes for shape " + shape_text(out.shape) + " of " + to_string(*dtype) +
               ", which needs " + std::to_string(*nbytes));
  }
  return Status::ok();
}

}  // namespace

std::size_t dtype_size(DType t) {
  for (const auto& d : kDTypes) {
    if (d.dtype == t) return d.size;
  }
  return 1;
}

const char* to_string(DType t) {
  for (const auto& d : kDTypes) {
    if (d.dtype == t) return d.name;
  }
  return "?";
}

// ---- reading -----------------------------------------------------------------

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept { *this = std::move(other); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { release(); }

void SafetensorsFile::release() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
  map_ = nullptr;
  map_size_ = 0;
}

const TensorView* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path, bool inside_read_root) {
  TAILOR_ASSIGN_OR_RETURN(const FileMap file, map_file(path, inside_read_root));
  const auto file_size = static_cast<std::uint64_t>(file.size);
  if (file_size < 8) {
    unmap_file(file);
    return Status::invalid_argument(path + ": " + std::to_string(file_size) +
                                    " bytes is too short for a safetensors file (it starts with an 8-byte header length)");
  }
  void* map = file.data;
  SafetensorsFile f;
  f.path_ = path;
  f.map_ = map;
  f.map_size_ = file_size;
  const auto* bytes = static_cast<const std::byte*>(map);
  auto bad = [&](const std::string& what) { return Status::invalid_argument(path + ": " + what); };

  std::uint64_t header_len = 0;
  std::memcpy(&header_len, bytes, 8);  // little-endian host (static_assert above)
  if (header_len > kMaxHeaderBytes) {
    return bad("header length " + std::to_string(header_len) + " exceeds the 100 MB limit");
  }
  if (header_len > file_size - 8) {
    return bad("header length " + std::to_string(header_len) + " runs past the end of the " +
               std::to_string(file_size) + "-byte file");
  }
  const std::string_view header(reinterpret_cast<const char*>(bytes + 8), header_len);
  // Ordered, so that zero-size tensors sharing an offset keep header order.
  const auto j = nlohmann::ordered_json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("header is not valid JSON");
  if (!j.is_object()) return bad("header is not a JSON object");

  const std::uint64_t buffer_size = file_size - 8 - header_len;
  const std::byte* buffer = bytes + 8 + header_len;
  struct Placed {
    TensorView view;
    std::uint64_t begin, end;
  };
  std::vector<Placed> placed;
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return bad("__metadata__ is not a JSON object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) return bad("__metadata__ value of " + quote(mk) + " is not a string: " + mv.dump());
        f.metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    Placed p;
    TAILOR_RETURN_IF_ERROR(parse_entry(path, key, value, buffer_size, p.view, p.begin, p.end));
    p.view.data = std::span<const std::byte>(buffer + p.begin, p.end - p.begin);
    placed.push_back(std::move(p));
  }
  std::stable_sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < placed.size(); ++i) {
    if (placed[i].begin < placed[i - 1].end) {
      return bad("tensors " + quote(placed[i - 1].view.name) + " [" + std::to_string(placed[i - 1].begin) + ", " +
                 std::to_string(placed[i - 1].end) + ") and " + quote(placed[i].view.name) + " [" +
                 std::to_string(placed[i].begin) + ", " + std::to_string(placed[i].end) + ") overlap");
    }
  }
  for (auto& p : placed) {
    f.index_.emplace(p.view.name, f.tensors_.size());
    f.tensors_.push_back(std::move(p.view));
  }
  return f;
}

// ---- writing -----------------------------------------------------------------

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    auto bad = [&](const std::string& what) {
      return Status::invalid_argument(path + ": tensor " + quote(t.name) + ": " + what);
    };
    if (t.name.empty()) return Status::invalid_argument(path + ": a tensor has an empty name");
    if (t.name == "__metadata__") return bad("the name is reserved for the metadata");
    if (header.contains(t.name)) return bad("duplicate name");
    const auto n = byte_size(t.shape, dtype_size(t.dtype));
    if (!n) return bad("negative or overflowing shape " + shape_text(t.shape));
    if (*n != t.data.size()) {
      return bad(std::to_string(t.data.size()) + " bytes of data for shape " + shape_text(t.shape) + " of " +
                 to_string(t.dtype) + ", which needs " + std::to_string(*n));
    }
    header[t.name] = {{"dtype", to_string(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + *n}}};
    offset += *n;
  }
  std::string text = header.dump();
  // Padding with spaces keeps the JSON valid and the buffer 8-aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::uint64_t header_len = text.size();

  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::io_error("cannot create " + tmp + ": " + errno_text());
  bool ok = write_all(fd, &header_len, 8) && write_all(fd, text.data(), text.size());
  for (std::size_t i = 0; ok && i < tensors.size(); ++i) ok = write_all(fd, tensors[i].data.data(), tensors[i].data.size());
  // fsync before the rename: otherwise a crash can leave the new name
  // pointing at a file whose data never reached the disk.
  ok = ok && ::fsync(fd) == 0;
  const std::string why = ok ? "" : errno_text();
  ok = (::close(fd) == 0) && ok;
  if (ok && std::rename(tmp.c_str(), path.c_str()) == 0) return Status::ok();
  const std::string reason = why.empty() ? errno_text() : why;
  std::remove(tmp.c_str());
  return Status::io_error("writing " + path + ": " + reason);
}

void drop_mapped_pages(std::span<const std::byte> bytes) {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(bytes.data());
  const std::uintptr_t first = (begin + page - 1) / page * page;
  const std::uintptr_t last = (begin + bytes.size()) / page * page;
  // Advice only: a failure leaves the pages resident, nothing else.
  if (last > first) (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

}  // namespace tailor::runner::io
