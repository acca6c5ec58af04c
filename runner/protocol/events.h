// The runner's events.jsonl: one JSON object per line with "event" (one of
// the kinds below) and "time". The run's last line is a terminal event
// (done, error, oom, cancelled) that carries the run's "exit_code"
// (exit_code.h), so a reader that could not wait for the process (tailord
// restarted meanwhile) judges the run exactly as its exit status would.
// Torch-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runner/protocol/exit_code.h"

namespace tailor::runner::events {

// steps, first_step, device, strategy, pid; the data as batched: packing
// (dsl::to_string(Packing)), on_long_example, examples, rows_per_epoch,
// truncated, dropped, packing_efficiency (non-padding cells / all cells).
inline constexpr const char* kStart = "start";
// Written by tailord, not the runner, before an attempt whose exit status it
// cannot see (a Slurm job): a boundary like start, so that an attempt whose
// ranks never started is not judged by the attempt before. attempt, message.
inline constexpr const char* kLaunch = "launch";
inline constexpr const char* kResume = "resume";          // step, checkpoint[, optimizer_converted]
inline constexpr const char* kCheckpoint = "checkpoint";  // step, dir
inline constexpr const char* kCheckpointError = "checkpoint_error";  // message; training goes on
// A damaged checkpoint passed over at resume: checkpoint, message, moved_to.
inline constexpr const char* kCheckpointSkipped = "checkpoint_skipped";
// The loss turned NaN or infinite: step, loss; the run fails (exit 1).
inline constexpr const char* kNonfiniteLoss = "nonfinite_loss";
inline constexpr const char* kLossScale = "loss_scale";   // step, scale (an fp16 step skipped)
inline constexpr const char* kAdapter = "adapter";        // dir
// The model evaluated on data.eval after a step (training.eval_every, and
// after the last step): step, loss (mean over the eval set's trained
// tokens), perplexity (exp(loss)), tokens, seconds.
inline constexpr const char* kEval = "eval";
// training.eval_prompts answered by the model after an evaluated step
// (greedy): step, seconds, answers: [{prompt, text, tokens (how many),
// stopped (at an end token, else the eval_max_tokens limit)}].
inline constexpr const char* kGeneration = "generation";
// strategy.reference precomputed: the reference's log-probabilities of the
// pairs the run reads, before training: pairs (distinct pairs), cached
// (read from the cache), computed (scored now), batches (forwards, every
// rank's), seconds, cache_file (empty without a cache folder), written
// (the file was rewritten with the pairs computed), problem (a damaged or
// foreign file that was ignored, or why writing failed), when there is one.
inline constexpr const char* kReference = "reference";
// A tracker of the spec's tracking section changed state (rank 0's runner;
// runner/tracking/): tracker (tensorboard, mlflow), state (up, down,
// rejected: records it refused were skipped, closed: the run's outcome
// sent, behind: not everything was sent before the runner ended), error,
// step (the last sent), pending_bytes (of metrics.jsonl not yet sent).
inline constexpr const char* kTracker = "tracker";
// strategy.probe, before training (runner/protocol/probe.h): probe_start
// (candidates), then probe (index, summary, outcome, tokens_per_second,
// peak_bytes, predicted_peak_bytes, predicted_tokens_per_second, seconds,
// message) for each candidate as it is measured, then probe_done (chosen:
// the index trained or -1, summary, seconds, plan: the plan document
// written again with the measurements, in the job's folder).
inline constexpr const char* kProbeStart = "probe_start";
inline constexpr const char* kProbe = "probe";
inline constexpr const char* kProbeDone = "probe_done";
// Terminal events, each with "exit_code".
inline constexpr const char* kDone = "done";
inline constexpr const char* kError = "error";            // message
inline constexpr const char* kOom = "oom";                // step, requested/in_use/budget bytes, memory
inline constexpr const char* kCancelled = "cancelled";    // step

inline constexpr const char* kExitCodeKey = "exit_code";

// How the run in these events.jsonl lines ended: the last terminal event's
// exit code (runners before the code was written: done 0, oom 3,
// cancelled 4, error 1). nullopt when the run started (or resumed) after
// its last terminal event, or never wrote one: it was killed.
std::optional<RunnerExit> exit_from_events(const std::vector<std::string>& lines);

// Ranks started by another launcher (srun) leave their outcomes in one
// events file each: rank 0's events.jsonl and events.rank-R.jsonl
// (dist/launcher.h). The terminal event of the rank that decides the run,
// with "rank" added, for appending to events.jsonl when rank 0's own last
// word is not already as telling; nullopt when nothing need be appended.
// What decides, most telling first: out of memory (re-planned), then bad
// input (never retried), then rank 0's own failure, then another rank's; a
// failing rank outweighs one that finished or was cancelled. Appending its
// answer and asking again gives nullopt, so it can be applied more than once.
std::optional<std::string> deciding_rank_event(const std::vector<std::vector<std::string>>& lines_by_rank);

}  // namespace tailor::runner::events
