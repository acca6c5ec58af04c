// The plan document (strategies/plan_document.h, schema 1) as the runner,
// `tailor run` and tailord read it: the one reader, strict, with errors
// naming the file and the key. Torch-free.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"
#include "dsl/job_spec.h"
#include "runner/protocol/probe.h"
#include "strategies/strategy.h"

namespace tailor::runner {

// What tailor-runner is asked to do.
struct RunConfig {
  dsl::JobSpec spec;
  strategies::Strategy strategy;
  std::int64_t budget_bytes = 0;  // the plan's device budget (memory minus headroom)
  bool on_cpu = true;
  std::int64_t device_memory_bytes = 0;  // the planned device's memory (host RAM for a CPU plan)
  std::string plan_path;
  std::string plan_text;            // the document as read (probing writes it again with its measurements)
  std::optional<ProbeTable> probe;  // strategy.probe: the candidates to measure (or as measured)
};

// A whole plan document; the embedded spec is validated again by the DSL
// loader. `name` names the document in errors.
Result<RunConfig> read_plan_file(const std::string& path);
Result<RunConfig> parse_plan(const std::string& json_text, const std::string& name);

// Only the document's "strategy" object, exactly as parse_plan reads it
// (for tailord, which keeps the spec's text beside the plan).
Result<strategies::Strategy> parse_plan_strategy(const std::string& json_text, const std::string& name);
// The same, of a plan document already parsed.
Result<strategies::Strategy> plan_strategy_of(const nlohmann::json& plan, const std::string& name);

}  // namespace tailor::runner
