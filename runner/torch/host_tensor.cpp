#include "runner/torch/host_tensor.h"

#include "runner/torch/tracking_allocator.h"

namespace tailor::runner {

torch::Tensor host_copy(const torch::Tensor& t) {
  torch::NoGradGuard ng;
  if (!t.is_cuda()) {
    torch::Tensor out = torch::empty(t.sizes(), t.options().device(torch::kCPU));
    out.copy_(t);
    return out;
  }
  torch::Tensor out = torch::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(true));
  c10::StorageImpl* storage = out.storage().unsafeGetStorageImpl();
  const std::size_t bytes = storage->nbytes();
  c10::DataPtr pinned = storage->set_data_ptr(c10::DataPtr(nullptr, storage->device()));
  storage->set_data_ptr_noswap(TrackingAllocator::install().count_as_host(std::move(pinned), bytes));
  out.copy_(t);
  return out;
}

}  // namespace tailor::runner
