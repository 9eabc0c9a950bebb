"""A real Kubernetes control plane and a real Argo CD on loopback, for tests and benchmarks.

The parts are the ones an Argo CD installation runs, built from the Go module proxy at the versions
pinned in tools/upstream/ (`bash tools/upstream/build.sh`), plus Debian's etcd and Redis. They
start in this order, each bounded in time, each named when it fails:

  etcd                           Debian's etcd-server (3.4), one member
  kube-apiserver                 its own CA, serving certificate, ServiceAccount signing keys, and
                                 an admin client certificate (O=system:masters) in a kubeconfig
  kube-controller-manager        namespace deletion, garbage collection, ServiceAccounts (optional)
  crds                           Argo CD's CRDs, from the pinned module's manifests/crds
  argocd namespace               argocd-cm, argocd-rbac-cm, argocd-cmd-params-cm, the certificate,
                                 known-hosts and GPG ConfigMaps, argocd-secret (admin password,
                                 server.secretkey), and the cluster Secret of the loopback URL
  redis                          Debian's redis-server
  argocd-repo-server             plaintext gRPC
  argocd-application-controller
  argocd-server                  TLS on its own port, only when a test asks (`start_argocd_server`)

Everything binds 127.0.0.1 on free ports. Each process runs in a process group of its own and is
ended by that id (its PID). Logs go to `<root>/logs/<part>.log`; `marks()` and `logs_since()` cut
out what a part wrote during one test.

One description for every language: `up()` writes `<root>/controlplane.json` (`STATE_FILE`): the
ports, URLs, certificate and kubeconfig paths, log files, PIDs and each part's start time. Rust
tests and benchmarks start the plane with `python3 tests/e2e/controlplane.py up ROOT` and read that
file (tests/support/controlplane.rs); `... down ROOT` ends what `up` started.

**The destination cluster** is the same API server, registered twice:
  * by its loopback URL, as the cluster Secret `cluster-loopback` (name `loopback`, a bearer token
    of the ServiceAccount `argocd-application-controller`, which is bound to cluster-admin, and the
    CA), and
  * as `in-cluster` (`https://kubernetes.default.svc`), written as users write it. Argo CD resolves
    that URL with client-go's in-cluster configuration: the environment variables
    KUBERNETES_SERVICE_HOST/PORT and the files under /var/run/secrets/kubernetes.io/serviceaccount.
    The harness gives the Argo CD processes exactly that: KUBERNETES_SERVICE_HOST=127.0.0.1 with the
    API server's port, and the token and CA on a tmpfs mounted over /run in a mount namespace of
    the process's own (`unshare --mount`, root only). Nothing on the host's /run changes. Where
    `unshare` cannot be used, `in_cluster` in the state file is false and only `loopback` works.

**An external cluster.** `up(argocd=False)` (`up ROOT --cluster-only`) starts only etcd,
kube-apiserver and kube-controller-manager under a root of its own (its own CA, ports and
kubeconfig): a second destination cluster beside the installation, as `argocd cluster add` meets one
(tests/e2e/test_cluster_add.py).

**Isolation.** argocd-application-controller binds its metrics and health server to 0.0.0.0 (its
address is not configurable). So the controller is only started inside a network namespace of the
run's own (`tools/upstream/isolated CMD...`), where 0.0.0.0 is loopback alone; outside one, `up()`
refuses to start it and says how to run.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = REPO / "tools" / "upstream"
STATE_FILE = "controlplane.json"
NAMESPACE = "argocd"
IN_CLUSTER_URL = "https://kubernetes.default.svc"
ADMIN_PASSWORD_LENGTH = 24
START_TIMEOUT = 90.0  # one part, from exec to ready, on a loaded 2-core machine
STOP_TIMEOUT = 15.0
# How often the controller reconciles and the repo-server re-resolves a branch. An installation
# sets both from argocd-cm's timeout.reconciliation (upstream's default 120 s) through the
# environment variable ARGOCD_RECONCILIATION_TIMEOUT; the plane does the same, shorter, so that
# auto-sync after a push happens within a test.
RECONCILIATION = "10s"


class PartFailed(RuntimeError):
    """A part could not be built, started or configured: `part` names it, the message says why."""

    def __init__(self, part: str, reason: str):
        super().__init__(f"{part}: {reason}")
        self.part = part
        self.reason = reason


# ---- binaries ---------------------------------------------------------------------------------


def upstream_bins() -> list[Path]:
    """The folders of the built kube-apiserver, kube-controller-manager and argocd (build.sh
    --print), or $TIPHYS_UPSTREAM_BIN (folders separated by ':'). Raises PartFailed naming what is
    missing."""
    if os.environ.get("TIPHYS_UPSTREAM_BIN"):
        return [Path(d) for d in os.environ["TIPHYS_UPSTREAM_BIN"].split(":") if d]
    res = subprocess.run(["bash", str(UPSTREAM / "build.sh"), "--print"], capture_output=True,
                         text=True, timeout=120)
    dirs = [Path(d) for d in res.stdout.split()]
    if res.returncode != 0 or not dirs:
        raise PartFailed("upstream binaries", (res.stderr.strip() or "tools/upstream/build.sh --print failed")
                         + " (bash tools/upstream/build.sh builds them)")
    return dirs


def _bin(bins: list[Path], name: str) -> str:
    for d in bins:
        if os.access(d / name, os.X_OK):
            return str(d / name)
    raise PartFailed(name, f"no {name} in {', '.join(map(str, bins))}: run bash tools/upstream/build.sh")


def argocd_module_dir() -> Path:
    """The pinned github.com/argoproj/argo-cd/v3 module's source folder in Go's module cache (for
    manifests/crds), downloaded when it is not there yet."""
    res = subprocess.run(["go", "list", "-mod=readonly", "-m", "-json", "github.com/argoproj/argo-cd/v3"],
                         cwd=UPSTREAM / "argocd", capture_output=True, text=True, timeout=300)
    if res.returncode == 0:
        d = json.loads(res.stdout).get("Dir")
        if d and Path(d).is_dir():
            return Path(d)
    version = json.loads(res.stdout)["Version"] if res.returncode == 0 else None
    if version:
        res = subprocess.run(["go", "mod", "download", "-json", f"github.com/argoproj/argo-cd/v3@{version}"],
                             capture_output=True, text=True, timeout=300)
        if res.returncode == 0:
            return Path(json.loads(res.stdout)["Dir"])
    raise PartFailed("crds", f"cannot find the argo-cd module's source: {res.stderr.strip()[-500:]}")


def require(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if not path:
        raise PartFailed(tool, f"{tool} is not installed (Debian package {package}; .ci/test-all installs it)")
    return path


def isolated_network() -> bool:
    """True inside a network namespace that has no interface but loopback (tools/upstream/isolated)."""
    try:  # /proc/net is the calling process's namespace (/sys/class/net is the host's until remounted)
        lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    except OSError:
        return False
    return [line.split(":")[0].strip() for line in lines] == ["lo"]


def can_unshare_mounts() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    res = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, timeout=30)
    return res.returncode == 0


# ---- certificates -----------------------------------------------------------------------------


def _openssl(part: str, *args: str, cwd: Path) -> None:
    res = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise PartFailed(part, f"openssl {' '.join(args)}: {res.stderr.strip()}")


class Pki:
    """The plane's certificates, all in one folder: a CA, the API server's serving certificate (also
    argocd-server's), an admin client certificate, and the ServiceAccount signing key pair."""

    SANS = ("DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,"
            "DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1")

    def __init__(self, d: Path):
        self.dir = d
        d.mkdir(parents=True, exist_ok=True)
        self.ca, self.ca_key = d / "ca.crt", d / "ca.key"
        self.serving, self.serving_key = d / "serving.crt", d / "serving.key"
        self.admin, self.admin_key = d / "admin.crt", d / "admin.key"
        self.sa_key, self.sa_pub = d / "sa.key", d / "sa.pub"
        if self.sa_pub.exists():
            return
        self._ec_key("ca")
        self._openssl("req", "-x509", "-new", "-key", "ca.key", "-days", "7", "-subj", "/CN=tiphys-test-kubernetes-ca",
                      "-addext", "basicConstraints=critical,CA:TRUE",
                      "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", "ca.crt")
        self._leaf("serving", "/CN=kube-apiserver", "serverAuth", self.SANS)
        self._leaf("admin", "/O=system:masters/CN=tiphys-test-admin", "clientAuth")
        self._openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key")
        self._openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        for key in d.glob("*.key"):
            key.chmod(0o600)

    def _openssl(self, *args: str) -> None:
        _openssl("certificates", *args, cwd=self.dir)

    def _ec_key(self, name: str) -> None:
        self._openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{name}.key")

    def _leaf(self, name: str, subject: str, usage: str, sans: str | None = None) -> None:
        self._ec_key(name)
        self._openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr")
        ext = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature",
               f"extendedKeyUsage={usage}"]
        if sans:
            ext.append(f"subjectAltName={sans}")
        (self.dir / f"{name}.ext").write_text("\n".join(ext) + "\n")
        self._openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                      "-days", "7", "-extfile", f"{name}.ext", "-out", f"{name}.crt")


