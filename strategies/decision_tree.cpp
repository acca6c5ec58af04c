#include "strategies/decision_tree.h"

#include <algorithm>
#include <cstdio>

namespace tailor::strategies {
namespace {

std::string largest_components(const MemoryBreakdown& m) {
  std::vector<std::pair<Bytes, const char*>> parts;
  for (const MemoryComponent& c : kMemoryComponents) parts.emplace_back(m.*c.member, c.label);
  std::stable_sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out;
  for (int i = 0; i < 3; ++i) {
    if (parts[i].first.count() <= 0) break;
    out += std::string(i ? ", " : "largest: ") + parts[i].second + " " + parts[i].first.to_string();
  }
  return out;
}

// QLoRA's base in words, for its rung's question.
const char* base_words(Quantization q) {
  switch (q) {
    case Quantization::kNf4Double: return "4-bit NF4 base weights with double quantisation";
    case Quantization::kNf4: return "4-bit NF4 base weights";
    case Quantization::kInt8: return "8-bit base weights";
    case Quantization::kNone: break;
  }
  return "base weights as trained";
}

std::string tokens_per_second(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f tokens/s", v);
  return buf;
}

// The trace walks from the spec as written to the chosen strategy, one rung
// of the tree at a time.
class Walker {
 public:
  Walker(const dsl::JobSpec& spec, const Hardware& hw, const Constraints& c, const PlanOptions& o, const Plan& plan)
      : spec_(spec), hw_(hw), c_(c), o_(o), plan_(plan), target_(plan.chosen.strategy), cur_(c.baseline()) {
    // The attention form follows the target from the start: on GPUs it is
    // not a rung, on the CPU it is the last one.
    cur_.attention = hw.cpu_only() ? Attention::kMemoryEfficient : target_.attention;
    if (spec.model.arch.attn_logit_softcap > 0) cur_.attention = Attention::kStandard;
    cur_eval_ = evaluate(spec_, hw_, cur_, o_);
  }

