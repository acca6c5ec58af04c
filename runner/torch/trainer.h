// The training loop of tailor-runner: the plan's strategy applied to the
// job spec, with metrics and events as JSON lines, checkpoints, resume, and
// out-of-memory reported as its own outcome.
//
// Implemented here: fp32, bf16 and fp16 mixed precision (fp32 master
// weights; fp16 with dynamic loss scaling), pure bf16, gradient
// checkpointing, micro-batches with accumulation normalised by the global
// batch's target tokens, AdamW and SGD, warm-up with constant, cosine or
// linear schedules, clipping, checkpoints, and a forward/backward probe on
// the longest batch before step 1 so that out-of-memory surfaces at once;
// LoRA and QLoRA (lora.h: frozen or NF4 base, adapters saved in PEFT's
// layout to out_dir/adapter/ and merged into model.pt / model/ at the end)
// and 8-bit AdamW states; data parallelism over several rank processes
// (runner/dist/): stage 0 sums gradients across ranks, ZeRO-1 also shares
// out the optimizer states and master weights, ZeRO-2 the gradients too,
// ZeRO-3 the parameters (zero3.h); the optimizer, and at ZeRO-3 the
// parameters, offloaded to host memory. Sharded ranks write sharded
// checkpoints (checkpoint.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runner/dist/rank_env.h"
#include "runner/protocol/exit_code.h"
#include "runner/protocol/plan_reader.h"

namespace tailor::runner {

struct TrainOptions {
  RunConfig config;
  std::string out_dir;          // metrics.jsonl, events.jsonl, checkpoints/, adapter/, model/ (Hugging Face)
  bool resume = false;          // continue from the newest checkpoint under out_dir
  std::int64_t memory_limit = -1;  // bytes; -1 = the plan's budget on its own kind of device; 0 = unlimited
  bool progress = false;        // a redrawn progress line on stderr (a terminal)
  bool quiet = false;           // no progress output at all
  int threads = 0;              // intra-op threads; 0 = LibTorch's default
  std::string device = "auto";  // auto, cpu, cuda, cuda:N (device_choice.h)
  std::string cache_dir;        // token cache folder (data/token_cache.h), and the precomputed reference's
                                // (io/logp_cache.h); empty = tokenize and score in memory.
                                // tailor-runner passes --cache-dir or default_token_cache_dir()
  dist::RankEnv rank;           // this process' rank of a multi-rank plan (rank_env.h)
  bool merge = false;           // write the merged model/ whatever output.merge says (--export --merge)
  bool append_events = false;   // events.jsonl holds this run's first lines already (the probe's)
};

// strategy.probe, before training: each candidate of the plan's probe
// measured in this process (a few steps on the longest batches, under the
// plan's budget), the events probe_start, probe and probe_done written to
// out_dir/events.jsonl, and out_dir/plan.probed.json written: the plan
// with the measurements, training the fastest candidate that fit. Returns
// that plan's RunConfig (the plan's own choice when none fitted).
// InvalidArgument when the plan asks for no probe, or it was measured already.
// `print_table`: the table of predicted beside measured on stderr too.
Result<RunConfig> probe_before_training(const TrainOptions& options, bool print_table);
inline constexpr const char* kProbedPlanFile = "plan.probed.json";

// The same for a plan of several ranks, from their launcher: for each
// candidate the ranks started together (`rank_args`, the ranks' command,
// with --probe-candidate I; each rank's share of `threads` cores), and what
// they measured combined (combine_rank_measurements). A rank out of memory
// stops the others at once (no collective waits for it) and is a measured
// "does not fit". Cancelled when SIGTERM or SIGINT came meanwhile.
Result<RunConfig> probe_ranks_before_training(const TrainOptions& options, const std::vector<std::string>& rank_args,
                                              int world, bool print_table);

// A rank of the launcher's probe (--probe-candidate): measures candidate
// `candidate` of the plan's probe with the other ranks and writes it to
// probe_rank_file; kOk when it fitted, kOutOfMemory or kFailure (the file
// says why) otherwise.
RunnerExit probe_candidate_as_rank(const TrainOptions& options, std::size_t candidate);

// Runs the job; the result is also written as the terminal event's
// exit_code (protocol/events.h). Never throws.
RunnerExit train(const TrainOptions& options);

// The parameters of checkpoint folder `checkpoint` (one-rank or sharded,
// written with any rank count; an adapter checkpoint over the job's base)
// written as the end of training writes them: under LoRA out_dir/adapter/
// (PEFT's layout), and out_dir/model/ (a Hugging Face folder, the adapters
// merged in) when output.merge or options.merge says.
// One process on the CPU (`device` as given), whatever the plan's ranks;
// the data is read only for the tokenizer's files. Never throws.
RunnerExit export_checkpoint(const TrainOptions& options, const std::string& checkpoint);

}  // namespace tailor::runner
