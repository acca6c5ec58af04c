#!/usr/bin/env bash
# tailord's memory over a soak of submit, list, cancel and delete: 8 clients
# (bench/soak_clients.py) each repeat submit a job, read it, list a page,
# cancel it, wait for it to end and delete it, for SOAK_SECONDS_, so that the
# store stays small and what could grow is tailord itself. Its resident set
# size (VmRSS) is sampled every SAMPLE_SECONDS_; the report compares the
# second minute's mean with the last minute's (the first minute is warm-up:
# SQLite's page cache and the allocator's arenas filling).
#   bench/daemon_soak.sh [BUILD_DIR]    SOAK_SECONDS_=600 SAMPLE_SECONDS_=10
set -euo pipefail
build=${1:-build}
soak=${SOAK_SECONDS_:-600}
sample=${SAMPLE_SECONDS_:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
python="$root/.venv/bin/python"
[[ -x $python ]] || { echo "bench: $python not found: run scripts/setup" >&2; exit 1; }
source "$root/bench/tailord_lib.sh"
tailord_start "$root" "$build" /bin/true
demo_spec "$root" "$build" "$work/job.yaml"
"$python" "$root/bench/soak_clients.py" "$addr" "$token" "$work/job.yaml" \
  "$soak" 8 >"$work/clients.txt" &
clients=$!

echo "seconds  rss_kib  jobs_in_store"
samples=()
t=0
while ((t <= soak)); do
  r=$(awk '/^VmRSS/ {print $2}' "/proc/$daemon/status")
  n=$(sqlite3 "$work/data/tailor.db" 'SELECT count(*) FROM jobs' 2>/dev/null || echo "?")
  samples+=("$r")
  printf '%7d  %7d  %s\n' "$t" "$r" "$n"
  ((t + sample > soak)) && break
  sleep "$sample"
  t=$((t + sample))
done
wait $clients
cat "$work/clients.txt"
per_minute=$((60 / sample))
# A soak shorter than two minutes compares its halves.
((2 * per_minute > ${#samples[@]})) && per_minute=$((${#samples[@]} / 2))
second=$(printf '%s\n' "${samples[@]:per_minute:per_minute}" | awk '{s+=$1} END {printf "%d", s/NR}')
last=$(printf '%s\n' "${samples[@]: -per_minute}" | awk '{s+=$1} END {printf "%d", s/NR}')
printf 'RSS: after warm-up %d KiB, at the end %d KiB (%+.1f%%)\n' "$second" "$last" \
  "$(echo "100 * ($last - $second) / $second" | bc -l)"
