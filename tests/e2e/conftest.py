"""Shared fixtures for the end-to-end tests: start real tiphys servers (and proxies) on loopback.

`tiphys(*args, address=...)` starts `tiphys server` in a temp dir, waits for its ready file and
returns a `Server` (port, metrics_port, data_dir, ca); `servers` does the same and can restart a
server on its data dir; `etcd` is a real etcd (etcdkit.py) for replicas that share one store.
Every process a test starts is stopped by PID on teardown; a tiphys server that does not exit
within 25 s after SIGTERM fails the test.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
TARGET_DIR = _target if _target.is_absolute() else REPO / _target


def _host_triple():
    try:
        out = subprocess.run(["rustc", "-vV"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("host:")), None)


def _default_bin(profile):
    """<target>/<profile>/tiphys, or <target>/<host triple>/<profile>/tiphys when the build names
    its target explicitly; the newest existing one wins (the first candidate when none exists)."""
    triple = _host_triple()
    candidates = [TARGET_DIR / profile / "tiphys"]
    if triple:
        candidates.insert(0, TARGET_DIR / triple / profile / "tiphys")
    existing = [c for c in candidates if c.is_file()]
    return str(max(existing, key=lambda c: c.stat().st_mtime) if existing else candidates[0])


TIPHYS_BIN = os.environ.get("TIPHYS_BIN") or _default_bin("debug")
TIPHYS_RELEASE_BIN = os.environ.get("TIPHYS_RELEASE_BIN") or _default_bin("release")

READY_TIMEOUT = 30  # the first start hashes the admin password; slow on a loaded machine
EXIT_TIMEOUT = 25


def clean_env(**extra):
    """The environment without any TIPHYS_* setting that could change a server or the CLI."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIPHYS_")}
    env.setdefault("RUST_LOG", "info")
    env.update(extra)
    return env


def free_port(host="127.0.0.1"):
    """A port that is free on `host` right now (for proxies, which cannot take port 0)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_port(host, port, timeout=10.0, proc=None, log=None):
    """Wait until something accepts TCP connections on host:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"process exited with {proc.returncode} before listening on {port}: {_tail(log)}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"nothing listening on {host}:{port} after {timeout} s: {_tail(log)}")


def _tail(path, n=3000):
    try:
        return Path(path).read_text(errors="replace")[-n:] if path else ""
    except OSError:
        return ""


def hostport(host, port):
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Server:
    """A running `tiphys server`."""

    def __init__(self, proc, address, port, metrics_port, data_dir, log, tls):
        self.proc = proc
        self.address = address
        self.port = port
        self.metrics_port = metrics_port
        self.data_dir = data_dir
        self.log = log
        self.tls = tls
        self.ca = data_dir / "tls" / "tls.crt"

    @property
    def addr(self):
        """host:port as a client writes it (IPv6 in brackets)."""
        return hostport(self.address, self.port)

    def url(self, path="/", scheme=None):
        return f"{scheme or ('https' if self.tls else 'http')}://{self.addr}{path}"

    def logs(self):
        return _tail(self.log, 20000)

    def stop(self):
        """SIGTERM, then require a clean exit (status 0) within EXIT_TIMEOUT seconds."""
        crashed = self.proc.poll() is not None
        if not crashed:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
                pytest.fail(f"tiphys (pid {self.proc.pid}) did not exit within {EXIT_TIMEOUT} s of SIGTERM")
        if crashed or self.proc.returncode != 0:
            when = "before the test ended" if crashed else "after SIGTERM"
            pytest.fail(f"tiphys (pid {self.proc.pid}) exited with {self.proc.returncode} {when}:\n"
                        f"{_tail(self.log)}")


def start_server(workdir, *args, address="127.0.0.1", data_dir=None):
    """Starts `tiphys server` in a new data dir under `workdir`, or in `data_dir` (a restart: the
    log is appended to)."""
    if not os.path.isfile(TIPHYS_BIN):
        pytest.fail(f"tiphys binary {TIPHYS_BIN} does not exist: run `cargo build` (or set TIPHYS_BIN)")
    data_dir = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="tiphys-", dir=workdir))
    ready = data_dir / "ready.json"
    log = data_dir / "server.log"
    ready.unlink(missing_ok=True)
    cmd = [TIPHYS_BIN, "server", "--address", address, "--port", "0",
           "--metrics-address", "127.0.0.1", "--metrics-port", "0",
           "--data-dir", str(data_dir), "--ready-file", str(ready), *args]
    with open(log, "ab") as out:
        # Stops are immediate unless a test gives --shutdown-delay (the flag wins over the variable);
        # repositories at the made-up URLs tests store are not contacted unless a test gives
        # --repo-access on (tests/e2e/test_repositories_remote.py), nor clusters unless it gives
        # --cluster-access on.
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=clean_env(NO_COLOR="1", TIPHYS_SHUTDOWN_DELAY="0",
                                              TIPHYS_REPO_ACCESS="off", TIPHYS_CLUSTER_ACCESS="off"))
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"tiphys exited with {proc.returncode}: {' '.join(cmd)}\n{_tail(log)}")
        if ready.exists():
            try:
                info = json.loads(ready.read_text())
                break
            except ValueError:
                pass  # being written
        time.sleep(0.05)
    else:
        proc.kill()
        proc.wait(timeout=5)
        pytest.fail(f"tiphys wrote no ready file within {READY_TIMEOUT} s\n{_tail(log)}")
    return Server(proc, address, info["port"], info["metrics_port"], data_dir, log, "--insecure" not in args)


