#!/usr/bin/env bash
# GGUF export: `tailor export --format gguf` against what a user runs
# without it: PEFT's merge_and_unload() saved as an fp32 folder
# (bench/export_peft.py), then llama.cpp's convert_hf_to_gguf.py on that
# folder (from the llama-cpp-python sdist the lock pins; bench/
# gguf_converter.py). The same random Llama, LoRA adapter (r 16 on every
# linear layer) and SentencePiece tokenizer, one after the other in one
# invocation, to an f16 file. Each side's time is its whole processes
# (imports, reading, merging, writing), its peak resident memory from GNU
# time; then whether the two files hold the same tensors byte for byte.
#   bench/gguf_vs_converter.sh [BUILD_DIR]   SIZE=1b (or medium)
set -euo pipefail
build=${1:-build}
size=${SIZE:-1b}
source "$(dirname "$0")/lib.sh"
bench_init

"$python" "$root/bench/export_peft.py" make "$work" "$size" 2> "$work/make.log" || { cat "$work/make.log" >&2; exit 1; }
"$python" "$root/bench/gguf_converter.py" tokenizer "$work/base"
converter=$("$python" "$root/bench/gguf_converter.py" fetch "$work/llama.cpp")
echo "model: $size Llama, fp32 base + LoRA r 16 on every linear layer -> f16 GGUF"
printf '%-14s %9s %11s\n' step seconds peak_rss_GB
timed_width=14
bench_timed tailor "$root/$build/bin/tailor-runner" export "$work/base" --adapter "$work/adapter" --format gguf \
  --outtype f16 -o "$work/tailor.gguf"
bench_timed peft-merge "$python" "$root/bench/export_peft.py" merge "$work" "$work/merged" fp32
cp "$work/base/tokenizer.model" "$work/base/tokenizer_config.json" "$work/merged/"
bench_timed convert "$python" "$converter" "$work/merged" --outtype f16 --outfile "$work/converter.gguf"
printf 'peft + converter: %.1f s; speedup (their sum / tailor): %.2fx\n' "$(echo "$peft_merge_secs + $convert_secs" | bc -l)" \
  "$(echo "($peft_merge_secs + $convert_secs) / $tailor_secs" | bc -l)"
"$python" "$root/bench/gguf_converter.py" same "$work/tailor.gguf" "$work/converter.gguf"
