#include "daemon/planning/job_planning.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <variant>

#include "dsl/spec_loader.h"
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

}  // namespace

void check_spec_paths(const dsl::LoadedSpec& loaded, const std::string& spec_root, dsl::Diagnostics& d) {
  const dsl::Node& doc = loaded.merged;
  struct Field {
    std::initializer_list<const char*> key;
    const char* name;
  };
  // ".." is refused where written, before resolution hides it.
  for (const Field& f : {Field{{"data", "train"}, "data.train"}, Field{{"data", "eval"}, "data.eval"},
                         Field{{"model", "path"}, "model.path"}, Field{{"checkpoint", "dir"}, "checkpoint.dir"}}) {
    const std::string v = scalar_at(doc, f.key);
    if (!v.empty() && has_dotdot(v)) {
      d.error(location_of(doc, f.key), f.name, "'..' is not allowed in paths submitted to tailord");
    }
  }
  const std::string ckpt = scalar_at(doc, {"checkpoint", "dir"});
  if (!ckpt.empty() && fs::path(ckpt).is_absolute()) {
    d.error(location_of(doc, {"checkpoint", "dir"}), "checkpoint.dir",
            "must be relative: a job writes only inside its own folder");
  }
  if (!loaded.spec) return;
  const dsl::JobSpec& s = *loaded.spec;
  const std::pair<const std::string*, Field> reads[] = {
      {&s.data.train, {{"data", "train"}, "data.train"}},
      {&s.data.eval, {{"data", "eval"}, "data.eval"}},
      {&s.model.path, {{"model", "path"}, "model.path"}}};
  for (const auto& [value, f] : reads) {
    if (value->empty()) continue;
    if (!inside(*value, spec_root)) {
      d.error(location_of(doc, f.key), f.name,
              "'" + *value + "' is outside the daemon's spec root " + spec_root + " (see tailord --spec-root)");
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

std::variant<PlannedJob, PlanningError> load_and_plan(const std::string& text, const std::string& name,
                                                      const PlanningContext& ctx,
                                                      const std::vector<std::string>& overrides) {
  dsl::LoadOptions opts;
  opts.catalog = ctx.catalog;
  opts.check_files = ctx.check_files;
  opts.extends_root = ctx.spec_root;
  opts.overrides = overrides;
  dsl::LoadedSpec loaded = dsl::load_job_spec_text(text, name, ctx.spec_root, opts);
  dsl::Diagnostics d = loaded.diagnostics;
  if (loaded.ok() || !loaded.merged.is_null()) check_spec_paths(loaded, ctx.spec_root, d);
  if (d.has_errors()) return spec_error(std::move(d));
  dsl::JobSpec spec = *loaded.spec;
  if (Status s = dsl::check_weights(spec); !s.is_ok()) {
    d.error(location_of(loaded.merged, {"model"}), "model", s.message());
    return spec_error(std::move(d));
  }
  if (Status s = runner::check_pins_executable(spec); !s.is_ok()) {
    d.error(location_of(loaded.merged, {"strategy"}), "strategy", s.message());
    return spec_error(std::move(d));
  }
  auto hw = hardware_for(spec, ctx);
  if (!hw.is_ok()) {
    if (hw.status().code() == StatusCode::kResourceExhausted) {
      return PlanningError{Status::resource_exhausted(spec.name + " cannot be placed: " + hw.status().message()), d,
                           std::nullopt};
    }
    d.error(location_of(loaded.merged, {"resources"}), "resources", hw.status().message());
    return spec_error(std::move(d));
  }
  hw->cpu = strategies::cpu_device(hw->host_memory, ctx.cpu_native_bf16);  // CPU jobs run on this machine's
  spec.planner.runtime = dsl::Runtime::kTailor;  // tailor-runner runs it, whatever the spec predicts for others
  strategies::Plan plan = strategies::plan_job(spec, *hw, plan_options(ctx));
  if (!plan.errors.empty()) {
    for (const auto& e : plan.errors) d.error({name, 0, 0}, "", e);
    return spec_error(std::move(d));
  }
  if (!plan.fits) {
    return PlanningError{Status::resource_exhausted(spec.name + " " + plan.no_fit_reason()), d, plan};
  }
  PlannedJob out{spec, plan, strategies::plan_to_json(plan, spec)};
  return out;
}

Result<PlannedJob> replan_after_oom(const std::string& text, const std::string& name, const PlanningContext& ctx,
                                    const strategies::OomReport& oom, std::string& story) {
  dsl::LoadOptions opts;
  opts.catalog = ctx.catalog;
  opts.check_files = ctx.check_files;
  opts.extends_root = ctx.spec_root;
  auto loaded = dsl::load_job_spec_text(text, name, ctx.spec_root, opts);
  if (!loaded.ok()) return Status::invalid_argument(loaded.diagnostics.to_string());
  dsl::JobSpec spec = *loaded.spec;
  TAILOR_ASSIGN_OR_RETURN(strategies::Replan next,
                          strategies::replan_after_oom(std::move(spec), oom, {ctx.gpus, ctx.host_memory},
                                                       plan_options(ctx)));
  story = next.story;
  std::string plan_json = strategies::plan_to_json(next.plan, next.spec);
  return PlannedJob{std::move(next.spec), std::move(next.plan), std::move(plan_json)};
}

std::int64_t estimated_job_bytes(const strategies::Plan& plan, std::optional<std::int64_t> memory_limit) {
  std::int64_t per_rank = plan.chosen.memory.per_device.total().count();
  if (memory_limit) per_rank = std::min(per_rank, *memory_limit);
  // On the CPU an offloaded optimizer (the runner's host ledger) is the
  // same memory too.
  return plan.on_cpu ? per_rank * std::max<std::int64_t>(1, plan.chosen.strategy.num_gpus) +
                           plan.chosen.memory.host.count()
                     : per_rank;
}

}  // namespace tailor::daemon
