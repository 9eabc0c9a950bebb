"""The soak's load generator, sampler and checker (benches/soak.sh starts the server and runs this).

    python benches/soak.py load --pid PID --port PORT --data-dir DIR --seconds N --out DIR
    python benches/soak.py check DIR/samples.csv --seconds N     # the checks again, on a saved run

`load` drives one TLS-mode server on 127.0.0.1 with a mixed load for N seconds: password logins
(and logouts), REST and gRPC reads, REST and gRPC writes over a bounded set of applications,
watches that come and go, slow readers, and connections abandoned at every stage. A sampler reads
the server's VmRSS (/proc/PID/status) and open fds (/proc/PID/fd) every --interval seconds before,
during and after the load; the samples go to samples.csv and soak.png, the outcome of every
operation to summary.json, and the exit status says whether the checks passed (`check` below).

Only 127.0.0.1 is used. Every loop ends on the run's deadline and has a bound on its rounds.
"""

import argparse
import collections
import csv
import http.client
import importlib
import json
import os
import random
import socket
import ssl
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import grpc
import h2.config
import h2.connection
import h2.events
import httpx

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
APPS = "/api/v1/applications"
STREAM = "/api/v1/stream/applications"
IN_CLUSTER = "https://kubernetes.default.svc"
REPO_URL = "https://github.com/argoproj/argocd-example-apps.git"
SOAK_USER, SOAK_PASSWORD = "soak", "soak-password-1"  # a local account (argocd-cm from soak.sh)
POOL = 16  # the applications the writer cycles through: the stored set stays bounded
# The watch history keeps the last 4096 events (src/registry/watch.rs, HISTORY): it grows by design
# until full, so the warm-up fills it first and the growth measured after it is not that.
HISTORY_EVENTS = 4096
MIX = ("logins", "reads", "writes", "watches", "slow", "abandoned")

# ---- the checks -------------------------------------------------------------------------------
#
# After the warm-up (the first WARMUP_FRACTION of the load) RSS must be flat:
#   - its least-squares slope over the rest of the load is at most
#     SLOPE_FLOOR_MB_PER_MIN + NOISE_MB / (minutes after the warm-up): a fixed part, plus room for
#     one step of allocator noise (arenas and caches move RSS by a megabyte or two at a time),
#     which matters only in a short run;
#   - the mean of the last quarter of those samples is at most GROWTH_MB above the first quarter's.
# The load makes about 50 requests a second (logins, reads, writes, watches, connections), so a
# leak of 100 KB per request is about 300 MB a minute, and even 1 KB per request (3 MB/min) fails
# both limits of a 10-minute run; the 60-second run's slope limit is 60 times below the 100 KB case.
# Measured on the release build (BENCHMARKS.md, "Soak"): +0.13 to +0.15 MB/min over 10 minutes;
# +1.1 to +1.6 MB/min in 60-s runs, whose 45 s after the warm-up still see the watch history and
# caches fill (limit there: about 4.5 MB/min).
WARMUP_FRACTION = 0.25
SLOPE_FLOOR_MB_PER_MIN = 0.5
NOISE_MB = 3.0
GROWTH_MB = 3.0
# The load holds at most about 20 connections at once. Descriptors may not climb: the last quarter
# at most FD_GROWTH above the first (a leak of one per abandoned connection adds hundreds), and once
# the load stops they return to the idle baseline (+FD_SLACK) within the cool-down.
FD_GROWTH = 10
FD_SLACK = 2


def slope_per_minute(points):
    """Least-squares slope of [(t seconds, value)], per minute (0 for fewer than 2 points)."""
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return sum((t - mt) * (v - mv) for t, v in points) / var * 60


def _mean(values):
    return sum(values) / len(values) if values else float("nan")


