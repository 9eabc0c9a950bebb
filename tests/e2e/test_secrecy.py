"""The secrecy scanner (SEC-16, SEC-17, SEC-18): credentials put into the server never come back.

One plaintext server with RUST_LOG=debug and six callers: admin; `reader` (role:readonly); `ops`
(a custom role: get/update on clusters and repositories, get on the applications and the project
`team`); `nobody` (no grant); anonymous (no token, anonymous access on); and a `proj:team:ci`
project-role token (CreateToken over REST). As admin the test stores a unique marker
(`S3CR3T-<field>-<uuid>`) in every credential field of clusters (global and project-scoped:
password, bearer token, TLS key (base64), exec plugin args and env, a password in the proxy URL,
and a `kubectl.kubernetes.io/last-applied-configuration` annotation holding a token, SEC-16), of
repositories (every secret field of the message, passwords in the proxy and GitHub Enterprise
URLs; global, project-scoped, scp-like, one inheriting a template) and of credential templates
(the same, also through CreateRepository `credsOnly`); more secrets are the server key and a
webhook secret in argocd-secret, the account passwords and their bcrypt hashes.

Then every caller calls every REST route (the method table, src/rpc/table/*.rs, and the fixed
routes of src/api/mod.rs;
`test_every_rest_route_was_called` reads those sources and fails when a route was never called),
with the error paths: bad ids, ids that are URLs with a password, wrong verbs, malformed JSON and
wrongly typed fields next to a secret, URLs with a password, upsert conflicts, a body naming
another cluster than the path, permission denials, unserved methods; the application watch
streams (SSE and NDJSON, read for 1 s); native gRPC (stubs compiled at test time) for List/Get of
clusters, repositories and templates and GetDetailedProject, with a refused URL, a conflict, a bad
update and a malformed protobuf message carrying a secret; gRPC-Web (binary, and text) for four
calls. Last, argocd-secret is edited: a rotated secret (accepted), then broken files carrying
secrets (invalid YAML twice, `data` that is not base64 or not UTF-8, a plain password where a
bcrypt hash belongs), each refused and logged.

Every status, header and body, every gRPC message, metadata and status detail, the metrics, and
the server's whole log are searched for every marker: as is (any case), in base64 (standard and
URL alphabets, at each of the three alignments, as inside a base64-encoded document), in hex, and
as Rust's debug form of a byte list.

The scan is shown to be able to fail on every run: canaries (`C4N4RY-…`) stored in fields the API
does return (usernames, a label) must be found in REST, gRPC, gRPC-Web and watch answers; the
store, exported with `tiphys admin export --data-dir --include-secrets` once the server is
stopped, must hold every stored marker, and the same scanner must find each of them there (the TLS
key only through a base64 form). `pytest -s` prints the calls per caller; every call (request,
status, headers, body) is written to `secrecy-calls.jsonl` next to the server's data dir.

`test_passwords_in_application_and_project_urls_are_not_shown` probes URLs with a password in
Applications (source, sources, destination) and AppProjects (sourceRepos, destinations), which the
server accepts and shows to every reader, where it refuses them for repositories and clusters.
"""

import base64
import concurrent.futures
import http.client
import importlib
import json
import re
import socket
import sys
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import grpc
import pytest
import requests

from appkit import IN_CLUSTER, app_body, grpc_web, write_rbac
from authkit import (ADMIN_PW, ALICE_PW, BOB_PW, CAROL_PW, HASHES, bearer, connection, grpc_web_text_decode,
                     metric, metrics_text, request, wait_until)
from conftest import REPO, cli

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
STREAM_BUDGET = 1.0  # seconds a watch stream is read
PROJECT = "team"
ROLE = "ci"

# ---- markers and the scanner --------------------------------------------------------------------


@dataclass
class Marker:
    value: str
    what: str
    stored: bool  # whether the store must hold it (checked by the export control)
    category: str = "credential"  # or "url-in-spec": a password in an application's or project's URL


