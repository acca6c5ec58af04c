// training.eval_prompts: the model as it is after an evaluated step answers
// each prompt greedily (generation.h), on rank 0, without dropout; the
// answers go to events.jsonl, so tailord keeps them with the job.
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
  nlohmann::json answers = nlohmann::json::array();
  for (std::size_t i = 0; i < data_.prompt_ids.size(); ++i) {
    auto out = generate(model_, data_.prompt_ids[i], o);
    // Out of memory stays out of memory (the plan re-made); anything else
    // is this step's bug, not the data's.
    if (!out.is_ok()) return out.status().prefixed("answering training.eval_prompts[" + std::to_string(i) + "]");
    answers.push_back({{"prompt", spec_.training.eval_prompts[i]},
                       {"text", utf8_lossy(data_.prompt_tokenizer->decode(out->ids))},
                       {"tokens", out->ids.size()},
                       {"stopped", out->stopped}});
  }
  event(events::kGeneration, [&](JsonWriter& ev) {
    ev.field("step", step).field("seconds", now_seconds() - t0);
    ev.key("answers").raw(answers.dump());  // one line, as events.jsonl needs
  });
  return Status::ok();
}

}  // namespace tailor::runner
