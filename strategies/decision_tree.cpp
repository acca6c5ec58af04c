#include "strategies/decision_tree.h"

#include <algorithm>
#include <cstdio>

namespace tailor::strategies {
namespace {

std::string largest_components(const MemoryBreakdown& m) {
  std::vector<std::pair<Bytes, const char*>> parts = {
      {m.weights, "weights"},         {m.gradients, "gradients"},   {m.optimizer_states, "optimizer states"},
      {m.master_weights, "fp32 master weights"}, {m.adapter, "adapters"}, {m.activations, "activations"},
      {m.logits, "logits"},           {m.overhead, "overhead"}};
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out;
  for (int i = 0; i < 3; ++i) {
    if (parts[i].first.count() <= 0) break;
    if (i) out += ", ";
    out += std::string(parts[i].second) + " " + parts[i].first.to_string();
  }
  return out;
}

class Walker {
 public:
  Walker(const dsl::JobSpec& spec, const Hardware& hw, const Constraints& c, const PlanOptions& o)
      : spec_(spec), hw_(hw), c_(c), o_(o), cur_(c.baseline()), cur_eval_(evaluate(spec, hw, cur_, o)) {}

  std::vector<Decision> run() {
    const std::int64_t n = c_.num_gpus();
    const std::string where = c_.on_cpu() ? "in host RAM" : "per GPU";
    out_.push_back({"Does the job fit as written (" + cur_.describe() + ")?",
                    fit_text(cur_eval_) + (cur_eval_.fits ? "" : "; largest: " + largest_components(cur_eval_.memory.per_device)),
                    cur_eval_.fits ? "keep it" : "reduce memory"});
    if (cur_eval_.fits) return out_;

    const bool bf16 = c_.device().bf16;
    step("Mixed precision (" + std::string(bf16 ? "bf16" : "fp16 with loss scaling") +
             " weights and gradients, fp32 master weights and optimizer states)?",
         [&](Strategy& s) { s.precision = bf16 ? Precision::kBf16 : Precision::kFp16; }, cur_.precision != Precision::kFp32,
         std::string("use ") + (bf16 ? "bf16" : "fp16") + " mixed precision");
    if (done()) return out_;
    step("Gradient checkpointing (keep each layer's input, recompute the layer in backward)?",
         [](Strategy& s) { s.checkpoint_every = 1; }, cur_.checkpoint_every == 1, "checkpoint every layer");
    if (done()) return out_;
    shrink_micro_batch();
    if (done()) return out_;
    if (n > 1) {
      step("ZeRO-1 (shard optimizer states and master weights over " + std::to_string(n) + " GPUs)?",
           [](Strategy& s) { s.zero_stage = std::max<std::int64_t>(s.zero_stage, 1); }, cur_.zero_stage >= 1, "use ZeRO-1");
      if (done()) return out_;
      step("ZeRO-2 (shard gradients too)?", [](Strategy& s) { s.zero_stage = std::max<std::int64_t>(s.zero_stage, 2); },
           cur_.zero_stage >= 2, "use ZeRO-2");
      if (done()) return out_;
    }
    step("8-bit optimizer states (block-wise AdamW, ~2 bytes/param instead of 8)?",
         [](Strategy& s) { s.optimizer = Optimizer::kAdamw8bit; }, cur_.optimizer != Optimizer::kAdamw, "use adamw_8bit");
    if (done()) return out_;
    step("LoRA (freeze the base, train rank-" + std::to_string(spec_.strategy.lora.r) + " adapters)?",
         [&](Strategy& s) {
           s.adapter = Adapter::kLora;
           s.lora_rank = spec_.strategy.lora.r;
         },
         cur_.adapter != Adapter::kNone, "train LoRA adapters");
    if (done()) return out_;
    step("QLoRA (4-bit NF4 base weights with double quantisation under the adapters)?",
         [&](Strategy& s) {
           s.adapter = Adapter::kQlora;
           s.lora_rank = spec_.strategy.lora.r;
           s.quantization = Quantization::kNf4Double;
         },
         cur_.adapter == Adapter::kQlora, "quantise the base to NF4");
    if (done()) return out_;
    if (n > 1) {
      step("ZeRO-3 (shard the weights over " + std::to_string(n) + " GPUs too)?", [](Strategy& s) { s.zero_stage = 3; },
           cur_.zero_stage == 3, "use ZeRO-3");
      if (done()) return out_;
    }
    step("Offload optimizer states to host RAM (ZeRO-Offload)?",
         [](Strategy& s) {
           s.offload = Offload::kOptimizer;
           s.zero_stage = std::max<std::int64_t>(s.zero_stage, 1);
         },
         cur_.offload != Offload::kNone, "offload the optimizer");
    if (done()) return out_;
    step("Offload parameters too (ZeRO-3 with parameter offload)?",
         [](Strategy& s) {
           s.offload = Offload::kOptimizerAndParams;
           s.zero_stage = 3;
         },
         cur_.offload == Offload::kOptimizerAndParams, "offload parameters");
    if (done()) return out_;
    out_.push_back({"Does it fit " + where + " now?", fit_text(cur_eval_), "nothing in the tree fits"});
    return out_;
  }