class _Factory:
    def __init__(self, workdir):
        self.workdir = workdir
        self.servers = []

    def __call__(self, *args, address="127.0.0.1"):
        server = start_server(self.workdir, *args, address=address)
        self.servers.append(server)
        return server

    def stop_all(self):
        for server in self.servers:
            server.stop()


@pytest.fixture
def tiphys(tmp_path):
    """Factory: tiphys("--insecure", ...) -> Server, stopped at the end of the test."""
    factory = _Factory(tmp_path)
    yield factory
    factory.stop_all()


@pytest.fixture(scope="session")
def tiphys_session(tmp_path_factory):
    """Like `tiphys`, for servers shared by a whole session."""
    factory = _Factory(tmp_path_factory.mktemp("servers"))
    yield factory
    factory.stop_all()


class Servers:
    """Servers a test starts, which it may restart (SIGTERM or kill -9) on the same data dir; each
    still running is stopped at teardown like `tiphys` does (clean exit required)."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.running = []
        self.helpers = []

    def also_stop(self, helper):
        """Stops `helper` (anything with `stop()`, such as an OIDC provider) at teardown too."""
        self.helpers.append(helper)
        return helper

    def start(self, *args, config=None, address="127.0.0.1", data_dir=None):
        """`config`: a config dir (anything with a `path`) passed as --config-dir."""
        if config is not None:
            args = (*args, "--config-dir", str(config.path))
        server = start_server(self.workdir, *args, address=address, data_dir=data_dir)
        server.args = args
        self.running.append(server)
        return server

    def restart(self, server, kill=False):
        """Stops `server` (SIGTERM; SIGKILL with kill=True) and starts it again with the same
        arguments on the same data dir."""
        self.running.remove(server)
        if kill:
            server.proc.kill()
            server.proc.wait(timeout=10)
        else:
            server.stop()
        return self.start(*server.args, address=server.address, data_dir=server.data_dir)

    def stop_all(self):
        while self.running:
            self.running.pop().stop()
        while self.helpers:
            self.helpers.pop().stop()


@pytest.fixture
def servers(tmp_path):
    """Factory: servers.start("--insecure", ...) -> Server; servers.restart(server, kill=...)."""
    factory = Servers(tmp_path)
    yield factory
    factory.stop_all()


@pytest.fixture
def etcd(tmp_path, servers):
    """A real one-member etcd (etcdkit.Etcd) on loopback for replicas started with
    `servers.start(..., *etcd.flags("/prefix/"))`; stopped after the test's servers."""
    from etcdkit import Etcd  # noqa: PLC0415 (etcdkit imports this module)
    return servers.also_stop(Etcd(tmp_path / "etcd"))


@pytest.fixture(scope="session")
def gitservers(tmp_path_factory):
    """Real Git and Helm servers on loopback (gitkit.GitServers): nginx with git http-backend (open,
    basic, bearer, client certificate, plain http) and Helm repositories, git daemon, sshd, a
    staller; the test repositories with their SHAs. Started once per session."""
    from gitkit import start_gitservers  # noqa: PLC0415 (gitkit imports this module)
    started = start_gitservers(tmp_path_factory.mktemp("gitservers"))
    yield started
    started.stop()


@pytest.fixture
def staller():
    """A loopback port that accepts connections and never answers (gitkit.Staller), for one test."""
    from gitkit import Staller  # noqa: PLC0415
    stalling = Staller()
    yield stalling
    stalling.stop()


@pytest.fixture(scope="module")
def module_servers(tmp_path_factory):
    """Like `servers`, for servers shared by the tests of one module (which leave them usable)."""
    factory = Servers(tmp_path_factory.mktemp("servers"))
    yield factory
    factory.stop_all()


@pytest.fixture
def config_dir(tmp_path):
    """Factory: config_dir(cm=..., secret=...) -> a --config-dir with argocd-cm and argocd-secret
    (the standard test accounts unless standard=False; see authkit.config_factory)."""
    from authkit import config_factory  # noqa: PLC0415 (authkit imports this module)
    return config_factory(tmp_path)


