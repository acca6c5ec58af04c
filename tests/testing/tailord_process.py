"""tailord of a build, for the Python end-to-end tests (tests/deploy,
tests/web): on an ephemeral loopback port, its data in a folder of the
caller's, its runner the build's tailor-runner, stopped with SIGTERM.

    with TailordProcess(build, src, work) as tailord:
        tailord.address, tailord.token, tailord.log_path
"""
import os
import signal
import subprocess
import sys
import time


class TailordProcess:
    def __init__(self, build, src, work, extra_args=(), env=None, log_name="tailord.log"):
        self.data = os.path.join(work, "data")
        self.log_path = os.path.join(work, log_name)
        os.makedirs(work, exist_ok=True)
        # A restart on the same folder must not read the last one's address.
        try:
            os.unlink(os.path.join(self.data, "address"))
        except FileNotFoundError:
            pass
        env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE", **(env or {}))
        self.process = subprocess.Popen(
            [os.path.join(build, "bin", "tailord"), "--data-dir", self.data, "--listen", "127.0.0.1:0",
             "--spec-root", os.path.join(src, "configs"), "--runner", os.path.join(build, "bin", "tailor-runner"),
             "--poll-interval", "0.1", *extra_args],
            stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT, env=env)
        address_file = os.path.join(self.data, "address")
        deadline = time.monotonic() + 30
        while not (os.path.exists(address_file) and os.path.getsize(address_file)):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                sys.exit(f"FAIL: tailord did not start; its log:\n{open(self.log_path).read()}")
            time.sleep(0.05)
        self.address = open(address_file).read().strip()
        self.token = open(os.path.join(self.data, "token")).read().strip()

    def kill(self):
        """SIGKILL tailord alone: its runners live on, as after a crash."""
        self.process.kill()
        self.process.wait()

    def alive(self):
        return self.process.poll() is None

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        # Runners outlive a stopped tailord (a restarted one re-adopts them);
        # a test that failed before cancelling its jobs must not leave them
        # training: every process whose command line names this data folder.
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().decode("utf-8", "replace")
                if self.data + "/" in cmdline:
                    os.killpg(int(pid), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
