#!/usr/bin/env bash
# tailord under load, measured with wrk (requests/s and latency
# percentiles): POST /v1/jobs (each a planned job, durable before the
# reply), then GET /v1/jobs with at least $JOBS jobs in the store: the
# first page, a page deep in the list, by state, by label (one that every
# job has, one that none has) and by both. The jobs' runner is /bin/true,
# so they finish at once; the reads are measured once the last has.
#   bench/daemon_http.sh [BUILD_DIR]     JOBS=10000 SECONDS_=5 SUBMIT_SECONDS_=5 CONNECTIONS=16 SUBMIT_CONNECTIONS=64
# Needs wrk (scripts/setup --bench).
set -euo pipefail
build=${1:-build}
jobs=${JOBS:-10000}
duration=${SECONDS_:-5}
connections=${CONNECTIONS:-16}
root=$(cd "$(dirname "$0")/.." && pwd)
command -v wrk >/dev/null || { echo "bench: wrk not found (scripts/setup --bench)" >&2; exit 1; }
source "$root/bench/tailord_lib.sh"
tailord_start "$root" "$build" /bin/true
export TAILOR_DATA_DIR="$work/data"

# The resolved demo spec, POSTed by wrk's $connections connections for
# SUBMIT_SECONDS_ (the measured round), then in 2 s rounds until the store
# holds $jobs jobs. Each 201 is a planned job, durable in the store.
demo_spec "$root" "$build" "$work/job.yaml"
export SPEC="$work/job.yaml" TOKEN="$token"
# Jobs in the store, and of them those not finished, from tailord's gauge.
count_jobs() { curl -sf -H "Authorization: Bearer $token" "http://$addr/metrics" |
  awk -v pat="${1:-.}" '/^tailor_jobs\{/ && $0 ~ pat {n += $2} END {print int(n)}'; }
# One client, then $connections, then $SUBMIT_CONNECTIONS (64) at once: a
# submission's own cost, then what queueing adds (issue 37, item 7: the
# p99 at 64 clients).
for c in 1 "$connections" "${SUBMIT_CONNECTIONS:-64}"; do
  echo "== POST /v1/jobs ($c connections, ${SUBMIT_SECONDS_:-5}s)"
  wrk -t1 -c"$c" -d"${SUBMIT_SECONDS_:-5}s" --latency -s "$root/bench/submit.lua" "http://$addr/v1/jobs" |
    grep -E 'Requests/sec|Latency  |50%|90%|99%|Non-2xx|Socket errors'
done
while (( $(count_jobs) < jobs )); do
  wrk -t2 -c"$connections" -d2s -s "$root/bench/submit.lua" "http://$addr/v1/jobs" >/dev/null
done
while (( $(count_jobs 'queued|planning|running') > 0 )); do sleep 1; done
echo "the store holds $(count_jobs) jobs, all finished"

deep=$(( jobs / 2 ))
for target in "/v1/jobs" "/v1/jobs?after=$deep" "/v1/jobs?state=succeeded&limit=100" "/v1/jobs?state=failed" \
  "/v1/jobs?label=purpose=demo" "/v1/jobs?label=purpose=none" "/v1/jobs?state=succeeded&label=purpose=demo&after=$deep" \
  "/v1/jobs?state=failed&label=purpose=demo" "/healthz"; do
  echo "== GET $target ($connections connections, ${duration}s)"
  wrk -t2 -c"$connections" -d"${duration}s" --latency -H "Authorization: Bearer $token" "http://$addr$target" |
    grep -E 'Requests/sec|Latency  |50%|99%|Non-2xx|Socket errors'
done

# Reads while submissions plan and commit: what a dashboard polling tailord
# sees during a burst of submissions.
half=$(( (connections + 1) / 2 ))
echo "== GET /healthz ($half connections) while POST /v1/jobs ($half connections), ${duration}s"
wrk -t1 -c"$half" -d"${duration}s" --latency -s "$root/bench/submit.lua" "http://$addr/v1/jobs" >"$work/post.txt" &
wrk -t1 -c"$half" -d"${duration}s" --latency "http://$addr/healthz" | grep -E 'Requests/sec|Latency  |50%|99%'
wait %%
grep -E 'Requests/sec|99%' "$work/post.txt" | sed 's/^/  POST: /'
