// From a submitted document to a plan the local executor can run: the DSL
// loader (diagnostics with file:line:col), the path rules that keep a job's
// reads inside the spec root and its writes inside its own folder, the
// techniques tailor-runner implements (runner/protocol/capabilities.h), and
// the planner. Also the re-plan after a runtime out-of-memory. Used by the
// API (submissions) and the supervisor (re-plans).
// Thread-safe: no shared mutable state.
#pragma once

#include <functional>
#include <optional>
#include <variant>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "dsl/catalog.h"
#include "dsl/diagnostics.h"
#include "dsl/job_spec.h"
#include "dsl/spec_loader.h"
#include "daemon/executor/slurm_text.h"
#include "strategies/hardware.h"
#include "strategies/planner.h"
#include "strategies/replan.h"

namespace tailor::daemon {

struct PlanningContext {
  const dsl::Catalog* catalog = nullptr;         // nullptr: the built-in one
  std::vector<strategies::Device> gpus;          // detected (or configured) at start-up
  std::optional<Bytes> host_memory;              // detected at start-up
  bool cpu_native_bf16 = true;                   // platform::detect_native_bf16() at start-up
  std::string cpu_model;                         // platform::detect_cpu_model() at start-up
  std::string spec_root;                         // absolute; relative spec paths resolve here
  bool check_files = true;
  // Where jobs run whose spec leaves it to tailord (--executor).
  dsl::ExecutorKind executor = dsl::ExecutorKind::kLocal;
  // The Slurm partition of that name (empty: tailord's, else Slurm's
  // default), as the Slurm executor last read it; empty function: tailord
  // has no Slurm executor. Unavailable (with why) while Slurm cannot be asked.
  std::function<Result<slurm::Partition>(const std::string& name)> slurm_partition;
  dsl::SlurmSpec slurm;  // tailord's sbatch settings, under the spec's
  dsl::TrackingSpec tracking;  // tailord's trackers, for specs that leave them unset
  // tailord's calibration store (platform/calibration_store.h,
  // DATA_DIR/calibration.db): plans take its factors; empty: none.
  std::string calibration_path;
};

// tailord's trackers under the spec's: a tracker the spec leaves unset is
// on when tailord's is, and an MLflow section without a server or an
// experiment takes tailord's. Applied at submission, so the frozen spec
// says what the job reports to.
void apply_tracking_defaults(dsl::JobSpec& spec, const dsl::TrackingSpec& defaults);

struct PlannedJob {
  dsl::JobSpec spec;
  strategies::Plan plan;
  std::string plan_json;      // the plan document (strategies/plan_document.h)
  dsl::ExecutorKind executor = dsl::ExecutorKind::kLocal;  // kLocal or kSlurm
};

// The spec's executor settings over tailord's: the partition, account, QoS,
// time limit and extra options a Slurm job is submitted with.
dsl::SlurmSpec slurm_settings(const dsl::JobSpec& spec, const PlanningContext& ctx);

// `spec` with its resources declared from a Slurm partition's nodes (GPU
// model or memory, host memory per node), so that the planner plans for
// the cluster and not for tailord's machine. ResourceExhausted naming the
// shortfall when the job asks for more nodes, GPUs or memory than the
// partition's usable nodes have; InvalidArgument when the GPUs' kind
// cannot be known (untyped gres and nothing declared).
Result<dsl::JobSpec> spec_on_partition(const dsl::JobSpec& spec, const slurm::Partition& partition,
                                       const dsl::Catalog& catalog);

// Why a submission was refused: a Status plus, for spec errors, every
// diagnostic (to return them all, not only the first).
struct PlanningError {
  Status status;
  dsl::Diagnostics diagnostics;
  std::optional<strategies::Plan> plan;  // when the job does not fit: the closest plan
};

// The bytes a job's estimate reserves: on the CPU every rank's (its ranks
// share the host), capped by a per-rank `memory_limit`, and what an
// offloaded optimizer keeps on the host; on GPUs one GPU's. Under
// strategy.probe the largest of the candidates (any of them may run).
std::int64_t estimated_job_bytes(const strategies::Plan& plan, std::optional<std::int64_t> memory_limit);

// Why a spec is planned: to be trained (its weights must be there), or as a
// what-if (a dry run: a preset plans without weights, as `tailor plan` does).
// The spec submitted as `text`, loaded and checked as load_and_plan loads
// it (relative paths from the spec root, nothing read outside it, the data
// files read): no spec when the diagnostics have errors.
dsl::LoadedSpec load_checked_spec(const std::string& text, const std::string& name, const PlanningContext& ctx,
                                  const std::vector<std::string>& overrides = {});

enum class PlanPurpose { kTrain, kWhatIf };

// The document `text` (YAML or JSON) named `name` in diagnostics, with
// `overrides` ("key=value" as for --set).
std::variant<PlannedJob, PlanningError> load_and_plan(const std::string& text, const std::string& name,
                                                      const PlanningContext& ctx,
                                                      const std::vector<std::string>& overrides = {},
                                                      PlanPurpose purpose = PlanPurpose::kTrain);

// Checks a loaded spec's paths: reads (data.train, data.eval, model.path)
// inside ctx.spec_root, checkpoint.dir relative and without "..", no ".."
// anywhere a path is written in the document. Problems go to `d`.
void check_spec_paths(const dsl::LoadedSpec& loaded, const std::string& spec_root, dsl::Diagnostics& d);

// The next plan after the runner ran out of memory (strategies/replan.h)
// for the job submitted as `text`, planned as load_and_plan plans it: for
// the Slurm partition's nodes when `executor` is kSlurm.
Result<PlannedJob> replan_after_oom(const std::string& text, const std::string& name, const PlanningContext& ctx,
                                    const strategies::OomReport& oom, std::string& story,
                                    dsl::ExecutorKind executor = dsl::ExecutorKind::kLocal);

}  // namespace tailor::daemon
