// The memory model against a public corpus of measured peaks
// (tests/strategies/data/peak_corpus.yaml: each point with its source, its
// publisher (`origin`), a verbatim quote, the settings and the metric),
// through the runtime profile of the stack that ran it
// (strategies/runtime_profile.h), one GPU and several GPUs reported apart,
// against issue 14's goal: median |error| <= 10% and p90 <= 25% for both.
//
// Two checks:
//  - in-sample: every point predicted with the profiles as
//    runtime_profile.cpp has them;
//  - leave-one-source-out (LOSO): the profiles' only numbers fitted from the
//    corpus, the reserved/allocated ratios (one GPU, sharded), are fitted
//    here from same-run pairs of published peaks (fit_ratios); each origin's
//    points are then predicted with the ratios fitted on the other origins.
//
// Points in the corpus but outside the goal statistics, printed apart:
//  - `runtime_fit: poor`: a stack no runtime profile describes (Unsloth, a
//    plain PyTorch loop).
// `modules_to_save` points (LoRA that also trains the embedding and the
// head whole) are in the goal since strategy.lora.modules_to_save exists
// (2026-12-01); until then the model could not express them.
// When a figure misses a goal the test asserts the achieved figure plus one
// point as a guard and prints the goal beside it.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/units.h"
#include "dsl/catalog.h"
#include "dsl/library_version.h"
#include "dsl/model_family.h"
#include "strategies/headroom.h"
#include "strategies/memory_model.h"
#include "strategies/runtime_profile.h"