# ---- processes --------------------------------------------------------------------------------


def free_ports(n: int) -> list[int]:
    """`n` distinct loopback ports, bound at once and released for the parts to take."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def tail(path: Path | str, n: int = 2500) -> str:
    try:
        return Path(path).read_text(errors="replace")[-n:]
    except OSError:
        return ""


def _signal_group(pid: int, sig: int) -> bool:
    try:
        os.killpg(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def stop_pid(pid: int, timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM to the process group whose id is `pid` (a part started here), SIGKILL to what is
    left after `timeout`."""
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _signal_group(pid, 0) and time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)
    _signal_group(pid, signal.SIGKILL)
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


class Part:
    """One started process: its name, PID, log and how long it took to become ready."""

    def __init__(self, name: str, proc: subprocess.Popen, log: Path, started: float):
        self.name, self.proc, self.log, self.started = name, proc, log, started
        self.ready_in: float | None = None

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise PartFailed(self.name, f"exited with status {self.proc.returncode} (log {self.log}):\n"
                                        f"{tail(self.log)}")

    def wait_ready(self, probe, timeout: float = START_TIMEOUT, what: str = "ready", interval: float = 0.1) -> None:
        """Polls `probe()` every `interval` s (True when ready; an exception is remembered as the
        last reason) until it holds, the process exits, or `timeout` passes."""
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                if probe():
                    self.ready_in = round(time.monotonic() - self.started, 3)
                    return
            except Exception as e:  # noqa: BLE001 - the reason is reported below
                last = f"{type(e).__name__}: {e}"
            time.sleep(interval)
        raise PartFailed(self.name, f"not {what} within {timeout:.0f} s (last: {last}); log {self.log}:\n"
                                    f"{tail(self.log)}")


