#!/usr/bin/env python3
"""Every panel of deploy/grafana's dashboards, and every alerting rule of
deploy/prometheus, against a real Prometheus scraping a real tailord that
trains a real job.

tailord (with one declared GPU, so the GPU gauges exist) trains the demo job
with tailor-runner on this CPU; Prometheus (Debian's) scrapes it every
second and loads deploy/prometheus/alerts.yml. Once the job has stepped a
few times, each panel's PromQL (the dashboard's variables filled in: the
job's id, a rate interval) goes through Prometheus' HTTP API and must
return data; the job variable's label query must offer the job; each
alerting rule must have been evaluated without error. The job is then
cancelled.

  dashboards_test.py BUILD_DIR SOURCE_DIR
"""
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
from tailord_process import TailordProcess  # noqa: E402

RATE_INTERVAL = "30s"  # Grafana's $__rate_interval at a 1 s scrape interval, generously


def http(url, method="GET", body=None, headers=None, timeout=30):
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read().decode("utf-8")


def free_port():
    # Prometheus cannot report a port it picked itself; this one is free
    # now and bound a moment later (a retry covers losing the race).
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, predicate, seconds, processes=()):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for name, p in processes:
            if p.poll() is not None:
                sys.exit(f"FAIL: {name} exited with {p.returncode} while waiting for {what}")
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    sys.exit(f"FAIL: {what}: not within {seconds} s")


class Prometheus:
    def __init__(self, work, config_path):
        self.work, self.config_path, self.process, self.url = work, config_path, None, None

    def start(self):
        for _ in range(3):
            port = free_port()
            self.log = open(os.path.join(self.work, f"prometheus-{port}.log"), "w")
            self.process = subprocess.Popen(
                ["prometheus", f"--config.file={self.config_path}", f"--web.listen-address=127.0.0.1:{port}",
                 f"--storage.tsdb.path={os.path.join(self.work, 'tsdb')}", "--storage.tsdb.retention.time=1h"],
                stdout=self.log, stderr=subprocess.STDOUT)
            self.url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.process.poll() is None:
                try:
                    http(self.url + "/-/ready", timeout=2)
                    return
                except OSError:
                    time.sleep(0.1)
            self.stop()
        sys.exit(f"FAIL: Prometheus did not start; its log:\n{open(self.log.name).read()}")

    def query(self, expr):
        text = http(self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        return json.loads(text)

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def panel_queries(dashboard):
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def main():
    build, src = (os.path.abspath(a) for a in sys.argv[1:3])
    work = tempfile.mkdtemp(prefix="tailor-dashboards-")
    tailord = prometheus = None
    try:
        tailord = TailordProcess(build, src, work, ["--gpus", "1xA100-80GB"])
        address, token = tailord.address, tailord.token
        auth = {"Authorization": f"Bearer {token}"}

        # The DPO example, long enough to outlast the checks (it is
        # cancelled), evaluated every other step so the eval loss has a
        # series; a DPO job has every series a supervised one has, and its
        # rewards besides.
        spec = subprocess.run(
            [os.path.join(build, "bin", "tailor"), "validate", "--resolved", "--set", "training.max_steps=100000",
             "--set", "data.eval=" + os.path.join(src, "configs", "data", "preferences.jsonl"),
             "--set", "training.eval_every=2",
             os.path.join(src, "configs", "examples", "dpo-cpu.yaml")],
            check=True, capture_output=True, text=True).stdout
        made = json.loads(http(f"http://{address}/v1/jobs", "POST", spec.encode(),
                               {**auth, "Content-Type": "application/yaml"}))
        job_id = made["id"]
        print(f"job {job_id} submitted to tailord at {address}")

        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {os.path.join(src, 'deploy', 'prometheus', 'alerts.yml')}
scrape_configs:
  - job_name: tailord
    static_configs:
      - targets: ["{address}"]
""")
        prometheus = Prometheus(work, config)
        prometheus.start()
        print(f"Prometheus at {prometheus.url}")
        both = [("tailord", tailord.process), ("Prometheus", prometheus.process)]

        def stepped(n):
            r = prometheus.query(f'tailor_job_step{{job_id="{job_id}"}} >= {n}')["data"]["result"]
            return bool(r)

        wait_until("the job's third step in Prometheus", lambda: stepped(3), 180, both)
        # A few more scrapes, so that every rate window holds two samples.
        first = time.monotonic()
        wait_until("five more seconds of scrapes", lambda: time.monotonic() - first > 5, 10, both)
        job = json.loads(http(f"http://{address}/v1/jobs/{job_id}", headers=auth))
        if job["state"] != "running":
            sys.exit(f"FAIL: the job is {job['state']}, not running, before the panels were checked")

        failures, checked = [], 0
        for path in sorted(glob.glob(os.path.join(src, "deploy", "grafana", "dashboards", "*.json"))):
            dashboard = json.load(open(path, encoding="utf-8"))
            for title, expr in panel_queries(dashboard):
                filled = expr.replace("$job_id", job_id).replace("$__rate_interval", RATE_INTERVAL)
                answer = prometheus.query(filled)
                checked += 1
                result = answer.get("data", {}).get("result", [])
                if answer.get("status") != "success" or not result:
                    failures.append(f"{os.path.basename(path)}: {title!r}: {filled} -> {answer.get('status')}, "
                                    f"{len(result)} series {answer.get('error', '')}")
                else:
                    print(f"ok: {os.path.basename(path)}: {title}: {len(result)} series")
            for variable in dashboard["templating"]["list"]:
                if variable["type"] == "query":
                    # label_values(METRIC, LABEL), as Grafana asks Prometheus.
                    q = variable["query"]["query"]
                    metric, label = q[len("label_values("):-1].split(", ")
                    values = json.loads(http(prometheus.url + f"/api/v1/label/{label}/values?" +
                                             urllib.parse.urlencode({"match[]": metric})))["data"]
                    checked += 1
                    if job_id not in values:
                        failures.append(f"{os.path.basename(path)}: variable {variable['name']}: {q} offers {values}")
                    else:
                        print(f"ok: {os.path.basename(path)}: variable {variable['name']} offers the job")

        rules = json.loads(http(prometheus.url + "/api/v1/rules"))["data"]["groups"]
        evaluated = 0
        for group in rules:
            for rule in group["rules"]:
                checked += 1
                if rule["health"] != "ok" or rule.get("lastEvaluation", "").startswith("0001"):
                    failures.append(f"rule {rule['name']}: health {rule['health']} {rule.get('lastError', '')}")
                else:
                    evaluated += 1
        if evaluated == 0:
            failures.append("no alerting rule was loaded from deploy/prometheus/alerts.yml")
        print(f"ok: {evaluated} alerting rules evaluated without error")

        # Cancelled and ended before tailord stops: a runner outlives a
        # stopped tailord (it is re-adopted at restart), and this one would
        # train on.
        http(f"http://{address}/v1/jobs/{job_id}/cancel", "POST", b"", auth)
        wait_until("the job cancelled",
                   lambda: json.loads(http(f"http://{address}/v1/jobs/{job_id}", headers=auth))["state"] == "cancelled",
                   60, [("tailord", tailord.process)])
        if failures:
            print(f"FAIL: {len(failures)} of {checked} checks:")
            for f in failures:
                print("  " + f)
            sys.exit(1)
        print(f"dashboards: ok ({checked} checks)")
    finally:
        if prometheus:
            prometheus.stop()
        if tailord:
            tailord.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