namespace tailor::strategies {
namespace {

// Guards where the corpus misses a goal (median |error| <= 10%, p90 <=
// 25%): the achieved figure plus one point, so that a change making the
// estimates worse fails; a figure meeting its goal is held to the goal
// (its guard is the goal). Achieved with the 289-point corpus of
// 2026-11-30 and the model of 2026-12-01 (transformers 4.46-4.48's shifted
// logits copy; litgpt's fused q/k/v views and fp32 norm inputs;
// transformers' norms and PEFT's adapter input copies; FSDP1's gathered
// root unit; modules_to_save, whose 18 Qwen README points joined the goal
// statistics) (one GPU / several): in-sample 9.2% / 23.1% and 7.6% / 23.6%;
// LOSO 9.0% / 23.2% and 7.6% / 23.6%; strict LOSO (2026-12-02: a ratio
// with no pair left fitted from the other origins' figures) 9.0% / 23.2% and
// 7.8% / 23.5% (with the borrowed 1.08 there: 9.1% / 23.2% and 9.7% / 28.1%).
constexpr double kGuardInOneMedian = 0.10, kGuardInOneP90 = 0.25, kGuardInSeveralMedian = 0.10,
                 kGuardInSeveralP90 = 0.25;
constexpr double kGuardOneMedian = 0.10, kGuardOneP90 = 0.25, kGuardSeveralMedian = 0.10, kGuardSeveralP90 = 0.25;
constexpr double kGuardStrictOneMedian = 0.10, kGuardStrictOneP90 = 0.25, kGuardStrictSeveralMedian = 0.10,
                 kGuardStrictSeveralP90 = 0.25;
// Under-estimates beyond 10% on points whose settings are all known (LOSO):
// 2 of 128 (2026-12-03; 13 before FSDP1's held checkpoints were modelled, 4
// before Answer.AI's held output logits).
constexpr std::size_t kGuardUnderEstimates = 2;

struct Point {
  std::string id, framework, origin, runtime, metric;
  std::string run;  // what two figures of the same run share: origin, quote and settings
  int gpus = 1;
  double measured = 0;  // per device (a published sum over GPUs divided by gpus)
  bool settings_known = false;
  bool poor_fit = false;         // runtime_fit: poor
  bool modules_to_save = false;  // embedding/head trained whole beside LoRA (PEFT's modules_to_save)
  bool sum_over_gpus = false;
  bool sharded = false;  // parameters sharded: ZeRO-3/FSDP on several GPUs
  Adapter adapter = Adapter::kNone;
  // The memory model's per-device total and the context outside the caching allocator.
  Bytes total, context;
  bool in_goal() const { return !poor_fit; }
};

// The fitted numbers: each runtime's reserved/allocated ratio on one GPU
// (or unsharded) and under parameter sharding.
using Ratios = std::map<dsl::Runtime, std::array<double, 2>>;

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

// A model outside the catalog, given inline (`arch:`) as config.json says it.
dsl::ModelArch arch_of(const YAML::Node& a, const std::string& id) {
  dsl::ModelArch arch;
  const auto* family = dsl::family_by_name(a["family"].as<std::string>());
  EXPECT_NE(family, nullptr) << id;
  if (family != nullptr) arch.family = family->id;
  arch.layers = a["layers"].as<std::int64_t>();
  arch.hidden = a["hidden"].as<std::int64_t>();
  arch.intermediate = a["intermediate"].as<std::int64_t>();
  arch.heads = a["heads"].as<std::int64_t>();
  arch.kv_heads = a["kv_heads"].as<std::int64_t>(arch.heads);
  arch.vocab = a["vocab"].as<std::int64_t>();
  arch.max_seq_len = a["max_seq_len"].as<std::int64_t>();
  arch.tie_embeddings = a["tie_embeddings"].as<bool>(false);
  arch.partial_rotary_factor = a["partial_rotary_factor"].as<double>(0.0);
  arch.rope_theta = a["rope_theta"].as<double>(arch.rope_theta);
  arch.norm_eps = a["norm_eps"].as<double>(arch.norm_eps);
  // As the catalog completes a preset (dsl/catalog.cpp).
  const dsl::ModelFamilyInfo& f = dsl::family_info(arch.family);
  arch.head_size = f.default_head_dim;
  arch.experts = f.default_experts;
  arch.experts_per_token = f.default_experts_per_token;
  return arch;
}

Point evaluate(const YAML::Node& n) {
  Point p;
  p.id = n["id"].as<std::string>();
  p.framework = n["framework"].as<std::string>();
  p.origin = n["origin"].as<std::string>("");
  EXPECT_FALSE(p.origin.empty()) << p.id << ": every point names its publisher";
  p.runtime = n["runtime"].as<std::string>();
  p.metric = n["metric"].as<std::string>();
  p.gpus = n["gpus"].as<int>(1);
  p.measured = bytes_of(n["measured"].as<std::string>());
  p.sum_over_gpus = n["measured_is_sum_over_gpus"].as<bool>(false);
  if (p.sum_over_gpus) p.measured /= p.gpus;
  // A guessed metric or setting makes the settings unknown, whatever the point says.
  const bool guessed = n["metric_guessed"].as<bool>(false) || (n["guessed"] && n["guessed"].size() > 0);
  p.settings_known = n["settings_known"].as<bool>(false) && !guessed;
  EXPECT_FALSE(n["settings_known"].as<bool>(false) && guessed) << p.id << ": settings_known with guesses";
  p.poor_fit = n["runtime_fit"].as<std::string>("good") == "poor";
  p.modules_to_save = n["modules_to_save"] && n["modules_to_save"].size() > 0;

  dsl::ModelArch inline_arch;
  const dsl::ModelArch* arch = nullptr;
  if (n["arch"]) {
    inline_arch = arch_of(n["arch"], p.id);
    arch = &inline_arch;
  } else if (const auto* model = dsl::Catalog::builtin().find_model(n["model"].as<std::string>())) {
    arch = &model->arch;
  }
  EXPECT_NE(arch, nullptr) << p.id << ": " << n["model"].as<std::string>() << " is neither in the catalog nor inline";
  if (arch == nullptr) return p;

  MemoryInput in;
  in.arch = arch;
  in.batch = {n["micro_batch"].as<std::int64_t>(), n["seq_len"].as<std::int64_t>()};
  in.on_gpu = true;
  const RuntimeProfile& profile = runtime_profile(runtime_named(p.runtime));
  apply(profile, in);
  // What the point says of itself wins over its stack's defaults.
  in.fused_kernels = n["compiled"].as<bool>(false);
  in.quirks.lean_cross_entropy = n["fused_loss"].as<bool>(profile.quirks.lean_cross_entropy);
  in.quirks.fp32_non_quantized = n["fp32_non_quantized"].as<bool>(profile.quirks.fp32_non_quantized);
  in.quirks.fp32_norm_inputs = n["fp32_norm_inputs"].as<bool>(profile.quirks.fp32_norm_inputs);
  in.quirks.adapter_input_copies = n["adapter_input_copies"].as<bool>(profile.quirks.adapter_input_copies);
  // A loop that keeps the model's output through backward keeps its logits
  // in the dtype the model returns them.
  if (n["held_output_logits"]) {
    const std::string dtype = n["held_output_logits"].as<std::string>();
    EXPECT_TRUE(dtype == "fp32" || dtype == "bf16") << p.id << ": held_output_logits " << dtype;
    in.quirks.held_output_bytes_per_logit = dtype == "fp32" ? 4.0 : 2.0;
  }
  // What its transformers keeps, as planner.transformers has the planner
  // model it (strategies/runtime_profile.h).
  if (n["transformers"]) {
    const std::string text = n["transformers"].as<std::string>();
    const auto version = dsl::parse_library_version(text);
    EXPECT_TRUE(version.has_value()) << p.id << ": transformers " << text << " is not major.minor[.patch]";
    if (version) apply_transformers(*version, in.quirks);
  }
  // DeepSpeed's ZeRO-3 has no FSDP1 units: no root unit gathered, no
  // checkpoints held by a unit's hook.
  if (n["sharding"]) {
    EXPECT_EQ(n["sharding"].as<std::string>(), "deepspeed") << p.id;
    in.quirks.root_unit_gathered = false;
    in.quirks.held_checkpoints = false;
  }
  // A point may say how its run checkpoints.
  in.quirks.held_checkpoints = n["reentrant_checkpointing"].as<bool>(in.quirks.held_checkpoints);
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
    // Targets are the family's linear names (lm_head allowed, not counted):
    // a name the model lacks would silently train nothing.
    const auto names = dsl::lora_target_names(arch->family);
    for (const std::string& t : in.lora_targets) {
      EXPECT_TRUE(t == "lm_head" || std::find(names.begin(), names.end(), t) != names.end())
          << p.id << ": LoRA target " << t << " is not a linear of family " << dsl::to_string(arch->family);
    }
    // The publisher's module names: Qwen-1's embedding is `wte` (mapped to
    // qwen2, whose embedding is embed_tokens).
    if (p.modules_to_save) {
      std::vector<std::string> whole;
      for (std::string m : n["modules_to_save"].as<std::vector<std::string>>()) {
        whole.push_back(m == "wte" ? dsl::whole_module_names(arch->family)[0] : m);
      }
      const auto valid = dsl::whole_module_names(arch->family);
      for (const std::string& m : whole) {
        EXPECT_NE(std::find(valid.begin(), valid.end(), m), valid.end()) << p.id << ": modules_to_save " << m;
      }
      in.whole_modules = dsl::whole_modules(*arch, whole);
    }
  }
  MemoryConstants k = MemoryConstants::defaults();
  p.context = k.gpu_context_overhead;
  p.total = estimate_memory(in, k).per_device.total();
  p.sharded = s.zero_stage >= 3 && s.num_gpus > 1;
  p.adapter = s.adapter;
  p.run = p.origin + "\n" + p.runtime + "\n" + n["quote"].as<std::string>() + "\n" + std::to_string(p.gpus) + "\n" +
          std::to_string(in.batch.micro_batch) + "x" + std::to_string(in.batch.seq_len) + "\n" +
          std::to_string(p.sharded);
  return p;
}

// The estimate of the point's metric with the given reserved/allocated ratios.
double estimate(const Point& p, const Ratios& ratios) {
  if (p.metric == "allocated" || p.metric == "active") return static_cast<double>((p.total - p.context).count());
  RuntimeProfile profile = runtime_profile(runtime_named(p.runtime));
  if (const auto r = ratios.find(profile.runtime); r != ratios.end()) {
    profile.reserved_over_allocated = r->second[0];
    profile.reserved_over_allocated_sharded = r->second[1];
  }
  const Bytes reserved = reserved_peak(profile, p.total, p.context, p.sharded);
  if (p.metric == "reserved") return static_cast<double>((reserved - p.context).count());
  EXPECT_EQ(p.metric, "nvidia-smi") << p.id;
  return static_cast<double>(reserved.count());
}

double error(const Point& p, const Ratios& r) { return estimate(p, r) / p.measured - 1.0; }

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

constexpr std::array<dsl::Runtime, 5> kRuntimes = {dsl::Runtime::kHf, dsl::Runtime::kTorchtune, dsl::Runtime::kLitgpt,
                                                   dsl::Runtime::kTorchtitan, dsl::Runtime::kTailor};

// The profiles' ratios as runtime_profile.cpp hard-codes them.
Ratios profile_ratios() {
  Ratios r;
  for (dsl::Runtime rt : kRuntimes) {
    const RuntimeProfile& p = runtime_profile(rt);
    r[rt] = {p.reserved_over_allocated, p.reserved_over_allocated_sharded};
  }
  return r;
}

struct Fit {
  Ratios ratios;
  std::map<dsl::Runtime, std::array<std::size_t, 2>> pairs;  // how many pairs each ratio comes from (0: the profile's)
  // strict: how many figures a ratio with no pair left was fitted from
  // against their estimates (0: the borrowed 1.08).
  std::map<dsl::Runtime, std::array<std::size_t, 2>> figures;
};

// The ratio runtime_profile.cpp borrows for a stack with no measured pair
// (litgpt, torchtitan, tailor-runner).
constexpr double kBorrowedRatio = 1.08;

// A ratio with no same-run pair left, fitted the way a stack without pairs
// gets one (torchtune's 1.0: "its reserved figures sit at the allocated
// estimate"): the median, over the stack's other reserved and nvidia-smi
// figures of the same kind (one GPU or sharded), of what the figure implies
// (reserved / the allocated estimate; nvidia-smi less the context, over it),
// at least 1.0 (a pool holds what it hands out: a figure below the estimate
// says the estimate is high, not that the pool is small). 0 figures: the
// borrowed 1.08.
double ratio_from_figures(const std::vector<Point>& points, const std::string& without, dsl::Runtime rt, int kind,
                          std::size_t& figures) {
  std::vector<double> implied;
  for (const Point& p : points) {
    if (p.origin == without || p.poor_fit || runtime_named(p.runtime) != rt || (p.sharded ? 1 : 0) != kind) continue;
    const double tensors = static_cast<double>((p.total - p.context).count());
    if (p.metric == "reserved") implied.push_back(p.measured / tensors);
    if (p.metric == "nvidia-smi") implied.push_back((p.measured - static_cast<double>(p.context.count())) / tensors);
  }
  figures = implied.size();
  return implied.empty() ? kBorrowedRatio : std::max(1.0, percentile(implied, 0.5));
}

// Where a ratio's every same-run pair came from the held-out origin: the
// profile's value (fitted on that origin, so it leaks), one fitted from the
// other origins' figures against their estimates (strict), or the borrowed
// 1.08 (strict, printed for comparison).
enum class NoPairLeft { kProfile, kFigures, kBorrowed };

// Each runtime's two ratios: the median, over same-run pairs (an allocated
// peak and a reserved or nvidia-smi peak of one run, published together), of
// measured(reserved or nvidia-smi) / measured(allocated); the profile's value
// where a runtime has no pair. Points of a stack no profile describes
// (runtime_fit: poor) and those of `without` do not take part. `fallback`
// says what a ratio whose every pair came from `without` takes instead.
Fit fit_ratios(const std::vector<Point>& points, const std::string& without = "",
               NoPairLeft fallback = NoPairLeft::kProfile) {
  std::map<std::string, std::vector<const Point*>> runs;
  for (const Point& p : points) {
    if (p.origin != without && !p.poor_fit) runs[p.run].push_back(&p);
  }
  std::map<dsl::Runtime, std::array<std::vector<double>, 2>> samples;
  for (const auto& [run, members] : runs) {
    for (const Point* a : members) {
      if (a->metric != "allocated") continue;
      for (const Point* o : members) {
        if (o->metric != "reserved" && o->metric != "nvidia-smi") continue;
        samples[runtime_named(a->runtime)][a->sharded ? 1 : 0].push_back(o->measured / a->measured);
      }
    }
  }
  Fit fit{profile_ratios(), {}, {}};
  for (const auto& [rt, by_kind] : samples) {
    for (int kind = 0; kind < 2; ++kind) {
      fit.pairs[rt][kind] = by_kind[kind].size();
      if (!by_kind[kind].empty()) fit.ratios[rt][kind] = percentile(by_kind[kind], 0.5);
    }
  }
  if (fallback != NoPairLeft::kProfile && !without.empty()) {
    const Fit all = fit_ratios(points);
    for (const auto& [rt, n] : all.pairs) {
      for (int kind = 0; kind < 2; ++kind) {
        if (n[kind] > 0 && (!fit.pairs.count(rt) || fit.pairs.at(rt)[kind] == 0)) {
          fit.ratios[rt][kind] = fallback == NoPairLeft::kFigures
                                     ? ratio_from_figures(points, without, rt, kind, fit.figures[rt][kind])
                                     : kBorrowedRatio;
        }
      }
    }
  }
  return fit;
}

const char* flags(const Point& p) {
  static std::string s;
  s = std::string(p.settings_known ? "K" : "-") + (p.sum_over_gpus ? "S" : "-") + (p.poor_fit ? "P" : "-") +
      (p.modules_to_save ? "E" : "-");
  return s.c_str();
}

struct Spread {
  std::size_t n = 0;
  double median = 0, p90 = 0;
};
Spread spread(const std::vector<double>& abs_errors) {
  return {abs_errors.size(), percentile(abs_errors, 0.5), percentile(abs_errors, 0.9)};
}

// A goal, or the achieved figure plus one point where the corpus misses it.
struct Bound {
  const char* name;
  double achieved, goal, guard;
};
void check(const Bound& b) {
  const bool met = b.achieved <= b.goal;
  char guard[32] = "";
  if (!met) std::snprintf(guard, sizeof guard, " (asserted <= %.1f%%)", 100 * b.guard);
  std::printf("  %-34s %5.2f%%  goal <= %4.1f%%: %s%s\n", b.name, 100 * b.achieved, 100 * b.goal,
              met ? "met" : "MISSED", guard);
  EXPECT_LE(b.achieved, met ? b.goal : b.guard) << b.name;
  // A guard is the achieved figure of a missed goal, so above it; once the
  // corpus meets a goal, the goal itself is asserted.
  if (!met) {
    EXPECT_GT(b.guard, b.goal) << b.name;
  }
}

class PeakCorpusTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const YAML::Node doc = YAML::LoadFile(TAILOR_PEAK_CORPUS);
    for (const YAML::Node& n : doc["measurements"])
      points_.push_back(evaluate(n));
  }
  static std::vector<Point> points_;
};
std::vector<Point> PeakCorpusTest::points_;

