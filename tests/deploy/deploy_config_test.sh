#!/usr/bin/env bash
# deploy/ checked by the tools that will read it: promtool (the scrape
# config, the alerting rules and their unit tests), systemd-analyze (the
# unit, pointed at the built tailord), tailord itself (the unit's config
# file), and the dashboards: the committed JSON is what
# deploy/grafana/generate.py writes, and Grafana's model decodes it.
#   tests/deploy/deploy_config_test.sh BUILD_DIR SOURCE_DIR PYTHON
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
python=$3
work=$(mktemp -d)
daemon=""
trap '[[ -n $daemon ]] && kill "$daemon" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== promtool check config / check rules / test rules"
promtool check config "$src/deploy/prometheus/prometheus.yml"
promtool check rules "$src/deploy/prometheus/alerts.yml"
(cd "$src/deploy/prometheus" && promtool test rules alerts_test.yml)

echo "== systemd-analyze verify deploy/systemd/tailord.service"
# verify exits 0 on unknown keys and bad values (it only warns), so any
# word it says is a failure.
sed "s#/usr/local/bin/tailord#$build/bin/tailord#" "$src/deploy/systemd/tailord.service" >"$work/tailord.service"
said=$(systemd-analyze verify "$work/tailord.service" 2>&1) || fail "systemd-analyze verify: $said"
[[ -z $said ]] || fail "systemd-analyze verify: $said"
echo "ok"

echo "== tailord --config deploy/systemd/tailord.yaml"
# The unit's settings file, with its folders moved under $work and port 0.
mkdir -p "$work/specs"
sed -e "s#/var/lib/tailord#$work/data#" -e "s#/srv/tailor#$work/specs#" -e "s#127.0.0.1:8470#127.0.0.1:0#" \
  -e "s#/usr/local/bin/tailor-runner#$build/bin/tailor-runner#" \
  "$src/deploy/systemd/tailord.yaml" >"$work/tailord.yaml"
"$build/bin/tailord" --config "$work/tailord.yaml" >"$work/tailord.log" 2>&1 &
daemon=$!
for _ in $(seq 200); do [[ -s $work/data/address ]] && break; kill -0 "$daemon" 2>/dev/null || break; sleep 0.05; done
[[ -s $work/data/address ]] || fail "tailord did not start with the unit's config: $(cat "$work/tailord.log")"
curl -sf "http://$(cat "$work/data/address")/healthz" >/dev/null || fail "/healthz did not answer"
kill "$daemon"
wait "$daemon" || fail "tailord did not stop cleanly on SIGTERM: $(cat "$work/tailord.log")"
daemon=""
echo "ok"

echo "== tailord --config deploy/slurm/tailord.yaml (no Slurm here: unavailable, and says why)"
mkdir -p "$work/slurm-specs" "$work/slurm-bin"
sed -e "s#/shared/tailor/data#$work/slurm-data#" -e "s#/shared/tailor/specs#$work/slurm-specs#" \
  -e "s#127.0.0.1:8470#127.0.0.1:0#" -e "s#/shared/tailor/bin/tailor-runner#$build/bin/tailor-runner#" \
  "$src/deploy/slurm/tailord.yaml" >"$work/tailord-slurm.yaml"
# An empty folder for Slurm's commands: this check never asks a real cluster.
"$build/bin/tailord" --config "$work/tailord-slurm.yaml" --slurm-bin-dir "$work/slurm-bin" >"$work/tailord-slurm.log" 2>&1 &
daemon=$!
for _ in $(seq 200); do [[ -s $work/slurm-data/address ]] && break; kill -0 "$daemon" 2>/dev/null || break; sleep 0.05; done
[[ -s $work/slurm-data/address ]] || fail "tailord did not start with the Slurm config: $(cat "$work/tailord-slurm.log")"
hw=$(curl -sf -H "Authorization: Bearer $(cat "$work/slurm-data/token")" "http://$(cat "$work/slurm-data/address")/v1/hardware") ||
  fail "/v1/hardware did not answer"
"$python" -c '
import json, sys
e = json.loads(sys.argv[1])["executors"]
assert e["default"] == "auto" and e["slurm"]["configured"] and not e["slurm"]["available"], e
assert e["slurm"]["partition"] == "gpu" and "scontrol" in e["slurm"]["status"], e
' "$hw" || fail "the Slurm executor's state is not in /v1/hardware: $hw"
grep -q "Slurm executor unavailable" "$work/tailord-slurm.log" || fail "tailord did not log why Slurm is unavailable"
kill "$daemon"
wait "$daemon" || fail "tailord did not stop cleanly on SIGTERM: $(cat "$work/tailord-slurm.log")"
daemon=""
echo "ok"

echo "== deploy/grafana: generated, and decoded by Grafana's model"
"$python" "$src/deploy/grafana/generate.py" "$work/dashboards" >/dev/null
diff -r "$work/dashboards" "$src/deploy/grafana/dashboards" ||
  fail "deploy/grafana/dashboards differ from what generate.py writes: run deploy/grafana/generate.py"
