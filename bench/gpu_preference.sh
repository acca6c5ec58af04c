#!/usr/bin/env bash
# On a machine with a CUDA GPU: preference training's memory, the planner's
# estimate against the CUDA allocator's peak, for each place the reference
# model can go (the base with the adapters off under LoRA and QLoRA, a
# separate frozen copy beside a full fine-tune, the pairs scored before
# training: precomputed) and for the methods without one (ORPO, SimPO, a
# reward model: CASES="reward none -"); tokens/s, the final loss and margin
# beside them, and for precomputed the pass's pairs scored and seconds (a
# second such case on the same weights reads the cache: 0 scored). One run
# per case, one after the other in one invocation, sharing a cache folder.
#
# The model is Llama 3.2 1B's shape (16 layers, hidden 2048, GQA 32/8,
# vocabulary 128256, tied head), randomly initialised, with the byte-level
# tokenizer; bf16, checkpointing every layer; pairs whose prompt and both
# completions fill the sequence (every row is cut at seq_len), micro-batch
# MICRO pairs x 2 accumulation. The plan is `tailor plan`'s for the detected
# GPU with the method, adapter and reference pinned.
#   bench/gpu_preference.sh [BIN_DIR]    STEPS=5 SEQ=1024 MICRO=2 PYTHON=python3
#     CASES="method adapter reference ..." (default below)
#     MODEL="layers hidden heads kv_heads intermediate vocab" (default: Llama 3.2 1B's)
#     CONTEXT_MIB=852 (the CUDA context, outside the allocator; 0 on the CPU)
#     SAVE=DIR (each case's plan.json and metrics.jsonl copied there)
set -euo pipefail
bin=${1:-build/bin}
steps=${STEPS:-5}
seq=${SEQ:-1024}
micro=${MICRO:-2}
warmup=2
python=${PYTHON:-python3}
context=${CONTEXT_MIB:-852}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
read -r layers hidden heads kv intermediate vocab <<<"${MODEL:-16 2048 32 8 8192 128256}"
read -r -a cases <<<"${CASES:-dpo lora adapter_off dpo qlora adapter_off dpo none separate orpo lora - simpo none -}"

"$python" - "$work/pairs.jsonl" "$seq" <<'PY'
import json, random, sys
random.seed(0)
seq = int(sys.argv[2])
words = "the a needle thread coat wooden spool blue sharp warm mend patch seam cloth stitch button".split()
def text(n):  # n bytes of words
    out = []
    while sum(len(w) + 1 for w in out) < n:
        out.append(random.choice(words))
    return " ".join(out)
with open(sys.argv[1], "w") as f:
    for i in range(64):
        f.write(json.dumps({"prompt": f"Q{i}: {text(seq // 8)}?\n", "chosen": text(seq), "rejected": text(seq)}) + "\n")
PY

spec() {  # method adapter reference -> job.yaml
  local extra=""
  [[ $1 == dpo ]] && extra=", beta: 0.1"
  local strategy="precision: bf16, gradient_checkpointing: true, adapter: $2, optimizer: adamw, zero_stage: 0, offload: none"
  [[ $2 == none ]] || strategy+=", lora: {r: 16}"
  [[ $3 == - ]] || strategy+=", reference: $3"
  cat > "$work/job.yaml" <<YAML
apiVersion: tailor/v1
kind: TrainingJob
name: gpu-preference
model:
  arch: {family: llama, layers: $layers, hidden: $hidden, intermediate: $intermediate, heads: $heads, kv_heads: $kv, vocab: $vocab, max_seq_len: $seq, tie_embeddings: true}
data: {train: $work/pairs.jsonl, seq_len: $seq}
training: {method: $1$extra, global_batch_size: $((2 * micro)), micro_batch_size: $micro, max_steps: $steps, lr: 1e-5, scheduler: constant, grad_clip: 1.0, seed: 7}
strategy: {$strategy}
checkpoint: {every_steps: 0}
YAML
}

report() {  # label plan.json out -> one row
  "$python" - "$@" "$warmup" "$context" <<'PY'
import json, sys
label, plan_path, out, warmup, context = sys.argv[1:6]
plan = json.load(open(plan_path))
rows = [json.loads(l) for l in open(out + "/metrics.jsonl")]
timed = rows[int(warmup):] or rows
tps = len(timed) / sum(1 / r["tokens_per_second"] for r in timed)
ref = [json.loads(l) for l in open(out + "/events.jsonl") if '"reference"' in l]
ref = [e for e in ref if e["event"] == "reference"]
pass_text = f'{ref[0]["computed"]:>6} {ref[0]["seconds"]:7.1f}' if ref else f'{"-":>6} {"-":>7}'
peak = max(r["memory"]["peak_bytes"] for r in rows)
est = plan["memory"]["per_gpu"]["total"] - int(context) * 2**20
s = plan["strategy"]
mb = f'{s["micro_batch_size"]}x{s["gradient_accumulation_steps"]}'
print(f"{label:<24} {s['precision']:<6} {mb:<5} {tps:9.0f} {rows[-1]['loss']:8.4f} "
      f"{rows[-1].get('rewards/margins', rows[-1].get('margin', float('nan'))):8.4f} {peak / 2**20:9.0f} "
      f"{est / 2**20:9.0f} {peak / est:6.3f} {pass_text}",
      flush=True)
PY
}

"$python" -c 'import torch; print("torch", torch.__version__, "on", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "the CPU")'
echo "Llama $layers x $hidden, vocab $vocab; $seq tokens a row, pairs of rows; peak: the allocator's; plan: the per-GPU estimate less the CUDA context ($context MiB)"
printf '%-24s %-6s %-5s %9s %8s %8s %9s %9s %6s %6s %7s\n' case prec mb tokens/s loss margins peak_MiB plan_MiB ratio \
  scored pass_s
for ((i = 0; i < ${#cases[@]}; i += 3)); do
  method=${cases[i]} adapter=${cases[i + 1]} reference=${cases[i + 2]}
  spec "$method" "$adapter" "$reference"
  "$bin/tailor" plan --output json "$work/job.yaml" > "$work/plan.json"
  rm -rf "$work/out"
  "$bin/tailor-runner" --plan "$work/plan.json" --out "$work/out" --quiet --memory-limit 0 --cache-dir "$work/cache"
  report "$method $adapter $reference" "$work/plan.json" "$work/out"
  if [[ -n ${SAVE:-} ]]; then  # the plan and the metrics, for the components
    cp "$work/plan.json" "$SAVE/$method-$adapter.plan.json"
    cp "$work/out/metrics.jsonl" "$SAVE/$method-$adapter.metrics.jsonl"
  fi
done
