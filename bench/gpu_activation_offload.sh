#!/usr/bin/env bash
# On a machine with a CUDA GPU: tailor-runner with each checkpointed layer's
# input kept on the device against the same plan with those inputs offloaded
# to pinned host memory (runner/torch/activation_offload.h), one after the
# other in one invocation: tokens/s, the CUDA allocator's peak, the host
# ledger's peak (pinned bytes), the final loss, and the planner's estimate of
# each.
#
# The model is Llama 3.2 1B's shape (16 layers, hidden 2048, GQA 32/8,
# vocabulary 128256, tied head) unless MODEL says otherwise (Llama 3.1 8B:
# MODEL="32 4096 32 8 14336 128256" CASES="32768 qlora 65536 qlora"),
# randomly initialised; bf16, checkpointing every layer, micro-batch 1 x 2
# accumulation. Both plans are the planner's for the detected GPU with
# strategy.activation_offload pinned false, then true.
#   bench/gpu_activation_offload.sh [BIN_DIR]    STEPS=5 PYTHON=python3
#     CASES="seq adapter ..." (default below)
set -euo pipefail
bin=${1:-build/bin}
steps=${STEPS:-5}
warmup=2
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
read -r layers hidden heads kv intermediate vocab <<<"${MODEL:-16 2048 32 8 8192 128256}"
read -r -a cases <<<"${CASES:-8192 lora 16384 lora 32768 lora 4096 none}"
tie=$([[ $layers == 16 ]] && echo true || echo false)

"$python" - "$work/tokens.bin" "$vocab" <<'PY'
import random, struct, sys
random.seed(0)
vocab = int(sys.argv[2])
with open(sys.argv[1], "wb") as f:
    for _ in range(8):  # documents of 70000 random ids, EOS-separated (2)
        f.write(struct.pack("<70000i", *[random.randrange(3, vocab) for _ in range(70000)]))
        f.write(struct.pack("<i", 2))
PY

spec() {  # seq adapter offload -> job.yaml
  cat > "$work/job.yaml" <<YAML
apiVersion: tailor/v1
kind: TrainingJob
name: activation-offload
model:
  arch: {family: llama, layers: $layers, hidden: $hidden, intermediate: $intermediate, heads: $heads, kv_heads: $kv, vocab: $vocab, max_seq_len: 65536, tie_embeddings: $tie}
data: {train: $work/tokens.bin, format: tokens, seq_len: $1, packing: true}
training: {global_batch_size: 2, micro_batch_size: 1, max_steps: $steps, lr: 1e-4, scheduler: constant, grad_clip: 1.0, seed: 7}
strategy: {precision: bf16, gradient_checkpointing: true, adapter: $2, optimizer: adamw, zero_stage: 0, offload: none, activation_offload: $3$([[ $2 == none ]] || echo ", lora: {r: 16}")}
YAML
}

report() {  # label plan.json out -> one row
  "$python" - "$@" "$warmup" <<'PY'
import json, sys
label, plan_path, out, warmup = sys.argv[1:5]
plan = json.load(open(plan_path))
rows = [json.loads(l) for l in open(out + "/metrics.jsonl")]
timed = rows[int(warmup):] or rows
tps = len(timed) / sum(1 / r["tokens_per_second"] for r in timed)
peak = max(r["memory"]["peak_bytes"] for r in rows)
host = max(r.get("host", {}).get("peak_bytes", 0) for r in rows)
est = plan["memory"]["per_gpu"]["total"] - 852 * 2**20  # less the CUDA context
offload = "offloaded" if plan["strategy"].get("activation_offload") else "kept"
print(f"{label:<20} {offload:<10} {tps:10.0f} {rows[-1]['loss']:9.5f} {peak / 2**20:10.0f} {est / 2**20:10.0f} "
      f"{peak / est:7.3f} {host / 2**20:9.0f} {plan['memory'].get('host_total', 0) / 2**20:9.0f}", flush=True)
PY
}

train() {  # plan.json -> out
  rm -rf "$work/out"
  "$bin/tailor-runner" --plan "$1" --out "$work/out" --quiet --memory-limit 0 --cache-dir "$work/cache"
}

"$python" -c 'import torch; print("torch", torch.__version__, "on", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "the CPU")'
echo "peak: the CUDA allocator's peak; plan: the planner's per-GPU estimate less the CUDA context (852 MiB);"
echo "host: the host ledger's peak (pinned activations) and the plan's host figure"
printf '%-20s %-10s %10s %9s %10s %10s %7s %9s %9s\n' case inputs tokens/s loss peak_MiB plan_MiB ratio host_MiB plan_host
for ((i = 0; i < ${#cases[@]}; i += 2)); do
  seq=${cases[i]} adapter=${cases[i + 1]}
  for offload in false true; do
    spec "$seq" "$adapter" "$offload"
    "$bin/tailor" plan --output json --no-calibration "$work/job.yaml" > "$work/plan.json" || true
    train "$work/plan.json"
    report "$seq tokens, $adapter" "$work/plan.json" "$work/out"
  done
done