  std::vector<Decision> run() {
    Decision first = measure("as_written", "Does the job fit as written (" + cur_.describe() + ")?", cur_eval_);
    first.verdict = cur_eval_.fits ? Verdict::kFits : Verdict::kDoesNotFit;
    if (!cur_eval_.fits) first.reason = largest_components(cur_eval_.memory.per_device);
    out_.push_back(first);

    ranks();
    const bool bf16 = c_.device().bf16;
    const Precision mixed = bf16 ? Precision::kBf16 : Precision::kFp16;
    const Precision to = target_.precision != cur_.precision ? target_.precision : mixed;
    rung("precision", precision_question(to), target_.precision != cur_.precision,
         [&](Strategy& s) { s.precision = to; }, std::string("use ") + dsl::to_string(to) + " precision");
    const std::int64_t every = target_.checkpoint_every != cur_.checkpoint_every ? target_.checkpoint_every : 1;
    rung("checkpointing",
         every == 1 ? "Gradient checkpointing (keep each layer's input, recompute the layer in backward)?"
                    : "Gradient checkpointing every " + std::to_string(every) + " layers?",
         target_.checkpoint_every != cur_.checkpoint_every, [&](Strategy& s) { s.checkpoint_every = every; },
         every == 1 ? "checkpoint every layer" : "checkpoint every " + std::to_string(every) + " layers");
    if (spec_.planner.runtime == dsl::Runtime::kTailor) {
      rung("fused_cross_entropy",
           "Fuse the output projection with the loss (a slice of tokens at a time, no logits tensor)?",
           target_.cross_entropy == CrossEntropy::kFusedLinear && cur_.cross_entropy != CrossEntropy::kFusedLinear,
           [](Strategy& s) { s.cross_entropy = CrossEntropy::kFusedLinear; }, "fuse the head with the loss");
      // Only where the plan offloads: the planner does not choose it on its
      // own yet (planner.cpp), so it is no step for other plans.
      if (target_.activation_offload) {
        rung(
            "activation_offload",
            "Offload activations (each checkpointed layer's input to host memory, brought back a layer ahead of "
            "its backward)?",
            target_.activation_offload && !cur_.activation_offload, [](Strategy& s) { s.activation_offload = true; },
            "offload activations");
      }
    }
    micro_batch();
    if (cur_.num_gpus > 1) {
      const std::int64_t stage = std::clamp<std::int64_t>(target_.zero_stage, 1, 2);
      rung("zero_1_2",
           "ZeRO-" + std::to_string(stage) + " (shard optimizer states and master weights" +
               (stage == 2 ? ", and gradients," : "") + " over " + ranks_text() + ")?",
           target_.zero_stage >= 1 && cur_.zero_stage < 1,
           [&](Strategy& s) { s.zero_stage = std::max(s.zero_stage, stage); }, "use ZeRO-" + std::to_string(stage));
    }
    rung("optimizer_8bit", "8-bit optimizer states (block-wise AdamW, ~2 bytes/param instead of 8)?",
         target_.optimizer == Optimizer::kAdamw8bit && cur_.optimizer != Optimizer::kAdamw8bit,
         [](Strategy& s) { s.optimizer = Optimizer::kAdamw8bit; }, "use adamw_8bit");
    // modules_to_save: the embedding and head train whole beside them.
    const dsl::WholeModules whole = dsl::whole_modules(spec_.model.arch, spec_.strategy.lora.modules_to_save);
    const std::string also = !whole.any() ? ""
                             : whole.head ? ", and the embedding and the head whole"
                                          : ", and the (tied) embedding whole";
    rung(
        "lora",
        "LoRA (freeze the base, train rank-" + std::to_string(spec_.strategy.lora.r) + " adapters" + also + ")?",
        target_.adapter != Adapter::kNone && cur_.adapter == Adapter::kNone,
        [&](Strategy& s) {
          s.adapter = Adapter::kLora;
          s.lora_rank = spec_.strategy.lora.r;
        },
        "train LoRA adapters");
    const Quantization base = target_.adapter == Adapter::kQlora ? target_.quantization : Quantization::kNf4Double;
    rung(
        "qlora", std::string("QLoRA (") + base_words(base) + " under the adapters)?",
        target_.adapter == Adapter::kQlora && cur_.adapter != Adapter::kQlora,
        [&](Strategy& s) {
          s.adapter = Adapter::kQlora;
          s.lora_rank = spec_.strategy.lora.r;
          s.quantization = base;
        },
        std::string("quantise the base to ") + (base == Quantization::kInt8 ? "int8" : "NF4"));
    if (cur_.num_gpus > 1) {
      rung("zero_3", "ZeRO-3 (shard the weights over " + ranks_text() + " too)?",
           target_.zero_stage == 3 && cur_.zero_stage != 3, [](Strategy& s) { s.zero_stage = 3; }, "use ZeRO-3");
    }
    if (hw_.cpu_only()) {
      attention();
      reference();
      search();
      return out_;
    }
    const std::int64_t offload_stage = std::max<std::int64_t>(target_.zero_stage, 1);
    rung("offload_optimizer", "Offload optimizer states to host RAM (ZeRO-Offload)?",
         target_.offload != Offload::kNone && cur_.offload == Offload::kNone,
         [&](Strategy& s) {
           s.offload = Offload::kOptimizer;
           s.zero_stage = std::max(s.zero_stage, offload_stage);
         },
         "offload the optimizer");
    rung("offload_params", "Offload parameters too (ZeRO-3 with parameter offload)?",
         target_.offload == Offload::kOptimizerAndParams && cur_.offload != Offload::kOptimizerAndParams,
         [](Strategy& s) {
           s.offload = Offload::kOptimizerAndParams;
           s.zero_stage = 3;
         },
         "offload parameters");
    reference();
    search();
    return out_;
  }

 private:
  std::string precision_question(Precision p) const {
    switch (p) {
      case Precision::kPureBf16:
        return "Pure bf16 (weights, gradients and optimizer states in bf16, no fp32 master copy)?";
      case Precision::kFp16:
        return "Mixed precision (fp16 with loss scaling weights and gradients, fp32 master weights and optimizer "
               "states)?";
      case Precision::kFp32: return "Full fp32 precision?";
      default: return "Mixed precision (bf16 weights and gradients, fp32 master weights and optimizer states)?";
    }
  }