class Secrets:
    """The secrets put into the server, and the scanner that looks for them."""

    def __init__(self):
        self.markers = {}
        self.canaries = {}

    def new(self, what, stored=True, category="credential"):
        value = f"S3CR3T-{what}-{uuid.uuid4().hex}"
        self.markers[value] = Marker(value, what, stored, category)
        return value

    def known(self, value, what):
        """A secret the test did not choose the form of (a password, a hash, a key)."""
        self.markers[value] = Marker(value, what, False)
        return value

    def canary(self, what):
        """A value in a field the API returns: the scan must find it (the positive control)."""
        value = f"C4N4RY-{what}-{uuid.uuid4().hex[:20]}"
        self.canaries[value] = what
        return value

    @staticmethod
    def forms(value):
        """(form, needle, case-insensitive) for every encoding a leak could take."""
        raw = value.encode()
        out = [("raw", raw, True), ("hex", raw.hex().encode(), True),
               ("bytes-debug", ", ".join(str(b) for b in raw).encode(), False)]
        for shift in range(3):
            encoded = base64.b64encode(b"\0" * shift + raw)
            start = 4 if shift else 0
            core = encoded[start:((shift + len(raw)) // 3) * 4]
            out.append((f"base64+{shift}", core, False))
            out.append((f"base64url+{shift}", core.replace(b"+", b"-").replace(b"/", b"_"), False))
        return out

    def _compile(self, values):
        return [(value, form, needle, ci) for value in values for form, needle, ci in self.forms(value)]

    def scan(self, blob, values=None):
        """[(value, form)] of every marker (or of `values`) found in `blob` (bytes)."""
        if isinstance(blob, str):
            blob = blob.encode()
        lower = blob.lower()
        hits = []
        for value, form, needle, ci in self._compile(self.markers if values is None else values):
            if (needle.lower() in lower) if ci else (needle in blob):
                hits.append((value, form))
        return hits


# ---- recording ------------------------------------------------------------------------------------


@dataclass
class Call:
    caller: str
    transport: str  # rest, stream, grpc, grpc-web
    request: str
    request_body: bytes
    status: str
    headers: list
    body: bytes

    def blob(self):
        head = "".join(f"{k}: {v}\n" for k, v in self.headers)
        return f"{self.status}\n{head}\n".encode() + self.body

    def show(self, limit=1500):
        return (f"[{self.caller} {self.transport}] {self.request}\n  request body: {self.request_body[:limit]!r}\n"
                f"  -> {self.status} {self.headers}\n  response: {self.body[:limit]!r}")


class Recorder:
    def __init__(self, server, tokens, secrets):
        self.server = server
        self.tokens = tokens
        self.secrets = secrets
        self.calls = []

    def add(self, call):
        self.calls.append(call)
        return call

    # -- REST

    def rest(self, caller, method, path, body=None, headers=None):
        """One REST call; `body`: a dict (JSON), or bytes/str sent as they are (raw JSON)."""
        token = self.tokens[caller]
        hdrs = {**(bearer(token) if token else {}), **(headers or {})}
        if isinstance(body, (dict, list)):
            data = json.dumps(body).encode()
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = body
        r = request(self.server, method, path, data, headers=hdrs, content_type="application/json")
        return self.add(Call(caller, "rest", f"{method} {path}", data or b"", str(r.status), r.headers, r.body))

    def stream(self, caller, path, sse):
        """Reads a REST watch stream for STREAM_BUDGET seconds."""
        token = self.tokens[caller]
        conn = connection(self.server, timeout=5)
        hdrs = {**(bearer(token) if token else {}), **({"Accept": "text/event-stream"} if sse else {})}
        chunks = []
        try:
            conn.request("GET", path, headers=hdrs)
            resp = conn.getresponse()
            headers = [(k.lower(), v) for k, v in resp.getheaders()]
            if resp.status != 200:
                chunks.append(resp.read())
            else:
                conn.sock.settimeout(0.2)
                deadline = time.monotonic() + STREAM_BUDGET
                while time.monotonic() < deadline:
                    try:
                        data = resp.read1(65536)
                    except (socket.timeout, TimeoutError):
                        continue
                    except (OSError, http.client.HTTPException):
                        break
                    if not data:
                        break
                    chunks.append(data)
        finally:
            try:
                if conn.sock is not None:
                    conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        return self.add(Call(caller, "stream", f"GET {path} ({'SSE' if sse else 'NDJSON'})", b"",
                             str(resp.status), headers, b"".join(chunks)))

    # -- gRPC

    def grpc(self, caller, stub_method, message, name):
        token = self.tokens[caller]
        metadata = [("authorization", f"Bearer {token}")] if token else []
        request_body = message if isinstance(message, bytes) else message.SerializeToString()
        try:
            reply, call = stub_method.with_call(message, metadata=metadata, timeout=10)
            body = reply if isinstance(reply, bytes) else reply.SerializeToString()
            status = "OK"
            detail = b""
            md = list(call.initial_metadata() or ()) + list(call.trailing_metadata() or ())
        except grpc.RpcError as err:
            status = err.code().name
            detail = f"{err.details()}\n{err.debug_error_string()}".encode()
            md = list(err.initial_metadata() or ()) + list(err.trailing_metadata() or ())
            body = b""
        headers = [(k, v if isinstance(v, str) else v.decode("latin-1")) for k, v in md]
        return self.add(Call(caller, "grpc", name, request_body, status, headers, body + b"\n" + detail))

    def grpc_web(self, caller, method, message, text=False):
        token = self.tokens[caller]
        data = message.SerializeToString()
        if text:
            frame = b"\x00" + len(data).to_bytes(4, "big") + data
            hdrs = {"Content-Type": "application/grpc-web-text", "Accept": "application/grpc-web-text",
                    "X-Grpc-Web": "1", **(bearer(token) if token else {})}
            r = requests.post(self.server.url(f"/{method}"), data=base64.b64encode(frame), headers=hdrs, timeout=10)
            body = r.content
            try:  # the decoded frames too (the base64 forms would catch them anyway)
                body += b"\n" + grpc_web_text_decode(body)
            except ValueError:
                pass
            return self.add(Call(caller, "grpc-web", f"{method} (text)", data, str(r.status_code),
                                 [(k.lower(), v) for k, v in r.headers.items()], body))
        r = grpc_web(self.server, method, message, token=token)
        return self.add(Call(caller, "grpc-web", method, data, str(r.status), sorted(r.headers.items()), r.body))


# ---- the server and its contents -----------------------------------------------------------------

CALLERS = ["anonymous", "nobody", "reader", "projtoken", "ops", "admin"]  # admin last: it deletes

POLICY = [
    "g, reader, role:readonly",
    "p, ops, clusters, get, *, allow",
    "p, ops, clusters, update, *, allow",
    "p, ops, repositories, get, *, allow",
    "p, ops, repositories, update, *, allow",
    f"p, ops, applications, get, {PROJECT}/*, allow",
    f"p, ops, projects, get, {PROJECT}, allow",
]


def compile_stubs(out_dir):
    """Python stubs of the cluster, repository, repocreds and project services (as
    appkit.compile_stubs does for applications)."""
    import grpc_tools  # noqa: PLC0415
    from grpc_tools import protoc  # noqa: PLC0415

    proto_root = REPO / "proto"
    include = Path(grpc_tools.__file__).parent / "_proto"
    dirs = ("tiphys", "k8s", "v1alpha1", "repository", "application", "clusters", "repocreds", "project")
    files = sorted(str(p.relative_to(proto_root)) for d in dirs for p in (proto_root / d).rglob("*.proto"))
    args = ["grpc_tools.protoc", f"-I{proto_root}", f"-I{include}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}", *files]
    assert protoc.main(args) == 0, f"protoc failed: {' '.join(args)}"
    sys.path.insert(0, str(out_dir))
    try:
        names = ("clusters.cluster_pb2", "clusters.cluster_pb2_grpc", "repository.repository_pb2",
                 "repository.repository_pb2_grpc", "repocreds.repocreds_pb2", "repocreds.repocreds_pb2_grpc",
                 "project.project_pb2", "project.project_pb2_grpc", "v1alpha1.repository_pb2",
                 "v1alpha1.cluster_pb2")
        mods = {n: importlib.import_module(n) for n in names}
    finally:
        sys.path.remove(str(out_dir))
    return SimpleNamespace(
        cluster=mods["clusters.cluster_pb2"], cluster_grpc=mods["clusters.cluster_pb2_grpc"],
        repo=mods["repository.repository_pb2"], repo_grpc=mods["repository.repository_pb2_grpc"],
        creds=mods["repocreds.repocreds_pb2"], creds_grpc=mods["repocreds.repocreds_pb2_grpc"],
        project=mods["project.project_pb2"], project_grpc=mods["project.project_pb2_grpc"],
        v1repo=mods["v1alpha1.repository_pb2"], v1cluster=mods["v1alpha1.cluster_pb2"])


def ld(number, data):
    """A length-delimited protobuf field."""
    n, length = len(data), b""
    while True:
        length += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            break
    return bytes([number << 3 | 2]) + length + data


def b64(text):
    return base64.b64encode(text.encode()).decode()


def enc(text):
    return quote(text, safe="")


def repo_secret_fields(s, kind):
    """Every secret field of a Repository / RepoCreds, each with its own marker."""
    return {
        "password": s.new(f"{kind}-password"),
        "sshPrivateKey": "-----BEGIN OPENSSH PRIVATE KEY-----\n" + s.new(f"{kind}-sshPrivateKey")
                         + "\n-----END OPENSSH PRIVATE KEY-----\n",
        "tlsClientCertKey": s.new(f"{kind}-tlsClientCertKey"),
        "githubAppPrivateKey": s.new(f"{kind}-githubAppPrivateKey"),
        "gcpServiceAccountKey": json.dumps({"type": "service_account",
                                            "private_key": s.new(f"{kind}-gcpServiceAccountKey")}),
        "bearerToken": s.new(f"{kind}-bearerToken"),
        "azureServicePrincipalClientSecret": s.new(f"{kind}-azureClientSecret"),
        "proxy": f"http://proxyuser:{s.new(f'{kind}-proxyPassword')}@proxy.example.com:3128",
        "githubAppEnterpriseBaseUrl": f"https://ghe:{s.new(f'{kind}-gheUrlPassword')}@ghe.example.com/api/v3",
        "tlsClientCertData": "-----BEGIN CERTIFICATE-----\nnot-secret\n-----END CERTIFICATE-----\n",
        "githubAppID": 12345,
        "githubAppInstallationID": 678,
        "azureServicePrincipalClientId": "client-id",
        "azureServicePrincipalTenantId": "tenant-id",
        "noProxy": "localhost",
    }


def cluster_body(s, server, name, project="", canary=None):
    last_applied = json.dumps({"apiVersion": "v1", "kind": "Secret", "stringData": {
        "server": server, "config": json.dumps({"bearerToken": s.new(f"{name}-lastApplied", stored=False)})}})
    body = {
        "server": server, "name": name, "namespaces": ["default", "team"],
        "labels": {"env": canary or "test"},
        "annotations": {LAST_APPLIED: last_applied, "note": "kept"},
        "config": {
            "username": "cluster-user",
            "password": s.new(f"{name}-password"),
            "bearerToken": s.new(f"{name}-bearerToken"),
            "tlsClientConfig": {"insecure": False, "serverName": "k8s",
                                "caData": b64("not-secret-ca"), "certData": b64("not-secret-cert"),
                                "keyData": b64(s.new(f"{name}-keyData"))},
            "execProviderConfig": {"command": "get-token", "apiVersion": "client.authentication.k8s.io/v1beta1",
                                   "args": ["--token", s.new(f"{name}-execArg")],
                                   "env": {"CLOUD_TOKEN": s.new(f"{name}-execEnv")}},
            "awsAuthConfig": {"clusterName": "eks", "roleARN": "arn:aws:iam::123456789012:role/not-secret"},
            "proxyUrl": f"http://proxyuser:{s.new(f'{name}-proxyPassword')}@proxy.example.com:3128",
        },
    }
    if project:
        body["project"] = project
    return body


@pytest.fixture(scope="module")
def env(module_servers, module_config, tmp_path_factory):
    s = Secrets()
    server_key = s.known(f"S3CR3T-serverkey-{uuid.uuid4().hex}", "server.secretkey")
    webhook = s.known(f"S3CR3T-webhook-{uuid.uuid4().hex}", "webhook.github.secret")
    for pw in (ADMIN_PW, ALICE_PW, BOB_PW, CAROL_PW):
        s.known(pw, "account password")
        s.known(HASHES[pw], "account password hash")
    cfg = module_config(
        cm={"accounts.reader": "login", "accounts.ops": "login", "accounts.nobody": "login",
            "users.anonymous.enabled": "true"},
        secret={"admin.password": HASHES[ADMIN_PW], "server.secretkey": server_key,
                "accounts.reader.password": HASHES[ALICE_PW], "accounts.ops.password": HASHES[BOB_PW],
                "accounts.nobody.password": HASHES[CAROL_PW], "webhook.github.secret": webhook},
        standard=False)
    write_rbac(cfg, POLICY)
    mp = pytest.MonkeyPatch()
    mp.setenv("RUST_LOG", "debug")
    try:
        server = module_servers.start("--insecure", config=cfg)
    finally:
        mp.undo()
    tokens = {"anonymous": None}
    rec = Recorder(server, tokens, s)
    for name, password in (("admin", ADMIN_PW), ("reader", ALICE_PW), ("ops", BOB_PW), ("nobody", CAROL_PW)):
        tokens[name] = ok(rec.rest("anonymous", "POST", "/api/v1/session",
                                   {"username": name, "password": password}))["token"]
    return SimpleNamespace(server=server, servers=module_servers, cfg=cfg, secrets=s, rec=rec, tokens=tokens,
                           stubs=compile_stubs(tmp_path_factory.mktemp("secrecy-stubs")))


def ok(call):
    assert call.status == "200", call.show()
    return json.loads(call.body)


def inject(env):
    """As admin: the project, its role token, clusters, templates, repositories, an application."""
    s, rec = env.secrets, env.rec
    c = SimpleNamespace()
    c.canary_cluster = s.canary("cluster-label")
    c.canary_repo = s.canary("repo-username")
    c.canary_creds = s.canary("creds-username")
    c.canary_app = s.canary("app-label")

    project = {"metadata": {"name": PROJECT}, "spec": {
        "sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}],
        "roles": [{"name": ROLE, "policies": [
            f"p, proj:{PROJECT}:{ROLE}, applications, get, {PROJECT}/*, allow",
            f"p, proj:{PROJECT}:{ROLE}, repositories, get, {PROJECT}/*, allow",
            f"p, proj:{PROJECT}:{ROLE}, clusters, get, {PROJECT}/*, allow"]}]}}
    ok(rec.rest("admin", "POST", "/api/v1/projects", {"project": project}))
    env.tokens["projtoken"] = ok(rec.rest("admin", "POST", f"/api/v1/projects/{PROJECT}/roles/{ROLE}/token",
                                          {"expiresIn": 3600}))["token"]

    # clusters: one global, one scoped to the project, one to delete, one updated afterwards
    c.c1 = cluster_body(s, "https://c1.example.com", "c1", canary=c.canary_cluster)
    c.c2 = cluster_body(s, "https://c2.example.com:6443", "c2", project=PROJECT)
    c.c_tmp = cluster_body(s, "https://c-tmp.example.com", "c-tmp")
    for body in (c.c1, c.c2, c.c_tmp):
        got = ok(rec.rest("admin", "POST", "/api/v1/clusters", body))
        # Shown: the labels; of the config only what upstream's Cluster.Sanitized leaves.
        assert got["labels"] == body["labels"], got
        assert set(got["config"]) <= {"awsAuthConfig", "proxyUrl", "disableCompression", "tlsClientConfig"}, got
    # Update (PUT) with new credentials: they replace the first ones, which the store no longer has
    before = set(s.markers)
    c.c3 = cluster_body(s, "https://c3.example.com", "c3")
    ok(rec.rest("admin", "POST", "/api/v1/clusters", c.c3))
    for value in set(s.markers) - before:
        s.markers[value].stored = False
    c.c3 = cluster_body(s, "https://c3.example.com", "c3", project=PROJECT)
    ok(rec.rest("admin", "PUT", f"/api/v1/clusters/{enc(c.c3['server'])}", c.c3))

    # credential templates: through RepoCredsService, and through CreateRepository(credsOnly)
    c.t1 = {"url": "https://git.example.com/", "username": c.canary_creds, "type": "git",
            **repo_secret_fields(s, "creds1")}
    ok(rec.rest("admin", "POST", "/api/v1/repocreds", c.t1))
    c.t2 = {"repo": "https://helm.example.com/charts", "username": "bot", "type": "helm",
            **repo_secret_fields(s, "creds2")}
    ok(rec.rest("admin", "POST", "/api/v1/repositories?credsOnly=true", c.t2))
    c.t_tmp = {"url": "https://tmp.example.com/", "password": s.new("creds-tmp-password")}
    c.r_tmp = {"repo": "https://tmp.example.com/r.git", "password": s.new("repo-tmp-password")}
    c.deleted = {m for m in s.markers if s.markers[m].what.startswith(("c-tmp-", "creds-tmp-", "repo-tmp-"))}
    ok(rec.rest("admin", "POST", "/api/v1/repocreds", c.t_tmp))

    # repositories: global, project-scoped, inheriting the template, to delete
    c.r1 = {"repo": "https://git.example.com/team/r1.git", "username": c.canary_repo, "name": "r1",
            **repo_secret_fields(s, "repo1")}
    c.r2 = {"repo": "https://other.example.com/team/r2.git", "username": "bot", "project": PROJECT, "type": "git",
            **repo_secret_fields(s, "repo2")}
    c.r3 = {"repo": "https://git.example.com/team/inherits.git", "project": PROJECT}
    for body in (c.r1, c.r2, c.r3, c.r_tmp):
        ok(rec.rest("admin", "POST", "/api/v1/repositories", body))
    c.r_ssh = {"repo": "git@github.com:team/ssh.git", "sshPrivateKey": s.new("repo-scp-sshPrivateKey"),
               "project": PROJECT}
    ok(rec.rest("admin", "POST", "/api/v1/repositories", c.r_ssh))
    inherited = ok(rec.rest("admin", "GET", f"/api/v1/repositories/{enc(c.r3['repo'])}"))
    assert inherited.get("inheritedCreds") is True and inherited.get("username") == c.canary_creds, inherited

    # an application of the project, deployed to the scoped cluster from the scoped repository
    c.app = f"secrecy-{uuid.uuid4().hex[:8]}"
    c.app_body = app_body(c.app, project=PROJECT, repo=c.r2["repo"], server=c.c2["server"],
                          labels={"canary": c.canary_app})
    ok(rec.rest("admin", "POST", "/api/v1/applications", c.app_body))
    c.app_tmp = f"secrecy-tmp-{uuid.uuid4().hex[:8]}"
    ok(rec.rest("admin", "POST", "/api/v1/applications", app_body(c.app_tmp, project=PROJECT)))

    # applications and a project whose URLs hold a password (refused, as a repository's or a
    # cluster's would be, or at least never shown)
    def url(what, host):
        return f"https://u:{s.new(what, False, 'url-in-spec')}@{host}"

    c.url_probes = [
        ("app-url-source", app_body("secrecy-url-source", project=PROJECT,
                                    repo=url("app-source-repoURL-password", "git.example.com/z.git"))),
        ("app-url-destination", app_body("secrecy-url-destination", project=PROJECT,
                                         server=url("app-destination-server-password", "c1.example.com"))),
        ("app-url-sources", {"metadata": {"name": "secrecy-url-sources"}, "spec": {
            "project": PROJECT, "destination": {"server": IN_CLUSTER, "namespace": "default"},
            "sources": [{"repoURL": url("app-sources-repoURL-password", "git.example.com/y.git"), "path": "a"},
                        {"repoURL": "https://github.com/argoproj/argocd-example-apps.git", "path": "b"}]}}),
        ("project-urls", {"project": {"metadata": {"name": "secrecy-urls"}, "spec": {
            "sourceRepos": [url("project-sourceRepos-password", "git.example.com/*")],
            "destinations": [{"server": url("project-destination-password", "k8s.example.com"),
                              "namespace": "*"}]}}}),
    ]
    for name, body in c.url_probes:
        path = "/api/v1/projects" if name.startswith("project") else "/api/v1/applications"
        rec.rest("admin", "POST", path, body)
    return c


# ---- what every caller calls -----------------------------------------------------------------------


def rest_matrix(env, c, caller):
    """Every REST route, with the error paths; returns nothing (the recorder keeps the calls)."""
    s, rec = env.secrets, env.rec

    def call(method, path, body=None, **kw):
        return rec.rest(caller, method, path, body, **kw)

    c1, c2, r1, r2 = enc(c.c1["server"]), enc(c.c2["server"]), enc(c.r1["repo"]), enc(c.r2["repo"])
    app = c.app

    # settings, version, session, accounts
    for path in ("/healthz", "/api/version", "/api/v1/settings", "/api/v1/settings/plugins",
                 "/api/v1/session/userinfo", "/api/v1/account",
                 "/api/v1/account/admin", "/api/v1/account/ops", "/api/v1/account/nosuch",
                 "/api/v1/account/can-i/clusters/get/*", "/api/v1/account/can-i/repositories/update/*",
                 f"/api/v1/account/can-i/projects/get/{PROJECT}", "/api/v1/account/can-i/clusters/get",
                 "/api/v1/account/can-i/clusters/get/", "/api/nosuch", "/auth/nosuch",
                 "/swagger.json", "/swagger-ui", "/swagger-ui/init.js", "/swagger-ui/swagger-ui-bundle.js",
                 "/swagger-ui/swagger-ui.css"):
        call("GET", path)
    call("POST", "/api/v1/account/ops/token", {"name": "ops", "expiresIn": 60})
    call("DELETE", "/api/v1/account/ops/token/nosuch")
    # SSO users (personal access tokens): listed, and a user who never made a token
    call("GET", "/api/v1/ssousers")
    call("PUT", "/api/v1/ssousers/nosuch", {"disabled": True})
    call("DELETE", "/api/v1/ssousers/nosuch")

    # clusters: every route, by server URL and by name, and the error paths
    call("GET", "/api/v1/clusters")
    call("GET", f"/api/v1/clusters?server={c1}")
    call("GET", "/api/v1/clusters?name=c2")
    call("GET", "/api/v1/clusters?fields=items.config,items.annotations,items.server")
    for cid in (c1, c2, enc(c.c3["server"]), "c2?id.type=name", "c1?id.type=name_escaped", enc(IN_CLUSTER)):
        call("GET", f"/api/v1/clusters/{cid}")
    call("POST", f"/api/v1/clusters/{c1}/invalidate-cache")
    call("POST", f"/api/v1/clusters/{c2}/invalidate-cache")
    call("POST", f"/api/v1/clusters/{c1}/rotate-auth")
    call("POST", "/api/v1/clusters", c.c1)  # identical: answered as stored
    changed = {**c.c1, "labels": {"env": f"test-{caller}"}}
    call("POST", "/api/v1/clusters", changed)  # different without upsert
    call("POST", "/api/v1/clusters?upsert=true", changed)
    call("PUT", f"/api/v1/clusters/{c1}", c.c1)
    call("PUT", f"/api/v1/clusters/{c2}?updatedFields=labels&updatedFields=annotations",
         {**c.c2, "labels": {"who": caller}, "config": {"password": s.new("ignored-updatedFields", False)}})
    call("PUT", f"/api/v1/clusters/{c2}?updatedFields=server", c.c2)  # not updatable
    # SEC-15: the body names another cluster than the path
    call("PUT", f"/api/v1/clusters/{c1}", {**c.c2, "config": {"password": s.new("mismatch", False)}})
    # malformed: wrong type next to a secret, a key that is not base64, a string for an integer
    call("PUT", f"/api/v1/clusters/{c1}",
         {**c.c1, "config": {**c.c1["config"], "password": s.new("wrongtype", False),
                             "tlsClientConfig": {"insecure": "yes", "keyData": b64(s.new("wrongtype-key", False))}}})
    call("POST", "/api/v1/clusters", {"server": "https://c-bad.example.com", "name": "c-bad",
                                      "config": {"bearerToken": s.new("bad-keydata-token", False),
                                                 "tlsClientConfig": {"keyData": s.new("not-base64", False)}}})
    call("POST", "/api/v1/clusters", {"server": "https://c-bad.example.com", "name": "c-bad", "shard": "x",
                                      "config": {"password": s.new("bad-shard", False)}})
    call("POST", "/api/v1/clusters", {"server": "https://c-bad.example.com", "name": "c-bad",
                                      "refreshRequestedAt": "yesterday",
                                      "config": {"password": s.new("bad-time", False)}})
    call("POST", "/api/v1/clusters", '{"server": "https://c-bad.example.com", "config": {"password": "'
         + s.new("truncated-cluster", False) + '", "bearerToken": ')
    call("POST", "/api/v1/clusters", {"server": f"https://admin:{s.new('cluster-url-password', False)}@k8s.example.com",
                                      "name": "c-url", "config": {"bearerToken": s.new("url-token", False)}})
    call("POST", "/api/v1/clusters", {"server": "ftp://k8s.example.com", "name": "c-ftp",
                                      "config": {"password": s.new("ftp-password", False)}})
    call("POST", "/api/v1/clusters", {"server": "https://c-noname.example.com", "name": "",
                                      "config": {"password": s.new("noname-password", False)}})
    call("POST", "/api/v1/clusters", {"server": "https://c-dup.example.com", "name": "c1",
                                      "config": {"password": s.new("dup-name-password", False)}})
    # bad ids, one of them a URL with a password in it
    bad_server = f"https://u:{s.new('cluster-id-password', False)}@nope.example.com"
    for cid in (enc(bad_server), "nope?id.type=name", "x?id.type=bogus"):
        call("GET", f"/api/v1/clusters/{cid}")
    call("DELETE", f"/api/v1/clusters/{enc(bad_server)}")
    call("PUT", f"/api/v1/clusters/{enc(bad_server)}",
         {"server": bad_server, "config": {"password": s.new("put-missing", False)}})
    # wrong verbs (a body with a secret)
    call("PATCH", f"/api/v1/clusters/{c1}", {"config": {"password": s.new("patch-cluster", False)}})
    call("PUT", "/api/v1/clusters", {"config": {"password": s.new("put-clusters", False)}})
    call("DELETE", "/api/v1/clusters")

    # repositories
    call("GET", "/api/v1/repositories")
    call("GET", f"/api/v1/repositories?repo={r1}")
    call("GET", f"/api/v1/repositories?appProject={PROJECT}")
    call("GET", "/api/v1/repositories?fields=items.password,items.sshPrivateKey,items.repo")
    for rid in (r1, r2, enc(c.r3["repo"]), enc(c.r_ssh["repo"])):
        call("GET", f"/api/v1/repositories/{rid}")
        call("GET", f"/api/v1/repositories/{rid}?forceRefresh=true")
    for sub in ("refs", "oci-tags", "apps", "helmcharts"):
        call("GET", f"/api/v1/repositories/{r1}/{sub}")
    call("POST", f"/api/v1/repositories/{r1}/appdetails", {"source": {"repoURL": c.r1["repo"]}})
    call("POST", f"/api/v1/repositories/{r1}/validate",
         {"repo": c.r1["repo"], "password": s.new("validate-password", False),
          "sshPrivateKey": s.new("validate-ssh", False)})
    call("PUT", f"/api/v1/repositories/{r1}", c.r1)  # (back to) the original
    call("POST", "/api/v1/repositories", c.r1)  # identical: answered as stored
    call("POST", "/api/v1/repositories", {**c.r1, "name": f"r1-{caller}"})  # different without upsert
    call("POST", "/api/v1/repositories?upsert=true", {**c.r1, "name": f"r1-{caller}"})
    call("POST", "/api/v1/repositories", {**c.r1, "password": s.new("conflict-password", False)})
    call("PUT", f"/api/v1/repositories/{r1}", {**c.r1, "name": f"r1-put-{caller}"})
    call("PUT", f"/api/v1/repositories/{r1}", c.r1)
    call("PUT", f"/api/v1/repositories/{r2}", c.r2)
    call("PUT", f"/api/v1/repositories/{r2}", {**c.r2, "project": "other"})  # moves to another project
    call("PUT", f"/api/v1/repositories/{r2}", c.r2)  # and back
    call("POST", "/api/v1/repositories?credsOnly=true", c.t2)  # identical template
    call("POST", "/api/v1/repositories",
         {"repo": f"https://user:{s.new('repo-url-password', False)}@git.example.com/x.git",
          "password": s.new("repo-url-body-password", False)})
    call("POST", "/api/v1/repositories",
         {"repo": f"ssh://git:{s.new('repo-ssh-url-password', False)}@git.example.com/x.git"})
    call("POST", "/api/v1/repositories", {"repo": "javascript:alert(1)", "password": s.new("js-password", False)})
    call("POST", "/api/v1/repositories", {"repo": "https://git.example.com/y.git", "type": "svn",
                                          "bearerToken": s.new("svn-token", False)})
    call("POST", "/api/v1/repositories", {"repo": "https://git.example.com/y.git", "insecure": "yes",
                                          "password": s.new("wrongtype-repo", False)})
    call("POST", "/api/v1/repositories", {"repo": "https://git.example.com/y.git", "githubAppID": "x",
                                          "githubAppPrivateKey": s.new("wrongtype-gh", False)})
    call("POST", "/api/v1/repositories", '{"repo": "https://git.example.com/y.git", "password": "'
         + s.new("truncated-repo", False) + '", "username": ')
    call("POST", "/api/v1/repositories", '{"repo": "https://git.example.com/y.git", "password": "'
         + s.new("badjson-repo", False) + '" "username": "x"}')
    call("POST", "/api/v1/repositories", json.dumps([{"password": s.new("array-body", False)}]))
    bad_repo = f"https://u:{s.new('repo-id-password', False)}@nope.example.com/x.git"
    call("GET", f"/api/v1/repositories/{enc(bad_repo)}")
    call("DELETE", f"/api/v1/repositories/{enc(bad_repo)}")
    call("PUT", f"/api/v1/repositories/{enc(bad_repo)}",
         {"repo": bad_repo, "password": s.new("put-missing-repo", False)})
    call("GET", "/api/v1/repositories/nope-not-a-url")
    call("PATCH", f"/api/v1/repositories/{r1}", {"password": s.new("patch-repo", False)})
    call("PUT", "/api/v1/repositories", {"password": s.new("put-repos", False)})
    # write repositories and write credentials: not served (bodies with secrets)
    call("GET", "/api/v1/write-repositories")
    call("GET", f"/api/v1/write-repositories/{r1}")
    call("POST", "/api/v1/write-repositories", {"repo": c.r1["repo"], "password": s.new("write-repo", False)})
    call("PUT", f"/api/v1/write-repositories/{r1}", {"repo": c.r1["repo"], "password": s.new("write-repo-put", False)})
    call("DELETE", f"/api/v1/write-repositories/{r1}")
    call("POST", f"/api/v1/write-repositories/{r1}/validate", {"repo": c.r1["repo"], "password": s.new("wv", False)})
    call("GET", "/api/v1/write-repocreds")
    call("POST", "/api/v1/write-repocreds", {"url": c.t1["url"], "password": s.new("write-creds", False)})
    call("PUT", f"/api/v1/write-repocreds/{enc(c.t1['url'])}", {"url": c.t1["url"], "password": s.new("wc-put", False)})
    call("DELETE", f"/api/v1/write-repocreds/{enc(c.t1['url'])}")

    # credential templates
    call("GET", "/api/v1/repocreds")
    call("GET", f"/api/v1/repocreds?url={enc(c.t1['url'])}")
    call("PUT", f"/api/v1/repocreds/{enc(c.t1['url'])}", c.t1)  # (back to) the original
    call("POST", "/api/v1/repocreds", c.t1)  # identical: answered as stored
    call("POST", "/api/v1/repocreds", {**c.t1, "password": s.new("creds-conflict", False)})
    call("POST", "/api/v1/repocreds?upsert=true", {**c.t1, "noProxy": f"{caller}.local"})
    call("PUT", f"/api/v1/repocreds/{enc(c.t1['url'])}", {**c.t1, "noProxy": f"put-{caller}.local"})
    call("PUT", f"/api/v1/repocreds/{enc(c.t1['url'])}", c.t1)
    call("POST", "/api/v1/repocreds", {"url": f"https://u:{s.new('creds-url-password', False)}@git.example.com/",
                                       "password": s.new("creds-url-body", False)})
    call("POST", "/api/v1/repocreds", {"url": "https://git.example.com/z/", "enableOCI": "x",
                                       "password": s.new("creds-wrongtype", False)})
    call("POST", "/api/v1/repocreds", '{"url": "https://git.example.com/z/", "sshPrivateKey": "'
         + s.new("creds-truncated", False))
    bad_creds = f"https://u:{s.new('creds-id-password', False)}@nope.example.com/"
    call("PUT", f"/api/v1/repocreds/{enc(bad_creds)}",
         {"url": bad_creds, "password": s.new("creds-put-missing", False)})
    call("DELETE", f"/api/v1/repocreds/{enc(bad_creds)}")
    call("GET", f"/api/v1/repocreds/{enc(c.t1['url'])}")  # no such route
    call("POST", f"/api/v1/repocreds/{enc(c.t1['url'])}", {"password": s.new("post-creds-url", False)})

    # projects
    call("GET", "/api/v1/projects")
    for name in (PROJECT, "default", "nope"):
        for sub in ("", "/detailed", "/globalprojects", "/events", "/syncwindows", "/links"):
            call("GET", f"/api/v1/projects/{name}{sub}")
    stored_project = json.loads(env.rec.rest("admin", "GET", f"/api/v1/projects/{PROJECT}").body)
    call("PUT", f"/api/v1/projects/{PROJECT}", {"project": stored_project})
    call("POST", "/api/v1/projects", {"project": stored_project})  # identical
    call("POST", "/api/v1/projects", '{"project": {"metadata": {"name": "p-bad"}, "spec": {"description": "'
         + s.new("project-truncated", False))
    call("POST", "/api/v1/projects", {"project": {"metadata": {"name": "p-bad"},
                                                  "spec": {"sourceRepos": "x", "description": "d"}}})
    call("POST", f"/api/v1/projects/{PROJECT}/roles/{ROLE}/token", {"expiresIn": 60})
    call("POST", f"/api/v1/projects/{PROJECT}/roles/nosuch/token", {"expiresIn": 60})
    call("DELETE", f"/api/v1/projects/{PROJECT}/roles/{ROLE}/token/1?id=nosuch")
    call("DELETE", "/api/v1/projects/nope")

    # applications: every route of the table
    call("GET", "/api/v1/applications")
    call("GET", f"/api/v1/applications?projects={PROJECT}")
    for sub in ("", "/syncwindows", "/resource-tree", "/events", "/links", "/revisions/HEAD/metadata",
                "/revisions/HEAD/chartdetails", "/revisions/HEAD/ocimetadata", "/manifests", "/managed-resources",
                "/server-side-diff", "/resource", "/resource/actions", "/pods/p/logs", "/logs", "/resource/links"):
        call("GET", f"/api/v1/applications/{app}{sub}")
    call("GET", "/api/v1/applications/nope")
    for name in ("secrecy-url-source", "secrecy-url-destination", "secrecy-url-sources"):
        call("GET", f"/api/v1/applications/{name}")
    for sub in ("", "/detailed"):
        call("GET", f"/api/v1/projects/secrecy-urls{sub}")
    call("PUT", f"/api/v1/applications/{app}", c.app_body)
    call("PUT", f"/api/v1/applications/{app}", {"metadata": {"name": app}, "spec": {"source": {"repoURL": 5}}})
    call("POST", "/api/v1/applications/manifestsWithFiles", {})
    call("POST", f"/api/v1/applications/{app}/rollback", {"id": 1})
    call("POST", f"/api/v1/applications/{app}/resource", {"patch": "{}"})
    call("POST", f"/api/v1/applications/{app}/resource/actions", {"action": "restart"})
    call("POST", f"/api/v1/applications/{app}/resource/actions/v2", {"action": "restart"})
    call("DELETE", f"/api/v1/applications/{app}/resource")
    call("DELETE", f"/api/v1/applications/{app}/operation")
    call("POST", f"/api/v1/applications/{app}/sync", {"dryRun": True, "revision": "HEAD"})
    # (application fields hold no credentials: the error paths carry secrets only in URL passwords)
    app_url = f"https://u:{s.new('app-patch-url-password', False)}@git.example.com/p.git"
    call("PATCH", f"/api/v1/applications/{app}",
         {"patch": json.dumps([{"op": "replace", "path": "/spec/source/repoURL", "value": app_url}]),
          "patchType": "bogus"})
    call("PATCH", f"/api/v1/applications/{app}",
         {"patch": '{"spec": {"source": {"repoURL": "' + app_url + '", "helm": {"passCredentials": "x"}}}}',
          "patchType": "merge"})
    call("PUT", f"/api/v1/applications/{app}/spec", {"source": {"repoURL": app_url, "helm": {"values": 7}},
                                                      "destination": {"server": "not a url"}})
    call("POST", "/api/v1/applications", '{"metadata": {"name": "x"}, "spec": {"source": {"repoURL": "' + app_url)

    call("GET", f"/api/badge?name={app}&revision=true&showAppName=true")
    # a webhook payload naming a repository URL with a password (no secret configured: accepted)
    call("POST", "/api/webhook", {"ref": "refs/heads/main", "commits": [],
                                  "repository": {"html_url": app_url, "default_branch": "main"}},
         headers={"X-GitHub-Event": "push"})
    # certificates and GnuPG keys: bad bodies are refused without echoing them; an ApplicationSet
    # whose template holds a password in a repository URL is refused
    for path in ("/api/v1/certificates", "/api/v1/gpgkeys", "/api/v1/gpgkeys/ABCDEF", "/api/v1/applicationsets",
                 "/api/v1/applicationsets/a", "/api/v1/applicationsets/a/events",
                 "/api/v1/applicationsets/a/resource-tree",
                 "/api/v1/notifications/triggers", "/api/v1/notifications/services",
                 "/api/v1/notifications/templates"):
        call("GET", path)
    for path in ("/api/v1/certificates", "/api/v1/gpgkeys", "/api/v1/applicationsets/a"):
        call("DELETE", path)
    call("POST", "/api/v1/certificates", {"items": [{"serverName": "h", "certType": "https",
                                                      "certData": s.new("certificate-body", False)}]})
    call("POST", "/api/v1/gpgkeys", {"publickey": s.new("gpg-key-body", False)})
    call("POST", "/api/v1/gpgkeys", {"keyData": s.new("gpg-key-data", False)})
    call("POST", "/api/v1/applicationsets", {"metadata": {"name": "a"}, "spec": {"template": {"spec": {
        "source": {"repoURL": app_url}}}}})
    call("POST", "/api/v1/applicationsets/generate", {"applicationSet": {"metadata": {"name": "a"}}})

    # deletions last: the disposable objects (only admin may delete; ops may not)
    call("DELETE", f"/api/v1/repositories/{enc(c.r_tmp['repo'])}")
    call("DELETE", f"/api/v1/repocreds/{enc(c.t_tmp['url'])}")
    call("DELETE", f"/api/v1/clusters/{enc(c.c_tmp['server'])}")
    call("DELETE", f"/api/v1/applications/{c.app_tmp}")


def grpc_matrix(env, c, caller, channel):
    pb, rec = env.stubs, env.rec
    s = env.secrets
    clusters = pb.cluster_grpc.ClusterServiceStub(channel)
    repos = pb.repo_grpc.RepositoryServiceStub(channel)
    creds = pb.creds_grpc.RepoCredsServiceStub(channel)
    projects = pb.project_grpc.ProjectServiceStub(channel)
    g = rec.grpc
    g(caller, clusters.List, pb.cluster.ClusterQuery(), "ClusterService/List")
    g(caller, clusters.Get, pb.cluster.ClusterQuery(server=c.c1["server"]), "ClusterService/Get c1")
    g(caller, clusters.Get, pb.cluster.ClusterQuery(id=pb.cluster.ClusterID(type="name", value="c2")),
      "ClusterService/Get name=c2")
    g(caller, clusters.InvalidateCache, pb.cluster.ClusterQuery(server=c.c2["server"]),
      "ClusterService/InvalidateCache")
    g(caller, repos.ListRepositories, pb.repo.RepoQuery(), "RepositoryService/ListRepositories")
    g(caller, repos.List, pb.repo.RepoQuery(), "RepositoryService/List")
    for url in (c.r1["repo"], c.r2["repo"], c.r3["repo"]):
        g(caller, repos.Get, pb.repo.RepoQuery(repo=url), f"RepositoryService/Get {url}")
    g(caller, creds.ListRepositoryCredentials, pb.creds.RepoCredsQuery(), "RepoCredsService/ListRepositoryCredentials")
    g(caller, projects.GetDetailedProject, pb.project.ProjectQuery(name=PROJECT), "ProjectService/GetDetailedProject")
    g(caller, projects.GetDetailedProject, pb.project.ProjectQuery(name="default"), "GetDetailedProject default")
    g(caller, projects.Get, pb.project.ProjectQuery(name=PROJECT), "ProjectService/Get")
    # error paths: a URL with a password; identical create (answered as stored); a malformed message
    bad = pb.v1repo.Repository(repo=f"https://u:{s.new('grpc-url-password', False)}@git.example.com/g.git",
                               password=s.new("grpc-body-password", False))
    g(caller, repos.CreateRepository, pb.repo.RepoCreateRequest(repo=bad), "CreateRepository url with password")
    same = pb.v1repo.Repository(repo=c.r2["repo"], password=c.r2["password"], project=PROJECT)
    g(caller, repos.CreateRepository, pb.repo.RepoCreateRequest(repo=same), "CreateRepository conflict")
    cl = pb.v1cluster.Cluster(server=c.c1["server"], name="c1")
    cl.config.password = s.new("grpc-cluster-update", False)
    g(caller, clusters.Update, pb.cluster.ClusterUpdateRequest(cluster=cl, updatedFields=["bogus"]),
      "ClusterService/Update bad updatedFields")
    # Repository{repo, password: marker, insecure (a bool) sent as a length-delimited field}
    inner = (ld(1, b"https://git.example.com/m.git") + ld(3, s.new("grpc-malformed", False).encode())
             + ld(7, b"yes"))
    raw = ld(1, inner)
    malformed = channel.unary_unary("/repository.RepositoryService/CreateRepository",
                                    request_serializer=None, response_deserializer=None)
    g(caller, malformed, raw, "CreateRepository malformed protobuf")


def grpc_web_matrix(env, c, caller):
    pb, rec = env.stubs, env.rec
    rec.grpc_web(caller, "project.ProjectService/GetDetailedProject", pb.project.ProjectQuery(name=PROJECT))
    rec.grpc_web(caller, "repository.RepositoryService/ListRepositories", pb.repo.RepoQuery())
    rec.grpc_web(caller, "cluster.ClusterService/Get", pb.cluster.ClusterQuery(server=c.c1["server"]))
    rec.grpc_web(caller, "repocreds.RepoCredsService/ListRepositoryCredentials", pb.creds.RepoCredsQuery(), text=True)


def stream_matrix(env, c):
    paths = [("/api/v1/stream/applications", True), ("/api/v1/stream/applications", False),
             (f"/api/v1/stream/applications?name={c.app}", True),
             (f"/api/v1/stream/applications/{c.app}/resource-tree", True),
             ("/api/v1/stream/applicationsets", True)]
    jobs = [(caller, path, sse) for caller in CALLERS for path, sse in paths]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        list(pool.map(lambda job: env.rec.stream(*job), jobs))


# ---- the test ---------------------------------------------------------------------------------------


def config_faults(env):
    """SEC-18 for the configuration: argocd-secret edited with a new secret (accepted), then three
    broken edits that carry secrets (invalid YAML, data that is not base64, a plain password
    where a bcrypt hash belongs), each refused and logged; then the original again."""
    s, cfg, server = env.secrets, env.cfg, env.server
    original = dict(cfg.secret)
    head = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: argocd-secret\n"

    def reloads():
        return Path(server.log).read_bytes().count(b"configuration reloaded")

    def errors():
        return metric(server, "tiphys_config_reload_errors_total") or 0

    before = reloads()
    cfg.write(secret={**original, "webhook.github.secret": s.new("webhook-rotated", False)})
    wait_until(lambda: reloads() > before, 5, what="the reload of argocd-secret")
    broken = [
        head + "stringData:\n  \"server.secretkey\": \"" + s.new("yaml-unterminated", False) + "\n  a: b\n",
        head + "stringData:\n  webhook.github.secret: " + s.new("yaml-badindent", False) + "\n \tx: [\n",
        head + "data:\n  webhook.github.secret: " + s.new("data-not-base64", False) + "\n",
        head + "data:\n  webhook.github.secret: " + base64.b64encode(b"\xff" + s.new("data-not-utf8", False).encode()
                                                                  ).decode() + "\n",
        head + "stringData:\n" + "".join(f"  {json.dumps(k)}: {json.dumps(v)}\n" for k, v in
                                          {**original, "admin.password": s.new("plain-admin-password", False)}.items()),
    ]
    for text in broken:
        count = errors()
        cfg.write_raw("argocd-secret.yaml", text)
        wait_until(lambda: errors() > count, 5, what="the refusal of a broken argocd-secret")
    cfg.write(secret=original)


@pytest.fixture(scope="module")
def scan(env):
    """Injects, calls everything as everyone, stops the server, exports its store; the findings."""
    started = time.monotonic()
    s, rec, server = env.secrets, env.rec, env.server
    c = inject(env)

    # a failed login and a refused password change whose passwords are secrets
    rec.rest("anonymous", "POST", "/api/v1/session", {"username": "nobody", "password": s.new("login-password", False)})
    rec.rest("nobody", "PUT", "/api/v1/account/password",
             {"name": "nobody", "currentPassword": s.new("current-password", False),
              "newPassword": s.new("new-password", False)})

    stream_matrix(env, c)
    with grpc.insecure_channel(server.addr) as channel:
        for caller in CALLERS:
            rest_matrix(env, c, caller)
            grpc_matrix(env, c, caller, channel)
            grpc_web_matrix(env, c, caller)
    elapsed = time.monotonic() - started
    deletions = [call for call in rec.calls if call.caller == "admin" and call.request.startswith("DELETE")
                 and "tmp.example.com" in call.request]
    assert [call.status for call in deletions] == ["200"] * 3, [call.show() for call in deletions]
    for value in c.deleted:  # the store no longer holds them
        s.markers[value].stored = False

    # logout, each way, with tokens of their own; the metrics
    for method, path in (("GET", "/auth/logout"), ("POST", "/auth/logout"), ("DELETE", "/api/v1/session")):
        rec.tokens["throwaway"] = ok(rec.rest("anonymous", "POST", "/api/v1/session",
                                              {"username": "ops", "password": BOB_PW}))["token"]
        rec.rest("throwaway", method, path)
    # single sign-on is not configured here: fixed answers (test_sso.py covers the configured case)
    for path in ("/auth/login?return_url=/applications", "/auth/callback?state=s&code=c"):
        rec.rest("anonymous", "GET", path)
    rec.add(Call("anonymous", "metrics", "GET /metrics", b"", "200", [], metrics_text(server).encode()))
    config_faults(env)

    # the log is read once the server has stopped (everything it wrote is in the file)
    env.servers.stop_all()
    log = Path(server.log).read_bytes()
    # argocd-secret's server.secretkey sealed the stored credentials: the export needs it.
    export = cli("admin", "export", "--data-dir", str(server.data_dir), "--include-secrets",
                 "--config-dir", str(env.cfg.path))

    dump = Path(server.data_dir).parent / "secrecy-calls.jsonl"
    with open(dump, "w") as out:
        for call in rec.calls:
            out.write(json.dumps({"caller": call.caller, "transport": call.transport, "request": call.request,
                                  "request_body": call.request_body.decode(errors="replace"), "status": call.status,
                                  "headers": call.headers, "body": call.body.decode(errors="replace")}) + "\n")
    store = (Path(server.data_dir) / "tiphys.redb").read_bytes()
    return SimpleNamespace(c=c, calls=rec.calls, elapsed=elapsed, log=log, export=export, dump=dump, store=store,
                           leaks=[(call, hits) for call in rec.calls if (hits := s.scan(call.blob()))],
                           log_hits=s.scan(log))


def leak_report(s, leaks, log_hits=(), log=b""):
    """Per leaked secret: how many answers, who and how, and the first answer around the secret."""
    by_marker = defaultdict(list)
    for call, hits in leaks:
        for value, form in hits:
            by_marker[value].append((call, form))
    out = []
    for value, found in by_marker.items():
        call, form = found[0]
        blob = call.blob()
        at = max(blob.lower().find(value.lower().encode()), 0)
        who = sorted({f"{c.caller}/{c.transport}" for c, _ in found})
        out.append(f"{s.markers[value].what} ({form}) in {len(found)} answers [{', '.join(who)}]; first:\n"
                   f"  {call.caller} {call.transport}: {call.request} -> {call.status}\n"
                   f"  request body: {call.request_body[:600]!r}\n"
                   f"  answer near the secret: ...{blob[max(at - 300, 0):at + 200]!r}...")
    text = log.decode(errors="replace")
    for value, form in log_hits:
        line = next((ln for ln in text.splitlines() if value in ln), "(encoded)")
        out.append(f"log: {s.markers[value].what} ({form}): {line[:1500]}")
    return "\n\n".join(out)


def test_the_scanner_finds_every_encoding():
    """The scanner itself: a secret is found as is (any case), in base64 at any alignment and in
    either alphabet, in hex and as a Rust byte list; other secrets are not."""
    s = Secrets()
    value = s.new("self-test")
    other = s.new("other")
    raw = value.encode()
    cases = {"raw": raw, "upper": raw.upper(), "hex": raw.hex().encode(),
             "bytes-debug": str(list(raw)).encode()}
    for prefix in (b"", b"x", b"xy", b'{"config":"'):
        doc = prefix + raw + b'"}'
        cases[f"base64 after {len(prefix)}"] = base64.b64encode(doc)
        cases[f"base64url after {len(prefix)}"] = base64.urlsafe_b64encode(b"\xfb\xff" + doc)
    for name, blob in cases.items():
        hits = {v for v, _ in s.scan(b"<<" + blob + b">>")}
        assert hits == {value}, (name, blob, hits)
    assert s.scan(value[:-1].encode() + b"_") == []


def rest_routes():
    """(method, path template) of every REST route: the method table (src/rpc/table/, one file per
    service) and the fixed routes of src/api/mod.rs and src/api/swagger.rs."""
    src = REPO / "src"
    routes = set()
    for path in sorted((src / "rpc" / "table").glob("*.rs")):
        text = path.read_text()
        routes |= {(m.upper(), p) for m, p in re.findall(r'\b(get|post|put|delete|patch)\(\s*"(/api/[^"]+)"', text)}
    text = (src / "api" / "mod.rs").read_text() + (src / "api" / "swagger.rs").read_text()
    for chunk in text.split(".route(")[1:]:
        path = re.match(r'\s*"([^"]+)"', chunk).group(1)
        routes |= {(m.upper(), path) for m in re.findall(r"\b(get|post|put|delete|patch)\(", chunk)}
    assert len(routes) > 80, sorted(routes)
    return routes


def test_every_rest_route_was_called(scan):
    """The enumeration is complete: each REST route of the source was called at least once."""
    called = set()
    for call in scan.calls:
        if call.transport in ("rest", "stream"):
            method, target = call.request.split(" ")[:2]
            called.add((method, target.split("?")[0]))
    missing = []
    for method, template in sorted(rest_routes()):
        pattern = re.sub(r"\\\{[^}=]+=\\\*\\\*\\\}", ".*", re.escape(template))
        pattern = re.sub(r"\\\{\\\*[^}]+\\\}", ".+", pattern)
        pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", pattern)
        if not any(m == method and re.fullmatch(pattern, p) for m, p in called):
            missing.append(f"{method} {template}")
    assert not missing, f"routes never called: {missing}"


def test_the_scan_sees_what_the_api_does_return(env, scan, capsys):
    """The positive control over the live answers: canaries stored in fields the API shows are
    found on every transport (so bodies, gRPC messages and streams are really recorded and
    scanned); the server's log has debug and audit lines. Prints the table of calls."""
    s = env.secrets
    canary_hits = defaultdict(set)
    for call in scan.calls:
        for value, _ in s.scan(call.blob(), values=s.canaries):
            canary_hits[s.canaries[value]].add(call.transport)
    assert {"rest", "grpc", "grpc-web"} <= canary_hits["cluster-label"], dict(canary_hits)
    assert {"rest", "grpc", "grpc-web"} <= canary_hits["repo-username"], dict(canary_hits)
    assert "rest" in canary_hits["creds-username"] and "stream" in canary_hits["app-label"], dict(canary_hits)
    assert b" DEBUG " in scan.log and b"permission denied" in scan.log, "the log has no debug or audit lines"

    table = Counter((call.caller, call.transport) for call in scan.calls)
    statuses = defaultdict(Counter)
    for call in scan.calls:
        statuses[call.caller][call.status if not call.status.isdigit() else call.status[0] + "xx"] += 1
    transports = ["rest", "stream", "grpc", "grpc-web", "metrics"]
    lines = [f"{'caller':<10} " + " ".join(f"{t:>8}" for t in transports) + f" {'total':>6}  statuses"]
    for caller in CALLERS:
        counts = [table[(caller, t)] for t in transports]
        lines.append(f"{caller:<10} " + " ".join(f"{n:>8}" for n in counts) + f" {sum(counts):>6}  "
                     + ", ".join(f"{k}:{v}" for k, v in sorted(statuses[caller].items())))
    stored = sum(m.stored for m in s.markers.values())
    lines.append(f"{len(scan.calls)} calls in {scan.elapsed:.1f} s; {len(s.markers)} secrets ({stored} stored), "
                 f"{len(scan.log)} log bytes scanned; every call in {scan.dump}")
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def test_the_store_holds_every_secret_and_the_scan_finds_them(env, scan):
    """The negative control: `tiphys admin export --data-dir --include-secrets` of the stopped
    server's store does contain each stored secret, and the same scanner finds every one of them
    (the TLS key, stored as base64, only through a base64 form). So a clean scan means that the
    secrets were there to leak, not that the injection was refused or the scanner blind."""
    s = env.secrets
    assert scan.export.returncode == 0, scan.export.stderr
    found = dict(s.scan(scan.export.stdout))
    stored = {m.value for m in s.markers.values() if m.stored}
    missing = sorted(s.markers[v].what for v in stored - found.keys())
    assert not missing, f"the export lacks stored secrets (was the injection refused?): {missing}"
    assert len(stored) >= 50, len(stored)
    key_forms = {form for value, form in s.scan(scan.export.stdout) if s.markers[value].what == "c1-keyData"}
    assert key_forms and "raw" not in key_forms, key_forms
    # and what must never be stored is not: the last-applied annotation, the refused writes
    never = {m.value for m in s.markers.values() if m.what.endswith("-lastApplied") or "url-password" in m.what}
    assert not never & found.keys(), sorted(s.markers[v].what for v in never & found.keys())


def test_no_credential_in_the_store_file(env, scan):
    """Credentials at rest are sealed: the store file itself (what a backup or whoever reads
    the disk gets) holds none of them, in any encoding, while the export above, which opens
    them with the key, holds them all."""
    s = env.secrets
    assert len(scan.store) > 0
    # The stored ones: what clusters, repositories and templates keep (an account's bcrypt
    # hash is stored as it is, by design: it is what a login is checked against).
    stored = [v for v, m in s.markers.items() if m.stored and m.category == "credential"]
    assert len(stored) >= 50, len(stored)
    hits = {s.markers[v].what for v, _ in s.scan(scan.store, stored)}
    assert not hits, f"credentials readable in the store file: {sorted(hits)}"


def test_no_credential_in_any_answer(env, scan):
    """SEC-16/17/18: no answer, to any caller, on any transport, carries a credential."""
    s = env.secrets
    leaks = [(call, [h for h in hits if s.markers[h[0]].category == "credential"]) for call, hits in scan.leaks]
    leaks = [(call, hits) for call, hits in leaks if hits]
    assert not leaks, f"{len(leaks)} answers leak credentials:\n" + leak_report(s, leaks)


def test_no_secret_in_the_log(env, scan):
    """SEC-18: the debug log of the whole run holds no secret, in any encoding."""
    assert not scan.log_hits, leak_report(env.secrets, [], scan.log_hits, scan.log)


def test_passwords_in_application_and_project_urls_are_not_shown(env, scan):
    """URLs with a password in an Application's source or destination, or in a project's
    source repositories and destinations: a repository's or a cluster's are refused for this
    reason (the URL is shown to everyone who may read the object). Either refuse these too or
    never show the password."""
    s = env.secrets
    assert scan.c.url_probes, "no probe was sent"
    leaks = [(call, [h for h in hits if s.markers[h[0]].category == "url-in-spec"]) for call, hits in scan.leaks]
    leaks = [(call, hits) for call, hits in leaks if hits]
    assert not leaks, f"{len(leaks)} answers show passwords of URLs in specs:\n" + leak_report(s, leaks)
