#include "runner/torch/tensor_file.h"

#include <functional>

#include "platform/files.h"

namespace tailor::runner {
namespace {

template <typename Value>
Status save(const Value& value, const std::string& path) {
  std::string bytes;
  const std::function<std::size_t(const void*, std::size_t)> append = [&bytes](const void* data, std::size_t n) {
    bytes.append(static_cast<const char*>(data), n);
    return n;
  };
  try {
    torch::save(value, append);
  } catch (const c10::Error& e) {
    return Status::io_error("serialising " + path + ": " + e.what_without_backtrace());
  }
  return platform::write_file_atomic(path, bytes);
}

}  // namespace

Status save_tensor_file(const std::vector<torch::Tensor>& tensors, const std::string& path) {
  return save(tensors, path);
}

Status save_tensor_file(const torch::Tensor& tensor, const std::string& path) { return save(tensor, path); }

}  // namespace tailor::runner
