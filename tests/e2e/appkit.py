"""Shared helpers of the application end-to-end tests (test_applications.py, test_app_watch.py):
Python stubs compiled from our protos at test time, Application bodies, a small REST client, an
`argocd-rbac-cm` writer, and watch readers (SSE, NDJSON, native gRPC) that collect frames on a
thread so that a test can wait for the next one with a deadline.

The stubs: `grpc_tools.protoc -I proto -I <grpc_tools include>` over every .proto under
proto/{tiphys,k8s,v1alpha1,repository,application} into a temp dir, then `application.application_pb2`
and friends are imported from it. proto/repository is included because application.proto imports
it (GetManifests answers a `repository.ManifestResponse`). Python module paths follow the file
paths given to protoc (`v1alpha1/application.proto` -> `v1alpha1.application_pb2`), not the proto
packages, so the long package `github.com.argoproj.argo_cd.v3.pkg.apis.application.v1alpha1` only
names descriptors and causes no import trouble; the generated directories have no __init__.py and
are imported as namespace packages, all of them at once, before the temp dir leaves sys.path.
"""

import http.client
import importlib
import itertools
import json
import os
import queue
import socket
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlencode

import grpc
import pytest
import requests

from authkit import bearer, connection, grpc_web_frame, grpc_web_unframe, manifest, request
from conftest import REPO

PROTO_DIRS = ("tiphys", "k8s", "v1alpha1", "repository", "application", "applicationset")
IN_CLUSTER = "https://kubernetes.default.svc"
REPO_URL = "https://github.com/argoproj/argocd-example-apps.git"
APPS = "/api/v1/applications"
STREAM = "/api/v1/stream/applications"
SERVICE = "application.ApplicationService"

# ---- protos -----------------------------------------------------------------------------------


def compile_stubs(out_dir):
    """Compiles our protos with grpcio-tools into `out_dir` and imports the modules the tests use:
    SimpleNamespace(app=application_pb2, grpc=application_pb2_grpc, v1=v1alpha1 application_pb2,
    meta=k8s meta_pb2, appset/appset_grpc=applicationset_pb2(_grpc), v1set=v1alpha1 applicationset_pb2)."""
    import grpc_tools  # noqa: PLC0415 (only these tests need it)
    from grpc_tools import protoc  # noqa: PLC0415

    out_dir = Path(out_dir)
    proto_root = REPO / "proto"
    include = Path(grpc_tools.__file__).parent / "_proto"  # google/protobuf/descriptor.proto etc.
    files = sorted(str(p.relative_to(proto_root)) for d in PROTO_DIRS for p in (proto_root / d).rglob("*.proto"))
    assert "application/application.proto" in files, files
    args = ["grpc_tools.protoc", f"-I{proto_root}", f"-I{include}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}", *files]
    rc = protoc.main(args)
    assert rc == 0, f"protoc failed ({rc}): {' '.join(args)}"
    sys.path.insert(0, str(out_dir))
    try:
        mods = {name: importlib.import_module(name) for name in (
            "tiphys.json_pb2", "k8s.meta.v1.meta_pb2", "v1alpha1.application_pb2", "repository.repository_pb2",
            "application.application_pb2", "application.application_pb2_grpc",
            "v1alpha1.applicationset_pb2", "applicationset.applicationset_pb2",
            "applicationset.applicationset_pb2_grpc")}
    finally:
        sys.path.remove(str(out_dir))
    return SimpleNamespace(app=mods["application.application_pb2"], grpc=mods["application.application_pb2_grpc"],
                           v1=mods["v1alpha1.application_pb2"], meta=mods["k8s.meta.v1.meta_pb2"],
                           appset=mods["applicationset.applicationset_pb2"],
                           appset_grpc=mods["applicationset.applicationset_pb2_grpc"],
                           v1set=mods["v1alpha1.applicationset_pb2"])


# ---- names and bodies -------------------------------------------------------------------------

_counter = itertools.count(1)
RUN = f"{os.getpid() % 100000:05d}"


def uniq(prefix="app"):
    """A fresh, valid application name: `<prefix>-<pid>-<n>`."""
    return f"{prefix}-{RUN}-{next(_counter)}"


def app_body(name, *, labels=None, annotations=None, project=None, repo=REPO_URL, path="guestbook",
             dest_namespace="default", server=IN_CLUSTER, **spec):
    """An Application as the UI's create form sends it (no status, no apiVersion/kind)."""
    metadata = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    body = {"metadata": metadata,
            "spec": {"destination": {"server": server, "namespace": dest_namespace},
                     "source": {"repoURL": repo, "path": path, "targetRevision": "HEAD"}, **spec}}
    if project is not None:
        body["spec"]["project"] = project
    return body


