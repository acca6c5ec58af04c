// `tailor plan JOB.yaml`: the fastest strategy that fits, with the memory
// table, the decision trace and the alternatives.
#include <cstdio>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/calibration.h"
#include "cli/commands.h"
#include "cli/job_view.h"
#include "cli/probe_run.h"
#include "cli/rest_client.h"
#include "cli/spec_options.h"
#include "core/args.h"
#include "core/text.h"
#include "core/units.h"
#include "dsl/spec_fields.h"
#include "dsl/spec_loader.h"
#include "dsl/yaml_tree.h"
#include "platform/command.h"
#include "platform/executable.h"
#include "runner/protocol/capabilities.h"
#include "runner/protocol/probe.h"
#include "strategies/hardware.h"
#include "strategies/headroom.h"
#include "strategies/plan_document.h"
#include "strategies/planner.h"
#include "strategies/runtime_profile.h"

namespace tailor::cli {
namespace {

constexpr const char* kPlanHelp = R"(usage: tailor plan [OPTIONS] JOB.yaml
       tailor plan --model PRESET|FOLDER [--gpus SPEC] [--adapter A] [--seq-len N] [--batch N]

Plans a job: predicts each GPU's peak memory by component, walks the OOM
decision tree, and picks the fastest strategy that fits, with the reasons.
With --model instead of a spec file, plans fine-tuning that model (a preset
from `tailor catalog models`, or a Hugging Face folder) without writing
YAML, e.g.  tailor plan --model llama-3.1-8b --gpus 1xRTX-4090 --adapter qlora
Exit 0 when the job fits, 3 when nothing fits, 1 on a bad spec, 2 on a bad
command line.

options:
  --model NAME|DIR    quick plan: this preset or model folder
  --adapter A         quick plan: none (full fine-tune), lora, qlora or auto
                      (default: auto, the planner's choice)
  --seq-len N         quick plan: tokens per sequence (default: min(2048,
                      the model's context))
  --batch N           quick plan: global batch in sequences (default 32)
  --gpus SPEC         plan for this hardware instead of detecting it:
                      2xA6000, 1x24GiB, 4xH100, 8xA100-80GB, or 0 / cpu
                      (tailor catalog gpus lists the GPUs); add ,host=SIZE
                      for each machine's RAM (8xH100,host=1TiB), else this
                      machine's stands in and the plan says so, and
                      ,nodes=N for N such machines (8xH100,host=1TiB,nodes=2)
  --set KEY=VALUE     override a spec key (repeatable)
  --output FORMAT     text (default) or json (the plan document)
  --catalog DIR       use models.yaml and gpus.yaml from DIR
  --no-check-files    do not require data files to exist, nor read them
  --remote            ask tailord to plan it for the daemon's machine (with
                      --addr/--token/--data-dir, as `tailor submit`)
  --addr HOST:PORT, --token TOKEN, --data-dir DIR
                      where tailord is and its token (see tailor submit --help)
  --explain           add a table of the chosen plan beside the best plan of
                      each other kind: memory per GPU, spare, tokens/s, and
                      why each lost
  --calibration FILE  the calibration store (tailor calibration --help): plans
                      for this machine take its measured factors
  --no-calibration    plan from the estimates alone
  --probe K           measure the K fastest plans that fit (1-5) on this
                      machine with tailor-runner (a few steps each on the
                      longest batches; a plan of several ranks by its
                      ranks together) and show predicted beside measured
                      speed and peak; the plan then trains the fastest
                      measured one (as strategy.probe: K does in a spec).
                      With --output json, the plan document with the
                      measurements
  -h, --help          show this help

Plans are made only of what this build's tailor-runner executes, so
`tailor run` and tailord make the same plan; when a plan it cannot run
would be better, the output says which and why.
)";

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// What planner.transformers keeps beyond 5.x in the chosen plan: the
// quirks strategies::apply_versions adds to the profile's, "" when none.
std::string transformers_keeps(const dsl::JobSpec& spec, const strategies::Strategy& s) {
  strategies::MemoryInput profile, versioned;
  strategies::apply(strategies::runtime_profile(spec.planner.runtime), profile);
  versioned = profile;
  strategies::apply_versions(spec.planner, versioned);
  const strategies::RuntimeQuirks &before = profile.quirks, &after = versioned.quirks;
  std::vector<std::string> kept;
  // Held only where the memory model counts them: ZeRO-3, adapters, checkpointing.
  if (after.held_checkpoints && !before.held_checkpoints && s.zero_stage >= 3 && s.adapter != dsl::Adapter::kNone &&
      s.checkpoint_every > 0) {
    kept.push_back(
        "every checkpointed layer input and its gradient until backward ends (reentrant checkpointing around "
        "FSDP1 units; use_reentrant=False keeps none of it)");
  }
  if (after.shifted_logits_copy && !before.shifted_logits_copy) {
    kept.push_back("an fp32 copy of the shifted logits in its loss");
  }
  if (kept.empty()) return {};
  std::string out = "transformers " + spec.planner.transformers + " keeps ";
  for (std::size_t i = 0; i < kept.size(); ++i)
    out += (i ? "; and " : "") + kept[i];
  return out;
}

// The chosen plan and its alternatives side by side: memory, spare and speed.
void print_alternatives_table(const strategies::Plan& plan, std::ostream& out) {
  out << "\nThe chosen plan and the best of each other kind\n";
  out << "  " << pad_right("", 3) << pad_right("PER GPU", 10) << pad_right("SPARE", 10) << pad_right("TOKENS/S", 10)
      << pad_right("SPEED", 8) << "STRATEGY / WHY NOT\n";
  const double base = plan.chosen.throughput.tokens_per_second;
  auto line = [&](const char* mark, const strategies::Candidate& c, const std::string& why) {
    const Bytes spare = c.spare();
    out << "  " << pad_right(mark, 3) << pad_right(c.memory.per_device.total().to_string(), 10)
        << pad_right(spare.count() >= 0 ? spare.to_string() : "-" + (Bytes(0) - spare).to_string(), 10)
        << pad_right(fmt("%.0f", c.throughput.tokens_per_second), 10)
        << pad_right(base > 0 ? fmt("%.2fx", c.throughput.tokens_per_second / base) : "-", 8) << c.strategy.describe()
        << "\n";
    if (!why.empty()) out << "  " << pad_right("", 41) << why << "\n";
  };
  line(plan.fits ? "*" : "x", plan.chosen, plan.fits ? "chosen" : "closest; does not fit");
  for (const auto& a : plan.alternatives) line(" ", a.candidate, a.why);
  if (const auto& f = plan.fastest_by_estimate) line(" ", f->candidate, f->why);
}

// The lengths of data.train's examples, from `tailor-data stats` (the data
// pipeline lives there): one line for the plan, or "" when there is no
// such file to read (a tokens file, no tailor-data) or it cannot be read.
std::string data_lengths(const std::string& file, const Args& args, const dsl::JobSpec& spec) {
  if (spec.data.train.empty() || spec.data.format == dsl::DataFormat::kTokens) return {};
  auto tool = platform::find_executable("tailor-data", "", "TAILOR_DATA");
  if (!tool.is_ok()) return {};
  platform::CommandRequest req;
  req.argv = {*tool, "stats", file, "--output", "json"};
  for (const std::string& o : args.all("set")) req.argv.insert(req.argv.end(), {"--set", o});
  req.timeout_seconds = 300;
  auto ran = platform::run_command(req);
  if (!ran.is_ok() || !ran->ok()) return {};
  const auto j = nlohmann::json::parse(ran->out, nullptr, false);
  if (!j.is_object() || !j.contains("tokens_per_example")) return {};
  const auto& t = j["tokens_per_example"];
  const bool pairs = j["pairs"].is_number();
  std::string line = format_count(j.value("examples", 0.0)) + (pairs ? " rows" : " examples");
  if (j.contains("desirable") && j["desirable"].is_number()) {
    line += " (" + format_count(j["desirable"].get<double>()) + " desirable)";
  }
  if (!j.value("complete", true)) line += " (the first; more not read)";
  line += ", tokens per " + std::string(pairs ? "row" : "example") + " p50 " + std::to_string(t.value("p50", 0)) +
          ", p90 " + std::to_string(t.value("p90", 0)) + ", max " + std::to_string(t.value("max", 0)) + "; " +
          std::to_string(j.value("longer_than_seq_len", 0)) + " over seq_len + 1 (" +
          j.value("long_examples", std::string("truncated")) + ")";
  return line;
}

void print_text(const strategies::Plan& plan, const dsl::JobSpec& spec, const std::vector<dsl::DataFileFacts>& data,
                const std::string& lengths, bool explain, std::ostream& out) {
  using strategies::Offload;
  const auto& s = plan.chosen.strategy;
  const auto& m = plan.chosen.memory.per_device;
  out << "Plan for " << spec.name << ": "
      << (spec.model.preset.empty() ? std::string(dsl::to_string(spec.model.arch.family)) : spec.model.preset) << " ("
      << format_count(static_cast<double>(spec.model.arch.parameter_count())) << " params), seq_len " << plan.seq_len
      << ", global batch " << plan.global_batch << "\n";
  out << "Hardware: " << plan.hardware.describe() << " [" << plan.hardware.source << "]\n";
  const dsl::Packing packing = dsl::packing_of(spec.data);
  out << "Packing: " << dsl::describe(packing)
      << (packing == dsl::Packing::kStream
              ? std::string()
              : std::string("; an example over seq_len + 1 tokens is ") +
                    (spec.data.on_long_example == dsl::LongExample::kDrop ? "dropped" : "truncated") +
                    " (on_long_example: " + dsl::to_string(spec.data.on_long_example) + ")")
      << "\n";
  if (!data.empty()) {
    out << "Data:";
    for (std::size_t i = 0; i < data.size(); ++i) out << (i ? "; " : " ") << data[i].key << " " << dsl::describe(data[i]);
    out << "\n";
  }
  if (!lengths.empty()) out << "Lengths: " << lengths << "\n";
  if (spec.planner.runtime != dsl::Runtime::kTailor) {
    out << "Runtime: " << dsl::to_string(spec.planner.runtime)
        << (spec.planner.transformers.empty() ? std::string() : ", transformers " + spec.planner.transformers)
        << " (memory as that stack keeps it: a prediction for its run, not tailor-runner's)\n";
    if (const std::string kept = transformers_keeps(spec, plan.chosen.strategy); !kept.empty())
      out << "  " << kept << "\n";
    if (const Bytes root = plan.chosen.memory.root_unit; root.count() > 0) {
      out << "  ZeRO-3 as FSDP1 runs it (accelerate's, Lightning's): the root unit (embedding, final norm, head) "
          << "stays gathered through the step, " << root.to_string()
          << " a GPU in overhead; DeepSpeed's ZeRO-3 gathers by submodule, which this prediction does not model\n";
    }
  }
  if (const auto& c = plan.calibration) {
    out << "Calibrated: " << fmt("peak estimates x%.3f", c->memory) << " (" << plan.chosen.memory.calibrated.to_string()
        << " on this plan), " << fmt("speeds x%.3f", c->speed) << ", from " << c->runs
        << (c->runs == 1 ? " run" : " runs") << " measured on " << c->key;
    if (c->busy > 0) {
      out << "; the speeds of " << c->busy << (c->busy == 1 ? " run" : " runs")
          << " left out, measured while other processes held the cores";
    }
    out << " (tailor calibration show)\n";
  }
  if (plan.probe_requested > 0) {
    out << "Probe: strategy.probe " << plan.probe_requested << ": ";
    if (plan.probe_candidates.empty()) {
      out << plan.probe_limited << "\n";
    } else {
      out << "tailor-runner measures these first and trains the fastest measured (tailor plan --probe "
          << plan.probe_requested << " measures them now)\n";
      for (std::size_t i = 0; i < plan.probe_candidates.size(); ++i) {
        const strategies::Candidate& c = plan.probe_candidates[i];
        out << "  " << i + 1 << ". " << c.strategy.describe() << ": " << c.memory.per_device.total().to_string() << ", "
            << fmt("%.0f", c.throughput.tokens_per_second) << " tokens/s estimated\n";
      }
      if (!plan.probe_limited.empty()) out << "  " << plan.probe_limited << "\n";
    }
  }
  out << "\n";
  out << (plan.fits ? "Strategy (fits)\n" : "Closest strategy (does NOT fit)\n");
  auto row = [&](const std::string& k, const std::string& v) { out << "  " << pad_right(k, 24) << v << "\n"; };
  row("precision", dsl::to_string(s.precision));
  row("gradient checkpointing", s.checkpoint_every == 0   ? "off"
                                : s.checkpoint_every == 1 ? "every layer"
                                                          : "every " + std::to_string(s.checkpoint_every) + " layers");
  row("micro-batch", std::to_string(s.micro_batch_size) + " x " + std::to_string(s.grad_accumulation) +
                         " accumulation x " + std::to_string(s.num_gpus) + (s.num_gpus == 1 ? " rank" : " ranks") + " = global batch " +
                         std::to_string(plan.global_batch));
  const std::vector<std::string>& whole = spec.strategy.lora.modules_to_save;
  std::string whole_text;
  for (const std::string& module : whole)
    whole_text += (whole_text.empty() ? "" : ", ") + module;
  row("adapter", s.adapter == dsl::Adapter::kNone
                     ? "none (full fine-tune)"
                     : std::string(dsl::to_string(s.adapter)) + " r" + std::to_string(s.lora_rank) +
                           (whole.empty() ? "" : " (" + whole_text + " trained whole: modules_to_save)"));
  row("base weights", dsl::to_string(s.quantization));
  row("optimizer", dsl::to_string(s.optimizer));
  row("ZeRO stage", std::to_string(s.zero_stage));
  row("offload", dsl::to_string(s.offload));
  if (s.activation_offload)
    row("activations", "offloaded: checkpointed layers' inputs in host memory, two on the device");
  const char* materialised = spec.model.arch.attn_logit_softcap > 0
                                 ? "materialised (keeps the s x s scores; the fused kernels cannot cap them)"
                                 : "materialised (keeps the s x s scores; faster here)";
  row("attention", s.attention == strategies::Attention::kStandard
                       ? materialised
                       : "fused (scaled_dot_product_attention: no s x s scores kept)");
  const dsl::TrainingSpec& t = spec.training;
  if (!dsl::scores_sequences(t.method)) {  // a reward model has no vocabulary head
    row("cross-entropy", s.cross_entropy == strategies::CrossEntropy::kFusedLinear
                             ? "fused with the output projection (no logits tensor)"
                             : "over the materialised logits");
  }
  if (t.method == dsl::TrainingMethod::kOrpo) {
    row("method", "orpo (lambda " + fmt("%g", t.orpo_lambda) +
                      "): micro-batches of pairs, two rows each; no reference model (the chosen rows' NLL)");
  } else if (t.method == dsl::TrainingMethod::kSimpo) {
    row("method", "simpo (beta " + fmt("%g", t.beta) + ", gamma " + fmt("%g", t.gamma) +
                      "): micro-batches of pairs, two rows each; no reference model");
  } else if (t.method == dsl::TrainingMethod::kReward) {
    row("method", "reward (a scalar score head at each row's last token, no vocabulary head): micro-batches of "
                  "pairs, two rows each; exported for AutoModelForSequenceClassification");
  }
  if (t.method == dsl::TrainingMethod::kKto) {
    std::string weights = "";
    if (t.desirable_weight != 1.0 || t.undesirable_weight != 1.0) {
      weights = ", weights " + fmt("%g", t.desirable_weight) + " / " + fmt("%g", t.undesirable_weight);
    }
    row("method", std::string("kto (") + dsl::to_string(t.losses.front()) + ", beta " + fmt("%g", t.beta) + weights +
                      (s.unpaired ? "): micro-batches of labelled completions (data.label_field), one row each"
                                  : "): micro-batches of pairs, each chosen row desirable and each rejected row "
                                    "undesirable") +
                      (s.kl_rows ? "; each row's prompt with the previous row's completion forwarded for the KL "
                                   "estimate"
                                 : ""));
  } else if (s.reference != dsl::Reference::kNone) {
    // The losses with their weights where there are several or one is
    // weighted, then the keys that change the log-probabilities and the
    // pairs' weights.
    std::string losses;
    for (std::size_t i = 0; i < t.losses.size(); ++i) {
      losses += (i > 0 ? " + " : "") + std::string(dsl::to_string(t.losses[i]));
      if (!t.loss_weights.empty()) losses += " x " + fmt("%g", dsl::loss_weight(t, i));
    }
    if (t.ld_alpha) losses += ", ld_alpha " + fmt("%g", *t.ld_alpha);
    if (t.use_weighting) losses += ", WPO weights";
    row("method", "dpo (" + losses + ", beta " + fmt("%g", t.beta) + "): micro-batches of pairs, two rows each" +
                      (t.use_weighting ? "; one more pass of the head over the completions, without gradients" : ""));
  }
  if (s.reference != dsl::Reference::kNone) {
    row("reference", s.reference == dsl::Reference::kAdapterOff
                         ? "adapter_off (the base with the adapters switched off: no bytes)"
                     : s.reference == dsl::Reference::kPrecomputed
                         ? "precomputed (one forward over the pairs before training, cached on disk: no bytes)"
                         : "separate (a frozen copy: " + plan.chosen.memory.reference.to_string() + " in weights)");
  }

  out << "\nMemory "
      << (!plan.on_cpu                ? "per GPU"
          : s.num_gpus > 1 ? "per rank (host, CPU training, " + std::to_string(s.num_gpus) + " ranks sharing it)"
                           : std::string("(host, CPU training)"))
      << "\n";
  auto mem = [&](const char* k, Bytes b) { out << "  " << pad_right(k, 24) << b.to_string() << "\n"; };
  for (const strategies::MemoryComponent& c : strategies::kMemoryComponents) mem(c.label, m.*c.member);
  if (m.overlap.count() > 0) mem("less not live at once", Bytes(0) - m.overlap);
  out << "  " << pad_right("total", 24) << m.total().to_string() << "\n";
  if (explain && !plan.chosen.memory.corrections.empty()) {
    out << "  of which measured terms (strategies/measured_corrections.cpp):\n";
    for (const strategies::CorrectionTerm& measured : plan.chosen.memory.corrections) {
      const strategies::CorrectionInfo& info = strategies::correction_info(measured.id);
      out << "    " << pad_right(info.key, 26) << pad_right(measured.bytes.to_string(), 10) << " in " << info.component
          << "\n";
    }
  }
  out << "  " << pad_right("budget", 24) << plan.budget_per_device.to_string() << " ("
      << (plan.on_cpu ? plan.hardware.host_memory : plan.hardware.gpus.front().memory).to_string() << " less "
      << (spec.planner.runtime == dsl::Runtime::kTailor ? fmt("%.0f%%", plan.headroom * 100) + " headroom)"
                                                        : strategies::describe_headroom(spec, s) + ")");
  const Bytes free = plan.budget_per_device - m.total();
  out << (free.count() >= 0 ? ", " + free.to_string() + " to spare\n" : ", " + (Bytes(0) - free).to_string() + " short\n");
  if (!plan.on_cpu) {
    out << "  " << pad_right("reserved (allocator)", 24) << plan.chosen.reserved.to_string() << " at the peak ("
        << dsl::to_string(spec.planner.runtime) << " runtime's fragmentation)\n";
  }
  if (s.offload != Offload::kNone) {
    out << "  " << pad_right("host RAM (offload)", 24) << plan.chosen.memory.host.to_string() << " of "
        << plan.host_budget.to_string() << "\n";
  }
  out << "\nThroughput (estimate): " << fmt("%.2f", plan.chosen.throughput.step_seconds) << " s per step, "
      << fmt("%.0f", plan.chosen.throughput.tokens_per_second) << " tokens/s\n";

  out << "\nDecisions\n";
  int i = 1;
  for (const auto& d : plan.decisions) {
    out << "  " << i++ << ". " << d.question << "\n     " << d.answer() << "\n     -> " << d.action() << "\n";
  }
  if (explain) {
    print_alternatives_table(plan, out);
  } else if (!plan.alternatives.empty()) {
    out << "\nAlternatives (tailor plan --explain: a table with memory and speed)\n";
    for (const auto& a : plan.alternatives) {
      out << "  - " << a.candidate.strategy.describe() << "\n    " << a.why << "\n";
    }
  }
  if (const auto& p = plan.preferred_if_executable) {
    out << "\nWith a runner that executed it, the plan would be: " << p->candidate.strategy.describe() << " ("
        << fmt("%.0f", p->candidate.throughput.tokens_per_second) << " tokens/s, "
        << p->candidate.memory.per_device.total().to_string() << " per GPU); " << p->why << "\n";
  }
  if (!plan.advice.empty()) {
    out << "\nPinned knobs that exclude a better plan\n";
    for (const auto& a : plan.advice) out << "  - " << a.text << "\n";
  }
  if (!plan.fits) {
    out << "\nDoes not fit. The closest strategy tailor-runner can run is short by ";
    if (plan.shortfall.count() > 0) out << plan.shortfall.to_string() << (plan.on_cpu ? " of memory" : " per GPU");
    if (plan.shortfall.count() > 0 && plan.host_shortfall.count() > 0) out << " and ";
    if (plan.host_shortfall.count() > 0) out << plan.host_shortfall.to_string() << " of host RAM";
    out << ".\n";
    if (const auto& w = plan.with_activation_offload) {
      out << "With activation offloading it fits: " << w->candidate.strategy.describe() << " at "
          << w->candidate.memory.per_device.total().to_string() << " per GPU ("
          << fmt("%.0f", w->candidate.throughput.tokens_per_second) << " tokens/s, "
          << w->candidate.memory.host.to_string() << " of host RAM); set strategy.activation_offload: true "
          << "(chosen only when pinned: its CUDA path has not run on a GPU yet).\n";
    }
    out << (plan.smallest_fitting_gpu.empty() ? std::string("No GPU in the catalog fits it with this many GPUs.\n")
                                              : "The smallest catalog hardware that fits: " + plan.smallest_fitting_gpu +
                                                    "\n");
  }
}

}  // namespace

// The daemon's plan (a dry-run submission) of an already validated spec.
int plan_remote(const Args& args, const dsl::JobSpec& spec, const std::string& file, bool json, Streams io) {
  auto endpoint = resolve_endpoint(args);
  if (!endpoint.is_ok()) {
    io.err << "tailor plan: " << endpoint.status().message() << "\n";
    return kExitUsage;
  }
  const RestClient client(*endpoint);
  auto r = client.request("POST", "/v1/jobs?dry_run=true", dsl::emit_yaml(dsl::write_job_spec(spec)), "application/yaml");
  if (!r.is_ok()) {
    io.err << "tailor plan: " << r.status().message() << "\n";
    return kExitRunFailed;
  }
  if (r->status < 200 || r->status >= 300) {
    io.err << "tailor plan: " << file << ": " << http_error(*r, *endpoint).message() << "\n";
    return r->body.find("does_not_fit") != std::string::npos ? kExitNoFit : kExitInvalid;
  }
  const Json plan = Json::parse(r->body, nullptr, false);
  if (plan.is_discarded()) {
    io.err << "tailor plan: tailord answered with something that is not JSON\n";
    return kExitRunFailed;
  }
  const bool fits = plan.value("fits", false);
  if (json) {
    io.out << plan.dump(2) << "\n";
    return fits ? kExitOk : kExitNoFit;
  }
  io.out << "Plan by tailord at " << endpoint->address() << " for " << spec.name << ": "
         << (fits ? "fits" : "does NOT fit") << "\n  " << plan.value("summary", std::string("-")) << "\n";
  const Json per = plan.contains("memory") ? plan["memory"].value("per_gpu", Json()) : Json();
  if (per.is_object()) {
    io.out << "\nMemory per device (estimate)\n";
    for (const auto& [k, v] : per.items()) {
      if (v.is_number_integer() && v.get<std::int64_t>() > 0) {
        io.out << "  " << pad_right(k, 22) << Bytes(v.get<std::int64_t>()).to_string() << "\n";
      }
    }
  }
  if (plan.contains("decisions") && plan["decisions"].is_array() && !plan["decisions"].empty()) {
    io.out << "\nDecisions\n";
    for (const Json& d : plan["decisions"]) {
      io.out << "  " << d.value("question", std::string()) << "\n     " << d.value("answer", std::string())
             << "\n     -> " << d.value("action", std::string()) << "\n";
    }
  }
  return fits ? kExitOk : kExitNoFit;
}

// A YAML scalar holding `s` exactly: JSON's double-quoted strings are YAML's.
std::string yaml_string(const std::string& s) { return nlohmann::json(s).dump(); }

// The spec text of a quick plan (--model), or an error naming the flag.
Result<std::string> quick_spec(const Args& args, const dsl::Catalog& catalog) {
  const std::string model = args.get("model", "");
  std::string name, source;
  if (catalog.find_model(model) != nullptr) {
    name = model;
    source = "preset: " + yaml_string(model);
  } else if (std::filesystem::is_directory(model)) {
    name = std::filesystem::absolute(model).lexically_normal().filename().string();
    if (name.empty()) name = std::filesystem::absolute(model).lexically_normal().parent_path().filename().string();
    source = "path: " + yaml_string(std::filesystem::absolute(model).string());
  } else {
    return Status::invalid_argument("--model " + model +
                                    " is neither a preset (tailor catalog models) nor a model folder");
  }
  auto integer = [&](const char* flag) -> Result<std::string> {
    const std::string v = args.get(flag, "");
    if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 9 || std::stoll(v) < 1) {
      return Status::invalid_argument(std::string("--") + flag + " must be a positive integer, got " + quote(v));
    }
    return v;
  };
  std::string text = "apiVersion: tailor/v1\nkind: TrainingJob\nname: " + yaml_string(name.empty() ? "model" : name) +
                     "\nmodel: {" + source + "}\ndata:\n  train: quick-plan.txt\n";
  if (args.has("seq-len")) {
    TAILOR_ASSIGN_OR_RETURN(const std::string n, integer("seq-len"));
    text += "  seq_len: " + n + "\n";
  }
  if (args.has("batch")) {
    TAILOR_ASSIGN_OR_RETURN(const std::string n, integer("batch"));
    text += "training: {global_batch_size: " + n + "}\n";
  }
  if (args.has("adapter")) {
    const std::string a = args.get("adapter", "");
    if (a != "none" && a != "lora" && a != "qlora" && a != "auto") {
      return Status::invalid_argument("--adapter must be none, lora, qlora or auto, got " + quote(a));
    }
    text += "strategy: {adapter: " + a + "}\n";
  }
  return text;
}

// --probe: the plan's candidates measured by tailor-runner, then the table
// of predicted beside measured (or the probed plan document).
int print_probed(const strategies::Plan& plan, const dsl::JobSpec& spec, bool json, const std::string& calibration,
                 Streams io) {
  if (plan.probe_candidates.empty()) {
    io.err << "tailor plan: nothing to probe: " << plan.probe_limited << "\n";
    return kExitInvalid;
  }
  io.err << "tailor plan: probing " << plan.probe_candidates.size() << " plans on " << plan.hardware.describe()
         << " with tailor-runner\n";
  auto probed = run_probe(strategies::plan_to_json(plan, spec), io);
  if (!probed.is_ok()) {
    io.err << "tailor plan: " << probed.status().message() << "\n";
    return kExitRunFailed;
  }
  auto table = runner::parse_probe(*probed, "the probed plan");
  if (!table.is_ok() || !*table) {
    io.err << "tailor plan: " << (table.is_ok() ? "the probed plan has no probe" : table.status().message()) << "\n";
    return kExitRunFailed;
  }
  record_calibration(calibration, runner::probe_calibration(*probed), io);
  if (json) {
    io.out << *probed;
  } else {
    io.out << "Probe on " << plan.hardware.describe() << " (strategy.probe " << spec.strategy.probe
           << "; predicted beside measured)\n"
           << runner::format_probe_table(**table, !plan.on_cpu);
  }
  return (*table)->chosen >= 0 ? kExitOk : kExitNoFit;
}

int run_plan(const Argv& argv, Streams io) {
  auto command = parse_command(argv,
                               with_calibration_flags(with_remote_flags(with_spec_flags({{"gpus", true},
                                                                                         {"output", true},
                                                                                         {"remote", false},
                                                                                         {"model", true},
                                                                                         {"adapter", true},
                                                                                         {"explain", false},
                                                                                         {"probe", true},
                                                                                         {"seq-len", true},
                                                                                         {"batch", true}}))),
                               "plan", kPlanHelp, io);
  if (!command.args) return command.exit_code;
  const Args& args = *command.args;
  const std::string format = args.get("output", "text");
  const bool quick = args.has("model");
  const std::size_t files = quick ? 0 : 1;
  if ((format != "text" && format != "json") || args.positional().size() != files) {
    io.err << "tailor plan: "
           << (args.positional().size() == files ? "--output must be text or json"
               : quick                           ? "--model plans without a spec file"
                                                 : "expected one spec file (or --model)")
           << "\n"
           << kPlanHelp;
    return kExitUsage;
  }
  for (const char* flag : {"adapter", "seq-len", "batch"}) {
    if (!quick && args.has(flag)) {
      io.err << "tailor plan: --" << flag << " goes with --model; a spec file says it itself (or use --set)\n";
      return kExitUsage;
    }
  }
  auto options = spec_options(args);
  if (!options.is_ok()) {
    io.err << "tailor plan: " << options.status().message() << "\n";
    return kExitInvalid;
  }
  const dsl::Catalog& catalog = options->catalog();
  std::string file = quick ? "--model " + args.get("model", "") : args.positional()[0];
  dsl::LoadedSpec loaded;
  if (quick) {
    auto text = quick_spec(args, catalog);
    if (!text.is_ok()) {
      io.err << "tailor plan: " << text.status().message() << "\n";
      return kExitUsage;
    }
    // Nothing to read but the model: no data file is needed to plan.
    options->load.check_files = false;
    loaded = dsl::load_job_spec_text(*text, file, std::filesystem::current_path().string(), options->load);
  } else {
    loaded = dsl::load_job_spec(file, options->load);
  }
  io.err << loaded.diagnostics.to_string();
  if (!loaded.ok()) {
    io.err << loaded.diagnostics.verdict(file) << "\n";
    return kExitInvalid;
  }
  dsl::JobSpec spec = *loaded.spec;
  if (args.has("probe")) {
    const std::string k = args.get("probe");
    if (k.empty() || k.find_first_not_of("0123456789") != std::string::npos || std::stoll(k) < 1 ||
        std::stoll(k) > dsl::kMaxProbe) {
      io.err << "tailor plan: --probe takes a number of plans from 1 to " << dsl::kMaxProbe << ", got " << quote(k)
             << "\n";
      return kExitUsage;
    }
    for (const char* flag : {"remote", "gpus", "model"}) {
      if (args.has(flag)) {
        io.err << "tailor plan: --probe measures the job's own data on this machine; --" << flag
               << " does not go with it\n";
        return kExitUsage;
      }
    }
    if (spec.planner.runtime != dsl::Runtime::kTailor) {
      io.err << "tailor plan: --probe measures tailor-runner; planner.runtime " << dsl::to_string(spec.planner.runtime)
             << " predicts another stack, which tailor cannot measure\n";
      return kExitUsage;
    }
    spec.strategy.probe = std::stoll(k);
  }
  if (spec.model.arch.layers == 0 && !args.has("remote")) {
    io.err << "tailor plan: " << file << ": model.path " << quote(spec.model.path, kWhole)
           << " is not here, and its config.json gives the architecture: plan where the folder is, or with --remote\n";
    return kExitInvalid;
  }
  if (args.has("remote")) {
    if (args.has("gpus")) {
      io.err << "tailor plan: --remote plans for the daemon's hardware; --gpus does not apply\n";
      return kExitUsage;
    }
    return plan_remote(args, spec, file, format == "json", io);
  }
  auto hw = hardware_for(spec, args, catalog);
  if (!hw.is_ok()) {
    io.err << "tailor plan: " << hw.status().message() << "\n";
    return args.has("gpus") ? kExitUsage : kExitInvalid;
  }
  // A plan for tailor-runner holds to what it executes; one predicting
  // another stack (planner.runtime) does not: that stack runs it.
  strategies::PlanOptions popts = runner::runner_plan_options(&catalog);
  if (spec.planner.runtime != dsl::Runtime::kTailor) popts.why_not_executable = nullptr;
  if (args.has("explain")) popts.max_alternatives = 8;
  // A plan for this machine takes what it measured (not --gpus' what-if).
  if (!args.has("gpus")) popts.calibration = calibration_for(calibration_path(args), spec, *hw, io);
  const strategies::Plan plan = strategies::plan_job(spec, *hw, popts);
  if (!plan.errors.empty()) {
    for (const std::string& e : plan.errors) io.err << file << ": error: " << e << "\n";
    if (format == "json") io.out << strategies::plan_to_json(plan, spec);
    return kExitInvalid;
  }
  if (spec.strategy.probe > 0 && args.has("probe") && plan.fits) {
    return print_probed(plan, spec, format == "json", calibration_path(args), io);
  }
  if (format == "json") {
    io.out << strategies::plan_to_json(plan, spec);
  } else {
    // Read only where the files were (the data is then known to be there).
    const std::string lengths = options->load.check_files && !quick ? data_lengths(file, args, spec) : std::string();
    print_text(plan, spec, loaded.data, lengths, args.has("explain"), io.out);
  }
  return plan.fits ? kExitOk : kExitNoFit;
}

}  // namespace tailor::cli