TEST_F(PeakCorpusTest, EstimatesMatchPublishedMeasurementsAcrossStacksAndGpuCounts) {
  const Ratios ratios = profile_ratios();
  std::printf(
      "flags: K settings known, S published as a sum over GPUs, P runtime_fit poor (not in the goal),\n"
      "       E modules_to_save (the embedding and head trained whole beside LoRA)\n");
  std::printf("%-56s %-16s %-10s %-10s %4s %4s %9s %9s %7s\n", "published run", "origin", "runtime", "metric", "gpus",
              "flag", "measured", "estimate", "error");
  std::vector<double> single, multi;
  std::set<std::string> frameworks, origins, goal_origins;
  std::size_t poor = 0, emb = 0;
  for (const Point& p : points_) {
    std::printf("%-56s %-16s %-10s %-10s %4d %4s %8.2fG %8.2fG %+6.1f%%\n", p.id.c_str(), p.origin.c_str(),
                p.runtime.c_str(), p.metric.c_str(), p.gpus, flags(p), p.measured / 1e9, estimate(p, ratios) / 1e9,
                100 * error(p, ratios));
    frameworks.insert(p.framework);
    origins.insert(p.origin);
    poor += p.poor_fit;
    emb += p.modules_to_save;
    if (!p.in_goal()) continue;
    goal_origins.insert(p.origin);
    (p.gpus > 1 ? multi : single).push_back(std::fabs(error(p, ratios)));
  }
  std::printf(
      "corpus: %zu points from %zu origins (%zu frameworks); in the goal statistics %zu points from %zu "
      "origins; apart: %zu runtime_fit poor; %zu with modules_to_save\n",
      points_.size(), origins.size(), frameworks.size(), single.size() + multi.size(), goal_origins.size(), poor, emb);
  // The corpus issue 14 asks for: at least 250 points from 12 independent
  // publishers, 25 of them on several GPUs.
  EXPECT_GE(points_.size(), 250u);
  EXPECT_GE(origins.size(), 12u);
  EXPECT_GE(goal_origins.size(), 12u);
  EXPECT_GE(single.size() + multi.size(), 250u);
  EXPECT_GE(multi.size(), 25u);
  const Spread one = spread(single), several = spread(multi);
  std::printf("in-sample (runtime_profile.cpp's ratios):\n");
  check({"one GPU median |error|", one.median, 0.10, kGuardInOneMedian});
  check({"one GPU p90 |error|", one.p90, 0.25, kGuardInOneP90});
  check({"several GPUs median |error|", several.median, 0.10, kGuardInSeveralMedian});
  check({"several GPUs p90 |error|", several.p90, 0.25, kGuardInSeveralP90});
}

