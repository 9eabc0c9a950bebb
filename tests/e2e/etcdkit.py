"""A real etcd for the end-to-end tests of replicas: Debian's `etcd` (package etcd-server; `bash
.ci/test-all` installs it) with `size` members on free loopback ports, each with its data dir
under the test's workdir, stopped by the PIDs started here. Every wait is bounded.

`Etcd(workdir).flags("/prefix/")` are the `tiphys server` arguments of a replica on it.
"""

import json
import socket
import ssl
import subprocess
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import pytest

from conftest import require_tool

STARTUP = 30  # seconds for every member to answer /health (a loaded 2-core machine is slow)
ATTEMPTS = 3  # a port picked free may be taken before etcd binds it: start over


def _free_ports(n):
    """`n` distinct loopback ports, all bound at once and then released for etcd to take."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def _healthy(client_url, context=None):
    """etcd's own health answer: true once the member serves reads and writes (has a leader)."""
    try:
        with urllib.request.urlopen(f"{client_url}/health", timeout=2, context=context) as r:
            return r.status == 200 and json.loads(r.read()).get("health") == "true"
    except (OSError, ValueError):
        return False


class Etcd:
    """A running etcd cluster; `endpoints` are its members' client URLs."""

    def __init__(self, workdir, size=1, tls=None):
        """`tls`: an EtcdTls; the members then serve https only and require its client certificate."""
        require_tool("etcd")
        self.workdir = Path(workdir)
        self.size = size
        self.tls = tls
        self.procs = []
        self.attempt = 0
        last = ""
        for _ in range(ATTEMPTS):
            self.attempt += 1
            self._spawn()
            last = self._wait_healthy()
            if not last:
                return
            self.stop()
        pytest.fail(f"etcd did not start in {ATTEMPTS} attempts; last: {last}")

    def _spawn(self):
        ports = _free_ports(2 * self.size)
        scheme = "https" if self.tls else "http"
        clients = [f"{scheme}://127.0.0.1:{ports[2 * i]}" for i in range(self.size)]
        peers = [f"http://127.0.0.1:{ports[2 * i + 1]}" for i in range(self.size)]
        initial = ",".join(f"m{i}={peer}" for i, peer in enumerate(peers))
        self.endpoints = clients
        self.logs = []
        for i in range(self.size):
            data_dir = self.workdir / f"try{self.attempt}" / f"m{i}"
            data_dir.mkdir(parents=True)
            log = data_dir.parent / f"m{i}.log"
            cmd = ["etcd", "--name", f"m{i}", "--data-dir", str(data_dir),
                   "--listen-client-urls", clients[i], "--advertise-client-urls", clients[i],
                   "--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
                   "--initial-cluster", initial, "--initial-cluster-token", f"tiphys-e2e-{ports[0]}",
                   "--initial-cluster-state", "new", "--logger", "zap", "--log-outputs", "stderr"]
            if self.tls:
                cmd += ["--cert-file", str(self.tls.server_cert), "--key-file", str(self.tls.server_key),
                        "--trusted-ca-file", str(self.tls.ca), "--client-cert-auth"]
            with open(log, "wb") as out:
                self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                                   stdin=subprocess.DEVNULL))
            self.logs.append(log)

    def _wait_healthy(self):
        """"" once every member is healthy, else why not (a member exited, or the time is up)."""
        deadline = time.monotonic() + STARTUP
        pending = set(range(self.size))
        while pending and time.monotonic() < deadline:
            for i in sorted(pending):
                if self.procs[i].poll() is not None:
                    return f"member m{i} exited with {self.procs[i].returncode}: {self.tail(i)}"
                if _healthy(self.endpoints[i], self.tls.client_context() if self.tls else None):
                    pending.discard(i)
            if pending:
                time.sleep(0.1)
        if pending:
            i = min(pending)
            return f"member m{i} ({self.endpoints[i]}) not healthy within {STARTUP} s: {self.tail(i)}"
        return ""

    def tail(self, i, n=3000):
        try:
            return self.logs[i].read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def flags(self, prefix):
        """The arguments of a `tiphys server` that keeps its store under `prefix` of this etcd."""
        return ("--etcd-endpoints", ",".join(self.endpoints), "--etcd-prefix", prefix)

    def stop(self):
        """SIGTERM to every member started here (by PID), SIGKILL after 10 s."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.procs = []


class EtcdTls:
    """A CA, a server certificate for 127.0.0.1 and a client certificate (openssl), in `d`."""

    def __init__(self, d):
        require_tool("openssl")
        d = Path(d)
        d.mkdir(parents=True, exist_ok=True)
        self.ca, self.ca_key = d / "ca.crt", d / "ca.key"
        self.server_cert, self.server_key = d / "server.crt", d / "server.key"
        self.client_cert, self.client_key = d / "client.crt", d / "client.key"
        self._openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                      "-days", "2", "-subj", "/CN=tiphys test etcd CA", "-keyout", self.ca_key, "-out", self.ca)
        self._leaf(d, "server", "/CN=etcd", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth")
        self._leaf(d, "client", "/CN=tiphys", "extendedKeyUsage=clientAuth")

    @staticmethod
    def _openssl(*args):
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)

    def _leaf(self, d, name, subject, ext):
        csr, key, crt, extfile = d / f"{name}.csr", d / f"{name}.key", d / f"{name}.crt", d / f"{name}.ext"
        extfile.write_text("basicConstraints=critical,CA:FALSE\n" + ext + "\n")
        self._openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                      "-subj", subject, "-keyout", key, "-out", csr)
        self._openssl("x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key, "-CAcreateserial",
                      "-days", "2", "-extfile", extfile, "-out", crt)

    def client_context(self):
        ctx = ssl.create_default_context(cafile=str(self.ca))
        ctx.load_cert_chain(str(self.client_cert), str(self.client_key))
        return ctx

