#!/usr/bin/env python3
"""tailord's Slurm executor against a real Slurm cluster (Debian's
slurm-wlm and munge, started by tests/testing/slurm_cluster.py: two slurmd
"nodes" on loopback with one fake GPU each) and the build's tailord and
tailor-runner, which train on this CPU.

Each check names the behaviour it holds tailord to:
  without_slurm        tailord --executor auto whose Slurm cannot be asked:
                       /v1/hardware says why, a Slurm job is refused with 503
                       and the reason, a local job still trains
  refused_at_submit    more nodes, or more GPUs per node, than the partition
                       has: refused at submission with the shortfall
  one_node             a CPU job on one node succeeds with the losses of the
                       same job on the local executor; the batch script is
                       in the job's folder; submit-to-running latency
  two_nodes            two ranks on two nodes (one per node, meeting at the
                       first node's address) succeed with the losses of two
                       local ranks
  auto_placement       executor.kind auto: what this machine can hold runs
                       here, a two-node job goes to Slurm
  cancel               a running Slurm job is cancelled through scancel
  out_of_memory        both ranks of a two-node job run out of their memory
                       limit: re-planned for the partition (the global batch
                       kept) and resubmitted, to success
  failed_rank          rank 1 killed on its node: the attempt fails, the
                       retry resumes from the checkpoint and succeeds
  tailord_killed       kill -9 of tailord while a Slurm job runs, restart:
                       the job is re-adopted and completes exactly once
  left_the_queue       kill -9 of tailord; the job ends and leaves Slurm's
                       queue meanwhile; the restarted tailord finds its end
                       in the completion log (sacct -c): one completion
  controller_killed    SIGKILL of slurmctld while a job runs: the job keeps
                       its state with the reason, a new submission is 503
                       with Slurm's words; once slurmctld is back the job is
                       reconciled by its tag and completes exactly once
  waits_for_slurm      slurmctld down while a failed attempt waits out its
                       backoff: the retry waits in the queue with the reason
                       (not a failure) and runs once Slurm is back

  slurm_executor_test.py BUILD_DIR SOURCE_DIR

Exits 77 (skipped) with the reason where no cluster can be started (not
root, slurm-wlm not installed).
"""
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testing"))
import slurm_cluster  # noqa: E402
from tailord_process import TailordProcess  # noqa: E402

SPEC = """apiVersion: tailor/v1
kind: TrainingJob
name: {name}
model:
  preset: tiny-llama-byte
  init: random
data:
  train: data/tiny-corpus.txt
  format: text
  seq_len: 64
  packing: true
training:
  global_batch_size: {batch}
  micro_batch_size: {micro}
  max_steps: {steps}
  lr: 1e-3
  seed: 7
strategy:
  adapter: none
  precision: fp32
  gradient_checkpointing: false
resources:
{resources}
checkpoint:
  every_steps: {every}
  keep: 2
retries: 2
executor:
  kind: {executor}
"""

CPU_ONE = "  gpus: 0\n  host_memory: 2GiB"
CPU_TWO_LOCAL = "  gpus: 0\n  ranks: 2\n  host_memory: 2GiB"
# The cluster's GPUs are stand-in device files: these jobs train on the CPU
# on purpose (without resources.device: cpu the runners refuse, finding no
# CUDA device).
GPU_TWO_NODES = "  nodes: 2\n  gpus: 1\n  gpu_memory: 2GiB\n  ranks: 2\n  device: cpu"

failures = []


STARTED = time.monotonic()


def check(name, ok, detail=""):
    print(f"{time.monotonic() - STARTED:6.1f} s " + ("ok   " if ok else "FAIL ") + name + (f": {detail}" if detail else ""),
          flush=True)
    if not ok:
        failures.append(name)
    return ok


