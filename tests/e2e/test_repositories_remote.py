"""Repositories tiphys contacts itself (issue 23), against the real Git and Helm servers of
gitkit.py (nginx with git http-backend over https, https with client certificates and plain http,
git daemon, sshd, Helm repositories, a staller): access checks when a repository is added or
validated, the connection state (`forceRefresh`, the background re-check), ListRefs, ListApps,
GetAppDetails, GetHelmCharts, and the application calls RevisionMetadata, RevisionChartDetails
and GetManifests (directory apps), with the server's deadline, size limit, refs cache, RBAC and
the rule that no credential ever comes back (answers and the server's log).

The server trusts a repository host only through the certificate API: each server here gets the
private CA of gitkit's nginx (for the host 127.0.0.1) and sshd's host key
(`[127.0.0.1]:<port>`) through `POST /api/v1/certificates`, except in the tests about trust,
which start a server of their own without them. Expected answers come from gitkit's own record of
its repositories (SHAs, authors, dates, files, charts) and follow upstream Argo CD's repo server
(ListApps lists Helm and Kustomize apps only, as upstream's discovery does; chart maintainers read
`name <email>`; revision metadata carries the author date and the trimmed message; ValidateAccess
over REST takes the URL as its body and the rest as query parameters, `body: "repo"` in upstream's
proto). Servers start with `--repo-access on` (the harness turns repository access off elsewhere).
"""

import base64
import concurrent.futures
import json
import re
import shutil
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest

from appkit import APPS, IN_CLUSTER, uniq, write_rbac
from authkit import ADMIN_PW, ALICE_PW, BOB_PW, CAROL_PW, HASHES, bearer, login_token, request, wait_until
from conftest import cli
from gitkit import APPS_FILES, CHARTS, git, many_refs_repo, ssh_key
from test_secrecy import Secrets

REPOS = "/api/v1/repositories"
CREDS = "/api/v1/repocreds"
CERTS = "/api/v1/certificates"
CALL_TIMEOUT = 60  # seconds for one call to the server (a first fetch in a debug build included)
PROMPT = 2.5  # seconds an unrelated call may take while a repository hangs
GIT_KINDS = ("open", "basic", "bearer", "mtls", "http", "http-basic", "git", "ssh")
MAIN_APPS = {("helm-app", "Helm"), ("kustomize-app", "Kustomize")}
NOT_ACCESSIBLE = "repository not accessible"

# alice may read repositories only; bob may also create applications in the default project;
# carol may do nothing at all.
POLICY = [
    "p, alice, repositories, get, *, allow",
    "p, bob, repositories, get, *, allow",
    "p, bob, applications, create, default/*, allow",
]


# ---- helpers ------------------------------------------------------------------------------------


def enc(url):
    return quote(url, safe="")


def b64(text):
    return base64.b64encode(text.encode()).decode()


class Env:
    """One tiphys server, tokens of admin/alice/bob/carol, and the git servers; every call is
    recorded (for the secrecy scan)."""

    def __init__(self, server, cfg, gs):
        self.server, self.cfg, self.gs = server, cfg, gs
        self.tokens = {name: login_token(server, name, pw) for name, pw in
                       (("admin", ADMIN_PW), ("alice", ALICE_PW), ("bob", BOB_PW), ("carol", CAROL_PW))}
        self.replies = []

    def call(self, method, path, body=None, who="admin", timeout=CALL_TIMEOUT, **query):
        q = urlencode(query)
        token = self.tokens.get(who) if who else None
        extra = {"content_type": "application/json"} if isinstance(body, str) else {}
        r = request(self.server, method, path + (f"?{q}" if q else ""), body,
                    headers=bearer(token) if token else None, timeout=timeout, **extra)
        self.replies.append((f"{method} {path}", r))
        return r

    # -- trust, through the certificate API

    def trust_ca(self, pem=None, upsert=False):
        item = {"serverName": "127.0.0.1", "certType": "https", "certData": b64(pem or self.gs.ca_pem)}
        r = self.call("POST", CERTS, {"items": [item]}, **({"upsert": "true"} if upsert else {}))
        assert r.status == 200, r

    def distrust_ca(self):
        r = self.call("DELETE", CERTS, certType="https", hostNamePattern="127.0.0.1")
        assert r.status == 200, r
        assert len(r.json().get("items") or []) >= 1, r

    def trust_ssh(self, line=None, upsert=False):
        host, kind, blob = (line or self.gs.ssh_known_hosts).split()
        item = {"serverName": host, "certType": "ssh", "certSubType": kind, "certData": b64(blob)}
        r = self.call("POST", CERTS, {"items": [item]}, **({"upsert": "true"} if upsert else {}))
        assert r.status == 200, r

    # -- repositories

    def add(self, body, who="admin", upsert=True):
        return self.call("POST", REPOS, body, who=who, **({"upsert": "true"} if upsert else {}))

    def must_add(self, body, **kw):
        r = self.add(body, **kw)
        assert r.status == 200, (body["repo"], r)
        return r.json()

    def validate(self, body, who="admin"):
        """ValidateAccess over REST as upstream maps it (`body: "repo"`): the URL is the body (a
        JSON string), every other field of the RepoAccessQuery a query parameter (as the UI sends
        them)."""
        query = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in body.items() if k != "repo"}
        return self.call("POST", f"{REPOS}/{enc(body['repo'])}/validate", json.dumps(body["repo"]), who=who, **query)

    def get(self, url, who="admin", **query):
        return self.call("GET", f"{REPOS}/{enc(url)}", who=who, **query)

    def refs(self, url, who="admin"):
        return self.call("GET", f"{REPOS}/{enc(url)}/refs", who=who)

    def apps(self, url, revision="main", who="admin", app="x", project="default"):
        return self.call("GET", f"{REPOS}/{enc(url)}/apps", who=who, revision=revision, appName=app,
                         appProject=project)

    def details(self, url, path, revision="main", who="admin", **source):
        body = {"source": {"repoURL": url, "path": path, "targetRevision": revision, **source},
                "appName": "x", "appProject": "default"}
        return self.call("POST", f"{REPOS}/{enc(url)}/appdetails", body, who=who)


def repo_body(gs, kind, repo="apps.git", **extra):
    """A Repository for `repo` on the server `kind`, with the credentials that server wants."""
    body = {"repo": gs.url(kind, repo)}
    if kind in ("basic", "http-basic"):
        body.update(username=gs.basic_user, password=gs.basic_password)
    elif kind == "bearer":
        body["bearerToken"] = gs.bearer_token
    elif kind == "mtls":
        body.update(tlsClientCertData=gs.client_cert_pem, tlsClientCertKey=gs.client_key_pem)
    elif kind == "ssh":
        body["sshPrivateKey"] = gs.ssh_private_key
    body.update(extra)
    return {k: v for k, v in body.items() if v is not None}


def helm_body(gs, url, name, **extra):
    body = {"repo": url, "type": "helm", "name": name}
    if url in (gs.helm_auth_url, gs.helm_http_auth_url):
        body.update(username=gs.basic_user, password=gs.basic_password)
    elif url == gs.helm_mtls_url:
        body.update(tlsClientCertData=gs.client_cert_pem, tlsClientCertKey=gs.client_key_pem)
    body.update(extra)
    return body


