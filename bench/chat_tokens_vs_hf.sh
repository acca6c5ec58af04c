#!/usr/bin/env bash
# Conversations rendered and tokenized: chat_tokens_bench (Tailor's engine,
# ids and the assistant-only mask) against transformers' apply_chat_template
# (jinja2 and the fast tokenizer; the mask only where the template has
# {% generation %} blocks), one thread each, the same conversations and a
# tokenizer trained with the Llama 3 and ChatML specials
# (tests/runner/data/chat_tokens_reference.py).
#
#   bench/chat_tokens_vs_hf.sh [BUILD] [N]     (default build, 100000)
set -euo pipefail
build=${1:-build}
n=${2:-100000}
root=$(cd "$(dirname "$0")/.." && pwd)
python="$root/.venv/bin/python"
bin=$root/$build/bin/chat_tokens_bench
[[ -x $bin ]] || { echo "no $bin: build first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
templates=$root/tests/runner/data/chat_templates
"$python" "$root/tests/runner/data/chat_tokens_reference.py" "$work" >/dev/null
"$python" -c "import json; r = json.load(open('$work/reference.json')); json.dump(r['conversations'], open('$work/conversations.json', 'w'))"
printf '%-32s %12s %12s %8s %10s\n' template "tailor conv/s" "hf conv/s" ratio "tokens"
for case in "llama3 trl_llama3_training.jinja" "llama3 trl_llama3.jinja" "qwen2 trl_qwen2_5.jinja" \
            "qwen2 llamacpp_Qwen-Qwen2.5-7B-Instruct.jinja"; do
  set -- $case
  ours=$("$bin" "$work/$1" "$templates/$2" "$work/conversations.json" "$n")
  theirs=$("$python" "$root/bench/chat_tokens_hf.py" "$work/$1" "$templates/$2" "$work/conversations.json" "$n")
  "$python" - "$2" "$ours" "$theirs" <<'PY'
import json, sys
name, a, b = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
ra, rb = a["conversations"] / a["seconds"], b["conversations"] / b["seconds"]
print(f"{name:32s} {ra:12,.0f} {rb:12,.0f} {ra / rb:7.1f}x {a['tokens']:10,}")
if a["tokens"] != b["tokens"]:
    print(f"warning: token counts differ: tailor {a['tokens']}, transformers {b['tokens']}")
if b["trained"] and a["trained"] != b["trained"]:
    print(f"warning: trained tokens differ: tailor {a['trained']}, transformers {b['trained']}")
PY
done
