#include "runner/torch/grouped_linear.h"

#include <gtest/gtest.h>

namespace tailor::runner {
namespace {

// Each group's rows through its own weight, composed from ATen ops.
torch::Tensor reference(const torch::Tensor& x, const torch::Tensor& w, const std::vector<std::int64_t>& counts) {
  std::vector<torch::Tensor> out;
  std::int64_t row = 0;
  for (std::size_t g = 0; g < counts.size(); ++g) {
    out.push_back(torch::linear(x.narrow(0, row, counts[g]), w[static_cast<std::int64_t>(g)]));
    row += counts[g];
  }
  return torch::cat(out);
}

TEST(GroupedLinearTest, OutputsAndGradientsEqualOneLinearPerGroupWithAnEmptyGroup) {
  torch::manual_seed(3);
  const std::vector<std::int64_t> counts = {3, 0, 5, 2};  // group 1 has no rows
  const torch::Tensor x0 = torch::randn({10, 6}), w0 = torch::randn({4, 7, 6}), gy = torch::randn({10, 7});

  torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  const torch::Tensor y = grouped_linear(x, w, counts);
  y.backward(gy);
  torch::Tensor xr = x0.clone().requires_grad_(true), wr = w0.clone().requires_grad_(true);
  const torch::Tensor yr = reference(xr, wr, counts);
  yr.backward(gy);

  EXPECT_TRUE(torch::allclose(y, yr, 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(x.grad(), xr.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(w.grad(), wr.grad(), 1e-5, 1e-6));
  EXPECT_EQ(w.grad()[1].abs().max().item<float>(), 0.0f);  // the empty group's gradient is zero, not garbage
}

TEST(GroupedLinearTest, AFrozenWeightGetsNoGradientAndTheInputStillDoes) {
  torch::manual_seed(4);
  const std::vector<std::int64_t> counts = {2, 4};
  const torch::Tensor w = torch::randn({2, 3, 5});
  torch::Tensor x = torch::randn({6, 5}).requires_grad_(true);
  grouped_linear(x, w, counts).sum().backward();
  torch::Tensor xr = x.detach().clone().requires_grad_(true);
  reference(xr, w, counts).sum().backward();
  EXPECT_FALSE(w.grad().defined());
  EXPECT_TRUE(torch::allclose(x.grad(), xr.grad(), 1e-5, 1e-6));
}

}  // namespace
}  // namespace tailor::runner