def port_of(gs, kind):
    return {"open": gs.https_port, "basic": gs.https_port, "bearer": gs.https_port, "mtls": gs.mtls_port,
            "http": gs.http_port, "http-basic": gs.http_port, "git": gs.daemon_port, "ssh": gs.ssh_port}[kind]


def host_re(port):
    """The host as a message names it: 127.0.0.1:PORT (brackets allowed)."""
    return rf"\[?127\.0\.0\.1\]?:{port}\b"


def message(r):
    try:
        return r.json().get("message", "")
    except ValueError:
        return r.body.decode(errors="replace")


def refused(r, *patterns, status=400):
    """A refused access check: `status`, upstream's error shape, the fixed prefix and `patterns`."""
    assert r.status == status, r
    msg = message(r)
    assert NOT_ACCESSIBLE in msg, r
    for pattern in patterns:
        assert re.search(pattern, msg, re.I), (pattern, msg)
    return msg


def failed(r, *patterns, statuses=(400, 404, 412, 500)):
    """An error answer whose message matches every pattern."""
    assert r.status in statuses, r
    msg = message(r)
    for pattern in patterns:
        assert re.search(pattern, msg, re.I), (pattern, msg)
    return msg


def ok(r):
    assert r.status == 200, r
    return r.json()


def expected_refs(gs):
    return {"branches": ["dev", "main"], "tags": ["v1.0.0", "v1.1.0"]}


def refs_of(answer):
    return {"branches": answer.get("branches") or [], "tags": answer.get("tags") or []}


def app_set(answer):
    return {(i["path"], i["type"]) for i in answer.get("items") or []}


