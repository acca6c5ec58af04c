#include "runner/torch/data_parallel.h"

#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <optional>

namespace tailor::runner {
namespace {

// Runs the communicator on a host copy when `t` lives on a GPU (the TCP
// collectives read host memory) and writes the result back.
template <typename Fn>
Status on_host(torch::Tensor& t, Fn&& fn) {
  if (t.is_cpu() && t.is_contiguous()) return fn(t);
  torch::Tensor host = t.to(torch::kCPU).contiguous();
  TAILOR_RETURN_IF_ERROR(fn(host));
  torch::NoGradGuard ng;
  t.copy_(host);
  return Status::ok();
}

// Whether NCCL sums `t` where it lies.
bool on_gpu(const NcclGroup* nccl, const torch::Tensor& t) { return nccl != nullptr && t.is_cuda(); }

// Sums a contiguous fp32 buffer over the ranks: NCCL on a GPU, else the ring.
Status sum_flat(dist::Communicator& comm, NcclGroup* nccl, const torch::Tensor& flat) {
  if (on_gpu(nccl, flat)) return nccl->all_reduce_sum(flat);
  return comm.all_reduce_sum(flat.data_ptr<float>(), static_cast<std::size_t>(flat.numel()));
}

}  // namespace

std::vector<int> partition_by_size(const std::vector<torch::Tensor>& tensors, int world) {
  // Largest first, each to the least-loaded rank (Graham's LPT rule: the
  // largest share exceeds the mean by at most one tensor, usually far less).
  std::vector<std::size_t> order(tensors.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return tensors[a].nbytes() > tensors[b].nbytes(); });
  std::vector<std::int64_t> load(static_cast<std::size_t>(std::max(1, world)), 0);
  std::vector<int> owner(tensors.size(), 0);
  for (std::size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end());
    *least += static_cast<std::int64_t>(tensors[i].nbytes());
    owner[i] = static_cast<int>(least - load.begin());
  }
  return owner;
}

Status all_reduce_gradients(dist::Communicator& comm, const std::vector<torch::Tensor>& params,
                            std::int64_t bucket_bytes, NcclGroup* nccl) {
  if (comm.world() == 1) return Status::ok();
  torch::NoGradGuard ng;
  const std::int64_t bucket_elems = std::max<std::int64_t>(1, bucket_bytes / 4);
  std::size_t i = 0;
  while (i < params.size()) {
    // fp32 gradients of at least a bucket are summed where they lie.
    const torch::Tensor& p = params[i];
    torch::Tensor g = p.grad();
    if (g.defined() && g.scalar_type() == torch::kFloat32 && (g.is_cpu() || on_gpu(nccl, g)) && g.is_contiguous() &&
        g.numel() >= bucket_elems) {
      TAILOR_RETURN_IF_ERROR(sum_flat(comm, nccl, g));
      ++i;
      continue;
    }
    // Otherwise a bucket: consecutive gradients packed into one fp32 buffer.
    std::size_t end = i;
    std::int64_t n = 0;
    while (end < params.size() && (end == i || n + params[end].numel() <= bucket_elems)) {
      n += params[end].numel();
      ++end;
    }
    const torch::Device where = on_gpu(nccl, params[i]) ? params[i].device() : torch::Device(torch::kCPU);
    torch::Tensor flat = torch::zeros({n}, torch::TensorOptions().dtype(torch::kFloat32).device(where));
    std::int64_t at = 0;
    for (std::size_t k = i; k < end; ++k) {
      const torch::Tensor& gk = params[k].grad();
      const std::int64_t len = params[k].numel();
      if (gk.defined()) flat.narrow(0, at, len).copy_(gk.reshape({-1}));
      at += len;
    }
    TAILOR_RETURN_IF_ERROR(sum_flat(comm, nccl, flat));
    at = 0;
    for (std::size_t k = i; k < end; ++k) {
      torch::Tensor pk = params[k];
      const std::int64_t len = pk.numel();
      torch::Tensor sum = flat.narrow(0, at, len).view(pk.sizes());
      if (pk.grad().defined()) {
        pk.mutable_grad().copy_(sum);
      } else {
        pk.mutable_grad() = sum.to(pk.device(), pk.scalar_type());
      }
      at += len;
    }
    i = end;
  }
  return Status::ok();
}


OverlappedAllReduce::OverlappedAllReduce(dist::Communicator& comm, std::vector<torch::Tensor> params,
                                         std::int64_t bucket_bytes, NcclGroup* nccl)
    : comm_(comm), nccl_(nccl), params_(std::move(params)), bucket_elements_(std::max<std::int64_t>(1, bucket_bytes / 4)) {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    torch::autograd::impl::set_post_acc_grad_hooks(params_[i], std::make_unique<GradientHook<OverlappedAllReduce>>(this, i));
  }
  thread_ = std::thread([this] { run(); });
}

