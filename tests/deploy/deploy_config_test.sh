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
echo "deploy: ok"
