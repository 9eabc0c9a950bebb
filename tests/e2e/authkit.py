"""Shared helpers of the auth end-to-end tests (test_auth_*.py): config dirs in Argo CD's form
(the `config_dir` fixture of conftest.py makes them), a small HTTP client that binds its source
address (127.1.x.y addresses act as different clients), JWT forging, gRPC-Web framing and
generated gRPC stubs.

Known bcrypt hashes have cost 4 so that logins with them are quick even in a debug build; the
generated admin password (cost 10) is used where the real cost matters (timing).
"""

import base64
import hashlib
import hmac
import http.client
import importlib
import itertools
import json
import os
import re
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, TIPHYS_BIN, clean_env

# ---- known accounts -------------------------------------------------------------------------

SECRET_KEY = "e2e-server-secret-key-0123456789"
ADMIN_PW = "admin-password-1"
ALICE_PW = "alice-password-1"
BOB_PW = "bob-password-1"
CAROL_PW = "carol-password-1"
HASHES = {  # bcrypt, cost 4
    ADMIN_PW: "$2b$04$S31sOwtd/zWFJpZR96E1oeduGnckW.SNxgq9BHBVjHkd8EJB2gU.W",
    ALICE_PW: "$2b$04$cXhQuEuweeVAp6XBl2Zq3emvHkP.Uxfktr7PoVfSovpVJpFEQksYm",
    BOB_PW: "$2b$04$VrvCZvUH5EV1J8H5B/FnuOI4NltzqdWldlZdgkR.W0YhPZqQ1C.pS",
    CAROL_PW: "$2b$04$F0a4Zhej5IKzMeO/FaQNluFwFsx6rBA5buBYcSYuJC/FbCAXTngy.",
}
JWT_RE = re.compile(r"eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


def standard_config(cm=None, secret=None, admin_hash=True, secret_key=True):
    """(argocd-cm data, argocd-secret stringData): admin with a known password, alice
    (login, apiKey) and bob (login only) with known passwords, a known server key. Without
    admin_hash the server generates the admin password; without secret_key, its own key."""
    cm_data = {"accounts.alice": "login, apiKey", "accounts.bob": "login"}
    secret_data = {
        "accounts.alice.password": HASHES[ALICE_PW],
        "accounts.bob.password": HASHES[BOB_PW],
    }
    if secret_key:
        secret_data["server.secretkey"] = SECRET_KEY
    if admin_hash:
        secret_data["admin.password"] = HASHES[ADMIN_PW]
    cm_data.update(cm or {})
    secret_data.update(secret or {})
    return cm_data, secret_data


# ---- config dir -----------------------------------------------------------------------------

def manifest(kind, name, data, section="data"):
    """A ConfigMap/Secret manifest; JSON strings are valid YAML double-quoted scalars."""
    lines = ["apiVersion: v1", f"kind: {kind}", "metadata:", f"  name: {name}", f"{section}:"]
    lines += [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in data.items()]
    if not data:
        lines[-1] += " {}"
    return "\n".join(lines) + "\n"


class ConfigDir:
    """A --config-dir with argocd-cm.yaml and argocd-secret.yaml, rewritten atomically."""

    def __init__(self, path, cm=None, secret=None):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.cm, self.secret = dict(cm or {}), dict(secret or {})
        self.write()

    def write(self, cm=None, secret=None):
        if cm is not None:
            self.cm = dict(cm)
        if secret is not None:
            self.secret = dict(secret)
        self.write_raw("argocd-cm.yaml", manifest("ConfigMap", "argocd-cm", self.cm))
        self.write_raw("argocd-secret.yaml", manifest("Secret", "argocd-secret", self.secret, "stringData"))

    def update_cm(self, changes):
        """Sets keys of argocd-cm (a None value deletes the key)."""
        cm = dict(self.cm)
        for key, value in changes.items():
            if value is None:
                cm.pop(key, None)
            else:
                cm[key] = value
        self.write(cm=cm)

    def write_raw(self, name, text):
        tmp = self.path / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, self.path / name)

    @property
    def cm_file(self):
        return self.path / "argocd-cm.yaml"


def config_factory(parent):
    """make(cm=None, secret=None, standard=True, **kw) -> a ConfigDir in a new directory under
    `parent`; with `standard`, cm/secret are added to standard_config(**kw)."""
    def make(cm=None, secret=None, standard=True, **kw):
        if standard:
            cm, secret = standard_config(cm, secret, **kw)
        return ConfigDir(tempfile.mkdtemp(prefix="config-", dir=parent), cm, secret)

    return make


