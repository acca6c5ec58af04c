// FLOPs: the 6*P*tokens rule for a full training step (2P forward, 4P
// backward; Kaplan et al. 2020, section 2.1) plus attention's 4*L*s*h per
// token forward; recomputation adds one forward for checkpointed layers
// (Chen et al. 2016); frozen weights skip their weight-gradient matmuls,
// so an adapter step is about 2 forwards instead of 3 (Hu et al. 2021).
// Communication: ring collectives move 2(N-1)/N of the buffer for
// all-reduce, (N-1)/N for reduce-scatter and all-gather; ZeRO-3 moves 1.5x
// data parallelism's volume (Rajbhandari et al. 2020, section 7).
#include "strategies/cost_model.h"

#include <algorithm>
#include <cmath>

#include "strategies/memory_model.h"

namespace tailor::strategies {

int fidelity_cost(const Strategy& s) {
  int cost = 0;
  if (s.optimizer == Optimizer::kAdamw8bit) ++cost;
  if (s.precision == Precision::kPureBf16) ++cost;
  if (s.adapter == Adapter::kLora) cost += 1;
  if (s.adapter == Adapter::kQlora) cost += 2;
  return cost;
}

namespace {

// Forward FLOPs per token: every matmul weight twice (multiply-add), the
// lm_head included even when tied, and attention's QK^T and AV. Under a
// mixture of experts, a token goes through its experts only.
struct ForwardFlops {
  double matmuls, attention;
  double total() const { return matmuls + attention; }
};

ForwardFlops forward_flops(const dsl::ModelArch& a, const ParameterCounts& pc, std::int64_t seq_len) {
  const double matmul_params = static_cast<double>(pc.block_linear + pc.active_expert + a.vocab * a.hidden);
  return {2.0 * matmul_params, 4.0 * static_cast<double>(a.layers) * static_cast<double>(seq_len) *
                                   static_cast<double>(a.heads * a.head_dim())};
}

// A forward and the backward's two matmuls per weight (input and weight
// gradients); frozen weights skip the weight gradient.
double model_passes(const Strategy& s) { return s.adapter != Adapter::kNone ? 2.0 : 3.0; }

}  // namespace

double model_flops_per_token(const dsl::ModelArch& a, const Strategy& s, std::int64_t seq_len) {
  return forward_flops(a, count_parameters(a), seq_len).total() * model_passes(s);
}

double dense_peak_tflops(const Device& dev, const Strategy& s) {
  double peak = dev.peak_tflops_fp32;
  if (s.precision == Precision::kBf16 || s.precision == Precision::kPureBf16) peak = dev.peak_tflops_bf16;
  if (s.precision == Precision::kFp16) peak = dev.peak_tflops_fp16;
  return peak > 0 ? peak : dev.peak_tflops_fp32;  // unsupported dtype: emulated at fp32 speed
}

Throughput estimate_throughput(const dsl::ModelArch& a, const Strategy& s, std::int64_t seq_len,
                               std::int64_t global_batch, const Device& dev, const CostConstants& k) {
  Throughput t;
  const ParameterCounts pc = count_parameters(a);
  const double n = static_cast<double>(std::max<std::int64_t>(1, s.num_gpus));
  const double L = static_cast<double>(a.layers);
  const double seq = static_cast<double>(seq_len);
  const bool adapter = s.adapter != Adapter::kNone;

  const ForwardFlops ff = forward_flops(a, pc, seq_len);
  const double attention = ff.attention;
  const double forward = ff.total();
  t.model_flops_per_token = forward * model_passes(s);
  const double recompute_fraction =
      s.checkpoint_every > 0 ? std::min(1.0, 1.0 / static_cast<double>(s.checkpoint_every)) : 0.0;
  const double passes = model_passes(s) + recompute_fraction;
  t.flops_per_token = forward * passes;
  // FLOPs that take as long as that, for the time estimate.
  double timed_flops_per_token = t.flops_per_token;
  if (dev.cpu && s.precision != Precision::kFp32 && s.attention == Attention::kMemoryEfficient) {
    timed_flops_per_token += k.cpu_half_fused_attention_extra * attention * passes;
  }
  if (s.cross_entropy == CrossEntropy::kFusedLinear) {
    const double head_forward = 2.0 * static_cast<double>(a.vocab * a.hidden);
    if (!adapter || s.precision == Precision::kFp16) {
      t.flops_per_token += head_forward;
      timed_flops_per_token += head_forward;
    }
    timed_flops_per_token += k.fused_linear_slice_extra * head_forward;
  }

  const double peak_tflops = dense_peak_tflops(dev, s);
  const double mfu = s.precision == Precision::kFp32 ? k.mfu_fp32 : k.mfu_tensor;
  // Preference pairs: a micro-batch of b pairs is 2b rows.
  const auto rows_per_sequence = static_cast<double>(s.rows_per_sequence());
  const double micro_tokens = rows_per_sequence * static_cast<double>(s.micro_batch_size) * seq;
  const double utilisation = mfu * micro_tokens / (micro_tokens + k.half_saturation_tokens);
  const double micro_compute = timed_flops_per_token * micro_tokens / (peak_tflops * 1e12 * utilisation);

  // QLoRA dequantises every quantised base weight for forward, backward and
  // recomputation, a pass bound by memory bandwidth: the stored codes and
  // scales read (0.52 B/param for NF4 with double quantisation) and the
  // compute-dtype weight written, each pass.
  double micro_dequant = 0;
  if (s.quantization != Quantization::kNone) {
    const double quantized = static_cast<double>(pc.block_linear + pc.expert_quantizable);
    const double dense_passes = 2.0 + recompute_fraction;
    const double bandwidth = std::max(1.0, dev.memory_bandwidth_gbps) * 1e9 * k.dequant_bandwidth_efficiency;
    const double moved = quantized_bytes_per_param(s.quantization, a.hidden) + weight_bytes_per_param(s.precision);
    micro_dequant = dense_passes * quantized * moved / bandwidth;
  }

  // WPO's weights: the head once more over every row, forward only.
  double micro_head_pass = 0;
  if (s.head_pass) {
    const double head_forward = 2.0 * static_cast<double>(a.vocab * a.hidden);
    micro_head_pass = head_forward * micro_tokens / (peak_tflops * 1e12 * utilisation);
  }

  const double accum = static_cast<double>(s.grad_accumulation);
  t.compute_seconds = accum * (micro_compute + micro_dequant + micro_head_pass);
  // The reference's forward over the same rows, without recomputation or
  // backward (and, QLoRA's base being the reference, one more dequantise);
  // kto's KL rows add two such forwards, the reference's and the trained
  // model's.
  if (s.reference != Reference::kNone) {
    const double reference_compute = forward * micro_tokens / (peak_tflops * 1e12 * utilisation);
    const double dequant_forward = micro_dequant > 0 ? micro_dequant / (2.0 + recompute_fraction) : 0.0;
    const double forwards = s.kl_rows ? 3.0 : 1.0;
    const double seconds = forwards * accum * (reference_compute + dequant_forward);
    (s.reference == Reference::kPrecomputed ? t.reference_pass_seconds : t.reference_seconds) = seconds;
  }

  // Gradient and parameter traffic between GPUs.
  const double trainable = adapter ? static_cast<double>(lora_parameter_count(a, s.lora_rank, {})) :
                                     static_cast<double>(pc.total);
  const double grad_bytes = trainable * gradient_bytes_per_param(s.precision);
  if (s.num_gpus > 1 && dev.interconnect_gbps > 0) {
    const double bw = dev.interconnect_gbps * 1e9;
    const double ring = (n - 1) / n;
    double exposed = 0;
    if (s.zero_stage <= 1) {
      exposed = 2 * ring * grad_bytes / bw * (1 - k.comm_overlap);  // one all-reduce per step
    } else if (s.zero_stage == 2) {
      exposed = accum * ring * grad_bytes / bw * (1 - k.comm_overlap) + ring * grad_bytes / bw;  // RS each micro, AG params
    } else {
      const double param_bytes = static_cast<double>(pc.total) * weight_bytes_per_param(s.precision);
      exposed = accum * ring * (2 * param_bytes + grad_bytes) / bw;  // AG fwd + AG bwd + RS grads, each micro
    }
    t.comm_seconds = exposed;
  }

  // Optimizer update: memory-bound over the trainable state it touches.
  const double state_bytes = trainable * (weight_bytes_per_param(s.precision) + gradient_bytes_per_param(s.precision) +
                                          master_bytes_per_param(s.precision) +
                                          optimizer_bytes_per_param(s.optimizer, s.precision));
  const double shard = s.zero_stage >= 1 ? n : 1.0;
  if (s.offload == Offload::kNone) {
    t.optimizer_seconds = 2.0 * state_bytes / shard / (dev.memory_bandwidth_gbps * 1e9);
  } else {
    // Gradients to the host, updated 16-bit weights back, the update on the CPU.
    const double link = std::max(1.0, dev.host_link_gbps) * 1e9;
    t.offload_seconds = 2.0 * trainable * 2.0 / shard / link + trainable / k.cpu_adam_params_per_second;
    if (s.offload == Offload::kOptimizerAndParams) {
      // Each micro-batch streams this rank's weights in for forward and backward.
      const double weights = static_cast<double>(pc.total) * weight_bytes_per_param(s.precision) / n;
      t.offload_seconds += accum * 2.0 * weights / link;
    }
  }
  // Activation offloading: each checkpointed layer's input out in forward
  // and back in backward, every micro-batch. A GPU copies over its host
  // link beside the compute; the CPU copies within its own memory, in the
  // step's path (read and write).
  if (s.activation_offload && s.checkpoint_every > 0) {
    const double checkpointed = std::ceil(L / static_cast<double>(s.checkpoint_every));
    const double element = s.precision == Precision::kFp32 ? 4.0 : 2.0;
    const double bytes = 2.0 * checkpointed * micro_tokens * static_cast<double>(a.hidden) * element;
    double exposed = 0;
    if (dev.cpu) {
      exposed = 2.0 * bytes / (std::max(1.0, dev.memory_bandwidth_gbps) * 1e9);
    } else {
      const double transfer = bytes / (std::max(1.0, dev.host_link_gbps) * 1e9);
      exposed = std::max(transfer * (1.0 - k.activation_offload_hidden), transfer - micro_compute);
    }
    t.offload_seconds += accum * exposed;
  }
  t.step_seconds = t.compute_seconds + t.comm_seconds + t.optimizer_seconds + t.offload_seconds + t.reference_seconds;
  t.tokens_per_second = rows_per_sequence * static_cast<double>(global_batch) * seq / t.step_seconds;
  return t;
}

}  // namespace tailor::strategies
