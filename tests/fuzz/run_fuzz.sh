#!/usr/bin/env bash
# Builds the spec-parser fuzzer with clang (libFuzzer + ASan/LSan + UBSan)
# in BUILD_DIR and runs it for SECONDS on a corpus seeded from the test
# cases and examples. Fails on any crash, leak, sanitizer report or hang.
#   tests/fuzz/run_fuzz.sh BUILD_DIR SECONDS
set -euo pipefail
build=${1:?build dir}
seconds=${2:-60}
src=$(cd "$(dirname "$0")/../.." && pwd)

flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DTAILOR_FUZZ=ON -DTAILOR_BUILD_TESTS=OFF -DTAILOR_BUILD_RUNNER=OFF >/dev/null
cmake --build "$build" --target spec_parser_fuzz -- -j"$(nproc)" >/dev/null

corpus="$build/corpus"
mkdir -p "$corpus"
cp -n "$src"/tests/dsl/cases/*.yaml "$src"/configs/examples/*.yaml "$corpus"/ 2>/dev/null || true
echo "fuzz: running spec_parser_fuzz for ${seconds}s"
# -timeout: an input taking over 10 s is a hang; -rss_limit_mb: memory blow-up.
"$build/bin/spec_parser_fuzz" "$corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -max_len=16384 -print_final_stats=1 -artifact_prefix="$build/" 2>&1 | tail -20
echo "fuzz: no crash, leak or hang in ${seconds}s"
