#!/usr/bin/env bash
# What reading conversations from Parquet and from a save_to_disk folder
# costs against the same records in JSON Lines: N OpenAI-style
# conversations written three ways (pyarrow, datasets), then `tailor-data
# stats` (read, render with ChatML, tokenize with the byte tokenizer, count)
# on each, pinned to one core. Prints the seconds and peak memory of each,
# the ratios to JSONL, and whether the three counted the same tokens.
#   bench/table_data.sh [BUILD_DIR]     N=100000
set -euo pipefail
build=${1:-build}
n=${N:-100000}
root=$(cd "$(dirname "$0")/.." && pwd)
python=$root/.venv/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$python" - "$work" "$n" <<'PY'
import json, random, sys
import datasets, pyarrow as pa, pyarrow.parquet as pq
out, n = sys.argv[1], int(sys.argv[2])
random.seed(0)
words = "the tailor mends a coat weaver folds sails miller counts apples neighbour paints gate river".split()
rows = []
for _ in range(n):
    messages = []
    for _ in range(2):
        messages.append({"role": "user", "content": " ".join(random.choices(words, k=12))})
        messages.append({"role": "assistant", "content": " ".join(random.choices(words, k=30))})
    rows.append({"messages": messages})
with open(f"{out}/c.jsonl", "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
table = pa.Table.from_pylist(rows)
pq.write_table(table, f"{out}/c.parquet")
datasets.disable_progress_bars()
datasets.Dataset(table).save_to_disk(f"{out}/c_ds")
PY

declare -A seconds memory tokens
for data in c.jsonl c.parquet c_ds; do
  cat >"$work/$data.yaml" <<YAML
apiVersion: tailor/v1
kind: TrainingJob
name: bench
model:
  arch: {family: llama, layers: 2, hidden: 64, intermediate: 128, heads: 4, kv_heads: 2, vocab: 260, max_seq_len: 1024}
data:
  train: $work/$data
  chat: messages
  chat_template: $root/configs/data/chatml.jinja
  seq_len: 1024
YAML
  /usr/bin/time -f "%e %M" -o "$work/$data.time" taskset -c 0 "$root/$build/bin/tailor-data" stats "$work/$data.yaml" \
    --max-examples "$n" >"$work/$data.out"
  read -r s kb <"$work/$data.time"
  seconds[$data]=$s
  memory[$data]=$((kb / 1024))
  tokens[$data]=$(sed -n 2p "$work/$data.out")
done
echo "bench: $n conversations, tailor-data stats on one core"
for data in c.jsonl c.parquet c_ds; do
  printf '  %-10s %7.2f s  %5d MiB peak  %.2fx JSONL  %s\n' "$data" "${seconds[$data]}" "${memory[$data]}" \
    "$(echo "${seconds[$data]} / ${seconds[c.jsonl]}" | bc -l)" "${tokens[$data]}"
done
if [[ ${tokens[c.jsonl]} == "${tokens[c.parquet]}" && ${tokens[c.jsonl]} == "${tokens[c_ds]}" ]]; then
  echo "  the same examples and tokens from all three"
else
  echo "  the counts differ" >&2
  exit 1
fi