OverlappedAllReduce::~OverlappedAllReduce() {
  for (const torch::Tensor& p : params_) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    if (busy_ || !queue_.empty()) comm_.abort();  // a bucket's peers may never come
  }
  cv_.notify_all();
  thread_.join();
}

void OverlappedAllReduce::arm() {
  armed_ = true;
  current_.clear();
  current_elements_ = 0;
  seen_.assign(params_.size(), 0);
}

void OverlappedAllReduce::on_gradient(std::size_t i) {
  if (!armed_) return;  // an earlier micro-batch: gradients accumulate locally
  // A tensor whose gradient arrives in two parts (used inside and outside a
  // recomputed layer) would be summed before it is complete: refuse loudly.
  if (seen_[i]++) {
    if (twice_.empty()) {
      std::string shape;
      for (std::int64_t d : params_[i].sizes()) shape += (shape.empty() ? "" : "x") + std::to_string(d);
      twice_ = "tensor " + std::to_string(i) + " (" + shape + ") received its gradient twice in one backward";
    }
    return;
  }
  current_.push_back(i);
  current_elements_ += params_[i].numel();
  if (current_elements_ >= bucket_elements_) enqueue();
}

void OverlappedAllReduce::enqueue() {
  if (current_.empty()) return;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(current_));
  }
  cv_.notify_all();
  current_.clear();
  current_elements_ = 0;
}

Status OverlappedAllReduce::finish() {
  enqueue();
  armed_ = false;
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  if (!twice_.empty()) return Status::internal("overlapped all-reduce: " + twice_);
  return error_;
}

void OverlappedAllReduce::run() {
  for (;;) {
    std::vector<std::size_t> bucket;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      bucket = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    Status s = error_.is_ok() ? reduce(bucket) : Status::ok();  // after an error the rest are dropped
    {
      std::lock_guard lock(mu_);
      if (!s.is_ok() && error_.is_ok()) error_ = s;
      busy_ = false;
    }
    cv_.notify_all();
  }
}

Status OverlappedAllReduce::reduce(const std::vector<std::size_t>& bucket) {
  try {
    torch::NoGradGuard ng;
    // Gradients backward has finished are not written again this step.
    const torch::Tensor& first = params_[bucket[0]];
    // This thread's CUDA calls go to the gradients' GPU.
    std::optional<c10::DeviceGuard> device;
    if (first.is_cuda()) device.emplace(first.device());
    if (bucket.size() == 1) {
      torch::Tensor g = first.grad();
      if (g.scalar_type() == torch::kFloat32 && (g.is_cpu() || on_gpu(nccl_, g)) && g.is_contiguous()) {
        return sum_flat(comm_, nccl_, g);
      }
    }
    std::int64_t n = 0;
    for (std::size_t i : bucket) n += params_[i].numel();
    const torch::Device where = on_gpu(nccl_, first) ? first.device() : torch::Device(torch::kCPU);
    torch::Tensor flat = torch::empty({n}, torch::TensorOptions().dtype(torch::kFloat32).device(where));
    std::int64_t at = 0;
    for (std::size_t i : bucket) {
      const std::int64_t len = params_[i].numel();
      flat.narrow(0, at, len).copy_(params_[i].grad().reshape({-1}));
      at += len;
    }
    TAILOR_RETURN_IF_ERROR(sum_flat(comm_, nccl_, flat));
    at = 0;
    for (std::size_t i : bucket) {
      const std::int64_t len = params_[i].numel();
      params_[i].mutable_grad().copy_(flat.narrow(0, at, len).view(params_[i].sizes()));
      at += len;
    }
    return Status::ok();
  } catch (const std::exception& e) {
    return Status::internal(std::string("gradient all-reduce: ") + e.what());
  }
}

Status all_reduce_values(dist::Communicator& comm, std::vector<double>& values) {
  return comm.all_reduce_sum(values.data(), values.size());
}

Status broadcast_from_owners(dist::Communicator& comm, const std::vector<torch::Tensor>& tensors,
                             const std::vector<int>& owner, NcclGroup* nccl) {
  if (comm.world() == 1) return Status::ok();
  torch::NoGradGuard ng;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    torch::Tensor t = tensors[i];
    if (on_gpu(nccl, t) && t.is_contiguous()) {
      TAILOR_RETURN_IF_ERROR(nccl->broadcast(t, owner[i]));
      continue;
    }
    TAILOR_RETURN_IF_ERROR(on_host(t, [&](torch::Tensor& h) {
      return comm.broadcast(h.data_ptr(), h.nbytes(), owner[i]);
    }));
  }
  return Status::ok();
}

