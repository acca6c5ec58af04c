#include "runner/torch/zero3.h"

#include <c10/core/DeviceGuard.h>

#include <cstring>
#include <optional>
#include <stdexcept>
#include <unordered_set>

#include "runner/torch/data_parallel.h"
#include "runner/torch/host_tensor.h"
#include "runner/torch/tracking_allocator.h"

namespace tailor::runner {
namespace {

c10::StorageImpl* storage_of(const torch::Tensor& t) { return t.storage().unsafeGetStorageImpl(); }

// Frees the bytes; shape, dtype and the autograd identity stay.
void empty_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = storage_of(t);
  s->set_data_ptr_noswap(c10::DataPtr(nullptr, t.device()));
  s->set_nbytes(0);
}

void allocate_storage(const torch::Tensor& t, std::int64_t bytes) {
  c10::StorageImpl* s = storage_of(t);
  c10::DeviceGuard guard(t.device());
  c10::Allocator* a = s->allocator() != nullptr ? s->allocator() : c10::GetAllocator(t.device().type());
  s->set_data_ptr_noswap(a->allocate(static_cast<std::size_t>(bytes)));
  s->set_nbytes(static_cast<std::size_t>(bytes));
}

// An alias of t's bytes with a version counter of its own, so that writing
// through it does not mark t as modified for the autograd graphs saving it.
torch::Tensor alias_of(const torch::Tensor& t) {
  return torch::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options());
}

void throw_if_error(const Status& s) {
  if (!s.is_ok()) throw std::runtime_error("ZeRO-3: " + s.message());
}

}  // namespace

ParameterSharder::ParameterSharder(dist::Communicator& comm, const std::vector<std::vector<torch::Tensor>>& units,
                                   const std::function<std::int64_t(const torch::Tensor&)>& alignment,
                                   bool host_parts, NcclGroup* nccl)
    : comm_(comm),
      nccl_(nccl),
      host_parts_(host_parts),
      units_(units.size()),
      state_(units.size(), Unit::kReleased),
      ready_(units.size(), 0),
      worker_(std::make_unique<dist::SerialWorker>([&comm] { comm.abort(); })) {
  torch::NoGradGuard ng;
  std::optional<HostLedgerScope> host;
  if (host_parts_) host.emplace();
  for (std::size_t u = 0; u < units.size(); ++u) {
    for (const torch::Tensor& t : units[u]) {
      if (!t.defined() || t.numel() == 0) continue;
      auto [it, added] = by_storage_.emplace(storage_of(t), slots_.size());
      if (added) {
        Slot s;
        s.whole = t;
        s.numel = t.numel();
        s.bytes = static_cast<std::int64_t>(t.nbytes());
        s.align = std::max<std::int64_t>(1, alignment(t));
        const auto [b, e] =
            comm_.segment_range(static_cast<std::size_t>(s.numel), comm_.rank(), static_cast<std::size_t>(s.align));
        s.begin = static_cast<std::int64_t>(b);
        s.end = static_cast<std::int64_t>(e);
        s.shard = part_like(t.detach().reshape({-1}).narrow(0, s.begin, s.end - s.begin));
        if (t.requires_grad()) {
          s.shard.set_requires_grad(true);
          torch::autograd::impl::set_post_acc_grad_hooks(
              t, std::make_unique<GradientHook<ParameterSharder>>(this, slots_.size()));
        }
        slots_.push_back(std::move(s));
      }
      units_[u].push_back(it->second);
    }
  }
}

ParameterSharder::~ParameterSharder() {
  worker_.reset();  // before the tensors its jobs write go
  for (const Slot& s : slots_) {
    if (s.whole.requires_grad()) torch::autograd::impl::set_post_acc_grad_hooks(s.whole, nullptr);
  }
}

torch::Tensor ParameterSharder::part_like(const torch::Tensor& t) const {
  if (!host_parts_) return t.clone();
  // Pinned where a GPU copies from it (page-locked: DMA without staging);
  // on the CPU, where host and device memory are one, the ledger tells them
  // apart.
  return host_copy(t);
}

const ParameterSharder::Slot& ParameterSharder::slot_of(const torch::Tensor& t) const {
  const auto it = by_storage_.find(storage_of(t));
  if (it == by_storage_.end()) throw std::logic_error("ZeRO-3: a tensor outside the sharded model");
  return slots_[it->second];
}