# ---- servers --------------------------------------------------------------------------------

_sources = itertools.count()


def fresh_source():
    """A loopback address no other test of this run has used (127.1.0.1, 127.1.0.2, ...): a new
    client as far as the login throttle is concerned."""
    n = next(_sources)
    return f"127.{1 + n // 62500}.{n // 250 % 250}.{n % 250 + 1}"


def run_server_expecting_exit(tmp_path, *args, timeout=20):
    """Runs `tiphys server` that must refuse to start; returns the CompletedProcess (stderr apart)."""
    data_dir = Path(tempfile.mkdtemp(prefix="tiphys-", dir=tmp_path))
    cmd = [TIPHYS_BIN, "server", "--insecure", "--address", "127.0.0.1", "--port", "0",
           "--metrics-address", "127.0.0.1", "--metrics-port", "0", "--data-dir", str(data_dir), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env=clean_env(NO_COLOR="1"))


# ---- HTTP -----------------------------------------------------------------------------------

@dataclass
class Cookie:
    name: str
    value: str
    attrs: dict  # lower-case attribute name -> value (True for flags)


def parse_set_cookie(header):
    parts = [p.strip() for p in header.split(";")]
    name, _, value = parts[0].partition("=")
    attrs = {}
    for part in parts[1:]:
        k, eq, v = part.partition("=")
        attrs[k.strip().lower()] = v.strip() if eq else True
    return Cookie(name.strip(), value.strip(), attrs)


@dataclass
class Reply:
    status: int
    headers: list  # (lower-case name, value), in order
    body: bytes

    def header(self, name):
        values = self.all(name)
        return values[-1] if values else None

    def all(self, name):
        return [v for k, v in self.headers if k == name.lower()]

    def json(self):
        return json.loads(self.body)

    @property
    def cookies(self):
        return [parse_set_cookie(v) for v in self.all("set-cookie")]

    def cookie(self, name):
        found = [c for c in self.cookies if c.name == name]
        assert len(found) <= 1, f"{name} set {len(found)} times: {self.all('set-cookie')}"
        return found[0] if found else None

    def __repr__(self):
        return f"Reply({self.status}, {self.headers}, {self.body[:500]!r})"


_UNSET = object()


def client_context(server):
    return ssl.create_default_context(cafile=str(server.ca))


def connection(server, source="127.0.0.1", timeout=10, plain=False):
    """An http.client connection to `server` from `source` (any 127.x address); TLS when the
    server is in TLS mode, unless `plain`."""
    src = (source, 0) if source else None
    if server.tls and not plain:
        return http.client.HTTPSConnection(server.address, server.port, timeout=timeout, source_address=src,
                                           context=client_context(server))
    return http.client.HTTPConnection(server.address, server.port, timeout=timeout, source_address=src)


