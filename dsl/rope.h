// RoPE's frequencies for an architecture, with the context-extending
// scalings config.json files name (rope_scaling / rope_parameters). Pure
// arithmetic: the runner builds its cos/sin tables from these, the spec
// loader checks the numbers, and tests compare them without torch.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "dsl/job_spec.h"

namespace tailor::dsl {

// rotary_dims / 2 inverse frequencies: theta^(-2i / rotary_dims) (Su et al.
// 2021, "RoFormer"; rotary_dims is head_dim but under GPT-NeoX's partial
// rotary), then scaled as `a.rope_scaling` says. `local`: those of a
// windowed layer, which Gemma 3 rotates by rope_local_theta unscaled (the
// same as the others where the arch has no local base).
std::vector<double> rope_inverse_frequencies(const ModelArch& a, bool local = false);

// What is wrong with a scaling's numbers ("factor must be at least 1"), or
// "" when nothing is.
std::string rope_scaling_problem(const RopeScaling& r);

// "none", "linear", "llama3"; and back (false when unknown).
const char* to_string(RopeScalingType t);
bool rope_scaling_type_from(std::string_view name, RopeScalingType& out);

}  // namespace tailor::dsl
