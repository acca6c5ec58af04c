# Sourced by the bench scripts: the project's paths and Python environment,
# checked, a work folder removed on exit, and the same synthetic data.

# Sets root, python, anchor and work; exports the environment every
# implementation runs under (docs/libtorch.md).
bench_init() {
  root=$(cd "$(dirname "${BASH_SOURCE[1]}")/.." && pwd)
  python="$root/.venv/bin/python"
  anchor="$root/../shared/bench/anchor_pytorch_llama.py"
  [[ -x $python ]] || { echo "bench: $python not found: run scripts/setup" >&2; exit 1; }
  [[ -f $anchor ]] || { echo "bench: $anchor not found" >&2; exit 1; }
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  export OMP_WAIT_POLICY=PASSIVE
}

# Starts `TAILOR serve MODEL_DIR` on a free port with THREADS threads,
# stopped on exit; sets serve (its pid) and url (its /v1/completions) once
# it listens: bench_serve TAILOR MODEL_DIR THREADS.
bench_serve() {
  "$1" serve "$2" --port 0 --threads "$3" > "$work/serve.log" 2>&1 &
  serve=$!
  trap 'kill $serve 2> /dev/null; wait $serve 2> /dev/null; rm -rf "$work"' EXIT
  url=""
  for _ in $(seq 600); do
    url=$(grep -o 'http://127.0.0.1:[0-9]*/v1/completions' "$work/serve.log" | head -1 || true)
    [[ -n $url ]] && return 0
    kill -0 $serve 2> /dev/null || { cat "$work/serve.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "tailor serve did not start" >&2
  cat "$work/serve.log" >&2
  exit 1
}

# bench/scoring_hf.py's random 110M Llama and prompts made in $work, the
# model served by `TAILOR serve` (bench_serve): bench_scoring_model TAILOR THREADS.
bench_scoring_model() {
  "$python" "$root/bench/scoring_hf.py" make "$work" 2> "$work/make.log" || { cat "$work/make.log" >&2; exit 1; }
  bench_serve "$1" "$work/model" "$2"
}

# scoring_hf.py ARGS..., its JSON line into $work/NAME.json: bench_scoring NAME ARGS...
bench_scoring() {
  "$python" "$root/bench/scoring_hf.py" "${@:2}" > "$work/$1.json" 2> "$work/$1.log" || { cat "$work/$1.log" >&2; exit 1; }
}

# Runs COMMAND as one process under GNU time and prints NAME, its wall
# seconds and peak resident memory (GB), in a name column $timed_width wide
# (default 8); sets NAME_secs (dashes as underscores). Its output goes to
# $work/NAME.log, shown if it fails: bench_timed NAME COMMAND...
# Without GNU time (a bare GPU machine) the wall time comes from date and
# the peak RSS column says "-".
bench_timed() {
  local name=$1 secs kb
  shift
  if [[ -x /usr/bin/time ]]; then
    /usr/bin/time -f '%e %M' -o "$work/$name.time" "$@" > "$work/$name.log" 2>&1 || { cat "$work/$name.log" >&2; exit 1; }
    read -r secs kb < "$work/$name.time"
    printf "%-${timed_width:-8}s %9.1f %11.2f\n" "$name" "$secs" "$(awk -v k="$kb" 'BEGIN { print k / 1048576 }')"
  else
    local start
    start=$(date +%s.%N)
    "$@" > "$work/$name.log" 2>&1 || { cat "$work/$name.log" >&2; exit 1; }
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
    printf "%-${timed_width:-8}s %9.1f %11s\n" "$name" "$secs" "-"
  fi
  eval "${name//-/_}_secs=$secs"
}

# The number after "KEY": in the JSON line TEXT: field TEXT KEY.
field() { grep -o "\"$2\": [0-9.]*" <<<"$1" | cut -d' ' -f2; }

# The head of a job spec on the anchor's Llama (4 layers, hidden 256, vocab
# 4096) over $work/tokens.bin at sequence length SEQ: bench_anchor_job SEQ.
# The caller appends training, strategy and resources.
bench_anchor_job() {
  cat <<YAML
apiVersion: tailor/v1
kind: TrainingJob
name: bench
model:
  arch: {family: llama, layers: 4, hidden: 256, intermediate: 688, heads: 4, kv_heads: 4, vocab: 4096, max_seq_len: $1}
data: {train: $work/tokens.bin, format: tokens, seq_len: $1, packing: true}
YAML
}

# FILE: 400 documents of 300 random ids in [260, 4096), EOS-separated (257),
# as little-endian int32 (data.format: tokens).
bench_random_tokens() {
  "$python" - "$1" <<'PY'
import random, struct, sys
random.seed(0)
with open(sys.argv[1], "wb") as f:
    for _ in range(400):
        f.write(struct.pack("<300i", *[random.randrange(260, 4096) for _ in range(300)]))
        f.write(struct.pack("<i", 257))
PY
}

# FILE: 8 documents of 40,000 random ids in [3, VOCAB), EOS-separated (2),
# as little-endian int32: longer than any sequence the GPU benchmarks
# train, so packing never masks. bench_long_documents FILE VOCAB
bench_long_documents() {
  "$python" - "$1" "$2" <<'PY'
import random, struct, sys
random.seed(0)
vocab = int(sys.argv[2])
with open(sys.argv[1], "wb") as f:
    for _ in range(8):
        f.write(struct.pack("<40000i", *[random.randrange(3, vocab) for _ in range(40000)]))
        f.write(struct.pack("<i", 2))
PY
}
