#include "runner/torch/io_dtype.h"

namespace tailor::runner {

std::optional<torch::Dtype> torch_dtype_of(io::DType t) {
  switch (t) {
    case io::DType::kF64: return torch::kFloat64;
    case io::DType::kF32: return torch::kFloat32;
    case io::DType::kF16: return torch::kFloat16;
    case io::DType::kBF16: return torch::kBFloat16;
    case io::DType::kI64: return torch::kInt64;
    case io::DType::kI32: return torch::kInt32;
    case io::DType::kI16: return torch::kInt16;
    case io::DType::kI8: return torch::kInt8;
    case io::DType::kU8: return torch::kUInt8;
    case io::DType::kBool: return torch::kBool;
  }
  return std::nullopt;
}

std::optional<io::DType> io_dtype_of(torch::Dtype t) {
  switch (t) {
    case torch::kFloat64: return io::DType::kF64;
    case torch::kFloat32: return io::DType::kF32;
    case torch::kFloat16: return io::DType::kF16;
    case torch::kBFloat16: return io::DType::kBF16;
    case torch::kInt64: return io::DType::kI64;
    case torch::kInt32: return io::DType::kI32;
    case torch::kInt16: return io::DType::kI16;
    case torch::kInt8: return io::DType::kI8;
    case torch::kUInt8: return io::DType::kU8;
    case torch::kBool: return io::DType::kBool;
    default: return std::nullopt;
  }
}

}  // namespace tailor::runner
