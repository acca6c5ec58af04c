#!/usr/bin/env bash
# Tailor's image built and run for real, with podman: a Debian 12 base made
# here by debootstrap from Debian's mirror (no registry is reachable; it is
# named as the Containerfile's BASE), deploy/container/build-image on this
# build, then the container started as Kubernetes' Deployment runs it
# (user 10001, read-only root, no capabilities, no new privileges, a
# writable /tmp and data volume) with a 3 GiB memory limit:
#   - every program and Tailor's own library load there (ldd: nothing missing),
#   - tailord answers /healthz by the container's address as Host, and the
#     image's HEALTHCHECK passes,
#   - /v1/hardware reports the 3 GiB limit as the host memory it plans for,
#   - `tailor submit --wait` inside the container trains the demo job,
#   - `podman stop` (SIGTERM to tailord as PID 1) ends it with status 0.
# Skipped (77) without root, podman or debootstrap, where podman cannot
# run even the bare base image, or where the disk lacks the room the build
# takes (this machine's limits). Everything, images included, lives in a
# temporary podman store removed at the end.
#   tests/deploy/container_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || skip "podman's rootful store needs root"
command -v podman >/dev/null || skip "podman is not installed (scripts/setup installs it)"
command -v debootstrap >/dev/null || skip "debootstrap is not installed (scripts/setup installs it)"

