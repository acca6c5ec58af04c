#include "runner/torch/host_tensor.h"

#include "runner/torch/tracking_allocator.h"

namespace tailor::runner {

torch::Tensor host_empty_like(const torch::Tensor& t) {
  if (!t.is_cuda()) return torch::empty(t.sizes(), t.options().device(torch::kCPU));
  torch::Tensor out = torch::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(true));
  c10::StorageImpl* storage = out.storage().unsafeGetStorageImpl();
  const std::size_t bytes = storage->nbytes();
  c10::DataPtr pinned = storage->set_data_ptr(c10::DataPtr(nullptr, storage->device()));
  storage->set_data_ptr_noswap(TrackingAllocator::install().count_as_host(std::move(pinned), bytes));
  return out;
}

torch::Tensor host_copy(const torch::Tensor& t) {
  torch::NoGradGuard ng;
  torch::Tensor out = host_empty_like(t);
  out.copy_(t);
  return out;
}

}  // namespace tailor::runner
