// Host copies of tensors for offloaded state (optimizer.h's host copies,
// zero3.h's parts in host memory), in the tracking allocator's host ledger.
#pragma once

#include <torch/torch.h>

namespace tailor::runner {

// A host tensor holding `t`'s values. A GPU tensor's copy is pinned
// (page-locked, so the GPU copies to and from it without staging) and
// counted in the host ledger through count_as_host(), since pinned memory
// has an allocator of its own; a CPU tensor's is an ordinary allocation,
// in the host ledger under a HostLedgerScope as any other.
torch::Tensor host_copy(const torch::Tensor& t);
// An uninitialised host tensor of `t`'s shape and dtype, pinned and counted
// as host_copy()'s when t is on a GPU.
torch::Tensor host_empty_like(const torch::Tensor& t);

}  // namespace tailor::runner