TEST_F(PeakCorpusTest, FittedRatiosReproduceTheRuntimeProfiles) {
  const Fit fit = fit_ratios(points_);
  const Ratios profile = profile_ratios();
  for (dsl::Runtime rt : kRuntimes) {
    for (int kind = 0; kind < 2; ++kind) {
      const auto pairs = fit.pairs.count(rt) ? fit.pairs.at(rt)[kind] : 0;
      std::printf("%-10s %-9s fitted %.4f from %2zu pairs, runtime_profile.cpp %.2f\n", dsl::to_string(rt),
                  kind ? "sharded" : "one GPU", fit.ratios.at(rt)[kind], pairs, profile.at(rt)[kind]);
      EXPECT_NEAR(fit.ratios.at(rt)[kind], profile.at(rt)[kind], 0.02)
          << dsl::to_string(rt) << (kind ? " sharded" : "");
    }
  }
}

// The fallback of strict LOSO against what it stands in for: on the whole
// corpus, hf's ratios fitted from its reserved and nvidia-smi figures against
// their estimates agree with those of its same-run pairs (1.15 against 1.21
// on one GPU, 1.21 against 1.32 sharded: since FSDP1's held reentrant
// checkpoints are modelled, 2026-12-02, the sharded estimates of the
// fms-acceleration runs whose nvidia-smi figures count here are larger, and
// since Answer.AI's held output logits, 2026-12-03, those of its sharded
// reserved figures, whose own two pairs say 1.12 and 1.24), so holding the pairs out
// changes the method's source, not what it measures (within 9%).
TEST_F(PeakCorpusTest, RatiosFromFiguresAgreeWithThoseOfTheSameRunPairs) {
  const Fit fit = fit_ratios(points_);
  for (int kind = 0; kind < 2; ++kind) {
    std::size_t figures = 0;
    const double from_figures = ratio_from_figures(points_, "", dsl::Runtime::kHf, kind, figures);
    const double from_pairs = fit.ratios.at(dsl::Runtime::kHf)[kind];
    std::printf("hf %-9s from %3zu figures %.3f, from %2zu pairs %.3f\n", kind ? "sharded" : "one GPU", figures,
                from_figures, fit.pairs.at(dsl::Runtime::kHf)[kind], from_pairs);
    EXPECT_GE(figures, 30u);
    EXPECT_NEAR(from_figures / from_pairs, 1.0, 0.09) << (kind ? "sharded" : "one GPU");
  }
}