def send(conn, method, path, body=None, headers=None, content_type=_UNSET):
    """One request on an open connection. A dict/list body is JSON with content type
    application/json unless `content_type` says otherwise (None: no Content-Type at all)."""
    headers = dict(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        if content_type is _UNSET:
            content_type = "application/json"
    elif isinstance(body, str):
        body = body.encode()
    if content_type not in (_UNSET, None):
        headers["Content-Type"] = content_type
    if body is not None:
        headers.setdefault("Content-Length", str(len(body)))
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    return Reply(resp.status, [(k.lower(), v) for k, v in resp.getheaders()], data)


def request(server, method, path, body=None, headers=None, source="127.0.0.1", timeout=10,
            content_type=_UNSET, plain=False):
    conn = connection(server, source, timeout, plain)
    try:
        return send(conn, method, path, body, headers, content_type)
    finally:
        conn.close()


def login(server, username, password, source="127.0.0.1", **kw):
    return request(server, "POST", "/api/v1/session", {"username": username, "password": password},
                   source=source, **kw)


def login_token(server, username, password, source="127.0.0.1"):
    r = login(server, username, password, source)
    assert r.status == 200, r
    token = r.json()["token"]
    assert JWT_RE.fullmatch(token), token
    return token


def bearer(token):
    return {"Authorization": f"Bearer {token}"}


def cookie_header(token):
    return {"Cookie": f"argocd.token={token}"}


def get_accounts(server, headers=None, source="127.0.0.1"):
    return request(server, "GET", "/api/v1/account", headers=headers, source=source)


def userinfo(server, headers=None):
    r = request(server, "GET", "/api/v1/session/userinfo", headers=headers)
    assert r.status == 200, r
    return r.json()


def assert_api_error(reply, status, code, message_re=None):
    """An error in the API's shape: {"error","code","message"} with the gRPC code."""
    assert reply.status == status, reply
    err = reply.json()
    assert {"error", "code", "message"} <= err.keys(), err
    assert err["code"] == code, err
    if message_re is not None:
        assert re.search(message_re, err["message"], re.I), err
    return err


def initial_admin_password(server):
    return (server.data_dir / "initial-admin-password").read_text().strip()


def metrics_text(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.metrics_port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        assert resp.status == 200
        return resp.read().decode()
    finally:
        conn.close()


def metric(server, name):
    """The value of the unlabelled (or first) sample of `name`, or None."""
    for line in metrics_text(server).splitlines():
        if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def wait_until(predicate, timeout, interval=0.05, what="condition"):
    """Polls `predicate` until it returns a truthy value (returned) or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"{what} not reached within {timeout} s (last: {value!r})")
        time.sleep(interval)


# ---- JWT ------------------------------------------------------------------------------------

def b64url(data):
    if isinstance(data, str):
        data = data.encode()
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def jwt_parts(token):
    h, p, _ = token.split(".")
    return json.loads(b64url_decode(h)), json.loads(b64url_decode(p))


def jwt_claims(token):
    return jwt_parts(token)[1]


def forge(claims, key=SECRET_KEY, alg="HS256", header=None):
    """A JWT over `claims`, signed with HMAC (HS256/HS384/HS512) or unsigned (alg none)."""
    head = {"alg": alg, "typ": "JWT", **(header or {})}
    signing_input = f"{b64url(json.dumps(head))}.{b64url(json.dumps(claims))}"
    digest = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}.get(alg)
    signature = b64url(hmac.new(key.encode(), signing_input.encode(), digest).digest()) if digest else ""
    return f"{signing_input}.{signature}"


def login_claims(name="admin", **overrides):
    """Claims of a valid login token issued now (iat_ms makes it newer than any password set
    before this call)."""
    now = time.time()
    claims = {"iss": "argocd", "sub": f"{name}:login", "jti": str(uuid.uuid4()), "iat": int(now),
              "nbf": int(now), "exp": int(now) + 3600, "iat_ms": int(now * 1000)}
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}


# ---- gRPC-Web and generated stubs -------------------------------------------------------------

def grpc_web_frame(message):
    return b"\x00" + struct.pack(">I", len(message)) + message


def grpc_web_unframe(body):
    """(messages, trailers) of a binary gRPC-Web response body."""
    messages, trailers, i = [], {}, 0
    while i + 5 <= len(body):
        flag, n = body[i], struct.unpack(">I", body[i + 1:i + 5])[0]
        chunk = body[i + 5:i + 5 + n]
        i += 5 + n
        if flag & 0x80:
            for line in chunk.decode().split("\r\n"):
                if ":" in line:
                    k, v = line.split(":", 1)
                    trailers[k.strip().lower()] = v.strip()
        else:
            messages.append(chunk)
    assert i == len(body), f"trailing bytes in gRPC-Web body: {body!r}"
    return messages, trailers


def grpc_web_text_decode(body):
    """The bytes of a gRPC-Web text body: base64 pieces, each frame possibly padded on its own."""
    return b"".join(base64.b64decode(piece) for piece in re.findall(rb"[A-Za-z0-9+/]+={0,2}", body))


def generate_stubs(out_dir):
    """Generates Python stubs for proto/session and proto/account with grpcio-tools into
    `out_dir`; returns (session_pb2, session_pb2_grpc, account_pb2, account_pb2_grpc)."""
    from grpc_tools import protoc  # noqa: PLC0415 (only the gRPC tests need it)

    out_dir = Path(out_dir)
    args = ["grpc_tools.protoc", f"-I{REPO / 'proto' / 'session'}", f"-I{REPO / 'proto' / 'account'}",
            f"--python_out={out_dir}", f"--grpc_python_out={out_dir}", "session.proto", "account.proto"]
    rc = protoc.main(args)
    assert rc == 0, f"protoc failed ({rc}): {args}"
    sys.path.insert(0, str(out_dir))
    try:
        return tuple(importlib.import_module(m) for m in
                     ("session_pb2", "session_pb2_grpc", "account_pb2", "account_pb2_grpc"))
    finally:
        sys.path.remove(str(out_dir))
