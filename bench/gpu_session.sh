#!/usr/bin/env bash
# On a lent GPU machine, from the repository root, with .gpu/ carried
# (bench/gpu_bundle.sh made it here): every GPU check issues 42 and 43
# wait for, in one call that fits the tool's 10 minutes, each part under a
# limit of its own so that one slow part leaves time for the rest, and each
# part's log written to $OUT as it runs (what a killed call still returns).
#   1. tests  runner_test's CUDA cases: the own kernels against ATen, the
#             memory meter, NCCL, training on cuda:0 (runner/README.md's
#             verification table reads from this);
#   2. kernels  bench/gpu_kernels.sh: the same plan with and without the
#             kernels, tokens/s and losses;
#   3. speed  bench/gpu_runner_vs_pytorch.sh: tokens/s and MFU against a
#             plain PyTorch loop (bf16);
#   4. probe  GPU=1 bench/probe_overhead.sh: strategy.probe's cost on a 1B
#             LoRA job.
# Not in the default list (about 5 minutes alone), for a call of its own:
#   long      bench/gpu_activation_offload.sh on Llama 3.1 8B's shape, QLoRA
#             at 32k tokens with and without activation offloading (issue
#             42's long-context row: under 24 GiB).
#   bash bench/gpu_session.sh          PARTS="tests kernels speed probe"
#   LIMITS="tests=100 kernels=200 speed=130 probe=120 long=420" (seconds)
# Off a GPU machine it stops after the set-up, saying why; GPU_SESSION_DRY=1
# goes through the set-up and the tests alone (they report SKIPPED), which
# is how it is checked where there is no GPU.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/.gpu/out}
mkdir -p "$out"
bundle="$root/.gpu/bundle.tar.xz"
[[ -f $bundle ]] || { echo "gpu_session: $bundle missing: run bench/gpu_bundle.sh here and carry .gpu" >&2; exit 1; }
say() { echo "gpu_session: $*" | tee -a "$out/session.log"; }

# The bundle: binaries into build/, libraries beside them, and the paths
# they were built with (tests read TAILOR_SOURCE_DIR and TAILOR_BINARY_DIR)
# made to lead here.
unpacked=$(mktemp -d)
# (tarfile's "data" filter where Python has it: no warning on 3.12 and later.)
python3 -c 'import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    t.extractall(sys.argv[2], **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))' "$bundle" "$unpacked" ||
  { echo "gpu_session: could not unpack $bundle" >&2; exit 1; }
built() { sed -n "s/^$1=//p" "$unpacked/built_from"; }
source_dir=$(built source_dir)
binary_dir=$(built binary_dir)
commit=$(built commit)
torch=$(built torch)
mkdir -p "$root/build/bin" "$root/build/tests"
cp "$unpacked"/bin/* "$root/build/bin/"
cp "$unpacked/tests/runner_test" "$root/build/tests/"
for dir in "$source_dir" "$binary_dir"; do
  if [[ $dir != "$root" && $dir != "$root/build" && ! -e $dir ]]; then
    mkdir -p "$(dirname "$dir")"
    if [[ $dir == "$binary_dir" ]]; then ln -s "$root/build" "$dir"; else ln -s "$root" "$dir"; fi
  fi
done
# The bench scripts' Python (.venv) and anchor (../shared/bench) where this
# machine has neither: its own python3, the bundle's copy of the anchor.
if [[ ! -x $root/.venv/bin/python ]]; then
  venv=$(readlink "$root/.venv" || true)
  [[ -n $venv && $venv == /* ]] || { rm -f "$root/.venv"; venv="$root/.venv"; }
  mkdir -p "$venv/bin"
  ln -sf "$(command -v python3)" "$venv/bin/python"
  [[ $venv == "$root/.venv" ]] || ln -sfn "$venv" "$root/.venv"
fi
mkdir -p "$root/../shared/bench"
[[ -f $root/../shared/bench/anchor_pytorch_llama.py ]] || cp "$unpacked/anchor_pytorch_llama.py" "$root/../shared/bench/"
torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))') ||
  { echo "gpu_session: python3 has no torch" >&2; exit 1; }
mkdir -p "$root/build/lib"
cp "$unpacked"/lib/* "$root/build/lib/" 2>/dev/null || true
export LD_LIBRARY_PATH="$torch_lib:$root/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TAILOR_CALIBRATION=none

here=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
say "binaries of $commit (torch $torch), tree at $here, torch here $(python3 -c 'import torch; print(torch.__version__)')"
[[ $here == "$commit" || $here == unknown ]] || say "warning: the binaries were built from another commit"
gpu=$(python3 -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>/dev/null)
"$root/build/bin/tailor-runner" --help >/dev/null 2>&1 || { say "tailor-runner does not start here:"; "$root/build/bin/tailor-runner" --help 2>&1 | head -5 | tee -a "$out/session.log"; exit 1; }
if [[ -z $gpu ]]; then
  [[ ${GPU_SESSION_DRY:-} == 1 ]] || { say "no CUDA GPU visible: nothing to measure"; exit 1; }
  say "no GPU (GPU_SESSION_DRY=1): the set-up and the tests alone"
  PARTS=tests
else
  say "GPU: $gpu"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | tee -a "$out/session.log"
fi

declare -A limit=([tests]=100 [kernels]=200 [speed]=130 [probe]=120 [long]=420)
for kv in ${LIMITS:-}; do limit[${kv%%=*}]=${kv#*=}; done
failed=0
part() {  # NAME COMMAND...: runs under its limit, its log in $OUT/NAME.log
  local name=$1 start rc
  shift
  start=$(date +%s)
  say "== $name (at most ${limit[$name]} s)"
  timeout --kill-after=10 "${limit[$name]}" "$@" > "$out/$name.log" 2>&1
  rc=$?
  tail -40 "$out/$name.log"
  say "== $name: exit $rc after $(($(date +%s) - start)) s$([[ $rc == 124 ]] && echo ' (its limit)')"
  [[ $rc == 0 ]] || failed=1
}
for p in ${PARTS:-tests kernels speed probe}; do
  case $p in
    tests)
      part tests "$root/build/tests/runner_test" --gtest_brief=0 \
        --gtest_filter='*Cuda*:*Gpu*:*Nccl*:Nf4CudaKernelTest.*:KernelSelectionTest.*:TrackingAllocatorTest.Pinned*' ;;
    kernels)
      part kernels env SKIP_TESTS=1 STEPS="${KERNEL_STEPS:-6}" PYTHON=python3 \
        CASES="${KERNEL_CASES:-llama:lora llama:qlora gemma:lora}" bash "$root/bench/gpu_kernels.sh" "$root/build" ;;
    speed)
      part speed env STEPS="${SPEED_STEPS:-12}" PRECISIONS=bf16 PYTHON=python3 \
        bash "$root/bench/gpu_runner_vs_pytorch.sh" "$root/build" ;;
    probe)
      part probe env GPU=1 STEPS="${PROBE_STEPS:-60}" bash "$root/bench/probe_overhead.sh" ;;
    long)
      part long env STEPS="${LONG_STEPS:-3}" PYTHON=python3 MODEL="32 4096 32 8 14336 128256" \
        CASES="${LONG_CASES:-32768 qlora}" bash "$root/bench/gpu_activation_offload.sh" "$root/build/bin" ;;
    *) say "unknown part $p (tests, kernels, speed, probe, long)"; failed=1 ;;
  esac
done
exit $failed
