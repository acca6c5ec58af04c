#!/usr/bin/env bash
# DPO (training.method: dpo): one optimizer step of tailor-runner against
# TRL's DPOTrainer (bench/dpo_trl.py) on the same torch (.venv), the same
# Llama saved by transformers (the anchor's shape: 4 layers, hidden 256, its
# BPE tokenizer's 4096 entries), the same 64 preference pairs (rows of
# 150-250 tokens), the same threads, run one after another in one
# invocation: fp32, sigmoid loss, beta 0.1, 8 pairs a step, AdamW lr 1e-5
# constant, no gradient checkpointing; a full fine-tune (the reference a
# frozen copy) and LoRA r16 on the seven projections (the reference the base
# with the adapters off). Prints the mean step time after 2 warm-up steps,
# the input cells of a step (16 rows padded to the batch's longest, as each
# implementation batched them), peak RSS, and TRL's step time over Tailor's.
# METHODS="dpo orpo simpo kto" adds ORPO (lambda 0.1) against TRL's
# ORPOTrainer and SimPO (beta 2.0, gamma 1.0) against its CPOTrainer
# (loss_type simpo, cpo_alpha 0), neither with a reference model, and KTO
# (loss_type kto, beta 0.1) against its KTOTrainer, with DPO's references.
#   bench/dpo_vs_trl.sh [BUILD_DIR]   STEPS=8 THREADS=$(nproc) METHODS=dpo
set -euo pipefail
build=${1:-build}
steps=${STEPS:-8}
threads=${THREADS:-$(nproc)}
methods=${METHODS:-dpo}
warmup=2
source "$(dirname "$0")/lib.sh"
bench_init

"$python" "$root/bench/dpo_trl.py" make "$work" 2> "$work/make.log" ||
  { cat "$work/make.log" >&2; exit 1; }
grep '^dpo_trl.py: vocabulary' "$work/make.log" >&2 || true

# Sets step_s, tokens (mean input cells a step) and rss (bytes): tailor MODE METHOD.
tailor() {
  local training="method: dpo, beta: 0.1"
  [[ $2 == orpo ]] && training="method: orpo, lambda: 0.1"
  [[ $2 == simpo ]] && training="method: simpo, beta: 2.0, gamma: 1.0"
  [[ $2 == kto ]] && training="method: kto, loss_type: kto, beta: 0.1"
  # The full fine-tune pins the frozen copy: TRL's DPOTrainer forwards its
  # reference every step too (precomputed would move that before the steps).
  local adapter=none extra=""
  [[ $2 == dpo || $2 == kto ]] && extra=", reference: separate"
  if [[ $1 == lora ]]; then
    adapter=lora
    extra=", lora: {r: 16, alpha: 32, dropout: 0}"
    [[ $2 == dpo || $2 == kto ]] && extra+=", reference: adapter_off"
  fi
  cat > "$work/job.yaml" <<YAML
apiVersion: tailor/v1
kind: TrainingJob
name: bench-$2-$1
model: {path: $work/base}
data: {train: $work/pairs.jsonl, seq_len: 512}
training: {$training, global_batch_size: 8, micro_batch_size: 8, max_steps: $((steps + warmup)), lr: 1e-5, scheduler: constant}
strategy: {precision: fp32, gradient_checkpointing: false, adapter: $adapter, optimizer: adamw$extra}
resources: {gpus: 0, host_memory: 8GiB}
YAML
  "$root/$build/bin/tailor" plan --output json "$work/job.yaml" > "$work/plan.json"
  rm -rf "$work/out"
  if ! /usr/bin/time -f '%M' -o "$work/rss" "$root/$build/bin/tailor-runner" --plan "$work/plan.json" \
      --out "$work/out" --quiet --memory-limit 0 --threads "$threads" --cache-dir "$work/cache" 2> "$work/tailor.log"; then
    echo "bench: tailor-runner failed ($1, $2):" >&2
    cat "$work/tailor.log" >&2
    tail -n 5 "$work/out/events.jsonl" >&2 2>/dev/null || true
    exit 1
  fi
  read -r step_s tokens < <(grep '"step_seconds"' "$work/out/metrics.jsonl" | tail -n +$((warmup + 1)) |
    awk '{ match($0, /"step_seconds":[0-9.e+-]*/); s += substr($0, RSTART + 15, RLENGTH - 15)
           match($0, /"tokens":[0-9]*/); t += substr($0, RSTART + 9, RLENGTH - 9); n++ }
         END { printf "%.4f %.1f\n", s / n, t / n }')
  rss=$(( $(tail -n 1 "$work/rss") * 1024 ))
}

# Sets step_s, tokens, rss and versions: trl MODE METHOD.
trl() {
  local out
  if ! out=$(/usr/bin/time -f '%M' -o "$work/rss" "$python" "$root/bench/dpo_trl.py" run "$work" "$1" "$steps" \
      "$threads" "$2" 2> "$work/trl.log"); then
    echo "bench: dpo_trl.py failed ($1, $2):" >&2
    tail -n 30 "$work/trl.log" >&2
    exit 1
  fi
  step_s=$(field "$out" step_seconds)
  tokens=$(field "$out" tokens_per_step)
  rss=$(( $(tail -n 1 "$work/rss") * 1024 ))
  versions=$(grep -o '"torch": "[^"]*", "trl": "[^"]*"' <<<"$out" | tr -d '"')
}

row() {  # method mode impl step_s tokens rss_bytes
  printf '%-6s %-5s %-7s %9.3f %12.0f %10.0f %13.1f\n' "$1" "$2" "$3" "$4" "$5" "$(echo "$5 / $4" | bc -l)" \
      "$(echo "$6 / 1048576" | bc -l)"
}

printf '%-6s %-5s %-7s %9s %12s %10s %13s\n' method mode impl step_s tokens/step tokens/s peak_RSS_MiB
ratios=()
for method in $methods; do
  case $method in dpo|orpo|simpo|kto) ;; *) echo "bench: METHODS: $method is not dpo, orpo, simpo or kto" >&2; exit 2;; esac
  for mode in full lora; do
    tailor "$mode" "$method"
    t_step=$step_s t_rss=$rss
    row "$method" "$mode" tailor "$step_s" "$tokens" "$rss"
    trl "$mode" "$method"
    row "$method" "$mode" trl "$step_s" "$tokens" "$rss"
    ratios+=("$(printf '%-6s %-5s speed-up %.2fx (trl step_s / tailor step_s), peak RSS %.2fx (tailor / trl)' \
        "$method" "$mode" "$(echo "$step_s / $t_step" | bc -l)" "$(echo "$t_rss / $rss" | bc -l)")")
  done
done
printf '%s\n' "${ratios[@]}"
echo "# $versions; $threads threads; $steps steps after $warmup warm-up; ${SECONDS}s in all"
