#!/usr/bin/env bash
# What trackers cost a training step, and what an outage costs: the demo
# job run three ways side by side, pinned to CPU 0 (the MLflow server, its
# restart and the check on CPU 1, so the server's own work does not land on
# the training core): no trackers; TensorBoard and MLflow with the server
# up; and MLflow with the server SIGKILLed OUTAGE seconds after the first
# step and started again on the same store OUTAGE seconds later. Prints the
# median and mean step time of each, their ratios to the run without
# trackers, and whether the server ends with every metric of the outage run
# (tests/runner/tracking/tracking_check.py).
#   bench/tracker_outage.sh [BUILD_DIR]     STEPS=200 OUTAGE=20
set -euo pipefail
build=${1:-build}
steps=${STEPS:-200}
outage=${OUTAGE:-20}
root=$(cd "$(dirname "$0")/.." && pwd)
python=$root/.venv/bin/python
work=$(mktemp -d)
server=""
trap '[[ -n $server ]] && kill -9 -- -$server 2>/dev/null; rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE
port=$($python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
uri=http://127.0.0.1:$port

start_server() {
  setsid taskset -c 1 "$root/.venv/bin/mlflow" server --host 127.0.0.1 --port "$port" --workers 1 \
    --backend-store-uri "sqlite:///$work/mlflow.db" --artifacts-destination "$work/artifacts" \
    >>"$work/server.log" 2>&1 &
  server=$!
  for _ in $(seq 600); do curl -sf "$uri/health" >/dev/null && return; sleep 0.2; done
  echo "bench: mlflow server did not start; its log:" >&2; tail -20 "$work/server.log" >&2; exit 1
}

run() {  # NAME [--set ...]
  local name=$1
  shift
  taskset -c 0 "$root/$build/bin/tailor" run "$root/configs/examples/tiny-cpu.yaml" --out "$work/$name" \
    --set training.max_steps="$steps" --set checkpoint.every_steps=0 "$@" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log" >&2; exit 1; }
}

# Median and mean step_seconds of a run's metrics, the first 5 steps aside (warm-up).
stats() {
  $python - "$1" <<'PY'
import json, statistics, sys
s = [json.loads(l)["step_seconds"] for l in open(sys.argv[1]) if l.strip()][5:]
print("%.5f %.5f" % (statistics.median(s), statistics.mean(s)))
PY
}

start_server
run none
run up --set tracking.tensorboard.dir=tb --set tracking.mlflow.uri="$uri" --set tracking.mlflow.experiment=bench
(
  # The outage: from the first metrics line + 2 s, OUTAGE seconds long.
  until [[ -s $work/outage/metrics.jsonl ]]; do sleep 0.1; done
  sleep 2
  kill -9 -- "-$server"
  date +%s.%N >"$work/down_at"
  sleep "$outage"
  start_server
  date +%s.%N >"$work/up_at"
  echo "$server" >"$work/server_pid"
) &
watcher=$!
run outage --set tracking.mlflow.uri="$uri" --set tracking.mlflow.experiment=bench
wait "$watcher"
server=$(cat "$work/server_pid")

read -r none_median none_mean < <(stats "$work/none/metrics.jsonl")
printf '%-8s %12s %12s %8s\n' run median_s mean_s ratio
printf '%-8s %12s %12s %8s\n' none "$none_median" "$none_mean" 1.000
for name in up outage; do
  read -r median mean < <(stats "$work/$name/metrics.jsonl")
  printf '%-8s %12s %12s %8.3f\n' "$name" "$median" "$mean" "$(echo "$median / $none_median" | bc -l)"
done
echo "outage: server down $(echo "$(cat "$work/up_at") - $(cat "$work/down_at")" | bc) s (its restart included)"
echo "tracker events of the outage run:"
grep '"event":"tracker"' "$work/outage/events.jsonl" | cut -c1-200
run_id=$($python -c 'import json, sys; print(json.load(open(sys.argv[1]))["run_id"])' "$work/outage/tracking/mlflow.json")
taskset -c 1 "$python" "$root/tests/runner/tracking/tracking_check.py" mlflow "$uri" "$run_id" \
  "$work/outage/metrics.jsonl" FINISHED
