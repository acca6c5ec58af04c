#!/usr/bin/env bash
# tailor-runner against what a user would otherwise run, on the same torch
# (.venv), the same Llama, data shape, precision, batch, steps and threads,
# run one after another in one invocation; prints tokens/s, peak RSS and the
# runner's ratios to each:
#   anchor      ../shared/bench/anchor_pytorch_llama.py (a plain PyTorch loop)
#   hf-trainer  bench/hf_trainer_llama.py (transformers' Trainer; PEFT for LoRA)
#   runner      tailor-runner
# Full fine-tunes in each precision, then LoRA r16 on all seven projections
# in bf16 (runner vs Trainer + PEFT; the anchor has no LoRA).
#   bench/runner_vs_python.sh [BUILD_DIR]   STEPS=20 THREADS=$(nproc) PRECISIONS="bf16 fp32" SEQ=256 LORA=1
set -euo pipefail
build=${1:-build}
steps=${STEPS:-20}
threads=${THREADS:-$(nproc)}
seq=${SEQ:-256}
warmup=3
source "$(dirname "$0")/lib.sh"
bench_init

# The anchor's model: 4 layers, hidden 256, 4 heads, MLP 688, vocab 4096, batch 8.
model=(--layers 4 --hidden 256 --heads 4 --kv-heads 4 --intermediate 688 --vocab 4096 --seq "$seq" --batch 8
       --steps "$steps" --warmup "$warmup" --threads "$threads")
bench_random_tokens "$work/tokens.bin"

row() {  # impl mode precision tokens/s rss_bytes
  printf '%-11s %-5s %-5s %12.1f %12.1f\n' "$1" "$2" "$3" "$4" "$(echo "$5 / 1048576" | bc -l)"
}
ratio() { printf '%-11s %-5s %-5s %11.2fx %11.2fx\n' "$1" "$2" "$3" "$(echo "$4 / $5" | bc -l)" "$(echo "$6 / $7" | bc -l)"; }

runner() {  # precision lora_rank -> "tokens/s rss_bytes"
  local lora="" adapter=none
  if (($2 > 0)); then
    adapter=lora
    lora=", lora: {r: $2, alpha: $(($2 * 2)), dropout: 0.0}"
  fi
  { bench_anchor_job "$seq"; cat <<YAML; } > "$work/job.yaml"
training: {global_batch_size: 8, micro_batch_size: 8, max_steps: $((steps + warmup)), lr: 3e-4, scheduler: constant, grad_clip: 0}
strategy: {precision: $1, gradient_checkpointing: false, adapter: $adapter, optimizer: adamw$lora}
resources: {gpus: 0, host_memory: 8GiB}
YAML
  "$root/$build/bin/tailor" plan --output json "$work/job.yaml" > "$work/plan.json"
  rm -rf "$work/out"
  /usr/bin/time -f '%M' -o "$work/rss" "$root/$build/bin/tailor-runner" --plan "$work/plan.json" --out "$work/out" \
      --quiet --memory-limit 0 --threads "$threads" --cache-dir "$work/cache"
  # Tokens-weighted mean over the steps after warm-up (all steps are equal-size).
  local tps
  tps=$(tail -n +$((warmup + 1)) "$work/out/metrics.jsonl" | grep -o '"tokens_per_second":[0-9.e+]*' | cut -d: -f2 |
        awk '{ s += 1 / $1; n++ } END { printf "%.1f", n / s }')
  echo "$tps $(( $(cat "$work/rss") * 1024 ))"
}

printf '%-11s %-5s %-5s %12s %12s\n' impl mode prec tokens/s peak_rss_MiB
for precision in ${PRECISIONS:-bf16 fp32}; do
  a=$("$python" "$anchor" "${model[@]}" --precision "$precision")
  h=$("$python" "$root/bench/hf_trainer_llama.py" "${model[@]}" --precision "$precision")
  read -r r_tps r_rss < <(runner "$precision" 0)
  row anchor full "$precision" "$(field "$a" tokens_per_second)" "$(field "$a" peak_rss_bytes)"
  row hf-trainer full "$precision" "$(field "$h" tokens_per_second)" "$(field "$h" peak_rss_bytes)"
  row runner full "$precision" "$r_tps" "$r_rss"
  ratio "vs anchor" full "$precision" "$r_tps" "$(field "$a" tokens_per_second)" "$r_rss" "$(field "$a" peak_rss_bytes)"
  ratio "vs trainer" full "$precision" "$r_tps" "$(field "$h" tokens_per_second)" "$r_rss" "$(field "$h" peak_rss_bytes)"
done
if [[ ${LORA:-1} == 1 ]]; then
  h=$("$python" "$root/bench/hf_trainer_llama.py" "${model[@]}" --precision bf16 --lora-rank 16)
  read -r r_tps r_rss < <(runner bf16 16)
  row hf-peft lora bf16 "$(field "$h" tokens_per_second)" "$(field "$h" peak_rss_bytes)"
  row runner lora bf16 "$r_tps" "$r_rss"
  ratio "vs peft" lora bf16 "$r_tps" "$(field "$h" tokens_per_second)" "$r_rss" "$(field "$h" peak_rss_bytes)"
fi
