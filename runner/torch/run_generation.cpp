// training.eval_prompts: the model as it is after an evaluated step answers
// each prompt greedily (generation.h; prompts of like lengths together), on
// rank 0, without dropout; the answers go to events.jsonl, so tailord keeps
// them with the job.
#include <vector>

#include <nlohmann/json.hpp>

#include "core/text.h"
#include "runner/protocol/events.h"
#include "runner/torch/generation.h"
#include "runner/torch/run.h"

namespace tailor::runner {

bool Run::prompts_due(std::int64_t step) const {
  if (data_.prompt_ids.empty() || !leader()) return false;
  const std::int64_t every = spec_.training.eval_every;
  return step == data_.total_steps || (every > 0 && step % every == 0);
}

Status Run::answer_prompts(std::int64_t step) {
  const double t0 = now_seconds();
  model_->eval();
  struct TrainAgain {
    CausalLM& model;
    ~TrainAgain() { model->train(); }
  } train_again{model_};
  SamplingOptions o;
  o.max_new_tokens = spec_.training.eval_max_tokens;
  o.stop_ids = data_.stop_ids;
  // The prompts' passes and answers several at a time, each group's rows
  // times its positions within a micro-batch's (what training holds
  // anyway; keys and values take less than its activations).
  const std::int64_t positions = st_.micro_batch_size * spec_.data.seq_len;
  std::vector<std::int64_t> lengths;
  for (const auto& p : data_.prompt_ids)
    lengths.push_back(static_cast<std::int64_t>(p.size()));
  std::vector<nlohmann::json> answers(data_.prompt_ids.size());
  for (const auto& group : prefill_groups(lengths, o.max_new_tokens, positions)) {
    std::vector<std::vector<std::int32_t>> prompts;
    for (std::size_t i : group)
      prompts.push_back(data_.prompt_ids[i]);
    // Out of memory stays out of memory (the plan re-made); anything else
    // is this step's bug, not the data's.
    auto passes = prefill(model_, prompts, o.max_new_tokens);
    if (!passes.is_ok()) {
      return passes.status().prefixed("answering training.eval_prompts[" + std::to_string(group.front()) + "]");
    }
    std::vector<Sequence> sequences;
    for (std::size_t g = 0; g < group.size(); ++g)
      sequences.push_back({&prompts[g], o, &(*passes)[g], {}});
    auto out = generate_batch(model_, sequences);
    if (!out.is_ok()) {
      return out.status().prefixed("answering training.eval_prompts[" + std::to_string(group.front()) + "]");
    }
    for (std::size_t g = 0; g < group.size(); ++g) {
      const std::size_t i = group[g];
      const Generated& a = (*out)[g];
      answers[i] = {{"prompt", spec_.training.eval_prompts[i]},
                    {"text", utf8_lossy(data_.prompt_tokenizer->decode(a.ids))},
                    {"tokens", a.ids.size()},
                    {"stopped", a.stopped}};
    }
  }
  event(events::kGeneration, [&](JsonWriter& ev) {
    ev.field("step", step).field("seconds", now_seconds() - t0);
    ev.key("answers").raw(nlohmann::json(answers).dump());  // one line, as events.jsonl needs
  });
  return Status::ok();
}

}  // namespace tailor::runner
