"""LocalCluster: a parameter-server cluster of `bx ps serve` processes on this host, for tests,
examples and trying bexpress out. Each replica is its own process, as in production; with
`etcd=True` an etcd of its own keeps each shard's configuration and its primary's lease, so a
killed primary is replaced without losing an acknowledged push (docs/PS.md).

    with LocalCluster(shards=2, replicas=2, tables=[...], etcd=True) as cluster:
        client = bexpress.PsClient(cluster.path, transport="tcp")
        ...
        cluster.kill(shard=0, replica=0)

The bx binary is $BX_BIN, else the one installed beside the package, else the build tree's,
else bx on PATH (find_bx).
"""

import json
import os
import resource
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request


def find_bx():
    """The bx binary: $BX_BIN; else the one installed with this package (cmake --install puts the
    package in <prefix>/lib/python3.X/dist-packages/bexpress and bx in <prefix>/bin); else the
    build tree's (build/python/bexpress beside build/bin); else bx on PATH."""
    if os.environ.get("BX_BIN"):
        if not os.access(os.environ["BX_BIN"], os.X_OK):
            raise FileNotFoundError(f"BX_BIN={os.environ['BX_BIN']} is not an executable")
        return os.environ["BX_BIN"]
    package = os.path.dirname(os.path.abspath(__file__))  # not realpath: the build tree links
    looked = ["$BX_BIN (not set)"]
    if os.path.basename(os.path.dirname(package)) in ("dist-packages", "site-packages"):
        looked.append(os.path.join(package, *[os.pardir] * 4, "bin", "bx"))
    looked.append(os.path.join(package, os.pardir, os.pardir, "bin", "bx"))
    for candidate in looked[1:]:
        if os.access(candidate, os.X_OK):
            return os.path.normpath(candidate)
    if shutil.which("bx"):
        return shutil.which("bx")
    places = [looked[0]] + [os.path.normpath(c) for c in looked[1:]] + ["bx on PATH"]
    raise FileNotFoundError("no bx binary; looked at " + ", ".join(places) +
                            ": install bexpress (cmake --install) or set BX_BIN to its bx")


_taken = set()  # ports this process handed out (a cluster file must not name one twice)


