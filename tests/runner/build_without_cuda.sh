#!/usr/bin/env bash
# The runner without its CUDA path, checked from a CUDA build: configuring
# with -DTAILOR_CUDA=OFF and no toolkit on PATH works; every CUDA-neutral
# torch source of the runner preprocesses to the same text under the
# CPU-only flags as under this build's, so its object serves both variants;
# tailor-runner-cpu (the sources that read TAILOR_CUDA compiled again with
# TAILOR_CUDA=0, linked with the neutral objects against LibTorch's CPU
# libraries, the build that tailor-runner runs where no NVIDIA driver loads)
# builds with no CUDA flag or library, refuses `--device cuda` with the
# reason, and trains the demo job a few steps on the CPU.
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

# The neutral sources, preprocessed as this build compiles them and as the
# CPU-only variant would (tailor_runner_torch_objects_cpu: never built, its
# commands are the CPU-only flags). Equal text, equal objects. Without
# -fpch-preprocess, -E reads the precompiled header's text. Under unity
# builds (TAILOR_UNITY_BUILD) a batch is preprocessed whole, LibTorch's
# headers once for its sources; a batch that differs is preprocessed again
# a source at a time, so that the message names the source.
sources_of() {  # SOURCE: the sources a unity batch includes, or SOURCE itself
  case $1 in
    */Unity/unity_*) sed -nE 's/^#include "(.+)"$/\1/p' "$1" ;;
    *) echo "$1" ;;
  esac
}
commands_of() {  # TARGET: its compile commands
  ninja -C "$build" -t commands "$1" | grep -E " -c [^ ]+\.(cpp|cxx)$" | grep -F "/$1.dir/"
}
preprocess_all() {  # TARGET OUT_DIR [each]: one text per command, or per source with "each"
  mkdir -p "$2"
  local i=0 cmd batch source
  while read -r cmd; do
    batch=${cmd##* -c }
    while read -r source; do
      { echo "cd '$build' || exit 1"
        sed -E 's/ -MD / /; s/ -MT [^ ]+ / /; s/ -MF [^ ]+ / /; s# -o [^ ]+ # -E -P -o '"$2/$(basename "$source").i"' #; s# -c [^ ]+$# -c '"$source"'#' <<<"$cmd"
      } >"$2/$i.sh"
      i=$((i + 1))
    done < <(if [[ ${3:-} == each ]]; then cd "$build" && sources_of "$batch"; else echo "$batch"; fi)
  done < <(commands_of "$1")
  ((i > 0)) || fail "no compile commands for $1"
  printf '%s\n' "$2"/*.sh | xargs -P "$(nproc)" -n 1 sh || fail "preprocessing $1's sources"
}
compare_all() {  # CUDA_DIR CPU_DIR: prints the names whose texts differ
  local cuda_pp name cpu_pp
  for cuda_pp in "$1"/*.i; do
    name=$(basename "$cuda_pp")
    cpu_pp="$2/$name"
    [[ -f $cpu_pp ]] || fail "${name%.i} has no CPU-only compile command"
    # The whole of <torch/torch.h> is in the text, so the header was read.
    (($(stat -c %s "$cuda_pp") > 1000000)) || fail "${name%.i}: the preprocessed text is too short to hold LibTorch"
    cmp -s "$cuda_pp" "$cpu_pp" || echo "$name"
  done
}
preprocess_all tailor_runner_torch_objects "$work/pp-cuda"
preprocess_all tailor_runner_torch_objects_cpu "$work/pp-cpu"
differ=$(compare_all "$work/pp-cuda" "$work/pp-cpu")
if [[ -n $differ ]]; then
  preprocess_all tailor_runner_torch_objects "$work/each-cuda" each
  preprocess_all tailor_runner_torch_objects_cpu "$work/each-cpu" each
  name=$(compare_all "$work/each-cuda" "$work/each-cpu" | head -1)
  [[ -n $name ]] || fail "${differ%%$'\n'*} preprocesses differently with TAILOR_CUDA=0, though each of its sources alike"
  fail "runner/torch/${name%.i} reads CUDA's flags (it preprocesses differently with TAILOR_CUDA=0 or without CUDA's defines): list it in TAILOR_RUNNER_TORCH_CUDA_SOURCES (runner/CMakeLists.txt). First difference: $(diff "$work/each-cuda/$name" "$work/each-cpu/$name" | head -4)"
fi
n=0
while read -r cmd; do
  n=$((n + $(cd "$build" && sources_of "${cmd##* -c }" | wc -l)))
done < <(commands_of tailor_runner_torch_objects)
rm -rf "$work/pp-cuda" "$work/pp-cpu"
echo "build_without_cuda: $n CUDA-neutral sources preprocess alike with and without CUDA"

cmake --build "$build" --target tailor-runner-cpu >"$work/build.log" 2>&1 || { tail -50 "$work/build.log"; fail "build"; }
# The variant's own compile and link commands (the neutral objects are this
# build's, checked above).
commands=$(ninja -C "$build" -t commands tailor-runner-cpu | grep -E "/(tailor_runner_torch_cpu|tailor-runner-cpu)\.dir/|-o bin/tailor-runner-cpu")
[[ -n $commands ]] || fail "no commands of tailor-runner-cpu's own"
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
