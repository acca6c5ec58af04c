#!/usr/bin/env bash
# On a machine with a CUDA GPU: the runner's own CUDA kernels
# (runner/torch/cuda/), first checked against ATen by runner_test's CUDA
# cases, then trained with and without them, one after the other in one
# invocation: tokens/s against ATen's ops alone, the largest loss
# difference over the steps, the CUDA allocator's peak.
#
# Same plan for every row of a case (the planner's for the detected GPU);
# only TAILOR_CUDA_KERNELS changes: none (ATen), each kernel alone that the
# case uses, then all. Models are randomly initialised at real shapes:
# Llama 3.2 1B (bf16, LoRA r16, full, and QLoRA for the NF4 kernel) and
# Gemma 2 2B (GeGLU, its 1 + w norms). A kernel is verified on a GPU when
# its tests pass there and its training losses follow ATen's (the note
# says by how much); runner/README.md then records it and
# kernel_selection.cpp's verified_cuda_kernels() turns it on by default.
#   bench/gpu_kernels.sh [BUILD_DIR]    STEPS=8 SEQ=4096 PYTHON=python3
#     CASES="llama:lora llama:none llama:qlora gemma:lora" (default)
#     SKIP_TESTS=1 to train only; LLAMA_ARCH=, GEMMA_ARCH= another model.arch
#     (vocab 128256 at least), e.g. a small one to try the script on the CPU
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=${1:-build}
bin=$build/bin
steps=${STEPS:-8}
seq=${SEQ:-4096}
warmup=2
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
read -r -a cases <<<"${CASES:-llama:lora llama:none llama:qlora gemma:lora}"

"$python" -c 'import torch; print("torch", torch.__version__, "on", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'
if [[ -z ${SKIP_TESTS:-} ]]; then
  echo "== runner_test, the CUDA cases against ATen"
  "$build/tests/runner_test" --gtest_brief=0 \
    --gtest_filter='*FusedOpsTest*Cuda*:FusedAdamWTest.OnCuda*:FusedAdamWTest.OptimizerStepsOnCuda*:Nf4CudaKernelTest.*:KernelSelectionTest.*' \
    | grep -E '^\[ *(OK|FAILED|SKIPPED|PASSED) *\]' || true
fi

bench_long_documents "$work/tokens.bin" 128256

arch() {  # family -> the model.arch mapping
  case $1 in
    llama) echo "${LLAMA_ARCH:-{family: llama, layers: 16, hidden: 2048, intermediate: 8192, heads: 32, kv_heads: 8, vocab: 128256, max_seq_len: 8192, tie_embeddings: true\}}" ;;
    gemma) echo "${GEMMA_ARCH:-{family: gemma2, layers: 26, hidden: 2304, intermediate: 9216, heads: 8, kv_heads: 4, head_dim: 256, vocab: 256000, max_seq_len: 8192, sliding_window: 4096, attn_logit_softcap: 50, final_logit_softcap: 30, query_pre_attn_scalar: 256, tie_embeddings: true, norm_eps: 1.0e-6\}}" ;;
  esac
}

kernels_of() {  # family adapter -> the kernels the case runs
  local k="rms_norm rope cross_entropy adamw"
  [[ $1 == gemma ]] && k+=" geglu" || k+=" swiglu"
  [[ $2 == qlora ]] && k+=" nf4_dequantize"
  echo "$k"
}

spec() {  # family adapter -> job.yaml
  local adapter=$2 extra=""
  [[ $adapter != none ]] && extra=", lora: {r: 16}"
  cat > "$work/job.yaml" <<YAML
apiVersion: tailor/v1
kind: TrainingJob
name: cuda-kernels
model:
  arch: $(arch "$1")
data: {train: $work/tokens.bin, format: tokens, seq_len: $seq, packing: true}
training: {global_batch_size: 2, micro_batch_size: 1, max_steps: $steps, lr: 1e-4, scheduler: constant, grad_clip: 1.0, seed: 7}
strategy: {precision: bf16, gradient_checkpointing: true, adapter: $adapter, optimizer: adamw, zero_stage: 0, offload: none$extra}
YAML
}

report() {  # label selection out baseline_out -> one row
  "$python" - "$@" "$warmup" <<'PY'
import json, sys
label, selection, out, base, warmup = sys.argv[1:6]
def rows(d):
    return [json.loads(l) for l in open(d + "/metrics.jsonl")]
mine, ref = rows(out), rows(base)
def tps(rs):
    timed = rs[int(warmup):] or rs
    return len(timed) / sum(1 / r["tokens_per_second"] for r in timed)
start = [json.loads(l) for l in open(out + "/events.jsonl") if '"start"' in l]
used = start[0].get("cuda_kernels", "- (not on CUDA)") if start else "?"
diff = max(abs(a["loss"] - b["loss"]) for a, b in zip(mine, ref))
peak = max(r["memory"]["peak_bytes"] for r in mine)
timed = mine[int(warmup):] or mine
mfu = f"{sum(r['mfu'] for r in timed) / len(timed):6.3f}" if "mfu" in timed[0] else f"{'-':>6}"
print(f"{label:<14} {selection:<16} {used:<60.60} {tps(mine):9.0f} {tps(mine) / tps(ref):6.3f} {mfu} "
      f"{mine[-1]['loss']:9.5f} {diff:9.2e} {peak / 2**20:9.0f}", flush=True)
PY
}

train() {  # selection plan.json -> out dir
  rm -rf "$work/$1"
  TAILOR_CUDA_KERNELS=$1 "$bin/tailor-runner" --plan "$2" --out "$work/$1" --quiet --memory-limit 0 \
    --cache-dir "$work/cache"
}

echo "== training: $steps steps of 2 x $seq tokens, bf16; ratio = tokens/s against TAILOR_CUDA_KERNELS=none"
printf '%-14s %-16s %-60s %9s %6s %6s %9s %9s %9s\n' case selection cuda_kernels tokens/s ratio mfu loss max_dloss \
  peak_MiB
for c in "${cases[@]}"; do
  family=${c%%:*} adapter=${c#*:}
  spec "$family" "$adapter"
  "$bin/tailor" plan --output json "$work/job.yaml" > "$work/plan.json"
  train none "$work/plan.json"
  report "$c" none "$work/none" "$work/none"
  for k in $(kernels_of "$family" "$adapter") all; do
    train "$k" "$work/plan.json"
    report "$c" "$k" "$work/$k" "$work/none"
  done
done
