"""Clients for bench/daemon_soak.sh: THREADS threads, each repeating for
SECONDS: submit the spec, read the job, list a page, cancel it, wait until
it has ended, delete it. Prints the cycles done and any unexpected answer.

  soak_clients.py ADDRESS TOKEN SPEC SECONDS THREADS
"""
import http.client
import json
import sys
import threading
import time

address, token, spec_path, seconds, threads = sys.argv[1:6]
host, port = address.rsplit(":", 1)
spec = open(spec_path, "rb").read()
deadline = time.monotonic() + float(seconds)
cycles = [0] * int(threads)
errors = []


def call(conn, method, path, body=None):
    headers = {"Authorization": f"Bearer {token}"}
    if body is not None:
        headers["Content-Type"] = "application/yaml"
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    return response.status, response.read()


def client(index):
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    while time.monotonic() < deadline:
        status, body = call(conn, "POST", "/v1/jobs", spec)
        if status != 201:
            errors.append(f"submit: {status} {body[:200]!r}")
            continue
        job = json.loads(body)["id"]
        call(conn, "GET", f"/v1/jobs/{job}")
        call(conn, "GET", "/v1/jobs?limit=50")
        call(conn, "POST", f"/v1/jobs/{job}/cancel")
        while time.monotonic() < deadline + 30:
            status, body = call(conn, "GET", f"/v1/jobs/{job}")
            if json.loads(body)["state"] in ("succeeded", "failed", "cancelled"):
                break
            time.sleep(0.02)
        status, body = call(conn, "DELETE", f"/v1/jobs/{job}")
        if status != 200:
            errors.append(f"delete: {status} {body[:200]!r}")
        cycles[index] += 1


workers = [threading.Thread(target=client, args=(i,)) for i in range(int(threads))]
for w in workers:
    w.start()
for w in workers:
    w.join()
print(f"clients: {sum(cycles)} submit-read-list-cancel-delete cycles in {seconds} s, {len(errors)} unexpected answers")
for e in errors[:10]:
    print("  " + e)