work=$(mktemp -d -t tailor-container-XXXXXX)
name=tailor-test-$$
# No default ulimits and runc with cgroupfs: what these machines' sandbox
# allows (crun refuses its hybrid cgroups; raising RLIMIT_NOFILE is denied).
cat >"$work/containers.conf" <<'EOF'
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
EOF
export CONTAINERS_CONF=$work/containers.conf
pm() { podman --root "$work/storage" --runroot "$work/run" "$@"; }
cleanup() {
  pm rm -f "$name" >/dev/null 2>&1 || true
  pm rmi -a -f >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
t0=$SECONDS

# At its peak the build holds about four copies of the staged files on this
# disk (measured with podman's overlay store: 15.7 GB for 3.8 GB staged as
# hard links; 19.5 GB when the stage was a copy). Other tests share the disk
# and a full one fails them too (it did in CI), so the build starts only
# with that room and 2 GiB to spare, and otherwise says what is missing.
# (Where the stage cannot be hard links, its copy is counted as well.)
free_mib() { df -Pm "$work" | awk 'NR == 2 { print $4 }'; }
free=$(free_mib)
"$src/deploy/container/build-image" --build "$build" --stage "$work/stage" --stage-only >"$work/stage.log" 2>&1 ||
  fail "build-image --stage-only: $(tail -20 "$work/stage.log")"
staged=$(du -sm "$work/stage" | cut -f1)
stage_cost=$((free - $(free_mib)))
rm -rf "$work/stage"
need=$((staged * 9 / 2 + (stage_cost > 0 ? stage_cost : 0) + 2048))
((free >= need)) || skip "building the image needs about $need MiB free on $work's file system (${staged} MiB staged), and $free MiB are"
echo "disk: $free MiB free, about $need MiB needed (${staged} MiB staged, $stage_cost MiB of it copied)"

echo "== a Debian 12 base image (debootstrap --variant=minbase bookworm)"
mirror=$(sed -n 's#^URIs: \(http[^ ]*debian\)$#\1#p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
debootstrap --variant=minbase bookworm "$work/base" "${mirror:-http://deb.debian.org/debian}" >"$work/debootstrap.log" 2>&1 ||
  fail "debootstrap: $(tail -5 "$work/debootstrap.log")"
tar -C "$work/base" -c . | pm import - localhost/tailor-test-base:bookworm >/dev/null
rm -rf "$work/base"
echo "base image in $((SECONDS - t0)) s"
# Where this machine cannot run a container at all (no namespaces, no
# network for it), nothing of Tailor's can be tested here: skip, saying why.
if ! out=$(pm run --rm --no-healthcheck -p 127.0.0.1::9 localhost/tailor-test-base:bookworm true 2>&1); then
  skip "podman cannot run a container on this machine: $out"
fi

echo "== deploy/container/build-image"
t1=$SECONDS
# build-image finds the engine on PATH; this store and its settings go with it.
mkdir -p "$work/bin"
printf '#!/bin/sh\nexec podman --root "%s" --runroot "%s" "$@"\n' "$work/storage" "$work/run" >"$work/bin/podman"
chmod +x "$work/bin/podman"
"$src/deploy/container/build-image" --build "$build" --engine "$work/bin/podman" --tag localhost/tailor:test \
  --base localhost/tailor-test-base:bookworm --stage "$work/stage" >"$work/build.log" 2>&1 ||
  fail "build-image: $(tail -20 "$work/build.log")"
rm -rf "$work/stage"
size=$(pm image inspect localhost/tailor:test --format '{{.Size}}')
echo "image built in $((SECONDS - t1)) s, $((size / 1024 / 1024)) MiB"
[[ $(pm image inspect localhost/tailor:test --format '{{.Config.User}}') == 10001:10001 ]] || fail "the image does not run as 10001"

echo "== ldd in the image: nothing missing"
for f in /usr/local/bin/tailord /usr/local/bin/tailor /usr/local/bin/tailor-runner /usr/local/bin/tailor-runner-cuda \
  /usr/local/bin/tailor-runner-cpu /usr/local/lib/libtailor_sentencepiece.so; do
  out=$(pm run --rm --no-healthcheck --entrypoint ldd localhost/tailor:test "$f") || fail "ldd $f: $out"
  ! grep -q "not found" <<<"$out" || fail "$f in the image misses: $(grep "not found" <<<"$out")"
done
echo "ok"

echo "== the container as the Deployment runs it"
mkdir -p "$work/data" && chown 10001:10001 "$work/data"
pm run -d --name "$name" --memory 3g --read-only --tmpfs /tmp --user 10001:10001 --cap-drop ALL \
  --security-opt no-new-privileges -v "$work/data:/var/lib/tailord" -p 127.0.0.1::8470 \
  -e OMP_NUM_THREADS=1 localhost/tailor:test >/dev/null 2>"$work/run.err" ||
  fail "podman run: $(cat "$work/run.err")"
# (podman logs that it cannot reach systemd to time the health check; the
# check is run by hand below.)
ip=$(pm inspect "$name" --format '{{.NetworkSettings.IPAddress}}')
published=$(pm port "$name" 8470 | head -1)
for _ in $(seq 300); do
  curl -sf -o /dev/null "http://$published/healthz" && break
  [[ $(pm inspect "$name" --format '{{.State.Running}}') == true ]] || fail "tailord exited: $(pm logs "$name" 2>&1 | tail -20)"
  sleep 0.1
done
curl -sf -o /dev/null "http://$published/healthz" || fail "tailord did not answer on $published: $(pm logs "$name" 2>&1 | tail -20)"
# kubelet and Prometheus name the pod by its address.
[[ -n $ip ]] || fail "the container has no address"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Host: $ip:8470" "http://$published/healthz")
[[ $code == 200 ]] || fail "/healthz with the container's address ($ip:8470) as Host got $code"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Host: attacker.example:8470" "http://$published/healthz")
[[ $code == 403 ]] || fail "/healthz with another name as Host got $code"
# The image's own health check (podman runs it on request here: no systemd
# to time it).
pm healthcheck run "$name" >/dev/null 2>&1 || fail "the image's HEALTHCHECK fails against a healthy tailord"
token=$(cat "$work/data/token")
hw=$(curl -sf -H "Authorization: Bearer $token" "http://$published/v1/hardware") || fail "/v1/hardware"
memory=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["host_memory_bytes"])' "$hw")
[[ $memory == $((3 * 1024 * 1024 * 1024)) ]] || fail "tailord plans for $memory bytes of host memory, not the 3 GiB limit: $hw"
echo "ok: $published, Host $ip:8470 accepted, host memory = the 3 GiB limit"

echo "== tailor submit --wait inside the container: the demo job"
t2=$SECONDS
pm exec "$name" tailor submit --wait --data-dir /var/lib/tailord --set training.max_steps=5 --set checkpoint.every_steps=5 \
  /srv/tailor/examples/tiny-cpu.yaml >"$work/submit.txt" 2>&1 ||
  fail "the demo job did not succeed in the container: $(tail -20 "$work/submit.txt"; pm logs "$name" 2>&1 | tail -20)"
tail -n 2 "$work/submit.txt"
echo "trained in $((SECONDS - t2)) s"

echo "== podman stop: SIGTERM to tailord, status 0"
pm stop -t 30 "$name" >/dev/null
status=$(pm inspect "$name" --format '{{.State.ExitCode}}')
[[ $status == 0 ]] || fail "tailord exited with $status on SIGTERM: $(pm logs "$name" 2>&1 | tail -20)"
echo "container: ok in $((SECONDS - t0)) s"