class Api:
    def __init__(self, tailord):
        self.base = "http://" + tailord.address
        self.auth = {"Authorization": "Bearer " + tailord.token}

    def call(self, path, method="GET", body=None, content_type=None):
        headers = dict(self.auth)
        if content_type:
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self.base + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def submit(self, spec):
        return self.call("/v1/jobs", "POST", spec.encode(), "application/yaml")

    def job(self, job_id):
        return self.call(f"/v1/jobs/{job_id}")[1]

    def events(self, job_id):
        return self.call(f"/v1/jobs/{job_id}/events")[1]["events"]

    def losses(self, job_id):
        rows = self.call(f"/v1/jobs/{job_id}/metrics?limit=10000")[1]["metrics"]
        return {row["step"]: row["loss"] for row in rows}

    def wait(self, job_id, predicate, seconds, what):
        deadline = time.monotonic() + seconds
        job = None
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if predicate(job):
                return job
            time.sleep(0.1)
        raise AssertionError(f"{job_id}: {what} not within {seconds} s; last seen {json.dumps(job)[:600]}")

    def wait_end(self, job_id, seconds=240):
        return self.wait(job_id, lambda j: j["state"] in ("succeeded", "failed", "cancelled"), seconds, "an end")


def spec(name, steps, resources, executor, every=10, batch=8, micro=4):
    return SPEC.format(name=name, steps=steps, resources=resources, executor=executor, every=every, batch=batch,
                       micro=micro)


def same_losses(a, b):
    if not a or a.keys() != b.keys():
        return False, f"steps {sorted(a)[:3]}... vs {sorted(b)[:3]}..."
    worst = max(abs(a[s] - b[s]) for s in a)
    return worst <= 1e-4, f"{len(a)} steps, largest difference {worst:.2e}"


def completions(events):
    return [e for e in events if e.get("to_state") == "succeeded"]


def without_slurm(build, src, work):
    # A Slurm configuration that names no running controller.
    conf = os.path.join(work, "no-cluster.conf")
    with open(conf, "w") as f:
        # MessageTimeout: how long a command tries (default 10 s, ~9 s to fail).
        f.write("ClusterName=none\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=9\nAuthType=auth/none\n"
                "MessageTimeout=2\n")
    with TailordProcess(build, src, os.path.join(work, "no-slurm"),
                        ["--executor", "auto", "--slurm-poll-interval", "0.2"],
                        env={"SLURM_CONF": conf}) as tailord:
        api = Api(tailord)
        code, hw = api.call("/v1/hardware")
        s = hw["executors"]["slurm"]
        check("without_slurm: /v1/hardware says the Slurm executor is unavailable, and why",
              code == 200 and s["configured"] and not s["available"] and s["status"], s["status"])
        code, err = api.submit(spec("needs-slurm", 5, CPU_ONE, "slurm"))
        check("without_slurm: a job for Slurm is refused with 503 and the reason",
              code == 503 and "Slurm" in err["message"], f"{code} {err['message'][:160]}")
        code, job = api.submit(spec("stays-local", 5, CPU_ONE, "default"))
        end = api.wait_end(job["id"]) if code == 201 else {}
        check("without_slurm: a local job trains as before",
              code == 201 and end.get("state") == "succeeded" and end["executor"]["kind"] == "local",
              f"{code} {end.get('state')} {end.get('exit_reason')}")