"$python" "$src/tests/deploy/dashboard_model_check.py" "$src"/deploy/grafana/dashboards/*.json
# The provisioning files: Grafana's format 1, a Prometheus source, a file
# provider whose folder the README copies the dashboards to.
"$python" - "$src/deploy/grafana/provisioning" <<'PY'
import sys, yaml
root = sys.argv[1]
ds = yaml.safe_load(open(f"{root}/datasources/tailor.yaml"))
assert ds["apiVersion"] == 1 and [d["type"] for d in ds["datasources"]] == ["prometheus"], ds
dash = yaml.safe_load(open(f"{root}/dashboards/tailor.yaml"))
assert dash["apiVersion"] == 1 and dash["providers"][0]["type"] == "file", dash
assert dash["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards/tailor", dash
print("ok: grafana provisioning")
PY

# --- the container, compose and Kubernetes files ------------------------------
bin=$(dirname "$python")
# A broken copy of each file must be refused too: a checker that passes
# everything proves nothing.
refused() {  # refused NAME FILE SED-EXPRESSION COMMAND... (FILE is the command's last argument)
  local name=$1 file=$2 edit=$3
  shift 3
  sed "$edit" "$file" >"$work/broken-$name"
  cmp -s "$file" "$work/broken-$name" && fail "the broken copy of $name is not broken ($edit)"
  if "$@" "$work/broken-$name" >"$work/broken-$name.out" 2>&1; then fail "$name with '$edit' was accepted by $1"; fi
}

echo "== hadolint deploy/container/Containerfile"
"$bin/hadolint" "$src/deploy/container/Containerfile" || fail "hadolint found faults in the Containerfile"
refused Containerfile "$src/deploy/container/Containerfile" 's/^USER 10001:10001/USER root/' "$bin/hadolint"
bash -n "$src/deploy/container/build-image" || fail "build-image does not parse"
"$src/deploy/container/build-image" --help | grep -q -- "--stage-only" || fail "build-image --help"
echo "ok"

echo "== deploy/compose against the Compose specification (check-jsonschema)"
"$bin/check-jsonschema" --builtin-schema vendor.compose-spec "$src/deploy/compose/compose.yaml"
refused compose.yaml "$src/deploy/compose/compose.yaml" 's/^    restart: unless-stopped/    restarts: unless-stopped/' \
  "$bin/check-jsonschema" --builtin-schema vendor.compose-spec
mkdir -p "$work/compose-prometheus"
cp "$src/deploy/compose/prometheus.yml" "$src/deploy/prometheus/alerts.yml" "$work/compose-prometheus/"
promtool check config "$work/compose-prometheus/prometheus.yml"

echo "== deploy/kubernetes against Kubernetes' schemas (kubernetes-validate --strict)"
for f in "$src"/deploy/kubernetes/*.yaml; do
  [[ $f == */kustomization.yaml || $f == */servicemonitor.yaml ]] && continue  # no schema on PyPI: manifests_check.py
  out=$("$bin/kubernetes-validate" --strict "$f" 2>&1) || fail "$out"
  grep -q "^INFO .* passed" <<<"$out" && ! grep -q "^WARN" <<<"$out" || fail "not validated: $out"
done
refused deployment.yaml "$src/deploy/kubernetes/deployment.yaml" 's/readOnlyRootFilesystem/readOnlyRootFileSystem/' \
  "$bin/kubernetes-validate" --strict
echo "ok"

echo "== cross-references between the compose and Kubernetes files"
"$python" "$src/tests/deploy/manifests_check.py" "$src"

echo "== tailord with the image's and the ConfigMap's settings (on loopback here)"
# Both bind every interface in their container; here 127.0.0.1:0, with the
# rest as written. Scrapes by the names they allow are answered, another
# name is refused. (An address as Host, accepted where tailord is bound to
# every interface: AuthTest, and the container_image test.)
config_map=$work/k8s-tailord.yaml
"$python" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["data"]["tailord.yaml"])' \
  "$src/deploy/kubernetes/configmap.yaml" >"$config_map"
for settings in "$src/deploy/container/tailord.yaml" "$config_map"; do
  name=$(basename "$settings" .yaml)
  mkdir -p "$work/$name-specs"
  sed -e "s#/var/lib/tailord#$work/$name-data#" -e "s#/srv/tailor#$work/$name-specs#" -e "s#0.0.0.0:8470#127.0.0.1:0#" \
    -e "s#/usr/local/bin/tailor-runner#$build/bin/tailor-runner#" "$settings" >"$work/$name-run.yaml"
  grep -q "listen: 127.0.0.1:0" "$work/$name-run.yaml" || fail "$settings does not listen on 0.0.0.0:8470"
  "$build/bin/tailord" --config "$work/$name-run.yaml" >"$work/$name.log" 2>&1 &
  daemon=$!
  for _ in $(seq 200); do [[ -s $work/$name-data/address ]] && break; kill -0 "$daemon" 2>/dev/null || break; sleep 0.05; done
  [[ -s $work/$name-data/address ]] || fail "tailord did not start with $settings: $(cat "$work/$name.log")"
  address=$(cat "$work/$name-data/address")
  hosts=$("$python" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["allowed_hosts"].replace(",", " "))' "$settings")
  port=${address##*:}  # 8470 in the container; a free one here
  for host in $hosts; do
    code=$(curl -s -o /dev/null -w '%{http_code}' -H "Host: $host:$port" "http://$address/metrics")
    [[ $code == 200 ]] || fail "a scrape addressed to $host:$port got $code with $settings"
  done
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "Host: attacker.example:8470" "http://$address/healthz")
  [[ $code == 403 ]] || fail "Host attacker.example got $code with $settings"
  kill "$daemon"
  wait "$daemon" || fail "tailord did not stop cleanly with $settings: $(cat "$work/$name.log")"
  daemon=""
done
echo "ok"
echo "deploy: ok"
