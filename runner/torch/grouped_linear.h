// One linear layer per group of rows: a mixture of experts' expert weights
// applied to the tokens routed to each expert, as one autograd node.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace tailor::runner {

// x (M, in) holds the rows of group 0, then group 1, ... (counts[g] rows
// each, summing to M); w (G, out, in) stacks the groups' weights. Returns
// (M, out): each group's rows times its weight, transposed.
//
// Why not w[g] per group through autograd: each select's backward makes a
// zero-filled gradient as large as all of w and they are summed, so a step
// held several copies of every expert weight's gradient (11% above the
// planner's peak on a small Mixtral). Here backward writes each group's
// gradient into one (G, out, in) tensor, which becomes w's gradient as it
// is. Keeps x (only when w needs a gradient) and w.
torch::Tensor grouped_linear(const torch::Tensor& x, const torch::Tensor& w, const std::vector<std::int64_t>& counts);

}  // namespace tailor::runner
