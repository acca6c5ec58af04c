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
//  - tensors allocated before install(). Pinned memory throws in this
//    CPU-only LibTorch build, so it is never reached.
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

namespace tailor::runner {

class TrackingAllocator final : public c10::Allocator {
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

  // Byte budget on current_bytes(); 0 = unlimited (the default). Lowering it
  // below current_bytes() frees nothing: the next allocation is refused.
  void set_budget(std::int64_t bytes);
  std::int64_t budget() const;

  // Bytes of live allocations made through this allocator (requested sizes).
  std::int64_t current_bytes() const;
  // Highest current_bytes() since the last reset_peak() (or install()).
  std::int64_t peak_bytes() const;
  // Sets the peak to current_bytes(). An allocation racing with the reset on
  // another thread may be missed by the new peak.
  void reset_peak();
  // Successful allocations since install(), zero-byte ones included
  // (monotonic; refused allocations are not counted).
  std::int64_t allocation_count() const;

  // An allocation that was refused: the requested bytes, the bytes in use at
  // the time, and the budget then in force (0 when the budget was unlimited
  // and the wrapped allocator itself failed).
  struct Failure {
    std::int64_t requested = 0;
    std::int64_t in_use = 0;
    std::int64_t budget = 0;
  };
  // The allocation that was refused last, if any since install().
  std::optional<Failure> last_failure() const;
  // Forgets last_failure() (e.g. between the runs of a test).
  void clear_last_failure();

  // c10::Allocator. allocate() throws c10::OutOfMemoryError when the request
  // would take current_bytes() over the budget, or when the wrapped allocator
  // fails; the counters are then unchanged. A zero-byte request returns a
  // null DataPtr, as LibTorch's default allocator does.
  c10::DataPtr allocate(size_t n) const override;
  c10::DeleterFnPtr raw_deleter() const override;

 private:
  friend class PeakScope;

  explicit TrackingAllocator(c10::Allocator* base);

  static void delete_block(void* data);
  // Reserves n bytes against the budget or throws; returns current after it.
  std::int64_t reserve(std::int64_t n) const;
  [[noreturn]] void refuse(std::int64_t requested, std::int64_t in_use, std::int64_t limit,
                           const char* reason) const;
  void raise_peak(std::int64_t bytes) const;

  // The allocator that was installed before; must support the raw interface.
  c10::Allocator* base_;
  c10::DeleterFnPtr base_free_;

  // allocate() is const in c10::Allocator, so the counters are mutable.
  mutable std::atomic<std::int64_t> current_{0};
  mutable std::atomic<std::int64_t> peak_{0};
  mutable std::atomic<std::int64_t> count_{0};
  std::atomic<std::int64_t> budget_{0};
  mutable std::mutex failure_mutex_;  // guards last_failure_
  mutable std::optional<Failure> last_failure_;
};

// Measures the peak of a region relative to its start. Construction resets
// the allocator's peak to the current usage; destruction folds the peak seen
// before the scope back in, so the process-wide peak_bytes() (and an outer
// scope, once the inner one ends) still see the higher of the two. While an
// inner scope is alive, an outer one's peak_increase() only covers the time
// since the inner one began. Not for concurrent scopes on several threads:
// they share one peak.
class PeakScope {
 public:
  explicit PeakScope(TrackingAllocator& allocator);
  ~PeakScope();
  PeakScope(const PeakScope&) = delete;
  PeakScope& operator=(const PeakScope&) = delete;

  // peak_bytes() - current_bytes() at construction: the extra memory the region
  // needed at its highest point.
  std::int64_t peak_increase() const;
  // current_bytes() now - current_bytes() at construction (negative when the
  // region freed more than it kept).
  std::int64_t current_increase() const;
  std::int64_t start_bytes() const { return start_bytes_; }

 private:
  TrackingAllocator& allocator_;
  std::int64_t start_bytes_;
  std::int64_t peak_before_;
};

}  // namespace tailor::runner
