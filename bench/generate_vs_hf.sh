#!/usr/bin/env bash
# Generation: `tailor-runner generate` against transformers' generate()
# (bench/generate_hf.py) on the same torch (.venv), the same random Llama
# folders saved by transformers (small: the anchor's shape; medium: 12
# layers, hidden 768, GQA 12/4, vocab 32000, 110M parameters), the same
# 32-token prompt, greedy, batch 1, fp32 on the CPU, the same threads, one
# after the other in one invocation. Each side's time is the median of
# REPEATS generations of NEW tokens in a warm process (Tailor's own timing
# of the prompt's forward and of the tokens after it; transformers' a
# generate() of 1 and of NEW tokens). Prints the prompt's time, decode
# tokens/s (the NEW - 1 tokens after the first), the ratio, and whether the
# greedy ids are equal.
#   bench/generate_vs_hf.sh [BUILD_DIR]   NEW=128 THREADS=$(nproc) REPEATS=3
set -euo pipefail
build=${1:-build}
new=${NEW:-128}
threads=${THREADS:-$(nproc)}
repeats=${REPEATS:-3}
source "$(dirname "$0")/lib.sh"
bench_init

printf '%-7s %-13s %10s %14s %9s %s\n' model impl prompt_ms decode_tok/s speedup ids
for size in small medium; do
  "$python" "$root/bench/generate_hf.py" make "$work" "$size" 2> "$work/make.log" ||
    { cat "$work/make.log" >&2; exit 1; }
  prompt_ids=$(tr -d '[] ' < "$work/prompt.json")
  # Tailor: REPEATS processes; the medians of its own timings.
  tailor_prompt=() tailor_decode=()
  for ((i = 0; i < repeats; i++)); do
    if ! out=$("$root/$build/bin/tailor-runner" generate "$work/$size" --prompt-ids "$prompt_ids" \
        --max-tokens "$new" --threads "$threads" --output json --quiet 2> "$work/tailor.log"); then
      cat "$work/tailor.log" >&2
      exit 1
    fi
    tailor_prompt+=("$(grep -o '"prompt_seconds":[0-9.e-]*' <<<"$out" | cut -d: -f2)")
    tailor_decode+=("$(grep -o '"decode_seconds":[0-9.e-]*' <<<"$out" | cut -d: -f2)")
    tailor_ids=$(grep -o '"ids":\[[0-9,]*\]' <<<"$out" | cut -d: -f2)
  done
  median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
  tp=$(median "${tailor_prompt[@]}")
  td=$(median "${tailor_decode[@]}")
  if ! hf=$("$python" "$root/bench/generate_hf.py" run "$work" "$size" "$new" "$threads" "$repeats" \
      2> "$work/hf.log"); then
    tail -n 30 "$work/hf.log" >&2
    exit 1
  fi
  hp=$(field "$hf" prompt_seconds)
  ht=$(field "$hf" total_seconds)
  hf_ids=$(grep -o '"ids": \[[0-9, ]*\]' <<<"$hf" | cut -d: -f2 | tr -d ' ')
  tailor_rate=$(echo "($new - 1) / $td" | bc -l)
  hf_rate=$(echo "($new - 1) / ($ht - $hp)" | bc -l)
  same=$([[ $tailor_ids == "$hf_ids" ]] && echo equal || echo DIFFERENT)
  printf '%-7s %-13s %10.1f %14.1f %9s %s\n' "$size" tailor "$(echo "$tp * 1000" | bc -l)" "$tailor_rate" \
      "$(printf '%.2fx' "$(echo "$tailor_rate / $hf_rate" | bc -l)")" "$same"
  printf '%-7s %-13s %10.1f %14.1f %9s\n' "$size" transformers "$(echo "$hp * 1000" | bc -l)" "$hf_rate" 1.00x
done
echo "threads $threads, $new new tokens, $(grep -o '"torch": "[^"]*", "transformers": "[^"]*"' <<<"$hf" | tr -d '"')"