struct Miss {
  const Point* p;
  double error;
};

struct Loso {
  struct Row {
    std::string origin;
    std::size_t apart = 0;
    std::vector<double> abs_errors;
    const Point* worst = nullptr;  // the largest under-estimate
    double worst_error = 0;
    std::array<double, 2> hf{};  // the hf ratios it was predicted with
    std::string leak;            // ratios with no pair left without this origin
  };
  std::vector<Row> rows;
  std::vector<Miss> misses;  // every goal point's held-out error
  Spread one, several;
};

// Each origin's points predicted with the ratios fitted without it.
Loso leave_one_source_out(const std::vector<Point>& points, NoPairLeft fallback) {
  std::set<std::string> origins;
  for (const Point& p : points)
    origins.insert(p.origin);
  const Fit all = fit_ratios(points);
  Loso out;
  std::vector<double> single, multi;
  for (const std::string& origin : origins) {
    const Fit fit = fit_ratios(points, origin, fallback);
    Loso::Row row;
    row.origin = origin;
    row.hf = fit.ratios.at(dsl::Runtime::kHf);
    for (const auto& [rt, n] : all.pairs) {
      for (int kind = 0; kind < 2; ++kind) {
        const std::size_t left = fit.pairs.count(rt) ? fit.pairs.at(rt)[kind] : 0;
        if (n[kind] > 0 && left == 0) {
          row.leak += std::string(" [") + dsl::to_string(rt) + (kind ? " sharded" : " one GPU") + ": no pair left, ";
          if (fallback == NoPairLeft::kProfile) {
            row.leak += "profile's value, fitted on this origin]";
          } else {
            const std::size_t figures = fit.figures.count(rt) ? fit.figures.at(rt)[kind] : 0;
            char text[96];
            std::snprintf(text, sizeof text, "%.3f from %zu figures against their estimates]", fit.ratios.at(rt)[kind],
                          figures);
            row.leak += figures > 0 ? text : "borrowed 1.08]";
          }
        }
      }
    }
    for (const Point& p : points) {
      if (p.origin != origin) continue;
      if (!p.in_goal()) {
        ++row.apart;
        continue;
      }
      const double e = error(p, fit.ratios);
      row.abs_errors.push_back(std::fabs(e));
      (p.gpus > 1 ? multi : single).push_back(std::fabs(e));
      out.misses.push_back({&p, e});
      if (e < row.worst_error) {
        row.worst = &p;
        row.worst_error = e;
      }
    }
    out.rows.push_back(std::move(row));
  }
  out.one = spread(single);
  out.several = spread(multi);
  std::sort(out.misses.begin(), out.misses.end(),
            [](const Miss& a, const Miss& b) { return std::fabs(a.error) > std::fabs(b.error); });
  return out;
}