def with_cluster(build, src, work):
    started = time.monotonic()
    cluster = slurm_cluster.SlurmCluster(work, nodes=2, cpus=1, gpus=1, memory_mib=3000, min_job_age=5)
    print(f"cluster up in {time.monotonic() - started:.1f} s", flush=True)
    tailord_work = os.path.join(work, "tailord")
    args = ["--executor", "slurm", "--slurm-poll-interval", "0.2", "--retry-backoff", "3",
            "--heartbeat-timeout", "60", "--cancel-grace", "20"]
    tailord = TailordProcess(build, src, tailord_work, args, env=cluster.env)
    try:
        api = Api(tailord)
        code, hw = api.call("/v1/hardware")
        check("the Slurm executor reads the partition", hw["executors"]["slurm"]["available"],
              hw["executors"]["slurm"]["status"])

        # refused_at_submit
        code, err = api.submit(spec("three-nodes", 5, "  nodes: 3\n  gpus: 1\n  gpu_memory: 2GiB", "slurm"))
        check("refused_at_submit: three nodes on a two-node partition, with the shortfall",
              code == 422 and "short by 1 node" in err["message"], f"{code} {err['message'][:200]}")
        code, err = api.submit(spec("two-gpus", 5, "  gpus: 2\n  gpu_memory: 2GiB", "slurm"))
        check("refused_at_submit: two GPUs per node where nodes have one, with the shortfall",
              code == 422 and "short by 1 GPU per node" in err["message"], f"{code} {err['message'][:200]}")

        # one_node, against the local executor
        code, local = api.submit(spec("one-local", 20, CPU_ONE, "local"))
        local_end = api.wait_end(local["id"])
        t0 = time.monotonic()
        code, job = api.submit(spec("one-node", 20, CPU_ONE, "slurm"))
        check("one_node: submitted", code == 201 and job["executor"]["kind"] == "slurm", str(job)[:300])
        api.wait(job["id"], lambda j: j["state"] in ("running", "succeeded", "failed"), 60, "running")
        latency = time.monotonic() - t0
        end = api.wait_end(job["id"])
        ok, detail = same_losses(api.losses(job["id"]), api.losses(local["id"]))
        check("one_node: succeeded on Slurm", end["state"] == "succeeded" and end["executor"]["job_id"],
              f"{end['state']} {end['exit_reason']} {end['executor']}")
        check("one_node: the losses of the local executor", ok and local_end["state"] == "succeeded", detail)
        script = os.path.join(end["output_dir"], "slurm-batch.sh")
        text = open(script).read() if os.path.exists(script) else ""
        check("one_node: the batch script is kept, tagged, without requeue",
              "--comment=" + job["id"] + "/1" in text and "--no-requeue" in text and "--open-mode=append" in text)
        print(f"one_node: submit to running {latency:.2f} s (HTTP poll every 0.1 s)", flush=True)

        # two_nodes, against two local ranks
        code, local2 = api.submit(spec("two-local", 20, CPU_TWO_LOCAL, "local"))
        local2_end = api.wait_end(local2["id"])
        code, job2 = api.submit(spec("two-nodes", 20, GPU_TWO_NODES, "slurm"))
        end2 = api.wait_end(job2["id"]) if code == 201 else {"state": code, "exit_reason": job2}
        nodes = [e["message"] for e in api.events(job2["id"]) if e["kind"] == "slurm"] if code == 201 else []
        check("two_nodes: succeeded with two ranks on two nodes",
              end2["state"] == "succeeded" and any("2 ranks on 2 nodes" in m for m in nodes),
              f"{end2['state']} {end2.get('exit_reason')} {nodes[:2]}")
        if code == 201:
            ok, detail = same_losses(api.losses(job2["id"]), api.losses(local2["id"]))
            check("two_nodes: the losses of two local ranks", ok and local2_end["state"] == "succeeded", detail)

        # auto_placement
        code, here = api.submit(spec("auto-here", 5, CPU_ONE, "auto"))
        code2, there = api.submit(spec("auto-there", 5, GPU_TWO_NODES, "auto"))
        check("auto_placement: a job this machine holds runs here, a two-node one on Slurm",
              code == 201 and code2 == 201 and here["executor"]["kind"] == "local"
              and there["executor"]["kind"] == "slurm", f"{code} {code2} {here.get('executor')} {there.get('executor')}")
        for j in (here, there):
            if "id" in j:
                api.wait_end(j["id"])

        # cancel
        code, long_job = api.submit(spec("to-cancel", 100000, CPU_ONE, "slurm", every=1000))
        running = api.wait(long_job["id"], lambda j: j["state"] == "running" and j.get("last_step"), 90, "a step")
        api.call(f"/v1/jobs/{long_job['id']}/cancel", "POST", b"")
        end = api.wait_end(long_job["id"], 60)
        gone = not any(q[1] == long_job["id"] + "/1" and q[2] in ("RUNNING", "PENDING") for q in cluster.queue())
        check("cancel: cancelled through scancel, and Slurm no longer runs it",
              end["state"] == "cancelled" and gone, f"{end['state']} {end['executor']} {end['exit_reason']}")

        # failed_rank: rank 1 killed on its node
        code, job3 = api.submit(spec("rank-dies", 60, GPU_TWO_NODES, "slurm", every=5))
        api.wait(job3["id"], lambda j: (j.get("last_step") or 0) >= 8, 120, "step 8")
        killed = kill_rank(job3["id"], 1)
        end3 = api.wait_end(job3["id"], 300)
        ev = api.events(job3["id"])
        submitted = [e for e in ev if e["kind"] == "slurm" and e["message"].startswith("submitted")]
        resumed = [e for e in ev if e["kind"] == "runner.resume"]
        check("failed_rank: rank 1 killed, the attempt failed and the retry resumed and succeeded",
              killed and end3["state"] == "succeeded" and len(submitted) == 2 and resumed and end3["failures"] == 1,
              f"killed={killed} {end3['state']} submissions={len(submitted)} resumes={len(resumed)} "
              f"failures={end3['failures']} {end3['exit_reason']}")

        # out_of_memory: the limit holds the static state and 40% of what the
        # plan says the chosen micro-batch needs (on the CPU a GPU plan's
        # activations measure about 60% of their estimate), so that it runs
        # out and a smaller micro-batch fits.
        oom_spec = spec("oom-two-nodes", 12, GPU_TWO_NODES, "slurm", every=4, batch=16, micro="auto")
        code, plan = api.call("/v1/jobs?dry_run=true", "POST", oom_spec.encode(), "application/yaml")
        per = plan["memory"]["per_gpu"]
        fixed = per["weights"] + per["gradients"] + per["optimizer_states"] + per["master_weights"]
        limit = fixed + (per["activations"] + per["logits"]) * 4 // 10
        code, job_oom = api.call(f"/v1/jobs?memory_limit={limit}", "POST", oom_spec.encode(), "application/yaml")
        end = api.wait_end(job_oom["id"], 300)
        ev = api.events(job_oom["id"])
        submitted = [e for e in ev if e["kind"] == "slurm" and e["message"].startswith("submitted")]
        st = end["plan"]["strategy"]
        check("out_of_memory: re-planned for the partition, resubmitted and resumed to success",
              end["state"] == "succeeded" and end["oom_restarts"] >= 1 and len(submitted) == end["oom_restarts"] + 1
              and any(e["kind"] == "replan" for e in ev)
              and st["micro_batch_size"] * st["gradient_accumulation_steps"] * st["num_gpus"] == 16
              and end["attempt_history"][0].get("outcome") == "out_of_memory",
              f"{end['state']} oom_restarts={end['oom_restarts']} submissions={len(submitted)} "
              f"micro {plan['strategy']['micro_batch_size']} -> {st['micro_batch_size']} {end['exit_reason']}")

        # tailord_killed
        code, job4 = api.submit(spec("survives-tailord", 60, CPU_ONE, "slurm", every=10))
        api.wait(job4["id"], lambda j: j["state"] == "running" and (j.get("last_step") or 0) >= 3, 90, "running")
        tailord.kill()
        time.sleep(1)  # the runner trains on while no tailord watches
        tailord = TailordProcess(build, src, tailord_work, args, env=cluster.env, log_name="tailord-2.log")
        api = Api(tailord)
        end4 = api.wait_end(job4["id"])
        ev = api.events(job4["id"])
        submitted = [e for e in ev if e["kind"] == "slurm" and e["message"].startswith("submitted")]
        check("tailord_killed: re-adopted and completed exactly once",
              end4["state"] == "succeeded" and len(completions(ev)) == 1 and len(submitted) == 1
              and any(e["kind"] == "recovered" for e in ev),
              f"{end4['state']} completions={len(completions(ev))} submissions={len(submitted)}")

        # left_the_queue
        code, job6 = api.submit(spec("ends-while-away", 10, CPU_ONE, "slurm", every=5))
        api.wait(job6["id"], lambda j: j["state"] == "running", 90, "running")
        tailord.kill()
        tag = job6["id"] + "/1"
        deadline = time.monotonic() + 120
        while any(q[1] == tag for q in cluster.queue()) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = not any(q[1] == tag for q in cluster.queue())
        tailord = TailordProcess(build, src, tailord_work, args, env=cluster.env, log_name="tailord-3.log")
        api = Api(tailord)
        end6 = api.wait_end(job6["id"])
        ev = api.events(job6["id"])
        check("left_the_queue: its end read from the completion log, one completion",
              left and end6["state"] == "succeeded" and len(completions(ev)) == 1
              and end6["executor"]["state"] == "COMPLETED",
              f"left={left} {end6['state']} {end6['executor']} completions={len(completions(ev))}")

        # controller_killed
        code, job5 = api.submit(spec("survives-slurmctld", 200, CPU_ONE, "slurm", every=20))
        api.wait(job5["id"], lambda j: j["state"] == "running" and (j.get("last_step") or 0) >= 3, 90, "running")
        time.sleep(5.5)  # slurmctld saves its state at most every 5 s (FIELD-NOTES)
        cluster.kill_controller()
        down = api.wait(job5["id"], lambda j: j["executor"]["state"].startswith("unreachable"), 30, "unreachable")
        check("controller_killed: the job stays running with the reason",
              down["state"] == "running", down["executor"]["state"][:160])
        # A submission meanwhile is planned against the partition, which
        # tailord last read over 5 s ago (its cache's age), so it asks Slurm
        # and is refused with Slurm's words.
        code, job7 = api.submit(spec("while-down", 5, CPU_ONE, "slurm"))
        check("controller_killed: a job submitted meanwhile is refused with 503 and the reason",
              code == 503 and "Slurm" in job7["message"], f"{code} {job7.get('message', '')[:160]}")
        cluster.start_controller()
        end5 = api.wait_end(job5["id"])
        ev = api.events(job5["id"])
        submitted = [e for e in ev if e["kind"] == "slurm" and e["message"].startswith("submitted")]
        check("controller_killed: reconciled by its tag and completed exactly once",
              end5["state"] == "succeeded" and len(completions(ev)) == 1 and len(submitted) == 1,
              f"{end5['state']} completions={len(completions(ev))} submissions={len(submitted)} "
              f"{end5['exit_reason']}")

        # waits_for_slurm: an attempt fails (its runner killed); while it
        # waits out its backoff, slurmctld goes down. The retry waits in
        # Tailor's queue with the reason, neither submitted nor counted, and
        # runs once Slurm is back.
        code, job8 = api.submit(spec("retry-waits", 40, CPU_ONE, "slurm", every=5))
        api.wait(job8["id"], lambda j: (j.get("last_step") or 0) >= 7, 90, "step 7, past a checkpoint")
        killed = kill_rank(job8["id"], 0)
        # Slurm keeps the killed job COMPLETING until its processes are gone,
        # which takes well over 30 s on a loaded machine.
        api.wait(job8["id"], lambda j: j["state"] == "queued", 120, "queued for a retry")
        cluster.kill_controller()
        waiting = api.wait(job8["id"], lambda j: j["executor"]["state"].startswith("waiting for Slurm"), 30,
                           "waiting for Slurm")
        check("waits_for_slurm: the retry waits in the queue with the reason, not counted as a failure",
              killed and waiting["state"] == "queued" and waiting["failures"] == 1, waiting["executor"]["state"][:160])
        cluster.start_controller()
        end8 = api.wait_end(job8["id"])
        check("waits_for_slurm: it runs once Slurm is back and resumes from its checkpoint",
              end8["state"] == "succeeded" and end8["failures"] == 1 and end8["attempts"] == 2
              and any(e["kind"] == "runner.resume" for e in api.events(job8["id"])),
              f"{end8['state']} failures={end8['failures']} attempts={end8['attempts']}")
    finally:
        tailord.stop()
        cluster.stop()


def kill_rank(job_id, rank):
    """SIGKILL the tailor-runner process that is `rank` of the job."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
            if not cmdline[0].endswith(b"tailor-runner") or not any(job_id.encode() in a for a in cmdline):
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            if env.get(b"RANK") == str(rank).encode():
                os.kill(int(pid), signal.SIGKILL)
                return True
        except OSError:
            continue
    return False


def main():
    build, src = sys.argv[1], sys.argv[2]
    why = slurm_cluster.available()
    if why:
        print("SKIP: " + why)
        return 77
    work = tempfile.mkdtemp(prefix="tailor-slurm-")
    started = time.monotonic()
    try:
        without_slurm(build, src, work)
        with_cluster(build, src, work)
    except AssertionError as e:
        failures.append(str(e))
        print("FAIL " + str(e), flush=True)
    print(f"{time.monotonic() - started:.0f} s", flush=True)
    if failures:
        print(f"{len(failures)} failure(s); logs in {work}")
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
