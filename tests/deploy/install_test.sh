#!/usr/bin/env bash
# `cmake --install` into a fresh prefix, then the installed programs used
# from there and nowhere else: tailor plans an installed example, tailord
# (started from the prefix, the runner left to find beside it) trains the
# installed demo job for a few steps to success, and the installed files
# include the unit, the dashboards and the docs.
#   tests/deploy/install_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
work=$(mktemp -d)
daemon=""
trap '[[ -n $daemon ]] && kill "$daemon" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >"$work/install.log" || fail "cmake --install: $(cat "$work/install.log")"
# A CUDA build's tailor-runner runs one of its two builds, installed beside it.
builds=()
[[ -x $build/bin/tailor-runner-cuda ]] && builds=(bin/tailor-runner-cuda bin/tailor-runner-cpu)
for f in bin/tailord bin/tailor bin/tailor-runner "${builds[@]}" lib/libtailor_sentencepiece.so share/tailor/configs/examples/tiny-cpu.yaml \
  share/tailor/deploy/systemd/tailord.service share/tailor/deploy/prometheus/alerts.yml \
  share/tailor/deploy/grafana/dashboards/job.json share/doc/tailor/README.md share/doc/tailor/openapi.yaml; do
  [[ -e $prefix/$f ]] || fail "$f was not installed"
done
[[ ! -e $prefix/share/tailor/deploy/grafana/generate.py ]] || fail "the dashboards' generator was installed"
# The runner dlopens the SentencePiece module from bin/../lib; it must load
# there with what it links.
python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "$prefix/lib/libtailor_sentencepiece.so" ||
  fail "the installed SentencePiece module does not load"
echo "installed $(find "$prefix" -type f | wc -l) files"

# Nothing of the build tree on the way: run from elsewhere, PATH without it.
cd "$work"
export PATH=/usr/bin:/bin TAILOR_RUNNER=
"$prefix/bin/tailor" --version
"$prefix/bin/tailor" plan "$prefix/share/tailor/configs/examples/tiny-cpu.yaml" >"$work/plan.txt" ||
  fail "the installed tailor could not plan the installed demo spec: $(cat "$work/plan.txt")"

OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE "$prefix/bin/tailord" --data-dir "$work/data" --listen 127.0.0.1:0 \
  --spec-root "$prefix/share/tailor/configs" --poll-interval 0.1 >"$work/tailord.log" 2>&1 &
daemon=$!
for _ in $(seq 200); do [[ -s $work/data/address ]] && break; kill -0 "$daemon" 2>/dev/null || break; sleep 0.05; done
[[ -s $work/data/address ]] || fail "the installed tailord did not start: $(cat "$work/tailord.log")"
export TAILOR_ADDR=$(cat "$work/data/address") TAILOR_TOKEN=$(cat "$work/data/token")
"$prefix/bin/tailor" submit --wait --set training.max_steps=3 --set checkpoint.every_steps=3 \
  "$prefix/share/tailor/configs/examples/tiny-cpu.yaml" >"$work/submit.txt" 2>&1 ||
  fail "the demo job did not succeed through the installed tailord and runner: $(cat "$work/submit.txt"; cat "$work/tailord.log")"
tail -n 3 "$work/submit.txt"
kill "$daemon"
wait "$daemon" || fail "the installed tailord did not stop cleanly"
daemon=""
echo "install: ok"
