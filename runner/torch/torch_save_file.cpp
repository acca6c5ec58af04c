#include "runner/torch/torch_save_file.h"

#include <caffe2/serialize/in_memory_adapter.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/torch.h>

#include <cstring>
#include <map>
#include <optional>

#include "core/text.h"
#include "runner/io/mapped_file.h"
#include "runner/io/torch_pickle.h"
#include "runner/torch/io_dtype.h"

namespace tailor::runner {
namespace {

using caffe2::serialize::PyTorchStreamReader;

// The zip's local file header: "PK\3\4", then version, flags, and the
// compression method at byte 8 (0: stored).
constexpr std::size_t kLocalHeaderMethod = 8;

}  // namespace

struct TorchSaveFile::Mapping {
  io::FileMap file;
  ~Mapping() { io::unmap_file(file); }
  const std::byte* bytes() const { return static_cast<const std::byte*>(file.data); }
  std::size_t size() const { return file.size; }
};

struct TorchSaveFile::Held {
  std::vector<torch::Tensor> tensors;
};

Result<TorchSaveFile> TorchSaveFile::open(const std::string& path, bool inside_read_root) {
  TAILOR_ASSIGN_OR_RETURN(const io::FileMap file, io::map_file(path, inside_read_root));
  auto map = std::make_shared<Mapping>();
  map->file = file;
  auto bad = [&](const std::string& what) { return Status::invalid_argument(path + ": " + what); };
  const std::byte* bytes = map->bytes();
  if (map->size() < 4 || std::memcmp(bytes, "PK\x03\x04", 4) != 0) {
    // A pickle starts with its PROTO opcode (0x80): torch.save before
    // PyTorch 1.6, or with _use_new_zipfile_serialization=False.
    if (map->size() >= 2 && bytes[0] == std::byte{0x80}) {
      return bad(
          "saved in PyTorch's legacy format (before 1.6), which Tailor does not read: load it with "
          "torch.load and save it again with torch.save, or save the model with safetensors");
    }
    return bad("not a file saved by torch.save (no zip archive)");
  }

  TorchSaveFile f;
  f.path_ = path;
  auto held = std::make_shared<Held>();
  try {
    PyTorchStreamReader reader(
        std::make_shared<caffe2::serialize::MemoryReadAdapter>(map->file.data, static_cast<off_t>(map->size())));
    if (reader.hasRecord("byteorder")) {
      const auto [order, order_size] = reader.getRecord("byteorder");
      const std::string_view text(static_cast<const char*>(order.get()), order_size);
      if (text != "little") return bad("its tensors are stored " + std::string(text) + "-endian");
    }
    if (!reader.hasRecord("data.pkl")) return bad("no data.pkl in the archive (not a torch.save file)");
    const auto [pickle, pickle_size] = reader.getRecord("data.pkl");
    auto parsed = io::read_state_dict_pickle(std::string_view(static_cast<const char*>(pickle.get()), pickle_size));
    if (!parsed.is_ok()) return parsed.status().prefixed(path + ": data.pkl");
    // Each storage's record: where in the map its bytes are.
    std::map<std::string, const std::byte*> records;
    for (const io::PickledTensor& p : *parsed) {
      if (records.contains(p.storage)) continue;
      const std::string name = "data/" + p.storage;
      if (!reader.hasRecord(name)) return bad(p.name + ": its storage's record " + name + " is missing");
      const std::size_t size = reader.getRecordSize(name);
      const std::size_t header = reader.getRecordHeaderOffset(name);
      if (header > map->size() || map->size() - header < kLocalHeaderMethod + 2)
        return bad("record " + name + " is truncated");
      std::uint16_t method = 0;
      std::memcpy(&method, bytes + header + kLocalHeaderMethod, 2);
      if (method != 0) return bad("record " + name + " is compressed (torch.save stores its records as they are)");
      const std::size_t offset = reader.getRecordOffset(name);
      if (offset > map->size() || size > map->size() - offset) return bad("record " + name + " runs past the end");
      const auto need = static_cast<std::uint64_t>(p.storage_numel) * io::dtype_size(p.dtype);
      if (need > size) {
        return bad(p.name + ": its storage claims " + std::to_string(need) + " bytes, and its record holds " +
                   std::to_string(size));
      }
      records.emplace(p.storage, bytes + offset);
    }
    for (const io::PickledTensor& p : *parsed) {
      const std::byte* storage = records.at(p.storage);
      const std::size_t element = io::dtype_size(p.dtype);
      std::int64_t numel = 1;
      bool contiguous = true;
      for (std::size_t d = p.shape.size(); d-- > 0;) {
        if (p.shape[d] != 1 && p.strides[d] != numel) contiguous = false;
        numel *= p.shape[d];
      }
      if (numel == 0) contiguous = true;
      std::span<const std::byte> data;
      if (contiguous) {
        data = {storage + p.offset * element, static_cast<std::size_t>(numel) * element};
      } else {
        // Copied out whole: the loaders read row-major bytes.
        const auto torch_type = torch_dtype_of(p.dtype);
        if (!torch_type) return bad(p.name + ": dtype " + io::to_string(p.dtype) + " is not supported");
        torch::Tensor whole = torch::from_blob(const_cast<std::byte*>(storage), {p.storage_numel},
                                               torch::TensorOptions().dtype(*torch_type));
        torch::Tensor t = whole.as_strided(p.shape, p.strides, p.offset).contiguous();
        held->tensors.push_back(t);
        data = {static_cast<const std::byte*>(t.data_ptr()), t.nbytes()};
      }
      f.views_.push_back({p.name, p.dtype, p.shape, data});
      f.mapped_.push_back(contiguous);
      f.index_.emplace(p.name, f.views_.size() - 1);
    }
  } catch (const c10::Error& e) {
    return bad(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return bad(e.what());
  }
  f.map_ = std::move(map);
  f.held_ = std::move(held);
  return f;
}

const io::TensorView* TorchSaveFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &views_[it->second];
}

bool TorchSaveFile::mapped(const io::TensorView& view) const {
  const auto i = static_cast<std::size_t>(&view - views_.data());
  return i < mapped_.size() && mapped_[i];
}

}  // namespace tailor::runner
