#!/usr/bin/env bash
# tailor-runner against ../shared/bench/anchor_pytorch_llama.py (Python
# PyTorch on the same LibTorch), same Llama config, same settings, same
# thread count, run side by side; prints tokens/s, peak RSS and the ratios.
# Needs `scripts/setup --bench` (Debian's python3-torch).
#   bench/runner_vs_anchor.sh [BUILD_DIR]     STEPS=20 THREADS=2 PRECISIONS="bf16 fp32"
set -euo pipefail
build=${1:-build}
steps=${STEPS:-20}
threads=${THREADS:-$(nproc)}
warmup=3
root=$(cd "$(dirname "$0")/.." && pwd)
anchor="$root/../shared/bench/anchor_pytorch_llama.py"
[[ -f $anchor ]] || { echo "bench: $anchor not found" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE  # the same environment for both (FIELD-NOTES.md)

# The anchor's model: 4 layers, hidden 256, 4 heads, MLP 688, vocab 4096, seq 256, batch 8.
/usr/bin/python3 - "$work/tokens.bin" <<'PY'
import random, struct, sys
random.seed(0)
with open(sys.argv[1], "wb") as f:
    for _ in range(400):  # documents of 300 random ids, EOS-separated (257)
        f.write(struct.pack("<300i", *[random.randrange(260, 4096) for _ in range(300)]))
        f.write(struct.pack("<i", 257))
PY

printf '%-8s %-6s %14s %14s\n' impl prec tokens/s peak_rss_MiB
for precision in ${PRECISIONS:-bf16 fp32}; do
  a=$(/usr/bin/python3 "$anchor" --layers 4 --hidden 256 --heads 4 --kv-heads 4 --intermediate 688 --vocab 4096 \
      --seq 256 --batch 8 --precision "$precision" --steps "$steps" --warmup "$warmup" --threads "$threads")
  a_tps=$(echo "$a" | grep -o '"tokens_per_second": [0-9.]*' | cut -d' ' -f2)
  a_rss=$(echo "$a" | grep -o '"peak_rss_bytes": [0-9]*' | cut -d' ' -f2)

  cat > "$work/job.yaml" <<YAML
apiVersion: tailor/v1
kind: TrainingJob
name: bench
model:
  arch: {family: llama, layers: 4, hidden: 256, intermediate: 688, heads: 4, kv_heads: 4, vocab: 4096, max_seq_len: 256}
data: {train: $work/tokens.bin, format: tokens, seq_len: 256, packing: true}
training: {global_batch_size: 8, micro_batch_size: 8, max_steps: $((steps + warmup)), lr: 3e-4, scheduler: constant, grad_clip: 0}
strategy: {precision: $precision, gradient_checkpointing: false, adapter: none, optimizer: adamw}
resources: {gpus: 0, host_memory: 8GiB}
YAML
  "$root/$build/bin/tailor" plan --output json "$work/job.yaml" > "$work/plan.json"
  rm -rf "$work/out"
  /usr/bin/time -f '%M' -o "$work/rss" "$root/$build/bin/tailor-runner" --plan "$work/plan.json" --out "$work/out" \
      --quiet --memory-limit 0 --threads "$threads"
  r_tps=$(tail -n +$((warmup + 1)) "$work/out/metrics.jsonl" | grep -o '"tokens_per_second":[0-9.e+]*' | cut -d: -f2 |
          awk '{ s += 1 / $1; n++ } END { printf "%.1f", n / s }')  # tokens-weighted mean of equal-size steps
  r_rss=$(( $(cat "$work/rss") * 1024 ))

  printf '%-8s %-6s %14.1f %14.1f\n' anchor "$precision" "$a_tps" "$(echo "$a_rss / 1048576" | bc -l)"
  printf '%-8s %-6s %14.1f %14.1f\n' runner "$precision" "$r_tps" "$(echo "$r_rss / 1048576" | bc -l)"
  printf '%-8s %-6s %14s %14s\n' ratio "$precision" "$(echo "scale=2; $r_tps / $a_tps" | bc -l)x" \
      "$(echo "scale=2; $r_rss / $a_rss" | bc -l)x"
done
