#!/usr/bin/env bash
# tailord's memory over a soak of submit, list and cancel: wrk submits the
# demo spec, lists jobs and reads the hardware on 8 connections while a loop
# cancels jobs and deletes finished ones, for SOAK_SECONDS_; tailord's
# resident set size (VmRSS) is sampled every SAMPLE_SECONDS_. Reports the
# samples and the growth from the first minute's mean to the last's.
#   bench/daemon_soak.sh [BUILD_DIR]    SOAK_SECONDS_=600 SAMPLE_SECONDS_=10
# Needs wrk (scripts/setup --bench).
set -euo pipefail
build=${1:-build}
soak=${SOAK_SECONDS_:-600}
sample=${SAMPLE_SECONDS_:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
command -v wrk >/dev/null || { echo "bench: wrk not found (scripts/setup --bench)" >&2; exit 1; }
work=$(mktemp -d)
"$root/$build/bin/tailord" --data-dir "$work/data" --listen 127.0.0.1:0 --spec-root "$root/configs" \
  --runner /bin/true --poll-interval 0.05 >"$work/tailord.log" 2>&1 &
daemon=$!
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 100); do [[ -s $work/data/address ]] && break; sleep 0.1; done
addr=$(cat "$work/data/address")
token=$(cat "$work/data/token")
auth="Authorization: Bearer $token"
"$root/$build/bin/tailor" validate --resolved --set training.max_steps=1 "$root/configs/examples/tiny-cpu.yaml" 2>/dev/null |
  grep -v '^#' >"$work/job.yaml"
export SPEC="$work/job.yaml" TOKEN="$token"

wrk -t1 -c4 -d"${soak}s" -s "$root/bench/submit.lua" "http://$addr/v1/jobs" >"$work/submit.txt" &
wrk -t1 -c4 -d"${soak}s" -H "$auth" "http://$addr/v1/jobs?limit=100" >"$work/list.txt" &
# Cancel what is queued or running, delete what has finished: the store
# stays small, so what grows is tailord, not its data.
(
  end=$((SECONDS + soak))
  while ((SECONDS < end)); do
    page=$(curl -sf -H "$auth" "http://$addr/v1/jobs?limit=200" || true)
    for id in $(grep -o '"id":"j-[0-9a-f]*","name":"[^"]*","state":"\(queued\|running\)"' <<<"$page" | cut -d'"' -f4); do
      curl -sf -o /dev/null -X POST -H "$auth" "http://$addr/v1/jobs/$id/cancel" || true
    done
    for id in $(grep -o '"id":"j-[0-9a-f]*","name":"[^"]*","state":"\(succeeded\|failed\|cancelled\)"' <<<"$page" | cut -d'"' -f4); do
      curl -sf -o /dev/null -X DELETE -H "$auth" "http://$addr/v1/jobs/$id" || true
    done
    sleep 0.5
  done
) &

rss() { awk '/^VmRSS/ {print $2}' "/proc/$daemon/status"; }
echo "seconds  rss_kib"
samples=()
t=0
while ((t <= soak)); do
  r=$(rss)
  samples+=("$r")
  printf '%7d  %7d\n' "$t" "$r"
  sleep "$sample"
  t=$((t + sample))
done
per_minute=$((60 / sample))
first=$(printf '%s\n' "${samples[@]:0:per_minute}" | awk '{s+=$1} END {printf "%d", s/NR}')
last=$(printf '%s\n' "${samples[@]: -per_minute}" | awk '{s+=$1} END {printf "%d", s/NR}')
submitted=$(curl -sf "http://$addr/metrics" | awk '/^tailor_jobs_submitted_total/ {print int($2)}')
printf 'jobs submitted: %d; RSS first minute %d KiB, last minute %d KiB (%+.1f%%)\n' "$submitted" "$first" "$last" \
  "$(echo "100 * ($last - $first) / $first" | bc -l)"
grep -E 'Requests/sec' "$work/submit.txt" | sed 's/^/submit: /'
grep -E 'Requests/sec' "$work/list.txt" | sed 's/^/list:   /'
