#include "dsl/rope.h"

#include <cmath>
#include <numbers>

namespace tailor::dsl {
namespace {

constexpr std::pair<RopeScalingType, const char*> kNames[] = {
    {RopeScalingType::kNone, "none"}, {RopeScalingType::kLinear, "linear"}, {RopeScalingType::kLlama3, "llama3"}};

// Llama 3.1's scaling as Meta's reference `apply_scaling` (llama-models)
// and transformers' `_compute_llama3_parameters` define it: a wavelength
// longer than original / low_freq_factor is stretched by factor, one
// shorter than original / high_freq_factor is kept, and between the two
// the frequency is interpolated linearly in original / wavelength.
double llama3(double inv, const RopeScaling& r) {
  const double original = static_cast<double>(r.original_max_seq_len);
  const double wavelength = 2 * std::numbers::pi / inv;
  if (wavelength < original / r.high_freq_factor) return inv;
  if (wavelength > original / r.low_freq_factor) return inv / r.factor;
  const double smooth = (original / wavelength - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  return (1 - smooth) * inv / r.factor + smooth * inv;
}

}  // namespace

std::vector<double> rope_inverse_frequencies(const ModelArch& a, bool local) {
  const std::int64_t d = a.rotary_dims();  // the rotated dimensions only (gpt_neox rotates a quarter)
  const bool own_base = local && a.rope_local_theta > 0;
  const double theta = own_base ? a.rope_local_theta : a.rope_theta;
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(d / 2));
  for (std::int64_t i = 0; i < d; i += 2) {
    double inv = 1.0 / std::pow(theta, static_cast<double>(i) / static_cast<double>(d));
    switch (own_base ? RopeScalingType::kNone : a.rope_scaling.type) {
      case RopeScalingType::kNone: break;
      case RopeScalingType::kLinear: inv /= a.rope_scaling.factor; break;
      case RopeScalingType::kLlama3: inv = llama3(inv, a.rope_scaling); break;
    }
    out.push_back(inv);
  }
  return out;
}

std::string rope_scaling_problem(const RopeScaling& r) {
  if (r.type == RopeScalingType::kNone) return "";
  if (!(r.factor >= 1)) return "factor must be at least 1";
  if (r.type == RopeScalingType::kLlama3) {
    if (!(r.low_freq_factor > 0)) return "low_freq_factor must be positive";
    if (!(r.high_freq_factor > r.low_freq_factor)) return "high_freq_factor must exceed low_freq_factor";
    if (r.original_max_seq_len < 1) return "original_max_seq_len (pretraining's context) is required for llama3";
  }
  return "";
}

const char* to_string(RopeScalingType t) {
  for (const auto& [v, name] : kNames) {
    if (v == t) return name;
  }
  return "none";
}

bool rope_scaling_type_from(std::string_view name, RopeScalingType& out) {
  for (const auto& [v, n] : kNames) {
    if (name == n) {
      out = v;
      return true;
    }
  }
  return false;
}

}  // namespace tailor::dsl
