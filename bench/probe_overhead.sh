#!/usr/bin/env bash
# What strategy.probe costs: the demo job (configs/examples/tiny-cpu.yaml,
# 200 steps) trained by `tailor run` without a probe and with probe: 3, side
# by side in one run, with the probe's own seconds (its probe_done event)
# against the job's measured and predicted training time. Issue 43's goal:
# under 3 minutes or 3% of the job's predicted time. On a GPU machine,
# GPU=1 runs the same on LLAMA (a 1-8B LoRA job, default llama-3.2-1b with
# random weights) for STEPS steps. RANKS=N trains (and probes) the job on
# N ranks: each candidate is then measured by its N ranks together.
#   bench/probe_overhead.sh            the CPU demo
#   RANKS=2 bench/probe_overhead.sh    the CPU demo on two ranks
#   GPU=1 STEPS=200 bench/probe_overhead.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"
bench_init
tailor="$root/build/bin/tailor"
[[ -x $tailor ]] || { echo "bench: $tailor not built" >&2; exit 1; }
export TAILOR_CALIBRATION=none  # the same uncalibrated plan both times

if [[ ${GPU:-0} == 1 ]]; then
  spec="$work/job.yaml"
  cat > "$spec" <<YAML
apiVersion: tailor/v1
kind: TrainingJob
name: probe-bench
model: {preset: ${LLAMA:-llama-3.2-1b}, init: random}
data: {train: $root/configs/data/tiny-corpus.txt, format: text, seq_len: 1024, packing: true}
training: {global_batch_size: 16, max_steps: ${STEPS:-200}, lr: 1e-4, warmup_steps: 10}
strategy: {adapter: lora}
YAML
  set_args=()
else
  spec="$root/configs/examples/tiny-cpu.yaml"
  set_args=(--set "training.max_steps=${STEPS:-200}")
fi

[[ ${RANKS:-1} -gt 1 ]] && set_args+=(--set "resources.ranks=$RANKS")
timed_width=10
printf "%-10s %9s %11s\n" "run" "wall s" "peak RSS GB"
bench_timed plain "$tailor" run --out "$work/plain" "${set_args[@]}" "$spec"
bench_timed probe-3 "$tailor" run --out "$work/probe" "${set_args[@]}" --set strategy.probe=3 "$spec"

# The probe's own seconds and choice, and the plan's predicted training time.
read -r probe_secs chosen predicted < <("$python" - "$work/probe/events.jsonl" "$work/plain/plan.json" <<'PY'
import json, sys
done = [json.loads(l) for l in open(sys.argv[1]) if '"probe_done"' in l][-1]
plan = json.load(open(sys.argv[2]))
steps = plan["spec"]["training"]["max_steps"]
print(f'{done["seconds"]:.2f} {done["chosen"]} {plan["throughput"]["step_seconds"] * steps:.2f}')
PY
)
echo
echo "probe of 3 plans: $probe_secs s (chose plan $((chosen + 1)) of 3)"
echo "job without probe: $plain_secs s measured, $predicted s predicted (the plan's step time x steps)"
awk -v p3="$probe_3_secs" -v plain="$plain_secs" -v probe="$probe_secs" -v pred="$predicted" 'BEGIN {
  printf "overhead: %.1f s of wall time; the probe is %.1f%% of the predicted and %.1f%% of the measured job time\n",
    p3 - plain, 100 * probe / pred, 100 * probe / plain }'