torch::Tensor ParameterSharder::shard_of(const torch::Tensor& t) const { return slot_of(t).shard; }

void ParameterSharder::shard() {
  torch::NoGradGuard ng;
  for (Slot& s : slots_) {
    if (s.refs > 0 || storage_of(s.whole)->nbytes() == 0) continue;
    s.shard.copy_(s.whole.reshape({-1}).narrow(0, s.begin, s.end - s.begin));
    empty_storage(s.whole);
  }
}

void ParameterSharder::start_fill(Slot& s) {
  const auto e = static_cast<std::size_t>(s.whole.element_size());
  allocate_storage(s.whole, s.bytes);
  torch::NoGradGuard ng;
  const auto count = static_cast<std::size_t>(s.numel), align = static_cast<std::size_t>(s.align);
  void* into = nullptr;
  if (s.whole.is_cpu()) {
    char* base = static_cast<char*>(storage_of(s.whole)->mutable_data());
    std::memcpy(base + static_cast<std::size_t>(s.begin) * e, s.shard.data_ptr(),
                static_cast<std::size_t>(s.end - s.begin) * e);
    into = base;
  } else if (nccl_ != nullptr || comm_.world() == 1) {
    // NCCL gathers on the GPU, straight into the storage; a rank alone
    // (parameter offload on one GPU) only copies its part up.
    torch::Tensor flat = torch::from_blob(storage_of(s.whole)->mutable_data(), {s.numel}, s.whole.options());
    flat.narrow(0, s.begin, s.end - s.begin).copy_(s.shard);
    if (comm_.world() > 1) {
      worker_->submit([this, flat, segments = segments_of(comm_, s.numel, s.align)] {
        return nccl_->all_gather(flat, segments);
      });
    }
    return;
  } else {
    // The collectives read host memory: a GPU tensor is gathered there
    // and copied up when its unit completes.
    s.staging = torch::empty({s.numel}, s.whole.options().device(torch::kCPU));
    s.staging.narrow(0, s.begin, s.end - s.begin).copy_(s.shard);
    into = s.staging.data_ptr();
  }
  worker_->submit([this, into, count, e, align] { return comm_.all_gather(into, count, e, align); });
}

void ParameterSharder::issue(std::size_t unit) {
  if (state_[unit] != Unit::kReleased) return;
  state_[unit] = Unit::kIssued;
  for (std::size_t i : units_[unit]) {
    if (slots_[i].refs++ == 0) start_fill(slots_[i]);
  }
  // A tensor shared with a unit issued earlier is complete with it: the
  // queue runs in order.
  ready_[unit] = worker_->last();
}

void ParameterSharder::complete(std::size_t unit) {
  if (state_[unit] != Unit::kIssued) return;
  throw_if_error(worker_->wait(ready_[unit]));
  torch::NoGradGuard ng;
  for (std::size_t i : units_[unit]) {
    Slot& s = slots_[i];
    if (!s.staging.defined()) continue;
    alias_of(s.whole).copy_(s.staging.view(s.whole.sizes()));
    s.staging = torch::Tensor();
  }
  state_[unit] = Unit::kGathered;
}

void ParameterSharder::gather(std::size_t unit) {
  issue(unit);
  complete(unit);
}

void ParameterSharder::release(std::size_t unit) {
  if (state_[unit] == Unit::kReleased) return;
  complete(unit);
  state_[unit] = Unit::kReleased;
  for (std::size_t i : units_[unit]) {
    if (--slots_[i].refs == 0) empty_storage(slots_[i].whole);
  }
}

void ParameterSharder::before_unit(std::size_t unit, const torch::Tensor& input) {
  gather(unit);
  if (!torch::GradMode::is_enabled()) return;
  // The next unit arrives while this one computes.
  if (unit + 1 < units_.size()) issue(unit + 1);
  // The hook on the unit's input fires when that gradient is complete,
  // i.e. once the unit's backward is done: the unit is emptied and the one
  // below it, whose backward comes next, completed.
  if (input.defined() && input.requires_grad()) {
    input.register_hook([this, unit](const torch::Tensor&) { on_input_gradient(unit); });
  }
}

void ParameterSharder::after_unit(std::size_t unit) {
  // The last block's backward comes first, right after the head's: it
  // stays gathered rather than being sent again.
  if (torch::GradMode::is_enabled() && unit + 2 == units_.size()) return;
  release(unit);
}

