#include "runner/torch/nccl_group.h"

#if TAILOR_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif

#include <cstring>
#include <exception>

#include "runner/variant_choice.h"

namespace tailor::runner {

Segments segments_of(const dist::Communicator& comm, std::int64_t count, std::int64_t align) {
  Segments out;
  for (int r = 0; r < comm.world(); ++r) {
    const auto [b, e] = comm.segment_range(static_cast<std::size_t>(count), r, static_cast<std::size_t>(align));
    out.emplace_back(static_cast<std::int64_t>(b), static_cast<std::int64_t>(e));
  }
  return out;
}

#if TAILOR_CUDA

struct NcclGroup::Impl {
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> pg;
  int device = 0;
  bool failed = false;  // a collective failed: abort rather than shut down

  Status note(Status s) {
    if (!s.is_ok()) failed = true;
    return s;
  }
};

namespace {

Status failed(const char* what, const std::exception& e) {
  const auto* ce = dynamic_cast<const c10::Error*>(&e);
  return Status::unavailable(std::string("NCCL ") + what + ": " + (ce ? ce->what_without_backtrace() : e.what()));
}

Status check_tensor(const torch::Tensor& t, int device, const char* what) {
  if (!t.is_cuda() || t.get_device() != device || !t.is_contiguous()) {
    return Status::internal(std::string("NCCL ") + what + ": needs a contiguous tensor on cuda:" +
                            std::to_string(device) + ", got one on " + t.device().str());
  }
  return Status::ok();
}

// Runs `issue` (which queues collectives on `pg`) as one NCCL group when it
// queues several, and makes the current stream wait for the result.
template <typename Issue>
Status run_collective(c10d::ProcessGroupNCCL& pg, int device, const char* what, bool grouped, Issue&& issue) {
  try {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    if (grouped) {
      pg.startCoalescing();
      issue();
      auto work = pg.endCoalescing();
      if (work) work->wait();
    } else {
      auto work = issue();
      if (work) work->wait();
    }
    return Status::ok();
  } catch (const std::exception& e) {
    return failed(what, e);
  }
}

}  // namespace

NcclGroup::NcclGroup(int rank, int world, std::unique_ptr<Impl> impl)
    : rank_(rank), world_(world), impl_(std::move(impl)) {}

NcclGroup::~NcclGroup() {
  if (!impl_ || !impl_->pg) return;
  // A normal end (ProcessGroupNCCL warns of a leak otherwise); after a
  // failure, abort: a peer may be gone, and shutting down would wait for it.
  try {
    if (impl_->failed) {
      impl_->pg->abort();
    } else {
      impl_->pg->shutdown();
    }
  } catch (const std::exception&) {
    // Leaving anyway.
  }
}

Result<std::unique_ptr<NcclGroup>> NcclGroup::connect(dist::Communicator& comm, const std::string& master_addr,
                                                      int device, std::chrono::milliseconds timeout) {
  auto impl = std::make_unique<Impl>();
  impl->device = device;
  try {
    if (!torch::cuda::is_available()) return Status::unavailable("NCCL: no CUDA device");
    c10::intrusive_ptr<c10d::Store> store;
    std::int32_t port = 0;
    if (comm.rank() == 0) {
      c10d::TCPStoreOptions so;
      so.port = 0;  // a free one, announced over the ring
      so.isServer = true;
      so.numWorkers = static_cast<std::size_t>(comm.world());
      so.waitWorkers = false;
      so.timeout = timeout;
      auto server = c10::make_intrusive<c10d::TCPStore>(master_addr, so);
      port = server->getPort();
      store = server;
    }
    TAILOR_RETURN_IF_ERROR(comm.broadcast(&port, sizeof port, 0));
    if (comm.rank() != 0) {
      c10d::TCPStoreOptions so;
      so.port = static_cast<std::uint16_t>(port);
      so.isServer = false;
      so.timeout = timeout;
      store = c10::make_intrusive<c10d::TCPStore>(master_addr, so);
    }
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    impl->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, comm.rank(), comm.world(), options);
  } catch (const std::exception& e) {
    return failed("start", e);
  }
  std::unique_ptr<NcclGroup> group(new NcclGroup(comm.rank(), comm.world(), std::move(impl)));
  // NCCL connects lazily: the first collective, here, is where a GPU that
  // cannot join fails, before training starts.
  torch::Tensor probe = torch::ones({1}, torch::TensorOptions().device(torch::kCUDA, device));
  TAILOR_RETURN_IF_ERROR(group->all_reduce_sum(probe));
  if (probe.item<float>() != static_cast<float>(comm.world())) {
    return Status::internal("NCCL: the first all-reduce summed to " + std::to_string(probe.item<float>()) + " over " +
                            std::to_string(comm.world()) + " ranks");
  }
  return group;
}

