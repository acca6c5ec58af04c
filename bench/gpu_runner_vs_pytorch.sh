#!/usr/bin/env bash
# On a machine with a CUDA GPU: tailor-runner against a plain PyTorch loop
# (bench/pytorch_llama_cuda.py over the anchor's model, materialised attention
# and SDPA) on the same torch, Llama, tokens, precision, batch and steps, run
# one after another in one invocation. The runner trains the plan that
# `tailor plan` makes for the detected GPU (NVML), with the spec pinning the
# baseline's choices (no checkpointing, no adapter, AdamW, one micro-batch).
# Prints tokens/s, the CUDA allocator's peak and model FLOPs utilisation
# (against the catalog's peak for the GPU), and the runner's ratios.
#   bench/gpu_runner_vs_pytorch.sh [BUILD_DIR]
#     STEPS=20 PRECISIONS="bf16 fp32" PYTHON=python3 ANCHOR=../shared/bench/anchor_pytorch_llama.py
#     MODEL="layers hidden heads kv_heads intermediate vocab seq batch" (default: a 0.88B Llama, 8 x 1024 tokens)
set -euo pipefail
build=${1:-build}
steps=${STEPS:-20}
warmup=3
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
anchor=${ANCHOR:-$root/../shared/bench/anchor_pytorch_llama.py}
[[ -f $anchor ]] || { echo "bench: $anchor not found (ANCHOR=)" >&2; exit 1; }
read -r layers hidden heads kv intermediate vocab seq batch <<<"${MODEL:-16 2048 16 8 5632 32000 1024 8}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

model=(--layers "$layers" --hidden "$hidden" --heads "$heads" --kv-heads "$kv" --intermediate "$intermediate"
       --vocab "$vocab" --seq "$seq" --batch "$batch" --steps "$steps" --warmup "$warmup")
"$python" - "$work/tokens.bin" "$vocab" <<'PY'
import random, struct, sys
random.seed(0)
vocab = int(sys.argv[2])
with open(sys.argv[1], "wb") as f:
    for _ in range(400):  # documents of 2000 random ids, EOS-separated (2)
        f.write(struct.pack("<2000i", *[random.randrange(3, vocab) for _ in range(2000)]))
        f.write(struct.pack("<i", 2))
PY

field() { grep -o "\"$2\": \"\?[^,}\"]*" <<<"$1" | head -1 | sed 's/.*: "\?//'; }
# MFU: tokens/s x the plan's model FLOPs per token / the GPU's dense peak
# (the runner's start event); the same model, so the same factor for every row.
row() {
  awk -v a="$1" -v p="$2" -v t="$3" -v m="$4" -v f="$5" -v k="$6" 'BEGIN {
    mfu = (f > 0 && k > 0) ? sprintf("%6.3f", t * f / (k * 1e12)) : sprintf("%6s", "-")
    printf "%-16s %-5s %12.1f %12.1f %s\n", a, p, t, m / 1048576, mfu }'
}
ratio() { awk -v a="$1" -v p="$2" -v t="$3" -v u="$4" -v m="$5" -v n="$6" 'BEGIN { printf "%-16s %-5s %11.2fx %11.2fx\n", a, p, t / u, m / n }'; }

runner() {  # precision -> "tokens/s peak_bytes attention model_flops_per_token peak_tflops"
  cat > "$work/job.yaml" <<YAML
apiVersion: tailor/v1
kind: TrainingJob
name: gpu-bench
model:
  arch: {family: llama, layers: $layers, hidden: $hidden, intermediate: $intermediate, heads: $heads, kv_heads: $kv, vocab: $vocab, max_seq_len: $seq}
data: {train: $work/tokens.bin, format: tokens, seq_len: $seq, packing: true}
training: {global_batch_size: $batch, micro_batch_size: $batch, max_steps: $((steps + warmup)), lr: 3e-4, scheduler: constant, grad_clip: 0}
strategy: {precision: $1, gradient_checkpointing: false, adapter: none, optimizer: adamw}
YAML
  "$root/$build/bin/tailor" plan --output json "$work/job.yaml" > "$work/plan-$1.json"
  rm -rf "$work/out"
  "$root/$build/bin/tailor-runner" --plan "$work/plan-$1.json" --out "$work/out" --quiet --memory-limit 0 \
      --cache-dir "$work/cache" >&2
  local tps peak attention flops tflops
  tps=$(tail -n +$((warmup + 1)) "$work/out/metrics.jsonl" | grep -o '"tokens_per_second":[0-9.e+]*' | cut -d: -f2 |
        awk '{ s += 1 / $1; n++ } END { printf "%.1f", n / s }')
  peak=$(tail -n 1 "$work/out/metrics.jsonl" | grep -o '"peak_bytes":[0-9]*' | cut -d: -f2)
  attention=$(grep -o '"attention": *"[a-z_]*"' "$work/plan-$1.json" | head -1 | sed 's/.*"\([a-z_]*\)"$/\1/')
  flops=$(grep -o '"model_flops_per_token": *[0-9.e+]*' "$work/plan-$1.json" | head -1 | sed 's/.*: *//')
  tflops=$(head -1 "$work/out/events.jsonl" | grep -o '"peak_tflops": *[0-9.e+]*' | sed 's/.*: *//')
  echo "$tps $peak $attention ${flops:-0} ${tflops:-0}"
}

"$python" -c 'import torch; print("torch", torch.__version__, "on", torch.cuda.get_device_name(0))'
printf '%-16s %-5s %12s %12s %6s\n' impl prec tokens/s peak_MiB mfu
for precision in ${PRECISIONS:-bf16 fp32}; do
  m=$("$python" "$root/bench/pytorch_llama_cuda.py" --anchor "$anchor" "${model[@]}" --precision "$precision")
  s=$("$python" "$root/bench/pytorch_llama_cuda.py" --anchor "$anchor" "${model[@]}" --precision "$precision" --sdpa)
  read -r r_tps r_peak r_attention r_flops r_tflops < <(runner "$precision")
  row pytorch "$precision" "$(field "$m" tokens_per_second)" "$(field "$m" peak_bytes)" "$r_flops" "$r_tflops"
  row pytorch-sdpa "$precision" "$(field "$s" tokens_per_second)" "$(field "$s" peak_bytes)" "$r_flops" "$r_tflops"
  row "runner ($r_attention)" "$precision" "$r_tps" "$r_peak" "$r_flops" "$r_tflops"
  ratio "vs pytorch" "$precision" "$r_tps" "$(field "$m" tokens_per_second)" "$r_peak" "$(field "$m" peak_bytes)"
  ratio "vs pytorch-sdpa" "$precision" "$r_tps" "$(field "$s" tokens_per_second)" "$r_peak" "$(field "$s" peak_bytes)"
done
