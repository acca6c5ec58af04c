#!/usr/bin/env bash
# Generative requests as lm-eval posts them (generate_until through its
# local-completions client): `tailor serve`'s /v1/completions given the same
# 32 prompts (MIN_LEN to MAX_LEN token ids; bench/scoring_hf.py), greedy, NEW
# tokens each, one to a request and BATCH to a request (its batch_size: the
# sequences of a request generate together, one forward per token for all),
# against what lm-eval's hf model runs instead: transformers' generate() in
# batches of BATCH, left-padded. A random 110M Llama, fp32 on the CPU, the
# same threads, one after the other in one invocation. Prints each side's
# seconds, new tokens/s, its ratio to one prompt a request, and how many of
# its texts equal one a request's.
#   bench/completions_generate.sh [BUILD_DIR]   BATCH=16 NEW=64 THREADS=$(nproc) MIN_LEN=32 MAX_LEN=256
set -euo pipefail
build=${1:-build}
batch=${BATCH:-16}
new=${NEW:-64}
threads=${THREADS:-$(nproc)}
source "$(dirname "$0")/lib.sh"
bench_init

bench_scoring_model "$root/$build/bin/tailor" "$threads"
run() { bench_scoring "$@"; }
GEN_PROMPTS=2 run warm generate "$url" "$work" 2 4  # the model's first passes
run one generate "$url" "$work" 1 "$new"
run batched generate "$url" "$work" "$batch" "$new"
run hf hf_generate "$work" "$batch" "$threads" "$new"
"$python" - "$work" "$batch" "$threads" "$new" <<'PY'
import json, os, sys
work, batch, threads, new = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
r = {n: json.load(open(os.path.join(work, n + ".json"))) for n in ("one", "batched", "hf")}
one = r["one"]["seconds"]
prompts = len(r["one"]["texts"])
print(f"{'side':36s} {'seconds':>8s} {'tokens/s':>9s} {'vs one a request':>17s} {'texts as one a request':>23s}")
for name, label in (("one", "tailor serve, 1 prompt a request"), ("batched", f"tailor serve, {batch} a request"),
                    ("hf", f"transformers generate(), batches of {batch}")):
    s = r[name]["seconds"]
    same = sum(a == b for a, b in zip(r[name]["texts"], r["one"]["texts"]))
    print(f"{label:36s} {s:8.2f} {prompts * new / s:9.1f} {one / s:16.2f}x {same:17d}/{prompts}")
print(f"threads {threads}, {prompts} prompts of {os.environ.get('MIN_LEN', 32)}-{os.environ.get('MAX_LEN', 256)} "
      f"tokens, {new} new tokens each, greedy, fp32, a random 110M Llama")
PY
