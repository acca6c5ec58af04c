#include "runner/run_config.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "dsl/spec_loader.h"
#include "strategies/plan_document.h"

namespace tailor::runner {
namespace {

template <class E>
bool parse_enum(const std::string& text, E& out, std::initializer_list<E> values) {
  for (E v : values) {
    if (text == dsl::to_string(v)) {
      out = v;
      return true;
    }
  }
  return false;
}

}  // namespace

Result<RunConfig> parse_plan(const std::string& text, const std::string& name) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::invalid_argument(name + ": not a JSON plan document");
  if (j.value("schema_version", 0) != strategies::kPlanSchemaVersion) {
    return Status::invalid_argument(name + ": schema_version must be " + std::to_string(strategies::kPlanSchemaVersion));
  }
  if (!j.contains("spec") || !j.contains("strategy") || !j["strategy"].is_object()) {
    return Status::invalid_argument(name + ": missing \"spec\" or \"strategy\" (was the plan made without errors?)");
  }
  RunConfig cfg;
  cfg.plan_path = name;
  // The embedded spec is JSON, which is YAML: the loader validates it again.
  dsl::LoadOptions opts;
  const auto loaded = dsl::load_job_spec_text(j["spec"].dump(), name + " (spec)", "/", opts);
  if (!loaded.ok()) return Status::invalid_argument(loaded.diagnostics.to_string());
  cfg.spec = *loaded.spec;

  const nlohmann::json& s = j["strategy"];
  strategies::Strategy& st = cfg.strategy;
  try {
    const std::string precision = s.at("precision").get<std::string>();
    const std::string adapter = s.at("adapter").get<std::string>();
    const std::string optimizer = s.at("optimizer").get<std::string>();
    const std::string offload = s.at("offload").get<std::string>();
    const std::string quantization = s.at("quantization").get<std::string>();
    if (!parse_enum(precision, st.precision,
                    {dsl::Precision::kFp32, dsl::Precision::kBf16, dsl::Precision::kFp16, dsl::Precision::kPureBf16}) ||
        !parse_enum(adapter, st.adapter, {dsl::Adapter::kNone, dsl::Adapter::kLora, dsl::Adapter::kQlora}) ||
        !parse_enum(optimizer, st.optimizer, {dsl::Optimizer::kAdamw, dsl::Optimizer::kAdamw8bit, dsl::Optimizer::kSgd}) ||
        !parse_enum(offload, st.offload,
                    {dsl::Offload::kNone, dsl::Offload::kOptimizer, dsl::Offload::kOptimizerAndParams})) {
      return Status::invalid_argument(name + ": strategy has an unknown precision, adapter, optimizer or offload");
    }
    st.quantization = quantization == "none" ? strategies::Quantization::kNone : strategies::Quantization::kNf4Double;
    st.checkpoint_every = s.at("gradient_checkpointing").get<std::int64_t>();
    st.micro_batch_size = s.at("micro_batch_size").get<std::int64_t>();
    st.grad_accumulation = s.at("gradient_accumulation_steps").get<std::int64_t>();
    st.lora_rank = s.at("lora_rank").get<std::int64_t>();
    st.zero_stage = s.at("zero_stage").get<std::int64_t>();
    st.num_gpus = s.at("num_gpus").get<std::int64_t>();
    // Plans from before the attention was planned (tailord may hold them)
    // assumed the fused form everywhere but CPU half precision; fused is the
    // lean choice for them.
    const std::string attention = s.value("attention", std::string("fused"));
    if (attention == to_string(strategies::Attention::kStandard)) {
      st.attention = strategies::Attention::kStandard;
    } else if (attention != to_string(strategies::Attention::kMemoryEfficient)) {
      return Status::invalid_argument(name + ": strategy has an unknown attention \"" + attention + "\"");
    }
    cfg.budget_bytes = j.at("memory").at("budget_per_gpu").get<std::int64_t>();
    cfg.on_cpu = j.at("hardware").at("num_gpus").get<int>() == 0;
    cfg.device_memory_bytes = j.at("hardware").value("memory_per_device", std::int64_t{0});
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(name + ": malformed plan: " + e.what());
  }
  if (st.micro_batch_size < 1 || st.grad_accumulation < 1 || st.checkpoint_every < 0) {
    return Status::invalid_argument(name + ": strategy has a non-positive micro-batch or accumulation");
  }
  return cfg;
}

Result<RunConfig> read_plan_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found("cannot open plan " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_plan(ss.str(), path);
}

}  // namespace tailor::runner