void print_rows(const Loso& l) {
  std::printf("  %-18s %6s %6s %11s %9s  %-52s %s\n", "held-out origin", "points", "apart", "median|err|", "worst",
              "(largest under-estimate)", "hf ratios");
  for (const Loso::Row& r : l.rows) {
    char median[16] = "-", worst[16] = "none";
    if (!r.abs_errors.empty()) std::snprintf(median, sizeof median, "%.1f%%", 100 * percentile(r.abs_errors, 0.5));
    if (r.worst != nullptr) std::snprintf(worst, sizeof worst, "%+.1f%%", 100 * r.worst_error);
    std::printf("  %-18s %6zu %6zu %11s %9s  %-52s %.3f/%.3f%s\n", r.origin.c_str(), r.abs_errors.size(), r.apart,
                median, worst, r.worst ? r.worst->id.c_str() : "", r.hf[0], r.hf[1], r.leak.c_str());
  }
  std::printf(
      "  overall: one GPU %zu points, median |error| %.1f%%, p90 %.1f%%; several GPUs %zu points, median %.1f%%, "
      "p90 %.1f%%\n",
      l.one.n, 100 * l.one.median, 100 * l.one.p90, l.several.n, 100 * l.several.median, 100 * l.several.p90);
}

TEST_F(PeakCorpusTest, LeaveOneSourceOut) {
  const Loso loso = leave_one_source_out(points_, NoPairLeft::kProfile);
  std::printf("leave-one-source-out (a runtime with no pair left keeps runtime_profile.cpp's ratio):\n");
  print_rows(loso);
  // The same where a ratio whose pairs all came from the held-out origin
  // (fms-acceleration gives every hf pair) is fitted from the other origins'
  // reserved and nvidia-smi figures against their estimates: nothing of an
  // origin reaches its own prediction.
  const Loso strict = leave_one_source_out(points_, NoPairLeft::kFigures);
  std::printf("strict leave-one-source-out (no pair left: fitted from the other origins' figures):\n");
  print_rows(strict);
  // And with the borrowed 1.08 there, as strict LOSO was until 2026-12-02.
  const Loso borrowed = leave_one_source_out(points_, NoPairLeft::kBorrowed);
  std::printf(
      "strict leave-one-source-out with the borrowed %.2f instead: one GPU median %.1f%%, p90 %.1f%%; several "
      "GPUs median %.1f%%, p90 %.1f%%\n",
      kBorrowedRatio, 100 * borrowed.one.median, 100 * borrowed.one.p90, 100 * borrowed.several.median,
      100 * borrowed.several.p90);

  std::printf("largest LOSO misses:\n");
  for (std::size_t i = 0; i < std::min<std::size_t>(10, loso.misses.size()); ++i) {
    const Point& p = *loso.misses[i].p;
    std::printf("  %-56s %-16s %4d gpus %-10s %4s %8.2fG %+6.1f%%\n", p.id.c_str(), p.origin.c_str(), p.gpus,
                p.metric.c_str(), flags(p), p.measured / 1e9, 100 * loso.misses[i].error);
  }

  // Under-estimates beyond 10% where every setting is known: the cases where a
  // plan would trust a figure that runs out of memory.
  std::size_t under = 0, known = 0;
  std::printf("under-estimates beyond 10%% on points with settings_known (LOSO):\n");
  for (const Miss& m : loso.misses) {
    if (!m.p->settings_known) continue;
    ++known;
    if (m.error >= -0.10) continue;
    ++under;
    std::printf("  %-66s %-16s %+6.1f%%\n", m.p->id.c_str(), m.p->origin.c_str(), 100 * m.error);
  }
  std::printf("  %zu of %zu points with settings_known\n", under, known);

  // Outside the goal statistics, printed for what they say.
  const Fit all = fit_ratios(points_);
  std::printf("apart (P runtime_fit poor), whole-corpus ratios:\n");
  for (const Point& p : points_) {
    if (p.in_goal()) continue;
    std::printf("  %-56s %-16s %4s %4d gpus %8.2fG %8.2fG %+6.1f%%\n", p.id.c_str(), p.origin.c_str(), flags(p), p.gpus,
                p.measured / 1e9, estimate(p, all.ratios) / 1e9, 100 * error(p, all.ratios));
  }

  std::printf("LOSO against the goals:\n");
  check({"one GPU median |error|", loso.one.median, 0.10, kGuardOneMedian});
  check({"one GPU p90 |error|", loso.one.p90, 0.25, kGuardOneP90});
  check({"several GPUs median |error|", loso.several.median, 0.10, kGuardSeveralMedian});
  check({"several GPUs p90 |error|", loso.several.p90, 0.25, kGuardSeveralP90});
  std::printf("strict LOSO against the goals:\n");
  check({"one GPU median |error|", strict.one.median, 0.10, kGuardStrictOneMedian});
  check({"one GPU p90 |error|", strict.one.p90, 0.25, kGuardStrictOneP90});
  check({"several GPUs median |error|", strict.several.median, 0.10, kGuardStrictSeveralMedian});
  check({"several GPUs p90 |error|", strict.several.p90, 0.25, kGuardStrictSeveralP90});
  EXPECT_LE(under, kGuardUnderEstimates) << "under-estimates beyond 10% with settings known";
}

