#!/usr/bin/env bash
# The runner without its CUDA path, checked from a CUDA build: configuring
# with -DTAILOR_CUDA=OFF and no toolkit on PATH works; tailor-runner-cpu
# (the runner's torch sources compiled again with TAILOR_CUDA=0 against
# LibTorch's CPU libraries, over this build's other libraries) builds with
# no CUDA flag or library, refuses `--device cuda` with the reason, and
# trains the demo job a few steps on the CPU. Only the runner's torch
# sources are compiled twice: the rest of a second build proves nothing new.
#   tests/runner/build_without_cuda.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=${1:?source dir}
build=${2:?build dir}
fail() { echo "build_without_cuda: FAIL: $*" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Configure alone, with no toolkit in sight (nvcc off PATH): TAILOR_CUDA=OFF
# must not look for it, and no compile command may use it.
(
  PATH=$(tr ':' '\n' <<<"$PATH" | grep -v cuda | paste -sd:)
  cmake -S "$src" -B "$work/configure" -G Ninja -DTAILOR_CUDA=OFF -DTAILOR_BUILD_TESTS=OFF \
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >"$work/configure.log" 2>&1
) || { cat "$work/configure.log"; fail "configure with TAILOR_CUDA=OFF"; }
cuda_flags='TAILOR_CUDA=1|USE_C10D_NCCL|cuda[^ ]*/include'
grep -Eq "$cuda_flags" "$work/configure/compile_commands.json" &&
  fail "a CPU-only compile command uses CUDA: $(grep -Eo -m1 "$cuda_flags" "$work/configure/compile_commands.json")"

cmake --build "$build" --target tailor-runner-cpu >"$work/build.log" 2>&1 || { tail -50 "$work/build.log"; fail "build"; }
commands=$(ninja -C "$build" -t commands tailor-runner-cpu)
grep -Eq "$cuda_flags" <<<"$commands" && fail "a compile command of tailor-runner-cpu uses CUDA: $(grep -Eo -m1 "$cuda_flags" <<<"$commands")"
runner="$build/bin/tailor-runner-cpu"
readelf -d "$runner" | grep -E 'NEEDED.*(torch_cuda|c10_cuda)' && fail "tailor-runner-cpu links a CUDA library"
probe=$("$runner" --probe)
grep -q '"cuda_build": false' <<<"$probe" || fail "probe: $probe"

"$build/bin/tailor" plan --output json --set training.max_steps=3 "$src/configs/examples/tiny-cpu.yaml" >"$work/plan.json"
set +e
msg=$("$runner" --plan "$work/plan.json" --out "$work/refused" --device cuda --quiet 2>&1)
code=$?
set -e
[[ $code == 2 ]] || fail "--device cuda exited $code, want 2: $msg"
grep -q "without its CUDA path" <<<"$msg" || fail "--device cuda did not say why: $msg"

"$runner" --plan "$work/plan.json" --out "$work/out" --quiet --cache-dir "$work/cache" || fail "training exited $?"
[[ $(wc -l <"$work/out/metrics.jsonl") == 3 ]] || fail "expected 3 steps in metrics.jsonl"
echo "build_without_cuda: ok (configures without the toolkit; CPU-only tailor-runner builds, refuses --device cuda, trains)"