  Decision measure(const std::string& step, const std::string& question, const Candidate& e) const {
    Decision d;
    d.step = step;
    d.question = question;
    d.fits = e.fits;
    d.needed = e.memory.per_device.total();
    d.budget = e.budget;  // its own kind's (headroom.h)
    if (!hw_.cpu_only()) {
      d.host_needed = e.memory.host;
      d.host_budget = e.host_budget;
    }
    return d;
  }

  // One rung: taken when the chosen plan takes it, else explained.
  template <class Change>
  void rung(const std::string& step, const std::string& question, bool taken, Change change,
            const std::string& change_text) {
    // Once the plan fits, a step the chosen plan does not take is not
    // needed and left out: the trace shows only the steps that led to it.
    if (!taken && cur_eval_.fits) return;
    Strategy next = cur_;
    change(next);
    if (next == cur_) {
      // Pinned in the spec: the baseline has it already.
      Decision d = measure(step, question, cur_eval_);
      d.verdict = Verdict::kAlready;
      d.reason = "pinned by the spec";
      out_.push_back(d);
      return;
    }
    const Candidate e = evaluate(spec_, hw_, next, o_);
    Decision d = measure(step, question, e);
    d.saved = cur_eval_.memory.per_device.total() - e.memory.per_device.total();
    if (taken) {
      d.verdict = Verdict::kApplied;
      d.change = change_text;
      if (cur_eval_.fits) {
        // Taken for speed, not memory.
        d.reason = "estimated " + tokens_per_second(cur_eval_.throughput.tokens_per_second) + " -> " +
                   tokens_per_second(e.throughput.tokens_per_second);
      }
      out_.push_back(d);
      cur_ = next;
      cur_eval_ = e;
      return;
    }
    // Not taken: would the chosen plan be allowed and runnable with it?
    Strategy probe = target_;
    change(probe);
    if (probe == target_) probe = next;
    const std::string disallowed = c_.why_not(probe);
    const std::string unrunnable = disallowed.empty() && o_.why_not_executable ? o_.why_not_executable(probe) : "";
    if (!disallowed.empty()) {
      d.verdict = Verdict::kNotAllowed;
      d.reason = disallowed;
    } else if (!unrunnable.empty()) {
      d.verdict = Verdict::kNotExecutable;
      d.reason = unrunnable;
    } else if (cur_eval_.fits) {
      d.verdict = Verdict::kNotNeeded;
      d.reason = "the plan fits without it (" + cur_eval_.memory.per_device.total().to_string() + " of " +
                 cur_eval_.budget.to_string() + ")";
    } else {
      d.verdict = Verdict::kNotChosen;
      const Candidate with = evaluate(spec_, hw_, probe, o_);
      const double gain = with.throughput.tokens_per_second / plan_.chosen.throughput.tokens_per_second - 1.0;
      char buf[160];
      std::snprintf(buf, sizeof buf, "the chosen plan with it would be %s (%.0f against %.0f tokens/s)",
                    gain > o_.small_gain    ? "faster, not enough to change what is trained"
                    : gain < -o_.small_gain ? "slower"
                                            : "no faster",
                    with.throughput.tokens_per_second, plan_.chosen.throughput.tokens_per_second);
      d.reason = with.fits ? std::string(buf) : "the chosen plan reaches the budget by other steps";
    }
    out_.push_back(d);
  }

  // The CPU's last rung: its fused attention kernel is slow in half precision.
  void attention() {
    if (target_.attention == cur_.attention) return;
    rung("attention",
         "Materialised attention (faster than the fused kernel on the CPU in half precision; keeps s x s scores)?",
         true, [&](Strategy& s) { s.attention = target_.attention; }, "attend materialised");
  }