def check(samples):
    """The checks over `samples` (dicts with t, phase, rss_kb, fds; phases idle, warmup, load,
    cooldown, in order): [(name, ok, detail)]."""
    by_phase = collections.defaultdict(list)
    for s in samples:
        by_phase[s["phase"]].append(s)
    idle, steady, cool = by_phase["idle"], by_phase["load"], by_phase["cooldown"]
    results = []
    if len(steady) < 8 or not idle or not cool:
        counts = f"{len(idle)} idle, {len(steady)} after the warm-up, {len(cool)} in the cool-down"
        return [("enough samples", False, f"{counts} (need at least 1, 8 and 1)")]
    minutes = (steady[-1]["t"] - steady[0]["t"]) / 60
    q = max(1, len(steady) // 4)
    first, last = steady[:q], steady[-q:]

    slope = slope_per_minute([(s["t"], s["rss_kb"] / 1024) for s in steady])
    limit = SLOPE_FLOOR_MB_PER_MIN + NOISE_MB / max(minutes, 1e-9)
    results.append(("RSS slope after warm-up", slope <= limit,
                    f"{slope:+.2f} MB/min (limit {limit:.2f} over {minutes:.1f} min)"))
    growth = (_mean([s["rss_kb"] for s in last]) - _mean([s["rss_kb"] for s in first])) / 1024
    results.append(("RSS last quarter vs first quarter after warm-up", growth <= GROWTH_MB,
                    f"{growth:+.2f} MB (limit {GROWTH_MB:.1f})"))

    fd_growth = _mean([s["fds"] for s in last]) - _mean([s["fds"] for s in first])
    results.append(("fds last quarter vs first quarter after warm-up", fd_growth <= FD_GROWTH,
                    f"{fd_growth:+.1f} (limit {FD_GROWTH})"))
    baseline = max(s["fds"] for s in idle)
    end = cool[-1]["fds"]
    results.append(("fds back to the idle baseline after the load", end <= baseline + FD_SLACK,
                    f"{end} at the end, {baseline} idle (slack {FD_SLACK})"))
    return results


# ---- sampling ---------------------------------------------------------------------------------


def read_rss_kb(pid):
    """VmRSS of `pid` in kB, from /proc/PID/status (None once the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def read_threads(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def count_fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


GAUGES = ("tiphys_connections_open", "tiphys_revoked_tokens", "tiphys_login_failure_entries")


def read_gauges(metrics_port):
    """The server's own gauges of what could pile up (connections, revoked tokens, login failures)."""
    if not metrics_port:
        return {}
    conn = http.client.HTTPConnection(HOST, metrics_port, timeout=2)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    except (OSError, http.client.HTTPException):
        return {}
    finally:
        conn.close()
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in GAUGES:
            found[name] = int(float(value))
    return found


class Sampler:
    """Samples the server every `interval` seconds on its own thread, tagged with the phase."""

    def __init__(self, pid, metrics_port, interval, stats):
        self.pid, self.metrics_port, self.interval, self.stats = pid, metrics_port, interval, stats
        self.samples = []
        self.phase = "idle"
        self.t0 = time.monotonic()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def sample(self):
        rss, fds = read_rss_kb(self.pid), count_fds(self.pid)
        if rss is None or fds is None:
            return None
        s = {"t": round(time.monotonic() - self.t0, 2), "phase": self.phase, "rss_kb": rss, "fds": fds,
             "threads": read_threads(self.pid), "ops": self.stats.total()}
        gauges = read_gauges(self.metrics_port)
        s.update({g: gauges.get(g, "") for g in GAUGES})
        self.samples.append(s)
        return s

    def _run(self):
        next_at = time.monotonic()
        for _ in range(1_000_000):  # bounded; ends with `done`
            if self.sample() is None:
                self.stats.unexpected("server", "the server process is gone")
                return
            next_at += self.interval
            if self.done.wait(max(0.0, next_at - time.monotonic())):
                return

    def start(self):
        self.thread.start()

    def stop(self):
        self.done.set()
        self.thread.join(timeout=10)


# ---- outcomes ---------------------------------------------------------------------------------


class Stats:
    """Outcomes per kind of operation: ok, expected (why), unexpected (why, with examples)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = collections.Counter()
        self.examples = []
        self.stopping = threading.Event()

    def ok(self, kind, n=1):
        with self.lock:
            self.counts[(kind, "ok", "")] += n

    def expected(self, kind, why):
        with self.lock:
            self.counts[(kind, "expected", why)] += 1

    def unexpected(self, kind, why):
        # Whatever fails because the run itself is stopping (a cancelled call, a closed channel) is
        # the load generator's doing, not the server's.
        if self.stopping.is_set():
            self.expected(kind, "interrupted by the end of the run")
            return
        with self.lock:
            self.counts[(kind, "unexpected", why)] += 1
            if len(self.examples) < 30:
                self.examples.append(f"{time.strftime('%H:%M:%S')} {kind}: {why}")

    def total(self):
        with self.lock:
            return sum(self.counts.values())

    def table(self):
        """{kind: {"ok": n, "expected": {why: n}, "unexpected": {why: n}}}"""
        out = {}
        with self.lock:
            for (kind, outcome, why), n in sorted(self.counts.items()):
                row = out.setdefault(kind, {"ok": 0, "expected": {}, "unexpected": {}})
                if outcome == "ok":
                    row["ok"] += n
                else:
                    row[outcome][why] = row[outcome].get(why, 0) + n
        return out

    def unexpected_total(self):
        with self.lock:
            return sum(n for (_, outcome, _), n in self.counts.items() if outcome == "unexpected")


# ---- clients ----------------------------------------------------------------------------------

PROTO_DIRS = ("tiphys", "k8s", "v1alpha1", "repository", "application", "project", "session")


def compile_stubs(out_dir):
    """Python stubs of the protos the load calls, compiled with grpcio-tools into `out_dir`."""
    import grpc_tools  # noqa: PLC0415 (only a run needs it, not `check`)
    from grpc_tools import protoc  # noqa: PLC0415

    root = REPO / "proto"
    include = Path(grpc_tools.__file__).parent / "_proto"
    files = sorted(str(p.relative_to(root)) for d in PROTO_DIRS for p in (root / d).rglob("*.proto"))
    rc = protoc.main(["grpc_tools.protoc", f"-I{root}", f"-I{include}", f"--python_out={out_dir}",
                      f"--grpc_python_out={out_dir}", *files])
    if rc != 0:
        sys.exit(f"soak.py: protoc failed ({rc})")
    sys.path.insert(0, str(out_dir))
    try:
        m = {name: importlib.import_module(name) for name in (
            "v1alpha1.application_pb2", "application.application_pb2", "application.application_pb2_grpc",
            "project.project_pb2", "project.project_pb2_grpc", "session.session_pb2",
            "session.session_pb2_grpc")}
    finally:
        sys.path.remove(str(out_dir))
    return SimpleNamespace(v1=m["v1alpha1.application_pb2"], app=m["application.application_pb2"],
                           app_grpc=m["application.application_pb2_grpc"], proj=m["project.project_pb2"],
                           proj_grpc=m["project.project_pb2_grpc"], session=m["session.session_pb2"],
                           session_grpc=m["session.session_pb2_grpc"])


def rest_app(name, gen):
    return {"metadata": {"name": name, "labels": {"soak": "yes", "gen": str(gen)}},
            "spec": {"project": "default", "destination": {"server": IN_CLUSTER, "namespace": "default"},
                     "source": {"repoURL": REPO_URL, "path": "guestbook", "targetRevision": "HEAD"}}}


def pb_app(pb, name, gen):
    app = pb.v1.Application()
    app.metadata.name = name
    app.metadata.labels["soak"] = "yes"
    app.metadata.labels["gen"] = str(gen)
    app.spec.project = "default"
    app.spec.destination.server = IN_CLUSTER
    app.spec.destination.namespace = "default"
    app.spec.source.repoURL = REPO_URL
    app.spec.source.path = "guestbook"
    app.spec.source.targetRevision = "HEAD"
    return app


class Target:
    """The server under load: where it is, how to trust it, how to authenticate."""

    def __init__(self, port, ca, pb):
        self.port, self.ca, self.pb = port, str(ca), pb
        self.base = f"https://{HOST}:{port}"
        self.token = None

    def tls_context(self, alpn=None):
        ctx = ssl.create_default_context(cafile=self.ca)
        if alpn:
            ctx.set_alpn_protocols(alpn)
        return ctx

    def http(self, http2):
        return httpx.Client(base_url=self.base, http2=http2, verify=self.tls_context(), timeout=15,
                            headers={"Authorization": f"Bearer {self.token}"})

    def channel(self):
        creds = grpc.ssl_channel_credentials(root_certificates=Path(self.ca).read_bytes())
        return grpc.secure_channel(f"{HOST}:{self.port}", creds)

    def md(self, token=None):
        return [("authorization", f"Bearer {token or self.token}")]

    def tls_socket(self, alpn=("http/1.1",), rcvbuf=None, timeout=10):
        """A TLS connection (handshake done) from a plain TCP socket."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before connect: sets the window
        sock.settimeout(timeout)
        try:
            sock.connect((HOST, self.port))
            return self.tls_context(list(alpn)).wrap_socket(sock, server_hostname=HOST)
        except BaseException:
            sock.close()
            raise

    def rest_login(self, username, password, source=HOST):
        """POST /api/v1/session on a new connection from `source`: (status, body)."""
        conn = http.client.HTTPSConnection(HOST, self.port, timeout=15, source_address=(source, 0),
                                           context=self.tls_context())
        try:
            body = json.dumps({"username": username, "password": password})
            conn.request("POST", "/api/v1/session", body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()


def abandon(sock):
    """Drops a connection the way a vanished client does: RST, no FIN and no TLS close_notify."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def sse_request(target, path=STREAM):
    return (f"GET {path} HTTP/1.1\r\nHost: {HOST}:{target.port}\r\nAuthorization: Bearer {target.token}\r\n"
            "Accept: text/event-stream\r\n\r\n").encode()


def grpc_code(err):
    try:
        return err.code().name
    except Exception:  # noqa: BLE001 (not every RpcError is a Call)
        return type(err).__name__


# ---- the load ---------------------------------------------------------------------------------


class Run:
    """Shared by the workers: the deadline, the stop flag, the outcomes."""

    def __init__(self, target, stats, seconds):
        self.target, self.stats = target, stats
        self.deadline = time.monotonic() + seconds
        self.stop = stats.stopping
        self.lock = threading.Lock()
        self.on_stop = set()  # callables that unblock a worker (cancel a call it is waiting on)

    def end(self):
        self.stop.set()
        with self.lock:
            pending = list(self.on_stop)
        for fn in pending:
            fn()

    def register(self, fn):
        with self.lock:
            self.on_stop.add(fn)

    def unregister(self, fn):
        with self.lock:
            self.on_stop.discard(fn)

    def running(self):
        return not self.stop.is_set() and time.monotonic() < self.deadline

    def pause(self, seconds):
        """Sleeps, waking early when the run ends; False once it has."""
        self.stop.wait(min(seconds, max(0.0, self.deadline - time.monotonic())))
        return self.running()

    def rounds(self, bound):
        """range(bound), cut short when the run ends."""
        for i in range(bound):
            if not self.running():
                return
            yield i


def guarded(kind):
    """Runs one operation; an exception is an unexpected outcome of `kind`, never a dead worker."""
    def wrap(fn):
        def run(self, *args):
            try:
                fn(self, *args)
            except Exception as err:  # noqa: BLE001 (counted, and the worker goes on)
                self.run.stats.unexpected(kind, f"{type(err).__name__}: {err}"[:300])
        return run
    return wrap


class Logins:
    """Password logins (admin over REST, the local account over gRPC), userinfo with the new token,
    a logout for every third, and now and then a wrong password from another client address
    (127.0.0.2, so that its lockout never touches the good logins)."""

    def __init__(self, run, admin_password):
        self.run, self.admin_password = run, admin_password
        self.channel = None

    def loop(self):
        t = self.run.target
        self.channel = t.channel()
        stub = t.pb.session_grpc.SessionServiceStub(self.channel)
        for i in self.run.rounds(100_000):
            if i % 2 == 0:
                self.rest_admin(i)
            else:
                self.grpc_soak(stub, i)
            if i % 10 == 5:
                self.wrong_password()
            self.run.pause(0.5)
        self.channel.close()

    @guarded("login (REST)")
    def rest_admin(self, i):
        t, stats = self.run.target, self.run.stats
        status, body = t.rest_login("admin", self.admin_password)
        if status != 200:
            stats.unexpected("login (REST)", f"status {status}: {body[:200]!r}")
            return
        stats.ok("login (REST)")
        token = json.loads(body)["token"]
        with t.http(http2=False) as c:
            c.headers["Authorization"] = f"Bearer {token}"
            r = c.get("/api/v1/session/userinfo")
            if r.status_code != 200 or not r.json().get("loggedIn"):
                stats.unexpected("userinfo", f"status {r.status_code}: {r.text[:200]}")
            else:
                stats.ok("userinfo")
            if i % 3 == 0:
                r = c.delete("/api/v1/session")
                if r.status_code == 200:
                    stats.ok("logout")
                else:
                    stats.unexpected("logout", f"status {r.status_code}: {r.text[:200]}")

    @guarded("login (gRPC)")
    def grpc_soak(self, stub, i):
        pb, stats = self.run.target.pb, self.run.stats
        resp = stub.Create(pb.session.SessionCreateRequest(username=SOAK_USER, password=SOAK_PASSWORD), timeout=15)
        if not resp.token:
            stats.unexpected("login (gRPC)", "no token")
            return
        stats.ok("login (gRPC)")
        if i % 3 == 1:
            stub.Delete(pb.session.SessionDeleteRequest(), metadata=self.run.target.md(resp.token), timeout=15)
            stats.ok("logout")

    @guarded("login, wrong password")
    def wrong_password(self):
        status, body = self.run.target.rest_login(SOAK_USER, "not-the-password", source="127.0.0.2")
        # 401 until the pair (user, address) is locked, then 429 without reaching bcrypt.
        if status == 401:
            self.run.stats.expected("login, wrong password", "401 invalid")
        elif status == 429:
            self.run.stats.expected("login, wrong password", "429 throttled")
        else:
            self.run.stats.unexpected("login, wrong password", f"status {status}: {body[:200]!r}")


class Reader:
    """REST (HTTP/2 and HTTP/1.1 in turn) and gRPC lists and gets of applications and projects, on
    connections replaced every 100 reads."""

    OPS = ("rest list apps", "rest get app", "rest list projects", "rest get project",
           "grpc list apps", "grpc get app", "grpc list projects", "grpc get project")

    def __init__(self, run, seed):
        self.run, self.rnd = run, random.Random(seed)

    def loop(self):
        t = self.run.target
        client = channel = None
        for i in self.run.rounds(1_000_000):
            if i % 100 == 0:
                if client:
                    client.close()
                    channel.close()
                client = t.http(http2=(i // 100) % 2 == 0)
                channel = t.channel()
                apps = t.pb.app_grpc.ApplicationServiceStub(channel)
                projects = t.pb.proj_grpc.ProjectServiceStub(channel)
            self.one(self.rnd.choice(self.OPS), client, apps, projects)
            self.run.pause(0.05)
        if client:
            client.close()
            channel.close()

    @guarded("read")
    def one(self, op, client, apps, projects):
        pb, stats, md = self.run.target.pb, self.run.stats, self.run.target.md()
        kind = "read (REST)" if op.startswith("rest") else "read (gRPC)"
        name = f"soak-{self.rnd.randrange(POOL):02d}"
        if op.startswith("rest"):
            path = {"rest list apps": APPS, "rest get app": f"{APPS}/{name}",
                    "rest list projects": "/api/v1/projects", "rest get project": "/api/v1/projects/default"}[op]
            r = client.get(path)
            if r.status_code == 200:
                stats.ok(kind)
            elif r.status_code == 404 and op == "rest get app":
                stats.expected(kind, "404: an application the writer has deleted")
            else:
                stats.unexpected(kind, f"{op}: status {r.status_code}: {r.text[:200]}")
            return
        try:
            if op == "grpc list apps":
                apps.List(pb.app.ApplicationQuery(), metadata=md, timeout=15)
            elif op == "grpc get app":
                apps.Get(pb.app.ApplicationQuery(name=name), metadata=md, timeout=15)
            elif op == "grpc list projects":
                projects.List(pb.proj.ProjectQuery(), metadata=md, timeout=15)
            else:
                projects.Get(pb.proj.ProjectQuery(name="default"), metadata=md, timeout=15)
            stats.ok(kind)
        except grpc.RpcError as err:
            if op == "grpc get app" and grpc_code(err) == "NOT_FOUND":
                stats.expected(kind, "NOT_FOUND: an application the writer has deleted")
            else:
                stats.unexpected(kind, f"{op}: {grpc_code(err)}: {err.details() if hasattr(err, 'details') else err}")


class Writer:
    """Creates, updates and deletes applications of a fixed pool of POOL names, over REST and gRPC in
    turn. One writer, so that it always knows which names exist."""

    def __init__(self, run, seed):
        self.run, self.rnd = run, random.Random(seed)
        self.exists = set()
        self.gen = 0

    def setup(self):
        self.client = self.run.target.http(http2=True)
        self.channel = self.run.target.channel()
        self.stub = self.run.target.pb.app_grpc.ApplicationServiceStub(self.channel)

    def close(self):
        self.client.close()
        self.channel.close()

    def prefill(self, events, seconds):
        """Fills the watch history (updates over gRPC, as fast as they go): part of the warm-up."""
        pb, md = self.run.target.pb, self.run.target.md()
        for name in (f"soak-{i:02d}" for i in range(POOL)):
            self.write("create", name, True)
        deadline = time.monotonic() + seconds
        done = 0
        for i in range(events):
            if not self.run.running() or time.monotonic() > deadline:
                break
            self.gen += 1
            name = f"soak-{i % POOL:02d}"
            try:
                self.stub.Update(pb.app.ApplicationUpdateRequest(application=pb_app(pb, name, self.gen)),
                                 metadata=md, timeout=15)
            except Exception as err:  # noqa: BLE001 (counted like any other write)
                self.run.stats.unexpected("write: prefill update", f"{name}: {err}"[:300])
                break
            done += 1
        self.run.stats.ok("write: prefill update", done)
        return done

    def loop(self):
        for i in self.run.rounds(1_000_000):
            name = f"soak-{self.rnd.randrange(POOL):02d}"
            if name not in self.exists:
                op = "create"
            else:
                op = "update" if self.rnd.random() < 0.7 else "delete"
            self.write(op, name, i % 2 == 0)
            self.run.pause(0.2)

    @guarded("write")
    def write(self, op, name, grpc_call):
        pb, stats, md = self.run.target.pb, self.run.stats, self.run.target.md()
        self.gen += 1
        kind = f"write: {op} ({'gRPC' if grpc_call else 'REST'})"
        if grpc_call:
            try:
                if op == "create":
                    self.stub.Create(pb.app.ApplicationCreateRequest(application=pb_app(pb, name, self.gen)),
                                     metadata=md, timeout=15)
                elif op == "update":
                    self.stub.Update(pb.app.ApplicationUpdateRequest(application=pb_app(pb, name, self.gen)),
                                     metadata=md, timeout=15)
                else:
                    self.stub.Delete(pb.app.ApplicationDeleteRequest(name=name), metadata=md, timeout=15)
            except grpc.RpcError as err:
                stats.unexpected(kind, f"{name}: {grpc_code(err)}: {err.details() if hasattr(err, 'details') else err}")
                return
        else:
            if op == "create":
                r = self.client.post(APPS, json=rest_app(name, self.gen))
            elif op == "update":
                r = self.client.put(f"{APPS}/{name}", json=rest_app(name, self.gen))
            else:
                r = self.client.delete(f"{APPS}/{name}")
            if r.status_code != 200:
                stats.unexpected(kind, f"{name}: status {r.status_code}: {r.text[:200]}")
                return
        stats.ok(kind)
        if op == "delete":
            self.exists.discard(name)
        else:
            self.exists.add(name)


class WatchChurn:
    """Watches that come and go: each lives 0.5 to 3 s. gRPC watches end with a cancel, or with the
    whole channel closed; SSE watches end with a clean close, or are abandoned (RST) mid-stream, and
    a raw HTTP/2 gRPC watch is abandoned the same way."""

    KINDS = ("grpc cancel", "grpc channel closed", "sse close", "sse abandoned", "h2 grpc abandoned")

    def __init__(self, run, seed):
        self.run, self.rnd = run, random.Random(seed)

    def loop(self):
        t = self.run.target
        channel = None
        for i in self.run.rounds(100_000):
            if i % 20 == 0:
                if channel:
                    channel.close()
                channel = t.channel()
            self.one(self.rnd.choice(self.KINDS), channel, self.rnd.uniform(0.5, 3.0))
            self.run.pause(self.rnd.uniform(0.1, 0.5))
        if channel:
            channel.close()

    @guarded("watch")
    def one(self, kind, channel, lifetime):
        if kind.startswith("grpc"):
            self.grpc_watch(kind, channel, lifetime)
        elif kind.startswith("sse"):
            self.sse_watch(kind, lifetime)
        else:
            self.h2_abandoned(lifetime)

    def grpc_watch(self, kind, channel, lifetime):
        t, stats = self.run.target, self.run.stats
        own = t.channel() if kind == "grpc channel closed" else None
        stub = t.pb.app_grpc.ApplicationServiceStub(own or channel)
        call = stub.Watch(t.pb.app.ApplicationQuery(), metadata=t.md(), timeout=lifetime + 30)
        fired = threading.Event()

        def finish():
            fired.set()
            (own.close if own else call.cancel)()

        # Cancelled (or its channel closed) from a timer: the iteration blocks between events.
        end = threading.Timer(lifetime, finish)
        end.start()
        events = 0
        try:
            for _ in call:
                events += 1
            stats.unexpected(f"watch: {kind}", "the server ended the watch")
        except grpc.RpcError as err:
            if grpc_code(err) == "CANCELLED" and fired.is_set():
                stats.ok(f"watch: {kind}")
            else:
                stats.unexpected(f"watch: {kind}", f"{grpc_code(err)} after {events} events: {err}")
        finally:
            end.cancel()
            end.join(timeout=5)
            if own:
                own.close()

    def sse_watch(self, kind, lifetime):
        t, stats = self.run.target, self.run.stats
        sock = t.tls_socket()
        try:
            sock.sendall(sse_request(t))
            sock.settimeout(1.0)
            head = b""
            end = time.monotonic() + lifetime
            for _ in range(10_000):
                if time.monotonic() >= end:
                    break
                try:
                    chunk = sock.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    stats.unexpected(f"watch: {kind}", "the server closed the stream")
                    return
                if len(head) < 12:
                    head += chunk
            if not head.startswith(b"HTTP/1.1 200"):
                stats.unexpected(f"watch: {kind}", f"answer: {head[:200]!r}")
                return
            stats.ok(f"watch: {kind}")
        finally:
            if kind == "sse abandoned":
                abandon(sock)
            else:
                sock.close()

    def h2_abandoned(self, lifetime):
        """ApplicationService/Watch over a hand-driven HTTP/2 connection, dropped with an RST."""
        t, stats = self.run.target, self.run.stats
        sock = t.tls_socket(alpn=("h2",))
        try:
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            conn.initiate_connection()
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, [(":method", "POST"), (":scheme", "https"), (":authority", f"{HOST}:{t.port}"),
                                    (":path", "/application.ApplicationService/Watch"),
                                    ("content-type", "application/grpc"), ("te", "trailers"),
                                    ("authorization", f"Bearer {t.token}")])
            conn.send_data(sid, b"\x00\x00\x00\x00\x00", end_stream=True)  # an empty ApplicationQuery
            sock.sendall(conn.data_to_send())
            sock.settimeout(1.0)
            status = None
            end = time.monotonic() + lifetime
            for _ in range(10_000):
                if time.monotonic() >= end:
                    break
                try:
                    data = sock.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                for ev in conn.receive_data(data):
                    if isinstance(ev, h2.events.ResponseReceived):
                        status = dict(ev.headers).get(b":status")
                    elif isinstance(ev, h2.events.DataReceived):
                        conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                sock.sendall(conn.data_to_send())
            if status == b"200":
                stats.ok("watch: h2 grpc abandoned")
            else:
                stats.unexpected("watch: h2 grpc abandoned", f":status {status!r}")
        finally:
            abandon(sock)


class SlowReaders:
    """Watches whose reader lags: an SSE watch with a 4 KB receive buffer read 256 bytes a second,
    and a gRPC watch that takes one event a second; each is replaced after 60 s. A server that
    buffered everything for them would grow; one that gives up on them says "too far behind"."""

    def __init__(self, run, transport):
        self.run, self.transport = run, transport

    def loop(self):
        for _ in self.run.rounds(10_000):
            if self.transport == "sse":
                self.sse()
            else:
                self.grpc()
            self.run.pause(1.0)

    @guarded("slow reader (SSE)")
    def sse(self):
        t, stats = self.run.target, self.run.stats
        sock = t.tls_socket(rcvbuf=4096)
        try:
            sock.sendall(sse_request(t))
            # With so small a window the kernel may hold back a window update until the server's
            # next zero-window probe, seconds later: a quiet read is part of being slow.
            sock.settimeout(2.0)
            seen = b""
            end = time.monotonic() + 60
            for _ in range(600):
                if not self.run.pause(1.0) or time.monotonic() >= end:
                    break
                try:
                    chunk = sock.recv(256)
                except TimeoutError:
                    continue
                if not chunk:
                    stats.unexpected("slow reader (SSE)", "the server closed it without an error frame")
                    return
                seen = (seen + chunk)[-4096:]
                if b'{"error"' in seen:
                    stats.expected("slow reader (SSE)", "the server ended it: too far behind")
                    return
            if not seen.startswith(b"HTTP/1.1 200") and len(seen) < 4096:
                stats.unexpected("slow reader (SSE)", f"answer: {seen[:200]!r}")
                return
            stats.ok("slow reader (SSE)")
        finally:
            sock.close()

    @guarded("slow reader (gRPC)")
    def grpc(self):
        t, stats = self.run.target, self.run.stats
        channel = t.channel()
        call = end = None
        try:
            call = t.pb.app_grpc.ApplicationServiceStub(channel).Watch(
                t.pb.app.ApplicationQuery(), metadata=t.md(), timeout=120)
            # The iteration blocks while no event comes: the end of the run or a timer cancels it.
            self.run.register(call.cancel)
            end = threading.Timer(60, call.cancel)
            end.start()
            try:
                for _ in call:
                    if not self.run.pause(1.0):
                        call.cancel()
                        break
            except grpc.RpcError as err:
                if grpc_code(err) == "CANCELLED":
                    stats.ok("slow reader (gRPC)")
                elif grpc_code(err) == "ABORTED":
                    stats.expected("slow reader (gRPC)", "ABORTED: too far behind")
                else:
                    stats.unexpected("slow reader (gRPC)", f"{grpc_code(err)}: {err}")
                return
            stats.ok("slow reader (gRPC)")
        finally:
            if end is not None:
                end.cancel()
                end.join(timeout=5)
            if call is not None:
                self.run.unregister(call.cancel)
            channel.close()


class Abandoned:
    """Connections given up at every stage: TCP that never sends (held past the server's 10 s
    handshake timeout, or dropped at once), TLS that never sends a request, half a request head, a
    whole request dropped before its answer, an HTTP/2 preface and nothing else, and plain HTTP on
    the TLS port (answered with a redirect). At most 6 are held at once, each 2 to 15 s."""

    KINDS = ("tcp silent", "tcp dropped", "tls silent", "half a head", "request dropped", "h2 preface",
             "plain http")
    HELD = 6

    def __init__(self, run, seed):
        self.run, self.rnd = run, random.Random(seed)
        self.held = []  # (release time, socket, kind)

    def loop(self):
        for _ in self.run.rounds(1_000_000):
            self.release(time.monotonic())
            self.one(self.rnd.choice(self.KINDS))
            self.run.pause(0.3)
        self.release(float("inf"))

    def hold(self, sock, kind):
        if len(self.held) >= self.HELD:
            abandon(sock)
            self.run.stats.ok(f"abandoned: {kind}")
            return
        self.held.append((time.monotonic() + self.rnd.uniform(2, 15), sock, kind))

    def release(self, now):
        keep = []
        for when, sock, kind in self.held:
            if when > now:
                keep.append((when, sock, kind))
                continue
            # A silent connection held past the handshake timeout has been closed by the server.
            try:
                sock.setblocking(False)
                closed = sock.recv(1) == b""
            except (BlockingIOError, ssl.SSLWantReadError):
                closed = False
            except OSError:
                closed = True
            self.run.stats.ok(f"abandoned: {kind}")
            if closed:
                self.run.stats.expected(f"abandoned: {kind}", "closed by the server first (a timeout)")
            abandon(sock)
        self.held = keep

    @guarded("abandoned")
    def one(self, kind):
        t = self.run.target
        if kind in ("tcp silent", "tcp dropped"):
            sock = socket.create_connection((HOST, t.port), timeout=10)
            if kind == "tcp dropped":
                abandon(sock)
                self.run.stats.ok(f"abandoned: {kind}")
            else:
                self.hold(sock, kind)
            return
        if kind == "plain http":
            with socket.create_connection((HOST, t.port), timeout=10) as sock:
                sock.sendall(f"GET /applications HTTP/1.1\r\nHost: {HOST}:{t.port}\r\n\r\n".encode())
                answer = sock.recv(64)
            if answer.startswith(b"HTTP/1.1 307"):
                self.run.stats.ok(f"abandoned: {kind}")
            else:
                self.run.stats.unexpected(f"abandoned: {kind}", f"answer: {answer!r}")
            return
        sock = t.tls_socket(alpn=("h2",) if kind == "h2 preface" else ("http/1.1",))
        if kind == "tls silent":
            self.hold(sock, kind)
        elif kind == "half a head":
            sock.sendall(f"GET {APPS} HTTP/1.1\r\nHost: {HOST}:{t.port}\r\nAuthorization: Bearer ".encode())
            self.hold(sock, kind)
        elif kind == "request dropped":
            sock.sendall(f"GET {APPS} HTTP/1.1\r\nHost: {HOST}:{t.port}\r\nAuthorization: Bearer {t.token}"
                         "\r\n\r\n".encode())
            abandon(sock)
            self.run.stats.ok(f"abandoned: {kind}")
        else:
            sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            self.hold(sock, kind)


# ---- one run ----------------------------------------------------------------------------------


def setup_accounts(target, admin_password):
    """Logs in as admin (the token of the readers and writers) and sets the local account's password."""
    status, body = target.rest_login("admin", admin_password)
    if status != 200:
        sys.exit(f"soak.py: admin login failed: {status} {body[:300]!r}")
    target.token = json.loads(body)["token"]
    with target.http(http2=False) as c:
        r = c.put("/api/v1/account/password", json={"name": SOAK_USER, "currentPassword": admin_password,
                                                     "newPassword": SOAK_PASSWORD})
        if r.status_code != 200:
            sys.exit(f"soak.py: setting the {SOAK_USER} account's password failed: {r.status_code} {r.text[:300]}")


def write_csv(path, samples):
    fields = ["t", "phase", "rss_kb", "fds", "threads", "ops", *GAUGES]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(samples)


def read_csv(path):
    with open(path, newline="") as f:
        return [{**row, "t": float(row["t"]), "rss_kb": int(row["rss_kb"]), "fds": int(row["fds"])}
                for row in csv.DictReader(f)]


def plot(path, samples, title):
    """RSS and open fds over time, the warm-up and the cool-down shaded, the steady state's fit drawn."""
    import matplotlib  # noqa: PLC0415 (only a run that plots needs it)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    t = [s["t"] for s in samples]
    fig, (ax_rss, ax_fd) = plt.subplots(2, 1, sharex=True, figsize=(8, 5), dpi=80,
                                        gridspec_kw={"height_ratios": [3, 2]})
    ax_rss.plot(t, [s["rss_kb"] / 1024 for s in samples], color="tab:blue", lw=1.2, label="VmRSS")
    steady = [s for s in samples if s["phase"] == "load"]
    if len(steady) >= 2:
        pts = [(s["t"], s["rss_kb"] / 1024) for s in steady]
        k = slope_per_minute(pts) / 60
        mt, mv = _mean([p[0] for p in pts]), _mean([p[1] for p in pts])
        ends = [steady[0]["t"], steady[-1]["t"]]
        ax_rss.plot(ends, [mv + k * (x - mt) for x in ends], color="tab:red", lw=1, ls="--",
                    label=f"fit after warm-up: {k * 60:+.2f} MB/min")
    ax_fd.plot(t, [s["fds"] for s in samples], color="tab:green", lw=1.2, label="open fds")
    for ax in (ax_rss, ax_fd):
        for phase, color in (("warmup", "0.85"), ("cooldown", "0.92")):
            span = [s["t"] for s in samples if s["phase"] == phase]
            if span:
                ax.axvspan(min(span), max(span), color=color, lw=0)
        ax.grid(True, lw=0.3)
        ax.legend(loc="lower right", fontsize=8)
    ax_rss.set_ylabel("RSS (MB)")
    ax_rss.set_ylim(bottom=0)
    ax_fd.set_ylabel("fds")
    ax_fd.set_ylim(bottom=0)
    ax_fd.set_xlabel("seconds (shaded: warm-up, cool-down)")
    ax_rss.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def print_report(table, seconds):
    print(f"{'operation':38} {'ok':>7} {'per s':>6}  expected / unexpected")
    for kind, row in table.items():
        notes = [f"{n} {why}" for why, n in row["expected"].items()]
        notes += [f"UNEXPECTED {n} {why[:120]}" for why, n in row["unexpected"].items()]
        print(f"{kind:38} {row['ok']:7d} {row['ok'] / seconds:6.2f}  {'; '.join(notes)}")


def report_checks(results):
    for name, ok, detail in results:
        print(f"  [{'ok' if ok else 'FAIL'}] {name}: {detail}")
    return all(ok for _, ok, _ in results)


def phase_stats(samples):
    """RSS and fds at the moments BENCHMARKS.md reports."""
    def pick(phase, which):
        sel = [s for s in samples if s["phase"] == phase]
        return sel[which] if sel else None

    points = {"idle": pick("idle", -1), "end of warm-up": pick("warmup", -1), "end of load": pick("load", -1),
              "after the load": pick("cooldown", -1)}
    out = {k: {"t": s["t"], "rss_mb": round(s["rss_kb"] / 1024, 1), "fds": s["fds"]} for k, s in points.items() if s}
    steady = [s for s in samples if s["phase"] == "load"]
    if steady:
        out["after warm-up"] = {"rss_mb_min": round(min(s["rss_kb"] for s in steady) / 1024, 1),
                                "rss_mb_max": round(max(s["rss_kb"] for s in steady) / 1024, 1),
                                "fds_min": min(s["fds"] for s in steady), "fds_max": max(s["fds"] for s in steady)}
    return out


def cmd_load(args):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data_dir = Path(args.data_dir)
    admin_password = (data_dir / "initial-admin-password").read_text().strip()
    with tempfile.TemporaryDirectory(prefix="soak-stubs-") as stubs:
        pb = compile_stubs(stubs)
    target = Target(args.port, data_dir / "tls" / "tls.crt", pb)
    setup_accounts(target, admin_password)

    stats = Stats()
    sampler = Sampler(args.pid, args.metrics_port, args.interval, stats)
    sampler.start()
    time.sleep(args.interval * 2.5)  # the idle baseline: three samples

    warmup = args.seconds * WARMUP_FRACTION
    run = Run(target, stats, args.seconds)
    started = time.monotonic()
    sampler.phase = "warmup"
    writer = Writer(run, seed=1)
    writer.setup()
    groups = {"logins": [("logins", Logins(run, admin_password).loop)],
              "reads": [("reader-1", Reader(run, seed=2).loop), ("reader-2", Reader(run, seed=3).loop)],
              "writes": [],  # the writer starts after its prefill, below
              "watches": [("watches-1", WatchChurn(run, seed=4).loop), ("watches-2", WatchChurn(run, seed=5).loop)],
              "slow": [("slow-sse", SlowReaders(run, "sse").loop), ("slow-grpc", SlowReaders(run, "grpc").loop)],
              "abandoned": [("abandoned", Abandoned(run, seed=6).loop)]}
    threads = [threading.Thread(target=fn, name=name, daemon=True)
               for group in args.mix for name, fn in groups[group]]
    for th in threads:
        th.start()
    filled = 0
    if "writes" in args.mix:
        # The writer fills the watch history within the first half of the warm-up, then writes at
        # its steady pace.
        filled = writer.prefill(HISTORY_EVENTS, warmup / 2)
        print(f"soak: warm-up filled the watch history with {filled} updates in "
              f"{time.monotonic() - started:.1f} s", flush=True)
        threads.append(threading.Thread(target=writer.loop, name="writer", daemon=True))
        threads[-1].start()

    run.pause(max(0.0, started + warmup - time.monotonic()))
    sampler.phase = "load"
    run.pause(max(0.0, run.deadline - time.monotonic()))
    load_seconds = time.monotonic() - started

    run.end()
    for th in threads:
        th.join(timeout=20)
    stuck = [th.name for th in threads if th.is_alive()]
    joined = time.monotonic() - started - load_seconds
    print(f"soak: load ran {load_seconds:.1f} s; its workers stopped within {joined:.1f} s", flush=True)
    writer.close()
    sampler.phase = "cooldown"
    stop_at = time.monotonic()
    time.sleep(max(0.0, stop_at + args.cooldown - time.monotonic()))
    sampler.stop()
    samples = sampler.samples

    write_csv(out / "samples.csv", samples)
    what = "mixed load" if set(args.mix) == set(MIX) else "+".join(args.mix)
    title = f"tiphys soak: {args.seconds:.0f} s of {what}, sampled every {args.interval:g} s"
    plot(out / "soak.png", samples, title)

    table = stats.table()
    print_report(table, load_seconds)
    results = check(samples)
    results.append(("no unexpected outcome", stats.unexpected_total() == 0,
                    f"{stats.unexpected_total()} unexpected" + "".join(f"\n      {e}" for e in stats.examples)))
    ran = {kind for kind, row in table.items() if row["ok"]}
    needed = {"logins": ["login (REST)", "login (gRPC)"], "reads": ["read (REST)", "read (gRPC)"],
              "writes": ["write: update (REST)", "write: update (gRPC)"],
              "watches": ["watch: grpc cancel", "watch: sse close"],
              "slow": ["slow reader (SSE)", "slow reader (gRPC)"], "abandoned": ["abandoned: tls silent"]}
    missing = [k for group in args.mix for k in needed[group] if k not in ran]
    results.append(("every kind of load ran", not missing, f"missing: {missing}" if missing else "yes"))
    results.append(("the load generator stopped", not stuck, f"stuck: {stuck}" if stuck else "yes"))
    passed = report_checks(results)
    summary = {"seconds": args.seconds, "mix": args.mix, "load_seconds": round(load_seconds, 1), "interval": args.interval,
               "warmup_seconds": warmup, "history_prefill": filled, "points": phase_stats(samples),
               "checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in results], "passed": passed,
               "operations": table}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary["points"], indent=1))
    print(f"soak: {'PASSED' if passed else 'FAILED'}; samples, plot and summary in {out}")
    return 0 if passed else 1