void ParameterSharder::on_input_gradient(std::size_t unit) {
  release(unit);
  // Unit 0 (the embeddings) needs only the token ids in backward.
  if (unit < 2) return;
  gather(unit - 1);
  if (unit >= 3) issue(unit - 2);
}

Status ParameterSharder::end_backward() {
  Status s = worker_->drain();
  last_reduce_ = 0;
  // Nothing is in flight: releasing waits for nothing.
  for (std::size_t u = 0; u < units_.size(); ++u) {
    if (state_[u] == Unit::kIssued) state_[u] = Unit::kGathered;
    release(u);
  }
  return s.is_ok() ? s : Status(s.code(), "ZeRO-3: " + s.message());
}

void ParameterSharder::on_gradient(std::size_t i) {
  Slot& s = slots_[i];
  torch::NoGradGuard ng;
  torch::Tensor g = s.whole.grad();
  if (!g.defined()) return;  // the same on every rank: nothing used it
  // One gradient in flight: the one before is sent before this one is
  // staged (so two whole gradients at most are alive).
  if (last_reduce_ != 0) throw_if_error(worker_->wait(last_reduce_));
  // Summed in fp32 (16-bit gradients rounded once, into the part): by NCCL
  // where it lies, or over the ring in host memory. A rank alone sums
  // nothing: its gradient goes to the part as it is.
  const bool alone = comm_.world() == 1;
  const torch::Device at = nccl_ != nullptr || alone ? g.device() : torch::Device(torch::kCPU);
  torch::Tensor sum = g.device() == at && (alone || g.scalar_type() == torch::kFloat32) && g.is_contiguous()
                          ? g
                          : g.to(at, torch::kFloat32).contiguous();
  s.whole.mutable_grad() = torch::Tensor();
  g = torch::Tensor();
  last_reduce_ = worker_->submit([this, i, sum] { return reduce_part(i, sum); });
}

Status ParameterSharder::reduce_part(std::size_t i, const torch::Tensor& sum) {
  Slot& s = slots_[i];
  if (comm_.world() == 1) {
    // Nothing to sum.
  } else if (sum.is_cpu()) {
    TAILOR_RETURN_IF_ERROR(comm_.reduce_scatter_sum(sum.data_ptr<float>(), static_cast<std::size_t>(s.numel),
                                                    static_cast<std::size_t>(s.align)));
  } else {
    TAILOR_RETURN_IF_ERROR(nccl_->reduce_scatter_sum(sum.view({-1}), segments_of(comm_, s.numel, s.align)));
  }
  torch::NoGradGuard ng;
  // This thread's allocations: the part's gradient beside the part.
  std::optional<HostLedgerScope> host;
  if (host_parts_) host.emplace();
  std::optional<c10::DeviceGuard> device;
  if (!s.shard.is_cpu()) device.emplace(s.shard.device());
  torch::Tensor part = sum.view({-1}).narrow(0, s.begin, s.end - s.begin).to(s.shard.device(), s.shard.scalar_type());
  if (part.is_alias_of(sum)) part = part.clone();  // not the whole gradient's storage
  torch::Tensor& acc = s.shard.mutable_grad();
  if (acc.defined()) {
    acc.add_(part);
  } else {
    acc = part;
  }
  return Status::ok();
}