def free_port():
    """A port nobody listens on now, below the kernel's ephemeral range: a port the kernel
    assigned would be free to assign again to any process's next outgoing connection before
    our server binds it, a race a busy machine (a parallel test suite) does lose."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
    high = max(ephemeral_low - 1, 12000)
    for _ in range(1000):
        port = random.randrange(10000, high)
        if port in _taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _taken.add(port)
        return port
    raise RuntimeError("no free port below the ephemeral range")


class _PortTaken(RuntimeError):
    """A replica could not listen: another process took its port after we chose it."""


def _wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise TimeoutError(f"{what} within {timeout} s")


class LocalCluster:
    """`shards` x `replicas` `bx ps serve` processes on 127.0.0.1 holding `tables` (cluster-file
    table entries). The cluster file is at .path; replica 0 of each shard starts as primary."""

    def __init__(self, shards=1, replicas=1, tables=(), etcd=False, lease_ms=2000,
                 bx=None, workdir=None, env=None, serve_args=(), serve_nofile=None):
        self.bx = bx or find_bx()
        self.serve_args = list(serve_args)  # more `bx ps serve` flags, the same for every replica
        # The open-file limit of every `bx ps serve`, soft and hard (None: inherited).
        self.serve_nofile = serve_nofile
        self._owned_dir = workdir is None
        self.dir = workdir or tempfile.mkdtemp(prefix="bx-cluster-")
        self.path = os.path.join(self.dir, "cluster.json")
        self.env = dict(os.environ, **(env or {}))
        self.lease_ms = lease_ms
        self.processes = {}  # (shard, replica) -> Popen
        self.etcd = None
        for attempt in range(3):
            try:
                self._start(shards, replicas, tables, etcd)
                return
            except _PortTaken:
                self._stop_processes()
                if attempt == 2:
                    self.close()
                    raise
            except BaseException:
                self.close()
                raise

    def _start(self, shards, replicas, tables, etcd):
        spec = {"version": 1, "tables": list(tables), "secret_file": "cluster.secret",
                "shards": [{"replicas": [{"rdma": f"rdma://127.0.0.1:{free_port()}",
                                          "tcp": f"tcp://127.0.0.1:{free_port()}"}
                                         for _ in range(replicas)]}
                           for _ in range(shards)]}
        secret = os.path.join(self.dir, "cluster.secret")
        with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(os.urandom(16).hex())
        if etcd:
            spec["config_store"] = self._start_etcd()
        with open(self.path, "w") as f:
            json.dump(spec, f, indent=1)
        self.spec = spec
        for s in range(shards):
            for r in range(replicas):
                if os.path.exists(self.log_path(s, r)):
                    os.remove(self.log_path(s, r))  # an earlier attempt's
                self.start(s, r)
        for s in range(shards):
            for r in range(replicas):
                self._wait_listening(s, r)
        # Ready means ready: each primary is primary with its backups linked (bx ps serve says
        # so), so the first pushes need no failover.
        for s in range(shards):
            for r in range(replicas):
                self._wait_log(s, r, "ready:", "ready")

    def _start_etcd(self):
        client, peer = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        log = open(os.path.join(self.dir, f"etcd-{client}.log"), "w")
        self.etcd = subprocess.Popen(
            ["etcd", "--name", "default", "--data-dir", os.path.join(self.dir, f"etcd-{client}"),
             "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
             "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
             "--initial-cluster", f"default={peer_url}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def healthy():
            if self.etcd.poll() is not None:
                with open(log.name) as f:
                    text = f.read()
                raise (_PortTaken if "in use" in text else RuntimeError)(
                    f"etcd exited {self.etcd.returncode}: {text[-2000:]}")
            try:
                with urllib.request.urlopen(client_url + "/health", timeout=1) as reply:
                    return b'"true"' in reply.read()
            except OSError:
                return False
        _wait_for(healthy, 30, "etcd healthy")
        return client_url

    def log_path(self, shard, replica):
        return os.path.join(self.dir, f"shard{shard}-replica{replica}.log")

    def start(self, shard, replica):
        """Starts (or restarts) one replica's process."""
        command = [self.bx, "ps", "serve", "--cluster", self.path, "--shard", str(shard),
                   "--replica", str(replica)]
        if self.etcd:
            command += ["--lease-ms", str(self.lease_ms)]
        command += self.serve_args
        with open(self.log_path(shard, replica), "a") as log:  # the child keeps its own copy
            nofile = self.serve_nofile
            limit = (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
                     if nofile else None)
            self.processes[(shard, replica)] = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env, preexec_fn=limit)

    def _wait_listening(self, shard, replica):
        self._wait_log(shard, replica, "listening on", "listening")

    def _wait_log(self, shard, replica, line, what):
        def logged():
            process = self.processes[(shard, replica)]
            if process.poll() is not None:
                log = self.log(shard, replica)
                error = _PortTaken if "in use" in log else RuntimeError
                raise error(f"bx ps serve shard {shard} replica {replica} exited "
                            f"{process.returncode}: {log}")
            return line in self.log(shard, replica)
        _wait_for(logged, 60, f"shard {shard} replica {replica} {what}")

    def secret(self):
        """The cluster secret, as `bx ps serve` reads it from the secret file."""
        with open(os.path.join(self.dir, self.spec["secret_file"])) as f:
            return f.read().strip()

    def log(self, shard, replica):
        with open(self.log_path(shard, replica)) as f:
            return f.read()

    def kill(self, shard, replica):
        """SIGKILL: the replica stops mid-whatever, as a crashed host would."""
        process = self.processes.pop((shard, replica))
        process.kill()
        process.wait()

    def close(self):
        self._stop_processes()
        if self._owned_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _stop_processes(self):
        for process in self.processes.values():
            process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()
        if self.etcd:
            self.etcd.kill()
            self.etcd.wait()
            self.etcd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
