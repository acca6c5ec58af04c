"""A real Slurm cluster for the tests (Debian's slurm-wlm 22.05 and munge):
munged, slurmctld and one slurmd per node, all on loopback, every path
under one folder of the caller's, started by this process as root and
stopped by it. Nodes n1..nN share this host; each has fake GPUs (character
devices standing in for /dev/nvidiaK) so that --gres=gpu:K is scheduled as
on a GPU cluster. ../shared/FIELD-NOTES.md has the facts this relies on.

    with SlurmCluster(work, nodes=2) as cluster:
        cluster.env      # SLURM_CONF for client commands
        cluster.kill_controller(); cluster.start_controller()

available() says why a cluster cannot be started here (not root, no
slurm-wlm), for the tests to skip with that reason.
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time


def available():
    if os.geteuid() != 0:
        return "Slurm's daemons are started as root; this test runs as uid %d" % os.geteuid()
    for tool in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sacct", "scancel"):
        if shutil.which(tool) is None and not os.path.exists("/usr/sbin/" + tool):
            return f"{tool} is not installed (scripts/setup installs slurm-wlm and munge)"
    # The fake GPUs are character devices: a container without CAP_MKNOD
    # cannot make them.
    probe = tempfile.mkdtemp(prefix="tailor-mknod-")
    try:
        os.mknod(os.path.join(probe, "dev"), 0o666 | 0o020000, os.makedev(1, 3))
    except OSError as e:
        return f"cannot create the fake GPUs' device files here ({e})"
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    return None


def _free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _tool(name):
    return shutil.which(name) or "/usr/sbin/" + name


class SlurmCluster:
    def __init__(self, work, nodes=2, cpus=2, gpus=1, memory_mib=4000, partition="debug", min_job_age=300):
        self.dir = os.path.join(work, "slurm")
        self.nodes = [f"n{i + 1}" for i in range(nodes)]
        self.partition = partition
        self.host = socket.gethostname().split(".")[0]
        os.makedirs(self.dir, exist_ok=True)
        for sub in ("state", "spool", "dev", "munge"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        os.chmod(os.path.join(self.dir, "munge"), 0o755)
        ports = _free_ports(1 + nodes)
        self.ctld_port, node_ports = ports[0], ports[1:]
        self.munge_socket = os.path.join(self.dir, "munge", "munge.socket")
        dev_files = []
        for g in range(gpus):
            path = os.path.join(self.dir, "dev", f"nvidia{g}")
            if not os.path.exists(path):
                os.mknod(path, 0o666 | 0o020000, os.makedev(1, 3))  # like /dev/null
            dev_files.append(path)
        node_lines = []
        for name, port in zip(self.nodes, node_ports):
            gres = f" Gres=gpu:{gpus}" if gpus else ""
            node_lines.append(f"NodeName={name} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={port} "
                              f"CPUs={cpus} RealMemory={memory_mib}{gres} State=UNKNOWN")
        d = self.dir
        self.conf = os.path.join(d, "slurm.conf")
        with open(self.conf, "w") as f:
            f.write("\n".join([
                "ClusterName=tailortest",
                f"SlurmctldHost={self.host}(127.0.0.1)",
                f"SlurmctldPort={self.ctld_port}",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={self.munge_socket}",
                "SlurmUser=root", "SlurmdUser=root",
                f"StateSaveLocation={d}/state",
                f"SlurmdSpoolDir={d}/spool/%n",
                f"SlurmctldPidFile={d}/slurmctld.pid",
                f"SlurmdPidFile={d}/slurmd-%n.pid",
                f"SlurmctldLogFile={d}/slurmctld.log",
                f"SlurmdLogFile={d}/slurmd-%n.log",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "MpiDefault=none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "SchedulerType=sched/backfill",
                "SchedulerParameters=batch_sched_delay=0",
                "JobCompType=jobcomp/filetxt",
                f"JobCompLoc={d}/jobcomp.txt",
                "ReturnToService=2",
                f"MinJobAge={min_job_age}",  # seconds a finished job stays in squeue
                "KillWait=5",
                "MessageTimeout=2",  # a command fails in ~1 s, not ~9 s, while slurmctld is down
                "SlurmdParameters=config_overrides",
                "GresTypes=gpu",
                *node_lines,
                f"PartitionName={partition} Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP",
                ""]))
        with open(os.path.join(d, "gres.conf"), "w") as f:
            if gpus:
                for name in self.nodes:
                    for path in dev_files:
                        f.write(f"NodeName={name} Name=gpu File={path}\n")
        key = os.path.join(d, "munge", "munge.key")
        if not os.path.exists(key):
            with open(key, "wb") as f:
                f.write(os.urandom(1024))
            os.chmod(key, 0o400)
        self.env = {"SLURM_CONF": self.conf}
        self.processes = {}
        self._start("munged", [_tool("munged"), "-F", "--force", f"--socket={self.munge_socket}",
                               f"--key-file={key}", f"--pid-file={d}/munge/munged.pid",
                               f"--log-file={d}/munge/munged.log", f"--seed-file={d}/munge/munged.seed"])
        deadline = time.monotonic() + 10
        while not os.path.exists(self.munge_socket):
            if time.monotonic() > deadline:
                raise RuntimeError("munged did not start: " + self._log("munge/munged.log"))
            time.sleep(0.02)
        self.start_controller()
        for name in self.nodes:
            self._start("slurmd-" + name, [_tool("slurmd"), "-D", "-f", self.conf, "-N", name])
        self.wait_nodes_idle()

    def _log(self, name):
        try:
            return open(os.path.join(self.dir, name)).read()[-3000:]
        except OSError:
            return "(no log)"

    def _start(self, key, argv):
        log = open(os.path.join(self.dir, key + ".out"), "w")
        self.processes[key] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                               env=dict(os.environ, SLURM_CONF=self.conf))

    def start_controller(self):
        self._start("slurmctld", [_tool("slurmctld"), "-D", "-f", self.conf])

    def kill_controller(self):
        p = self.processes.pop("slurmctld")
        p.send_signal(signal.SIGKILL)
        p.wait()

    def run(self, *argv, check=True):
        return subprocess.run(list(argv), env=dict(os.environ, **self.env), capture_output=True, text=True,
                              check=check, timeout=30)

    def wait_nodes_idle(self, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            r = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False)
            states = dict(line.split() for line in r.stdout.splitlines() if line.strip())
            if r.returncode == 0 and all(states.get(n) in ("idle", "mix", "alloc") for n in self.nodes):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Slurm nodes did not come up: {r.stdout} {r.stderr}\n"
                                   + self._log("slurmctld.log"))
            time.sleep(0.1)

    def queue(self):
        r = self.run("squeue", "-h", "-o", "%i|%k|%T", check=False)
        return [line.split("|") for line in r.stdout.splitlines() if line.strip()]

    def stop(self):
        # scontrol shutdown leaves running jobs alive: cancel and wait first.
        if "slurmctld" in self.processes:
            self.run("scancel", "--full", "-u", "root", check=False)
            deadline = time.monotonic() + 20
            while self.queue() and time.monotonic() < deadline:
                time.sleep(0.1)
        for key in sorted(self.processes, key=lambda k: k == "munged"):
            p = self.processes[key]
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.processes = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
