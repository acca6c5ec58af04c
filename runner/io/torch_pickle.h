// The pickle inside a torch.save file (its data.pkl) read as a state_dict:
// which tensors it holds and where each one's data lies. Torch-free; the
// archive around it and the data are runner/torch/torch_save_file.h's.
//
// This is not a Python unpickler: it runs the opcodes a pickled dict of
// tensors uses (protocols 2 to 5) and knows a closed list of globals:
// collections.OrderedDict, torch._utils' tensor and parameter rebuilders and
// torch's typed storages. Any other global (os.system, a class of the
// user's) is refused by name before anything is called, as
// torch.load(weights_only=True) refuses it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "runner/io/safetensors.h"

namespace tailor::runner::io {

// One tensor of the dict, as torch.save stores it: a view of a storage.
struct PickledTensor {
  std::string name;
  std::string storage;             // the storage's record, data/<storage> in the archive
  DType dtype;                     // the storage's element type
  std::int64_t storage_numel = 0;  // elements the storage holds
  std::int64_t offset = 0;         // the view's first element in the storage
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // in elements, each >= 0
};

// Parses `pickle` (data.pkl) into its tensors in the dict's order. The
// top-level object must be a dict (or OrderedDict) of tensor names to
// tensors or parameters. Checked: each view lies within its storage's
// elements, and a storage keeps one type and size wherever it appears.
// InvalidArgument saying what is wrong: a truncated or malformed pickle, an
// opcode or a global outside the list above, a key that is not a string, a
// value that is not a tensor (a nested dict of a training checkpoint).
Result<std::vector<PickledTensor>> read_state_dict_pickle(std::string_view pickle);

}  // namespace tailor::runner::io
