#include "runner/protocol/plan_reader.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "dsl/spec_loader.h"
#include "dsl/technique.h"
#include "runner/protocol/probe.h"
#include "runner/protocol/probe_json.h"
#include "strategies/plan_document.h"

namespace tailor::runner {
namespace {

using nlohmann::json;

Result<json> parse_document(const std::string& text, const std::string& name) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::invalid_argument(name + ": not a JSON plan document");
  if (j.value("schema_version", 0) != strategies::kPlanSchemaVersion) {
    return Status::invalid_argument(name + ": schema_version must be " + std::to_string(strategies::kPlanSchemaVersion));
  }
  if (!j.contains("strategy") || !j["strategy"].is_object()) {
    return Status::invalid_argument(name + ": missing \"strategy\" (was the plan made without errors?)");
  }
  return j;
}

// A name of `s[key]` looked up by `from_name`, or an error naming the key.
template <class From>
auto named(const json& s, const char* key, const std::string& name, From from_name)
    -> Result<typename decltype(from_name(std::string_view()))::value_type> {
  const std::string text = s.at(key).get<std::string>();
  auto v = from_name(text);
  if (!v) return Status::invalid_argument(name + ": strategy." + key + " \"" + text + "\" is not known");
  return *v;
}

Result<strategies::Strategy> read_strategy(const json& s, const std::string& name) {
  strategies::Strategy st;
  try {
    TAILOR_ASSIGN_OR_RETURN(st.precision, named(s, "precision", name, dsl::enum_from_name<dsl::Precision>));
    TAILOR_ASSIGN_OR_RETURN(st.adapter, named(s, "adapter", name, dsl::enum_from_name<dsl::Adapter>));
    TAILOR_ASSIGN_OR_RETURN(st.optimizer, named(s, "optimizer", name, dsl::enum_from_name<dsl::Optimizer>));
    TAILOR_ASSIGN_OR_RETURN(st.offload, named(s, "offload", name, dsl::enum_from_name<dsl::Offload>));
    TAILOR_ASSIGN_OR_RETURN(st.quantization, named(s, "quantization", name, dsl::enum_from_name<dsl::Quantization>));
    st.checkpoint_every = s.at("gradient_checkpointing").get<std::int64_t>();
    st.micro_batch_size = s.at("micro_batch_size").get<std::int64_t>();
    st.grad_accumulation = s.at("gradient_accumulation_steps").get<std::int64_t>();
    st.lora_rank = s.at("lora_rank").get<std::int64_t>();
    st.zero_stage = s.at("zero_stage").get<std::int64_t>();
    st.num_gpus = s.at("num_gpus").get<std::int64_t>();
    // Plans from before the attention was planned (tailord may hold them)
    // assumed the fused form everywhere but CPU half precision; fused is the
    // lean choice for them.
    if (s.contains("attention")) {
      TAILOR_ASSIGN_OR_RETURN(st.attention, named(s, "attention", name, strategies::attention_from_name));
    }
    // Older plans materialised the logits.
    if (s.contains("cross_entropy")) {
      TAILOR_ASSIGN_OR_RETURN(st.cross_entropy,
                              named(s, "cross_entropy", name, strategies::cross_entropy_from_name));
    }
    // Supervised plans have no pairs, only dpo's and kto's a reference, only kto's KL rows.
    if (s.contains("pairs")) st.pairs = s.at("pairs").get<bool>();
    if (s.contains("kl_rows")) st.kl_rows = s.at("kl_rows").get<bool>();
    if (s.contains("head_pass")) st.head_pass = s.at("head_pass").get<bool>();
    if (s.contains("unpaired")) st.unpaired = s.at("unpaired").get<bool>();
    // Written only when on.
    if (s.contains("activation_offload")) st.activation_offload = s.at("activation_offload").get<bool>();
    if (s.contains("reference")) {
      TAILOR_ASSIGN_OR_RETURN(st.reference, named(s, "reference", name, dsl::enum_from_name<dsl::Reference>));
    }
  } catch (const json::exception& e) {
    return Status::invalid_argument(name + ": malformed strategy: " + e.what());
  }
  if (st.micro_batch_size < 1 || st.grad_accumulation < 1 || st.checkpoint_every < 0) {
    return Status::invalid_argument(name + ": strategy has a non-positive micro-batch or accumulation");
  }
  if (st.activation_offload && st.checkpoint_every == 0) {
    return Status::invalid_argument(name +
                                    ": activation_offload moves checkpointed layers' inputs, but "
                                    "gradient_checkpointing is 0");
  }
  return st;
}

}  // namespace

