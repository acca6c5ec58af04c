#!/usr/bin/env python3
"""Writes deploy/grafana/dashboards/*.json, Tailor's Grafana dashboards.

The dashboards are described here once (title, panels, PromQL) and written
in Grafana's dashboard JSON model (schemaVersion 39). The files are
committed; tests/deploy/dashboards_test.py checks that they are what this
script writes, that Grafana's model (grafana-foundation-sdk) decodes each
of them without loss, and that a real Prometheus scraping a real tailord
returns data for every panel's expression.

  deploy/grafana/generate.py [OUT_DIR]     (default: deploy/grafana/dashboards)
"""
import json
import os
import sys

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
WIDTH = 24  # Grafana's grid is 24 columns wide


def target(expr, legend="", ref="A", instant=False):
    t = {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref}
    if instant:
        t["instant"] = True
        t["range"] = False
    return t


def panel(kind, title, targets, unit="short", description="", w=12, h=8, options=None, decimals=None):
    defaults = {"unit": unit}
    if decimals is not None:
        defaults["decimals"] = decimals
    p = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": [target(*t) if isinstance(t, tuple) else target(t) for t in targets],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options or {},
        "gridPos": {"h": h, "w": w, "x": 0, "y": 0},
    }
    for i, t in enumerate(p["targets"]):
        t["refId"] = chr(ord("A") + i)
    return p


def timeseries(title, targets, unit="short", description="", w=12, h=8):
    options = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
               "tooltip": {"mode": "multi", "sort": "none"}}
    return panel("timeseries", title, targets, unit, description, w, h, options)