def _tcp_open(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True


# ---- the plane --------------------------------------------------------------------------------


class ControlPlane:
    """The parts, started under `root` (see the module docstring). Use `up()` and `down()`, or
    the pytest fixture `controlplane` in conftest.py."""

    def __init__(self, root: Path | str):
        self.root = Path(root).resolve()
        self.logs = self.root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.parts: dict[str, Part] = {}
        self.state: dict = {"root": str(self.root), "namespace": NAMESPACE, "parts": {}}
        self.bins: list[Path] = []
        self.state_file = STATE_FILE
        # Extra data for argocd-cm, argocd-rbac-cm and argocd-secret, by name (`up(settings=...)`).
        self.settings: dict[str, dict[str, str]] = {}

    # -- the state file: the one description every language reads --

    def _save(self) -> None:
        for name, part in self.parts.items():
            self.state["parts"][name] = {"pid": part.proc.pid, "log": str(part.log), "ready_in_s": part.ready_in}
        tmp = self.root / (self.state_file + ".tmp")
        tmp.write_text(json.dumps(self.state, indent=2, sort_keys=True))
        tmp.replace(self.root / self.state_file)

    def _start(self, name: str, cmd: list[str], env: dict | None = None, in_cluster: bool = False) -> Part:
        log = self.logs / f"{name}.log"
        if in_cluster and self.state.get("in_cluster"):
            cmd = self._in_cluster_wrapper() + cmd
            env = {**(env or os.environ), "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                   "KUBERNETES_SERVICE_PORT": str(self.state["apiserver"]["port"])}
        with open(log, "ab") as out:
            out.write(f"---- {time.strftime('%H:%M:%S')} {' '.join(cmd)}\n".encode())
            out.flush()
            try:
                proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        env=env, cwd=self.root, start_new_session=True)
            except OSError as e:
                raise PartFailed(name, f"cannot start {cmd[0]}: {e}") from e
        part = Part(name, proc, log, time.monotonic())
        self.parts[name] = part
        return part

    def _in_cluster_wrapper(self) -> list[str]:
        """A private mount namespace whose /run is a tmpfs holding the ServiceAccount files that
        client-go's in-cluster configuration reads."""
        sa = self.root / "in-cluster"
        script = ("set -e; mount -t tmpfs -o mode=0755 tmpfs /run; "
                  "d=/run/secrets/kubernetes.io/serviceaccount; mkdir -p $d; "
                  f"cp {sa}/token {sa}/ca.crt {sa}/namespace $d/; exec \"$@\"")
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "in-cluster"]

    # -- parts --

    def up(self, *, controller: bool = True, controller_manager: bool = True,
           settings: dict[str, dict[str, str]] | None = None, argocd: bool = True) -> "ControlPlane":
        """Starts every part but argocd-server (see `start_argocd_server`). `settings` adds keys
        to argocd-cm, argocd-rbac-cm and argocd-secret (by name: {"argocd-cm": {key: value}}),
        applied before any Argo CD process starts. With `argocd=False` the plane is a bare
        cluster (an "external" destination cluster): etcd, kube-apiserver and, unless
        `controller_manager=False`, kube-controller-manager (whose token controller fills
        ServiceAccount token Secrets), with a CA of its own. Raises PartFailed."""
        unknown = set(settings or {}) - {"argocd-cm", "argocd-rbac-cm", "argocd-secret"}
        if unknown:
            raise PartFailed("argocd namespace", f"settings for unknown objects: {', '.join(sorted(unknown))}")
        self.settings = dict(settings or {})
        if argocd and controller and not isolated_network():
            raise PartFailed("argocd-application-controller",
                             "it binds its metrics server to 0.0.0.0, so it only runs in a network namespace "
                             "of this run's own: run the tests under tools/upstream/isolated")
        self.bins = upstream_bins()
        self.state["in_cluster"] = can_unshare_mounts()
        self.pki = Pki(self.root / "pki")
        self.state["pki"] = {"ca": str(self.pki.ca), "admin_cert": str(self.pki.admin),
                             "admin_key": str(self.pki.admin_key)}
        self._etcd()
        self._apiserver()
        if controller_manager:
            self._controller_manager()
        if not argocd:
            self._save()
            return self
        self._crds()
        self._argocd_namespace()
        self._redis()
        self._repo_server()
        if controller:
            self._controller()
        self._save()
        return self

    def _etcd(self) -> None:
        etcd = require("etcd", "etcd-server")
        client, peer = free_ports(2)
        url = f"http://127.0.0.1:{client}"
        part = self._start("etcd", [
            etcd, "--name", "plane", "--data-dir", str(self.root / "etcd"),
            "--listen-client-urls", url, "--advertise-client-urls", url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer}", "--initial-cluster", f"plane=http://127.0.0.1:{peer}",
            "--listen-metrics-urls", f"http://127.0.0.1:{free_ports(1)[0]}", "--log-level", "warn",
            "--quota-backend-bytes", str(4 << 30)])
        part.wait_ready(lambda: json.loads(urllib.request.urlopen(url + "/health", timeout=2).read())
                        .get("health") == "true", what="healthy")
        self.state["etcd"] = {"url": url}

    def _apiserver(self) -> None:
        port = free_ports(1)[0]
        p = self.pki
        part = self._start("kube-apiserver", [
            _bin(self.bins, "kube-apiserver"),
            "--etcd-servers", self.state["etcd"]["url"],
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(port),
            "--tls-cert-file", str(p.serving), "--tls-private-key-file", str(p.serving_key),
            "--client-ca-file", str(p.ca),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(p.sa_pub), "--service-account-signing-key-file", str(p.sa_key),
            "--api-audiences", "https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range", "10.96.0.0/16", "--authorization-mode", "RBAC",
            "--cert-dir", str(self.root / "apiserver-certs"), "--profiling=false",
            "--enable-priority-and-fairness=false", "--watch-cache=true", "--v", "1",
            # The Service `kubernetes` cannot have a loopback endpoint; nothing here routes to it.
            "--endpoint-reconciler-type", "none"])
        self.state["apiserver"] = {"port": port, "url": f"https://127.0.0.1:{port}"}
        part.wait_ready(lambda: self._get("/readyz", raw=True) == b"ok", what="ready (/readyz)")
        self._kubeconfig()

    def _kubeconfig(self) -> None:
        p = self.pki
        b64 = lambda f: base64.b64encode(Path(f).read_bytes()).decode()  # noqa: E731
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "plane",
            "clusters": [{"name": "plane", "cluster": {"server": self.state["apiserver"]["url"],
                                                       "certificate-authority-data": b64(p.ca)}}],
            "users": [{"name": "admin", "user": {"client-certificate-data": b64(p.admin),
                                                 "client-key-data": b64(p.admin_key)}}],
            "contexts": [{"name": "plane", "context": {"cluster": "plane", "user": "admin",
                                                       "namespace": NAMESPACE}}],
        }
        path = self.root / "kubeconfig"
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)
        self.state["kubeconfig"] = str(path)

    def _controller_manager(self) -> None:
        part = self._start("kube-controller-manager", [
            _bin(self.bins, "kube-controller-manager"), "--kubeconfig", self.state["kubeconfig"],
            "--bind-address", "127.0.0.1", "--secure-port", "0", "--leader-elect=false",
            "--service-account-private-key-file", str(self.pki.sa_key), "--root-ca-file", str(self.pki.ca),
            "--use-service-account-credentials=false", "--controllers", "*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle",
            "--concurrent-gc-syncs", "5", "--v", "1"])
        # Ready once its ServiceAccount controller made the default namespace's account.
        part.wait_ready(lambda: self._get("/api/v1/namespaces/default/serviceaccounts/default") is not None,
                        what="running its controllers (no ServiceAccount 'default' in namespace default)")

    def _crds(self) -> None:
        started = time.monotonic()
        crds = argocd_module_dir() / "manifests" / "crds"
        self.kubectl("apply", "--server-side", "-k", str(crds), part="crds")
        names = ("applications.argoproj.io", "appprojects.argoproj.io", "applicationsets.argoproj.io")
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            pending = [n for n in names if not self._crd_established(n)]
            if not pending:
                break
            if time.monotonic() > deadline:
                raise PartFailed("crds", f"not established within {START_TIMEOUT:.0f} s: {', '.join(pending)}")
            time.sleep(0.1)
        self.state["crds"] = {"dir": str(crds), "ready_in_s": round(time.monotonic() - started, 3)}

    def _crd_established(self, name: str) -> bool:
        crd = self._get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}") or {}
        return any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in crd.get("status", {}).get("conditions") or [])

    def _argocd_namespace(self) -> None:
        started = time.monotonic()
        argocd = _bin(self.bins, "argocd")
        password = secrets.token_urlsafe(ADMIN_PASSWORD_LENGTH)[:ADMIN_PASSWORD_LENGTH]
        res = subprocess.run([argocd, "account", "bcrypt", "--password", password], capture_output=True,
                             text=True, timeout=60, env=self.argocd_env("argocd"))
        if res.returncode != 0:
            raise PartFailed("argocd namespace", f"argocd account bcrypt: {res.stderr.strip()}")
        bcrypt_hash = res.stdout.strip()
        part_of = {"app.kubernetes.io/part-of": "argocd"}

        def cm(name, data=None):
            return {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": NAMESPACE, "labels": part_of},
                    "data": {**(data or {}), **self.settings.get(name, {})}}

        def secret(name, data, labels=None):
            return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": name, "namespace": NAMESPACE, "labels": {**part_of, **(labels or {})}},
                    "stringData": {**data, **self.settings.get(name, {})}}

        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.state["argocd"] = {"admin_password": password, "namespace": NAMESPACE}
        sa_token = self._in_cluster_identity()
        ca = base64.b64encode(self.pki.ca.read_bytes()).decode()
        objects = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            cm("argocd-cm", {"timeout.reconciliation": RECONCILIATION, "timeout.reconciliation.jitter": "0s",
                             "admin.enabled": "true"}),
            cm("argocd-rbac-cm"), cm("argocd-cmd-params-cm"), cm("argocd-tls-certs-cm"),
            cm("argocd-ssh-known-hosts-cm"), cm("argocd-gpg-keys-cm"),
            secret("argocd-secret", {"admin.password": bcrypt_hash, "admin.passwordMtime": now,
                                     "server.secretkey": secrets.token_urlsafe(32)}),
            {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
             "metadata": {"name": "argocd-server-tls", "namespace": NAMESPACE, "labels": part_of},
             "stringData": {"tls.crt": self.pki.serving.read_text(), "tls.key": self.pki.serving_key.read_text()}},
            secret("cluster-loopback", {
                "name": "loopback", "server": self.state["apiserver"]["url"],
                "config": json.dumps({"bearerToken": sa_token, "tlsClientConfig": {"caData": ca}})},
                labels={"argocd.argoproj.io/secret-type": "cluster"}),
        ]
        self.apply(objects, part="argocd namespace")
        self.state["argocd"]["ready_in_s"] = round(time.monotonic() - started, 3)

    def _in_cluster_identity(self) -> str:
        """The ServiceAccount argocd-application-controller (cluster-admin, as Argo CD's install
        binds it), a token for it, and the files in-cluster clients read (see _in_cluster_wrapper)."""
        self.apply([
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": "argocd-application-controller", "namespace": NAMESPACE}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": "argocd-application-controller"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
             "subjects": [{"kind": "ServiceAccount", "name": "argocd-application-controller",
                           "namespace": NAMESPACE}]},
        ], part="argocd namespace")
        token = self.kubectl("create", "token", "argocd-application-controller", "-n", NAMESPACE,
                             "--duration", "48h", part="argocd namespace").strip()
        sa = self.root / "in-cluster"
        sa.mkdir(exist_ok=True)
        (sa / "token").write_text(token)
        (sa / "namespace").write_text(NAMESPACE)
        shutil.copy(self.pki.ca, sa / "ca.crt")
        self.state["service_account_token"] = token
        return token

    def _redis(self) -> None:
        redis = require("redis-server", "redis-server")
        port = free_ports(1)[0]
        part = self._start("redis", [redis, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                     "--appendonly", "no", "--dir", str(self.root), "--protected-mode", "yes"])
        part.wait_ready(lambda: _tcp_open(port), what="listening")
        self.state["redis"] = {"address": f"127.0.0.1:{port}"}

    def argocd_env(self, binary_name: str) -> dict:
        """The environment of an Argo CD process: its role by ARGOCD_BINARY_NAME, no settings from
        the caller's environment, no GnuPG (the keyring is not under test), a temp dir of the plane."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("ARGOCD_", "KUBERNETES_", "KUBECONFIG"))}
        tmp = self.root / "tmp"
        tmp.mkdir(exist_ok=True)
        env.update(ARGOCD_BINARY_NAME=binary_name, ARGOCD_GPG_ENABLED="false", TMPDIR=str(tmp),
                   ARGOCD_RECONCILIATION_TIMEOUT=RECONCILIATION,
                   HOME=str(self.root / "home"))
        (self.root / "home").mkdir(exist_ok=True)
        return env

    def _repo_server(self) -> None:
        port, metrics = free_ports(2)
        argocd = _bin(self.bins, "argocd")
        # git asks `argocd` (GIT_ASKPASS) for a repository's credentials, found on PATH as in
        # Argo CD's image.
        env = self.argocd_env("argocd-repo-server")
        env["PATH"] = f"{Path(argocd).parent}:{env.get('PATH', '')}"
        part = self._start("argocd-repo-server", [
            argocd, "--address", "127.0.0.1", "--port", str(port),
            "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics),
            "--redis", self.state["redis"]["address"], "--disable-tls", "--loglevel", "info"],
            env=env)
        part.wait_ready(lambda: urllib.request.urlopen(f"http://127.0.0.1:{metrics}/healthz", timeout=2).status
                        == 200, what="healthy (/healthz)")
        self.state["repo_server"] = {"address": f"127.0.0.1:{port}", "metrics_port": metrics}

    def _controller(self, extra_args: tuple = ()) -> None:
        metrics = free_ports(1)[0]
        part = self._start("argocd-application-controller", [
            _bin(self.bins, "argocd"), "--kubeconfig", self.state["kubeconfig"], "--namespace", NAMESPACE,
            "--repo-server", self.state["repo_server"]["address"], "--repo-server-plaintext",
            "--redis", self.state["redis"]["address"], "--metrics-port", str(metrics),
            "--status-processors", "4", "--operation-processors", "2",
            "--self-heal-timeout-seconds", "2", "--loglevel", "info", *extra_args],
            env=self.argocd_env("argocd-application-controller"), in_cluster=True)
        part.wait_ready(lambda: urllib.request.urlopen(f"http://127.0.0.1:{metrics}/healthz", timeout=2).status
                        == 200, what="healthy (/healthz)")
        self.state["controller"] = {"metrics_port": metrics}

    def restart_controller(self, extra_args: tuple = ()) -> None:
        """Stops the application-controller (by its PID) and starts it again with `extra_args`
        (a test module's `--application-namespaces`; two controllers would fight over the same
        applications). Call it again without arguments to give the plane its own back."""
        part = self.parts.pop("argocd-application-controller", None)
        if part is not None:
            stop_pid(part.proc.pid)
        self._controller(extra_args)
        self._save()

    def start_argocd_server(self, *, insecure: bool = False, extra_args: tuple = ()) -> dict:
        """Upstream argocd-server with TLS (the plane's serving certificate, from the Secret
        argocd-server-tls) on a port of its own; returns its entry of the state file."""
        if "argocd_server" in self.state:
            return self.state["argocd_server"]
        self.state["argocd_server"] = self.start_other_argocd_server("argocd-server", insecure=insecure,
                                                                     extra_args=extra_args)
        self._save()
        return self.state["argocd_server"]

    def start_other_argocd_server(self, name: str, *, insecure: bool = False, extra_args: tuple = ()) -> dict:
        """One more argocd-server, as the part `name` (beside the shared one, which other tests
        use with its own flags); returns how to reach it. `stop_part(name)` ends it."""
        port, metrics = free_ports(2)
        static = self.root / "static"
        static.mkdir(exist_ok=True)
        part = self._start(name, [
            _bin(self.bins, "argocd"), "--kubeconfig", self.state["kubeconfig"], "--namespace", NAMESPACE,
            "--address", "127.0.0.1", "--port", str(port), "--metrics-address", "127.0.0.1",
            "--metrics-port", str(metrics), "--redis", self.state["redis"]["address"],
            "--repo-server", self.state["repo_server"]["address"], "--repo-server-plaintext",
            "--dex-server", "http://127.0.0.1:1", "--staticassets", str(static), "--loglevel", "info",
            *(["--insecure"] if insecure else []), *extra_args],
            env=self.argocd_env("argocd-server"), in_cluster=True)
        scheme = "http" if insecure else "https"
        ctx = ssl.create_default_context(cafile=str(self.pki.ca))
        part.wait_ready(lambda: urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/healthz", timeout=2,
                                                       context=None if insecure else ctx).status == 200,
                        what="healthy (/healthz)", interval=0.02)  # ready_in_s: a start-up time in BENCHMARKS.md
        return {"port": port, "address": f"127.0.0.1:{port}", "url": f"{scheme}://127.0.0.1:{port}",
                "metrics_port": metrics, "insecure": insecure}

    def stop_part(self, name: str) -> None:
        """Stops one part this plane started (by its PID)."""
        part = self.parts.pop(name, None)
        if part is not None:
            stop_pid(part.proc.pid)
        self.state["parts"].pop(name, None)
        self._save()

    def down(self) -> None:
        for part in reversed(list(self.parts.values())):
            stop_pid(part.proc.pid)
        self.parts.clear()

    # -- clients --

    def _ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca))
        ctx.load_cert_chain(str(self.pki.admin), str(self.pki.admin_key))
        return ctx

    def _get(self, path: str, raw: bool = False):
        """GET from the API server as admin: the JSON (None on 404), or the raw body."""
        try:
            with urllib.request.urlopen(self.state["apiserver"]["url"] + path, timeout=5,
                                        context=self._ssl()) as resp:
                body = resp.read()
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise
        return body if raw else json.loads(body)

    def kubectl(self, *args: str, part: str = "kubectl", timeout: float = 60, check: bool = True,
                input: str | None = None) -> str:
        res = subprocess.run([require("kubectl", "kubernetes-client"), "--kubeconfig", self.state["kubeconfig"],
                              *args], capture_output=True, text=True, timeout=timeout, input=input)
        if check and res.returncode != 0:
            raise PartFailed(part, f"kubectl {' '.join(args)}: {res.stderr.strip()}")
        return res.stdout

    def apply(self, objects: list[dict], part: str = "kubectl") -> None:
        """Server-side apply of `objects` (a List) as admin."""
        doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
        self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager", "tiphys-tests",
                     "-f", "-", part=part, input=doc)

    def apply_batches(self, objects: list[dict], batch: int = 500, parallel: int = 2,
                      part: str = "kubectl", timeout: float = 600) -> None:
        """Server-side apply of many `objects` as admin: Lists of `batch` objects, `parallel`
        kubectl processes at a time, each bounded by `timeout`."""
        kubectl = require("kubectl", "kubernetes-client")
        chunks = [objects[i:i + batch] for i in range(0, len(objects), batch)]
        deadline = time.monotonic() + timeout
        running: list[tuple[subprocess.Popen, int]] = []

        def reap(proc: subprocess.Popen, n: int) -> None:
            left = max(1.0, deadline - time.monotonic())
            try:
                _, err = proc.communicate(timeout=left)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise PartFailed(part, f"batch {n} of {len(chunks)} not applied within {timeout:.0f} s") from None
            if proc.returncode != 0:
                raise PartFailed(part, f"batch {n} of {len(chunks)}: kubectl apply: {err.decode().strip()[-1000:]}")

        tmp = self.root / "tmp"
        tmp.mkdir(exist_ok=True)
        for n, chunk in enumerate(chunks):
            if len(running) >= parallel:
                reap(*running.pop(0))
            doc = tmp / f"apply-{os.getpid()}-{n}.json"
            doc.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": chunk}))
            running.append((subprocess.Popen(
                [kubectl, "--kubeconfig", self.state["kubeconfig"], "apply", "--server-side", "--force-conflicts",
                 "--field-manager", "tiphys-tests", "-o", "name", "-f", str(doc)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), n))
        for proc, n in running:
            reap(proc, n)
        for n in range(len(chunks)):
            (tmp / f"apply-{os.getpid()}-{n}.json").unlink(missing_ok=True)

    @classmethod
    def attach(cls, root: Path | str, state_file: str) -> "ControlPlane":
        """The plane that `up` started under `root` (from its state file), for adding a part
        from another process; that part's own state goes to `root/state_file` (the plane's file
        is left as it is), and `down()` ends only what this process started."""
        plane = cls(root)
        plane.state = json.loads((plane.root / STATE_FILE).read_text())
        plane.state.pop("argocd_server", None)
        plane.state["parts"] = {}
        plane.state_file = state_file
        plane.bins = upstream_bins()
        plane.pki = Pki(plane.root / "pki")
        return plane

    def get_json(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", "-o", "json", *args))

    def new_namespace(self, prefix: str = "t") -> str:
        name = f"{prefix}-{secrets.token_hex(4)}"
        self.kubectl("create", "namespace", name)
        return name

    def marks(self) -> dict[str, int]:
        """Where each part's log ends now (for `logs_since`)."""
        return {name: part.log.stat().st_size for name, part in self.parts.items() if part.log.exists()}

    def logs_since(self, marks: dict[str, int], limit: int = 4000) -> str:
        out = []
        for name, part in self.parts.items():
            try:
                with open(part.log, "rb") as f:
                    f.seek(marks.get(name, 0))
                    text = f.read().decode(errors="replace")
            except OSError:
                continue
            if text.strip():
                out.append(f"---- {name} ({part.log}) ----\n{text[-limit:]}")
        return "\n".join(out)


