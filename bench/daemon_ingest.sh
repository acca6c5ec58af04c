#!/usr/bin/env bash
# Step-metric ingestion while tailord serves: JOBS runners each write ROWS
# metrics.jsonl lines (as fast as awk writes them, far faster than any real
# training loop), while wrk reads GET /v1/jobs. Reports the rows/s stored
# (from the first submission until every job has ended: a job's verdict waits
# for all its rows) and the listing's latency meanwhile.
#   bench/daemon_ingest.sh [BUILD_DIR]    JOBS=4 ROWS=250000 CONNECTIONS=16
# Needs wrk (scripts/setup --bench).
set -euo pipefail
build=${1:-build}
jobs=${JOBS:-4}
rows=${ROWS:-250000}
connections=${CONNECTIONS:-16}
root=$(cd "$(dirname "$0")/.." && pwd)
command -v wrk >/dev/null || { echo "bench: wrk not found (scripts/setup --bench)" >&2; exit 1; }
work=$(mktemp -d)

# The stand-in runner: every row a runner writes (loss, lr, tokens, the
# memory components), then a clean exit. It finds its folder after --out.
cat >"$work/runner.sh" <<SH
#!/bin/sh
while [ \$# -gt 0 ]; do [ "\$1" = --out ] && out=\$2; shift; done
cd "\$out" || exit 1
awk 'BEGIN { for (i = 1; i <= $rows; i++) {
  printf "{\"step\":%d,\"time\":%d.5,\"loss\":%.6f,\"lr\":0.001,\"grad_norm\":1.25,\"tokens\":2048,", i, 1700000000 + i, 4.0 / (1 + i / 1000)
  printf "\"tokens_per_second\":51234.5,\"step_seconds\":0.04,\"memory\":{\"allocated_bytes\":%d,\"peak_bytes\":%d,", 1000000 + i, 2000000 + i
  printf "\"weights\":12000000,\"gradients\":12000000,\"optimizer_states\":24000000,\"activations\":%d}}\n", 5000000 + i
  if (i % 2000 == 0) fflush()
} }' >> metrics.jsonl
SH
chmod +x "$work/runner.sh"
source "$root/bench/tailord_lib.sh"
tailord_start "$root" "$build" "$work/runner.sh"
auth="Authorization: Bearer $token"

# Small jobs (a 64 MiB reservation each) so that all JOBS run at once.
demo_spec "$root" "$build" "$work/job.yaml" --set resources.host_memory=64GiB
start=$(date +%s.%N)
for _ in $(seq "$jobs"); do
  curl -sf -o /dev/null -H "$auth" -H 'Content-Type: application/yaml' --data-binary @"$work/job.yaml" "http://$addr/v1/jobs"
done
wrk -t2 -c"$connections" -d600s --latency -H "$auth" "http://$addr/v1/jobs" >"$work/wrk.txt" &
load=$!
ended() { curl -sf -H "$auth" "http://$addr/v1/jobs?limit=500" | grep -o '"state":"\(succeeded\|failed\|cancelled\)"' | wc -l; }
while (( $(ended) < jobs )); do sleep 0.2; done
end=$(date +%s.%N)
kill -INT $load; wait $load || true
stored=$(sqlite3 "$work/data/tailor.db" 'SELECT count(*) FROM step_metrics')
printf '%d jobs x %d rows: %d stored in %.1f s = %.0f rows/s while serving\n' "$jobs" "$rows" "$stored" \
  "$(echo "$end - $start" | bc -l)" "$(echo "$stored / ($end - $start)" | bc -l)"
echo "== GET /v1/jobs meanwhile ($connections connections)"
grep -E 'Requests/sec|Latency  |50%|99%|Non-2xx|Socket errors' "$work/wrk.txt"