def rv_of(obj):
    """metadata.resourceVersion of a REST object as an int (it must be a decimal string)."""
    rv = obj["metadata"]["resourceVersion"]
    assert isinstance(rv, str) and rv.isdigit(), obj["metadata"]
    return int(rv)


# ---- REST -------------------------------------------------------------------------------------


class Api:
    """REST calls with one bearer token (None: no token)."""

    def __init__(self, server, token):
        self.server = server
        self.token = token

    def _headers(self, headers):
        return {**(bearer(self.token) if self.token else {}), **(headers or {})}

    def call(self, method, path, body=None, headers=None, **kw):
        return request(self.server, method, path, body, headers=self._headers(headers), **kw)

    def get(self, path, **kw):
        return self.call("GET", path, **kw)

    def create(self, body, query="", **kw):
        return self.call("POST", APPS + (f"?{query}" if query else ""), body, **kw)

    def must_create(self, body):
        r = self.create(body)
        assert r.status == 200, r
        return r.json()

    def app(self, name, query=""):
        return self.get(f"{APPS}/{name}" + (f"?{query}" if query else ""))

    def must_get(self, name):
        r = self.app(name)
        assert r.status == 200, r
        return r.json()

    def list(self, **params):
        query = urlencode(params, doseq=True)
        r = self.get(APPS + (f"?{query}" if query else ""))
        assert r.status == 200, r
        return r.json()

    def names(self, **params):
        return [item["metadata"]["name"] for item in (self.list(**params)["items"] or [])]

    def revision(self):
        """The registry revision as List reports it."""
        return rv_of(self.list(name="no-such-app-used-for-revision"))

    def delete(self, name, **kw):
        return self.call("DELETE", f"{APPS}/{name}", **kw)


# ---- config -----------------------------------------------------------------------------------


def write_rbac(cfg, policy_lines, default=None):
    """Writes argocd-rbac-cm into the ConfigDir `cfg` (atomically)."""
    data = {"policy.csv": "\n".join(policy_lines) + "\n"}
    if default:
        data["policy.default"] = default
    cfg.write_raw("argocd-rbac-cm.yaml", manifest("ConfigMap", "argocd-rbac-cm", data))


# ---- gRPC and gRPC-Web ------------------------------------------------------------------------


def grpc_channel(server):
    """h2c against an --insecure server, TLS (trusting its generated CA) otherwise."""
    if server.tls:
        creds = grpc.ssl_channel_credentials(root_certificates=server.ca.read_bytes())
        return grpc.secure_channel(f"127.0.0.1:{server.port}", creds)
    return grpc.insecure_channel(server.addr)


def md(token, key="authorization"):
    if token is None:
        return []
    return [("authorization", f"Bearer {token}")] if key == "authorization" else [(key, token)]


def rpc_error(fn, *args, **kw):
    with pytest.raises(grpc.RpcError) as err:
        fn(*args, **kw)
    return err.value