def parse_time(text):
    return time.mktime(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S"))


def state_of(env, url, **query):
    got = ok(env.get(url, **query))
    return got["connectionState"]


def successful(state):
    assert state["status"] == "Successful", state
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", state.get("attemptedAt", "")), state
    return state


def clone(gs, name=None):
    """A fresh bare copy of apps.git under the served root (every server serves it at once): a
    repository no cache has seen. Returns its name (a path under the root)."""
    name = name or f"copy-{uuid.uuid4().hex[:10]}.git"
    git("clone", "-q", "--bare", str(gs.apps.path), str(gs.root / name))
    for key, value in (("uploadpack.allowReachableSHA1InWant", "true"), ("uploadpack.allowFilter", "true")):
        git("config", key, value, cwd=gs.root / name)
    return name


def make_env(factory, cfg_factory, gs, *flags, trust=True):
    cfg = cfg_factory(cm={"accounts.carol": "login"}, secret={"accounts.carol.password": HASHES[CAROL_PW]})
    write_rbac(cfg, POLICY)
    server = factory.start("--insecure", "--repo-access", "on", *flags, config=cfg)
    env = Env(server, cfg, gs)
    if trust:
        env.trust_ca()
        env.trust_ssh()
    return env


@pytest.fixture(scope="module")
def env(module_servers, module_config, gitservers):
    """A server trusting the CA and the SSH host key; shared by the tests that leave trust alone."""
    return make_env(module_servers, module_config, gitservers)


@pytest.fixture
def fresh(servers, config_dir, gitservers):
    """Factory: a server of the test's own: fresh(*flags, trust=True) -> Env."""
    return lambda *flags, trust=True: make_env(servers, config_dir, gitservers, *flags, trust=trust)


# ---- adding and validating ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", GIT_KINDS)
def test_each_transport_is_checked_added_and_read(env, kind):
    gs = env.gs
    body = repo_body(gs, kind)
    assert ok(env.validate(body)) == {}
    r = env.add(body)
    assert r.status == 200, r
    assert r.json()["repo"] == body["repo"]
    got = ok(env.get(body["repo"]))
    successful(got["connectionState"])
    assert got["type"] == "git", got
    assert abs(parse_time(got["connectionState"]["attemptedAt"]) - time.mktime(time.gmtime())) < 300, got
    assert refs_of(ok(env.refs(body["repo"]))) == expected_refs(gs)
    listed = {i["repo"]: i for i in ok(env.call("GET", REPOS))["items"]}
    successful(listed[body["repo"]]["connectionState"])


@pytest.mark.parametrize("case", ["basic-wrong-password", "basic-no-credentials", "bearer-wrong-token",
                                  "bearer-no-token", "ssh-unknown-key", "ssh-garbage-key", "mtls-no-client-cert",
                                  "mtls-garbage-client-cert", "open-no-such-repository"])
def test_wrong_credentials_are_refused_with_a_fixed_message(env, case, tmp_path):
    gs = env.gs
    kind = case.split("-", 1)[0]
    wrong = f"wrong-{uuid.uuid4().hex}"
    # a repository of its own (no stored entry with this URL exists), or one that does not exist
    repo = f"nope-{wrong}.git" if case == "open-no-such-repository" else clone(gs)
    body, patterns = {
        "basic-wrong-password": (repo_body(gs, "basic", repo, password=wrong), ["authentication", host_re(gs.https_port)]),
        "basic-no-credentials": (repo_body(gs, "basic", repo, username=None, password=None),
                                 ["authentication", host_re(gs.https_port)]),
        "bearer-wrong-token": (repo_body(gs, "bearer", repo, bearerToken=wrong),
                               ["authentication", host_re(gs.https_port)]),
        "bearer-no-token": (repo_body(gs, "bearer", repo, bearerToken=None), ["authentication", host_re(gs.https_port)]),
        "ssh-unknown-key": (repo_body(gs, "ssh", repo, sshPrivateKey=ssh_key(tmp_path, "stranger")[0].read_text()),
                            ["authentication", host_re(gs.ssh_port)]),
        "ssh-garbage-key": (repo_body(gs, "ssh", repo, sshPrivateKey=f"-----BEGIN OPENSSH PRIVATE KEY-----\n{wrong}\n"
                                      "-----END OPENSSH PRIVATE KEY-----\n"), ["private key|authentication"]),
        # nginx answers 400 when no client certificate was sent (the handshake itself succeeds)
        "mtls-no-client-cert": (repo_body(gs, "mtls", repo, tlsClientCertData=None, tlsClientCertKey=None),
                                [host_re(gs.mtls_port)]),
        "mtls-garbage-client-cert": (repo_body(gs, "mtls", repo, tlsClientCertKey=wrong), ["client certificate"]),
        "open-no-such-repository": (repo_body(gs, "open", repo), [host_re(gs.https_port)]),
    }[case]
    secrets = [v for k, v in body.items() if k in ("password", "bearerToken", "sshPrivateKey", "tlsClientCertKey")]
    # a key that is no key may be refused before the repository is contacted
    check = (lambda reply: failed(reply, *patterns, statuses=(400,))) if "garbage" in case else \
        (lambda reply: refused(reply, *patterns))
    r = env.validate(body)
    check(r)
    # adding it is refused the same way, and nothing is stored
    added = env.add(body, upsert=False)
    check(added)
    assert env.get(body["repo"]).status == 404
    for reply in (r, added):
        for secret in secrets:
            assert secret not in reply.body.decode(), reply
            for line in key_lines(secret):
                assert line not in reply.body.decode(), reply
    assert kind in GIT_KINDS


CLEARTEXT = "unencrypted"


def test_credentials_over_plain_http_are_sent_as_upstream_sends_them_with_a_warning(fresh):
    """gix refuses to send a password over http://; upstream sends it, so tiphys does too, and
    says so in the connection state and the log. A wrong password still reads as one."""
    env = fresh()
    gs = env.gs
    host = host_re(gs.http_port)
    body = repo_body(gs, "http-basic", clone(gs))
    assert ok(env.validate(body)) == {}
    added = ok(env.add(body))
    state = successful(added["connectionState"])
    assert CLEARTEXT in state["message"] and re.search(host, state["message"]), state
    assert refs_of(ok(env.refs(body["repo"]))) == expected_refs(gs)
    state = successful(state_of(env, body["repo"], forceRefresh="true"))
    assert CLEARTEXT in state["message"], state
    # The same server without credentials is refused for them, and so is a wrong password: the
    # message blames the credentials only when the server did.
    for wrong in (repo_body(gs, "http-basic", clone(gs), username=None, password=None),
                  repo_body(gs, "http-basic", clone(gs), password=f"wrong-{uuid.uuid4().hex}")):
        msg = refused(env.add(wrong, upsert=False), "authentication", host)
        assert CLEARTEXT not in msg and "clear text" not in msg, msg
        assert env.get(wrong["repo"]).status == 404
    # An open repository over http with no credentials: nothing to warn of.
    plain = successful(ok(env.add(repo_body(gs, "http", clone(gs))))["connectionState"])
    assert plain["message"] == "", plain
    # A Helm repository over plain http with basic auth: the same warning.
    helm = ok(env.add(helm_body(gs, gs.helm_http_auth_url, f"h-{uuid.uuid4().hex[:8]}")))
    assert CLEARTEXT in successful(helm["connectionState"])["message"], helm
    # The log warns, naming the host and never the password.
    log = env.server.logs()
    warned = [line for line in log.splitlines() if CLEARTEXT in line]
    assert warned and all(re.search(host, line) for line in warned), log[-3000:]
    assert gs.basic_password not in log


def test_a_refused_repository_is_not_stored(env):
    gs = env.gs
    name = clone(gs)
    body = repo_body(gs, "basic", repo=name, password=f"wrong-{uuid.uuid4().hex}")
    refused(env.add(body, upsert=False), "authentication", host_re(gs.https_port))
    assert env.get(body["repo"]).status == 404
    assert body["repo"] not in [i["repo"] for i in ok(env.call("GET", REPOS)).get("items") or []]
    # with the right password it is
    env.must_add(repo_body(gs, "basic", repo=name), upsert=False)
    successful(state_of(env, body["repo"]))


def test_a_project_scoped_repository_is_stored_unchecked_and_shows_why_it_fails(env):
    """Upstream contacts only repositories without a project before storing them; the state of a
    project-scoped one tells what is wrong."""
    gs = env.gs
    project = f"remote-{uuid.uuid4().hex[:8]}"
    r = env.call("POST", "/api/v1/projects", {"project": {"metadata": {"name": project}, "spec": {
        "sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}]}}})
    assert r.status == 200, r
    wrong = f"wrong-{uuid.uuid4().hex}"
    body = repo_body(gs, "basic", clone(gs), password=wrong, project=project)
    r = env.add(body, upsert=False)
    assert r.status == 200, r
    listed = [i for i in ok(env.call("GET", REPOS, forceRefresh="true"))["items"] if i["repo"] == body["repo"]]
    assert len(listed) == 1 and listed[0].get("project") == project, listed
    state = listed[0]["connectionState"]
    assert state["status"] == "Failed", state
    assert state["message"].startswith("Unable to connect to repository: "), state
    assert re.search("authentication", state["message"]) and re.search(host_re(gs.https_port), state["message"]), state
    for _, reply in env.replies:
        assert wrong not in reply.body.decode(errors="replace"), reply


def test_tls_trust_comes_from_the_certificate_api(fresh):
    env = fresh(trust=False)
    gs = env.gs
    host = host_re(gs.https_port)
    url = gs.url("open")
    refused(env.validate({"repo": url}), "TLS certificate", "not trusted", host)
    refused(env.add({"repo": url}), "TLS certificate", "not trusted", host)
    assert env.get(url).status == 404
    # insecure: no verification
    assert ok(env.validate({"repo": url, "insecure": True})) == {}
    env.must_add({"repo": url, "insecure": True})
    successful(state_of(env, url))
    # an unrelated CA does not help
    env.trust_ca(gs.wrong_ca_pem)
    refused(env.validate({"repo": gs.url("open", "empty.git")}), "not trusted", host)
    # the right one does, for every server on that host (the mTLS one too)
    env.trust_ca(upsert=True)
    assert ok(env.validate({"repo": gs.url("open", "empty.git")})) == {}
    assert ok(env.validate(repo_body(gs, "mtls"))) == {}
    empty = gs.url("open", "empty.git")
    env.must_add({"repo": empty})
    first = successful(state_of(env, empty))
    # the CA removed: the remembered state still holds until a forced re-check says why it fails
    env.distrust_ca()
    assert state_of(env, empty)["status"] == "Successful"
    time.sleep(1.1)
    failed_state = state_of(env, empty, forceRefresh="true")
    assert failed_state["status"] == "Failed", failed_state
    assert failed_state.get("message", "").startswith("Unable to connect to repository: "), failed_state
    assert re.search("not trusted", failed_state["message"]), failed_state
    assert re.search(host, failed_state["message"]), failed_state
    assert parse_time(failed_state["attemptedAt"]) >= parse_time(first["attemptedAt"]), failed_state
    # the insecure repository needs no CA
    successful(state_of(env, url, forceRefresh="true"))
    listed = {i["repo"]: i["connectionState"]["status"] for i in ok(env.call("GET", REPOS, forceRefresh="true"))["items"]}
    assert listed == {url: "Successful", empty: "Failed"}, listed
    env.trust_ca()
    successful(state_of(env, empty, forceRefresh="true"))


def test_a_repository_that_disappears_is_shown_failed(env):
    gs = env.gs
    name = clone(gs)
    url = gs.url("open", name)
    env.must_add({"repo": url})
    successful(state_of(env, url))
    shutil.rmtree(gs.root / name)
    state = state_of(env, url, forceRefresh="true")
    assert state["status"] == "Failed", state
    assert state["message"].startswith("Unable to connect to repository: "), state
    assert re.search(host_re(gs.https_port), state["message"]), state
    listed = {i["repo"]: i["connectionState"]["status"] for i in ok(env.call("GET", REPOS))["items"]}
    assert listed[url] == "Failed", listed


def test_connection_states_are_rechecked_in_the_background(fresh):
    env = fresh("--repo-check-interval", "1s")
    gs = env.gs
    url = gs.url("open", "empty.git")
    env.must_add({"repo": url})
    successful(state_of(env, url))
    env.distrust_ca()
    # plain GETs (no forceRefresh) see the failure once the state is older than the interval
    state = wait_until(lambda: (s := state_of(env, url))["status"] == "Failed" and s, 20, interval=0.5,
                       what="a background re-check reporting Failed")
    assert "not trusted" in state["message"], state


def test_ssh_host_keys_come_from_the_certificate_api(fresh):
    env = fresh(trust=False)
    gs = env.gs
    host = host_re(gs.ssh_port)
    body = repo_body(gs, "ssh")
    refused(env.validate(body), "SSH host key", "not known", host)
    refused(env.add(body), "SSH host key", "not known", host)
    assert env.get(body["repo"]).status == 404
    assert ok(env.validate({**body, "insecure": True})) == {}
    env.trust_ssh(gs.ssh_wrong_known_hosts)
    refused(env.validate(body), "SSH host key", "does not match", host)
    env.trust_ssh(upsert=True)
    assert ok(env.validate(body)) == {}
    env.must_add(body)
    successful(state_of(env, body["repo"]))
    assert refs_of(ok(env.refs(body["repo"]))) == expected_refs(gs)


def test_credential_templates_supply_credentials_longest_prefix_first(fresh):
    env = fresh()
    gs = env.gs
    base = f"https://127.0.0.1:{gs.https_port}/"
    wrong = f"wrong-{uuid.uuid4().hex}"
    r = env.call("POST", CREDS, {"url": base, "username": gs.basic_user, "password": wrong})
    assert r.status == 200, r
    url = gs.url("basic")
    refused(env.add({"repo": url}), "authentication", host_re(gs.https_port))
    refused(env.validate({"repo": url}), "authentication")
    r = env.call("POST", CREDS, {"url": base + "basic/", "username": gs.basic_user, "password": gs.basic_password})
    assert r.status == 200, r
    assert ok(env.validate({"repo": url})) == {}
    env.must_add({"repo": url})
    got = ok(env.get(url))
    assert got.get("inheritedCreds") is True and got.get("username") == gs.basic_user, got
    successful(got["connectionState"])
    assert refs_of(ok(env.refs(url))) == expected_refs(gs)
    # a repository's own credentials win over any template
    refused(env.validate({"repo": url, "username": gs.basic_user, "password": wrong}), "authentication")
    for reply in env.replies:
        assert gs.basic_password not in reply[1].body.decode(errors="replace") and wrong not in \
            reply[1].body.decode(errors="replace"), reply


# ---- deadline, size limit, caches -----------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["https", "git", "ssh"])
def test_a_hanging_repository_runs_into_the_deadline_and_blocks_nobody(fresh, staller, scheme):
    env = fresh("--repo-timeout", "3s")
    gs = env.gs
    good = gs.url("git")
    env.must_add({"repo": good})
    url = staller.url(scheme) if scheme != "ssh" else f"ssh://git@127.0.0.1:{staller.port}/apps.git"
    body = {"repo": url, "insecure": True}
    if scheme == "ssh":
        body["sshPrivateKey"] = gs.ssh_private_key
    result = {}

    def hang():
        t0 = time.monotonic()
        result["reply"] = env.validate(body)
        result["elapsed"] = time.monotonic() - t0

    thread = threading.Thread(target=hang, daemon=True)
    thread.start()
    wait_until(lambda: staller.accepted >= 1, 5, what="the server connecting to the staller")
    for what, fn in (("userinfo", lambda: env.call("GET", "/api/v1/session/userinfo")),
                     ("refs", lambda: env.refs(good)), ("repository", lambda: env.get(good))):
        t0 = time.monotonic()
        r = fn()
        elapsed = time.monotonic() - t0
        assert r.status == 200, (what, r)
        assert elapsed < PROMPT, f"{what} took {elapsed:.1f} s while a repository hung"
        assert thread.is_alive(), f"the stalled call ended before {what} was checked: {result}"
    t0 = time.monotonic()
    r = env.apps(good)  # a fetch of its own while the other one hangs
    assert r.status == 200 and app_set(r.json()) == MAIN_APPS, r
    assert time.monotonic() - t0 < 10
    thread.join(timeout=20)
    assert not thread.is_alive(), "the stalled call did not end within 20 s"
    assert 2.5 <= result["elapsed"] <= 8.5, result
    refused(result["reply"], host_re(staller.port), r"did not answer within 3\s?s")
    assert env.server.proc.poll() is None


def test_the_fetch_limit_bounds_how_many_repositories_are_contacted_at_once(fresh, staller):
    env = fresh("--repo-timeout", "3s", "--repo-max-fetches", "1")
    results = {}

    def hang(name):
        t0 = time.monotonic()
        results[name] = (env.validate({"repo": staller.url("https", f"/{name}.git"), "insecure": True}),
                         time.monotonic() - t0)

    threads = [threading.Thread(target=hang, args=(name,), daemon=True) for name in ("one", "two")]
    for thread in threads:
        thread.start()
    wait_until(lambda: staller.accepted >= 1, 5, what="the server connecting to the staller")
    time.sleep(1.0)
    assert staller.accepted == 1, f"{staller.accepted} connections at once with --repo-max-fetches 1"
    for thread in threads:
        thread.join(timeout=20)
        assert not thread.is_alive(), "a call did not end within 20 s"
    messages = sorted(refused(reply, host_re(staller.port)) for reply, _ in results.values())
    assert any(re.search(r"did not answer within 3\s?s", m) for m in messages), messages
    assert all(re.search(r"did not answer within 3\s?s|too many repository fetches", m) for m in messages), messages
    assert all(elapsed <= 8.5 for _, elapsed in results.values()), results
    # the slot is free again
    good = env.gs.url("git")
    env.must_add({"repo": good})
    assert app_set(ok(env.apps(good))) == MAIN_APPS


def test_the_repository_cache_lives_where_it_is_told(fresh, tmp_path):
    cache = tmp_path / "repo-cache-elsewhere"
    env = fresh("--repo-cache-dir", str(cache))
    url = env.gs.url("git")
    env.must_add({"repo": url})
    assert app_set(ok(env.apps(url))) == MAIN_APPS
    assert cache.is_dir() and any(p.is_file() for p in cache.rglob("*")), "nothing fetched into --repo-cache-dir"
    inside = [p for p in Path(env.server.data_dir).rglob("*") if "cache" in p.name]
    assert not any(any(q.is_file() for q in p.rglob("*")) for p in inside if p.is_dir()), inside


def test_a_repository_larger_than_the_limit_is_refused(fresh):
    env = fresh("--repo-max-bytes", "5000000")
    gs = env.gs
    big = gs.url("open", "big.git")
    env.must_add({"repo": big})  # only its refs are read: small
    assert ok(env.refs(big))["branches"] == ["main"]
    r = env.apps(big)
    failed(r, "larger than the limit", host_re(gs.https_port), statuses=(400, 413, 500, 507, 412, 429))
    # the same server still reads repositories below the limit
    small = gs.url("open")
    env.must_add({"repo": small})
    assert app_set(ok(env.apps(small))) == MAIN_APPS
    # and keeps refusing the big one (no half-fetched state taken for the whole)
    failed(env.apps(big), "larger than the limit")
    assert env.server.proc.poll() is None


def test_listed_refs_are_reused_for_the_refs_ttl(fresh):
    env = fresh("--repo-refs-ttl", "3s")
    gs = env.gs
    name = clone(gs)
    url = gs.url("git", name)
    env.must_add({"repo": url})
    assert refs_of(ok(env.refs(url))) == expected_refs(gs)
    git("branch", "feature", "main", cwd=gs.root / name)
    git("tag", "v9.9.9", "main", cwd=gs.root / name)
    t0 = time.monotonic()
    assert refs_of(ok(env.refs(url))) == expected_refs(gs)  # still the listed ones
    fresh_refs = {"branches": ["dev", "feature", "main"], "tags": ["v1.0.0", "v1.1.0", "v9.9.9"]}
    wait_until(lambda: refs_of(ok(env.refs(url))) == fresh_refs, 15, interval=0.25, what="new refs listed")
    assert time.monotonic() - t0 >= 0.5


def test_many_concurrent_callers_get_the_same_answers(env):
    gs = env.gs
    url = gs.url("http", clone(gs))
    env.must_add({"repo": url})

    def calls(i):
        return ("refs", env.refs(url)) if i % 2 else ("apps", env.apps(url))

    with concurrent.futures.ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(calls, range(40), timeout=120))
    bodies = {"refs": set(), "apps": set()}
    for what, r in results:
        assert r.status == 200, (what, r)
        canonical = json.dumps(r.json(), sort_keys=True) if what == "refs" else \
            json.dumps(sorted(app_set(r.json())))
        bodies[what].add(canonical)
    assert len(bodies["refs"]) == 1 and len(bodies["apps"]) == 1, bodies
    assert refs_of(json.loads(bodies["refs"].pop())) == expected_refs(gs)
    assert {tuple(x) for x in json.loads(bodies["apps"].pop())} == MAIN_APPS


# ---- refs, apps, app details, Helm charts ---------------------------------------------------------


def test_refs_of_an_empty_and_of_a_big_repository(env):
    gs = env.gs
    empty = gs.url("open", "empty.git")
    env.must_add({"repo": empty})
    assert refs_of(ok(env.refs(empty))) == {"branches": [], "tags": []}
    name = f"many-{uuid.uuid4().hex[:10]}.git"
    refs = many_refs_repo(gs.root / name, refs=1000, apps=100)
    url = gs.url("git", name)
    env.must_add({"repo": url})
    got = refs_of(ok(env.refs(url)))
    assert got["branches"] == sorted(r.removeprefix("refs/heads/") for r in refs if r.startswith("refs/heads/"))
    assert got["tags"] == sorted(r.removeprefix("refs/tags/") for r in refs if r.startswith("refs/tags/"))
    assert len(got["branches"]) + len(got["tags"]) == 1000


@pytest.mark.parametrize("kind", ["open", "ssh", "git"])
def test_list_apps_finds_helm_and_kustomize_apps_at_a_revision(env, kind):
    gs = env.gs
    body = repo_body(gs, kind)
    env.must_add(body)
    url = body["repo"]
    assert app_set(ok(env.apps(url, "main"))) == MAIN_APPS
    assert app_set(ok(env.apps(url, gs.apps.main))) == MAIN_APPS
    assert app_set(ok(env.apps(url, "dev"))) == MAIN_APPS
    assert app_set(ok(env.apps(url, "v1.1.0"))) == MAIN_APPS
    assert app_set(ok(env.apps(url, "v1.0.0"))) == set()
    failed(env.apps(url, "no-such-branch"), "no-such-branch", statuses=(404,))


def test_app_details_of_helm_kustomize_and_directory_apps(env):
    gs = env.gs
    url = gs.url("open")
    env.must_add({"repo": url})
    helm = ok(env.details(url, "helm-app"))
    assert helm["type"] == "Helm", helm
    assert set(helm["helm"]["valueFiles"]) == {"values.yaml", "values-prod.yaml"}, helm
    assert helm["helm"]["values"] == APPS_FILES["helm-app/values.yaml"], helm
    params = {p["name"]: p.get("value", "") for p in helm["helm"]["parameters"]}
    assert {k: params.get(k) for k in ("replicaCount", "image.repository", "image.tag", "service.port",
                                       "ingress.enabled", "ingress.hosts[0]", "ingress.hosts[1]")} == {
        "replicaCount": "1", "image.repository": "gcr.io/heptio-images/ks-guestbook-demo", "image.tag": "0.2",
        "service.port": "80", "ingress.enabled": "false", "ingress.hosts[0]": "guestbook.example.com",
        "ingress.hosts[1]": "guestbook.example.org"}, params
    # the value files chosen by the source are merged over values.yaml
    prod = ok(env.details(url, "helm-app", helm={"valueFiles": ["values-prod.yaml"]}))
    prod_params = {p["name"]: p.get("value", "") for p in prod["helm"]["parameters"]}
    assert (prod_params.get("replicaCount"), prod_params.get("ingress.enabled"), prod_params.get("image.tag")) == (
        "3", "true", "0.2"), prod_params

    kustomize = ok(env.details(url, "kustomize-app"))
    assert kustomize["type"] == "Kustomize", kustomize
    images = kustomize["kustomize"].get("images") or []
    for image in ("registry.example.com/mirror/nginx:1.25.3", "registry.example.com/mirror/busybox:1.36"):
        assert any(image in i for i in images), images

    for path in ("guestbook", "nested/deep/app"):
        directory = ok(env.details(url, path))
        # Upstream's GetAppDetails (reposerver/repository/repository.go) fills only the Helm and
        # Kustomize parts: a directory answers its type alone.
        assert directory == {"type": "Directory"}, directory
        assert "helm" not in directory and "kustomize" not in directory, directory
    # at v1.0.0 there was no Kustomize app
    failed(env.details(url, "kustomize-app", revision="v1.0.0"), "kustomize-app", statuses=(400, 404))


@pytest.mark.parametrize("path", ["no-such-app", "../outside", "guestbook/../../outside", "/etc",
                                  "guestbook/README.md"])
def test_app_details_of_a_missing_or_escaping_path_is_refused(env, path):
    gs = env.gs
    url = gs.url("open")
    env.must_add({"repo": url})
    r = env.details(url, path)
    failed(r, re.escape(path), statuses=(400, 404))


def test_app_details_at_a_missing_revision_names_it(env):
    url = env.gs.url("open")
    env.must_add({"repo": url})
    failed(env.details(url, "guestbook", revision="no-such-rev"), "no-such-rev", statuses=(404,))


@pytest.mark.parametrize("which", ["anonymous", "basic-auth", "mtls", "plain-http"])
def test_helm_charts_are_listed_from_the_index(env, which):
    gs = env.gs
    url = {"anonymous": gs.helm_url, "basic-auth": gs.helm_auth_url, "mtls": gs.helm_mtls_url,
           "plain-http": gs.helm_http_url}[which]
    body = helm_body(gs, url, f"charts-{which}")
    assert ok(env.validate(body)) == {}
    env.must_add(body)
    got = ok(env.get(url))
    assert got["type"] == "helm", got
    successful(got["connectionState"])
    charts = ok(env.call("GET", f"{REPOS}/{enc(url)}/helmcharts"))
    assert {c["name"]: set(c["versions"]) for c in charts["items"]} == {k: set(v) for k, v in CHARTS.items()}, charts
    assert all(len(c["versions"]) == len(set(c["versions"])) for c in charts["items"]), charts


def test_a_helm_repository_with_wrong_credentials_is_refused(env):
    gs = env.gs
    wrong = f"wrong-{uuid.uuid4().hex}"
    r = env.validate(helm_body(gs, gs.helm_auth_url, "charts-wrong", password=wrong))
    refused(r, "authentication", host_re(gs.https_port))
    assert wrong not in r.body.decode()
    refused(env.validate({"repo": gs.helm_auth_url, "type": "helm", "name": "x"}), "authentication")


# ---- application calls --------------------------------------------------------------------------


def make_app(env, source, name=None):
    name = name or uniq("remote")
    body = {"metadata": {"name": name}, "spec": {"project": "default", "source": source,
                                                  "destination": {"server": IN_CLUSTER, "namespace": "default"}}}
    r = env.call("POST", APPS, body)
    assert r.status == 200, r
    return name


@pytest.fixture(scope="module")
def guestbook(env):
    url = env.gs.url("open")
    env.must_add({"repo": url})
    return make_app(env, {"repoURL": url, "path": "guestbook", "targetRevision": "main"})


def objects(answer):
    return [json.loads(m) for m in answer.get("manifests") or []]


def names(objs):
    return sorted((o["kind"], o["metadata"]["name"]) for o in objs)


GUESTBOOK_MAIN = sorted([("Deployment", "guestbook-ui"), ("Service", "guestbook-ui"), ("ConfigMap", "guestbook-first"),
                         ("ConfigMap", "guestbook-second"), ("ConfigMap", "guestbook-json")])


def test_revision_metadata_of_each_commit(env, guestbook):
    gs = env.gs
    tags_by_sha = {}
    for tag, sha in gs.apps.tags.items():
        tags_by_sha.setdefault(sha, []).append(tag)
    for commit in gs.apps.main_commits + gs.apps.dev_commits:
        meta = ok(env.call("GET", f"{APPS}/{guestbook}/revisions/{commit.sha}/metadata"))
        assert meta["author"] == "Alice Author <alice@example.com>" == commit.author, meta
        assert meta["date"] == commit.author_date, (meta, commit)
        assert meta["message"] == commit.message.strip(), meta
        assert sorted(meta.get("tags") or []) == sorted(tags_by_sha.get(commit.sha, [])), meta


def test_revision_metadata_of_a_tag(env, guestbook):
    gs = env.gs
    commit = gs.apps.commit(gs.apps.tags["v1.1.0"])
    meta = ok(env.call("GET", f"{APPS}/{guestbook}/revisions/v1.1.0/metadata"))
    assert (meta["author"], meta["message"], meta.get("tags")) == (commit.author, commit.message.strip(),
                                                                   ["v1.1.0"]), meta


def test_revision_metadata_of_an_unknown_commit_is_an_error(env, guestbook):
    r = env.call("GET", f"{APPS}/{guestbook}/revisions/{'0' * 40}/metadata")
    assert r.status in (400, 404), r


def test_manifests_of_a_directory_app(env, guestbook):
    gs = env.gs
    got = ok(env.call("GET", f"{APPS}/{guestbook}/manifests"))
    assert got["revision"] == gs.apps.main and got["sourceType"] == "Directory", got
    objs = objects(got)
    assert names(objs) == GUESTBOOK_MAIN, objs
    deploy = next(o for o in objs if o["kind"] == "Deployment")
    assert deploy["spec"]["replicas"] == 2 and deploy["apiVersion"] == "apps/v1", deploy
    first = gs.apps.tags["v1.0.0"]
    for revision in ("v1.0.0", first):
        old = ok(env.call("GET", f"{APPS}/{guestbook}/manifests", revision=revision))
        assert old["revision"] == first, old
        objs = objects(old)
        assert names(objs) == [("Deployment", "guestbook-ui"), ("Service", "guestbook-ui")], objs
        assert next(o for o in objs if o["kind"] == "Deployment")["spec"]["replicas"] == 1
    failed(env.call("GET", f"{APPS}/{guestbook}/manifests", revision="no-such-rev"), "no-such-rev")


@pytest.mark.parametrize("directory,expected", [
    ({"recurse": True}, GUESTBOOK_MAIN + [("ConfigMap", "guestbook-extra")]),
    ({"include": "*.json"}, [("ConfigMap", "guestbook-json")]),
    ({"exclude": "multi.yaml"}, [("ConfigMap", "guestbook-json"), ("Deployment", "guestbook-ui"),
                                 ("Service", "guestbook-ui")]),
    ({"recurse": True, "include": "extra/*"}, [("ConfigMap", "guestbook-extra")]),
    ({"recurse": True, "exclude": "{*.json,multi.yaml}"}, [("ConfigMap", "guestbook-extra"),
                                                           ("Deployment", "guestbook-ui"),
                                                           ("Service", "guestbook-ui")]),
])
def test_manifests_honour_recurse_include_and_exclude(env, directory, expected):
    url = env.gs.url("open")
    env.must_add({"repo": url})
    name = make_app(env, {"repoURL": url, "path": "guestbook", "targetRevision": "main", "directory": directory})
    got = ok(env.call("GET", f"{APPS}/{name}/manifests"))
    assert names(objects(got)) == sorted(expected), (directory, got)


def test_manifests_of_a_nested_path_at_a_branch_and_at_head(env):
    url = env.gs.url("open")
    env.must_add({"repo": url})
    for revision in ("main", "HEAD", ""):
        name = make_app(env, {"repoURL": url, "path": "nested/deep/app", "targetRevision": revision})
        got = ok(env.call("GET", f"{APPS}/{name}/manifests"))
        assert names(objects(got)) == [("ConfigMap", "deep-app")], (revision, got)
        assert got["revision"] == env.gs.apps.main, (revision, got)


def test_manifests_and_metadata_of_an_unregistered_public_repository(env):
    """Upstream reads a source whose repository was never added (anonymously, or with a
    template's credentials): most applications point at public repositories."""
    gs = env.gs
    url = gs.url("http", clone(gs))
    name = make_app(env, {"repoURL": url, "path": "guestbook", "targetRevision": "main"})
    got = ok(env.call("GET", f"{APPS}/{name}/manifests"))
    assert got["revision"] == gs.apps.main and names(objects(got)) == GUESTBOOK_MAIN, got
    meta = ok(env.call("GET", f"{APPS}/{name}/revisions/{gs.apps.main}/metadata"))
    assert meta["author"] == gs.apps.main_commits[-1].author, meta


def test_application_calls_need_applications_get(env, guestbook):
    gs = env.gs
    for path in (f"{APPS}/{guestbook}/manifests", f"{APPS}/{guestbook}/revisions/{gs.apps.main}/metadata"):
        for who in ("alice", "bob", "carol"):
            r = env.call("GET", path, who=who)
            assert r.status in (403, 404), (who, path, r)
            assert b"manifests" not in r.body and b"author" not in r.body, r


@pytest.mark.parametrize("source,named", [
    ({"path": "no-such-dir", "targetRevision": "main"}, "no-such-dir"),
    ({"path": "guestbook", "targetRevision": "no-such-rev"}, "no-such-rev"),
])
def test_creating_an_application_checks_its_source_unless_told_not_to(env, source, named):
    url = env.gs.url("open")
    env.must_add({"repo": url})
    body = {"metadata": {"name": uniq("checked")}, "spec": {"project": "default", "source": {"repoURL": url, **source},
                                                             "destination": {"server": IN_CLUSTER, "namespace": "default"}}}
    r = env.call("POST", APPS, body, validate="true")
    assert r.status == 400 and named in message(r), r
    assert env.call("GET", f"{APPS}/{body['metadata']['name']}").status in (403, 404)
    r = env.call("POST", APPS, body, validate="false")
    assert r.status == 200, r


@pytest.mark.parametrize("path", ["helm-app", "kustomize-app"])
def test_manifests_of_helm_and_kustomize_apps_need_a_repo_server(env, path):
    url = env.gs.url("open")
    env.must_add({"repo": url})
    name = make_app(env, {"repoURL": url, "path": path, "targetRevision": "main"})
    failed(env.call("GET", f"{APPS}/{name}/manifests"), "repo server", statuses=(400, 412, 501))


@pytest.mark.parametrize("which", ["relative-urls", "absolute-urls-basic-auth"])
def test_chart_details_of_a_helm_repository_app(env, which):
    gs = env.gs
    url = gs.helm_url if which == "relative-urls" else gs.helm_auth_url
    env.must_add(helm_body(gs, url, f"charts-details-{which}"))
    name = make_app(env, {"repoURL": url, "chart": "guestbook", "targetRevision": "0.2.0"})
    for version in CHARTS["guestbook"]:
        details = ok(env.call("GET", f"{APPS}/{name}/revisions/{version}/chartdetails"))
        assert details["description"] == f"The guestbook chart, version {version}", details
        assert details.get("maintainers") == ["Gitkit Maintainer <charts@example.com>"], details
        assert details.get("home", "") == "", details
    r = env.call("GET", f"{APPS}/{name}/revisions/9.9.9/chartdetails")
    assert r.status in (400, 404), r


# ---- RBAC ---------------------------------------------------------------------------------------


def test_rbac_of_refs_apps_and_validate(env):
    gs = env.gs
    url = gs.url("open")
    env.must_add({"repo": url})
    assert refs_of(ok(env.refs(url, who="alice"))) == expected_refs(gs)
    # alice may read the repository but not create or update the application ListApps is for
    r = env.apps(url, who="alice")
    assert r.status == 403, r
    assert app_set(ok(env.apps(url, who="bob"))) == MAIN_APPS
    # bob may create in the default project only
    assert env.apps(url, who="bob", project="other").status in (400, 403, 404)
    # GetAppDetails needs `applications, get` on the app (and `create` for one not stored yet)
    assert env.details(url, "guestbook", who="alice").status == 403
    assert env.details(url, "guestbook", who="bob").status == 403
    # validating needs `repositories, create`
    assert env.validate({"repo": url}, who="alice").status == 403
    assert env.add({"repo": gs.url("git")}, who="alice").status == 403
    # a caller without `repositories, get`: the same answer for an existing and a missing repository
    missing = gs.url("open", "does-not-exist.git")
    for call in (lambda u: env.refs(u, who="carol"), lambda u: env.apps(u, who="carol"),
                 lambda u: env.get(u, who="carol"), lambda u: env.details(u, "guestbook", who="carol"),
                 lambda u: env.call("GET", f"{REPOS}/{enc(u)}/helmcharts", who="carol")):
        there, absent = call(url), call(missing)
        assert there.status in (403, 404), there
        assert (there.status, message(there).replace(url, "URL")) == \
            (absent.status, message(absent).replace(missing, "URL")), (there, absent)
    # and for the admin, a repository that is neither registered nor there is an error
    assert env.refs(missing).status in (400, 404)
    assert env.call("GET", f"{REPOS}/{enc(url)}/refs", who=None).status == 401


def test_list_apps_and_app_details_only_for_a_project_that_permits_the_repository(env):
    gs = env.gs
    url = gs.url("open")
    env.must_add({"repo": url})
    project = f"narrow-{uuid.uuid4().hex[:8]}"
    r = env.call("POST", "/api/v1/projects", {"project": {"metadata": {"name": project}, "spec": {
        "sourceRepos": ["https://git.example.invalid/*"], "destinations": [{"server": "*", "namespace": "*"}]}}})
    assert r.status == 200, r
    # upstream: PermissionDenied "repository '<url>' not permitted in project '<project>'"
    r = env.apps(url, project=project)
    assert r.status == 403 and "not permitted in project" in message(r), r
    assert app_set(ok(env.apps(url, project="default"))) == MAIN_APPS
    body = {"source": {"repoURL": url, "path": "guestbook", "targetRevision": "main"}, "appName": "x",
            "appProject": project}
    r = env.call("POST", f"{REPOS}/{enc(url)}/appdetails", body)
    assert r.status == 403 and "not permitted in project" in message(r), r


# ---- secrets --------------------------------------------------------------------------------------


def key_lines(pem):
    """The base64 lines of a PEM body (each one alone must not leak)."""
    return [line for line in pem.splitlines() if line and not line.startswith("-----") and len(line) >= 16]


def test_no_credential_in_any_answer_or_the_log(servers, config_dir, gitservers, monkeypatch, tmp_path):
    monkeypatch.setenv("RUST_LOG", "debug")
    env = make_env(servers, config_dir, gitservers)
    gs = env.gs
    s = Secrets()
    s.known(gs.basic_password, "basic-password")
    s.known(gs.bearer_token, "bearer-token")
    s.known(gs.ssh_private_key.strip(), "ssh-key")
    s.known(gs.client_key_pem.strip(), "client-key")
    for i, line in enumerate(key_lines(gs.ssh_private_key)):
        s.known(line, f"ssh-key-line-{i}")
    for i, line in enumerate(key_lines(gs.client_key_pem)):
        s.known(line, f"client-key-line-{i}")
    wrong_pw, wrong_token = s.new("wrong-password", stored=False), s.new("wrong-token", stored=False)
    stranger = ssh_key(tmp_path, "stranger")[0].read_text()
    for i, line in enumerate(key_lines(stranger)):
        s.known(line, f"stranger-key-line-{i}")
    canary = s.canary("name")

    for kind in ("basic", "bearer", "mtls", "ssh"):
        body = repo_body(gs, kind)
        ok(env.validate(body))
        env.must_add(body)
        ok(env.get(body["repo"], forceRefresh="true"))
        ok(env.refs(body["repo"]))
        ok(env.apps(body["repo"]))
        ok(env.details(body["repo"], "helm-app"))
    ok(env.call("GET", REPOS, forceRefresh="true"))
    env.must_add(helm_body(gs, gs.helm_auth_url, "secret-charts"))
    ok(env.call("GET", f"{REPOS}/{enc(gs.helm_auth_url)}/helmcharts"))
    # failures, which are where messages of libraries could quote a credential
    for body in (repo_body(gs, "basic", password=wrong_pw), repo_body(gs, "bearer", bearerToken=wrong_token),
                 repo_body(gs, "ssh", sshPrivateKey=stranger), repo_body(gs, "mtls", tlsClientCertKey=wrong_pw),
                 repo_body(gs, "basic", name=canary, password=wrong_pw),
                 {"repo": gs.url("basic").replace("https://", f"https://{gs.basic_user}:{wrong_pw}@")},
                 helm_body(gs, gs.helm_auth_url, "secret-charts-2", password=wrong_pw)):
        r = env.validate(body)
        assert r.status in (400, 404), r
        r = env.add(body, upsert=False)
        assert r.status in (400, 404, 409), r
    # a name is shown: the positive control of the scan
    named = repo_body(gs, "basic", repo=clone(gs), name=canary)
    env.must_add(named)
    assert ok(env.get(named["repo"])).get("name") == canary
    shown = b"".join(r.body for _, r in env.replies)
    assert s.scan(shown, values=[canary]), "the scanner does not find the canary name it was shown"

    leaks = []
    for what, r in env.replies:
        blob = (f"{r.status}\n" + "".join(f"{k}: {v}\n" for k, v in r.headers)).encode() + r.body
        if hits := s.scan(blob):
            leaks.append((what, [s.markers[v].what + "/" + form for v, form in hits], r.body[:800]))
    assert not leaks, leaks
    log = Path(env.server.log).read_bytes()
    assert b" DEBUG " in log, "no debug lines in the log"
    hits = [(s.markers[v].what, form) for v, form in s.scan(log)]
    assert not hits, hits
    # nor on disk: the repository cache (git config, key files of SSH calls) and the rest of the
    # data dir hold no credential in the clear
    files = [p for p in Path(env.server.data_dir).rglob("*") if p.is_file() and p != Path(env.server.log)]
    assert any("cache" in str(p) for p in files), "no repository cache under the data dir"
    on_disk = [(str(p), s.markers[v].what, form) for p in files for v, form in s.scan(p.read_bytes())]
    assert not on_disk, on_disk


# ---- CLI ------------------------------------------------------------------------------------------


def test_cli_repo_add_reports_the_connection_state(env):
    gs = env.gs
    conn = ["--server", env.server.addr, "--plaintext", "--auth-token", env.tokens["admin"]]
    url = gs.url("basic", clone(gs))
    res = cli("repo", "add", url, "--username", gs.basic_user, "--password", gs.basic_password, *conn, timeout=90)
    assert res.returncode == 0, res
    assert url in res.stdout and "Successful" in res.stdout, res.stdout
    assert gs.basic_password not in res.stdout + res.stderr
    res = cli("repo", "get", url, *conn, timeout=90)
    assert res.returncode == 0 and "Successful" in res.stdout, res
    res = cli("repo", "list", *conn, timeout=90)
    assert res.returncode == 0, res
    assert any(url in line and "Successful" in line for line in res.stdout.splitlines()), res.stdout
    wrong = f"wrong-{uuid.uuid4().hex}"
    other = gs.url("basic", clone(gs))
    res = cli("repo", "add", other, "--username", gs.basic_user, "--password", wrong, *conn, timeout=90)
    assert res.returncode != 0, res
    assert NOT_ACCESSIBLE in res.stderr and "authentication" in res.stderr, res.stderr
    assert wrong not in res.stdout + res.stderr
    assert env.get(other).status == 404
    key = gs.ssh_key_file
    res = cli("repo", "add", gs.url("ssh", clone(gs)), "--ssh-private-key-path", str(key), *conn, timeout=90)
    assert res.returncode == 0, res
    assert gs.ssh_private_key.splitlines()[1] not in res.stdout + res.stderr


def test_refs_and_apps_of_a_repository_never_added(env):
    """As upstream's GetRepository answers for a URL not added: a bare repository (the UI lists the
    refs of a public repository typed into its create form), for a caller who may `get` it."""
    gs = env.gs
    url = gs.url("git", clone(gs))
    assert env.get(url).status == 404
    assert refs_of(ok(env.refs(url))) == expected_refs(gs)
    assert app_set(ok(env.apps(url))) == MAIN_APPS
    assert env.get(url).status == 404, "reading it does not add it"
    # carol may not get it: the same answer as for any repository she may not see
    assert env.refs(url, who="carol").status in (403, 404)


def test_cli_app_create_says_when_the_path_holds_nothing(env):
    gs = env.gs
    conn = ["--server", env.server.addr, "--plaintext", "--auth-token", env.tokens["admin"]]
    url = gs.url("open")
    env.must_add({"repo": url})
    base = ["app", "create", "--repo", url, "--dest-server", IN_CLUSTER, "--dest-namespace", "default",
            "--project", "default", *conn]
    name = uniq("cli-missing")
    res = cli(*base, name, "--path", "no-such-dir", timeout=90)
    assert res.returncode != 0, res
    assert "no-such-dir" in res.stderr and "InvalidSpecError" in res.stderr, res.stderr
    assert env.call("GET", f"{APPS}/{name}").status in (403, 404)
    # --validate=false stores it unchecked; a path that holds manifests is accepted either way
    res = cli(*base, name, "--path", "no-such-dir", "--validate=false", timeout=90)
    assert res.returncode == 0, res
    res = cli(*base, uniq("cli-guestbook"), "--path", "guestbook", timeout=90)
    assert res.returncode == 0, res


# ---- native gRPC and gRPC-Web -------------------------------------------------------------------


@pytest.fixture(scope="module")
def repo_pb(tmp_path_factory):
    """grpcio-tools stubs of proto/repository (and what it imports): (repository_pb2, v1alpha1 repository_pb2)."""
    import importlib  # noqa: PLC0415
    import sys  # noqa: PLC0415

    import grpc_tools  # noqa: PLC0415
    from grpc_tools import protoc  # noqa: PLC0415

    from conftest import REPO  # noqa: PLC0415
    out = tmp_path_factory.mktemp("repo-stubs")
    proto = REPO / "proto"
    files = [str(p.relative_to(proto)) for d in ("tiphys", "k8s", "v1alpha1", "repository")
             for p in (proto / d).rglob("*.proto")]
    assert protoc.main(["protoc", f"-I{proto}", f"-I{grpc_tools.__path__[0]}/_proto", f"--python_out={out}",
                        *files]) == 0
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("repository.repository_pb2")
    finally:
        sys.path.remove(str(out))


def test_refs_apps_and_access_checks_over_grpc_and_grpc_web(env, repo_pb):
    import grpc  # noqa: PLC0415

    from appkit import grpc_channel, grpc_web, md, rpc_error  # noqa: PLC0415
    gs = env.gs
    url = gs.url("git")
    env.must_add({"repo": url})
    wrong = f"wrong-{uuid.uuid4().hex}"
    admin = md(env.tokens["admin"])

    def method(ch, name, reply):
        return ch.unary_unary(f"/repository.RepositoryService/{name}", request_serializer=lambda m: m.SerializeToString(),
                              response_deserializer=reply.FromString)

    with grpc_channel(env.server) as ch:
        refs = method(ch, "ListRefs", repo_pb.Refs)(repo_pb.RepoQuery(repo=url), metadata=admin, timeout=CALL_TIMEOUT)
        assert {"branches": list(refs.branches), "tags": list(refs.tags)} == expected_refs(gs)
        validate = method(ch, "ValidateAccess", repo_pb.RepoResponse)
        validate(repo_pb.RepoAccessQuery(repo=gs.url("basic"), username=gs.basic_user, password=gs.basic_password),
                 metadata=admin, timeout=CALL_TIMEOUT)
        err = rpc_error(validate, repo_pb.RepoAccessQuery(repo=gs.url("basic"), username=gs.basic_user,
                                                          password=wrong), metadata=admin, timeout=CALL_TIMEOUT)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
        assert NOT_ACCESSIBLE in err.details() and "authentication" in err.details(), err.details()
        assert wrong not in err.details() and wrong not in str(err.trailing_metadata())
        err = rpc_error(method(ch, "ListRefs", repo_pb.Refs), repo_pb.RepoQuery(repo=url), metadata=md(env.tokens["carol"]),
                        timeout=CALL_TIMEOUT)
        assert err.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.NOT_FOUND), err
    web = grpc_web(env.server, "repository.RepositoryService/ListApps",
                   repo_pb.RepoAppsQuery(repo=url, revision="main", appName="x", appProject="default"),
                   token=env.tokens["admin"], timeout=CALL_TIMEOUT)
    assert web.status == 200 and web.trailers.get("grpc-status") == "0", web
    answer = repo_pb.RepoAppsResponse.FromString(web.messages[0])
    assert {(i.path, i.type) for i in answer.items} == MAIN_APPS
