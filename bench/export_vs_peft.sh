#!/usr/bin/env bash
# Export: `tailor export` against what a user runs without it (PEFT's
# merge_and_unload(), a cast to bf16 and save_pretrained; bench/export_peft.py)
# on the same torch (.venv), the same random Llama and LoRA adapter (r 16 on
# every linear layer), one after the other in one invocation: a LoRA run's
# adapter merged into its fp32 base and written as a bf16 Hugging Face
# folder. Each side's time is the whole process (imports, reading, merging,
# writing), its peak resident memory from GNU time; then whether the two
# folders hold the same tensors bit for bit.
#   bench/export_vs_peft.sh [BUILD_DIR]   SIZE=1b (or medium)
set -euo pipefail
build=${1:-build}
size=${SIZE:-1b}
source "$(dirname "$0")/lib.sh"
bench_init

"$python" "$root/bench/export_peft.py" make "$work" "$size" 2> "$work/make.log" || { cat "$work/make.log" >&2; exit 1; }
params=$("$python" -c "import json,sys; c=json.load(open(sys.argv[1])); print(round((c['vocab_size']*c['hidden_size']*2 + c['num_hidden_layers']*(c['hidden_size']*c['hidden_size']*2 + 2*c['hidden_size']*c['hidden_size']*c['num_key_value_heads']//c['num_attention_heads'] + 3*c['hidden_size']*c['intermediate_size']))/1e9, 2))" "$work/base/config.json")
echo "model: $size ($params B parameters), fp32 base + LoRA r 16 on every linear layer -> bf16 folder"
printf '%-8s %9s %11s\n' impl seconds peak_rss_GB
bench_timed tailor "$root/$build/bin/tailor-runner" export "$work/base" --adapter "$work/adapter" -o "$work/tailor-out" --dtype bf16
bench_timed peft "$python" "$root/bench/export_peft.py" merge "$work" "$work/peft-out"
printf 'speedup (peft / tailor): %.2fx\n' "$(echo "$peft_secs / $tailor_secs" | bc -l)"
"$python" "$root/bench/export_peft.py" same "$work/tailor-out" "$work/peft-out"
