#!/usr/bin/env bash
# `make demo` installs only what building and running Tailor needs; the
# tests' peers (Slurm, podman, Chromium, Prometheus, GoogleTest, ...) come
# with `make test` (scripts/setup without --demo), and the benches' tools
# with --bench on top of those.
set -euo pipefail
setup="$(dirname "$0")/../scripts/setup"
fail() { echo "setup_packages: $*" >&2; exit 1; }

demo=$("$setup" --list --demo)
test=$("$setup" --list)
bench=$("$setup" --list --bench)
has() { grep -qx "$2" <<<"$1"; }

for p in build-essential cmake ninja-build libyaml-cpp-dev libboost1.81-dev prometheus-cpp-dev libsqlite3-dev python3-venv; do
  has "$demo" "$p" || fail "the demo must install $p"
  has "$test" "$p" || fail "the tests must install $p"
done
for p in slurm-wlm munge podman debootstrap chromium chromium-driver prometheus libgtest-dev clang; do
  has "$demo" "$p" && fail "the demo installs $p, which only the tests need"
  has "$test" "$p" || fail "the tests must install $p"
done
for p in hyperfine wrk; do
  has "$test" "$p" && fail "the tests install $p, which only the benches need"
  has "$bench" "$p" || fail "--bench must install $p"
done
has "$bench" slurm-wlm || fail "--bench must keep the tests' packages"
"$setup" --bogus 2>/dev/null && fail "an unknown option was accepted"
echo "setup_packages: ok ($(wc -l <<<"$demo") packages for the demo, $(wc -l <<<"$test") for the tests)"