def cmd_check(args):
    passed = report_checks(check(read_csv(args.csv)))
    print(f"soak check: {'PASSED' if passed else 'FAILED'}")
    return 0 if passed else 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    lp = sub.add_parser("load", help="drive the server and check it")
    lp.add_argument("--pid", type=int, required=True, help="the server's process id")
    lp.add_argument("--port", type=int, required=True)
    lp.add_argument("--metrics-port", type=int, default=0)
    lp.add_argument("--data-dir", required=True, help="the server's data dir (CA, initial admin password)")
    lp.add_argument("--seconds", type=float, default=600)
    lp.add_argument("--interval", type=float, default=2.0, help="seconds between samples")
    lp.add_argument("--cooldown", type=float, default=None, help="seconds sampled after the load")
    lp.add_argument("--out", required=True)
    lp.add_argument("--mix", default=",".join(MIX),
                    help=f"comma-separated parts of the load (default all: {','.join(MIX)}), to find what grows")
    cp = sub.add_parser("check", help="the checks again, on a samples.csv")
    cp.add_argument("csv")
    args = p.parse_args(argv)
    if args.cmd == "check":
        return cmd_check(args)
    args.mix = [m for m in args.mix.split(",") if m]
    if not args.mix or set(args.mix) - set(MIX):
        p.error(f"--mix takes some of {','.join(MIX)}")
    if args.cooldown is None:
        args.cooldown = min(30.0, max(6.0, args.seconds / 20))
    if not 10 <= args.seconds <= 24 * 3600:
        p.error("--seconds must be between 10 and 86400")
    return cmd_load(args)


if __name__ == "__main__":
    sys.exit(main())
