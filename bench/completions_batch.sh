#!/usr/bin/env bash
# Log-likelihood scoring as lm-eval does it: `tailor serve`'s
# /v1/completions given the same 64 prompts (MIN_LEN to MAX_LEN tokens, echoed and
# scored, one new token each; bench/scoring_hf.py) one to a request, as
# lm-eval's local-completions posts them by default, and BATCH to a request
# (its batch_size), against what lm-eval's hf model runs instead:
# transformers' forward in batches of BATCH, longest first, right-padded.
# A random 110M Llama, fp32 on the CPU, the same threads, one after the
# other in one invocation. Prints each side's seconds, prompts/s and its
# ratio to one prompt a request, and the largest difference of a prompt's
# summed log-probability from transformers'.
#   bench/completions_batch.sh [BUILD_DIR]   BATCH=16 THREADS=$(nproc) MIN_LEN=32 MAX_LEN=256
set -euo pipefail
build=${1:-build}
batch=${BATCH:-16}
threads=${THREADS:-$(nproc)}
source "$(dirname "$0")/lib.sh"
bench_init

bench_scoring_model "$root/$build/bin/tailor" "$threads"
run() { bench_scoring "$@"; }
run warm client "$url" "$work" 64  # the model's first pass
run one client "$url" "$work" 1
run batched client "$url" "$work" "$batch"
run whole client "$url" "$work" 64
run hf hf "$work" "$batch" "$threads"
"$python" - "$work" "$batch" "$threads" <<'PY'
import json, os, sys
work, batch, threads = sys.argv[1], sys.argv[2], sys.argv[3]
r = {n: json.load(open(os.path.join(work, n + ".json"))) for n in ("one", "batched", "whole", "hf")}
one = r["one"]["seconds"]
print(f"{'side':34s} {'seconds':>8s} {'prompts/s':>10s} {'vs one a request':>17s} {'max |sum - hf|':>15s}")
for name, label in (("one", "tailor serve, 1 prompt a request"), ("batched", f"tailor serve, {batch} a request"),
                    ("whole", "tailor serve, 64 in one request"), ("hf", f"transformers, batches of {batch}")):
    s = r[name]["seconds"]
    diff = max(abs(a - b) for a, b in zip(r[name]["sums"], r["hf"]["sums"]))
    print(f"{label:34s} {s:8.2f} {64 / s:10.2f} {one / s:16.2f}x {diff:15.2e}")
print(f"threads {threads}, 64 prompts of {os.environ.get('MIN_LEN', 32)}-{os.environ.get('MAX_LEN', 256)} tokens, "
      "fp32, a random 110M Llama")
PY
