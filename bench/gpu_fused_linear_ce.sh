#!/usr/bin/env bash
# On a machine with a CUDA GPU: tailor-runner with the logits materialised
# against the output projection fused with the loss
# (runner/torch/linear_cross_entropy.h), same plan otherwise, one after the
# other in one invocation: tokens/s, the CUDA allocator's peak, the final
# loss, and the planner's estimate of each.
#
# The model is Llama 3.2 1B's shape (16 layers, hidden 2048, GQA 32/8,
# vocabulary 128256, tied head), randomly initialised; bf16, checkpointing
# every layer, micro-batch 1 x 2 accumulation, LoRA r16 or a full
# fine-tune. Documents are longer than the sequence, so no packing mask.
# The "logits" plan is the planner's for the detected GPU; the "fused" one
# its plan for a smaller declared GPU where the logits do not fit (column
# SMALL), so both estimates are the planner's own; where it did not choose
# the fused head there, the logits plan is edited to it and has no estimate.
#   bench/gpu_fused_linear_ce.sh [BIN_DIR]    STEPS=5 PYTHON=python3
#     CASES="seq adapter small_gpu ..." (default below)
#     MODEL="layers hidden heads kv_heads intermediate vocab" (default: Llama 3.2 1B's)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bin=${1:-build/bin}
steps=${STEPS:-5}
warmup=2
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
read -r layers hidden heads kv intermediate vocab <<<"${MODEL:-16 2048 32 8 8192 128256}"
read -r -a cases <<<"${CASES:-4096 lora 1x6GiB 16384 lora 1x12GiB 32768 lora 1x24GiB 4096 none 1x24GiB}"

bench_long_documents "$work/tokens.bin" "$vocab"

spec() {  # seq adapter -> job.yaml
  cat > "$work/job.yaml" <<YAML
apiVersion: tailor/v1
kind: TrainingJob
name: fused-linear-ce
model:
  arch: {family: llama, layers: $layers, hidden: $hidden, intermediate: $intermediate, heads: $heads, kv_heads: $kv, vocab: $vocab, max_seq_len: 32768, tie_embeddings: true}
data: {train: $work/tokens.bin, format: tokens, seq_len: $1, packing: true}
training: {global_batch_size: 2, micro_batch_size: 1, max_steps: $steps, lr: 1e-4, scheduler: constant, grad_clip: 1.0, seed: 7}
strategy: {precision: bf16, gradient_checkpointing: true, adapter: $2, optimizer: adamw, zero_stage: 0, offload: none$([[ $2 == none ]] || echo ", lora: {r: 16}")}
YAML
}

report() {  # label plan.json out estimated(0|1) -> one row
  "$python" - "$@" "$warmup" <<'PY'
import json, sys
label, plan_path, out, estimated, warmup = sys.argv[1:6]
plan = json.load(open(plan_path))
rows = [json.loads(l) for l in open(out + "/metrics.jsonl")]
timed = rows[int(warmup):] or rows
tps = len(timed) / sum(1 / r["tokens_per_second"] for r in timed)
peak = max(r["memory"]["peak_bytes"] for r in rows)
ce = plan["strategy"]["cross_entropy"]
if estimated == "1":
    est = plan["memory"]["per_gpu"]["total"] - 852 * 2**20  # less the CUDA context
    est_txt, ratio = f"{est / 2**20:10.0f}", f"{peak / est:7.3f}"
else:
    est_txt, ratio = f"{'-':>10}", f"{'-':>7}"
print(f"{label:<22} {ce:<13} {tps:10.0f} {rows[-1]['loss']:9.5f} {peak / 2**20:10.0f} {est_txt} {ratio}", flush=True)
PY
}

train() {  # plan.json -> out
  rm -rf "$work/out"
  "$bin/tailor-runner" --plan "$1" --out "$work/out" --quiet --memory-limit 0 --cache-dir "$work/cache"
}

"$python" -c 'import torch; print("torch", torch.__version__, "on", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "the CPU")'
echo "peak: the CUDA allocator's peak; plan: the planner's per-GPU estimate less the CUDA context (852 MiB)"
printf '%-22s %-13s %10s %9s %10s %10s %7s\n' case cross_entropy tokens/s loss peak_MiB plan_MiB ratio
for ((i = 0; i < ${#cases[@]}; i += 3)); do
  seq=${cases[i]} adapter=${cases[i + 1]} small=${cases[i + 2]}
  label="$seq tokens, $adapter"
  spec "$seq" "$adapter"
  "$bin/tailor" plan --output json "$work/job.yaml" > "$work/logits.json"
  train "$work/logits.json"
  report "$label" "$work/logits.json" "$work/out" 1
  estimated=1
  "$bin/tailor" plan --output json --gpus "$small" "$work/job.yaml" > "$work/fused.json" || true
  if ! grep -q '"cross_entropy": *"fused-linear"' "$work/fused.json"; then
    sed 's/"cross_entropy": *"logits"/"cross_entropy": "fused-linear"/' "$work/logits.json" > "$work/fused.json"
    estimated=0
  fi
  train "$work/fused.json"
  report "$label" "$work/fused.json" "$work/out" "$estimated"
done
