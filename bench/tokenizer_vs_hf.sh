#!/usr/bin/env bash
# tokenizer.json encoding speed: tailor-runner's readers (byte-level BPE and
# SentencePiece-style BPE, build/bin/tokenizer_bench) against the tokenizers
# library they must match,
# on one thread (RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false; the
# library through encode_batch, so that Python's per-call cost is not
# counted), same tokenizer files and corpus, in one run. The tokenizers are
# the ones tests/runner/hf_reference.py trains (GPT-2's pre-tokenizer; Llama
# 3's regex split; Qwen2's NFC and regex) and the Llama 2 and Gemma folders
# tests/runner/data/metaspace_reference.py has transformers write (the
# library's side is the pipeline AutoTokenizer builds for them), the corpus
# hf_reference.py's multilingual lines repeated to about 4 MB.
# Prints MB/s and the ratio; warns if the token counts differ.
#   bench/tokenizer_vs_hf.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
python="$root/.venv/bin/python"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" "$root/tests/runner/hf_reference.py" tokenizers "$work"
mkdir "$work/spm"
"$python" "$root/tests/runner/data/metaspace_reference.py" "$work/spm" >/dev/null 2>&1
ln -s "$work/spm/llama2" "$work/llama2"
ln -s "$work/spm/gemma" "$work/gemma"
"$python" - "$work" <<'PY'
import json, sys
lines = json.load(open(sys.argv[1] + "/lines.json"))
with open(sys.argv[1] + "/corpus.txt", "w") as f:
    for i in range(4_000_000 // sum(len(l.encode()) for l in lines) + 1):
        for l in lines:
            f.write(l.replace("\n", " ").replace("\r", " ") + "\n")
PY
printf '%-8s %12s %12s %8s\n' tokenizer tailor_MB/s hf_MB/s ratio
for name in gpt2 llama3 qwen2 llama2 gemma; do
  t=$("$root/$build/bin/tokenizer_bench" "$work/$name" "$work/corpus.txt")
  h=$(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false "$python" - "$work/$name" "$work/corpus.txt" 2>/dev/null <<'PY'
import json, sys, time
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1]).backend_tokenizer
lines = open(sys.argv[2], encoding="utf-8").read().split("\n")[:-1]
n = sum(len(l.encode()) for l in lines)
t0 = time.perf_counter()
tokens = sum(len(e.ids) for e in tok.encode_batch(lines, add_special_tokens=False))
s = time.perf_counter() - t0
print(json.dumps({"impl": "tokenizers", "tokens": tokens, "mb_per_s": round(n / 1e6 / s, 2)}))
PY
)
  tm=$(grep -o '"mb_per_s": [0-9.]*' <<<"$t" | cut -d' ' -f2)
  hm=$(grep -o '"mb_per_s": [0-9.]*' <<<"$h" | cut -d' ' -f2)
  [[ $(grep -o '"tokens": [0-9]*' <<<"$t") == $(grep -o '"tokens": [0-9]*' <<<"$h") ]] || echo "bench: token counts differ: $t / $h" >&2
  awk -v n="$name" -v a="$tm" -v b="$hm" 'BEGIN { printf "%-8s %12.2f %12.2f %7.2fx\n", n, a, b, a / b }'
done