namespace {

constexpr int kMaxDims = 8;


void throw_if_error(const Status& s) {
  if (!s.is_ok()) throw std::runtime_error(s.message());
}

}  // namespace

GradientSharder::GradientSharder(dist::Communicator& comm, std::vector<torch::Tensor> params, std::vector<int> owner,
                                 bool during_backward, NcclGroup* nccl)
    : comm_(comm), nccl_(nccl), params_(std::move(params)), owner_(std::move(owner)), hooked_(during_backward) {
  if (!hooked_) return;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    torch::autograd::impl::set_post_acc_grad_hooks(params_[i], std::make_unique<GradientHook<GradientSharder>>(this, i));
  }
}

GradientSharder::~GradientSharder() {
  if (!hooked_) return;
  for (const torch::Tensor& p : params_) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

void GradientSharder::begin_backward() { seen_.assign(params_.size(), 0); }

Status GradientSharder::check() const {
  if (twice_.empty()) return Status::ok();
  return Status::internal("ZeRO-2: " + twice_);
}

Status GradientSharder::reduce_all() {
  try {
    for (std::size_t i = 0; i < params_.size(); ++i) on_gradient(i);
  } catch (const std::exception& e) {
    return Status::unavailable(e.what());
  }
  return Status::ok();
}

void GradientSharder::on_gradient(std::size_t i) {
  if (hooked_ && !seen_.empty() && seen_[i]++) {
    if (twice_.empty()) twice_ = "tensor " + std::to_string(i) + " received its gradient twice in one backward";
    return;
  }
  torch::NoGradGuard ng;
  torch::Tensor p = params_[i];
  const int owner = owner_[i];
  torch::Tensor g = p.grad();
  if (!g.defined()) return;  // the same on every rank: no rank used it
  if (on_gpu(nccl_, g)) {
    // One NCCL reduce onto the owner, in fp32.
    const bool half = g.scalar_type() != torch::kFloat32 || !g.is_contiguous();
    torch::Tensor sum = half ? g.to(torch::kFloat32).contiguous() : g;
    throw_if_error(nccl_->reduce_sum(sum, owner));
    if (comm_.rank() != owner) {
      p.mutable_grad() = torch::Tensor();
    } else if (half) {
      g.copy_(sum);
    }
    return;
  }
  if (comm_.rank() != owner) {
    const torch::Tensor host = g.to(torch::kCPU).contiguous();
    throw_if_error(comm_.send(owner, host.data_ptr(), host.nbytes()));
    p.mutable_grad() = torch::Tensor();
    return;
  }
  // The owner adds every other rank's gradient to its own, in rank order
  // (the same sum on every run); 16-bit gradients are summed in fp32.
  const bool half = g.scalar_type() != torch::kFloat32;
  torch::Tensor sum = half ? g.to(torch::kFloat32) : g;
  torch::Tensor in = torch::empty(g.sizes(), g.options().device(torch::kCPU));
  for (int r = 0; r < comm_.world(); ++r) {
    if (r == owner) continue;
    throw_if_error(comm_.recv(r, in.data_ptr(), in.nbytes()));
    sum.add_(in.to(sum.device(), sum.scalar_type()));
  }
  if (half) g.copy_(sum);
}

Status send_tensor(dist::Communicator& comm, int peer, const torch::Tensor& t) {
  std::int64_t header[2 + kMaxDims] = {};
  header[0] = t.defined() ? t.dim() : -1;
  if (t.defined()) {
    if (t.dim() > kMaxDims) return Status::internal("send_tensor: more than 8 dimensions");
    header[1] = static_cast<std::int64_t>(t.scalar_type());
    for (std::int64_t d = 0; d < t.dim(); ++d) header[2 + d] = t.size(d);
  }
  TAILOR_RETURN_IF_ERROR(comm.send(peer, header, sizeof header));
  if (!t.defined()) return Status::ok();
  const torch::Tensor host = t.to(torch::kCPU).contiguous();
  return comm.send(peer, host.data_ptr(), host.nbytes());
}

Result<torch::Tensor> recv_tensor(dist::Communicator& comm, int peer) {
  std::int64_t header[2 + kMaxDims] = {};
  TAILOR_RETURN_IF_ERROR(comm.recv(peer, header, sizeof header));
  if (header[0] < 0) return torch::Tensor();
  if (header[0] > kMaxDims) return Status::internal("recv_tensor: a malformed header from rank " + std::to_string(peer));
  std::vector<std::int64_t> sizes(header + 2, header + 2 + header[0]);
  torch::Tensor t = torch::empty(sizes, torch::TensorOptions().dtype(static_cast<torch::ScalarType>(header[1])));
  TAILOR_RETURN_IF_ERROR(comm.recv(peer, t.data_ptr(), t.nbytes()));
  return t;
}

}  // namespace tailor::runner
