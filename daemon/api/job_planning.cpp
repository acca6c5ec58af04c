#include "daemon/api/job_planning.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <variant>

#include "dsl/spec_loader.h"
#include "strategies/plan_document.h"

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

Result<strategies::Hardware> hardware_for(const dsl::JobSpec& spec, const PlanningContext& ctx) {
  const dsl::Catalog& catalog = ctx.catalog ? *ctx.catalog : dsl::Catalog::builtin();
  return strategies::resolve_hardware(spec, std::nullopt, ctx.gpus, ctx.host_memory, catalog);
}

strategies::PlanOptions plan_options(const PlanningContext& ctx) {
  strategies::PlanOptions o;
  o.catalog = ctx.catalog;
  return o;
}

void forbid_unsupported(dsl::JobSpec& spec) {
  for (const auto& t : techniques_not_in_runner()) {
    if (std::find(spec.strategy.forbid.begin(), spec.strategy.forbid.end(), t) == spec.strategy.forbid.end()) {
      spec.strategy.forbid.push_back(t);
    }
  }
}

}  // namespace

const std::vector<std::string>& techniques_not_in_runner() {
  // The same list as cli/cmd_run.cpp's kNotInRunner (LoRA, QLoRA and
  // adamw_8bit are implemented; ZeRO and offload need several processes).
  static const std::vector<std::string> kList = {"zero1", "zero2", "zero3", "offload_optimizer", "offload_params"};
  return kList;
}

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
  opts.overrides = overrides;
  dsl::LoadedSpec loaded = dsl::load_job_spec_text(text, name, ctx.spec_root, opts);
  dsl::Diagnostics d = loaded.diagnostics;
  if (loaded.ok() || !loaded.merged.is_null()) check_spec_paths(loaded, ctx.spec_root, d);
  if (d.has_errors()) return spec_error(std::move(d));
  dsl::JobSpec spec = *loaded.spec;
  const dsl::StrategySpec& st = spec.strategy;
  if ((st.zero_stage && *st.zero_stage > 0) || (st.offload && *st.offload != dsl::Offload::kNone)) {
    d.error(location_of(loaded.merged, {"strategy"}), "strategy",
            "pins ZeRO or offload, which tailor-runner does not implement yet");
    return spec_error(std::move(d));
  }
  forbid_unsupported(spec);
  auto hw = hardware_for(spec, ctx);
  if (!hw.is_ok()) {
    d.error(location_of(loaded.merged, {"resources"}), "resources", hw.status().message());
    return spec_error(std::move(d));
  }
  strategies::Plan plan = strategies::plan_job(spec, *hw, plan_options(ctx));
  if (!plan.errors.empty()) {
    for (const auto& e : plan.errors) d.error({name, 0, 0}, "", e);
    return spec_error(std::move(d));
  }
  if (!plan.fits) {
    std::string msg = spec.name + " does not fit " + hw->describe() + "; short by " +
                      (plan.shortfall + plan.host_shortfall).to_string();
    if (!plan.smallest_fitting_gpu.empty()) msg += "; the smallest catalog GPU that fits: " + plan.smallest_fitting_gpu;
    return PlanningError{Status::resource_exhausted(msg), d, plan};
  }
  PlannedJob out{spec, plan, strategies::plan_to_json(plan, spec)};
  return out;
}

Result<PlannedJob> replan_after_oom(const std::string& text, const std::string& name, const PlanningContext& ctx,
                                    const strategies::Strategy& failed, Bytes budget,
                                    const std::optional<strategies::MemoryBreakdown>& measured, std::string& story) {
  auto first = load_and_plan(text, name, ctx);
  // The document was accepted before; only the hardware can make it fail now.
  if (auto* e = std::get_if<PlanningError>(&first); e && !e->plan) return e->status;
  dsl::JobSpec spec = std::holds_alternative<PlannedJob>(first) ? std::get<PlannedJob>(first).spec
                                                                 : dsl::JobSpec{};
  if (!std::holds_alternative<PlannedJob>(first)) {
    dsl::LoadOptions opts;
    opts.catalog = ctx.catalog;
    opts.check_files = ctx.check_files;
    auto loaded = dsl::load_job_spec_text(text, name, ctx.spec_root, opts);
    if (!loaded.ok()) return Status::invalid_argument(loaded.diagnostics.to_string());
    spec = *loaded.spec;
    forbid_unsupported(spec);
  }
  // What the device really offers is what the runner was allowed: plan for
  // it as the device memory, headroom included (budget = memory * (1 - headroom)).
  const double keep = 1.0 - spec.resources.headroom;
  const Bytes memory(static_cast<std::int64_t>(static_cast<double>(budget.count()) / keep));
  if (failed.num_gpus >= 1 && !ctx.gpus.empty()) {
    spec.resources.gpu_memory = memory;
  } else {
    spec.resources.host_memory = memory;
  }
  // The precision (and so the checkpoint's tensor types and optimizer
  // state layout) stays: the run resumes from its checkpoint.
  spec.strategy.precision = failed.precision;
  TAILOR_ASSIGN_OR_RETURN(strategies::Hardware hw, hardware_for(spec, ctx));
  strategies::PlanOptions popts = plan_options(ctx);
  story = "re-planned for the measured budget of " + budget.to_string();
  if (measured && measured->activations.count() > 0 && measured->weights.count() > 0 &&
      measured->optimizer_states.count() > 0) {
    const strategies::Candidate est = strategies::evaluate(spec, hw, failed, popts);
    popts.memory = strategies::calibrate(popts.memory, est.memory.per_device, *measured);
    story += ", memory model calibrated by the last measured step";
  }
  strategies::Plan plan = strategies::plan_job(spec, hw, popts);
  // The estimate said the failed strategy fits but it did not: walk the
  // decision tree one step further by pinning it.
  for (int guard = 0; guard < 16 && plan.errors.empty() && (!plan.fits || plan.chosen.strategy == failed); ++guard) {
    const strategies::Strategy& cur = plan.chosen.strategy;
    if (cur.micro_batch_size > 1) {
      spec.training.micro_batch_size = cur.micro_batch_size / 2;
      story += "; pinned micro-batch " + std::to_string(cur.micro_batch_size / 2) + " (global batch kept by accumulation)";
    } else if (cur.checkpoint_every != 1) {
      spec.strategy.gradient_checkpointing = 1;
      story += "; pinned gradient checkpointing on every layer";
    } else {
      break;
    }
    plan = strategies::plan_job(spec, hw, popts);
  }
  if (!plan.errors.empty()) {
    std::string all;
    for (const auto& e : plan.errors) all += (all.empty() ? "" : "; ") + e;
    return Status::resource_exhausted("re-planning after out-of-memory: " + all);
  }
  if (!plan.fits || plan.chosen.strategy == failed) {
    return Status::resource_exhausted("out of memory with " + failed.describe() + " under a budget of " +
                                      budget.to_string() + ", and no smaller strategy fits (" + story + ")");
  }
  story += ": " + failed.describe() + " -> " + plan.chosen.strategy.describe();
  return PlannedJob{spec, plan, strategies::plan_to_json(plan, spec)};
}

}  // namespace tailor::daemon
