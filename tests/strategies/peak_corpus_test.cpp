// The memory model against a public corpus of measured peaks
// (tests/strategies/data/peak_corpus.yaml: each point with its source, a
// verbatim quote, the settings and the metric), through the runtime profile
// of the stack that ran it (strategies/runtime_profile.h), one GPU and
// several GPUs reported apart, against issue 14's goal: median |error| <= 10%
// and p90 <= 25% for both (today 6.7% / 17.0% and 9.3% / 23.0%,
// strategies/README.md "Accuracy").
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/units.h"
#include "dsl/catalog.h"
#include "strategies/memory_model.h"
#include "strategies/runtime_profile.h"

namespace tailor::strategies {
namespace {

struct Point {
  std::string id, framework, runtime, metric;
  int gpus = 1;
  double measured = 0, estimate = 0;
  double error() const { return estimate / measured - 1.0; }
};

Precision precision_named(const std::string& s) {
  if (s == "bf16") return Precision::kBf16;
  if (s == "fp16") return Precision::kFp16;
  if (s == "pure_bf16") return Precision::kPureBf16;
  EXPECT_EQ(s, "fp32");
  return Precision::kFp32;
}

dsl::Runtime runtime_named(const std::string& s) {
  if (s == "hf") return dsl::Runtime::kHf;
  if (s == "torchtune") return dsl::Runtime::kTorchtune;
  if (s == "litgpt") return dsl::Runtime::kLitgpt;
  if (s == "torchtitan") return dsl::Runtime::kTorchtitan;
  EXPECT_EQ(s, "tailor");
  return dsl::Runtime::kTailor;
}

// "21.30 GB", "17.2 GiB", "72434837504 bytes", "77256 MiB"
double bytes_of(std::string text) {
  if (const auto p = text.find(" bytes"); p != std::string::npos) return std::stod(text.substr(0, p));
  text.erase(std::remove(text.begin(), text.end(), ' '), text.end());
  const auto b = parse_bytes(text);
  EXPECT_TRUE(b.is_ok()) << text;
  return b.is_ok() ? static_cast<double>(b->count()) : 0;
}

Point evaluate(const YAML::Node& n) {
  Point p;
  p.id = n["id"].as<std::string>();
  p.framework = n["framework"].as<std::string>();
  p.runtime = n["runtime"].as<std::string>();
  p.metric = n["metric"].as<std::string>();
  p.gpus = n["gpus"].as<int>(1);
  p.measured = bytes_of(n["measured"].as<std::string>());
  const auto* model = dsl::Catalog::builtin().find_model(n["model"].as<std::string>());
  EXPECT_NE(model, nullptr) << p.id;
  if (model == nullptr) return p;

  MemoryInput in;
  in.arch = &model->arch;
  in.batch = {n["micro_batch"].as<std::int64_t>(), n["seq_len"].as<std::int64_t>()};
  in.on_gpu = true;
  const RuntimeProfile& profile = runtime_profile(runtime_named(p.runtime));
  apply(profile, in);
  // What the point says of itself wins over its stack's defaults.
  in.fused_kernels = n["compiled"].as<bool>(false);
  in.quirks.lean_cross_entropy = n["fused_loss"].as<bool>(profile.quirks.lean_cross_entropy);
  in.quirks.fp32_non_quantized = n["fp32_non_quantized"].as<bool>(profile.quirks.fp32_non_quantized);
  Strategy& s = in.strategy;
  s.attention = n["attention"].as<std::string>("sdpa") == "eager" ? Attention::kStandard : Attention::kMemoryEfficient;
  s.precision = precision_named(n["precision"].as<std::string>());
  s.micro_batch_size = in.batch.micro_batch;
  s.grad_accumulation = n["grad_accumulation"].as<std::int64_t>(1);
  const std::string ck = n["gradient_checkpointing"].as<std::string>("0");
  // Selective checkpointing (torchtitan's default) keeps about half.
  s.checkpoint_every = ck == "selective" ? 2 : std::stoll(ck);
  s.zero_stage = n["zero_stage"].as<std::int64_t>(0);
  s.num_gpus = p.gpus;
  const std::string offload = n["offload"].as<std::string>("none");
  s.offload = offload == "optimizer" ? Offload::kOptimizer
              : offload == "optimizer_and_params" ? Offload::kOptimizerAndParams
                                                  : Offload::kNone;
  s.optimizer = n["optimizer"].as<std::string>("adamw") == "adamw_8bit" ? Optimizer::kAdamw8bit : Optimizer::kAdamw;
  const std::string adapter = n["adapter"].as<std::string>("none");
  s.adapter = adapter == "lora" ? Adapter::kLora : adapter == "qlora" ? Adapter::kQlora : Adapter::kNone;
  const std::string q = n["quantization"].as<std::string>("none");
  s.quantization = q == "nf4" ? Quantization::kNf4 : q == "nf4_double" ? Quantization::kNf4Double : Quantization::kNone;
  if (s.adapter != Adapter::kNone) {
    s.lora_rank = n["lora"]["rank"].as<std::int64_t>();
    if (n["lora"]["targets"]) in.lora_targets = n["lora"]["targets"].as<std::vector<std::string>>();
    in.lora_dropout = n["lora"]["dropout"].as<double>(0.0);
  }
  MemoryConstants k = MemoryConstants::defaults();
  const Bytes context = k.gpu_context_overhead;
  const MemoryEstimate e = estimate_memory(in, k);
  const Bytes total = e.per_device.total();
  const bool sharded = s.zero_stage >= 3 && s.num_gpus > 1;
  if (p.metric == "allocated" || p.metric == "active") {
    p.estimate = static_cast<double>((total - context).count());
  } else if (p.metric == "reserved") {
    p.estimate = static_cast<double>((reserved_peak(profile, total, context, sharded) - context).count());
  } else {
    EXPECT_EQ(p.metric, "nvidia-smi") << p.id;
    p.estimate = static_cast<double>(reserved_peak(profile, total, context, sharded).count());
  }
  return p;
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

TEST(PeakCorpusTest, EstimatesMatchPublishedMeasurementsAcrossStacksAndGpuCounts) {
  const YAML::Node doc = YAML::LoadFile(TAILOR_PEAK_CORPUS);
  std::vector<Point> points;
  for (const YAML::Node& n : doc["measurements"]) points.push_back(evaluate(n));
  std::printf("%-58s %-11s %-10s %4s %10s %10s %7s\n", "published run", "runtime", "metric", "gpus", "measured",
              "estimate", "error");
  std::vector<double> single, multi;
  std::set<std::string> frameworks;
  for (const Point& p : points) {
    std::printf("%-58s %-11s %-10s %4d %9.2fG %9.2fG %+6.1f%%\n", p.id.c_str(), p.runtime.c_str(), p.metric.c_str(),
                p.gpus, p.measured / 1e9, p.estimate / 1e9, 100 * p.error());
    (p.gpus > 1 ? multi : single).push_back(std::fabs(p.error()));
    frameworks.insert(p.framework);
  }
  // The corpus the issue asks for: at least 80 points from 6 frameworks,
  // 25 of them on several GPUs.
  EXPECT_GE(points.size(), 80u);
  EXPECT_GE(frameworks.size(), 6u);
  EXPECT_GE(multi.size(), 25u);
  struct Budget {
    const char* name;
    const std::vector<double>* errors;
    double median, p90;
  };
  for (const Budget& b : {Budget{"one GPU", &single, 0.10, 0.25}, Budget{"several GPUs", &multi, 0.10, 0.25}}) {
    ASSERT_FALSE(b.errors->empty());
    const double median = percentile(*b.errors, 0.5), p90 = percentile(*b.errors, 0.9);
    std::printf("%s: %zu points, median |error| %.1f%%, p90 %.1f%%\n", b.name, b.errors->size(), 100 * median,
                100 * p90);
    EXPECT_LE(median, b.median) << b.name;
    EXPECT_LE(p90, b.p90) << b.name;
  }
}

}  // namespace
}  // namespace tailor::strategies