  // DPO's and KTO's reference model: placed by the plan's adapters (or the
  // spec's pin), with its bytes and its time; not a step toward the budget.
  void reference() {
    if (target_.reference == Reference::kNone) return;
    const Candidate e = evaluate(spec_, hw_, target_, o_);
    const bool kto = spec_.training.method == dsl::TrainingMethod::kKto;
    Decision d = measure("reference",
                         kto ? "Where does the reference model go (KTO scores each completion with it)?"
                             : "Where does the reference model go (DPO scores both completions with it)?",
                         e);
    d.verdict = Verdict::kApplied;
    d.saved = Bytes(0) - e.memory.reference;
    char time[200];
    std::snprintf(time, sizeof time,
                  e.strategy.kl_rows
                      ? "its forwards over the completions and the KL rows, with the trained model's over "
                        "the KL rows, add %.3g s a step (estimated)"
                      : "its forward over both completions adds %.3g s a step (estimated)",
                  e.throughput.reference_seconds);
    const bool started = !spec_.model.adapter.empty();
    if (target_.reference == Reference::kAdapterOff) {
      d.change = "switch the adapters off for the reference's forward";
      d.reason = started ? std::string(
                               "no bytes: the base weights alone are the reference, without the adapters "
                               "model.adapter starts from (separate would keep those, frozen); ") +
                               time
                         : std::string(
                               "no bytes: the base weights are the reference, since the adapters start at "
                               "zero; ") +
                               time;
      if (!spec_.strategy.reference && !kto) {
        d.reason += "; precomputed would pay that forward once per pair before training (fewer forwards when the "
                    "data is read more than once, none for pairs a cache holds)";
      }
    } else if (target_.reference == Reference::kPrecomputed) {
      std::snprintf(time, sizeof time,
                    "its forward over both completions takes about %.3g s per step's pairs, once, before training "
                    "(none for pairs the cache already holds)",
                    e.throughput.reference_pass_seconds);
      d.change = "compute the reference's log-probabilities before training and cache them";
      d.reason = std::string("no bytes: the starting weights") + (started ? " (with model.adapter's adapters)" : "") +
                 " score every pair the run reads before the first update, and the cache keeps the scores for "
                 "later jobs on the same weights and data; " +
                 time;
      if (target_.adapter == Adapter::kNone && !spec_.strategy.reference) {
        d.reason += "; a frozen copy would need " +
                    Bytes(static_cast<std::int64_t>(static_cast<double>(e.memory.trainable_parameters) *
                                                    weight_bytes_per_param(target_.precision)))
                        .to_string() +
                    " and the same forward every step";
      }
    } else if (target_.adapter != Adapter::kNone) {
      d.change = "keep a frozen copy of the adapters the job starts from";
      d.reason =
          "the reference is the model the job starts from: the base with model.adapter's adapters, frozen "
          "beside the trained ones (" +
          e.memory.reference.to_string() + "); " + time + "; adapter_off would score against the base alone";
    } else {
      d.change = "keep a frozen copy of the starting weights";
      d.reason = "the copy needs " + e.memory.reference.to_string() +
                 (target_.zero_stage >= 3 ? " (a part of every weight in " : " (every weight in ") +
                 dsl::to_string(target_.precision) +
                 (target_.zero_stage >= 3 ? " on each rank, gathered per unit "
                                            "for its forward as the trained "
                                            "weights are); "
                                          : "); ") +
                 time;
      if (target_.adapter == Adapter::kNone) {
        d.reason += kto ? "; kto's KL rows change with each epoch's order, so none can be precomputed"
                        : "; precomputed would need no copy";
      }
    }
    if (spec_.strategy.reference) d.reason += " (pinned by the spec)";
    out_.push_back(d);
  }

  // "4 GPUs", or on the CPU "2 ranks".
  std::string ranks_text() const {
    return std::to_string(cur_.num_gpus) + (hw_.cpu_only() ? " ranks" : " GPUs");
  }