// strategies/headroom.cpp's table against the corpus: each kind of job
// (runtime, adapter, sharding) keeps free at least the 90th percentile of
// its held-out under-estimates (a peak measured (1 + u) times the estimate
// fits a device whose budget keeps u of it free), never less than the
// default; a kind with fewer than kMinPoints points takes its runtime's
// widest row. The test prints the table as headroom.cpp should hold it.
TEST_F(PeakCorpusTest, HeadroomByKindCoversItsHeldOutUnderEstimates) {
  constexpr std::size_t kMinPoints = 3;
  const Loso loso = leave_one_source_out(points_, NoPairLeft::kProfile);
  struct Kind {
    std::vector<double> under;
    double required = 0;
  };
  std::map<std::tuple<dsl::Runtime, Adapter, bool>, Kind> kinds;
  for (const dsl::Runtime rt :
       {dsl::Runtime::kHf, dsl::Runtime::kLitgpt, dsl::Runtime::kTorchtune, dsl::Runtime::kTorchtitan}) {
    for (const Adapter a : {Adapter::kNone, Adapter::kLora, Adapter::kQlora}) {
      for (const bool sharded : {false, true})
        kinds[{rt, a, sharded}];
    }
  }
  for (const Miss& m : loso.misses) {
    // Where a setting was guessed the error is partly the guess's.
    if (!m.p->settings_known) continue;
    kinds[{runtime_named(m.p->runtime), m.p->adapter, m.p->sharded}].under.push_back(std::max(0.0, -m.error));
  }
  std::map<dsl::Runtime, double> widest;
  for (auto& [key, k] : kinds) {
    if (k.under.size() < kMinPoints) continue;
    // Rounded up to the next percent, at least the default.
    k.required = std::max(dsl::kDefaultHeadroom, std::ceil(100 * percentile(k.under, 0.9) - 1e-9) / 100);
    widest[std::get<0>(key)] = std::max(widest[std::get<0>(key)], k.required);
  }
  std::printf("headroom by kind (held-out p90 under-estimate, rounded up, at least %.0f%%):\n",
              100 * dsl::kDefaultHeadroom);
  for (auto& [key, k] : kinds) {
    const auto& [rt, a, sharded] = key;
    if (k.under.size() < kMinPoints) k.required = widest.count(rt) ? widest[rt] : dsl::kDefaultHeadroom;
    // The largest held-out under-estimate of the kind, to a tenth of a
    // percent, which the plan names where it exceeds the headroom.
    const double worst =
        k.under.empty() ? 0.0 : std::round(1000 * *std::max_element(k.under.begin(), k.under.end())) / 1000;
    std::printf("    {Runtime::k%s, Adapter::k%s, %s, %.2f, %zu, %.3f},\n",
                std::string(dsl::to_string(rt)) == "hf"          ? "Hf"
                : std::string(dsl::to_string(rt)) == "litgpt"    ? "Litgpt"
                : std::string(dsl::to_string(rt)) == "torchtune" ? "Torchtune"
                                                                 : "Torchtitan",
                a == Adapter::kNone   ? "None"
                : a == Adapter::kLora ? "Lora"
                                      : "Qlora",
                sharded ? "true" : "false", k.required, k.under.size(), worst);
    const HeadroomRow& row = kind_headroom(rt, a, sharded);
    EXPECT_NEAR(row.headroom, k.required, 1e-9)
        << dsl::to_string(rt) << " " << dsl::to_string(a) << (sharded ? " sharded" : "");
    EXPECT_EQ(row.points, static_cast<int>(k.under.size()))
        << dsl::to_string(rt) << " " << dsl::to_string(a) << (sharded ? " sharded" : "");
    EXPECT_NEAR(row.worst, worst, 1e-9) << dsl::to_string(rt) << " " << dsl::to_string(a)
                                        << (sharded ? " sharded" : "");
  }
  // tailor-runner's plans keep the default its own accuracy tests measured.
  EXPECT_DOUBLE_EQ(kind_headroom(dsl::Runtime::kTailor, Adapter::kQlora, true).headroom, dsl::kDefaultHeadroom);
}

}  // namespace
}  // namespace tailor::strategies