 private:
  bool done() const { return cur_eval_.fits; }

  std::string fit_text(const Candidate& e) const {
    const Bytes total = e.memory.per_device.total();
    const Bytes budget = total - e.over_budget;
    std::string text = (e.fits ? "yes: needs " : "no: needs ") + total.to_string() + " of a " + budget.to_string() +
                       " budget" + (c_.on_cpu() ? "" : " per GPU");
    if (e.over_budget.count() > 0) text += " (" + e.over_budget.to_string() + " over)";
    if (e.host_over_budget.count() > 0) {
      text += "; host RAM " + e.memory.host.to_string() + " is " + e.host_over_budget.to_string() + " over its budget";
    }
    return text;
  }

  template <class Change>
  void step(const std::string& question, Change change, bool already, const std::string& action) {
    if (already) {
      out_.push_back({question, "already in use (pinned or chosen earlier)", "keep"});
      return;
    }
    Strategy next = cur_;
    change(next);
    const std::string why = c_.why_not(next);
    if (!why.empty()) {
      out_.push_back({question, "skipped: " + why, "none"});
      return;
    }
    const Candidate e = evaluate(spec_, hw_, next, o_);
    const Bytes saved = cur_eval_.memory.per_device.total() - e.memory.per_device.total();
    if (saved.count() <= 0 && e.host_over_budget >= cur_eval_.host_over_budget) {
      out_.push_back({question, "no saving (" + fit_text(e) + ")", "none"});
      return;
    }
    out_.push_back({question, fit_text(e) + " (saves " + saved.to_string() + ")", action});
    cur_ = next;
    cur_eval_ = e;
  }

  void shrink_micro_batch() {
    const std::string q = "Smaller micro-batch with gradient accumulation (global batch stays " +
                          std::to_string(spec_.training.global_batch_size) + ")?";
    if (spec_.training.micro_batch_size) {
      out_.push_back({q, "skipped: micro_batch_size is pinned to " + std::to_string(*spec_.training.micro_batch_size),
                      "none"});
      return;
    }
    const std::int64_t from = cur_.micro_batch_size;
    Strategy next = cur_;
    Candidate e = cur_eval_;
    const auto& sizes = c_.micro_batches();
    for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
      if (*it >= next.micro_batch_size) continue;
      Strategy trial = next;
      trial.micro_batch_size = *it;
      trial.grad_accumulation = spec_.training.global_batch_size / c_.num_gpus() / *it;
      if (!c_.admits(trial)) continue;
      next = trial;
      e = evaluate(spec_, hw_, next, o_);
      if (e.fits) break;
    }
    if (next.micro_batch_size == from) {
      out_.push_back({q, from == 1 ? "already 1" : "skipped: " + c_.why_not(next), "none"});
      return;
    }
    const Bytes saved = cur_eval_.memory.per_device.total() - e.memory.per_device.total();
    out_.push_back({q, fit_text(e) + " (saves " + saved.to_string() + ")",
                    "micro-batch " + std::to_string(from) + " -> " + std::to_string(next.micro_batch_size) + " with " +
                        std::to_string(next.grad_accumulation) + " accumulation steps"});
    cur_ = next;
    cur_eval_ = e;
  }

  const dsl::JobSpec& spec_;
  const Hardware& hw_;
  const Constraints& c_;
  const PlanOptions& o_;
  Strategy cur_;
  Candidate cur_eval_;
  std::vector<Decision> out_;
};

}  // namespace

std::vector<Decision> walk_decision_tree(const dsl::JobSpec& spec, const Hardware& hw, const Constraints& c,
                                         const PlanOptions& o) {
  return Walker(spec, hw, c, o).run();
}

void add_search_decision(Plan& plan, const Candidate* best, int candidates) {
  const std::string q = "Which plan that fits is fastest? (" + std::to_string(candidates) + " candidates estimated)";
  if (best == nullptr) {
    plan.decisions.push_back({q, "none fits; the closest needs " + plan.chosen.memory.per_device.total().to_string() +
                                     " of a " + plan.budget_per_device.to_string() + " budget",
                              "reject the job"});
    return;
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s: %.0f tokens/s, %.2f s per step, %s per device", best->strategy.describe().c_str(),
                best->throughput.tokens_per_second, best->throughput.step_seconds,
                best->memory.per_device.total().to_string().c_str());
  plan.decisions.push_back({q, buf, "choose it"});
}

}  // namespace tailor::strategies
