// Precompiled header for every LibTorch translation unit of the runner:
// <torch/torch.h> costs ~12 s per TU here, ~4 s through this header.
#pragma once

#include <torch/torch.h>
