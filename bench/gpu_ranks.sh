#!/usr/bin/env bash
# On a machine with one CUDA GPU: tailor-runner's ranks, ZeRO stages and
# offload on the GPU, two ranks sharing it (each rank trains on cuda:0; the
# plan is made for two declared H100s). Per configuration: tokens/s, the
# final loss (the same global batch at every stage, so the losses should
# agree), the largest rank's CUDA allocator peak against the plan's
# per-GPU estimate less the CUDA context (852 MiB, the planner's
# gpu_context_overhead: outside the allocator; cuBLAS' workspaces are in it),
# and the host ledger against the plan's host estimate under offload. Then
# a resume: a sharded 2-rank ZeRO-3 checkpoint continued by one rank.
# NCCL takes one rank per GPU, so the two ranks talk over tailor-runner's
# TCP ring; one rank under ZeRO-3 + offload (a world of one) runs its
# gathers and reduce-scatters through NCCL, and once more over the ring
# (TAILOR_COLLECTIVES=ring) to compare.
#   bench/gpu_ranks.sh [BIN_DIR]   STEPS=8 PYTHON=python3 ONE_RANK=1 (only the one-rank rows)
#     MODEL="layers hidden heads kv_heads intermediate vocab seq micro" (default: a 0.16B Llama, 1024 tokens)
set -euo pipefail
bin=${1:-build/bin}
steps=${STEPS:-8}
python=${PYTHON:-python3}
read -r layers hidden heads kv intermediate vocab seq micro <<<"${MODEL:-8 1024 16 8 2816 32000 1024 4}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$python" - "$work/tokens.bin" "$vocab" <<'PY'
import random, struct, sys
random.seed(0)
vocab = int(sys.argv[2])
with open(sys.argv[1], "wb") as f:
    for _ in range(200):  # documents of 2000 random ids, EOS-separated (2)
        f.write(struct.pack("<2000i", *[random.randrange(3, vocab) for _ in range(2000)]))
        f.write(struct.pack("<i", 2))
PY

spec() {  # ranks zero offload max_steps -> job.yaml
  cat > "$work/job.yaml" <<YAML
apiVersion: tailor/v1
kind: TrainingJob
name: gpu-ranks
model:
  arch: {family: llama, layers: $layers, hidden: $hidden, intermediate: $intermediate, heads: $heads, kv_heads: $kv, vocab: $vocab, max_seq_len: $seq}
data: {train: $work/tokens.bin, format: tokens, seq_len: $seq, packing: true}
training: {global_batch_size: $((2 * micro)), micro_batch_size: $micro, max_steps: $4, lr: 3e-4, scheduler: constant, grad_clip: 1.0, seed: 7}
strategy: {precision: bf16, gradient_checkpointing: false, adapter: none, optimizer: adamw, zero_stage: $2, offload: $3}
resources: {gpus: 2, gpu_model: H100-80GB, ranks: $1, host_memory: 64GiB}
checkpoint: {every_steps: 4, keep: 2}
YAML
}

report() {  # label plan.json out -> one row
  "$python" - "$1" "$2" "$3/metrics.jsonl" <<'PY'
import json, sys
label, plan_path, metrics = sys.argv[1:4]
plan = json.load(open(plan_path))
rows = [json.loads(l) for l in open(metrics)]
timed = rows[2:] or rows
tps = len(timed) / sum(1 / r["tokens_per_second"] for r in timed)
per = plan["memory"]["per_gpu"]
peak = max(r["memory"]["peak_bytes"] for r in rows)
if "ranks" in rows[-1]:
    peak = max(max(x["peak_bytes"] for x in r["ranks"]) for r in rows if "ranks" in r)
est = per["total"] - 852 * 2**20  # less the CUDA context
# The host ledger is rank 0's; the plan's host figure is every rank's.
ranks = len(rows[-1].get("ranks", [])) or 1
host = rows[-1].get("host", {}).get("bytes")
host = host * ranks if host is not None else None
host_plan = plan["memory"]["host_total"]
via = "-"
for line in open(metrics.replace("metrics.jsonl", "events.jsonl")):
    event = json.loads(line)
    if event.get("event") == "start":
        via = event.get("collectives", "-").split(" ")[0]
host_txt = f"{host / 2**20:9.1f} / {host_plan / 2**20:9.1f}" if host is not None else f"{'-':>21}"
print(f"{label:<26} {tps:10.0f} {rows[-1]['loss']:9.5f} {peak / 2**20:10.1f} {est / 2**20:10.1f} "
      f"{peak / est:7.3f} {host_txt} {via:>6}")
PY
}

run() {  # label ranks zero offload
  spec "$2" "$3" "$4" "$steps"
  "$bin/tailor" plan --output json "$work/job.yaml" > "$work/plan.json"
  rm -rf "$work/out"
  "$bin/tailor-runner" --plan "$work/plan.json" --out "$work/out" --quiet --memory-limit 0 --cache-dir "$work/cache"
  report "$1" "$work/plan.json" "$work/out"
}

"$python" -c 'import torch; print("torch", torch.__version__, "on", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "the CPU")'
echo "peak: the largest rank's CUDA allocator peak; plan: per-GPU estimate less the CUDA context"
printf '%-26s %10s %9s %10s %10s %7s %21s %6s\n' config tokens/s loss peak_MiB plan_MiB ratio host_MiB/plan via
run "1 rank" 1 0 none
if [[ ${ONE_RANK:-0} = 1 ]]; then
  run "1 rank, ZeRO-3 + offload" 1 3 optimizer_and_params
  exit 0
fi
run "2 ranks, stage 0" 2 0 none
run "2 ranks, ZeRO-1" 2 1 none
run "2 ranks, ZeRO-2" 2 2 none
run "2 ranks, ZeRO-3" 2 3 none
run "2 ranks, ZeRO-2 + offload" 2 2 optimizer
run "2 ranks, ZeRO-3 + offload" 2 3 optimizer_and_params
run "1 rank, ZeRO-3 + offload" 1 3 optimizer_and_params
TAILOR_COLLECTIVES=ring run "1 rank, ZeRO-3 + offload" 1 3 optimizer_and_params

# A sharded checkpoint written by 2 ranks on the GPU, resumed by one.
spec 2 3 none "$steps"
"$bin/tailor" plan --output json "$work/job.yaml" > "$work/plan.json"
rm -rf "$work/out"
"$bin/tailor-runner" --plan "$work/plan.json" --out "$work/out" --quiet --memory-limit 0 --cache-dir "$work/cache"
ls "$work/out/checkpoints"
spec 1 0 none $((steps + 4))
"$bin/tailor" plan --output json "$work/job.yaml" > "$work/plan.json"
"$bin/tailor-runner" --plan "$work/plan.json" --out "$work/out" --resume --quiet --memory-limit 0 --cache-dir "$work/cache"
grep -o '"event":"resume"[^}]*' "$work/out/events.jsonl" || grep resume "$work/out/events.jsonl"
report "resumed on 1 rank" "$work/plan.json" "$work/out"
