// strategy.probe before training (trainer.h's probe_before_training): the
// plan's candidates measured one after another in this process, each a
// Run of its own (run_probe.cpp) freed before the next, then the plan
// written again with what they measured.
#include <cstdio>
#include <ctime>
#include <filesystem>

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

}  // namespace

Result<RunConfig> probe_before_training(const TrainOptions& options, bool print_table) {
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
    c.measured = measure_candidate(options, c, table);
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
  TAILOR_ASSIGN_OR_RETURN(const std::string text, probed_plan_json(options.config.plan_text, table));
  const std::string path = (fs::path(options.out_dir) / kProbedPlanFile).string();
  TAILOR_RETURN_IF_ERROR(platform::write_file_atomic(path, text));
  event(events::kProbeDone, [&](JsonWriter& w) {
    w.field("chosen", static_cast<std::int64_t>(table.chosen));
    w.field("summary",
            table.chosen >= 0 ? table.candidates[static_cast<std::size_t>(table.chosen)].summary : std::string());
    w.field("seconds", table.seconds).field("plan", path);
  });
  if (!options.quiet && print_table) {
    std::fprintf(stderr, "%s", format_probe_table(table, !options.config.on_cpu).c_str());
  }
  return parse_plan(text, path);
}

}  // namespace tailor::runner
