#!/usr/bin/env bash
# tailord under load: GET /v1/jobs with 1,000 jobs in the store, measured
# with wrk (requests/s and latency percentiles). The jobs' runner is
# /bin/true, so they finish at once and the store holds 1,000 finished jobs.
#   bench/daemon_http.sh [BUILD_DIR]     JOBS=1000 SECONDS_=10 CONNECTIONS=16
# Needs wrk (scripts/setup --bench).
set -euo pipefail
build=${1:-build}
jobs=${JOBS:-1000}
duration=${SECONDS_:-10}
connections=${CONNECTIONS:-16}
root=$(cd "$(dirname "$0")/.." && pwd)
command -v wrk >/dev/null || { echo "bench: wrk not found (scripts/setup --bench)" >&2; exit 1; }
work=$(mktemp -d)
"$root/$build/bin/tailord" --data-dir "$work/data" --listen 127.0.0.1:0 --spec-root "$root/configs" \
  --runner /bin/true --poll-interval 0.05 >"$work/tailord.log" 2>&1 &
daemon=$!
trap 'kill $daemon 2>/dev/null || true; wait $daemon 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do [[ -s $work/data/address ]] && break; sleep 0.1; done
addr=$(cat "$work/data/address")
token=$(cat "$work/data/token")
export TAILOR_DATA_DIR="$work/data"

# The resolved demo spec, submitted $jobs times by 4 concurrent clients.
"$root/$build/bin/tailor" validate --resolved --set training.max_steps=1 "$root/configs/examples/tiny-cpu.yaml" |
  grep -v '^#' > "$work/job.yaml"
start=$(date +%s.%N)
seq "$jobs" | xargs -P 4 -I{} curl -sf -o /dev/null -H "Authorization: Bearer $token" \
  -H 'Content-Type: application/yaml' --data-binary @"$work/job.yaml" "http://$addr/v1/jobs"
end=$(date +%s.%N)
count=$(curl -sf -H "Authorization: Bearer $token" "http://$addr/v1/jobs?limit=500" | grep -o '"id"' | wc -l)
printf 'submitted %d jobs in %.1f s (%.0f submissions/s, 4 clients); first page holds %d\n' "$jobs" \
  "$(echo "$end - $start" | bc -l)" "$(echo "$jobs / ($end - $start)" | bc -l)" "$count"

for target in "/v1/jobs" "/v1/jobs?state=succeeded&limit=100" "/healthz"; do
  echo "== GET $target ($connections connections, ${duration}s)"
  wrk -t2 -c"$connections" -d"${duration}s" --latency -H "Authorization: Bearer $token" "http://$addr$target" |
    grep -E 'Requests/sec|Latency  |50%|99%|Non-2xx|Socket errors'
done