Result<strategies::Strategy> parse_plan_strategy(const std::string& text, const std::string& name) {
  TAILOR_ASSIGN_OR_RETURN(json j, parse_document(text, name));
  return read_strategy(j["strategy"], name);
}

Result<strategies::Strategy> plan_strategy_of(const json& plan, const std::string& name) {
  if (!plan.is_object() || !plan.contains("strategy")) return Status::invalid_argument(name + ": no strategy");
  return read_strategy(plan.at("strategy"), name);
}

Result<RunConfig> parse_plan(const std::string& text, const std::string& name) {
  TAILOR_ASSIGN_OR_RETURN(json j, parse_document(text, name));
  if (!j.contains("spec")) return Status::invalid_argument(name + ": missing \"spec\" (was the plan made without errors?)");
  RunConfig cfg;
  cfg.plan_path = name;
  cfg.plan_text = text;
  // The embedded spec is JSON, which is YAML: the loader validates it again.
  dsl::LoadOptions opts;
  opts.check_data = false;  // the trainer reads it, under the read root, with the same reader
  const auto loaded = dsl::load_job_spec_text(j["spec"].dump(), name + " (spec)", "/", opts);
  if (!loaded.ok()) return Status::invalid_argument(loaded.diagnostics.to_string());
  cfg.spec = *loaded.spec;
  TAILOR_ASSIGN_OR_RETURN(cfg.strategy, read_strategy(j["strategy"], name));
  TAILOR_ASSIGN_OR_RETURN(cfg.probe, parse_probe(text, name));
  try {
    cfg.budget_bytes = j.at("memory").at("budget_per_gpu").get<std::int64_t>();
    cfg.on_cpu = j.at("hardware").at("num_gpus").get<int>() == 0;
    cfg.device_memory_bytes = j.at("hardware").value("memory_per_device", std::int64_t{0});
  } catch (const json::exception& e) {
    return Status::invalid_argument(name + ": malformed plan: " + e.what());
  }
  return cfg;
}

// Declared in probe.h; here beside the strategy reader it shares.
Result<std::optional<ProbeTable>> parse_probe(const std::string& text, const std::string& name) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::invalid_argument(name + ": not a JSON plan document");
  if (!j.contains("probe") || !j["probe"].is_object()) return std::optional<ProbeTable>();
  ProbeTable t;
  try {
    const json& p = j["probe"];
    t.requested = p.at("requested").get<std::int64_t>();
    t.warmup_steps = p.at("warmup_steps").get<std::int64_t>();
    t.timed_steps = p.at("timed_steps").get<std::int64_t>();
    t.min_timed_seconds = p.value("min_timed_seconds", 0.0);
    t.max_timed_steps = p.value("max_timed_steps", t.timed_steps);
    t.tie_band = p.value("tie_band", 0.0);
    t.limited = p.value("limited", std::string());
    t.chosen = p.value("chosen", -1);
    t.seconds = p.value("seconds", 0.0);
    for (const json& c : p.at("candidates")) {
      ProbeCandidate pc;
      TAILOR_ASSIGN_OR_RETURN(pc.strategy, read_strategy(c.at("strategy"), name));
      pc.summary = c.at("summary").get<std::string>();
      pc.fidelity_factor = c.value("fidelity_factor", 1.0);
      pc.predicted_peak = c.at("per_gpu").at("total").get<std::int64_t>();
      pc.predicted_reserved = c.at("reserved_per_gpu").get<std::int64_t>();
      pc.predicted_tokens_per_second = c.at("throughput").at("tokens_per_second").get<double>();
      if (c.contains("measured")) {
        TAILOR_ASSIGN_OR_RETURN(
            pc.measured, measurement_from_json(c["measured"],
                                               name + ": probe candidate " + std::to_string(t.candidates.size() + 1)));
      }
      t.candidates.push_back(std::move(pc));
    }
  } catch (const json::exception& e) {
    return Status::invalid_argument(name + ": malformed probe: " + e.what());
  }
  if (t.chosen >= static_cast<int>(t.candidates.size())) {
    return Status::invalid_argument(name + ": probe.chosen is past its candidates");
  }
  return std::optional<ProbeTable>(std::move(t));
}

Result<RunConfig> read_plan_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found("cannot open plan " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_plan(ss.str(), path);
}

}  // namespace tailor::runner
