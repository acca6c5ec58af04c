#include "strategies/memory_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "dsl/catalog.h"
#include "tests/strategies/layer_bytes.h"

namespace tailor::strategies {
namespace {

const dsl::ModelArch& arch(const char* preset) { return dsl::Catalog::builtin().find_model(preset)->arch; }

MemoryEstimate estimate(const dsl::ModelArch& a, Strategy s, std::int64_t seq = 512, std::int64_t micro = 1) {
  MemoryInput in;
  in.arch = &a;
  in.batch = {micro, seq};
  in.strategy = s;
  return estimate_memory(in);
}

// weights + gradients + optimizer states + master weights
double model_states(const MemoryEstimate& e) {
  const MemoryBreakdown& m = e.per_device;
  return static_cast<double>((m.weights + m.gradients + m.optimizer_states + m.master_weights).count());
}

TEST(MemoryModelTest, MixedPrecisionAdamwIsSixteenBytesPerParam) {
  const dsl::ModelArch& a = arch("llama-2-7b");
  Strategy s;
  s.precision = Precision::kBf16;
  const MemoryEstimate e = estimate(a, s);
  const double p = static_cast<double>(a.parameter_count());
  EXPECT_DOUBLE_EQ(static_cast<double>(e.per_device.weights.count()), 2 * p);
  EXPECT_DOUBLE_EQ(static_cast<double>(e.per_device.gradients.count()), 2 * p);
  EXPECT_DOUBLE_EQ(static_cast<double>(e.per_device.master_weights.count()), 4 * p);
  EXPECT_DOUBLE_EQ(static_cast<double>(e.per_device.optimizer_states.count()), 8 * p);
  EXPECT_DOUBLE_EQ(model_states(e), 16 * p);
}

TEST(MemoryModelTest, PureBf16IsEightBytesPerParamAndFp32IsSixteen) {
  const dsl::ModelArch& a = arch("tinyllama-1.1b");
  const double p = static_cast<double>(a.parameter_count());
  Strategy pure;
  pure.precision = Precision::kPureBf16;
  EXPECT_DOUBLE_EQ(model_states(estimate(a, pure)), 8 * p);
  EXPECT_EQ(estimate(a, pure).per_device.master_weights.count(), 0);
  Strategy fp32;  // 4 weights + 4 gradients + 8 moments, no master copy
  EXPECT_DOUBLE_EQ(model_states(estimate(a, fp32)), 16 * p);
}

TEST(MemoryModelTest, ZeroStagesReproduceThePaperFormulas) {
  const dsl::ModelArch& a = arch("llama-2-13b");
  const double p = static_cast<double>(a.parameter_count());
  for (std::int64_t n : {2, 4, 8}) {
    for (std::int64_t stage : {0, 1, 2, 3}) {
      Strategy s;
      s.precision = Precision::kBf16;
      s.num_gpus = n;
      s.zero_stage = stage;
      const double expected = stage == 0 ? 16 * p : stage == 1 ? 4 * p + 12 * p / n : stage == 2 ? 2 * p + 14 * p / n : 16 * p / n;
      EXPECT_NEAR(model_states(estimate(a, s)), expected, 4.0) << "stage " << stage << " N " << n;
      EXPECT_NEAR(zero_model_state_bytes(p, stage, n), expected, 1e-3);
    }
  }
}

TEST(MemoryModelTest, KorthikantiTableMatchesTheClosedFormForGpt3StyleLayers) {
  // GPT-3-style layer: 4h MLP, dropout, standard attention, 16-bit.
  dsl::ModelArch a = arch("gpt2-xl");
  ASSERT_EQ(a.intermediate, 4 * a.hidden);
  for (std::int64_t s : {128, 1024}) {
    for (std::int64_t b : {1, 4}) {
      double table = 0;
      for (const ActivationTerm& t : layer_activation_terms(a, {b, s}, Attention::kStandard, true, 2.0)) table += t.bytes;
      EXPECT_DOUBLE_EQ(table, korthikanti_layer_bytes(s, b, a.hidden, a.heads));
    }
  }
}

TEST(MemoryModelTest, MemoryEfficientAttentionDropsTheQuadraticTerm) {
  const dsl::ModelArch& a = arch("gpt2");
  const std::int64_t s = 1024, b = 2;
  double table = 0;
  for (const ActivationTerm& t : layer_activation_terms(a, {b, s}, Attention::kMemoryEfficient, true, 2.0)) table += t.bytes;
  const double sbh = static_cast<double>(s * b * a.hidden);
  EXPECT_DOUBLE_EQ(table, 34 * sbh + 4.0 * static_cast<double>(a.heads * s * b));  // + fp32 logsumexp
}

TEST(MemoryModelTest, GroupedQueryAttentionStoresSmallerKeysAndValues) {
  const dsl::ModelArch& gqa = arch("llama-3-8b");  // 32 heads, 8 kv heads
  dsl::ModelArch mha = gqa;
  mha.kv_heads = mha.heads;
  auto layer = [](const dsl::ModelArch& a) {
    double sum = 0;
    for (const ActivationTerm& t : layer_activation_terms(a, {1, 2048}, Attention::kMemoryEfficient, false, 2.0)) sum += t.bytes;
    return sum;
  };
  const double sbh = 2048.0 * gqa.hidden;
  // K and V shrink from 2*2*sbh to 2*2*sbh/4.
  EXPECT_DOUBLE_EQ(layer(mha) - layer(gqa), 4 * sbh * 0.75);
}

// The tensors only a frozen linear's weight gradient would read name that
// linear; the adapter branch drops them by asking the terms.
TEST(MemoryModelTest, TermsNameTheLinearsWhoseWeightGradientKeepsThem) {
  auto tagged = [](const dsl::ModelArch& a, Attention at) {
    std::vector<std::string> out;
    for (const ActivationTerm& t : layer_activation_terms(a, {1, 128}, at, false, 2.0)) {
      for (const std::string& l : t.weight_grad_of) out.push_back(l);
    }
    return out;
  };
  const std::vector<std::string> llama = {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "down_proj"};
  EXPECT_EQ(tagged(arch("llama-2-7b"), Attention::kMemoryEfficient), llama);  // fused attention keeps o_proj's input
  std::vector<std::string> standard = llama;
  standard.insert(standard.begin() + 3, "o_proj");
  EXPECT_EQ(tagged(arch("llama-2-7b"), Attention::kStandard), standard);
  EXPECT_EQ(tagged(arch("gpt2"), Attention::kStandard),
            (std::vector<std::string>{"c_attn", "c_proj", "c_fc", "c_proj"}));
}

TEST(MemoryModelTest, CheckpointingKeepsInputsPlusOneRecomputedLayer) {
  const dsl::ModelArch& a = arch("llama-2-7b");
  Strategy off;
  off.precision = Precision::kBf16;
  Strategy on = off;
  on.checkpoint_every = 1;
  const double s = 2048, h = static_cast<double>(a.hidden);
  double layer = 0, largest = 0;
  for (const ActivationTerm& t : layer_activation_terms(a, {1, 2048}, Attention::kMemoryEfficient, false, 2.0)) {
    layer += t.bytes;
    largest = std::max(largest, t.bytes);
  }
  const double L = static_cast<double>(a.layers);
  // Beside the layers: the final norm's and lm_head's inputs, and the fused
  // attention's additive mask, one (s x s) tensor all layers share.
  const double model_level = 2 * 2 * s * h + 2 * s * s;
  EXPECT_NEAR(static_cast<double>(estimate(a, off, 2048).per_device.activations.count()), L * layer + model_level, 1);
  // The recomputed layer (and the gradient of its largest tensor) counts
  // beyond the logits buffers freed before backward reaches it.
  const double logits = static_cast<double>(estimate(a, on, 2048).per_device.logits.count());
  const double recompute = std::max(0.0, layer + largest - logits);
  EXPECT_NEAR(static_cast<double>(estimate(a, on, 2048).per_device.activations.count()),
              L * 2 * s * h + recompute + model_level, 1);
  Strategy half = on;
  half.checkpoint_every = 2;  // 16 of 32 layers checkpointed
  EXPECT_NEAR(static_cast<double>(estimate(a, half, 2048).per_device.activations.count()),
              16 * 2 * s * h + 16 * layer + recompute + model_level, 1);
}

// Offloaded, the checkpointed inputs leave the device but two (the one a
// layer recomputes from and the next, brought back meanwhile) and are held
// in host memory, each in a power-of-two pinned block on a GPU; layers that
// are not checkpointed keep theirs.
TEST(MemoryModelTest, OffloadedActivationsKeepTwoInputsOnTheDeviceAndTheRestOnTheHost) {
  const dsl::ModelArch& a = arch("llama-2-7b");
  Strategy kept;
  kept.precision = Precision::kBf16;
  kept.checkpoint_every = 1;
  Strategy offloaded = kept;
  offloaded.activation_offload = true;
  const double input = 2.0 * 3000 * static_cast<double>(a.hidden);  // bf16, 3,000 tokens
  const double L = static_cast<double>(a.layers);
  const MemoryEstimate k = estimate(a, kept, 3000), o = estimate(a, offloaded, 3000);
  EXPECT_NEAR(static_cast<double>((k.per_device.activations - o.per_device.activations).count()), (L - 2) * input, 1);
  EXPECT_EQ(k.host.count(), 0);
  const double pinned = std::exp2(std::ceil(std::log2(input)));
  EXPECT_GT(pinned, input);
  EXPECT_NEAR(static_cast<double>(o.host.count()), L * pinned, 1);
  // On the CPU the copies are ordinary allocations, counted as they are.
  MemoryInput cpu;
  cpu.arch = &a;
  cpu.batch = {1, 3000};
  cpu.strategy = offloaded;
  cpu.on_gpu = false;
  EXPECT_NEAR(static_cast<double>(estimate_memory(cpu).host.count()), L * input, 1);
  // Every other layer checkpointed: 16 inputs, two of them kept.
  Strategy half = offloaded;
  half.checkpoint_every = 2;
  Strategy half_kept = kept;
  half_kept.checkpoint_every = 2;
  EXPECT_NEAR(static_cast<double>(
                  (estimate(a, half_kept, 3000).per_device.activations - estimate(a, half, 3000).per_device.activations)
                      .count()),
              14 * input, 1);
  EXPECT_NEAR(static_cast<double>(estimate(a, half, 3000).host.count()), 16 * pinned, 1);
}

TEST(MemoryModelTest, LoraParameterCountsMatchPeft) {
  // PEFT's print_trainable_parameters for Llama-2-7B: r=16 on all seven
  // projections: 39,976,960; r=8 on q_proj and v_proj: 4,194,304.
  const dsl::ModelArch& a = arch("llama-2-7b");
  EXPECT_EQ(lora_parameter_count(a, 16, {}), 39'976'960);
  EXPECT_EQ(lora_parameter_count(a, 8, {"q_proj", "v_proj"}), 4'194'304);
}

TEST(MemoryModelTest, QuantisedAndEightBitFormatsHaveTheirByteCounts) {
  EXPECT_DOUBLE_EQ(quantized_bytes_per_param(Quantization::kNf4), 0.5625);
  EXPECT_NEAR(quantized_bytes_per_param(Quantization::kNf4Double), 0.515869, 1e-6);
  EXPECT_LE(quantized_bytes_per_param(Quantization::kNf4Double), 0.55);
  EXPECT_NEAR(optimizer_bytes_per_param(Optimizer::kAdamw8bit, Precision::kBf16), 2.0039, 1e-4);
  EXPECT_DOUBLE_EQ(optimizer_bytes_per_param(Optimizer::kAdamw, Precision::kBf16), 8.0);
  EXPECT_DOUBLE_EQ(optimizer_bytes_per_param(Optimizer::kSgd, Precision::kFp32), 4.0);
  EXPECT_DOUBLE_EQ(optimizer_bytes_per_param(Optimizer::kLion, Precision::kFp32), 4.0);
  EXPECT_DOUBLE_EQ(optimizer_bytes_per_param(Optimizer::kLion, Precision::kPureBf16), 2.0);
}

TEST(MemoryModelTest, QloraFreezesAQuantisedBaseAndTrainsOnlyAdapters) {
  const dsl::ModelArch& a = arch("llama-2-7b");
  Strategy s;
  s.precision = Precision::kBf16;
  s.adapter = Adapter::kQlora;
  s.lora_rank = 16;
  s.quantization = Quantization::kNf4Double;
  const MemoryEstimate e = estimate(a, s);
  const ParameterCounts pc = count_parameters(a);
  EXPECT_EQ(e.trainable_parameters, 39'976'960);
  const double expected_weights = static_cast<double>(pc.block_linear) * quantized_bytes_per_param(Quantization::kNf4Double) +
                                  static_cast<double>(pc.other) * 2.0;
  EXPECT_NEAR(static_cast<double>(e.per_device.weights.count()), expected_weights, 1.0);
  EXPECT_EQ(e.per_device.master_weights.count(), 0);
  EXPECT_EQ(e.per_device.optimizer_states.count(), 39'976'960LL * 8);
  EXPECT_EQ(e.per_device.adapter.count(), 39'976'960LL * 4);  // fp32 adapters under mixed precision
  EXPECT_LT(e.per_device.weights, Bytes::gib(4));              // ~3.6 GiB for a 7B base
}

TEST(MemoryModelTest, OffloadMovesOptimizerStatesToTheHost) {
  const dsl::ModelArch& a = arch("llama-2-7b");
  Strategy s;
  s.precision = Precision::kBf16;
  s.zero_stage = 1;
  s.offload = Offload::kOptimizer;
  const MemoryEstimate e = estimate(a, s);
  const double p = static_cast<double>(a.parameter_count());
  EXPECT_EQ(e.per_device.optimizer_states.count(), 0);
  EXPECT_EQ(e.per_device.master_weights.count(), 0);
  EXPECT_NEAR(static_cast<double>(e.host.count()), 16 * p, 1);  // 12 B states + fp32 gradient copy
  Strategy params = s;
  params.zero_stage = 3;
  params.offload = Offload::kOptimizerAndParams;
  EXPECT_EQ(estimate(a, params).per_device.weights.count(), 0);
  EXPECT_NEAR(static_cast<double>(estimate(a, params).host.count()), 18 * p, 1);
}

TEST(MemoryModelTest, LogitsScaleWithBatchSequenceAndVocabulary) {
  const dsl::ModelArch& a = arch("llama-3-8b");
  Strategy s;
  s.precision = Precision::kBf16;
  // The logits and their gradient in bf16, and one slice's fp32 softmax.
  const double slice = 4.0 * static_cast<double>(kCrossEntropySliceElements);
  const double one = static_cast<double>(estimate(a, s, 1024, 1).per_device.logits.count());
  EXPECT_DOUBLE_EQ(one, 1024.0 * a.vocab * 4 + slice);
  EXPECT_DOUBLE_EQ(static_cast<double>(estimate(a, s, 1024, 4).per_device.logits.count()), 4 * (one - slice) + slice);
}

// WPO's pass of the head: a slice of one row's logits, in the compute dtype
// and cast to fp32, beside every row's logits at the end of forward. With
// short rows in bf16 that is more than backward's one row of gradient (2
// bytes a logit): the logits rise by 4 bytes a logit of one row. Long rows'
// slices stay under that gradient: nothing changes.
TEST(MemoryModelTest, WposHeadPassOutgrowsOneRowsGradientOnlyForShortRows) {
  const dsl::ModelArch& a = arch("llama-3-8b");
  Strategy s;
  s.precision = Precision::kBf16;
  s.pairs = true;
  Strategy wpo = s;
  wpo.head_pass = true;
  const auto logits = [&](const Strategy& st, std::int64_t seq) {
    return static_cast<double>(estimate(a, st, seq, 2).per_device.logits.count());
  };
  const double row = 64.0 * static_cast<double>(a.vocab);
  EXPECT_DOUBLE_EQ(logits(wpo, 64) - logits(s, 64), 4.0 * row * MemoryConstants{}.logits_factor);
  EXPECT_DOUBLE_EQ(logits(wpo, 1024), logits(s, 1024));
}

// The runtime profiles' inputs (strategies/runtime_profile.h), each alone.
MemoryInput lora_input(const dsl::ModelArch& a, Quantization q) {
  MemoryInput in;
  in.arch = &a;
  in.batch = {2, 512};
  in.strategy.precision = Precision::kPureBf16;
  in.strategy.adapter = q == Quantization::kNone ? Adapter::kLora : Adapter::kQlora;
  in.strategy.quantization = q;
  in.strategy.lora_rank = 8;
  return in;
}

TEST(MemoryModelTest, ComposedLossKeepsTwelveBytesPerLogitInAnyDtype) {
  const dsl::ModelArch& a = arch("llama-2-7b");
  MemoryInput in = lora_input(a, Quantization::kNone);
  in.quirks.lean_cross_entropy = false;
  const double elems = 2.0 * 512 * static_cast<double>(a.vocab);
  EXPECT_DOUBLE_EQ(static_cast<double>(estimate_memory(in).per_device.logits.count()), 12 * elems);
  in.strategy.precision = Precision::kFp32;
  EXPECT_DOUBLE_EQ(static_cast<double>(estimate_memory(in).per_device.logits.count()), 12 * elems);
}

// transformers 4.46-4.48: the half logits, their fp32 copy, its shifted
// copy and the log-probabilities, all at once in forward.
TEST(MemoryModelTest, AShiftedLogitsCopyPeaksInForward) {
  const dsl::ModelArch& a = arch("llama-2-7b");
  MemoryInput in = lora_input(a, Quantization::kNone);
  in.quirks.lean_cross_entropy = false;
  in.quirks.shifted_logits_copy = true;
  const double elems = 2.0 * 512 * static_cast<double>(a.vocab);
  auto logits = [&] { return static_cast<double>(estimate_memory(in).per_device.logits.count()); };
  EXPECT_DOUBLE_EQ(logits(), 14 * elems);
  // fp32 logits are their own fp32 copy: backward's 12 B is the larger.
  in.strategy.precision = Precision::kFp32;
  EXPECT_DOUBLE_EQ(logits(), 12 * elems);
  // A fused loss kernel (fms-acceleration's) writes no log-probabilities,
  // but the copies are still made before it.
  in.strategy.precision = Precision::kPureBf16;
  in.quirks.lean_cross_entropy = true;
  const double with_copy = logits();
  in.quirks.shifted_logits_copy = false;
  EXPECT_DOUBLE_EQ(with_copy - logits(), (10 - 4) * elems);
}

// A loop that keeps the model's output through backward (Answer.AI's
// train.py, whose transformers return fp32 logits) holds those logits
// beside the loss's buffers, and the recomputed layer cannot use them.
TEST(MemoryModelTest, HeldOutputLogitsStayThroughBackward) {
  const dsl::ModelArch& a = arch("llama-2-7b");
  MemoryInput in = lora_input(a, Quantization::kNone);
  in.quirks.lean_cross_entropy = false;
  in.strategy.checkpoint_every = 1;
  const double elems = 2.0 * 512 * static_cast<double>(a.vocab);
  const MemoryEstimate without = estimate_memory(in);
  in.quirks.held_output_bytes_per_logit = 4;
  const MemoryEstimate with = estimate_memory(in);
  EXPECT_DOUBLE_EQ(static_cast<double>(with.per_device.logits.count()), 16 * elems);
  EXPECT_EQ(with.per_device.activations, without.per_device.activations);
  EXPECT_DOUBLE_EQ(static_cast<double>((with.per_device.total() - without.per_device.total()).count()), 4 * elems);
  // With the shifted copy, forward's 14 B already count half-precision
  // output logits: a held bf16 output makes backward's 12 B as many.
  in.quirks.shifted_logits_copy = true;
  in.quirks.held_output_bytes_per_logit = 2;
  EXPECT_DOUBLE_EQ(static_cast<double>(estimate_memory(in).per_device.logits.count()), 14 * elems);
}

// Reentrant checkpointing around FSDP1 units of frozen weights
// (RuntimeQuirks::held_checkpoints): the end of backward holds every
// checkpointed input and its gradient, so a deep model at long sequences
// peaks there, about one more set of layer inputs above the start of
// backward; without ZeRO-3, adapters or checkpointing nothing changes.
TEST(MemoryModelTest, HeldCheckpointsAddTheInputsGradientsAtTheEndOfBackward) {
  const dsl::ModelArch& a = arch("llama-2-70b");
  MemoryInput in = lora_input(a, Quantization::kNf4Double);
  in.batch = {2, 4096};
  in.strategy.micro_batch_size = 2;
  in.strategy.checkpoint_every = 1;
  in.strategy.zero_stage = 3;
  in.strategy.num_gpus = 2;
  in.quirks.lean_cross_entropy = false;
  const double inputs = static_cast<double>(a.layers) * 2 * 4096 * static_cast<double>(a.hidden) * 2;
  auto total = [&] { return static_cast<double>(estimate_memory(in).per_device.total().count()); };
  const double without = total();
  in.quirks.held_checkpoints = true;
  const double with = total();
  // The inputs' gradients, less what the loss held at the start of backward
  // and plus the first layer's recomputation at its end.
  EXPECT_GT(with - without, 0.8 * inputs);
  EXPECT_LT(with - without, 1.2 * inputs);
  for (auto off :
       {+[](MemoryInput& m) { m.strategy.zero_stage = 2; }, +[](MemoryInput& m) { m.strategy.checkpoint_every = 0; },
        +[](MemoryInput& m) {
          m.strategy.adapter = Adapter::kNone;
          m.strategy.quantization = Quantization::kNone;
        }}) {
    MemoryInput other = in;
    off(other);
    const double held = static_cast<double>(estimate_memory(other).per_device.total().count());
    other.quirks.held_checkpoints = false;
    EXPECT_EQ(held, static_cast<double>(estimate_memory(other).per_device.total().count()));
  }
}

// litgpt's attention and norms (RuntimeQuirks::fused_qkv_views,
// fp32_norm_inputs) against what lit_gpt's and litgpt's own modules keep
// for backward, measured with torch's saved-tensor hooks on the CPU by
// tests/strategies/saved_activations_reference.py --litgpt SRC (litgpt is
// not in .venv; docs/planner.md "What stacks keep for backward"): a
// 256-wide Llama block (8 heads, MLP 688), bf16, LoRA r8 on q and v without
// dropout, in bytes a layer keeps per token per hidden unit.
double litgpt_layer_bytes(std::int64_t kv_heads, bool fp32_norms) {
  dsl::ModelArch a = arch("llama-2-7b");
  a.hidden = 256, a.intermediate = 688, a.heads = 8, a.kv_heads = kv_heads, a.vocab = 1024;
  MemoryInput in = lora_input(a, Quantization::kNone);
  in.lora_targets = {"q_proj", "v_proj"};
  in.quirks.lean_cross_entropy = true;
  in.quirks.fused_qkv_views = true;
  in.quirks.fp32_norm_inputs = fp32_norms;
  return layer_bytes_per_token_per_hidden(a, in);
}

TEST(MemoryModelTest, LitgptsFusedQkvViewsAndNormsKeepWhatLitgptSaves) {
  // lit_gpt at 8641822 (2023-10-16): 38.39 with as many K/V heads as query
  // heads (V a view keeping the whole q/k/v output), 32.89 with 2 (K and V
  // repeated to all heads); litgpt 0.5.13 keeps fp32 norm inputs: 42.41,
  // 36.91. Without the quirks the model counted 30.41 and 27.41.
  EXPECT_NEAR(litgpt_layer_bytes(8, false), 38.39, 0.05);
  EXPECT_NEAR(litgpt_layer_bytes(2, false), 32.89, 0.05);
  EXPECT_NEAR(litgpt_layer_bytes(8, true), 42.41, 0.05);
  EXPECT_NEAR(litgpt_layer_bytes(2, true), 36.91, 0.05);
}

// The same for GPT-NeoX's block (StableLM-alpha's: LayerNorm, a quarter of
// each head rotated, a 4h GELU MLP, parallel residual, biases) with LoRA on
// the q and v parts of its one q/k/v linear: 28.28 in lit_gpt at 8641822
// and in litgpt 0.5.13 (LayerNorm keeps its input as it comes).
TEST(MemoryModelTest, LitgptsGptNeoxBlockKeepsWhatLitgptSaves) {
  dsl::ModelArch a = arch("pythia-70m");
  a.hidden = 256, a.intermediate = 1024, a.heads = 8, a.kv_heads = 8, a.vocab = 1024;
  MemoryInput in = lora_input(a, Quantization::kNone);
  in.lora_targets = {"query_key_value"};
  in.quirks.lean_cross_entropy = true;
  in.quirks.fused_qkv_views = true;
  EXPECT_NEAR(layer_bytes_per_token_per_hidden(a, in), 28.28, 0.05);
}

TEST(MemoryModelTest, OneLoraOnTheFusedQkvLinearKeepsOneDropoutAndItsPaddedOutput) {
  const dsl::ModelArch& a = arch("llama-2-7b");
  MemoryInput in = lora_input(a, Quantization::kNone);
  in.lora_targets = {"q_proj", "v_proj"};
  in.lora_dropout = 0.05;
  const double sbh = 2.0 * 512 * static_cast<double>(a.hidden);
  const double separate = static_cast<double>(estimate_memory(in).per_device.activations.count());
  in.quirks.fused_qkv_views = true;
  const double fused = static_cast<double>(estimate_memory(in).per_device.activations.count());
  // Per layer, in bf16: the q and k parts of the output kept by V's view
  // (4 B per sbh element), the adapter's padded output for q and v (4 B),
  // one dropout copy and mask fewer (3 B).
  EXPECT_DOUBLE_EQ(fused - separate, static_cast<double>(a.layers) * (4 + 4 - 3) * sbh);
}

TEST(MemoryModelTest, NoSyncAccumulationUnderFsdp1KeepsWholeBlockGradients) {
  const dsl::ModelArch& a = arch("llama-2-7b");
  MemoryInput in = lora_input(a, Quantization::kNone);
  in.strategy.zero_stage = 3;
  in.strategy.num_gpus = 2;
  in.strategy.grad_accumulation = 8;
  const Bytes sharded = estimate_memory(in).per_device.gradients;
  in.quirks.unsharded_accumulated_gradients = true;
  const MemoryEstimate e = estimate_memory(in);
  const ParameterCounts pc = count_parameters(a);
  EXPECT_EQ(e.per_device.gradients.count(), (pc.per_layer * a.layers + e.trainable_parameters) * 2);
  EXPECT_GT(e.per_device.gradients, sharded * 100);
  // Syncing every step (no accumulation) reduce-scatters as usual.
  in.strategy.grad_accumulation = 1;
  EXPECT_LT(estimate_memory(in).per_device.gradients, Bytes::mib(100));
}

// FSDP1 keeps its root unit gathered through the step: the embedding, the
// final norm and an untied head, whole on every rank beside the blocks.
TEST(MemoryModelTest, Fsdp1KeepsItsRootUnitWhole) {
  const dsl::ModelArch& a = arch("llama-2-7b");
  ASSERT_FALSE(a.tie_embeddings);
  const double root = static_cast<double>(2 * a.vocab * a.hidden + a.hidden);
  MemoryInput in = lora_input(a, Quantization::kNone);
  in.strategy.zero_stage = 3;
  in.strategy.num_gpus = 4;
  auto overhead = [&] { return static_cast<double>(estimate_memory(in).per_device.overhead.count()); };
  const double blocks_only = overhead();
  in.quirks.root_unit_gathered = true;
  EXPECT_DOUBLE_EQ(overhead() - blocks_only, root * 2);
  // A head the stack quantises is gathered in NF4.
  in = lora_input(a, Quantization::kNf4);
  in.strategy.zero_stage = 3;
  in.strategy.num_gpus = 4;
  in.quirks.quantizes_head = true;
  const double nf4_blocks_only = overhead();
  in.quirks.root_unit_gathered = true;
  const double head = static_cast<double>(a.vocab * a.hidden);
  EXPECT_NEAR(overhead() - nf4_blocks_only,
              (root - head) * 2 + head * quantized_bytes_per_param(Quantization::kNf4, a.hidden), 1);
  // Unsharded ranks gather nothing.
  in.strategy.zero_stage = 1;
  const double unsharded = overhead();
  in.quirks.root_unit_gathered = false;
  EXPECT_DOUBLE_EQ(overhead(), unsharded);
}

// modules_to_save beside adapters: the embedding and an untied head train
// as a full fine-tune's parameters do (mixed precision: a gradient in the
// weights' dtype, an fp32 master copy, two fp32 moments: 14 bytes beside the
// 2 of the weight); a tied matrix once; PEFT keeps the originals too.
TEST(MemoryModelTest, ModulesToSaveTrainTheEmbeddingAndHeadAsAFullFineTuneDoes) {
  const dsl::ModelArch& a = arch("llama-2-7b");
  const double matrix = static_cast<double>(a.vocab * a.hidden);
  MemoryInput in = lora_input(a, Quantization::kNone);
  in.strategy.precision = Precision::kBf16;
  const MemoryEstimate adapters = estimate_memory(in);
  in.whole_modules = {.embedding = true, .head = true};
  const MemoryEstimate whole = estimate_memory(in);
  EXPECT_EQ(whole.trainable_parameters - adapters.trainable_parameters, static_cast<std::int64_t>(2 * matrix));
  const auto delta = [](Bytes x, Bytes y) { return static_cast<double>((x - y).count()); };
  EXPECT_DOUBLE_EQ(delta(whole.per_device.gradients, adapters.per_device.gradients), 2 * matrix * 2);
  EXPECT_DOUBLE_EQ(delta(whole.per_device.master_weights, adapters.per_device.master_weights), 2 * matrix * 4);
  EXPECT_DOUBLE_EQ(delta(whole.per_device.optimizer_states, adapters.per_device.optimizer_states), 2 * matrix * 8);
  EXPECT_EQ(whole.per_device.weights, adapters.per_device.weights);  // trained in place
  EXPECT_EQ(whole.per_device.adapter, adapters.per_device.adapter);
  // PEFT's ModulesToSaveWrapper: the frozen originals beside the copies.
  in.quirks.whole_module_copies = true;
  EXPECT_DOUBLE_EQ(delta(estimate_memory(in).per_device.weights, adapters.per_device.weights), 2 * matrix * 2);
  // A tied matrix is one tensor, whichever name trains it.
  const dsl::ModelArch& tied = arch("llama-3.2-1b");
  ASSERT_TRUE(tied.tie_embeddings);
  EXPECT_EQ(dsl::whole_modules(tied, {"lm_head", "embed_tokens"}).head, false);
  MemoryInput t = lora_input(tied, Quantization::kNone);
  const std::int64_t lora_only = estimate_memory(t).trainable_parameters;
  t.whole_modules = dsl::whole_modules(tied, {"embed_tokens", "lm_head"});
  EXPECT_EQ(estimate_memory(t).trainable_parameters - lora_only, tied.vocab * tied.hidden);
}

TEST(MemoryModelTest, AnUntiedQuantisedHeadIsLitgptsHead) {
  const dsl::ModelArch& a = arch("llama-3.2-1b");
  ASSERT_TRUE(a.tie_embeddings);
  const double head = static_cast<double>(a.vocab * a.hidden);
  MemoryInput in = lora_input(a, Quantization::kNone);
  const Bytes tied = estimate_memory(in).per_device.weights;
  in.quirks.unties_embeddings = true;
  EXPECT_DOUBLE_EQ(static_cast<double>((estimate_memory(in).per_device.weights - tied).count()), 2 * head);

  MemoryInput q = lora_input(a, Quantization::kNf4);
  q.quirks.unties_embeddings = true;
  const MemoryEstimate bf16_head = estimate_memory(q);
  q.quirks.quantizes_head = true;
  const MemoryEstimate nf4_head = estimate_memory(q);
  EXPECT_NEAR(static_cast<double>((bf16_head.per_device.weights - nf4_head.per_device.weights).count()),
              head * (2 - quantized_bytes_per_param(Quantization::kNf4, a.hidden)), 1);
  // The head is the largest weight dequantised; from fp16, twice over.
  const Bytes one_copy = nf4_head.per_device.overhead;
  q.quirks.dequantized_copies = 2;
  EXPECT_NEAR(static_cast<double>((estimate_memory(q).per_device.overhead - one_copy).count()), 2 * head, 1);
}

TEST(MemoryModelTest, ShardedQloraGathersQuantisedLayers) {
  const dsl::ModelArch& a = arch("llama-2-70b");
  MemoryInput in = lora_input(a, Quantization::kNone);
  in.strategy.zero_stage = 3;
  in.strategy.num_gpus = 8;
  const ParameterCounts pc = count_parameters(a);
  const double lora_overhead = static_cast<double>(estimate_memory(in).per_device.overhead.count());
  MemoryInput q = lora_input(a, Quantization::kNf4);
  q.strategy.zero_stage = 3;
  q.strategy.num_gpus = 8;
  const double qlora_overhead = static_cast<double>(estimate_memory(q).per_device.overhead.count());
  // Two gathered layers, NF4 instead of bf16, plus one dequantised linear.
  const double per_layer_linear = static_cast<double>(pc.block_linear) / static_cast<double>(a.layers);
  EXPECT_NEAR(lora_overhead - qlora_overhead,
              2 * per_layer_linear * (2 - quantized_bytes_per_param(Quantization::kNf4, a.hidden)) -
                  static_cast<double>(pc.largest_linear) * 2,
              8);
}

// The bytes a measured term added to an estimate (0: not counted).
Bytes term(const MemoryEstimate& e, Correction c) {
  Bytes sum;
  for (const CorrectionTerm& t : e.corrections) {
    if (t.id == c) sum += t.bytes;
  }
  return sum;
}

TEST(MemoryModelTest, MeasuredTermsAreNamedWithTheirComponentAndSource) {
  std::set<std::string> keys;
  std::size_t i = 0;
  for (const CorrectionInfo& c : corrections()) {
    EXPECT_EQ(static_cast<std::size_t>(c.id), i++) << c.key;
    EXPECT_TRUE(keys.insert(c.key).second) << c.key;
    bool component = false;
    for (const MemoryComponent& m : kMemoryComponents)
      component = component || std::string(m.key) == c.component;
    EXPECT_TRUE(component) << c.key << ": " << c.component;
    const std::string source = c.source;
    EXPECT_TRUE(source.find(".cpp") != std::string::npos || source.find(".md") != std::string::npos ||
                source.find(".yaml") != std::string::npos)
        << c.key << " names no test, document or corpus";
  }
}

// Each measured term is recorded where it is counted, within its component.
TEST(MemoryModelTest, AnEstimateListsTheMeasuredTermsItCounts) {
  const dsl::ModelArch& a = arch("llama-2-7b");
  Strategy s;
  s.precision = Precision::kBf16;
  s.adapter = Adapter::kLora;
  s.lora_rank = 16;
  s.grad_accumulation = 2;
  s.checkpoint_every = 1;
  // A reward model's score head: no logits whose freeing would hide the
  // last layer's gradients.
  MemoryInput in;
  in.arch = &a;
  in.batch = {2, 2048};
  in.score_head = true;
  in.strategy = s;
  const MemoryEstimate recomputed = estimate_memory(in);
  EXPECT_GT(term(recomputed, Correction::kRecomputedLayer).count(), 0);
  EXPECT_EQ(term(recomputed, Correction::kLastLayerBackward).count(), 0);
  in.strategy.checkpoint_every = 0;
  const MemoryEstimate kept = estimate_memory(in);
  EXPECT_EQ(term(kept, Correction::kRecomputedLayer).count(), 0);
  EXPECT_GT(term(kept, Correction::kLastLayerBackward).count(), 0);
  // A language model's logits, freed before the last layer's backward,
  // leave room for those gradients: nothing measured is added.
  in.score_head = false;
  EXPECT_EQ(term(estimate_memory(in), Correction::kLastLayerBackward).count(), 0);
  for (const MemoryEstimate* e : {&recomputed, &kept}) {
    for (const MemoryComponent& m : kMemoryComponents) {
      Bytes sum;
      for (const CorrectionTerm& t : e->corrections) {
        if (correction_info(t.id).component == std::string(m.key)) sum += t.bytes;
      }
      EXPECT_LE(sum, e->per_device.*m.member) << m.key;
    }
  }
}

TEST(MemoryModelTest, CalibrationMakesTheEstimateReproduceAMeasurement) {
  const dsl::ModelArch& a = arch("tiny-llama");
  Strategy s;
  s.precision = Precision::kBf16;
  const MemoryConstants base = MemoryConstants::defaults();
  const MemoryBreakdown est = estimate(a, s, 256, 4).per_device;
  MemoryBreakdown measured = est;
  measured.activations = Bytes(est.activations.count() * 13 / 10);  // 30% more than estimated
  measured.logits = Bytes(est.logits.count() * 9 / 10);
  MemoryInput in;
  in.arch = &a;
  in.batch = {4, 256};
  in.strategy = s;
  const MemoryBreakdown again = estimate_memory(in, calibrate(base, est, measured)).per_device;
  EXPECT_NEAR(static_cast<double>(again.activations.count()), static_cast<double>(measured.activations.count()), 2);
  EXPECT_NEAR(static_cast<double>(again.logits.count()), static_cast<double>(measured.logits.count()), 2);
  EXPECT_NEAR(static_cast<double>(again.weights.count()), static_cast<double>(est.weights.count()), 2);
  // The correction carries over to another batch shape of the same model.
  in.batch = {8, 256};
  const double ratio = static_cast<double>(estimate_memory(in, calibrate(base, est, measured)).per_device.activations.count()) /
                       static_cast<double>(estimate_memory(in, base).per_device.activations.count());
  EXPECT_NEAR(ratio, 1.3, 1e-3);
}

}  // namespace
}  // namespace tailor::strategies
