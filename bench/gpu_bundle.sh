#!/usr/bin/env bash
# Here, before a session's GPU checks: packs what bench/gpu_session.sh needs
# on a lent GPU machine into .gpu/ (ignored; the device tool's `carry`).
# That machine is bare: no build tools for this project, no Debian
# libraries, its own torch. So the bundle holds the stripped binaries
# (tailor, tailor-runner, runner_test), every shared library they need that
# is neither glibc's, the compiler's runtime nor LibTorch (the machine's own
# torch is used, the same 2.11), the PyTorch anchor from ../shared, and the
# paths and commit they were built from. xz keeps it near 20 MB of the
# tool's 64 MiB.
#   bench/gpu_bundle.sh [BUILD_DIR]      (ANCHOR= another anchor) then, with the device tool:
#   run(command="bash bench/gpu_session.sh", carry=[".gpu"], timeout_s=600)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
bins=("$build/bin/tailor" "$build/bin/tailor-runner" "$build/tests/runner_test")
for b in "${bins[@]}"; do
  [[ -x $b ]] || { echo "gpu_bundle: $b not built (ninja -C $build tailor tailor-runner runner_test)" >&2; exit 1; }
done
grep -q '^TAILOR_CUDA:BOOL=ON' "$build/CMakeCache.txt" ||
  { echo "gpu_bundle: $build is not a CUDA build (TAILOR_CUDA=OFF)" >&2; exit 1; }
anchor=${ANCHOR:-$root/../shared/bench/anchor_pytorch_llama.py}
[[ -f $anchor ]] || { echo "gpu_bundle: $anchor not found" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/tests" "$stage/lib"
strip -o "$stage/bin/tailor" "$build/bin/tailor"
strip -o "$stage/bin/tailor-runner" "$build/bin/tailor-runner"
strip -o "$stage/tests/runner_test" "$build/tests/runner_test"
cp "$anchor" "$stage/"
# Libraries resolved here that the GPU machine may lack or hold in another
# version; glibc, libstdc++/libgcc_s and LibTorch's come from that machine.
ldd "${bins[@]}" | awk '/=> \// { print $3 }' | sort -u |
  grep -v -E '/torch/lib/|/(libc|libm|libdl|librt|libpthread|libutil|libresolv|libstdc\+\+|libgcc_s)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
{
  echo "source_dir=$root"
  echo "binary_dir=$build"
  echo "commit=$(git -C "$root" rev-parse HEAD)"
  echo "torch=$("$root/.venv/bin/python" -c 'import torch; print(torch.__version__)')"
} > "$stage/built_from"

mkdir -p "$root/.gpu"
tar -C "$stage" -cJf "$root/.gpu/bundle.tar.xz.part" .
mv "$root/.gpu/bundle.tar.xz.part" "$root/.gpu/bundle.tar.xz"
size=$(stat -c %s "$root/.gpu/bundle.tar.xz")
echo "gpu_bundle: .gpu/bundle.tar.xz, $((size / 1048576)) MiB ($(find "$stage/lib" -type f | wc -l) libraries), commit $(git -C "$root" rev-parse --short HEAD)"
# The tool's limit is 64 MiB for the tree and everything carried.
((size < 48 * 1048576)) || { echo "gpu_bundle: over 48 MiB: too large to carry beside the tree" >&2; exit 1; }
