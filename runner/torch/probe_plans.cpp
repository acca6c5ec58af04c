// strategy.probe before training (trainer.h's probe_before_training): the
// plan's candidates measured one after another, each a Run of its own
// (run_probe.cpp) freed before the next: in this process, or for a plan of
// several ranks by the ranks the launcher starts for each; then the plan
// written again with what they measured.
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "core/json_writer.h"
#include "platform/files.h"
#include "runner/dist/launcher.h"
#include "runner/protocol/events.h"
#include "runner/torch/run.h"

namespace tailor::runner {
namespace fs = std::filesystem;
namespace {

ProbeMeasurement measure_candidate(const TrainOptions& options, const ProbeCandidate& c, const ProbeTable& t) {
  TrainOptions o = options;
  o.config.strategy = c.strategy;
  o.quiet = true;
  o.progress = false;
  ProbeMeasurement m;
  try {
    Run run(o);
    run.measure(t, m);
  } catch (const std::exception& e) {
    m.outcome = ProbeMeasurement::Outcome::kFailed;
    m.message = std::string("internal error: ") + e.what();
  }
  // The run is gone; its cached blocks go too, before the next candidate
  // measures its reserved peak.
  release_cached_device_memory();
  return m;
}

// One candidate's measurement; an error (Cancelled) ends the probe.
using MeasureFn = std::function<Result<ProbeMeasurement>(std::size_t index, const ProbeCandidate& c)>;

Result<RunConfig> probe_each(const TrainOptions& options, bool print_table, const MeasureFn& measure) {
  if (!options.config.probe || options.config.probe->candidates.empty()) {
    return Status::invalid_argument(options.config.plan_path + ": the plan asks for no probe");
  }
  if (options.config.probe->measured()) {
    return Status::invalid_argument(options.config.plan_path + ": the plan's probe was measured already");
  }
  ProbeTable table = *options.config.probe;
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  JsonLines events(dist::rank_events_path(options.out_dir, options.rank.rank), options.resume);
  if (ec || !events.ok()) return Status::invalid_argument("cannot write to output folder " + options.out_dir);
  auto event = [&](const char* kind, const std::function<void(JsonWriter&)>& fill) {
    JsonWriter w(0);
    w.begin_object().field("event", kind).field("time", static_cast<std::int64_t>(std::time(nullptr)));
    fill(w);
    w.end_object();
    events.write(w);
  };
  // A probe that cannot finish ends the run: its terminal event, as
  // training's would be (cancelled by a signal, or an error saying why).
  auto ended = [&](const Status& s) {
    const bool cancelled = s.code() == StatusCode::kCancelled;
    const RunnerExit exit = cancelled ? RunnerExit::kCancelled : RunnerExit::kFailure;
    event(cancelled ? events::kCancelled : events::kError, [&](JsonWriter& w) {
      if (cancelled) w.field("step", std::int64_t{0});
      w.field("message", "probe: " + s.message())
          .field(events::kExitCodeKey, static_cast<std::int64_t>(exit_status(exit)));
    });
    return s;
  };
  const std::size_t n = table.candidates.size();
  event(events::kProbeStart, [&](JsonWriter& w) {
    w.field("candidates", static_cast<std::int64_t>(n)).field("warmup_steps", table.warmup_steps);
    w.field("timed_steps", table.timed_steps);
  });
  const double t0 = now_seconds();
  for (std::size_t i = 0; i < n; ++i) {
    ProbeCandidate& c = table.candidates[i];
    if (!options.quiet) {
      std::fprintf(stderr, "probe %zu/%zu: %s ...\n", i + 1, n, c.summary.c_str());
    }
    auto measured = measure(i, c);
    if (!measured.is_ok()) return ended(measured.status());
    c.measured = std::move(measured).value();
    const ProbeMeasurement& m = *c.measured;
    if (!options.quiet) {
      if (m.outcome == ProbeMeasurement::Outcome::kFits) {
        std::fprintf(stderr, "probe %zu/%zu: %.0f tokens/s (predicted %.0f), peak %s (predicted %s), %.1f s\n", i + 1,
                     n, m.tokens_per_second, c.predicted_tokens_per_second, Bytes(m.peak_bytes).to_string().c_str(),
                     Bytes(c.predicted_peak).to_string().c_str(), m.seconds);
      } else {
        std::fprintf(stderr, "probe %zu/%zu: %s: %s\n", i + 1, n, to_string(m.outcome), m.message.c_str());
      }
    }
    event(events::kProbe, [&](JsonWriter& w) {
      w.field("index", static_cast<std::int64_t>(i)).field("summary", c.summary).field("outcome", to_string(m.outcome));
      w.field("tokens_per_second", m.tokens_per_second).field("peak_bytes", m.peak_bytes);
      if (m.reserved_bytes > 0) w.field("reserved_bytes", m.reserved_bytes);
      w.field("predicted_peak_bytes", c.predicted_peak)
          .field("predicted_tokens_per_second", c.predicted_tokens_per_second);
      w.field("seconds", m.seconds);
      if (!m.message.empty()) w.field("message", m.message);
    });
  }
  table.seconds = now_seconds() - t0;
  table.chosen = choose_probed(table.candidates, table.tie_band);
  auto text = probed_plan_json(options.config.plan_text, table);
  if (!text.is_ok()) return ended(text.status());
  const std::string path = (fs::path(options.out_dir) / kProbedPlanFile).string();
  if (Status s = platform::write_file_atomic(path, *text); !s.is_ok()) return ended(s);
  event(events::kProbeDone, [&](JsonWriter& w) {
    w.field("chosen", static_cast<std::int64_t>(table.chosen));
    w.field("summary",
            table.chosen >= 0 ? table.candidates[static_cast<std::size_t>(table.chosen)].summary : std::string());
    w.field("seconds", table.seconds).field("plan", path);
  });
  if (!options.quiet && print_table) {
    std::fprintf(stderr, "%s", format_probe_table(table, !options.config.on_cpu).c_str());
  }
  return parse_plan(*text, path);
}

// Candidate `index` measured by `world` ranks started for it.
Result<ProbeMeasurement> measure_on_ranks(const TrainOptions& options, const std::vector<std::string>& rank_args,
                                          int world, std::size_t index) {
  const double t0 = now_seconds();
  std::error_code ec;
  for (int r = 0; r < world; ++r) {
    fs::remove(probe_rank_file(options.out_dir, index, r), ec);  // an earlier attempt's
  }
  dist::LaunchOptions launch;
  launch.world = world;
  launch.threads = options.threads;
  launch.out_dir = options.out_dir;
  launch.what = "the probe of plan " + std::to_string(index + 1);
  launch.record_outcome = false;
  launch.args = rank_args;
  launch.args.insert(launch.args.end(), {"--probe-candidate", std::to_string(index)});
  const int status = dist::launch_ranks(launch);
  if (dist::stop_signal() != 0) return Status::cancelled("the probe was stopped by a signal");
  std::vector<std::optional<ProbeMeasurement>> ranks(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    // (Not data::read_file: the job's folder lies outside tailord's read
    // root, which bounds what a spec names.)
    const std::string path = probe_rank_file(options.out_dir, index, r);
    std::ifstream in(path);
    if (!in) continue;
    std::stringstream text;
    text << in.rdbuf();
    auto m = parse_measurement(text.str(), path);
    if (m.is_ok()) ranks[static_cast<std::size_t>(r)] = std::move(m).value();
  }
  const auto exit = runner_exit_from_status(status);
  ProbeMeasurement m = combine_rank_measurements(
      ranks, "the ranks ended with exit status " + std::to_string(status) +
                 (exit ? std::string(" (") + to_string(*exit) + ")" : std::string()) + " and measured nothing");
  m.seconds = now_seconds() - t0;
  return m;
}

}  // namespace

Result<RunConfig> probe_before_training(const TrainOptions& options, bool print_table) {
  // Before the probe's first event: a cancel ends the probe (and the run)
  // as cancelled, with its terminal event, not by the signal itself.
  watch_stop_signals();
  return probe_each(options, print_table, [&](std::size_t, const ProbeCandidate& c) -> Result<ProbeMeasurement> {
    if (stop_signalled()) return Status::cancelled("the probe was stopped by a signal");
    ProbeMeasurement m = measure_candidate(options, c, *options.config.probe);
    if (stop_signalled()) return Status::cancelled("the probe was stopped by a signal");
    return m;
  });
}

Result<RunConfig> probe_ranks_before_training(const TrainOptions& options, const std::vector<std::string>& rank_args,
                                              int world, bool print_table) {
  // Caught before the probe's first event: a cancel while the ranks start
  // or measure ends the probe as cancelled, never by the signal itself.
  dist::catch_stop_signals();
  auto probed = probe_each(options, print_table, [&](std::size_t i, const ProbeCandidate&) {
    return measure_on_ranks(options, rank_args, world, i);
  });
  std::error_code ec;
  fs::remove_all(fs::path(options.out_dir) / "probe", ec);  // the ranks' files, combined in the plan now
  return probed;
}

RunnerExit probe_candidate_as_rank(const TrainOptions& options, std::size_t candidate) {
  const auto& probe = options.config.probe;
  ProbeMeasurement m;
  if (!probe || candidate >= probe->candidates.size()) {
    m.message = options.config.plan_path + " has no probe candidate " + std::to_string(candidate);
  } else {
    m = measure_candidate(options, probe->candidates[candidate], *probe);
  }
  const std::string path = probe_rank_file(options.out_dir, candidate, options.rank.rank);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  // Read by the launcher once this process has exited: no fsync needed.
  if (Status s = platform::write_file_atomic(path, measurement_json_text(m), platform::Durability::kProcess);
      !s.is_ok()) {
    std::fprintf(stderr, "tailor-runner: rank %d: %s\n", options.rank.rank, s.message().c_str());
    return RunnerExit::kFailure;
  }
  switch (m.outcome) {
    case ProbeMeasurement::Outcome::kFits: return RunnerExit::kOk;
    case ProbeMeasurement::Outcome::kOutOfMemory: return RunnerExit::kOutOfMemory;
    case ProbeMeasurement::Outcome::kFailed: return RunnerExit::kFailure;
  }
  return RunnerExit::kFailure;
}

}  // namespace tailor::runner
