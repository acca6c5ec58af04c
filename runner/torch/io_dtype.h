// Element types between LibTorch and the safetensors format (io::DType):
// every type both know, integers and bool included.
#pragma once

#include <torch/torch.h>

#include <optional>

#include "runner/io/safetensors.h"

namespace tailor::runner {

std::optional<torch::Dtype> torch_dtype_of(io::DType t);
std::optional<io::DType> io_dtype_of(torch::Dtype t);

}  // namespace tailor::runner
