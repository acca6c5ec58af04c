// Dynamic loss scaling for fp16 mixed precision (Micikevicius et al. 2018,
// "Mixed Precision Training", section 3.2; the policy of PyTorch's
// GradScaler): the loss is multiplied by `scale` before backward so small
// gradients survive fp16; a step whose gradients hold inf/nan is skipped and
// the scale halved; after `growth_interval` good steps in a row it doubles.
// Torch-free: the trainer feeds it whether the gradients were finite.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tailor::runner {

class DynamicLossScaler {
 public:
  static constexpr double kInitialScale = 65536.0;  // 2^16, GradScaler's default
  static constexpr std::int64_t kGrowthInterval = 2000;

  // enabled = false (fp32, bf16): scale 1 and every step taken.
  explicit DynamicLossScaler(bool enabled, double scale = kInitialScale, std::int64_t good_steps = 0)
      : enabled_(enabled), scale_(enabled ? scale : 1.0), good_steps_(enabled ? good_steps : 0) {}

  double scale() const { return scale_; }
  std::int64_t good_steps() const { return good_steps_; }  // checkpointed with the scale

  enum class Outcome { kStep, kSkip };
  // After backward: with non-finite gradients the step is skipped and the
  // scale backs off (never below 1); otherwise the step is taken, and the
  // scale grows after kGrowthInterval good steps in a row.
  Outcome update(bool grads_finite) {
    if (!enabled_) return Outcome::kStep;
    if (!grads_finite) {
      scale_ = std::max(1.0, scale_ / 2);
      good_steps_ = 0;
      return Outcome::kSkip;
    }
    if (++good_steps_ >= kGrowthInterval) {
      scale_ *= 2;
      good_steps_ = 0;
    }
    return Outcome::kStep;
  }

 private:
  bool enabled_;
  double scale_;
  std::int64_t good_steps_;
};

}  // namespace tailor::runner
