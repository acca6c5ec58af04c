#include "strategies/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "strategies/constraints.h"
#include "strategies/decision_tree.h"

namespace tailor::strategies {
namespace {

// Ties in estimated speed go to the plan with fewer techniques.
int complexity(const Strategy& s) { return static_cast<int>(Constraints::techniques_of(s).size()); }

// Estimated speed, discounted for each departure from exact training
// (CostConstants::fidelity_margin).
double score(const Candidate& c, const CostConstants& k) {
  return c.throughput.tokens_per_second / (1.0 + k.fidelity_margin * fidelity_cost(c.strategy));
}

// The ranking of plans that fit: better score, then fewer techniques.
struct Better {
  const CostConstants& k;
  bool operator()(const Candidate& a, const Candidate& b) const {
    const double sa = score(a, k), sb = score(b, k);
    if (std::fabs(sa - sb) > 1e-9 * std::max(sa, sb)) return sa > sb;
    return complexity(a.strategy) < complexity(b.strategy);
  }
};

// Every admitted strategy of the candidate space.
std::vector<Strategy> enumerate(const dsl::JobSpec& spec, const Constraints& c) {
  std::vector<Precision> precisions = {Precision::kFp32, Precision::kBf16, Precision::kFp16, Precision::kPureBf16};
  std::vector<std::int64_t> checkpointing = {0, 1, 2, 4};
  if (spec.strategy.gradient_checkpointing) checkpointing = {*spec.strategy.gradient_checkpointing};
  const std::vector<Adapter> adapters = {Adapter::kNone, Adapter::kLora, Adapter::kQlora};
  const std::vector<Optimizer> optimizers = {Optimizer::kAdamw, Optimizer::kAdamw8bit, Optimizer::kSgd};
  const std::vector<Offload> offloads = {Offload::kNone, Offload::kOptimizer, Offload::kOptimizerAndParams};
  const std::int64_t per_gpu = spec.training.global_batch_size / c.num_gpus();

  std::vector<Strategy> out;
  for (Precision p : precisions) {
    for (std::int64_t ck : checkpointing) {
      for (std::int64_t micro : c.micro_batches()) {
        for (Adapter ad : adapters) {
          for (Optimizer opt : optimizers) {
            for (std::int64_t zero = 0; zero <= 3; ++zero) {
              for (Offload off : offloads) {
                Strategy s;
                s.precision = p;
                s.checkpoint_every = ck;
                s.micro_batch_size = micro;
                s.grad_accumulation = per_gpu / micro;
                s.adapter = ad;
                s.lora_rank = ad == Adapter::kNone ? 0 : spec.strategy.lora.r;
                s.quantization = ad == Adapter::kQlora ? Quantization::kNf4Double : Quantization::kNone;
                s.optimizer = opt;
                s.zero_stage = zero;
                s.offload = off;
                s.num_gpus = c.num_gpus();
                if (c.admits(s)) out.push_back(s);
              }
            }
          }
        }
      }
    }
  }
  return out;
}

std::string why_it_lost(const Candidate& chosen, const Candidate& other) {
  const double ratio = chosen.throughput.tokens_per_second / other.throughput.tokens_per_second;
  char buf[192];
  if (ratio >= 1.1) {
    std::snprintf(buf, sizeof buf, "fits, but %.2fx slower (%.0f vs %.0f tokens/s)", ratio,
                  other.throughput.tokens_per_second, chosen.throughput.tokens_per_second);
  } else if (ratio >= 1.0) {
    std::snprintf(buf, sizeof buf, "fits, but %.1f%% slower (%.0f vs %.0f tokens/s)", (ratio - 1.0) * 100,
                  other.throughput.tokens_per_second, chosen.throughput.tokens_per_second);
  } else if (ratio > 0.995) {
    std::snprintf(buf, sizeof buf, "fits and is as fast (%.0f tokens/s), but changes what is trained more",
                  other.throughput.tokens_per_second);
  } else {
    std::snprintf(buf, sizeof buf,
                  "fits and is %.2fx faster (%.0f tokens/s), but changes what is trained more for too little speed",
                  1.0 / ratio, other.throughput.tokens_per_second);
  }
  return buf;
}

std::string does_not_fit(const Candidate& c, Bytes budget, Bytes host_budget) {
  if (c.over_budget.count() > 0) {
    return "does not fit: needs " + c.memory.per_device.total().to_string() + " per device of a " +
           budget.to_string() + " budget";
  }
  return "does not fit: needs " + c.memory.host.to_string() + " of host RAM of a " + host_budget.to_string() +
         " budget";
}

// A key for "kind of plan": alternatives show the best of each other kind.
// bf16 and fp16 mixed precision are one kind, and so are ZeRO stages: the
// search already picked the best of those.
std::string kind_of(const Strategy& s) {
  const char* precision = s.precision == Precision::kFp32 ? "fp32" : s.precision == Precision::kPureBf16 ? "pure" : "mixed";
  return std::string(precision) + "/" + (s.checkpoint_every > 0 ? "ckpt" : "nockpt") + "/" +
         dsl::to_string(s.adapter) + "/" + dsl::to_string(s.optimizer) + "/" + dsl::to_string(s.offload);
}

// Bytes over budget, device and host together: how far from fitting.
Bytes total_over(const Candidate& c) {
  return std::max(Bytes(0), c.over_budget) + std::max(Bytes(0), c.host_over_budget);
}

struct SearchResult {
  std::vector<Candidate> all;
  const Candidate* best = nullptr;     // fastest that fits
  const Candidate* closest = nullptr;  // smallest overshoot when nothing fits
};

SearchResult search(const dsl::JobSpec& spec, const Hardware& hw, const Constraints& c, const PlanOptions& o) {
  SearchResult r;
  const Better better{o.cost};
  for (Strategy s : enumerate(spec, c)) {
    // GPUs: the fused kernels (or what the options say, e.g. to compare with
    // eager-attention figures). The CPU: fused, and in half precision also
    // materialised, which is faster there but keeps s^2 scores per layer.
    // No fused kernel caps scores (Gemma 2's attn_logit_softcap): such
    // models attend materialised everywhere.
    const bool capped = spec.model.arch.attn_logit_softcap > 0;
    s.attention = capped ? Attention::kStandard : hw.cpu_only() ? Attention::kMemoryEfficient : o.attention;
    r.all.push_back(evaluate(spec, hw, s, o));
    if (hw.cpu_only() && s.precision != Precision::kFp32 && !capped) {
      s.attention = Attention::kStandard;
      r.all.push_back(evaluate(spec, hw, s, o));
    }
  }
  for (const Candidate& cand : r.all) {
    if (cand.fits && (r.best == nullptr || better(cand, *r.best))) r.best = &cand;
    if (r.closest == nullptr || total_over(cand) < total_over(*r.closest)) r.closest = &cand;
  }
  return r;
}

}  // namespace

Candidate evaluate(const dsl::JobSpec& spec, const Hardware& hw, const Strategy& s, const PlanOptions& o) {
  const bool on_cpu = hw.cpu_only();
  const Device& dev = on_cpu ? hw.cpu : hw.gpus.front();
  MemoryInput in;
  in.arch = &spec.model.arch;
  in.batch = {s.micro_batch_size, spec.data.seq_len};
  in.strategy = s;
  in.lora_targets = spec.strategy.lora.targets;
  in.lora_dropout = spec.strategy.lora.dropout;
  in.on_gpu = !on_cpu;
  // tailor-runner's fused kernels cover fp32 and bf16 on the CPU.
  in.fused_kernels = on_cpu && s.precision != Precision::kFp16;
  Candidate c;
  c.strategy = s;
  c.memory = estimate_memory(in, o.memory);
  c.throughput = estimate_throughput(spec.model.arch, s, spec.data.seq_len, spec.training.global_batch_size, dev, o.cost);
  const double keep = 1.0 - spec.resources.headroom;
  const Bytes budget(static_cast<std::int64_t>(static_cast<double>(dev.memory.count()) * keep));
  // On the CPU the model and the host share one budget.
  const Bytes host_budget(static_cast<std::int64_t>(static_cast<double>(hw.host_memory.count()) * keep));
  c.over_budget = c.memory.per_device.total() - budget;
  c.host_over_budget = on_cpu ? Bytes(-1) : c.memory.host - host_budget;
  c.fits = c.over_budget.count() <= 0 && c.host_over_budget.count() <= 0;
  return c;
}

Plan plan_job(const dsl::JobSpec& spec, const Hardware& hw, const PlanOptions& o) {
  Plan plan;
  plan.hardware = hw;
  plan.on_cpu = hw.cpu_only();
  plan.headroom = spec.resources.headroom;
  plan.seq_len = spec.data.seq_len;
  plan.global_batch = spec.training.global_batch_size;
  const Device& dev = plan.on_cpu ? hw.cpu : hw.gpus.front();
  const double keep = 1.0 - spec.resources.headroom;
  plan.budget_per_device = Bytes(static_cast<std::int64_t>(static_cast<double>(dev.memory.count()) * keep));
  plan.host_budget = Bytes(static_cast<std::int64_t>(static_cast<double>(hw.host_memory.count()) * keep));

  const Constraints c(spec, hw);
  if (!c.error().empty()) {
    plan.errors.push_back(c.error());
    return plan;
  }
  plan.decisions = walk_decision_tree(spec, hw, c, o);
  const SearchResult r = search(spec, hw, c, o);
  plan.candidates_considered = static_cast<int>(r.all.size());
  if (r.all.empty()) {
    plan.errors.push_back("no strategy satisfies the pinned knobs and allow/forbid lists on " + hw.describe());
    return plan;
  }
  plan.fits = r.best != nullptr;
  plan.chosen = plan.fits ? *r.best : *r.closest;
  add_search_decision(plan, r.best, plan.candidates_considered);

  // Alternatives: the best candidate of each other kind, fitting ones first.
  const Better better{o.cost};
  std::map<std::string, const Candidate*> best_of_kind;
  for (const Candidate& cand : r.all) {
    const std::string k = kind_of(cand.strategy);
    if (k == kind_of(plan.chosen.strategy)) continue;
    auto& slot = best_of_kind[k];
    const bool improves = slot == nullptr || (cand.fits && !slot->fits) ||
                        (cand.fits == slot->fits && (cand.fits ? better(cand, *slot) : cand.over_budget < slot->over_budget));
    if (improves) slot = &cand;
  }
  std::vector<const Candidate*> alts;
  for (const auto& [k, cand] : best_of_kind) alts.push_back(cand);
  std::sort(alts.begin(), alts.end(), [&](const Candidate* a, const Candidate* b) {
    if (a->fits != b->fits) return a->fits;
    return a->fits ? better(*a, *b) : a->over_budget < b->over_budget;
  });
  for (const Candidate* a : alts) {
    if (static_cast<int>(plan.alternatives.size()) >= o.max_alternatives) break;
    plan.alternatives.push_back(
        {*a, a->fits ? why_it_lost(plan.chosen, *a) : does_not_fit(*a, plan.budget_per_device, plan.host_budget)});
  }

  if (!plan.fits) {
    plan.shortfall = std::max(Bytes(0), plan.chosen.over_budget);
    plan.host_shortfall = std::max(Bytes(0), plan.chosen.host_over_budget);
    const dsl::Catalog& catalog = o.catalog ? *o.catalog : dsl::Catalog::builtin();
    if (o.find_smallest_gpu) {
      std::vector<const dsl::GpuModel*> gpus;
      for (const dsl::GpuModel& g : catalog.gpus()) gpus.push_back(&g);
      std::sort(gpus.begin(), gpus.end(), [](auto* a, auto* b) { return a->memory < b->memory; });
      for (const dsl::GpuModel* g : gpus) {
        if (g->memory <= dev.memory && !plan.on_cpu) continue;
        Hardware other = hw;
        other.gpus.assign(static_cast<std::size_t>(c.num_gpus()), device_from_catalog(*g));
        const Constraints oc(spec, other);
        if (!oc.error().empty()) continue;
        const SearchResult sr = search(spec, other, oc, o);
        if (sr.best != nullptr) {
          plan.smallest_fitting_gpu = std::to_string(c.num_gpus()) + "x " + g->key;
          break;
        }
      }
    }
  }
  return plan;
}

}  // namespace tailor::strategies