@pytest.fixture(scope="module")
def module_config(tmp_path_factory):
    """Like `config_dir`, for servers shared by a module."""
    from authkit import config_factory  # noqa: PLC0415
    return config_factory(tmp_path_factory.mktemp("config"))


@pytest.fixture(scope="session")
def tls_server(tiphys_session):
    """A default (TLS mode, self-signed certificate) server shared by read-only tests."""
    return tiphys_session()


@pytest.fixture(scope="session")
def insecure_server(tiphys_session):
    """A plaintext (--insecure) server shared by read-only tests."""
    return tiphys_session("--insecure")


class Processes:
    """Helper processes (nginx, haproxy) started by a test, stopped by PID on teardown."""

    def __init__(self):
        self.procs = []

    def start(self, cmd, log, cwd=None):
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd)
        self.procs.append(proc)
        return proc

    def stop_all(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)


@pytest.fixture
def processes():
    procs = Processes()
    yield procs
    procs.stop_all()


def cli(*args, timeout=30, bin_path=None):
    """Run the tiphys CLI; returns the CompletedProcess (text mode)."""
    return subprocess.run([bin_path or TIPHYS_BIN, *args], capture_output=True, text=True, timeout=timeout,
                          env=clean_env(NO_COLOR="1"), stdin=subprocess.DEVNULL)


def rest_version(server):
    """The server version as REST reports it (ground truth for gRPC and CLI answers)."""
    out = subprocess.run(["curl", "-sS", "-k", "--max-time", "10", server.url("/api/version")],
                         capture_output=True, text=True, timeout=20, check=True).stdout
    return json.loads(out)["Version"]


def decode_fields(data):
    """Minimal protobuf decoder: {field_number: [values]} (varints as int, length-delimited as bytes)."""
    fields, i = {}, 0

    def varint():
        nonlocal i
        shift = value = 0
        while True:
            b = data[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value

    while i < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
        elif wire == 2:
            n = varint()
            value, i = data[i:i + n], i + n
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        fields.setdefault(number, []).append(value)
    return fields


VERSION_RE = re.compile(r"^v\d+\.\d+\.\d+")


def require_tool(name):
    path = shutil.which(name)
    if not path:
        pytest.fail(f"{name} is not installed (bash .ci/test-all installs it)")
    return path


@pytest.fixture(scope="session")
def app_pb(tmp_path_factory):
    """Python stubs of our application protos, compiled with grpcio-tools for this session
    (appkit.compile_stubs): .app (application_pb2), .grpc (its _grpc), .v1 (v1alpha1), .meta."""
    from appkit import compile_stubs  # noqa: PLC0415 (appkit imports this module)
    return compile_stubs(tmp_path_factory.mktemp("app-stubs"))


@pytest.fixture
def watches():
    """Collects watch readers (appkit.RestWatch/GrpcWatch) and closes them at teardown."""
    from appkit import Watches  # noqa: PLC0415
    opened = Watches()
    yield opened
    opened.close_all()


# ---- the real Kubernetes and Argo CD parts (controlplane.py) ----------------------------------


@pytest.fixture(scope="session")
def controlplane(tmp_path_factory):
    """A real kube-apiserver (with etcd and kube-controller-manager), Argo CD's CRDs and settings,
    Redis, argocd-repo-server and argocd-application-controller on loopback (controlplane.py),
    shared by the session; `controlplane.start_argocd_server()` adds upstream argocd-server. A part
    that cannot start fails every test that needs it, naming the part. Runs only under
    tools/upstream/isolated (the controller binds 0.0.0.0); .ci/test-all runs these tests there."""
    from controlplane import ControlPlane, PartFailed  # noqa: PLC0415
    plane = ControlPlane(tmp_path_factory.mktemp("controlplane"))
    try:
        plane.up()
    except PartFailed as e:
        plane.down()
        pytest.fail(f"the control plane did not start: {e}", pytrace=False)
    yield plane
    plane.down()


@pytest.fixture
def plane(controlplane, request):
    """`controlplane`, with what each part logged during this test added to a failure's report."""
    marks = controlplane.marks()
    yield controlplane
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(f"\n==== control plane logs during {request.node.name} ====\n{controlplane.logs_since(marks)}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def pytest_collection_modifyitems(items):
    """Tests that use the control plane carry the `controlplane` mark (.ci/test-all selects them
    with -m to run them under tools/upstream/isolated)."""
    for item in items:
        if "controlplane" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.controlplane)


def pytest_configure(config):
    config.addinivalue_line("markers", "controlplane: needs the real Kubernetes and Argo CD parts "
                                       "(run under tools/upstream/isolated)")
