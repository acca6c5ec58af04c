// TrackingAllocator: a counting, budget-enforcing wrapper around LibTorch's
// CPU allocator. It does no caching or pooling of its own.
#include "runner/torch/tracking_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "core/check.h"
#include "core/units.h"

namespace tailor::runner {
namespace {

// Written in front of every block. The magic tells our blocks from foreign
// ones in delete_block (see there).
struct BlockHeader {
  std::uint64_t magic;
  std::int64_t bytes;
  std::int64_t host;  // 1: the host ledger
};
static_assert(sizeof(BlockHeader) <= TrackingAllocator::kHeaderBytes);
static_assert(TrackingAllocator::kHeaderBytes % c10::gAlignment == 0,
              "the header must keep the wrapped allocator's alignment");

constexpr std::uint64_t kBlockMagic = 0x7461696c6f72a110;  // "tailor" + "a110c"
constexpr std::uint64_t kFreedMagic = 0;

// The one instance; delete_block is a plain function pointer (raw_deleter)
// and cannot carry it.
std::atomic<TrackingAllocator*> g_instance{nullptr};

thread_local bool t_host_ledger = false;

// count_as_host()'s context: the wrapped memory and what it counts.
struct CountedHost {
  c10::DataPtr data;
  std::int64_t bytes;
};

void raise_to(std::atomic<std::int64_t>& peak, std::int64_t value) {
  std::int64_t p = peak.load(std::memory_order_relaxed);
  while (value > p && !peak.compare_exchange_weak(p, value, std::memory_order_relaxed)) {
  }
}

}  // namespace

HostLedgerScope::HostLedgerScope() : previous_(t_host_ledger) { t_host_ledger = true; }
HostLedgerScope::~HostLedgerScope() { t_host_ledger = previous_; }

TrackingAllocator::TrackingAllocator(c10::Allocator* base) : base_(base), base_free_(base->raw_deleter()) {}

TrackingAllocator& TrackingAllocator::install() {
  // Leaked on purpose: storages released during static destruction (LibTorch
  // keeps some in globals) still reach delete_block after main returns.
  static TrackingAllocator* const instance = [] {
    c10::Allocator* base = c10::GetCPUAllocator();
    // Wrapping needs the raw interface: the header sits inside the base's
    // block, so the base's DataPtr context cannot be kept.
    TAILOR_CHECK(base != nullptr && base->raw_deleter() != nullptr);
    auto* allocator = new TrackingAllocator(base);
    g_instance.store(allocator);
    c10::SetCPUAllocator(allocator, kPriority);
    // SetCPUAllocator silently ignores a lower priority than the installed one.
    TAILOR_CHECK(c10::GetCPUAllocator() == allocator);
    return allocator;
  }();
  return *instance;
}

void TrackingAllocator::set_budget(std::int64_t bytes) {
  TAILOR_CHECK(bytes >= 0);
  budget_.store(bytes, std::memory_order_relaxed);
}

std::int64_t TrackingAllocator::budget() const { return budget_.load(std::memory_order_relaxed); }

std::int64_t TrackingAllocator::current_bytes() const { return current_.load(std::memory_order_relaxed); }

std::int64_t TrackingAllocator::peak_bytes() const { return peak_.load(std::memory_order_relaxed); }

void TrackingAllocator::reset_peak() {
  peak_.store(current_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  host_peak_.store(host_current_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}
std::int64_t TrackingAllocator::host_bytes() const { return host_current_.load(std::memory_order_relaxed); }
std::int64_t TrackingAllocator::host_peak_bytes() const { return host_peak_.load(std::memory_order_relaxed); }

std::int64_t TrackingAllocator::allocation_count() const { return count_.load(std::memory_order_relaxed); }

std::optional<TrackingAllocator::Failure> TrackingAllocator::last_failure() const {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  return last_failure_;
}

void TrackingAllocator::clear_last_failure() {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  last_failure_.reset();
}

void TrackingAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  default_copy_data(dest, src, count);
}

c10::DeleterFnPtr TrackingAllocator::raw_deleter() const { return &delete_block; }

c10::DataPtr TrackingAllocator::allocate(size_t n) {
  const c10::Device cpu(c10::DeviceType::CPU);
  // Our header must fit on top of n without overflowing size_t or the
  // int64 counters.
  constexpr auto kMaxRequest = static_cast<size_t>(std::numeric_limits<std::int64_t>::max()) - kHeaderBytes;
  if (n > kMaxRequest) {
    refuse(std::numeric_limits<std::int64_t>::max(), current_bytes(), budget(), "request too large");
  }
  const auto bytes = static_cast<std::int64_t>(n);
  if (bytes == 0) {
    // LibTorch's default allocator returns null for zero bytes too; nothing
    // to count or free.
    count_.fetch_add(1, std::memory_order_relaxed);
    return {nullptr, nullptr, &delete_block, cpu};
  }

  const bool host = t_host_ledger;
  std::atomic<std::int64_t>& ledger = host ? host_current_ : current_;
  const std::int64_t now = host ? host_current_.fetch_add(bytes, std::memory_order_relaxed) + bytes : reserve(bytes);
  void* block = nullptr;
  try {
    block = base_->raw_allocate(n + kHeaderBytes);
  } catch (const c10::Error& e) {
    ledger.fetch_sub(bytes, std::memory_order_relaxed);
    refuse(bytes, current_bytes(), budget(), e.what_without_backtrace());
  }
  if (block == nullptr) {
    ledger.fetch_sub(bytes, std::memory_order_relaxed);
    refuse(bytes, current_bytes(), budget(), "the wrapped allocator returned null");
  }
  // Raised only once the block exists, so a failed allocation never shows up
  // in the peak.
  if (host) {
    raise_to(host_peak_, now);
  } else {
    bump_peak(now);
  }
  count_.fetch_add(1, std::memory_order_relaxed);

  const BlockHeader header{kBlockMagic, bytes, host ? 1 : 0};
  std::memcpy(block, &header, sizeof header);
  void* data = static_cast<char*>(block) + kHeaderBytes;
  return {data, data, &delete_block, cpu};
}

void TrackingAllocator::delete_block(void* data) {
  if (data == nullptr) return;
  TrackingAllocator* self = g_instance.load(std::memory_order_relaxed);
  char* block = static_cast<char*>(data) - kHeaderBytes;
  BlockHeader header;
  std::memcpy(&header, block, sizeof header);
  if (header.magic != kBlockMagic) {
    // oneDNN frees through GetCPUAllocator()->raw_deallocate(), i.e. through
    // whichever allocator is installed at free time: a buffer it took from
    // the default allocator before install() arrives here. It has no header
    // (the bytes before it belong to malloc), so it goes back untouched.
    self->base_free_(data);
    return;
  }
  // Clear the magic so the stale bytes never pass for a live header.
  header.magic = kFreedMagic;
  std::memcpy(block, &header, sizeof header);
  (header.host != 0 ? self->host_current_ : self->current_).fetch_sub(header.bytes, std::memory_order_relaxed);
  self->base_free_(block);
}

c10::DataPtr TrackingAllocator::count_as_host(c10::DataPtr data, std::size_t bytes) {
  const auto n = static_cast<std::int64_t>(bytes);
  raise_to(host_peak_, host_current_.fetch_add(n, std::memory_order_relaxed) + n);
  void* ptr = data.get();
  const c10::Device device = data.device();
  auto* context = new CountedHost{std::move(data), n};
  return {ptr, context, &delete_counted_host, device};
}

void TrackingAllocator::delete_counted_host(void* context) {
  auto* counted = static_cast<CountedHost*>(context);
  g_instance.load(std::memory_order_relaxed)->host_current_.fetch_sub(counted->bytes, std::memory_order_relaxed);
  delete counted;  // frees the memory through its own allocator
}

std::int64_t TrackingAllocator::reserve(std::int64_t n) {
  const std::int64_t limit = budget_.load(std::memory_order_relaxed);
  if (limit == 0) return current_.fetch_add(n, std::memory_order_relaxed) + n;
  // A compare-exchange rather than fetch_add-then-roll-back: a refused
  // request never inflates current_, even for an instant, so it cannot make a
  // concurrent request that fits fail. Which allocation fails then depends
  // only on the sequence of requests, not on thread timing.
  std::int64_t cur = current_.load(std::memory_order_relaxed);
  do {
    if (n > limit - cur) refuse(n, cur, limit, nullptr);
  } while (!current_.compare_exchange_weak(cur, cur + n, std::memory_order_relaxed));
  return cur + n;
}

void TrackingAllocator::refuse(std::int64_t requested, std::int64_t in_use, std::int64_t limit,
                               const char* reason) {
  {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    last_failure_ = Failure{requested, in_use, limit};
  }
  std::string msg = "tailor: out of memory (";
  msg += reason == nullptr ? "budget" : "host";
  msg += "): tried to allocate " + Bytes(requested).to_string() + " with " + Bytes(in_use).to_string();
  if (limit > 0) {
    msg += " of a " + Bytes(limit).to_string() + " budget";
  }
  msg += " in use";
  if (reason != nullptr) {
    msg += ": ";
    msg += reason;
  }
  C10_THROW_ERROR(OutOfMemoryError, msg);
}

void TrackingAllocator::bump_peak(std::int64_t bytes) {
  std::int64_t peak = peak_.load(std::memory_order_relaxed);
  while (peak < bytes && !peak_.compare_exchange_weak(peak, bytes, std::memory_order_relaxed)) {
  }
}

}  // namespace tailor::runner