Status ParameterSharder::gather_to(int root, const std::vector<torch::Tensor>& only, bool to_host) {
  TAILOR_RETURN_IF_ERROR(worker_->drain());  // the communicator is this thread's from here
  std::unordered_set<const void*> wanted;
  for (const torch::Tensor& t : only) wanted.insert(storage_of(t));
  try {
    torch::NoGradGuard ng;
    for (Slot& s : slots_) {
      if (!wanted.empty() && wanted.count(storage_of(s.whole)) == 0) continue;
      if (s.refs > 0) {  // whole on every rank already
        if (to_host && comm_.rank() == root && !s.whole.is_cpu()) s.whole.set_data(s.whole.detach().to(torch::kCPU));
        continue;
      }
      const auto e = static_cast<std::size_t>(s.whole.element_size());
      if (comm_.rank() != root) {
        const torch::Tensor part = s.shard.detach().to(torch::kCPU).contiguous();
        TAILOR_RETURN_IF_ERROR(comm_.send(root, part.data_ptr(), part.nbytes()));
        continue;
      }
      torch::Tensor host = torch::empty({s.numel}, s.whole.options().device(torch::kCPU));
      host.narrow(0, s.begin, s.end - s.begin).copy_(s.shard);
      for (int r = 0; r < comm_.world(); ++r) {
        if (r == root) continue;
        const auto [b, end] =
            comm_.segment_range(static_cast<std::size_t>(s.numel), r, static_cast<std::size_t>(s.align));
        TAILOR_RETURN_IF_ERROR(comm_.recv(r, static_cast<char*>(host.data_ptr()) + b * e, (end - b) * e));
      }
      if (to_host) {
        s.whole.set_data(host.view(s.whole.sizes()));
      } else {
        allocate_storage(s.whole, s.bytes);
        alias_of(s.whole).copy_(host.view(s.whole.sizes()));
      }
    }
  } catch (const std::exception& e) {
    return Status::internal(std::string("ZeRO-3 gather: ") + e.what());
  }
  return Status::ok();
}

std::optional<ShardPiece> ParameterSharder::piece_of(const torch::Tensor& t, std::string name) const {
  const auto it = by_storage_.find(storage_of(t));
  if (it == by_storage_.end()) return std::nullopt;
  const Slot& s = slots_[it->second];
  return ShardPiece{std::move(name), s.whole.sizes().vec(), s.begin, s.shard};
}

std::vector<ShardPiece> ParameterSharder::state_pieces(const std::vector<torch::Tensor>& trainable,
                                                       const std::vector<torch::Tensor>& local, std::size_t per) const {
  std::vector<ShardPiece> out;
  for (std::size_t i = 0; i < trainable.size(); ++i) {
    const Slot& s = slot_of(trainable[i]);
    for (std::size_t k = 0; k < per; ++k) {
      const torch::Tensor& mine = local[i * per + k];
      // No such state for this tensor (on any rank), or no part of it here.
      if (!mine.defined() || mine.numel() == 0) continue;
      ShardPiece p{"optimizer." + std::to_string(i * per + k), s.whole.sizes().vec(), s.begin, mine};
      // adamw_8bit's slots: master, m and v codes (flat), m and v block
      // scales (this rank's blocks of the whole tensor's).
      if (s.align > 1 && (k == 1 || k == 2)) p.shape = {s.numel};
      if (s.align > 1 && k >= 3) {
        p.shape = {(s.numel + s.align - 1) / s.align};
        p.begin = s.begin / s.align;
      }
      out.push_back(std::move(p));
    }
  }
  return out;
}

std::vector<torch::Tensor> ParameterSharder::shard_states(const std::vector<torch::Tensor>& trainable,
                                                          const std::vector<torch::Tensor>& whole,
                                                          std::size_t per) const {
  std::vector<torch::Tensor> out;
  for (std::size_t i = 0; i < trainable.size(); ++i) {
    const Slot& s = slot_of(trainable[i]);
    for (std::size_t k = 0; k < per && i * per + k < whole.size(); ++k) {
      const torch::Tensor& w = whole[i * per + k];
      if (!w.defined()) {
        out.emplace_back();
      } else if (w.numel() == s.numel) {
        out.push_back(w.reshape({-1}).narrow(0, s.begin, s.end - s.begin).clone());
      } else {  // block scales: the blocks of this rank's elements
        const std::int64_t b0 = s.begin / s.align;
        const std::int64_t b1 = s.end == s.begin ? b0 : (s.end + s.align - 1) / s.align;
        out.push_back(w.narrow(0, std::min(b0, w.numel()),
                               std::max<std::int64_t>(0, std::min(b1, w.numel()) - std::min(b0, w.numel())))
                          .clone());
      }
    }
  }
  return out;
}

ParameterSharder::Owned ParameterSharder::owned_bytes(
    const std::function<bool(const torch::Tensor&)>& is_adapter) const {
  Owned o;
  for (const Slot& s : slots_) {
    (is_adapter(s.whole) ? o.adapter : o.other) += static_cast<std::int64_t>(s.shard.nbytes());
    if (s.shard.grad().defined()) o.gradients += static_cast<std::int64_t>(s.shard.grad().nbytes());
  }
  return o;
}

}  // namespace tailor::runner
