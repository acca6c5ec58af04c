#!/usr/bin/env bash
# Full fine-tune vs LoRA vs QLoRA with tailor-runner on one model, same data,
# same steps, run side by side: step time, peak memory measured by the
# runner's tracking allocator, and the planner's estimate of that peak.
#   bench/adapters.sh [BUILD_DIR]     STEPS=10 THREADS=2 PRECISION=bf16
set -euo pipefail
build=${1:-build}
steps=${STEPS:-10}
threads=${THREADS:-$(nproc)}
precision=${PRECISION:-bf16}
warmup=2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE

# Documents of 300 random ids (above the byte range), EOS-separated (257).
head -c 2000000 /dev/urandom | od -An -tu2 -w2 -v | awk 'BEGIN { n = 0 }
  { printf "%d\n", 260 + $1 % 7800; if (++n % 300 == 0) print 257 }' > "$work/ids.txt"
perl -ne 'print pack("l<", $_)' "$work/ids.txt" > "$work/tokens.bin"

printf '%-6s %12s %10s %14s %14s %8s\n' mode step_s ratio peak_MiB estimate_MiB meas/est
base=""
for mode in full lora qlora; do
  adapter=none; [[ $mode == lora ]] && adapter=lora; [[ $mode == qlora ]] && adapter=qlora
  lora=""; [[ $adapter != none ]] && lora=", lora: {r: 16, alpha: 32, dropout: 0.0}"
  cat > "$work/job.yaml" <<YAML
apiVersion: tailor/v1
kind: TrainingJob
name: bench-$mode
model:
  arch: {family: llama, layers: 8, hidden: 512, intermediate: 1376, heads: 8, kv_heads: 8, vocab: 8192, max_seq_len: 256}
data: {train: $work/tokens.bin, format: tokens, seq_len: 256, packing: true}
training: {global_batch_size: 8, micro_batch_size: 8, max_steps: $((steps + warmup)), lr: 1e-4, scheduler: constant}
strategy: {precision: $precision, gradient_checkpointing: false, adapter: $adapter, optimizer: adamw$lora}
resources: {gpus: 0, host_memory: 8GiB}
YAML
  "$root/$build/bin/tailor" plan --output json "$work/job.yaml" > "$work/plan.json"
  rm -rf "$work/out"
  "$root/$build/bin/tailor-runner" --plan "$work/plan.json" --out "$work/out" --quiet --memory-limit 0 \
      --threads "$threads" --cache-dir "$work/cache"
  step_s=$(tail -n +$((warmup + 1)) "$work/out/metrics.jsonl" | grep -o '"step_seconds":[0-9.e+-]*' | cut -d: -f2 |
           awk '{ s += $1; n++ } END { printf "%.4f", s / n }')
  peak=$(grep -o '"peak_bytes":[0-9]*' "$work/out/metrics.jsonl" | cut -d: -f2 | sort -n | tail -1)
  est=$(tr -d ' \n' < "$work/plan.json" | grep -o '"per_gpu":{[^}]*}' | grep -o '"total":[0-9]*' | cut -d: -f2)
  [[ -z $base ]] && base=$step_s
  printf '%-6s %12s %9sx %14.1f %14.1f %8.3f\n' "$mode" "$step_s" "$(echo "scale=2; $step_s / $base" | bc -l)" \
      "$(echo "$peak / 1048576" | bc -l)" "$(echo "$est / 1048576" | bc -l)" "$(echo "$peak / $est" | bc -l)"
done
