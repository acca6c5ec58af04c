// TrackingAllocator: the CPU allocator of every LibTorch tensor in the runner.
// It counts bytes, keeps current and peak usage, and enforces a byte budget by
// throwing c10::OutOfMemoryError, so CPU runs fail exactly like a GPU OOM.
//
// How it works. install() wraps the CPU allocator that was installed before
// (LibTorch's DefaultCPUAllocator) through its raw interface. Each block gets a
// 64-byte header in front of the returned pointer (the pointer stays 64-byte
// aligned, as LibTorch's kernels expect) holding the requested size, so the
// DataPtr's data pointer equals its context: Allocator::raw_allocate() asserts
// that, and oneDNN allocates through it. Blocks are freed by a static deleter
// that reads the header; blocks allocated before install() keep their own
// deleter and are never counted.
//
// What is counted: the requested size of every allocation made through
// c10::GetCPUAllocator() after install(): tensor storages (torch::empty,
// results of ops, autograd buffers and gradients, optimizer states, resize_),
// and oneDNN's scratch and reordered-weight buffers (they use raw_allocate).
// The 64-byte headers are not counted: the figures are what LibTorch asked
// for, which is what a GPU caching allocator would be asked for.
//
// What is not counted (so real RSS is higher than current_bytes()):
//  - OpenBLAS's internal buffer (a 128 MiB reservation of which a few MiB are
//    touched) and its per-thread state;
//  - oneDNN's JIT kernel code and its own small internal allocations;
//  - std containers and malloc calls inside kernels, Gloo's small internal
//    buffers, the autograd graph's nodes and saved-variable metadata (only the
//    tensor data behind them is counted);
//  - memory wrapped with torch::from_blob, shared-memory and file-mapped
//    storages (MapAllocator), and anything allocated through
//    c10::GetDefaultCPUAllocator() directly;
//  - tensors allocated before install();
//  - CUDA's pinned host memory, which has an allocator of its own, except
//    where count_as_host() wraps it (the runner's offloaded buffers:
//    host_tensor.h).
//
// Two ledgers. What is allocated inside a HostLedgerScope (on that thread)
// is host memory standing in for a GPU job's pinned host buffers (offloaded
// optimizer states and master weights): it is counted apart (host_bytes(),
// host_peak_bytes()) and not against the budget, which stands for the
// device's memory. Everything else is the device ledger: current_bytes(),
// peak_bytes() and the budget.
//
// Thread safety: all members are safe to call from any thread. Counters are
// process-wide: they include allocations from every thread (OpenMP workers,
// data loaders), not only the caller's.
#pragma once

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "runner/torch/memory_meter.h"

namespace tailor::runner {

// While alive, this thread's CPU allocations go to the host ledger.
class HostLedgerScope {
 public:
  HostLedgerScope();
  ~HostLedgerScope();
  HostLedgerScope(const HostLedgerScope&) = delete;
  HostLedgerScope& operator=(const HostLedgerScope&) = delete;

 private:
  bool previous_;
};

class TrackingAllocator final : public c10::Allocator, public MemoryMeter {
 public:
  // Priority passed to c10::SetCPUAllocator: above the default allocator's 0
  // so this one wins, below the maximum so a test harness can still override.
  static constexpr std::uint8_t kPriority = 100;
  // Bytes in front of each block (the size header); also the alignment of the
  // returned pointers (c10::gAlignment).
  static constexpr std::size_t kHeaderBytes = 64;

  // Installs the allocator for all CPU tensors, wrapping the allocator that was
  // installed before. Idempotent; returns the process-wide instance, which
  // lives until the process exits. Thread-safe, but install it before the
  // first tensor operation: only allocations made after install() are counted.
  static TrackingAllocator& install();

  TrackingAllocator(const TrackingAllocator&) = delete;
  TrackingAllocator& operator=(const TrackingAllocator&) = delete;

  std::string device_name() const override { return "cpu"; }

  // Byte budget on current_bytes(); 0 = unlimited (the default). Lowering it
  // below current_bytes() frees nothing: the next allocation is refused.
  void set_budget(std::int64_t bytes) override;
  std::int64_t budget() const override;

  // Bytes of live allocations made through this allocator (requested sizes).
  std::int64_t current_bytes() const override;
  // Highest current_bytes() since the last reset_peak() (or install()).
  std::int64_t peak_bytes() const override;
  // The host ledger (HostLedgerScope) and its highest value since
  // reset_peak().
  std::int64_t host_bytes() const;
  std::int64_t host_peak_bytes() const;
  // Sets the peak to current_bytes(). An allocation racing with the reset on
  // another thread may be missed by the new peak.
  void reset_peak() override;
  void raise_peak(std::int64_t bytes) override { bump_peak(bytes); }
  // Successful allocations since install(), zero-byte ones included
  // (monotonic; refused allocations are not counted).
  std::int64_t allocation_count() const;

  // The allocation that was refused last, if any since install(): the
  // requested bytes, the bytes in use at the time, and the budget then in
  // force (0 when the budget was unlimited and the wrapped allocator itself
  // failed).
  std::optional<Failure> last_failure() const;
  std::optional<Failure> last_failure(const std::string&) const override { return last_failure(); }
  // Forgets last_failure() (e.g. between the runs of a test).
  void clear_last_failure();

  // `data` (memory of another allocator: CUDA's pinned host memory),
  // counted in the host ledger as `bytes` until the returned DataPtr frees
  // it.
  c10::DataPtr count_as_host(c10::DataPtr data, std::size_t bytes);

  // c10::Allocator. allocate() throws c10::OutOfMemoryError when the request
  // would take current_bytes() over the budget, or when the wrapped allocator
  // fails; the counters are then unchanged. A zero-byte request returns a
  // null DataPtr, as LibTorch's default allocator does.
  c10::DataPtr allocate(size_t n) override;
  c10::DeleterFnPtr raw_deleter() const override;
  // Allocator::clone() copies through this: a plain memcpy, as the wrapped
  // CPU allocator does.
  void copy_data(void* dest, const void* src, std::size_t count) const override;

 private:
  explicit TrackingAllocator(c10::Allocator* base);

  static void delete_block(void* data);
  static void delete_counted_host(void* context);
  // Reserves n bytes against the budget or throws; returns current after it.
  std::int64_t reserve(std::int64_t n);
  [[noreturn]] void refuse(std::int64_t requested, std::int64_t in_use, std::int64_t limit,
                           const char* reason);
  void bump_peak(std::int64_t bytes);

  // The allocator that was installed before; must support the raw interface.
  c10::Allocator* base_;
  c10::DeleterFnPtr base_free_;

  std::atomic<std::int64_t> current_{0};
  std::atomic<std::int64_t> peak_{0};
  std::atomic<std::int64_t> host_current_{0};
  std::atomic<std::int64_t> host_peak_{0};
  std::atomic<std::int64_t> count_{0};
  std::atomic<std::int64_t> budget_{0};
  mutable std::mutex failure_mutex_;  // guards last_failure_
  std::optional<Failure> last_failure_;
};

}  // namespace tailor::runner
