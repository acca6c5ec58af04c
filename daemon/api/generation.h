// POST /v1/jobs/{id}/generate: text from a succeeded job's model, made by
// `tailor-runner generate --output events` (runner/torch/generate_command.h)
// in a process of its own and relayed as server-sent events:
//   event: token / data: {"id": <token id>, "text": "<its text, once whole>"}
//   event: done  / data: the runner's result (ids, text, finish_reason, timings)
//   event: error / data: {"error": "<code>", "message": "..."}  (then the stream ends)
// The request is checked here first (400 naming the field); the runner
// checks the rest (the template, the prompt's length) and says so in an
// error event. At most `concurrency` generations run at once (503 with
// Retry-After beyond); one that outlives `timeout_seconds` is killed, and
// so is one whose client leaves.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "daemon/http/message.h"
#include "daemon/store/job_store.h"

namespace tailor::daemon {

struct GenerationLimits {
  int concurrency = 1;           // generations at once
  double timeout_seconds = 300;  // wall time of one, model loading included
  std::int64_t max_tokens = 4096;  // the largest max_tokens a request may ask for
};

class Generations {
 public:
  // `scratch_dir`: where each generation's request and output files live
  // while it runs (removed after).
  Generations(std::string runner_path, std::string scratch_dir, GenerationLimits limits = {});

  // The event stream for `body` (a JSON object: one of "prompt" (text),
  // "messages" (a conversation, with optional "tools") and "prompt_ids";
  // "max_tokens", "temperature", "top_p", "top_k", "seed"), or an error
  // response: 409 when the job has not succeeded, 404 when its output
  // folder is gone, 400 for a bad body, 503 when `concurrency` run already.
  HttpResponse start(const JobRecord& job, const std::string& output_dir, const std::string& body);

  int running() const { return running_->load(); }

 private:
  std::string runner_;
  std::string scratch_;
  GenerationLimits limits_;
  std::shared_ptr<std::atomic<int>> running_ = std::make_shared<std::atomic<int>>(0);
  std::atomic<std::uint64_t> next_{0};
};

}  // namespace tailor::daemon
