# Sourced by the tailord benches (daemon_http.sh, daemon_ingest.sh,
# daemon_soak.sh): a tailord of the build on an ephemeral loopback port with
# its data in a fresh folder, stopped and removed on exit.

# tailord_start ROOT BUILD RUNNER: sets work (a new folder unless set
# already), daemon (its pid), addr, token. TAILORD_ARGS: more flags for
# tailord (e.g. "--http-threads 4").
tailord_start() {
  work=${work:-$(mktemp -d)}
  "$1/$2/bin/tailord" --data-dir "$work/data" --listen 127.0.0.1:0 --spec-root "$1/configs" \
    --runner "$3" --poll-interval 0.05 ${TAILORD_ARGS:-} >"$work/tailord.log" 2>&1 &
  daemon=$!
  trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
  for _ in $(seq 100); do [[ -s $work/data/address ]] && break; sleep 0.1; done
  [[ -s $work/data/address ]] || { echo "bench: tailord did not start; its log:" >&2; cat "$work/tailord.log" >&2; exit 1; }
  addr=$(cat "$work/data/address")
  token=$(cat "$work/data/token")
}

# demo_spec ROOT BUILD OUT [--set K=V ...]: the demo spec, resolved, one step.
demo_spec() {
  local root=$1 build=$2 out=$3
  shift 3
  "$root/$build/bin/tailor" validate --resolved --set training.max_steps=1 "$@" \
    "$root/configs/examples/tiny-cpu.yaml" 2>/dev/null | grep -v '^#' >"$out"
}