def stat(title, targets, unit="short", description="", w=6, h=4, decimals=None):
    options = {"colorMode": "value", "graphMode": "area", "justifyMode": "auto", "orientation": "auto",
               "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}, "textMode": "auto"}
    return panel("stat", title, targets, unit, description, w, h, options, decimals)


def bargauge(title, targets, unit="bytes", description="", w=12, h=8):
    options = {"displayMode": "gradient", "orientation": "horizontal", "showUnfilled": True,
               "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
    return panel("bargauge", title, targets, unit, description, w, h, options)


def layout(panels):
    """Places panels left to right, wrapping at the grid's width; numbers them."""
    x = y = row_h = 0
    for i, p in enumerate(panels, start=1):
        g = p["gridPos"]
        if x + g["w"] > WIDTH:
            x, y, row_h = 0, y + row_h, 0
        g["x"], g["y"] = x, y
        x += g["w"]
        row_h = max(row_h, g["h"])
        p["id"] = i
    return panels


def datasource_variable():
    return {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
            "current": {}, "hide": 0, "refresh": 1, "options": [], "includeAll": False, "multi": False}


def job_variable():
    return {"name": "job_id", "label": "Job", "type": "query", "datasource": DATASOURCE,
            "query": {"query": "label_values(tailor_job_step, job_id)", "refId": "job_id"},
            "current": {}, "hide": 0, "refresh": 2,
            "options": [], "includeAll": False, "multi": False, "sort": 2}


def dashboard(uid, title, description, panels, variables=()):
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["tailor"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [datasource_variable(), *variables]},
        "annotations": {"list": []},
        "links": [{"title": "Tailor", "type": "dashboards", "tags": ["tailor"], "asDropdown": True,
                   "includeVars": True, "keepTime": True}],
        "panels": layout(panels),
    }


RUNNING = "on(job_id) group_left() (tailor_job_running == 1)"

FLEET = dashboard(
    "tailor-fleet", "Tailor / Fleet",
    "What tailord holds and runs: jobs by state, the queue, memory reserved against the budget, each running job's throughput and loss.",
    [
        stat("Running", ["sum(tailor_job_running)"], description="Jobs whose runner is running."),
        stat("Queued", ["tailor_queue_length"], description="Jobs waiting for GPUs or host memory."),
        stat("Succeeded", ['tailor_jobs{state="succeeded"}']),
        stat("Failed", ['tailor_jobs{state="failed"}']),
        timeseries("Jobs by state", [("sum by (state) (tailor_jobs)", "{{state}}")]),
        timeseries("Submissions", [("rate(tailor_jobs_submitted_total[$__rate_interval])", "jobs/s")], unit="reqps",
                   description="Jobs accepted by POST /v1/jobs."),
        timeseries("Tokens/s of running jobs", [(f"tailor_job_tokens_per_second * {RUNNING}", "{{job}} {{job_id}}")]),
        timeseries("Loss of running jobs", [(f"tailor_job_loss * {RUNNING}", "{{job}} {{job_id}}")]),
        bargauge("Host memory: reserved and budget", [("tailor_host_memory_bytes", "{{kind}}")],
                 description="CPU jobs reserve their plan's estimate out of the daemon's budget."),
        bargauge("GPU memory: used and total",
                 [("tailor_gpu_memory_used_bytes", "GPU {{gpu}} used"), ("tailor_gpu_memory_total_bytes", "GPU {{gpu}} total")],
                 description="Used: the running jobs' measured peak, else their estimate. Empty without GPUs."),
    ])

JOB = dashboard(
    "tailor-job", "Tailor / Job",
    "One job: loss, throughput, step, and device memory by component, the plan's estimate beside the runner's measurement.",
    [
        stat("Step", ['tailor_job_step{job_id="$job_id"}']),
        stat("Running", ['tailor_job_running{job_id="$job_id"}'], description="1 while its runner runs."),
        stat("Measured peak", ['tailor_job_memory_peak_bytes{job_id="$job_id"}'], unit="bytes"),
        stat("Estimated total", ['tailor_job_memory_bytes{job_id="$job_id", component="total", source="estimated"}'],
             unit="bytes", description="The plan's per-device total."),
        timeseries("Loss", [('tailor_job_loss{job_id="$job_id"}', "loss"),
                            ('tailor_job_eval_loss{job_id="$job_id"}', "eval loss")],
                   description="Training loss of the latest step; eval loss on data.eval after the latest evaluation "
                               "(training.eval_every, and the last step)."),
        timeseries("Tokens/s", [('tailor_job_tokens_per_second{job_id="$job_id"}', "tokens/s")]),
        timeseries("Rewards (preference)",
                   [('tailor_job_preference{job_id="$job_id", metric=~"rewards_chosen|rewards_rejected|rewards_margins|'
                     'min_reward|mean_reward|max_reward|margin|kl|eval_kl"}', "{{metric}}")],
                   description="A DPO, ORPO, SimPO or KTO job's mean rewards (DPO and KTO: beta times the log-ratio "
                               "against the reference) of the chosen and rejected completions and their margin, TRL's "
                               "rewards/*, and KTO's KL estimate (kl); a reward model's lowest, mean and highest score "
                               "and mean margin, TRL's RewardTrainer's names. Empty for supervised jobs."),
        timeseries("Reward accuracy (preference)",
                   [('tailor_job_preference{job_id="$job_id", metric=~"rewards_accuracies|eval_rewards_accuracies|'
                     'accuracy|eval_accuracy"}', "{{metric}}")],
                   unit="percentunit", description="The share of pairs whose chosen reward (a reward model's score) "
                                                   "is above the rejected one, in training and on data.eval."),
        timeseries("Memory by component (measured)",
                   [('tailor_job_memory_bytes{job_id="$job_id", source="measured", component!="total"}', "{{component}}")],
                   unit="bytes", description="Weights, gradients, optimizer states, activations… as the runner measured them."),
        timeseries("Memory by component (estimated)",
                   [('tailor_job_memory_bytes{job_id="$job_id", source="estimated", component!="total"}', "{{component}}")],
                   unit="bytes", description="The plan's estimate for the attempt that runs."),
        timeseries("Estimate against measurement",
                   [('tailor_job_memory_bytes{job_id="$job_id", component="total", source="estimated"}', "estimated total"),
                    ('tailor_job_memory_peak_bytes{job_id="$job_id"}', "measured peak")], unit="bytes"),
        timeseries("Estimate error",
                   [('(tailor_job_memory_peak_bytes{job_id="$job_id"} - ignoring(component, source) '
                     'tailor_job_memory_bytes{job_id="$job_id", component="total", source="estimated"}) / ignoring(component, source) '
                     'tailor_job_memory_bytes{job_id="$job_id", component="total", source="estimated"}', "(measured - estimated) / estimated")],
                   unit="percentunit", description="Past ±15% the TailorMemoryEstimateOff alert fires."),
        timeseries("Peak by rank",
                   [('tailor_job_rank_memory_peak_bytes{job_id="$job_id"} or tailor_job_memory_peak_bytes{job_id="$job_id"}',
                     "rank {{rank}}")], unit="bytes", w=24,
                   description="Each rank's peak for a multi-rank job; the one peak for a job on one rank."),
    ],
    variables=[job_variable()])

RELIABILITY = dashboard(
    "tailor-reliability", "Tailor / Re-plans and retries",
    "Out-of-memory exits answered by a re-plan, failures retried with backoff, jobs that failed, and estimates that missed.",
    [
        stat("OOM re-plans (1h)", ["increase(tailor_oom_restarts_total[1h])"], decimals=0),
        stat("Retries (1h)", ["increase(tailor_job_retries_total[1h])"], decimals=0),
        stat("Failed jobs", ['tailor_jobs{state="failed"}']),
        stat("Cancelled jobs", ['tailor_jobs{state="cancelled"}']),
        timeseries("OOM re-plans", [("increase(tailor_oom_restarts_total[$__rate_interval])", "re-plans")],
                   description="A storm of these fires TailorOomReplanStorm."),
        timeseries("Retries", [("increase(tailor_job_retries_total[$__rate_interval])", "retries")]),
        timeseries("Estimate error by job",
                   [("(tailor_job_memory_peak_bytes - ignoring(component, source) "
                     'tailor_job_memory_bytes{component="total", source="estimated"}) / ignoring(component, source) '
                     'tailor_job_memory_bytes{component="total", source="estimated"}', "{{job}} {{job_id}}")],
                   unit="percentunit", w=24, description="Measured peak against the plan's total, per job."),
    ])

API = dashboard(
    "tailor-api", "Tailor / API and queue",
    "tailord's REST API: requests by route and status, latency percentiles, connections, and the queue behind it.",
    [
        stat("Up", ['up{job="tailord"}'], description="Prometheus reached tailord's /metrics."),
        stat("Uptime", ["time() - process_start_time_seconds"], unit="s"),
        stat("Open connections", ["tailor_http_connections"]),
        stat("Queue depth", ["tailor_queue_length"]),
        timeseries("Requests by route", [("sum by (route) (rate(tailor_http_requests_total[$__rate_interval]))", "{{route}}")],
                   unit="reqps"),
        timeseries("Requests by status", [("sum by (code) (rate(tailor_http_requests_total[$__rate_interval]))", "{{code}}")],
                   unit="reqps"),
        timeseries("Latency p50 and p99",
                   [("histogram_quantile(0.5, sum by (le) (rate(tailor_http_request_duration_seconds_bucket[$__rate_interval])))", "p50"),
                    ("histogram_quantile(0.99, sum by (le) (rate(tailor_http_request_duration_seconds_bucket[$__rate_interval])))", "p99")],
                   unit="s"),
        timeseries("p99 by route",
                   [("histogram_quantile(0.99, sum by (le, route) (rate(tailor_http_request_duration_seconds_bucket[$__rate_interval])))",
                     "{{route}}")], unit="s"),
        timeseries("Connections evicted at the limit", [("increase(tailor_http_connections_evicted_total[$__rate_interval])", "evicted")]),
        timeseries("Queue depth over time", [("tailor_queue_length", "queued")]),
        timeseries("Store writes and commits",
                   [("rate(tailor_store_writes_total[$__rate_interval])", "writes"),
                    ("rate(tailor_store_commits_total[$__rate_interval])", "commits"),
                    ("tailor_store_writes_waiting", "waiting")], unit="short",
                   description="Writes (submissions, state changes, events, metric batches) and the commits that "
                               "carried them: writes waiting behind a commit share the next one (one fsync)."),
        timeseries("Writes per commit",
                   [("rate(tailor_store_writes_total[$__rate_interval]) / rate(tailor_store_commits_total[$__rate_interval])",
                     "writes per commit")], unit="short",
                   description="1 while writes come one at a time; higher under load."),
    ])

DASHBOARDS = {"fleet.json": FLEET, "job.json": JOB, "reliability.json": RELIABILITY, "api.json": API}


def render(d):
    return json.dumps(d, indent=2, ensure_ascii=False) + "\n"


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboards")
    os.makedirs(out, exist_ok=True)
    for name, d in DASHBOARDS.items():
        with open(os.path.join(out, name), "w", encoding="utf-8") as f:
            f.write(render(d))
    print(f"wrote {len(DASHBOARDS)} dashboards to {out}")


if __name__ == "__main__":
    main()
