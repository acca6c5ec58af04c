// The memory model against published GPU measurements of real training runs
// (tests/strategies/data/published_peaks.yaml, each point with its source and
// settings): within +-15% of every point whose settings are fully known. The
// test prints the whole table, the other points included.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "core/units.h"
#include "dsl/catalog.h"
#include "strategies/memory_model.h"

namespace tailor::strategies {
namespace {

constexpr double kTolerance = 0.15;

Precision precision_named(const std::string& s) {
  if (s == "fp32") return Precision::kFp32;
  if (s == "bf16") return Precision::kBf16;
  if (s == "fp16") return Precision::kFp16;
  if (s == "pure_bf16") return Precision::kPureBf16;
  ADD_FAILURE() << "unknown precision " << s;
  return Precision::kFp32;
}

Quantization quantization_named(const std::string& s) {
  if (s == "nf4") return Quantization::kNf4;
  if (s == "nf4_double") return Quantization::kNf4Double;
  return Quantization::kNone;
}

struct Point {
  std::string id, compare;
  bool check = false;
  double measured = 0, estimate = 0;
};

Point evaluate(const YAML::Node& n) {
  Point p;
  p.id = n["id"].as<std::string>();
  p.compare = n["compare"].as<std::string>();
  p.check = n["check"].as<bool>();
  const auto measured = parse_bytes(n["measured"].as<std::string>());
  EXPECT_TRUE(measured.is_ok()) << p.id;
  p.measured = static_cast<double>(measured.is_ok() ? measured->count() : 0);

  const auto* model = dsl::Catalog::builtin().find_model(n["model"].as<std::string>());
  EXPECT_NE(model, nullptr) << p.id;
  if (model == nullptr) return p;
  MemoryInput in;
  in.arch = &model->arch;
  in.batch = {n["micro_batch"].as<std::int64_t>(), n["seq_len"].as<std::int64_t>()};
  in.strategy.attention = Attention::kMemoryEfficient;  // every source ran SDPA / flash attention
  in.on_gpu = true;
  in.fused_kernels = n["fused"].as<bool>(false);
  in.quirks.lean_cross_entropy = in.fused_kernels;  // the sources' losses, not tailor-runner's
  in.quirks.quantized_linear_keeps_input = n["bitsandbytes"].as<bool>(false);
  Strategy& s = in.strategy;
  s.precision = precision_named(n["precision"].as<std::string>());
  s.micro_batch_size = in.batch.micro_batch;
  s.grad_accumulation = n["grad_accumulation"].as<std::int64_t>(1);
  s.checkpoint_every = n["gradient_checkpointing"].as<std::int64_t>(0);
  s.zero_stage = n["zero_stage"].as<std::int64_t>(0);
  s.num_gpus = n["gpus"].as<std::int64_t>(1);
  const std::string adapter = n["adapter"].as<std::string>("none");
  s.adapter = adapter == "lora" ? Adapter::kLora : adapter == "qlora" ? Adapter::kQlora : Adapter::kNone;
  s.quantization = quantization_named(n["quantization"].as<std::string>("none"));
  if (s.adapter != Adapter::kNone) {
    s.lora_rank = n["lora"]["rank"].as<std::int64_t>();
    in.lora_targets = n["lora"]["targets"].as<std::vector<std::string>>();
    in.lora_dropout = n["lora"]["dropout"].as<double>();
  }
  // Allocated figures leave out the CUDA context, which is not a tensor;
  // the workspaces are tailor-runner's own measurement.
  MemoryConstants k = MemoryConstants::defaults();
  k.gpu_context_overhead = Bytes(0);
  k.gpu_allocator_workspace = Bytes(0);
  const MemoryBreakdown m = estimate_memory(in, k).per_device;
  if (p.compare == "peak") {
    p.estimate = static_cast<double>(m.total().count());
  } else if (p.compare == "static") {
    p.estimate = static_cast<double>((m.weights + m.gradients + m.optimizer_states + m.master_weights + m.adapter).count());
  } else if (p.compare == "gpu_scaling") {
    s.num_gpus = n["gpus_b"].as<std::int64_t>();
    const MemoryBreakdown b = estimate_memory(in, k).per_device;
    p.estimate = static_cast<double>((m.weights + m.gradients + m.optimizer_states + m.master_weights).count() -
                                     (b.weights + b.gradients + b.optimizer_states + b.master_weights).count());
  } else {
    ADD_FAILURE() << p.id << ": unknown comparison " << p.compare;
  }
  return p;
}

TEST(PublishedMemoryTest, EstimatesMatchPublishedGpuMeasurements) {
  const YAML::Node doc = YAML::LoadFile(TAILOR_PUBLISHED_PEAKS);
  std::printf("%-52s %-11s %10s %10s %6s\n", "published run", "compared", "measured", "estimate", "ratio");
  int checked = 0;
  for (const YAML::Node& n : doc["measurements"]) {
    const Point p = evaluate(n);
    const double ratio = p.measured > 0 ? p.estimate / p.measured : 0;
    std::printf("%-52s %-11s %9.2fG %9.2fG %6.3f%s\n", p.id.c_str(), p.compare.c_str(), p.measured / 1e9,
                p.estimate / 1e9, ratio, p.check ? "" : "  (not checked)");
    if (!p.check) continue;
    ++checked;
    EXPECT_NEAR(ratio, 1.0, kTolerance) << p.id << ": estimate " << p.estimate << " vs measured " << p.measured;
  }
  EXPECT_GE(checked, 8);
}

}  // namespace
}  // namespace tailor::strategies