# ---- command line (for the Rust side and for people) ------------------------------------------


def _main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help=f"start the plane under ROOT, write ROOT/{STATE_FILE}, stay until SIGTERM")
    up.add_argument("root")
    up.add_argument("--no-controller", action="store_true", help="no argocd-application-controller")
    up.add_argument("--no-controller-manager", action="store_true", help="no kube-controller-manager")
    up.add_argument("--cluster-only", action="store_true",
                    help="a bare destination cluster: etcd, kube-apiserver, kube-controller-manager")
    up.add_argument("--argocd-server", action="store_true", help="also start upstream argocd-server")
    up.add_argument("--argocd-server-insecure", action="store_true", help="... without TLS")
    up.add_argument("--settings", metavar="FILE",
                    help='JSON: keys for argocd-cm, argocd-rbac-cm, argocd-secret ({"argocd-cm": {"k": "v"}})')
    apply = sub.add_parser("apply", help="server-side apply of a JSON List (or array) of objects, in batches")
    apply.add_argument("root")
    apply.add_argument("file")
    apply.add_argument("--batch", type=int, default=500)
    server = sub.add_parser("argocd-server", help="start argocd-server beside a running plane, write its "
                                                  "state to ROOT/STATE_FILE, stay until SIGTERM")
    server.add_argument("root")
    server.add_argument("--state-file", default="argocd-server.json")
    server.add_argument("--arg", action="append", default=[], dest="extra_args",
                        help="one more argument for argocd-server (repeatable; e.g. --arg=--loglevel=warn)")
    down = sub.add_parser("down", help="end what `up` started under ROOT (by the PIDs in the state file)")
    down.add_argument("root")
    args = ap.parse_args()
    if args.cmd == "down":
        state = json.loads((Path(args.root) / STATE_FILE).read_text())
        if state.get("supervisor_pid"):
            stop_pid(state["supervisor_pid"], timeout=STOP_TIMEOUT * 2)
        for part in state["parts"].values():
            stop_pid(part["pid"])
        return 0
    if args.cmd == "apply":
        plane = ControlPlane(args.root)
        plane.state = json.loads((plane.root / STATE_FILE).read_text())
        doc = json.loads(Path(args.file).read_text())
        try:
            plane.apply_batches(doc["items"] if isinstance(doc, dict) else doc, batch=args.batch)
        except PartFailed as e:
            print(f"controlplane: {e}", file=sys.stderr, flush=True)
            return 1
        return 0
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    if args.cmd == "argocd-server":
        plane = ControlPlane.attach(args.root, args.state_file)

        def start():
            plane.start_argocd_server(extra_args=tuple(args.extra_args))
    else:
        plane = ControlPlane(args.root)

        def start():
            settings = json.loads(Path(args.settings).read_text()) if args.settings else None
            plane.up(controller=not args.no_controller, controller_manager=not args.no_controller_manager,
                     settings=settings, argocd=not args.cluster_only)
            if args.argocd_server or args.argocd_server_insecure:
                plane.start_argocd_server(insecure=args.argocd_server_insecure)
            print(json.dumps(plane.state), flush=True)
    return _supervise(plane, start, stop)


def _supervise(plane: ControlPlane, start, stop: list) -> int:
    """Runs `start()`, marks the state file as complete (its `supervisor_pid`, written last), and
    watches the parts until SIGTERM (`stop`) or one of them exits; then ends what it started."""
    try:
        start()
        plane.state["supervisor_pid"] = os.getpid()
        plane._save()
        while not stop:
            for part in plane.parts.values():
                part.check_alive()
            time.sleep(0.5)
    except PartFailed as e:
        print(f"controlplane: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        plane.down()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
