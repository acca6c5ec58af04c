// Preference training (training.method: dpo) in the run (run.h): the
// reference model's log-probabilities, the pairs' loss, and its metrics
// under the names TRL reports them (rewards/chosen, ..., logps/rejected).
#include "runner/data/batcher.h"
#include "runner/torch/data_parallel.h"
#include "runner/torch/lora.h"
#include "runner/torch/run.h"

namespace tailor::runner {
ModelInput pair_input(const data::Batch& b, const torch::Device& device) {
  ModelInput in;
  in.input_ids = to_tensor(b.inputs, b.rows, b.seq_len, device);
  in.positions = to_tensor(b.positions, b.rows, b.seq_len, device);
  // One completion per row, padded at its end: causality is the only mask
  // (the trained model and the reference see exactly the same inputs).
  return in;
}

Result<torch::Tensor> Run::reference_logps(const data::Batch& b) {
  torch::NoGradGuard no_grad;
  const torch::Tensor targets = to_tensor(b.targets, b.rows, b.seq_len, dev_);
  torch::Tensor out;
  if (reference_) {
    out = sequence_logps(*reference_, reference_->hidden_states(pair_input(b, dev_)), targets);
  } else {
    // The adapters start at zero, so the base is the starting model. Off
    // also skips their dropout; the base's forward is the model's own, so
    // ZeRO-3 gathers its units as for any forward.
    struct Reenable {
      CausalLMImpl& model;
      ~Reenable() { set_lora_enabled(model, true); }
    } reenable{*model_};
    set_lora_enabled(*model_, false);
    out = sequence_logps(*model_, model_->hidden_states(pair_input(b, dev_)), targets);
    // ZeRO-3's head is still gathered: no backward released it.
    if (sync_->collective_forward()) TAILOR_RETURN_IF_ERROR(sync_->after_backward());
  }
  return out;
}

PreferenceLossOut Run::pair_loss(const torch::Tensor& hidden, const torch::Tensor& targets,
                                 const torch::Tensor& reference) {
  const torch::Tensor tokens = targets.ne(-100).sum(1);
  return preference_loss(sequence_logps(*model_, hidden, targets), reference, tokens, spec_.training.loss_type,
                         spec_.training.beta, spec_.training.label_smoothing);
}

Status Run::reduce_preference(PreferenceSums& s) {
  if (world_ == 1) return Status::ok();
  std::vector<double> v = {s.pairs,        s.loss,    s.chosen_rewards, s.rejected_rewards,
                           s.accurate,     s.margins, s.chosen_logps,   s.rejected_logps};
  TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, v));
  s = PreferenceSums{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
  return Status::ok();
}

void Run::write_preference(JsonWriter& w, const PreferenceSums& s, const char* prefix) const {
  const double n = std::max(1.0, s.pairs);
  const std::string p = prefix;
  w.field(p + "rewards/chosen", s.chosen_rewards / n).field(p + "rewards/rejected", s.rejected_rewards / n);
  w.field(p + "rewards/accuracies", s.accurate / n).field(p + "rewards/margins", s.margins / n);
  w.field(p + "logps/chosen", s.chosen_logps / n).field(p + "logps/rejected", s.rejected_logps / n);
}

}  // namespace tailor::runner
