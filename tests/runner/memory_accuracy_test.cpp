// The planner's memory estimate against what the runner measures with the
// tracking allocator, across precision x checkpointing x micro-batch x
// attention (fused, and materialised where CPU plans may choose it: half
// precision) for small Llama (GQA) and GPT-2 models: the peak within +-10%
// of the estimate, and the exactly-known components exact. Prints the table.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>

#include "dsl/spec_loader.h"
#include "runner/torch/trainer.h"
#include "strategies/planner.h"
#include "tests/runner/estimate_and_train.h"
#include "tests/testing/temp_dir.h"

namespace tailor::runner {
namespace {

using tailor::testing::TempDir;

struct Case {
  const char* model;  // arch block
  dsl::Precision precision;
  std::int64_t checkpoint_every;
  std::int64_t micro;
  strategies::Attention attention;
};

TEST(MemoryAccuracyTest, MeasuredPeaksAreWithinTenPercentOfTheEstimate) {
  TempDir dir;
  testing::write_accuracy_corpus(dir);
  const char* llama = "{family: llama, layers: 3, hidden: 128, intermediate: 344, heads: 8, kv_heads: 4, vocab: 1024, max_seq_len: 256}";
  const char* gpt2 = "{family: gpt2, layers: 3, hidden: 128, intermediate: 512, heads: 4, vocab: 1024, max_seq_len: 256, tie_embeddings: true}";
  std::vector<Case> cases;
  for (const char* m : {llama, gpt2}) {
    for (auto p : {dsl::Precision::kFp32, dsl::Precision::kBf16, dsl::Precision::kPureBf16}) {
      for (std::int64_t ck : {0, 1}) {
        for (std::int64_t micro : {2, 8}) {
          cases.push_back({m, p, ck, micro, strategies::Attention::kMemoryEfficient});
          if (p != dsl::Precision::kFp32) cases.push_back({m, p, ck, micro, strategies::Attention::kStandard});
        }
      }
    }
  }
  std::printf("%-6s %-9s %-4s %-5s %-12s %12s %12s %7s\n", "model", "precision", "ckpt", "micro", "attention",
              "estimate", "measured", "ratio");
  int n = 0;
  for (const Case& c : cases) {
    const std::string spec_text = std::string("apiVersion: tailor/v1\nkind: TrainingJob\nname: acc\nmodel:\n  arch: ") +
                                  c.model + "\ndata: {train: data.txt, seq_len: 128}\n"
                                            "training: {global_batch_size: 8, max_steps: 2}\nresources: {gpus: 0, host_memory: 8GiB}\n";
    const auto loaded = dsl::load_job_spec(dir.write("job.yaml", spec_text));
    ASSERT_TRUE(loaded.ok()) << loaded.diagnostics.to_string();
    const dsl::JobSpec& spec = *loaded.spec;

    strategies::Strategy s;
    s.precision = c.precision;
    s.checkpoint_every = c.checkpoint_every;
    s.micro_batch_size = c.micro;
    s.grad_accumulation = 8 / c.micro;
    s.attention = c.attention;
    const auto run = testing::estimate_and_train(spec, s, dir.file("run" + std::to_string(n++)));
    ASSERT_TRUE(run.has_value());
    const strategies::MemoryBreakdown& e = run->estimate;
    const nlohmann::json& m = run->measured;

    const double estimate = static_cast<double>((e.total() - e.overhead).count());
    const double measured = m["peak_bytes"].get<double>();
    const bool gpt = std::string(c.model).find("gpt2") != std::string::npos;
    std::printf("%-6s %-9s %-4lld %-5lld %-12s %12.0f %12.0f %7.3f\n", gpt ? "gpt2" : "llama",
                dsl::to_string(c.precision), static_cast<long long>(c.checkpoint_every),
                static_cast<long long>(c.micro), strategies::to_string(c.attention), estimate, measured,
                measured / estimate);
    EXPECT_NEAR(measured / estimate, 1.0, 0.10) << (gpt ? "gpt2 " : "llama ") << dsl::to_string(c.precision)
                                                 << " ckpt " << c.checkpoint_every << " micro " << c.micro << " "
                                                 << strategies::to_string(c.attention);
    // What is known exactly is exact.
    EXPECT_EQ(m["weights"].get<std::int64_t>(), e.weights.count());
    EXPECT_EQ(m["optimizer_states"].get<std::int64_t>(), e.optimizer_states.count());
    EXPECT_EQ(m["master_weights"].get<std::int64_t>(), e.master_weights.count());
    EXPECT_EQ(m["gradients"].get<std::int64_t>(), e.gradients.count());
    if (c.checkpoint_every == 0) {
      // Without recomputation the activations the forward keeps are the table.
      EXPECT_NEAR(m["activations"].get<double>() / static_cast<double>(e.activations.count()), 1.0, 0.10);
    }
  }
}

}  // namespace
}  // namespace tailor::runner