Status NcclGroup::all_reduce_sum(const torch::Tensor& t) {
  TAILOR_RETURN_IF_ERROR(check_tensor(t, impl_->device, "all-reduce"));
  return impl_->note(run_collective(*impl_->pg, impl_->device, "all-reduce", false, [&] {
    std::vector<at::Tensor> v{t};
    return impl_->pg->allreduce(v, c10d::AllreduceOptions{});
  }));
}

Status NcclGroup::reduce_sum(const torch::Tensor& t, int root) {
  TAILOR_RETURN_IF_ERROR(check_tensor(t, impl_->device, "reduce"));
  return impl_->note(run_collective(*impl_->pg, impl_->device, "reduce", false, [&] {
    std::vector<at::Tensor> v{t};
    c10d::ReduceOptions o;
    o.rootRank = root;
    return impl_->pg->reduce(v, o);
  }));
}

Status NcclGroup::broadcast(const torch::Tensor& t, int root) {
  TAILOR_RETURN_IF_ERROR(check_tensor(t, impl_->device, "broadcast"));
  return impl_->note(run_collective(*impl_->pg, impl_->device, "broadcast", false, [&] {
    std::vector<at::Tensor> v{t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    return impl_->pg->broadcast(v, o);
  }));
}

// NCCL's own all-gather and reduce-scatter want equal parts; the parts here
// end on block boundaries (8-bit states), so each part is a broadcast or a
// reduce of its own, all in one NCCL group: the same bytes on the wire.
Status NcclGroup::all_gather(const torch::Tensor& flat, const Segments& segments) {
  TAILOR_RETURN_IF_ERROR(check_tensor(flat, impl_->device, "all-gather"));
  return impl_->note(run_collective(*impl_->pg, impl_->device, "all-gather", true, [&] {
    for (int r = 0; r < static_cast<int>(segments.size()); ++r) {
      const auto [b, e] = segments[static_cast<std::size_t>(r)];
      if (e <= b) continue;  // the same on every rank
      std::vector<at::Tensor> v{flat.narrow(0, b, e - b)};
      c10d::BroadcastOptions o;
      o.rootRank = r;
      impl_->pg->broadcast(v, o);
    }
    return c10::intrusive_ptr<c10d::Work>();
  }));
}

Status NcclGroup::reduce_scatter_sum(const torch::Tensor& flat, const Segments& segments) {
  TAILOR_RETURN_IF_ERROR(check_tensor(flat, impl_->device, "reduce-scatter"));
  return impl_->note(run_collective(*impl_->pg, impl_->device, "reduce-scatter", true, [&] {
    for (int r = 0; r < static_cast<int>(segments.size()); ++r) {
      const auto [b, e] = segments[static_cast<std::size_t>(r)];
      if (e <= b) continue;
      std::vector<at::Tensor> v{flat.narrow(0, b, e - b)};
      c10d::ReduceOptions o;
      o.rootRank = r;
      impl_->pg->reduce(v, o);
    }
    return c10::intrusive_ptr<c10d::Work>();
  }));
}

#else  // the CPU-only build: no NCCL

struct NcclGroup::Impl {};

NcclGroup::NcclGroup(int rank, int world, std::unique_ptr<Impl> impl)
    : rank_(rank), world_(world), impl_(std::move(impl)) {}
NcclGroup::~NcclGroup() = default;

Result<std::unique_ptr<NcclGroup>> NcclGroup::connect(dist::Communicator&, const std::string&, int,
                                                      std::chrono::milliseconds) {
  return Status::unavailable("NCCL: " + no_cuda_path_reason());
}

namespace {
Status no_nccl() { return Status::internal("NCCL: not in this build"); }
}  // namespace

Status NcclGroup::all_reduce_sum(const torch::Tensor&) { return no_nccl(); }
Status NcclGroup::reduce_sum(const torch::Tensor&, int) { return no_nccl(); }
Status NcclGroup::broadcast(const torch::Tensor&, int) { return no_nccl(); }
Status NcclGroup::all_gather(const torch::Tensor&, const Segments&) { return no_nccl(); }
Status NcclGroup::reduce_scatter_sum(const torch::Tensor&, const Segments&) { return no_nccl(); }

#endif

}  // namespace tailor::runner