  // Several GPUs and a runner that runs one rank: the plan uses one of them.
  void ranks() {
    if (target_.num_gpus == cur_.num_gpus) return;
    Strategy all = cur_;
    Strategy one = cur_;
    one.num_gpus = target_.num_gpus;
    one.grad_accumulation = cur_.grad_accumulation * cur_.num_gpus / target_.num_gpus;
    const Candidate e = evaluate(spec_, hw_, one, o_);
    Decision d = measure("ranks",
                         "Data parallel over the " + std::to_string(cur_.num_gpus) + " GPUs (one rank each)?", e);
    d.verdict = Verdict::kApplied;
    d.change = "train on " + std::to_string(target_.num_gpus) + " of the " + std::to_string(cur_.num_gpus) +
               " GPUs (global batch kept by accumulation)";
    d.saved = cur_eval_.memory.per_device.total() - e.memory.per_device.total();
    const std::string why = o_.why_not_executable ? o_.why_not_executable(all) : "";
    d.reason = why.empty() ? "the chosen plan uses fewer ranks" : "tailor-runner cannot run " +
                                                                       std::to_string(all.num_gpus) + " ranks: " + why;
    out_.push_back(d);
    cur_ = one;
    cur_eval_ = e;
  }

  void micro_batch() {
    const std::string q = "Smaller micro-batch with gradient accumulation (global batch stays " +
                          std::to_string(spec_.training.global_batch_size) + ")?";
    const std::int64_t per_rank = spec_.training.global_batch_size / cur_.num_gpus;
    const std::int64_t to = target_.micro_batch_size != cur_.micro_batch_size ? target_.micro_batch_size : 1;
    const bool taken = target_.micro_batch_size != cur_.micro_batch_size;
    if (!taken && cur_eval_.fits) return;
    if (!taken && cur_.micro_batch_size == 1) {
      Decision d = measure("micro_batch", q, cur_eval_);
      d.verdict = Verdict::kNotNeeded;
      d.reason = "the micro-batch is 1 already";
      out_.push_back(d);
      return;
    }
    const std::int64_t from = cur_.micro_batch_size;
    rung("micro_batch", q, taken,
         [&](Strategy& s) {
           s.micro_batch_size = to;
           s.grad_accumulation = per_rank / to;
         },
         "micro-batch " + std::to_string(from) + " -> " + std::to_string(to) + " with " +
             std::to_string(per_rank / to) + " accumulation steps");
  }

  void search() {
    const std::string q = "Which plan that fits and that tailor-runner runs is fastest? (" +
                          std::to_string(plan_.candidates_considered) + " candidates estimated)";
    Decision d = measure("search", q, plan_.chosen);
    if (!plan_.fits) {
      d.verdict = Verdict::kNoneFits;
      d.reason = "it is " + plan_.chosen.strategy.describe();
      if (const auto& p = plan_.preferred_if_executable) {
        d.reason += "; " + p->candidate.strategy.describe() + " would fit, but " + p->why;
      }
      out_.push_back(d);
      return;
    }
    char buf[96];
    std::snprintf(buf, sizeof buf, ": %.0f tokens/s, %.2f s per step", plan_.chosen.throughput.tokens_per_second,
                  plan_.chosen.throughput.step_seconds);
    d.verdict = Verdict::kChosen;
    d.reason = plan_.chosen.strategy.describe() + buf + ", " + plan_.chosen.memory.per_device.total().to_string() +
               " of " + plan_.budget_per_device.to_string() + " (" + plan_.chosen.spare().to_string() + " to spare)";
    if (const auto& f = plan_.fastest_by_estimate) {
      d.reason += "; " + f->candidate.strategy.describe() + " " + f->why;
    }
    if (const auto& p = plan_.preferred_if_executable) {
      d.reason += "; it would choose " + p->candidate.strategy.describe() + " (" +
                  tokens_per_second(p->candidate.throughput.tokens_per_second) + "), but " + p->why;
    }
    out_.push_back(d);
  }

  const dsl::JobSpec& spec_;
  const Hardware& hw_;
  const Constraints& c_;
  const PlanOptions& o_;
  const Plan& plan_;
  const Strategy target_;
  Strategy cur_;
  Candidate cur_eval_;
  std::vector<Decision> out_;
};

}  // namespace

std::vector<Decision> walk_decision_tree(const dsl::JobSpec& spec, const Hardware& hw, const Constraints& c,
                                         const PlanOptions& o, const Plan& plan) {
  return Walker(spec, hw, c, o, plan).run();
}

}  // namespace tailor::strategies
