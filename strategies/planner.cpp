#include "strategies/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "strategies/constraints.h"
#include "strategies/decision_tree.h"
#include "strategies/headroom.h"
#include "strategies/knobs.h"
#include "strategies/memory_model.h"
#include "strategies/runtime_profile.h"

namespace tailor::strategies {
namespace {

// Ties in estimated speed go to the plan with fewer techniques.
int complexity(const Strategy& s) { return static_cast<int>(Constraints::techniques_of(s).size()); }

// Estimated speed, discounted for each departure from exact training
// (CostConstants::fidelity_margin).
double score(const Candidate& c, const CostConstants& k) {
  return c.throughput.tokens_per_second / (1.0 + k.fidelity_margin * fidelity_cost(c.strategy));
}

// The speed order (a strict weak order, for sorting): better score, then
// fewer techniques.
struct Faster {
  const CostConstants& k;
  bool operator()(const Candidate& a, const Candidate& b) const {
    const double sa = score(a, k), sb = score(b, k);
    if (std::fabs(sa - sb) > 1e-9 * std::max(sa, sb)) return sa > sb;
    return complexity(a.strategy) < complexity(b.strategy);
  }
};

// Spare memory is measured against the plan's own budget (its kind's headroom).
bool comfortable(const Candidate& c, const PlanOptions& o) {
  return static_cast<double>(c.spare().count()) >= o.comfortable_spare * static_cast<double>(c.budget.count());
}

// The policy's choice among `fitting` (PlanOptions::small_gain): each
// preference in turn (no offload, comfortable spare memory, fewer
// techniques) narrows the set to the plans that have it, when the best of
// them is within the tie band of the fastest plan left; then the fastest.
// Null when `fitting` is empty.
const Candidate* choose(std::vector<const Candidate*> set, const PlanOptions& o) {
  const Faster faster{o.cost};
  auto fastest_of = [&](const std::vector<const Candidate*>& v) {
    const Candidate* f = nullptr;
    for (const Candidate* c : v) {
      if (f == nullptr || faster(*c, *f)) f = c;
    }
    return f;
  };
  if (set.empty()) return nullptr;
  // Keep only the plans that have it, when the fastest of them is within
  // the band of the fastest plan left; the next preference measures its
  // band from the fastest of those.
  auto prefer = [&](auto&& has) {
    const double floor = score(*fastest_of(set), o.cost) * (1.0 - o.small_gain);
    std::vector<const Candidate*> kept;
    for (const Candidate* c : set) {
      if (has(*c)) kept.push_back(c);
    }
    if (!kept.empty() && score(*fastest_of(kept), o.cost) >= floor) set = std::move(kept);
  };
  prefer([](const Candidate& c) { return c.strategy.offload == Offload::kNone; });
  prefer([&](const Candidate& c) { return comfortable(c, o); });
  int fewest = 1 << 20;
  const double floor = score(*fastest_of(set), o.cost) * (1.0 - o.small_gain);
  for (const Candidate* c : set) {
    if (score(*c, o.cost) >= floor) fewest = std::min(fewest, complexity(c->strategy));
  }
  prefer([&](const Candidate& c) { return complexity(c.strategy) == fewest; });
  return fastest_of(set);
}

// The quantised base with the fewest bytes a parameter.
Quantization smallest_base(const dsl::ModelArch& a) {
  Quantization best = Quantization::kNone;
  for (Quantization q : every_value<Quantization>()) {
    if (q == Quantization::kNone) continue;
    if (best == Quantization::kNone ||
        quantized_bytes_per_param(q, a.hidden) < quantized_bytes_per_param(best, a.hidden)) {
      best = q;
    }
  }
  return best;
}

// Every admitted strategy of the candidate space.
std::vector<Strategy> enumerate(const dsl::JobSpec& spec, const Constraints& c) {
  const std::vector<Precision> precisions = every_value<Precision>();
  std::vector<std::int64_t> checkpointing = {0, 1, 2, 4};
  if (spec.strategy.gradient_checkpointing) checkpointing = {*spec.strategy.gradient_checkpointing};
  const std::vector<Adapter> adapters = every_value<Adapter>();
  // QLoRA's bases differ only in the bytes they store a parameter, and
  // fewer bytes are both smaller and faster to dequantise (cost_model.cpp;
  // fidelity_cost does not tell them apart): unpinned, the smallest base of
  // the name table is the only one worth estimating; a pin is searched as
  // pinned.
  std::vector<Quantization> quantizations = {Quantization::kNone, smallest_base(spec.model.arch)};
  if (spec.strategy.quantization) quantizations = {*spec.strategy.quantization};
  const std::vector<Optimizer> optimizers = every_value<Optimizer>();
  const std::vector<Offload> offloads = every_value<Offload>();

  std::vector<Strategy> out;
  for (std::int64_t ranks : c.rank_counts()) {
    const std::int64_t per_rank = spec.training.global_batch_size / ranks;
    for (Precision p : precisions) {
      for (std::int64_t ck : checkpointing) {
        for (std::int64_t micro : c.micro_batches_for(ranks)) {
          for (Adapter ad : adapters) {
            for (Quantization q : quantizations) {
              // Only QLoRA quantises its base.
              if ((ad == Adapter::kQlora) != (q != Quantization::kNone)) continue;
              for (Optimizer opt : optimizers) {
                for (std::int64_t zero = 0; zero <= 3; ++zero) {
                  for (Offload off : offloads) {
                    Strategy s;
                    s.precision = p;
                    s.checkpoint_every = ck;
                    s.micro_batch_size = micro;
                    s.grad_accumulation = per_rank / micro;
                    s.adapter = ad;
                    s.lora_rank = ad == Adapter::kNone ? 0 : spec.strategy.lora.r;
                    s.quantization = q;
                    s.optimizer = opt;
                    s.zero_stage = zero;
                    s.offload = off;
                    s.num_gpus = ranks;
                    if (c.admits(s)) out.push_back(s);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

std::string why_it_lost(const Candidate& chosen, const Candidate& other, const PlanOptions& o) {
  if (!other.executable()) return "fits, but tailor-runner cannot run it: " + other.not_executable;
  const double ratio = chosen.throughput.tokens_per_second / other.throughput.tokens_per_second;
  char buf[224];
  if (ratio >= 1.1) {
    std::snprintf(buf, sizeof buf, "fits, but %.2fx slower (%.0f vs %.0f tokens/s)", ratio,
                  other.throughput.tokens_per_second, chosen.throughput.tokens_per_second);
  } else if (ratio >= 1.0) {
    std::snprintf(buf, sizeof buf, "fits, but %.1f%% slower (%.0f vs %.0f tokens/s)", (ratio - 1.0) * 100,
                  other.throughput.tokens_per_second, chosen.throughput.tokens_per_second);
  } else if (ratio > 1.0 - o.small_gain) {
    std::snprintf(buf, sizeof buf,
                  "fits and is %.1f%% faster (%.0f tokens/s), within the cost model's error; the chosen plan %s",
                  (1.0 / ratio - 1.0) * 100, other.throughput.tokens_per_second,
                  other.strategy.offload != Offload::kNone && chosen.strategy.offload == Offload::kNone
                      ? "needs no offload"
                  : other.spare() < chosen.spare() ? ("keeps " + chosen.spare().to_string() + " free, not " +
                                                      other.spare().to_string()).c_str()
                                                   : "uses fewer techniques or changes less of what is trained");
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

// Whether the planner may choose activation offloading for a GPU plan on
// its own. Its CUDA path (a side stream, pinned buffers, a prefetch a layer
// ahead) has not run on a GPU yet; a spec that pins it gets it.
constexpr bool kActivationOffloadVerifiedOnGpu = false;

// A key for "kind of plan": alternatives show the best of each other kind.
// bf16 and fp16 mixed precision are one kind, and so are ZeRO stages and
// rank counts: the search already picked the best of those.
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
  const Candidate* best = nullptr;       // the policy's choice among executable plans that fit
  const Candidate* best_any = nullptr;   // the same, were every plan executable
  const Candidate* closest = nullptr;    // the executable plan nearest to fitting when none fits
  const Candidate* fastest = nullptr;    // the fastest executable plan that fits
  std::vector<const Candidate*> fitting;  // every executable plan that fits
};

SearchResult search(const dsl::JobSpec& spec, const Hardware& hw, const Constraints& c, const PlanOptions& o) {
  SearchResult r;
  // tailor-runner fuses the head with the loss where the logits do not
  // fit: never faster (cost_model.h), so the fused form is only worth
  // estimating where the logits' form fails.
  // A reward model has no vocabulary head to fuse.
  const bool can_fuse_head =
      spec.planner.runtime == dsl::Runtime::kTailor && !dsl::scores_sequences(spec.training.method);
  // Activation offloading, pinned: every plan that checkpoints does it, and
  // one that does not checkpoint cannot. Left to the planner: on GPUs where
  // nothing fits without it, once a GPU run has verified its CUDA path
  // (runner/README.md); on the CPU never, where the host is the device.
  const std::optional<bool> offload_pin = spec.strategy.activation_offload;
  const bool may_offload = offload_pin.value_or(kActivationOffloadVerifiedOnGpu && !hw.cpu_only()) &&
                           spec.planner.runtime == dsl::Runtime::kTailor;
  const auto add = [&](Strategy s) {
    if (offload_pin.value_or(false)) {
      if (s.checkpoint_every == 0) return;
      s.activation_offload = true;
    }
    r.all.push_back(evaluate(spec, hw, s, o));
    if (r.all.back().fits) return;
    if (can_fuse_head) {
      s.cross_entropy = CrossEntropy::kFusedLinear;
      r.all.push_back(evaluate(spec, hw, s, o));
      if (r.all.back().fits) return;
    }
    if (may_offload && !s.activation_offload && s.checkpoint_every > 0) {
      s.activation_offload = true;
      r.all.push_back(evaluate(spec, hw, s, o));
    }
  };
  for (Strategy s : enumerate(spec, c)) {
    // GPUs: the fused kernels (or what the options say, e.g. to compare with
    // eager-attention figures). The CPU: fused, and in half precision also
    // materialised, which is faster there but keeps s^2 scores per layer.
    // No fused kernel caps scores (Gemma 2's attn_logit_softcap): such
    // models attend materialised everywhere.
    const bool capped = spec.model.arch.attn_logit_softcap > 0;
    s.attention = capped ? Attention::kStandard : hw.cpu_only() ? Attention::kMemoryEfficient : o.attention;
    add(s);
    if (hw.cpu_only() && s.precision != Precision::kFp32 && !capped) {
      s.attention = Attention::kStandard;
      add(s);
    }
  }
  std::vector<const Candidate*> fitting, fitting_any;
  for (const Candidate& cand : r.all) {
    if (cand.fits) fitting_any.push_back(&cand);
    if (cand.fits && cand.executable()) fitting.push_back(&cand);
    if (cand.executable() && (r.closest == nullptr || total_over(cand) < total_over(*r.closest))) r.closest = &cand;
  }
  r.best = choose(fitting, o);
  r.fitting = fitting;
  const Faster faster{o.cost};
  for (const Candidate* f : fitting) {
    if (r.fastest == nullptr || faster(*f, *r.fastest)) r.fastest = f;
  }
  r.best_any = choose(fitting_any, o);
  return r;
}

}  // namespace

namespace {

// The spec with knob `k` left to the planner.
dsl::JobSpec unpinned(const dsl::JobSpec& spec, dsl::Knob k) {
  dsl::JobSpec free = spec;
  for_each_knob([&](const auto& row) {
    if (row.knob == k) row.pinned_in(free).reset();
  });
  return free;
}

bool same_knob_value(const Strategy& a, const Strategy& b, dsl::Knob k) {
  bool same = true;
  for_each_knob([&](const auto& row) {
    if (row.knob == k) same = a.*row.value == b.*row.value;
  });
  return same;
}

std::vector<PinAdvice> advise_unpinning(const dsl::JobSpec& spec, const Hardware& hw, const Constraints& c,
                                        const Plan& plan, PlanOptions o) {
  o.advise_unpinning = false;
  o.find_smallest_gpu = false;
  constexpr dsl::Knob kKnobs[] = {dsl::Knob::kAdapter,       dsl::Knob::kQuantization, dsl::Knob::kPrecision,
                                  dsl::Knob::kOffload,       dsl::Knob::kZeroStage,    dsl::Knob::kOptimizer,
                                  dsl::Knob::kCheckpointing, dsl::Knob::kMicroBatch};
  std::vector<PinAdvice> out;
  for (dsl::Knob k : kKnobs) {
    if (!c.pinned(k)) continue;
    // An adapter is advised only where this plan does not fit or offloads:
    // no search where that cannot be.
    if (k == dsl::Knob::kAdapter && plan.fits && plan.chosen.strategy.offload == Offload::kNone) continue;
    const dsl::JobSpec free = unpinned(spec, k);
    const Constraints fc(free, hw);
    if (!fc.error().empty()) continue;
    const SearchResult r = search(free, hw, fc, o);
    if (r.best == nullptr || same_knob_value(r.best->strategy, plan.chosen.strategy, k)) continue;
    const Candidate& b = *r.best;
    const double ratio = b.throughput.tokens_per_second / std::max(1e-9, plan.chosen.throughput.tokens_per_second);
    std::string gain;
    if (!plan.fits) {
      gain = "fits";
    } else if (plan.chosen.strategy.offload != Offload::kNone && b.strategy.offload == Offload::kNone) {
      gain = "fits without offload";
    } else if (k != dsl::Knob::kAdapter && ratio > 1.0 + o.small_gain) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "is %.2fx faster", ratio);
      gain = buf;
    } else {
      continue;
    }
    char speed[64];
    std::snprintf(speed, sizeof speed, "%.0f tokens/s", b.throughput.tokens_per_second);
    out.push_back({k, b,
                   b.strategy.describe() + " " + gain + " at " + b.memory.per_device.total().to_string() +
                       (plan.on_cpu ? "" : " per GPU") + " (" + speed + "): unpin " + dsl::knob_path(k)});
  }
  return out;
}

// Where nothing fits on GPUs and the spec leaves activation offloading to
// the planner: the plan with it pinned, when that one fits.
std::optional<Alternative> fits_with_activation_offload(const dsl::JobSpec& spec, const Hardware& hw, PlanOptions o) {
  if (hw.cpu_only() || spec.planner.runtime != dsl::Runtime::kTailor || spec.strategy.activation_offload) {
    return std::nullopt;
  }
  o.advise_unpinning = false;
  o.find_smallest_gpu = false;
  dsl::JobSpec pinned = spec;
  pinned.strategy.activation_offload = true;
  const Constraints pc(pinned, hw);
  if (!pc.error().empty()) return std::nullopt;
  const SearchResult r = search(pinned, hw, pc, o);
  if (r.best == nullptr) return std::nullopt;
  return Alternative{*r.best,
                     "fits with strategy.activation_offload: true (chosen only when pinned: its CUDA path has not "
                     "run on a GPU yet)"};
}

}  // namespace

namespace {

// The policy's choices in turn among `fitting`, each without the ones
// before, as far as one runner process can measure them (one rank); at
// most `limit`, `first` (when given) first.
std::vector<const Candidate*> policy_order(std::vector<const Candidate*> fitting, const Candidate* first,
                                           const PlanOptions& o, std::size_t limit) {
  std::vector<const Candidate*> out;
  if (first != nullptr) out.push_back(first);
  // A probe's candidates run as many ranks as the plan's own choice: the
  // job holds those devices (or cores), whichever candidate it trains.
  const std::int64_t ranks = first != nullptr ? first->strategy.num_gpus : 1;
  std::erase_if(fitting, [&](const Candidate* c) { return c->strategy.num_gpus != ranks || c == first; });
  while (out.size() < limit) {
    const Candidate* next = choose(fitting, o);
    if (next == nullptr) break;
    out.push_back(next);
    std::erase(fitting, next);
  }
  return out;
}

// strategy.probe: the plan's own choice, then the policy's next choices.
void choose_probe_candidates(const dsl::JobSpec& spec, const SearchResult& r, Plan& plan, const PlanOptions& o) {
  plan.probe_requested = spec.strategy.probe;
  plan.probe_fidelity_margin = o.cost.fidelity_margin;
  for (const Candidate* c : policy_order(r.fitting, r.best, o, static_cast<std::size_t>(plan.probe_requested))) {
    plan.probe_candidates.push_back(*c);
  }
  if (static_cast<std::int64_t>(plan.probe_candidates.size()) < plan.probe_requested) {
    const std::int64_t ranks = plan.chosen.strategy.num_gpus;
    plan.probe_limited = std::to_string(plan.probe_candidates.size()) + " of the " +
                         std::to_string(plan.probe_requested) + " plans asked for: no other plan of " +
                         (ranks > 1 ? std::to_string(ranks) + " ranks" : std::string("one process")) + " fits and runs";
  }
}

}  // namespace

Plan plan_job(const dsl::JobSpec& spec, const Hardware& hw, const PlanOptions& o) {
  Plan plan;
  plan.hardware = hw;
  plan.on_cpu = hw.cpu_only();
  // Until a plan is chosen, the headroom of the kind the spec pins or
  // tailor-runner's (an error names the hardware, not a budget).
  plan.headroom = headroom_for(spec, Strategy{});
  if (o.calibration && o.calibration->runs > 0) plan.calibration = o.calibration;
  plan.seq_len = spec.data.seq_len;
  plan.global_batch = spec.training.global_batch_size;
  const Device dev = rank_device(spec, hw);
  plan.budget_per_device =
      Bytes(static_cast<std::int64_t>(static_cast<double>(dev.memory.count()) * (1.0 - plan.headroom)));
  plan.host_budget =
      Bytes(static_cast<std::int64_t>(static_cast<double>(hw.host_memory.count()) * (1.0 - plan.headroom)));

  const Constraints c(spec, hw);
  if (!c.error().empty()) {
    plan.errors.push_back(c.error());
    return plan;
  }
  const SearchResult r = search(spec, hw, c, o);
  plan.candidates_considered = static_cast<int>(r.all.size());
  if (r.all.empty()) {
    // The pinned knobs as written say why, where a pin is the obstacle.
    const std::string why = c.why_not(c.baseline());
    plan.errors.push_back("no strategy satisfies the pinned knobs and allow/forbid lists on " + hw.describe() +
                          (why.empty() ? "" : ": " + why));
    return plan;
  }
  if (r.closest == nullptr) {
    // Nothing admitted is executable: say what the runner lacks for the
    // candidate nearest to fitting.
    const Candidate* nearest = &r.all.front();
    for (const Candidate& cand : r.all) {
      if (total_over(cand) < total_over(*nearest)) nearest = &cand;
    }
    plan.errors.push_back("tailor-runner cannot run any strategy the spec allows on " + hw.describe() + ": " +
                          nearest->not_executable);
    return plan;
  }
  plan.fits = r.best != nullptr;
  plan.chosen = plan.fits ? *r.best : *r.closest;
  // The plan's budget is its chosen kind's (headroom.h).
  plan.headroom = headroom_for(spec, plan.chosen.strategy);
  plan.budget_per_device = plan.chosen.budget;
  plan.host_budget = plan.chosen.host_budget;
  if (r.best_any != nullptr && !r.best_any->executable()) {
    plan.preferred_if_executable = Alternative{*r.best_any, "tailor-runner cannot run it: " + r.best_any->not_executable};
  }
  if (r.best != nullptr && r.fastest != r.best) {
    plan.fastest_by_estimate = Alternative{*r.fastest, why_it_lost(*r.best, *r.fastest, o)};
  }
  plan.decisions = walk_decision_tree(spec, hw, c, o, plan);

  // Alternatives: the best candidate of each other kind: fitting and
  // executable first, then fitting, then nearest to fitting.
  const Faster faster{o.cost};
  auto rank = [](const Candidate& x) { return x.fits ? (x.executable() ? 0 : 1) : 2; };
  auto before = [&](const Candidate& a, const Candidate& b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    return a.fits ? faster(a, b) : total_over(a) < total_over(b);
  };
  std::map<std::string, const Candidate*> best_of_kind;
  for (const Candidate& cand : r.all) {
    const std::string k = kind_of(cand.strategy);
    if (k == kind_of(plan.chosen.strategy)) continue;
    auto& slot = best_of_kind[k];
    if (slot == nullptr || before(cand, *slot)) slot = &cand;
  }
  std::vector<const Candidate*> alts;
  for (const auto& [k, cand] : best_of_kind) alts.push_back(cand);
  std::sort(alts.begin(), alts.end(), [&](const Candidate* a, const Candidate* b) { return before(*a, *b); });
  for (const Candidate* a : alts) {
    if (static_cast<int>(plan.alternatives.size()) >= o.max_alternatives) break;
    plan.alternatives.push_back(
        {*a, a->fits ? why_it_lost(plan.chosen, *a, o) : does_not_fit(*a, a->budget, a->host_budget)});
  }

  if (o.advise_unpinning) plan.advice = advise_unpinning(spec, hw, c, plan, o);
  if (o.advise_unpinning && !plan.fits) plan.with_activation_offload = fits_with_activation_offload(spec, hw, o);
  if (spec.strategy.probe > 0 && plan.fits) choose_probe_candidates(spec, r, plan, o);

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

std::vector<Candidate> plans_in_policy_order(const dsl::JobSpec& spec, const Hardware& hw, const PlanOptions& o) {
  const Constraints c(spec, hw);
  if (!c.error().empty()) return {};
  const SearchResult r = search(spec, hw, c, o);
  std::vector<Candidate> out;
  for (const Candidate* p : policy_order(r.fitting, nullptr, o, r.fitting.size())) {
    out.push_back(*p);
  }
  return out;
}

}  // namespace tailor::strategies
