// strategy.probe: one candidate's steps on the longest batches, timed and
// metered (run.h's measure; probe_plans.cpp runs it for each candidate).
#include <algorithm>

#include "platform/cpu_contention.h"
#include "runner/torch/data_parallel.h"
#include "runner/torch/run.h"

namespace tailor::runner {

void Run::measure(const ProbeTable& steps, ProbeMeasurement& out) {
  const double t0 = now_seconds();
  out.outcome = ProbeMeasurement::Outcome::kFailed;
  Status s = guarded("prepare", [&] { return prepare(); });
  if (s.is_ok()) s = guarded("probe: longest batch", [&] { return probe(); });
  out.budget_bytes = limit_;
  double timed_seconds = 0;
  std::int64_t timed = 0;
  std::vector<double> step_seconds, step_rates;  // each timed step's
  platform::CpuTimes cpu0;                       // at the first timed step
  if (s.is_ok()) {
    s = guarded("probe: steps", [&]() -> Status {
      // Every micro-batch the longest: the peak and the speed of the
      // plan's worst step, which is what must fit.
      GlobalBatch batch;
      const data::Batch longest = data_.train->longest_batch();
      for (std::int64_t k = 0; k < st_.grad_accumulation; ++k) {
        batch.target_tokens += longest.target_tokens;
        batch.nll_tokens += nll_targets(spec_.training, longest);
        batch.mine.push_back(longest);
      }
      const double denom = preference() ? static_cast<double>(spec_.training.global_batch_size)
                                        : static_cast<double>(std::max<std::int64_t>(1, batch.target_tokens));
      const double nll_weight = denom / static_cast<double>(std::max<std::int64_t>(1, batch.nll_tokens));
      const std::int64_t warmup = steps.warmup_steps;
      for (std::int64_t step = 1;; ++step) {
        bool done = step > warmup && timed >= steps.timed_steps &&
                    (timed_seconds >= steps.min_timed_seconds || timed >= steps.max_timed_steps);
        if (world_ > 1) {
          // Ranks time their steps apart, and one that stopped a step
          // early would leave the others waiting in a collective: rank 0's
          // clock decides for all.
          std::vector<double> v = {rank_ == 0 && done ? 1.0 : 0.0};
          TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, v));
          done = v[0] > 0;
        }
        if (done) break;
        // One process: a signal stops its probe here (ranks are stopped by
        // their launcher).
        if (world_ == 1 && stop_signalled()) return Status::cancelled("stopped by a signal");
        step_ = step;
        if (step == warmup + 1) cpu0 = platform::read_cpu_times();
        const double start = now_seconds();
        TAILOR_ASSIGN_OR_RETURN(Pass pass, forward_backward(batch.mine, denom, nll_weight));
        TAILOR_ASSIGN_OR_RETURN(const Update u, update(step, pass.memory));
        (void)u;
        if (device_.cuda) torch::cuda::synchronize(static_cast<c10::DeviceIndex>(device_.index));
        if (step > warmup) {
          const double seconds = now_seconds() - start;
          ++timed;
          timed_seconds += seconds;
          step_seconds.push_back(seconds);
          step_rates.push_back(static_cast<double>(pass.tokens) / std::max(1e-9, seconds));
        }
      }
      return Status::ok();
    });
  }
  if (meter_ != nullptr) {
    out.peak_bytes = meter_->peak_bytes();
    out.reserved_bytes = meter_->peak_reserved_bytes();
    meter_->set_budget(0);
  }
  out.seconds = now_seconds() - t0;
  if (s.is_ok()) {
    // The medians of the timed steps: every step is the same work, and a
    // step slowed by another process on the machine should not decide.
    auto median = [](std::vector<double> v) {
      if (v.empty()) return 0.0;
      std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
      return v[v.size() / 2];
    };
    out.outcome = ProbeMeasurement::Outcome::kFits;
    out.contention = platform::contention_between(cpu0, platform::read_cpu_times(), timed_cores());
    out.step_seconds = median(step_seconds);
    out.tokens_per_second = median(step_rates);
    return;
  }
  out.outcome = s.code() == StatusCode::kResourceExhausted ? ProbeMeasurement::Outcome::kOutOfMemory
                                                           : ProbeMeasurement::Outcome::kFailed;
  out.message = s.message();
}

}  // namespace tailor::runner
