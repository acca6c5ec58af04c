#!/usr/bin/env bash
# The CPU-only build (-DTAILOR_CUDA=OFF), configured and built in its own
# folder from the same sources and .venv, then checked: no CUDA library or
# header in it, `--device cuda` refused with the reason, and the demo job
# trains a few steps on the CPU.
#   tests/runner/build_without_cuda.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=${1:?source dir}
build=${2:?build dir}
fail() { echo "build_without_cuda: FAIL: $*" >&2; exit 1; }

# No toolkit in sight: nvcc off PATH (TAILOR_CUDA=OFF must not look anyway).
PATH=$(tr ':' '\n' <<<"$PATH" | grep -v cuda | paste -sd:)
cmake -S "$src" -B "$build" -G Ninja -DTAILOR_CUDA=OFF -DTAILOR_BUILD_TESTS=OFF >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; fail "configure"; }
cmake --build "$build" --target tailor-runner tailor -- -j"$(nproc)" >"$build.build.log" 2>&1 ||
  { tail -50 "$build.build.log"; fail "build"; }
runner="$build/bin/tailor-runner"

cuda_flags='TAILOR_CUDA=1|USE_C10D_NCCL|cuda[^ ]*/include'
grep -Eq "$cuda_flags" "$build/compile_commands.json" &&
  fail "a compile command uses CUDA: $(grep -Eo -m1 "$cuda_flags" "$build/compile_commands.json")"
readelf -d "$runner" | grep -E 'NEEDED.*(torch_cuda|c10_cuda)' && fail "tailor-runner links a CUDA library"
probe=$("$runner" --probe)
grep -q '"cuda_build": false' <<<"$probe" || fail "probe: $probe"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/bin/tailor" plan --output json --set training.max_steps=3 "$src/configs/examples/tiny-cpu.yaml" >"$work/plan.json"
set +e
msg=$("$runner" --plan "$work/plan.json" --out "$work/refused" --device cuda --quiet 2>&1)
code=$?
set -e
[[ $code == 2 ]] || fail "--device cuda exited $code, want 2: $msg"
grep -q "without its CUDA path" <<<"$msg" || fail "--device cuda did not say why: $msg"

"$runner" --plan "$work/plan.json" --out "$work/out" --quiet --cache-dir "$work/cache" || fail "training exited $?"
[[ $(wc -l <"$work/out/metrics.jsonl") == 3 ]] || fail "expected 3 steps in metrics.jsonl"
echo "build_without_cuda: ok (CPU-only tailor-runner builds, refuses --device cuda, trains)"
