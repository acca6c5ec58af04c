#!/usr/bin/env bash
# tailor-runner's ranks against PyTorch's own data parallelism on the same
# torch (.venv), model, data shape, global batch, precision and cores, one
# after another in one invocation:
#   ddp      bench/ddp_llama.py --mode ddp   (DistributedDataParallel, Gloo)
#   fsdp2    bench/ddp_llama.py --mode fsdp2 (fully_shard per block, Gloo)
#   tailor   tailor-runner, resources.ranks N, ZeRO stage 0, 1, 2 and 3
# on the anchor's Llama (4 layers, hidden 256, vocab 4096, seq 256, global
# batch 8: one micro-batch per rank and step). Prints tokens/s, the largest
# rank's peak RSS, tailor's tracked peak per rank, and the bytes rank 0 sent
# per step against 2Ψ(N-1)/N (stages 0-2) or 3Ψ(N-1)/N (stage 3; Ψ: the
# fp32 weight bytes, from the stage-0 run).
#   bench/ranks_vs_ddp.sh [BUILD_DIR]   RANKS="2 4" STEPS=20 PRECISION=fp32 THREADS=$(nproc)
set -euo pipefail
build=${1:-build}
steps=${STEPS:-20}
threads=${THREADS:-$(nproc)}
precision=${PRECISION:-fp32}
seq=256
warmup=3
source "$(dirname "$0")/lib.sh"
bench_init
bench_random_tokens "$work/tokens.bin"


tailor() {  # ranks zero -> "tokens/s rss_bytes tracked_peak comm_bytes weights_bytes"
  { bench_anchor_job "$seq"; cat <<YAML; } > "$work/job.yaml"
training: {global_batch_size: 8, micro_batch_size: $((8 / $1)), max_steps: $((steps + warmup)), lr: 3e-4, scheduler: constant, grad_clip: 0}
strategy: {precision: $precision, gradient_checkpointing: false, adapter: none, optimizer: adamw, zero_stage: $2}
resources: {gpus: 0, host_memory: 8GiB, ranks: $1}
YAML
  "$root/$build/bin/tailor" plan --output json "$work/job.yaml" > "$work/plan.json"
  rm -rf "$work/out"
  # GNU time's maximum RSS of the launcher covers its largest rank.
  /usr/bin/time -f '%M' -o "$work/rss" "$root/$build/bin/tailor-runner" --plan "$work/plan.json" --out "$work/out" \
      --quiet --memory-limit 0 --threads "$threads" --cache-dir "$work/cache"
  tail -n +$((warmup + 1)) "$work/out/metrics.jsonl" | "$python" -c '
import json, sys, statistics
rows = [json.loads(l) for l in sys.stdin]
tps = len(rows) / sum(1 / r["tokens_per_second"] for r in rows)
peak = max(r["memory"]["peak_bytes"] for r in rows)
comm = statistics.median(r.get("comm_bytes", 0) for r in rows)
weights = rows[-1]["memory"]["weights"]
print(f"{tps:.1f} {int(sys.argv[1]) * 1024} {peak} {comm:.0f} {weights}")' "$(cat "$work/rss")"
}

printf '%-8s %5s %12s %14s %16s %16s\n' impl ranks tokens/s peak_rss_MiB tracked_peak_MiB sent/formula
for ranks in ${RANKS:-2 4}; do
  args=(--anchor "$anchor" --ranks "$ranks" --layers 4 --hidden 256 --heads 4 --kv-heads 4 --intermediate 688
        --vocab 4096 --seq "$seq" --batch 8 --steps "$steps" --warmup "$warmup" --threads "$threads" --precision "$precision")
  ddp=$("$python" "$root/bench/ddp_llama.py" --mode ddp "${args[@]}")
  fsdp=$("$python" "$root/bench/ddp_llama.py" --mode fsdp2 "${args[@]}")
  d_tps=$(field "$ddp" tokens_per_second); d_rss=$(field "$ddp" peak_rss_bytes)
  f_tps=$(field "$fsdp" tokens_per_second); f_rss=$(field "$fsdp" peak_rss_bytes)
  printf '%-8s %5d %12.1f %14.1f %16s %16s\n' ddp "$ranks" "$d_tps" "$(echo "$d_rss / 1048576" | bc -l)" - -
  printf '%-8s %5d %12.1f %14.1f %16s %16s\n' fsdp2 "$ranks" "$f_tps" "$(echo "$f_rss / 1048576" | bc -l)" - -
  psi=0
  for zero in 0 1 2 3; do
    read -r t_tps t_rss t_peak t_comm t_weights < <(tailor "$ranks" "$zero")
    [ "$zero" = 0 ] && psi=$t_weights
    formula=$(echo "$([ "$zero" = 3 ] && echo 3 || echo 2) * $psi * ($ranks - 1) / $ranks" | bc -l)
    printf '%-8s %5d %12.1f %14.1f %16.1f %16.3f   %.2fx ddp, %.2fx fsdp2 speed; %.2fx ddp, %.2fx fsdp2 RSS\n' \
      "zero-$zero" "$ranks" "$t_tps" "$(echo "$t_rss / 1048576" | bc -l)" "$(echo "$t_peak / 1048576" | bc -l)" \
      "$(echo "$t_comm / $formula" | bc -l)" "$(echo "$t_tps / $d_tps" | bc -l)" "$(echo "$t_tps / $f_tps" | bc -l)" \
      "$(echo "$t_rss / $d_rss" | bc -l)" "$(echo "$t_rss / $f_rss" | bc -l)"
  done
done