def grpc_web(server, method, message, token=None, headers=None, timeout=20):
    """One binary gRPC-Web call, framed by hand. Returns SimpleNamespace(status, headers (lower-case
    dict), body, messages, trailers (from the trailer frame), header_status (grpc-status from the
    headers, for trailers-only answers))."""
    data = message if isinstance(message, bytes) else message.SerializeToString()
    hdrs = {"Content-Type": "application/grpc-web+proto", "Accept": "application/grpc-web+proto",
            "X-Grpc-Web": "1", **({"Authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
    r = requests.post(server.url(f"/{SERVICE}/{method}" if "/" not in method else f"/{method}"),
                      data=grpc_web_frame(data), headers=hdrs, timeout=timeout,
                      verify=str(server.ca) if server.tls else True)
    lower = {k.lower(): v for k, v in r.headers.items()}
    messages, trailers = grpc_web_unframe(r.content) if r.status_code == 200 else ([], {})
    return SimpleNamespace(status=r.status_code, headers=lower, body=r.content, messages=messages,
                           trailers=trailers, header_status=lower.get("grpc-status"),
                           header_message=lower.get("grpc-message"))


# ---- watch readers ----------------------------------------------------------------------------


class Watch:
    """Frames of one watch, collected by a reader thread: `("result", msg)`, `("error", err)`,
    `("end", why)`. REST messages are dicts; gRPC ones are ApplicationWatchEvent messages."""

    def __init__(self):
        self.frames = queue.Queue()
        self.violations = []  # framing errors seen by the reader
        self.keepalives = 0
        self.thread = None

    def start(self):
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def next(self, timeout=10.0, what="a watch frame"):
        try:
            return self.frames.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no {what} within {timeout} s (violations: {self.violations})")

    def event(self, timeout=10.0):
        """The next frame, which must be an event: (type, name, resourceVersion, application)."""
        kind, value = self.next(timeout, "watch event")
        assert kind == "result", (kind, value)
        return self.summary(value)

    def events(self, n, timeout=10.0):
        return [self.event(timeout) for _ in range(n)]

    def until_end(self, timeout):
        """Frames up to the end of the stream (the end included); fails after `timeout` s."""
        deadline = time.monotonic() + timeout
        got = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"stream still open after {timeout} s; frames: {got}")
            kind, value = self.next(left, "end of the stream")
            got.append((kind, value))
            if kind in ("error", "end"):
                return got


class RestWatch(Watch):
    """GET /api/v1/stream/applications, SSE (Accept: text/event-stream) or NDJSON."""

    def __init__(self, server, token, params=None, sse=True, timeout=60, extra_headers=None):
        super().__init__()
        self.sse = sse
        query = urlencode(params or {}, doseq=True)
        self.path = STREAM + (f"?{query}" if query else "")
        self.conn = connection(server, timeout=timeout)
        headers = {**(bearer(token) if token else {}), **(extra_headers or {})}
        if sse:
            headers["Accept"] = "text/event-stream"
        self.conn.request("GET", self.path, headers=headers)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.headers = {k.lower(): v for k, v in self.resp.getheaders()}
        self.body = None
        self.raw = []
        if self.status == 200:
            self.start()
        else:
            self.body = self.resp.read()
            self.conn.close()

    def json(self):
        return json.loads(self.body)

    @staticmethod
    def summary(result):
        app = result["application"]
        return result["type"], app["metadata"]["name"], rv_of(app), app

    def _run(self):
        try:
            while True:
                line = self.resp.readline()
                if not line:
                    self.frames.put(("end", "eof"))
                    return
                self.raw.append(line)
                if self.sse:
                    if line == b":\n":
                        self.keepalives += 1
                        continue
                    if line == b"\n":
                        continue  # the gateway's extra delimiter after each frame
                    if not (line.startswith(b"data: ") and line.endswith(b" \n")):
                        self.violations.append(f"not an SSE data line: {line[:200]!r}")
                        continue
                    payload = json.loads(line[len(b"data: "):-2])
                    after = self.resp.readline()
                    self.raw.append(after)
                    if after != b"\n":
                        self.violations.append(f"SSE data line not followed by a blank line: {after[:200]!r}")
                else:
                    if line == b"\n":
                        self.keepalives += 1
                        continue
                    if not line.endswith(b"\n"):
                        self.violations.append(f"NDJSON line without newline: {line[:200]!r}")
                    payload = json.loads(line)
                if set(payload) == {"result"}:
                    self.frames.put(("result", payload["result"]))
                elif set(payload) == {"error"}:
                    self.frames.put(("error", payload["error"]))
                else:
                    self.violations.append(f"frame is neither result nor error: {payload!r:.200}")
        except (OSError, ValueError, http.client.HTTPException) as err:
            self.frames.put(("end", repr(err)))

    def close(self):
        try:
            if self.conn.sock is not None:
                self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self.thread:  # the reader ends on the shut-down socket; then the connection is closed
            self.thread.join(timeout=5)
        self.conn.close()


class GrpcWatch(Watch):
    """ApplicationService/Watch over native gRPC."""

    def __init__(self, stub, pb, token, timeout=60, **query):
        super().__init__()
        self.call = stub.Watch(pb.app.ApplicationQuery(**query), metadata=md(token), timeout=timeout)
        self.start()

    @staticmethod
    def summary(ev):
        rv = ev.application.metadata.resourceVersion
        assert rv.isdigit(), ev.application.metadata
        return ev.type, ev.application.metadata.name, int(rv), ev.application

    def _run(self):
        try:
            for ev in self.call:
                self.frames.put(("result", ev))
            self.frames.put(("end", "eof"))
        except grpc.RpcError as err:
            self.frames.put(("error", err))

    def close(self):
        self.call.cancel()
        if self.thread:
            self.thread.join(timeout=5)


def open_watch(transport, server, token, stub=None, pb=None, **query):
    """A watch over `transport` ("sse", "ndjson" or "grpc") with ApplicationQuery fields `query`."""
    if transport == "grpc":
        return GrpcWatch(stub, pb, token, **query)
    w = RestWatch(server, token, query, sse=transport == "sse")
    assert w.status == 200, (w.status, w.body)
    return w


class Watches:
    """Closes every watch a test opened."""

    def __init__(self):
        self.opened = []

    def add(self, w):
        self.opened.append(w)
        return w

    def close_all(self):
        for w in self.opened:
            w.close()
