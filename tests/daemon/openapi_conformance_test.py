#!/usr/bin/env python3
"""tailord's REST API held to its own OpenAPI document by the real tools.

openapi-spec-validator checks the document tailord serves (/openapi.yaml and
/openapi.json, which must be one document), then Schemathesis sends generated
requests (its examples, coverage, fuzzing and stateful phases, every check)
to a live tailord on loopback with the admin token, run after run (the next
seed each time) until tailord's own /metrics count at least --min-requests
answered requests. The test passes when the document is valid, no run
reports a failure, no response is a 5xx and tailord's log shows no handler
that threw.

  openapi_conformance_test.py BUILD_DIR SOURCE_DIR [--min-requests N] [--seed S]
                              [--max-examples N] [--max-rounds N]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml
from openapi_spec_validator import validate


def fetch(address, path, token=None):
    request = urllib.request.Request(f"http://{address}{path}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.read().decode("utf-8")


def wait_for_address(data_dir, daemon, seconds=30):
    """The daemon writes DATA/address once it listens."""
    deadline = time.monotonic() + seconds
    path = os.path.join(data_dir, "address")
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            sys.exit(f"FAIL: tailord exited with {daemon.returncode} before listening")
        if os.path.exists(path) and os.path.getsize(path) > 0:
            with open(path) as f:
                return f.read().strip()
        time.sleep(0.05)
    sys.exit(f"FAIL: tailord did not listen within {seconds} s")


def requests_by_code(metrics_text):
    """tailor_http_requests_total{...,code="200"} N summed by code."""
    counts = {}
    for line in metrics_text.splitlines():
        m = re.match(r'tailor_http_requests_total\{[^}]*code="(\d+)"[^}]*\} ([0-9.e+]+)$', line)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + int(float(m.group(2)))
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build_dir")
    parser.add_argument("source_dir")
    parser.add_argument("--min-requests", type=int, default=1000)
    parser.add_argument("--max-examples", type=int, default=100)
    parser.add_argument("--max-rounds", type=int, default=6)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("TAILOR_SCHEMATHESIS_SEED", "20261126")))
    args = parser.parse_args()
    args.build_dir = os.path.abspath(args.build_dir)
    args.source_dir = os.path.abspath(args.source_dir)

    work = tempfile.mkdtemp(prefix="tailor-openapi-")
    data_dir = os.path.join(work, "data")
    log_path = os.path.join(work, "tailord.log")
    # Jobs need not train here: /bin/true as the runner ends each one at
    # once, so that cancel, retry and delete meet every state quickly.
    with open(log_path, "w") as log:
        daemon = subprocess.Popen(
            [os.path.join(args.build_dir, "bin", "tailord"), "--data-dir", data_dir, "--listen", "127.0.0.1:0",
             "--spec-root", os.path.join(args.source_dir, "configs"), "--runner", "/bin/true",
             "--poll-interval", "0.05"], stdout=log, stderr=subprocess.STDOUT)
    try:
        address = wait_for_address(data_dir, daemon)
        with open(os.path.join(data_dir, "token")) as f:
            token = f.read().strip()

        served_yaml = yaml.safe_load(fetch(address, "/openapi.yaml"))
        served_json = json.loads(fetch(address, "/openapi.json"))
        validate(served_yaml)
        validate(served_json)
        if served_yaml != served_json:
            sys.exit("FAIL: /openapi.json is not /openapi.yaml converted")
        operations = sum(len([m for m in item if m in ("get", "post", "put", "delete", "patch")])
                         for item in served_json["paths"].values())
        print(f"openapi-spec-validator: the served document is valid OpenAPI {served_json['openapi']} "
              f"({operations} operations)")

        schemathesis = os.path.join(os.path.dirname(sys.executable), "schemathesis")
        # How many requests one run sends depends on how fast the machine
        # is at the time (Hypothesis budgets its generation), so runs with
        # the next seeds follow until tailord has answered min_requests.
        results = []
        started = time.monotonic()
        total, codes = 0, {}
        for round_ in range(args.max_rounds):
            report = os.path.join(work, f"junit-{round_}.xml")
            command = [schemathesis, "--no-color", "--config-file",
                       os.path.join(args.source_dir, "tests", "daemon", "schemathesis.toml"),
                       "run", f"http://{address}/openapi.json", "-H", f"Authorization: Bearer {token}",
                       "--max-examples", str(args.max_examples), "--seed", str(args.seed + round_),
                       # One worker: with two, Hypothesis' source introspection
                       # compiled in two threads at once once raised CPython
                       # 3.11's "SystemError: AST constructor recursion depth
                       # mismatch" inside Schemathesis (a run of 2026-11-26).
                       "--generation-database", "none", "--workers", "1", "--request-timeout", "30",
                       # Hypothesis' health checks cut generation short on a
                       # busy machine (ctest runs tests side by side).
                       "--suppress-health-check", "all",
                       "--report", "junit", "--report-junit-path", report]
            print("running:", " ".join(c if token not in c else "Authorization: Bearer ***" for c in command),
                  flush=True)
            results.append(subprocess.run(command, cwd=work).returncode)
            codes = requests_by_code(fetch(address, "/metrics"))
            total = sum(codes.values())
            if results[-1] != 0 or total >= args.min_requests:
                break
        seconds = time.monotonic() - started
        summary = ", ".join(f"{c}: {n}" for c, n in sorted(codes.items()))
        print(f"tailord answered {total} requests in {seconds:.1f} s over {len(results)} run(s) ({summary})")
        failures = []
        if any(results):
            failures.append(f"schemathesis exited {max(results)} (its report is above)")
        server_errors = sum(n for c, n in codes.items() if c.startswith("5") and c not in ("503", "507"))
        if server_errors:
            failures.append(f"{server_errors} responses were server errors")
        if total < args.min_requests:
            failures.append(f"only {total} requests reached tailord; at least {args.min_requests} were asked for")
        with open(log_path) as f:
            threw = [line.rstrip() for line in f if "handler threw" in line]
        if threw:
            failures.append("tailord's handlers threw:\n  " + "\n  ".join(threw[:10]))
        if failures:
            print("FAIL:\n- " + "\n- ".join(failures))
            print(f"(tailord's log and the report are kept in {work})")
            return 1
        print("PASS")
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
