#include "runner/torch/weight_file.h"

#include <utility>

namespace tailor::runner {
Result<WeightFile> WeightFile::open(const std::string& path, bool inside_read_root) {
  if (std::string_view(path).ends_with(".safetensors")) {
    TAILOR_ASSIGN_OR_RETURN(io::SafetensorsFile f, io::SafetensorsFile::open(path, inside_read_root));
    return WeightFile(std::move(f));
  }
  TAILOR_ASSIGN_OR_RETURN(TorchSaveFile f, TorchSaveFile::open(path, inside_read_root));
  return WeightFile(std::move(f));
}

const std::vector<io::TensorView>& WeightFile::tensors() const {
  return std::visit([](const auto& f) -> const std::vector<io::TensorView>& { return f.tensors(); }, file_);
}

const io::TensorView* WeightFile::find(std::string_view name) const {
  return std::visit([&](const auto& f) { return f.find(name); }, file_);
}

const std::string& WeightFile::path() const {
  return std::visit([](const auto& f) -> const std::string& { return f.path(); }, file_);
}

void WeightFile::done_with(const io::TensorView& view) const {
  const auto* pickled = std::get_if<TorchSaveFile>(&file_);
  if (pickled == nullptr || pickled->mapped(view)) io::drop_mapped_pages(view.data);
}

}  // namespace tailor::runner
