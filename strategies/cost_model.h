// Throughput estimate for a strategy on a device: training FLOPs over
// achievable compute, plus the communication, offload and optimizer time
// that do not overlap with it. An estimate for ranking strategies, not a
// promise; the assumptions are named in CostConstants.
#pragma once

#include <cstdint>

#include "dsl/job_spec.h"
#include "strategies/hardware.h"
#include "strategies/strategy.h"

namespace tailor::strategies {

struct CostConstants {
  // Fraction of peak dense throughput a well-tuned training step reaches
  // at large micro-batches (model FLOPs utilisation). Megatron-LM reports
  // ~40-55% on A100s (Narayanan et al. 2021); 0.45 for tensor-core dtypes.
  double mfu_tensor = 0.45;
  double mfu_fp32 = 0.60;  // fp32 CUDA-core (or CPU BLAS) kernels saturate more easily
  // Utilisation grows with the tokens in a micro-batch: u = mfu * t / (t + half),
  // so tiny micro-batches pay for launch and memory-bound work.
  double half_saturation_tokens = 512;
  // Between nodes a collective runs at the network's speed, not NVLink's:
  // one 200 Gb/s InfiniBand rail per GPU (25 GB/s), the common HDR/NDR
  // layout of 8-GPU training nodes.
  double inter_node_gbps = 25;
  // Share of gradient communication hidden behind backward (ZeRO 0-2). ZeRO-3
  // gathers are counted fully: they sit on the critical path of each layer.
  double comm_overlap = 0.5;
  // DeepSpeed's CPU Adam updates on the order of 1e9 parameters per second
  // on a server CPU (Ren et al. 2021, ZeRO-Offload, section 5).
  double cpu_adam_params_per_second = 1e9;
  // QLoRA dequantises every 4-bit base weight before each pass that needs
  // it dense (forward, backward, recomputation): it reads 0.5 B and writes
  // 2 B per parameter, a memory-bound kernel (its ~3 FLOPs per parameter are
  // negligible next to the bytes). Its share of peak bandwidth: 0.3
  // reproduces the measured 1.39x runtime of 16-bit LoRA on Llama-2-7B with
  // one ~200-token sequence per micro-batch on an A100 (S. Raschka,
  // "Practical Tips for Finetuning LLMs Using LoRA", 2023); at longer
  // micro-batches the same bytes weigh less, as practice reports.
  double dequant_bandwidth_efficiency = 0.3;
  // LibTorch's flash CPU kernel in half precision against materialised
  // attention, in the step of tailor-runner on this project's 2-core AMD
  // machine (docs/benchmarks.md, "Fused attention on the CPU"): the fused
  // form's attention FLOPs take this much extra time (measured 2.0 at 256
  // tokens, 0.85 at 512, 0.75 at 1024; in fp32 the two are within 4%). Its
  // kernel runs fp32 GEMMs inside.
  double cpu_half_fused_attention_extra = 1.0;
  // The fused linear cross-entropy's slices of rows (2^24 logits: 128 rows
  // at a 128k vocabulary) against one whole-batch head matmul: the head's
  // forward FLOPs take this much extra time, so that the planner fuses the
  // head only where the logits do not fit (docs/gpu-measurements.md, "the
  // head fused with the loss": equal speed under LoRA at 4k and 32k tokens
  // on an H200). A head that trains is also projected again in backward:
  // FLOPs, counted as such.
  double fused_linear_slice_extra = 0.1;
  // Activation offloading on a GPU copies each checkpointed layer's input
  // to the host on a side stream while the next layers compute, and back a
  // layer ahead of its backward: this share of the copies hides behind the
  // compute when there is compute enough to cover them. An assumption, not
  // a measurement yet (no GPU has run it: runner/README.md).
  double activation_offload_hidden = 0.9;
  // Ranking, not timing: each technique that changes what is trained
  // (8-bit optimizer states, pure-bf16 states, adapters, a quantised base)
  // must buy this much estimated speed to beat a more faithful plan. Without
  // it, a sliver of optimizer-step time would pick 8-bit Adam for jobs that
  // fit comfortably.
  double fidelity_margin = 0.10;
};

// How far a strategy departs from exact full-model training: 1 each for
// 8-bit optimizer states, pure-bf16 states and LoRA; 2 for QLoRA.
int fidelity_cost(const Strategy& s);

struct Throughput {
  double flops_per_token = 0;        // FLOPs per trained token, recomputation included
  double model_flops_per_token = 0;  // model_flops_per_token(): what MFU counts
  double compute_seconds = 0;     // per optimizer step
  double comm_seconds = 0;        // exposed collective time per step
  double offload_seconds = 0;     // host transfers (optimizer, weights, activations) and CPU optimizer per step
  double optimizer_seconds = 0;   // on-device optimizer update per step
  double reference_seconds = 0;   // dpo, kto: the reference model's forward passes per step (no backward);
                                  // kto's KL rows: their forwards through the reference and the trained model
  // dpo, reference precomputed: the same forwards over a step's pairs, paid
  // once before training instead of every step (none for pairs the cache
  // holds); not in step_seconds.
  double reference_pass_seconds = 0;
  double step_seconds = 0;
  double tokens_per_second = 0;
};

// Model FLOPs per trained token, as model FLOPs utilisation counts them
// (Chowdhery et al. 2022, PaLM, appendix B): the forward's matmuls and
// attention (4 L s h, causal or not) times 3 for a full fine-tune, times 2
// under adapters (frozen weights have no weight-gradient matmuls); no
// recomputation, no fused head's second projection.
double model_flops_per_token(const dsl::ModelArch& arch, const Strategy& s, std::int64_t seq_len);

// The device's dense peak in TFLOP/s for the strategy's compute dtype (fp32
// where it has none for it), the denominator of MFU.
double dense_peak_tflops(const Device& device, const Strategy& s);

// `global_batch` sequences of `seq_len` tokens per optimizer step.
Throughput estimate_throughput(const dsl::ModelArch& arch, const Strategy& s, std::int64_t seq_len,
                               std::int64_t global_batch, const Device& device, const CostConstants& k = {});

}  // namespace tailor::strategies
