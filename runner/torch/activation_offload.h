// Activation offloading (strategies::Strategy::activation_offload): each
// checkpointed layer's saved input leaves the device in forward and comes
// back a layer ahead of its backward, so the device holds two of them at a
// time instead of one per checkpointed layer.
//
// On a GPU the copies run on a side stream into pinned host buffers
// (counted in the tracking allocator's host ledger): out after what the
// compute stream has queued, the input's device memory kept from reuse
// until its copy is done; back while the layer before it back-propagates,
// the compute stream waiting for it only when it needs it. On the CPU the
// same copies are made at the same moments, synchronously, the host's in
// the host ledger: the device ledger moves as a GPU's memory does.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>

namespace tailor::runner {

class ActivationOffloader {
 public:
  ActivationOffloader();
  ~ActivationOffloader();
  ActivationOffloader(const ActivationOffloader&) = delete;
  ActivationOffloader& operator=(const ActivationOffloader&) = delete;

  // A training forward begins: whatever an earlier one left (a backward
  // that never ran) is dropped. Returns the pass' number, which restore()
  // checks.
  std::int64_t begin_forward();
  // Forward: `x`, the input layer `layer` keeps for its recomputation, to
  // host memory. The caller keeps no reference to x beyond the layer.
  void offload(std::int64_t layer, const torch::Tensor& x);
  // Backward: layer `layer`'s input on `device`, brought back ahead or
  // copied now; then starts bringing back `next`, the checkpointed layer
  // whose backward comes after this one (-1: none). Throws when the pass
  // `pass` is not the one whose inputs are held (a backward of an older
  // forward).
  torch::Tensor restore(std::int64_t pass, std::int64_t layer, std::int64_t next, const torch::Device& device);

 private:
  struct Slot;
  struct Streams;  // the side stream and the copies' events (CUDA builds)

  void prefetch(std::int64_t layer, const torch::Device& device);

  std::int64_t pass_ = 0;
  std::map<std::int64_t, std::shared_ptr<Slot>> slots_;
  std::unique_ptr<Streams> streams_;
};

}  // namespace tailor::runner
