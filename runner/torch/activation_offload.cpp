#include "runner/torch/activation_offload.h"

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "runner/torch/host_tensor.h"
#include "runner/torch/tracking_allocator.h"

#if TAILOR_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace tailor::runner {

struct ActivationOffloader::Slot {
  torch::Tensor host;    // the input, in host memory once its copy out is done
  torch::Tensor device;  // brought back ahead of its backward; undefined until then
#if TAILOR_CUDA
  at::cuda::CUDAEvent copied_out;  // on the side stream: host holds the input
  at::cuda::CUDAEvent copied_in;   // on the side stream: device holds it again
#endif
};

struct ActivationOffloader::Streams {
#if TAILOR_CUDA
  std::optional<c10::cuda::CUDAStream> side;
  // Slots whose host buffer a copy on the side stream may still read: kept
  // until that copy is done, so the pinned block is not handed to another
  // copy meanwhile (its events are ours, not the pinned cache's).
  std::vector<std::shared_ptr<Slot>> retiring;

  c10::cuda::CUDAStream& side_of(const torch::Device& device) {
    if (!side) side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
    return *side;
  }
  void retire(std::shared_ptr<Slot> slot) {
    std::erase_if(retiring, [](const std::shared_ptr<Slot>& s) { return s->copied_in.query(); });
    retiring.push_back(std::move(slot));
  }
#endif
};

ActivationOffloader::ActivationOffloader() : streams_(std::make_unique<Streams>()) {}

ActivationOffloader::~ActivationOffloader() {
#if TAILOR_CUDA
  if (streams_->side) streams_->side->synchronize();
#endif
}

std::int64_t ActivationOffloader::begin_forward() {
#if TAILOR_CUDA
  // An abandoned pass' copies may still be running.
  if (streams_->side && !slots_.empty()) streams_->side->synchronize();
  streams_->retiring.clear();
#endif
  slots_.clear();
  return ++pass_;
}

void ActivationOffloader::offload(std::int64_t layer, const torch::Tensor& x) {
  torch::NoGradGuard no_grad;
  auto slot = std::make_shared<Slot>();
  if (!x.is_cuda()) {
    HostLedgerScope host;
    slot->host = x.clone();
  } else {
#if TAILOR_CUDA
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(x.device().index());
    c10::cuda::CUDAStream& side = streams_->side_of(x.device());
    at::cuda::CUDAEvent produced;
    produced.record(compute);
    produced.block(side);
    slot->host = host_empty_like(x);
    {
      c10::cuda::CUDAStreamGuard on_side(side);
      slot->host.copy_(x, /*non_blocking=*/true);
      slot->copied_out.record(side);
    }
    // x's block goes back to the cache when the layer lets go of it, but
    // is not handed out again before the side stream has read it.
    x.record_stream(side);
#else
    throw std::logic_error("activation offloading: a CUDA tensor in a build without CUDA");
#endif
  }
  slots_[layer] = std::move(slot);
}

void ActivationOffloader::prefetch(std::int64_t layer, const torch::Device& device) {
  auto it = slots_.find(layer);
  if (it == slots_.end() || it->second->device.defined()) return;
  Slot& slot = *it->second;
  torch::NoGradGuard no_grad;
  if (!device.is_cuda()) {
    slot.device = slot.host.clone();
    return;
  }
#if TAILOR_CUDA
  c10::cuda::CUDAStream& side = streams_->side_of(device);
  c10::cuda::CUDAStreamGuard on_side(side);
  slot.device = torch::empty(slot.host.sizes(), slot.host.options().device(device).pinned_memory(false));
  slot.device.copy_(slot.host, /*non_blocking=*/true);
  slot.copied_in.record(side);
#endif
}

torch::Tensor ActivationOffloader::restore(std::int64_t pass, std::int64_t layer, std::int64_t next,
                                           const torch::Device& device) {
  auto it = slots_.find(layer);
  if (pass != pass_ || it == slots_.end()) {
    throw std::logic_error("activation offloading: layer " + std::to_string(layer) + "'s input of forward pass " +
                           std::to_string(pass) + " is not held (now at pass " + std::to_string(pass_) + ")");
  }
  if (!it->second->device.defined()) prefetch(layer, device);  // not brought back ahead: now
  std::shared_ptr<Slot> slot = std::move(it->second);
  slots_.erase(it);
  torch::Tensor x = slot->device;
#if TAILOR_CUDA
  if (device.is_cuda()) {
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device.index());
    slot->copied_in.block(compute);
    // Made on the side stream, used and freed on the compute stream.
    x.record_stream(compute);
    slot->device = torch::Tensor();
    streams_->retire(std::move(slot));
  }
#endif
  slot.reset();
  if (next >= 0) prefetch(next, device);
  return x;
}

}  // namespace tailor::runner
