#include "daemon/planning/job_planning.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <variant>

#include "dsl/spec_loader.h"
#include "platform/calibration_store.h"
#include "runner/protocol/capabilities.h"
#include "strategies/plan_document.h"
#include "strategies/replan.h"

namespace tailor::daemon {
namespace {

namespace fs = std::filesystem;

bool has_dotdot(const std::string& p) {
  for (const auto& part : fs::path(p)) {
    if (part == "..") return true;
  }
  return false;
}

// `p` lies inside `root` after resolving symlinks of what exists.
bool inside(const std::string& p, const std::string& root) {
  std::error_code ec;
  const fs::path a = fs::weakly_canonical(fs::path(p), ec);
  if (ec) return false;
  const fs::path r = fs::weakly_canonical(fs::path(root), ec);
  if (ec) return false;
  auto ai = a.begin();
  for (auto ri = r.begin(); ri != r.end(); ++ri, ++ai) {
    if (ri->empty()) continue;  // trailing slash
    if (ai == a.end() || *ai != *ri) return false;
  }
  return true;
}

dsl::SourceLocation location_of(const dsl::Node& root, std::initializer_list<const char*> path) {
  const dsl::Node* n = &root;
  for (const char* k : path) {
    n = n->find(k);
    if (!n) return {};
  }
  return n->location;
}

std::string scalar_at(const dsl::Node& root, std::initializer_list<const char*> path) {
  const dsl::Node* n = &root;
  for (const char* k : path) {
    n = n->find(k);
    if (!n) return {};
  }
  return n->is_scalar() ? n->scalar : std::string();
}

PlanningError spec_error(dsl::Diagnostics d) {
  std::string text = d.to_string();
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return {Status::invalid_argument(text), std::move(d), std::nullopt};
}

// "2x NVIDIA RTX 4090 (24.0 GiB)" / "no GPU"
std::string our_gpus(const std::vector<strategies::Device>& gpus) {
  if (gpus.empty()) return "no GPU";
  return std::to_string(gpus.size()) + "x " + gpus.front().name + " (" + gpus.front().memory.to_string() + ")";
}

// The hardware tailord runs the job on: its own GPUs. What the spec's
// resources declare (a count, a GPU model, memory per GPU) is a
// requirement of them, refused with the shortfall when they fall short, not
// hardware to plan for: a plan for GPUs tailord lacks would fail at start.
Result<strategies::Hardware> hardware_for(const dsl::JobSpec& spec, const PlanningContext& ctx) {
  const dsl::Catalog& catalog = ctx.catalog ? *ctx.catalog : dsl::Catalog::builtin();
  const dsl::ResourcesSpec& r = spec.resources;
  const auto have = static_cast<std::int64_t>(ctx.gpus.size());
  const bool cpu_job = r.gpu_count && *r.gpu_count == 0;
  const bool declared = !r.gpu_model.empty() || r.gpu_memory.has_value();
  if (r.nodes > 1) {
    return Status::resource_exhausted("the job spans " + std::to_string(r.nodes) +
                                      " nodes; this tailord runs jobs on its own machine (1 node)");
  }
  if (!cpu_job && declared) {
    const std::int64_t want = r.gpu_count.value_or(1);
    const std::string here = "this tailord has " + our_gpus(ctx.gpus);
    if (want > have) {
      return Status::resource_exhausted("the job asks for " + std::to_string(want) + " GPU(s); " + here + ": short by " +
                                        std::to_string(want - have) + " GPU(s)");
    }
    const strategies::Device& ours = ctx.gpus.front();
    if (!r.gpu_model.empty()) {
      const dsl::GpuModel* g = catalog.find_gpu(r.gpu_model);
      if (g == nullptr) return Status::invalid_argument("unknown GPU model \"" + r.gpu_model + "\"");
      if (ours.catalog_key != g->key && ours.memory < g->memory) {
        return Status::resource_exhausted("resources.gpu_model asks for " + g->key + " (" + g->memory.to_string() +
                                          "); " + here + ": short by " + (g->memory - ours.memory).to_string() +
                                          " per GPU");
      }
    }
    if (r.gpu_memory && *r.gpu_memory > ours.memory) {
      return Status::resource_exhausted("resources.gpu_memory asks for " + r.gpu_memory->to_string() + " per GPU; " +
                                        here + ": short by " + (*r.gpu_memory - ours.memory).to_string() + " per GPU");
    }
    // Plan on our GPUs; a smaller declared memory is a cap on them.
    dsl::JobSpec local = spec;
    local.resources.gpu_model.clear();
    local.resources.gpu_memory.reset();
    local.resources.gpu_count = want;
    TAILOR_ASSIGN_OR_RETURN(strategies::Hardware hw,
                            strategies::resolve_hardware(local, std::nullopt, ctx.gpus, ctx.host_memory, catalog));
    if (r.gpu_memory) {
      for (strategies::Device& d : hw.gpus) d.memory = d.free_memory = *r.gpu_memory;
    }
    return hw;
  }
  if (!cpu_job && r.gpu_count && *r.gpu_count > have) {
    return Status::resource_exhausted("the job asks for " + std::to_string(*r.gpu_count) + " GPU(s); this tailord has " +
                                      our_gpus(ctx.gpus) + ": short by " + std::to_string(*r.gpu_count - have) +
                                      " GPU(s)");
  }
  return strategies::resolve_hardware(spec, std::nullopt, ctx.gpus, ctx.host_memory, catalog);
}

strategies::PlanOptions plan_options(const PlanningContext& ctx) { return runner::runner_plan_options(ctx.catalog); }

std::string plural(std::int64_t n, const std::string& what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

// The executor a job runs on: the spec's choice, else tailord's.
dsl::ExecutorKind executor_of(const dsl::JobSpec& spec, const PlanningContext& ctx) {
  return spec.executor.kind == dsl::ExecutorKind::kDefault ? ctx.executor : spec.executor.kind;
}

}  // namespace

dsl::SlurmSpec slurm_settings(const dsl::JobSpec& spec, const PlanningContext& ctx) {
  dsl::SlurmSpec out = ctx.slurm;
  const dsl::SlurmSpec& s = spec.executor.slurm;
  if (!s.partition.empty()) out.partition = s.partition;
  if (!s.account.empty()) out.account = s.account;
  if (!s.qos.empty()) out.qos = s.qos;
  if (!s.time_limit.empty()) out.time_limit = s.time_limit;
  out.sbatch_options.insert(out.sbatch_options.end(), s.sbatch_options.begin(), s.sbatch_options.end());
  return out;
}

Result<dsl::JobSpec> spec_on_partition(const dsl::JobSpec& spec, const slurm::Partition& partition,
                                       const dsl::Catalog& catalog) {
  const dsl::ResourcesSpec& r = spec.resources;
  const std::vector<slurm::Node> nodes = partition.usable_nodes();
  const std::string where = partition.describe();
  if (nodes.empty()) return Status::unavailable(where + ": no node can take a job now");
  const auto have_nodes = static_cast<std::int64_t>(nodes.size());
  if (r.nodes > have_nodes) {
    return Status::resource_exhausted("the job asks for " + plural(r.nodes, "node") + "; " + where + ": short by " +
                                      plural(r.nodes - have_nodes, "node"));
  }
  if (partition.max_nodes > 0 && r.nodes > partition.max_nodes) {
    return Status::resource_exhausted("the job asks for " + plural(r.nodes, "node") + "; partition " + partition.name +
                                      " allows " + std::to_string(partition.max_nodes) + " a job (MaxNodes)");
  }
  if (!r.gpu_ids.empty()) {
    return Status::invalid_argument("resources.gpus lists device indices, which name tailord's own GPUs; give a count "
                                    "for a job on Slurm");
  }
  int gpus = nodes.front().gpus;
  std::int64_t memory_mib = nodes.front().memory_mib;
  for (const slurm::Node& n : nodes) {
    gpus = std::min(gpus, n.gpus);
    memory_mib = std::min(memory_mib, n.memory_mib);
  }
  dsl::JobSpec out = spec;
  dsl::ResourcesSpec& o = out.resources;
  const Bytes node_memory = Bytes::mib(static_cast<double>(memory_mib));
  if (memory_mib > 0) {
    if (r.host_memory && *r.host_memory > node_memory) {
      return Status::resource_exhausted("resources.host_memory asks for " + r.host_memory->to_string() + " per node; " +
                                        where + ": short by " + (*r.host_memory - node_memory).to_string() + " per node");
    }
    if (!r.host_memory) o.host_memory = node_memory;
  }
  const bool cpu_job = r.gpu_count && *r.gpu_count == 0;
  const bool wants_gpus = (r.gpu_count && *r.gpu_count > 0) || !r.gpu_model.empty() || r.gpu_memory.has_value();
  if (cpu_job || (gpus == 0 && !wants_gpus)) {
    if (r.nodes > 1) {
      return Status::resource_exhausted("the job spans " + plural(r.nodes, "node") + " without GPUs; " + where +
                                        (gpus == 0 ? " has no GPUs" : "") +
                                        ", and CPU training runs on one node (give the job GPUs, or one node)");
    }
    o.gpu_count = 0;
    return out;
  }
  if (gpus == 0) {
    return Status::resource_exhausted("the job asks for GPUs; " + where + " has none (Gres=gpu:N on its nodes)");
  }
  const std::int64_t want = r.gpu_count.value_or(gpus);
  if (want > gpus) {
    return Status::resource_exhausted("the job asks for " + plural(want, "GPU") + " per node; " + where +
                                      ": short by " + plural(want - gpus, "GPU") + " per node");
  }
  o.gpu_count = want;
  if (r.gpu_model.empty() && !r.gpu_memory) {
    const std::string& type = nodes.front().gpu_type;
    const dsl::GpuModel* g = type.empty() ? nullptr : catalog.find_gpu(type);
    if (g == nullptr) {
      return Status::invalid_argument(
          "the GPUs of " + partition.name + " are " + (type.empty() ? "untyped (Gres=gpu:N)" : "of gres type \"" + type + "\", which the GPU catalog does not know") +
          ": declare resources.gpu_model or resources.gpu_memory so the plan knows their memory");
    }
    o.gpu_model = g->key;
  }
  return out;
}

void check_spec_paths(const dsl::LoadedSpec& loaded, const std::string& spec_root, dsl::Diagnostics& d) {
  const dsl::Node& doc = loaded.merged;
  struct Field {
    std::initializer_list<const char*> key;
    const char* name;
  };
  // ".." is refused where written, before resolution hides it.
  for (const Field& f : {Field{{"data", "train"}, "data.train"}, Field{{"data", "eval"}, "data.eval"},
                         Field{{"model", "path"}, "model.path"}, Field{{"model", "adapter"}, "model.adapter"},
                         Field{{"checkpoint", "dir"}, "checkpoint.dir"}}) {
    const std::string v = scalar_at(doc, f.key);
    if (!v.empty() && has_dotdot(v)) {
      d.error(location_of(doc, f.key), f.name, "'..' is not allowed in paths submitted to tailord");
    }
  }
  // data.train as a list: each dataset's path (a string, or a map's path).
  if (const dsl::Node* data = doc.find("data"); data != nullptr) {
    if (const dsl::Node* train = data->find("train"); train != nullptr && train->is_sequence()) {
      for (std::size_t i = 0; i < train->items.size(); ++i) {
        const dsl::Node& item = train->items[i];
        const dsl::Node* path = item.is_map() ? item.find("path") : &item;
        if (path != nullptr && path->is_scalar() && has_dotdot(path->scalar)) {
          d.error(path->location, "data.train[" + std::to_string(i) + "]",
                  "'..' is not allowed in paths submitted to tailord");
        }
      }
    }
  }
  const std::string ckpt = scalar_at(doc, {"checkpoint", "dir"});
  if (!ckpt.empty() && fs::path(ckpt).is_absolute()) {
    d.error(location_of(doc, {"checkpoint", "dir"}), "checkpoint.dir",
            "must be relative: a job writes only inside its own folder");
  }
  if (!loaded.spec) return;
  const dsl::JobSpec& s = *loaded.spec;
  // (Keys as two plain pointers: a Field inside a std::pair would hold an
  // initializer_list whose array dies with the pair's construction.)
  struct Read {
    const std::string* value;
    const char *section, *key, *name;
  };
  const Read reads[] = {{&s.data.train, "data", "train", "data.train"},
                        {&s.data.eval, "data", "eval", "data.eval"},
                        {&s.model.path, "model", "path", "model.path"},
                        {&s.model.adapter, "model", "adapter", "model.adapter"}};
  for (const Read& r : reads) {
    if (r.value->empty()) continue;
    if (!inside(*r.value, spec_root)) {
      d.error(location_of(doc, {r.section, r.key}), r.name,
              "'" + *r.value + "' is outside the daemon's spec root " + spec_root + " (see tailord --spec-root)");
    }
  }
  for (std::size_t i = 1; i < s.data.sources.size(); ++i) {  // the first is data.train, checked above
    const std::string& value = s.data.sources[i].path;
    if (!value.empty() && !inside(value, spec_root)) {
      d.error(location_of(doc, {"data", "train"}), "data.train[" + std::to_string(i) + "]",
              "'" + value + "' is outside the daemon's spec root " + spec_root + " (see tailord --spec-root)");
    }
  }
  // The job name names nothing on disk (jobs live under their ids), but it
  // is shown and used in metric labels: the DSL's rule is rechecked here.
  const std::string& n = s.name;
  const bool ok_name = !n.empty() && n.size() <= 63 && (std::isalnum(static_cast<unsigned char>(n[0])) != 0) &&
                       std::all_of(n.begin(), n.end(), [](char c) {
                         return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
                       });
  if (!ok_name) d.error(location_of(doc, {"name"}), "name", "job names are [a-z0-9][a-z0-9._-]*, at most 63 characters");
}

dsl::LoadedSpec load_checked_spec(const std::string& text, const std::string& name, const PlanningContext& ctx,
                                  const std::vector<std::string>& overrides) {
  dsl::LoadOptions opts;
  opts.catalog = ctx.catalog;
  opts.check_files = ctx.check_files;
  opts.read_root = ctx.spec_root;
  opts.overrides = overrides;
  dsl::LoadedSpec loaded = dsl::load_job_spec_text(text, name, ctx.spec_root, opts);
  if (loaded.ok() || !loaded.merged.is_null()) check_spec_paths(loaded, ctx.spec_root, loaded.diagnostics);
  if (loaded.diagnostics.has_errors()) loaded.spec.reset();
  return loaded;
}

void apply_tracking_defaults(dsl::JobSpec& spec, const dsl::TrackingSpec& defaults) {
  dsl::TensorboardSpec& tb = spec.tracking.tensorboard;
  if (!tb.enabled && defaults.tensorboard.on()) tb.enabled = true;
  dsl::MlflowSpec& m = spec.tracking.mlflow;
  if (!m.enabled && defaults.mlflow.on()) m.enabled = true;
  if (!m.on()) return;
  if (m.uri.empty()) m.uri = defaults.mlflow.uri;
  if (m.experiment.empty()) m.experiment = defaults.mlflow.experiment;
}

std::variant<PlannedJob, PlanningError> load_and_plan(const std::string& text, const std::string& name,
                                                      const PlanningContext& ctx,
                                                      const std::vector<std::string>& overrides, PlanPurpose purpose) {
  dsl::LoadedSpec loaded = load_checked_spec(text, name, ctx, overrides);
  dsl::Diagnostics d = loaded.diagnostics;
  if (!loaded.ok()) return spec_error(std::move(d));
  dsl::JobSpec spec = *loaded.spec;
  apply_tracking_defaults(spec, ctx.tracking);
  if (Status s = dsl::check_weights(spec); purpose == PlanPurpose::kTrain && !s.is_ok()) {
    d.error(location_of(loaded.merged, {"model"}), "model", s.message());
    return spec_error(std::move(d));
  }
  if (Status s = dsl::check_tracking(spec); purpose == PlanPurpose::kTrain && !s.is_ok()) {
    d.error(location_of(loaded.merged, {"tracking", "mlflow"}), "tracking.mlflow.uri", s.message());
    return spec_error(std::move(d));
  }
  if (Status s = runner::check_pins_executable(spec); !s.is_ok()) {
    d.error(location_of(loaded.merged, {"strategy"}), "strategy", s.message());
    return spec_error(std::move(d));
  }
  dsl::ExecutorKind executor = dsl::ExecutorKind::kLocal;
  const dsl::ExecutorKind kind = executor_of(spec, ctx);
  const dsl::Catalog& catalog = ctx.catalog ? *ctx.catalog : dsl::Catalog::builtin();
  Result<strategies::Hardware> hw = Status::internal("unplanned");
  auto on_slurm = [&]() -> Result<strategies::Hardware> {
    if (!ctx.slurm_partition) {
      return Status::failed_precondition("the job asks for the Slurm executor, which this tailord does not have "
                                         "(tailord --executor slurm|auto)");
    }
    TAILOR_ASSIGN_OR_RETURN(slurm::Partition partition, ctx.slurm_partition(slurm_settings(spec, ctx).partition));
    TAILOR_ASSIGN_OR_RETURN(dsl::JobSpec placed, spec_on_partition(spec, partition, catalog));
    TAILOR_ASSIGN_OR_RETURN(strategies::Hardware h,
                            strategies::resolve_hardware(placed, std::nullopt, {}, placed.resources.host_memory, catalog));
    h.source = partition.describe();
    spec = std::move(placed);
    executor = dsl::ExecutorKind::kSlurm;
    return h;
  };
  if (kind == dsl::ExecutorKind::kSlurm) {
    hw = on_slurm();
  } else {
    hw = hardware_for(spec, ctx);
    if (kind == dsl::ExecutorKind::kAuto && ctx.slurm_partition) {
      // What this machine cannot hold goes to the cluster.
      bool local_fits = hw.is_ok();
      if (local_fits) {
        strategies::Hardware probe = *hw;
        probe.cpu = strategies::cpu_device(probe.host_memory, ctx.cpu_native_bf16);
        dsl::JobSpec tailor_spec = spec;
        tailor_spec.planner.runtime = dsl::Runtime::kTailor;
        local_fits = strategies::plan_job(tailor_spec, probe, plan_options(ctx)).fits;
      }
      if (!local_fits && hw.status().code() != StatusCode::kInvalidArgument) {
        auto there = on_slurm();
        // Neither place: the cluster's reason (the machine's is the smaller).
        hw = std::move(there);
      }
    }
  }
  if (!hw.is_ok() && (hw.status().code() == StatusCode::kFailedPrecondition ||
                      hw.status().code() == StatusCode::kUnavailable)) {
    return PlanningError{Status(hw.status().code(), spec.name + " cannot be placed: " + hw.status().message()), d,
                         std::nullopt};
  }
  if (!hw.is_ok()) {
    if (hw.status().code() == StatusCode::kResourceExhausted) {
      return PlanningError{Status::resource_exhausted(spec.name + " cannot be placed: " + hw.status().message()), d,
                           std::nullopt};
    }
    d.error(location_of(loaded.merged, {"resources"}), "resources", hw.status().message());
    return spec_error(std::move(d));
  }
  hw->cpu = strategies::cpu_device(hw->host_memory, ctx.cpu_native_bf16);  // CPU jobs run on this machine's
  hw->cpu.model = ctx.cpu_model;
  spec.planner.runtime = dsl::Runtime::kTailor;  // tailor-runner runs it, whatever the spec predicts for others
  strategies::PlanOptions popts = plan_options(ctx);
  if (!ctx.calibration_path.empty()) {
    popts.calibration = platform::load_calibration(ctx.calibration_path, strategies::calibration_key(spec, *hw));
  }
  strategies::Plan plan = strategies::plan_job(spec, *hw, popts);
  if (!plan.errors.empty()) {
    for (const auto& e : plan.errors) d.error({name, 0, 0}, "", e);
    return spec_error(std::move(d));
  }
  if (!plan.fits) {
    return PlanningError{Status::resource_exhausted(spec.name + " " + plan.no_fit_reason()), d, plan};
  }
  if (executor == dsl::ExecutorKind::kSlurm && plan.chosen.strategy.num_gpus > 1 && !plan.probe_candidates.empty()) {
    // srun starts each rank itself, so no launcher of ours is there to
    // start a candidate's ranks together and stop them all when one runs
    // out of memory: the ranks would wait on it in a collective.
    plan.probe_candidates.clear();
    plan.probe_limited = "not probed: on Slurm, srun starts the " + std::to_string(plan.chosen.strategy.num_gpus) +
                         " ranks, and a probe of several ranks needs tailor-runner's own launcher (the local "
                         "executor, or tailor run)";
  }
  PlannedJob out{spec, plan, strategies::plan_to_json(plan, spec), executor};
  return out;
}

Result<PlannedJob> replan_after_oom(const std::string& text, const std::string& name, const PlanningContext& ctx,
                                    const strategies::OomReport& oom, std::string& story,
                                    dsl::ExecutorKind executor) {
  dsl::LoadOptions opts;
  opts.catalog = ctx.catalog;
  opts.check_files = ctx.check_files;
  opts.read_root = ctx.spec_root;
  auto loaded = dsl::load_job_spec_text(text, name, ctx.spec_root, opts);
  if (!loaded.ok()) return Status::invalid_argument(loaded.diagnostics.to_string());
  dsl::JobSpec spec = *loaded.spec;
  strategies::DetectedHardware here{ctx.gpus, ctx.host_memory};
  if (executor == dsl::ExecutorKind::kSlurm) {
    if (!ctx.slurm_partition) return Status::failed_precondition("this tailord no longer has a Slurm executor");
    TAILOR_ASSIGN_OR_RETURN(slurm::Partition partition, ctx.slurm_partition(slurm_settings(spec, ctx).partition));
    TAILOR_ASSIGN_OR_RETURN(spec, spec_on_partition(spec, partition, ctx.catalog ? *ctx.catalog : dsl::Catalog::builtin()));
    here = {{}, spec.resources.host_memory};
  }
  TAILOR_ASSIGN_OR_RETURN(strategies::Replan next,
                          strategies::replan_after_oom(std::move(spec), oom, here, plan_options(ctx)));
  story = next.story;
  std::string plan_json = strategies::plan_to_json(next.plan, next.spec);
  return PlannedJob{std::move(next.spec), std::move(next.plan), std::move(plan_json), executor};
}

namespace {

std::int64_t candidate_bytes(const strategies::Plan& plan, const strategies::Candidate& c,
                             std::optional<std::int64_t> memory_limit) {
  std::int64_t per_rank = c.memory.per_device.total().count();
  if (memory_limit) per_rank = std::min(per_rank, *memory_limit);
  // On the CPU an offloaded optimizer (the runner's host ledger) is the
  // same memory too.
  return plan.on_cpu ? per_rank * std::max<std::int64_t>(1, c.strategy.num_gpus) + c.memory.host.count() : per_rank;
}

}  // namespace

std::int64_t estimated_job_bytes(const strategies::Plan& plan, std::optional<std::int64_t> memory_limit) {
  // strategy.probe runs each candidate in turn, and trains whichever
  // measures fastest: the largest of them is what the job may hold.
  std::int64_t bytes = candidate_bytes(plan, plan.chosen, memory_limit);
  for (const strategies::Candidate& c : plan.probe_candidates) {
    bytes = std::max(bytes, candidate_bytes(plan, c, memory_limit));
  }
  return bytes;
}

}  // namespace tailor::daemon
