// POST /v1/jobs/{id}/exports: a succeeded job's model exported into its own
// folder, under exports/, by `tailor-runner export` (runner/torch/
// export_command.h) in a process of its own: one GGUF file
// (exports/model-OUTTYPE.gguf) or one merged Hugging Face folder
// (exports/model-DTYPE/). What the export wrote is then one of the job's
// files, so GET /v1/jobs/{id}/files lists it and /files, /archive and
// download links serve it (resumable). One export runs at a time (503 with
// Retry-After meanwhile); one that outlives `timeout_seconds` is killed and
// leaves nothing (the runner writes FILE.tmp and renames it at the end).
#pragma once

#include <atomic>
#include <string>

#include "daemon/http/message.h"
#include "daemon/store/job_store.h"

namespace tailor::daemon {

class JobExports {
 public:
  // `log_dir`: the runner's output goes to log_dir/export-JOB.log.
  JobExports(std::string runner_path, std::string log_dir, double timeout_seconds = 3600);

  // For `body` ({"format": "gguf" (default) | "safetensors", "outtype":
  // "f16" | "bf16" | "f32" | "q8_0" (gguf; default f16), "dtype": "auto" |
  // "fp32" | "bf16" | "fp16" (safetensors; default auto)}): 201 with what
  // was written ({"job_id", "path" (in the job's folder), "format",
  // "bytes", "seconds", ... the runner's summary}); 400 naming a bad field;
  // 404 when the job's folder is gone or holds no model; 409 when the job
  // has not succeeded; 422 when the runner refuses the model (a family or
  // tokenizer it does not export, saying why); 503 while another export
  // runs; 500 when writing failed.
  HttpResponse run(const JobRecord& job, const std::string& output_dir, const std::string& body);

 private:
  std::string runner_;
  std::string log_dir_;
  double timeout_;
  std::atomic<bool> busy_{false};
};

}  // namespace tailor::daemon
