// Weights saved by PyTorch's torch.save in its zip format (PyTorch 1.6 and
// later): the pytorch_model.bin files of older Hugging Face folders and
// PEFT's adapter_model.bin, read without Python.
//
// The file is memory-mapped read-only and its zip read by LibTorch's
// PyTorchStreamReader. Its data.pkl (a pickle of a flat dict, tensor name
// -> tensor) is read by io::read_state_dict_pickle (runner/io/torch_pickle.h),
// which knows only the globals of tensors and storages: a pickle that names
// any other (os.system, a class of the user's) is refused, never run. A
// tensor is a view of its storage's record in the map (torch.save stores
// records uncompressed, 64-byte aligned), so opening a 10 GB shard reads
// nothing but its pickle, and a loader copies each tensor out as it goes.
//
// Not read: the legacy format of PyTorch before 1.6 (a bare pickle, not a
// zip), compressed records, big-endian files, pickles of anything but a
// dict of tensors (a training checkpoint with an optimizer, a whole
// nn.Module); each is refused by name.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "runner/io/safetensors.h"

namespace tailor::runner {

class TorchSaveFile {
 public:
  // Errors (InvalidArgument unless the file cannot be opened or mapped,
  // which is NotFound / IOError) name the file and, where there is one, the
  // tensor. inside_read_root: as io::SafetensorsFile::open.
  static Result<TorchSaveFile> open(const std::string& path, bool inside_read_root = false);

  // In the pickle's order. A contiguous tensor's data is a view of the
  // file's map; another (a transposed view, a slice of a storage shared
  // with others) is copied out whole on open.
  const std::vector<io::TensorView>& tensors() const { return views_; }
  // nullptr when there is no tensor of that name.
  const io::TensorView* find(std::string_view name) const;
  // Whether `view` (one of tensors()) lies in the file's map rather than in
  // a copy: io::drop_mapped_pages may give its pages back only then.
  bool mapped(const io::TensorView& view) const;
  const std::string& path() const { return path_; }

 private:
  struct Mapping;
  struct Held;

  std::string path_;
  std::shared_ptr<const Mapping> map_;
  std::shared_ptr<const Held> held_;  // the tensors the views read (LibTorch types stay in the .cpp)
  std::vector<io::TensorView> views_;
  std::vector<bool> mapped_;                               // per view
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in views_
};

}  // namespace tailor::runner
