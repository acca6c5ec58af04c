// For the memory accuracy tests: the planner's estimate of a strategy on an
// 8 GiB CPU next to what tailor-runner measures training it.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "runner/torch/trainer.h"
#include "strategies/planner.h"
#include "tests/testing/temp_dir.h"

namespace tailor::runner::testing {

// The corpus both accuracy tests train on, written to DIR/data.txt.
inline void write_accuracy_corpus(const tailor::testing::TempDir& dir) {
  std::string corpus;
  for (int i = 0; i < 400; ++i) corpus += "the tailor mends a blue coat by the river before the rain.\n\n";
  dir.write("data.txt", corpus);
}

struct EstimateAndMeasurement {
  strategies::MemoryBreakdown estimate;  // per device
  Bytes host_estimate;                   // host memory the plan needs
  std::int64_t trainable_parameters = 0;  // as the planner counts them
  nlohmann::json measured;               // the last step's "memory" object of metrics.jsonl
  nlohmann::json measured_host;          // its "host" object (offloaded runs), else null
};

// Trains `spec` with `s` in `out_dir` without a byte budget, on the CPU or,
// with `gpu_memory` set, on CUDA device 0 planned as a GPU of that size;
// nullopt (and a test failure) when training does not succeed.
inline std::optional<EstimateAndMeasurement> estimate_and_train(const dsl::JobSpec& spec, const strategies::Strategy& s,
                                                                const std::string& out_dir, Bytes gpu_memory = {}) {
  strategies::Hardware hw;
  hw.host_memory = Bytes::gib(8);
  hw.cpu = strategies::cpu_device(hw.host_memory);
  if (gpu_memory.count() > 0) hw.gpus.push_back(strategies::hypothetical_gpu(gpu_memory));
  EstimateAndMeasurement r;
  const strategies::Candidate c = strategies::evaluate(spec, hw, s, {});
  r.estimate = c.memory.per_device;
  r.host_estimate = c.memory.host;
  r.trainable_parameters = c.memory.trainable_parameters;

  TrainOptions o;
  o.config.spec = spec;
  o.config.strategy = c.strategy;  // with what the spec decides (pairs, the reference)
  o.out_dir = out_dir;
  o.config.on_cpu = hw.cpu_only();
  o.config.device_memory_bytes = gpu_memory.count();
  o.device = hw.cpu_only() ? "cpu" : "cuda:0";
  o.memory_limit = 0;
  o.quiet = true;
  const RunnerExit code = train(o);
  EXPECT_EQ(code, RunnerExit::kOk) << out_dir;
  if (code != RunnerExit::kOk) return std::nullopt;
  std::ifstream in(out_dir + "/metrics.jsonl");
  std::string last, line;
  while (std::getline(in, line)) last = line;
  const nlohmann::json line_json = nlohmann::json::parse(last);
  r.measured = line_json["memory"];
  if (line_json.contains("host")) r.measured_host = line_json["host"];
  return r;
}

// The loss of every step a run wrote to OUT_DIR/metrics.jsonl.
inline std::vector<double> step_losses(const std::string& out_dir) {
  std::vector<double> v;
  std::ifstream in(out_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) v.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return v;
}

}  // namespace tailor::runner::testing
