"""gitkit's servers, proven with the `git` CLI, curl, requests and ssh alone (no tiphys): each server
answers the credential it is made for, and refuses the wrong one, a missing one and the wrong trust
anchor; the repositories hold what gitkit says (SHAs, messages, files, refs)."""

import hashlib
import io
import os
import socket
import subprocess
import tarfile
import time
import uuid

import pytest
import requests
import yaml

from gitkit import (APPS_FILES, AUTHOR, CHARTS, COMMITTER, V1_1_0_MESSAGE, build_apps_repo, git, git_env,
                    many_refs_repo, ssh_command)

ALL_REFS = {"HEAD", "refs/heads/main", "refs/heads/dev", "refs/tags/v1.0.0", "refs/tags/v1.1.0",
            "refs/tags/v1.1.0^{}"}


def client(gs, kind, *, ca=None, cert=True, token=None, password=None, known_hosts=None, key=None):
    """(git -c options, environment) for `kind`: the kit's CA unless `ca` names another file ("" for
    none: the system's roots), its client certificate for mtls unless cert=False, the right bearer
    token or password unless given, ssh with the right known_hosts unless given (a path)."""
    args = ["-c", f"http.sslCAInfo={gs.ca_file if ca is None else ca}"] if ca != "" else []
    env = git_env()
    if kind == "mtls" and cert:
        args += ["-c", f"http.sslCert={gs.client_cert_file}", "-c", f"http.sslKey={gs.client_key_file}"]
    if kind == "bearer":
        args += ["-c", f"http.extraHeader=Authorization: Bearer {gs.bearer_token if token is None else token}"]
    if kind == "ssh":
        if known_hosts is None:
            known_hosts = gs.dir / "known_hosts"
            known_hosts.write_text(gs.ssh_known_hosts + "\n")
        env["GIT_SSH_COMMAND"] = ssh_command(key or gs.ssh_key_file, known_hosts)
    return args, env


def url_of(gs, kind, repo="apps.git", password=None):
    url = gs.url(kind, repo)
    if kind in ("basic", "http-basic"):
        scheme = url.split("://", 1)[0]
        url = url.replace(f"{scheme}://", f"{scheme}://{gs.basic_user}:{password or gs.basic_password}@", 1)
    return url


def ls_remote(gs, kind, repo="apps.git", password=None, **opts):
    args, env = client(gs, kind, **opts)
    return git(*args, "ls-remote", url_of(gs, kind, repo, password), env=env, timeout=60, check=False)


def refs_of(res):
    return {ref: sha for sha, ref in (line.split("\t") for line in res.stdout.splitlines())}


def assert_apps_refs(gs, res):
    assert res.returncode == 0, f"{res.stderr}\n{gs.logs()}"
    refs = refs_of(res)
    assert set(refs) == ALL_REFS, refs
    apps = gs.apps
    assert refs["HEAD"] == refs["refs/heads/main"] == apps.main
    assert refs["refs/heads/dev"] == apps.dev
    assert refs["refs/tags/v1.0.0"] == apps.tags["v1.0.0"]
    assert refs["refs/tags/v1.1.0"] == apps.tag_objects["v1.1.0"]
    assert refs["refs/tags/v1.1.0^{}"] == apps.tags["v1.1.0"]


# ---- the repositories -------------------------------------------------------------------------


def test_apps_repo_is_what_gitkit_says(gitservers):
    apps, bare = gitservers.apps, gitservers.apps.path
    assert git("rev-list", "--count", "main", cwd=bare).stdout.strip() == "3"
    assert git("rev-list", "main..dev", cwd=bare).stdout.split() == [apps.dev]
    assert git("cat-file", "-t", "refs/tags/v1.0.0", cwd=bare).stdout.strip() == "commit"
    assert git("cat-file", "-t", "refs/tags/v1.1.0", cwd=bare).stdout.strip() == "tag"
    tag = git("cat-file", "tag", "v1.1.0", cwd=bare).stdout
    assert tag.endswith("\n\n" + V1_1_0_MESSAGE) and f"tagger {COMMITTER[0]} <{COMMITTER[1]}>" in tag, tag
    assert [c.sha for c in apps.main_commits] == git("rev-list", "--reverse", "main", cwd=bare).stdout.split()
    assert apps.tags == {"v1.0.0": apps.main_commits[0].sha, "v1.1.0": apps.main_commits[1].sha}
    for c in apps.main_commits + apps.dev_commits:
        out = git("log", "-1", "--format=%an%n%ae%n%at%n%cn%n%ce%n%ct%n%aI%n%B", c.sha, cwd=bare).stdout
        an, ae, at, cn, ce, ct, a_iso, body = out.split("\n", 7)
        assert (an, ae, cn, ce) == (*AUTHOR, *COMMITTER)
        assert (int(at), int(ct)) == (c.author_time, c.committer_time) and ct != at
        assert a_iso.replace("+00:00", "Z") == c.author_date
        assert body.rstrip("\n") == c.message.rstrip("\n")
    files = set(git("ls-tree", "-r", "--name-only", "main", cwd=bare).stdout.split())
    assert files == set(APPS_FILES), files ^ set(APPS_FILES)
    for path, text in APPS_FILES.items():
        assert git("show", f"main:{path}", cwd=bare).stdout == text, path
    dev_files = set(git("ls-tree", "-r", "--name-only", "dev", cwd=bare).stdout.split())
    assert dev_files == files | {"dev-only/cm.yaml"}
    multi = list(yaml.safe_load_all(APPS_FILES["guestbook/multi.yaml"]))
    assert [d["metadata"]["name"] for d in multi] == ["guestbook-first", "guestbook-second"]
    kust = yaml.safe_load(APPS_FILES["kustomize-app/kustomization.yaml"])
    assert (kust["namePrefix"], kust["nameSuffix"], len(kust["images"]), kust["resources"]) == \
        ("pre-", "-suf", 2, ["deploy.yaml"])
    v1 = git("show", "v1.0.0:guestbook/deployment.yaml", cwd=bare).stdout
    assert "replicas: 1" in v1 and "replicas: 2" in APPS_FILES["guestbook/deployment.yaml"]


def test_apps_repo_shas_are_deterministic(gitservers, tmp_path):
    again = build_apps_repo(tmp_path)
    ours = gitservers.apps
    assert (again.main, again.dev, again.tags, again.tag_objects) == (ours.main, ours.dev, ours.tags, ours.tag_objects)
    assert again.main_commits == ours.main_commits


def test_many_refs_repo_is_fast_and_served(gitservers):
    name = f"many-{uuid.uuid4().hex[:8]}.git"
    start = time.monotonic()
    refs = many_refs_repo(gitservers.root / name, refs=1000, apps=100)
    took = time.monotonic() - start
    assert took < 30, took
    assert len(refs) == 1000, len(refs)
    assert sum(r.startswith("refs/tags/") for r in refs) == 500 and "refs/heads/main" in refs
    tree = git("ls-tree", "-d", "--name-only", "main:apps", cwd=gitservers.root / name).stdout.split()
    assert len(tree) == 100 and tree[0] == "app-000", tree[:3]
    res = ls_remote(gitservers, "git", name)
    assert res.returncode == 0, res.stderr
    served = {r: s for r, s in refs_of(res).items() if r != "HEAD" and not r.endswith("^{}")}
    assert served == refs


# ---- smart HTTP over TLS ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["open", "basic", "bearer", "mtls", "http", "http-basic", "git", "ssh"])
def test_ls_remote_with_the_right_credential(gitservers, kind):
    assert_apps_refs(gitservers, ls_remote(gitservers, kind))


def test_http_speaks_protocol_v2(gitservers):
    url = gitservers.url("open") + "/info/refs?service=git-upload-pack"
    r2 = requests.get(url, headers={"Git-Protocol": "version=2"}, verify=str(gitservers.ca_file), timeout=10)
    assert r2.status_code == 200 and r2.headers["Content-Type"] == "application/x-git-upload-pack-advertisement"
    assert b"version 2\n" in r2.content and b"ls-refs" in r2.content, r2.content[:200]
    r0 = requests.get(url, verify=str(gitservers.ca_file), timeout=10)
    assert b"version 2" not in r0.content and gitservers.apps.main.encode() in r0.content, r0.content[:200]


@pytest.mark.parametrize("kind", ["open", "mtls", "http", "git", "ssh"])
def test_every_transport_speaks_protocol_v2(gitservers, kind):
    args, env = client(gitservers, kind)
    env["GIT_TRACE_PACKET"] = "1"
    res = git(*args, "-c", "protocol.version=2", "ls-remote", url_of(gitservers, kind), env=env, check=False)
    assert_apps_refs(gitservers, res)
    assert "< version 2" in res.stderr and "> command=ls-refs" in res.stderr, res.stderr[-2000:]


def test_basic_auth_refuses_a_wrong_or_missing_password(gitservers):
    wrong = ls_remote(gitservers, "basic", password="not-the-password")
    assert wrong.returncode != 0 and "Authentication failed" in wrong.stderr, wrong.stderr
    args, env = client(gitservers, "basic")
    none = git(*args, "ls-remote", gitservers.url("basic"), env=env, check=False)
    assert none.returncode != 0 and "could not read Username" in none.stderr, none.stderr
    r = requests.get(gitservers.url("basic") + "/info/refs?service=git-upload-pack",
                     verify=str(gitservers.ca_file), timeout=10)
    assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Basic"), r.headers


def test_plain_http_basic_auth_refuses_a_wrong_or_missing_password(gitservers):
    wrong = ls_remote(gitservers, "http-basic", password="not-the-password")
    assert wrong.returncode != 0 and "Authentication failed" in wrong.stderr, wrong.stderr
    r = requests.get(gitservers.url("http-basic") + "/info/refs?service=git-upload-pack", timeout=10)
    assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Basic"), r.headers
    r = requests.get(gitservers.helm_http_auth_url + "index.yaml", timeout=10)
    assert r.status_code == 401, r.status_code
    r = requests.get(gitservers.helm_http_auth_url + "index.yaml", timeout=10,
                     auth=(gitservers.basic_user, gitservers.basic_password))
    assert r.status_code == 200 and b"entries:" in r.content, r.status_code


def test_bearer_refuses_a_wrong_or_missing_token(gitservers):
    wrong = ls_remote(gitservers, "bearer", token="wrong-token")
    assert wrong.returncode != 0 and "could not read Username" in wrong.stderr, wrong.stderr  # 401, no retry
    url = gitservers.url("bearer") + "/info/refs?service=git-upload-pack"
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": gitservers.basic_auth_header()}):
        r = requests.get(url, headers=headers, verify=str(gitservers.ca_file), timeout=10)
        assert r.status_code == 401 and r.headers.get("WWW-Authenticate", "").startswith("Bearer"), (headers, r)
    r = requests.get(url, headers={"Authorization": f"Bearer {gitservers.bearer_token}"},
                     verify=str(gitservers.ca_file), timeout=10)
    assert r.status_code == 200 and gitservers.apps.main.encode() in r.content, r


def test_client_certificate_server_refuses_without_the_right_certificate(gitservers):
    without = ls_remote(gitservers, "mtls", cert=False)
    assert without.returncode != 0 and "400" in without.stderr, without.stderr
    # A certificate of another CA (the server's own) is no credential either.
    args, env = client(gitservers, "mtls", cert=False)
    other = git(*args, "-c", f"http.sslCert={gitservers.tls_crt}", "-c", f"http.sslKey={gitservers.tls_key}",
                "ls-remote", gitservers.url("mtls"), env=env, check=False)
    assert other.returncode != 0, other.stdout
    r = requests.get(gitservers.helm_mtls_url + "index.yaml", verify=str(gitservers.ca_file),
                     cert=(str(gitservers.client_cert_file), str(gitservers.client_key_file)), timeout=10)
    assert r.status_code == 200 and "guestbook" in r.text, r


def test_tls_needs_the_right_ca(gitservers):
    wrong = ls_remote(gitservers, "open", ca=gitservers.wrong_ca_file)
    assert wrong.returncode != 0 and "certificate" in wrong.stderr.lower(), wrong.stderr
    system = ls_remote(gitservers, "open", ca="")
    assert system.returncode != 0 and "certificate" in system.stderr.lower(), system.stderr
    # The certificate names localhost too.
    args, env = client(gitservers, "open")
    res = git(*args, "ls-remote", gitservers.url("open").replace("127.0.0.1", "localhost"), env=env, check=False)
    assert_apps_refs(gitservers, res)
    assert "BEGIN CERTIFICATE" in gitservers.ca_pem and gitservers.ca_pem != gitservers.wrong_ca_pem


def test_empty_and_big_repos(gitservers):
    empty = ls_remote(gitservers, "open", "empty.git")
    assert empty.returncode == 0 and empty.stdout == "", (empty.stdout, empty.stderr)
    big = ls_remote(gitservers, "git", "big.git")
    assert big.returncode == 0 and refs_of(big)["refs/heads/main"] == gitservers.big_sha, big.stderr
    packs = sum(p.stat().st_size for p in (gitservers.root / "big.git" / "objects").rglob("*") if p.is_file())
    assert packs > 20 * 1000 * 1000, packs
    missing = ls_remote(gitservers, "open", "missing.git")
    assert missing.returncode != 0, missing.stdout


# ---- clones -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["open", "http", "git", "ssh"])
def test_shallow_clone_of_a_tag(gitservers, kind, tmp_path):
    args, env = client(gitservers, kind)
    dest = tmp_path / "clone"
    git(*args, "clone", "-q", "--depth", "1", "--branch", "v1.0.0", url_of(gitservers, kind), str(dest),
        env=env, timeout=120)
    assert git("rev-parse", "HEAD", cwd=dest).stdout.strip() == gitservers.apps.tags["v1.0.0"]
    assert git("rev-list", "--count", "HEAD", cwd=dest).stdout.strip() == "1"
    assert (dest / ".git" / "shallow").is_file()
    assert "replicas: 1" in (dest / "guestbook" / "deployment.yaml").read_text()
    assert not (dest / "helm-app").exists()


def test_fetch_of_a_commit_by_sha(gitservers, tmp_path):
    """What a server that resolves a revision first and fetches that SHA does (protocol v2)."""
    args, env = client(gitservers, "open")
    repo = tmp_path / "r"
    git("init", "-q", str(repo))
    sha = gitservers.apps.main_commits[1].sha  # no ref names it
    git(*args, "-c", "protocol.version=2", "fetch", "-q", "--depth", "1", gitservers.url("open"), sha,
        cwd=repo, env=env, timeout=120)
    assert git("rev-parse", "FETCH_HEAD", cwd=repo).stdout.strip() == sha
    assert "helm-app/Chart.yaml" in git("ls-tree", "-r", "--name-only", sha, cwd=repo).stdout


# ---- ssh ----------------------------------------------------------------------------------------


def test_ssh_refuses_a_wrong_or_missing_host_key_and_a_wrong_client_key(gitservers, tmp_path):
    wrong_kh = tmp_path / "wrong_known_hosts"
    wrong_kh.write_text(gitservers.ssh_wrong_known_hosts + "\n")
    wrong = ls_remote(gitservers, "ssh", known_hosts=wrong_kh)
    assert wrong.returncode != 0 and "HOST IDENTIFICATION HAS CHANGED" in wrong.stderr, wrong.stderr
    none = ls_remote(gitservers, "ssh", known_hosts=os.devnull)
    assert none.returncode != 0 and "Host key verification failed" in none.stderr, none.stderr
    other_key = gitservers.dir / "ssh" / "other-host"  # a key that authorized_keys does not list
    denied = ls_remote(gitservers, "ssh", key=other_key)
    assert denied.returncode != 0 and "Permission denied" in denied.stderr, denied.stderr
    assert gitservers.ssh_private_key.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert gitservers.ssh_known_hosts.startswith(f"[127.0.0.1]:{gitservers.ssh_port} ssh-ed25519 ")


# ---- Helm repositories --------------------------------------------------------------------------


def _index(gs, url, auth=None):
    r = requests.get(url + "index.yaml", auth=auth, verify=str(gs.ca_file), timeout=10)
    assert r.status_code == 200, (url, r.status_code, r.text[:200])
    return yaml.safe_load(r.text)


def _untar_chart(data, name, version):
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        names = tar.getnames()
        chart = yaml.safe_load(tar.extractfile(f"{name}/Chart.yaml").read())
    assert {f"{name}/Chart.yaml", f"{name}/values.yaml", f"{name}/templates/configmap.yaml"} <= set(names), names
    assert (chart["name"], chart["version"]) == (name, version) and chart["maintainers"], chart


def test_helm_repo_with_basic_auth(gitservers):
    auth = (gitservers.basic_user, gitservers.basic_password)
    index = _index(gitservers, gitservers.helm_auth_url, auth)
    assert {n: [e["version"] for e in es] for n, es in index["entries"].items()} == \
        {n: sorted(v, reverse=True) for n, v in CHARTS.items()}
    for bad in (None, (gitservers.basic_user, "wrong")):
        r = requests.get(gitservers.helm_auth_url + "index.yaml", auth=bad, verify=str(gitservers.ca_file), timeout=10)
        assert r.status_code == 401, (bad, r.status_code)
    entry = index["entries"]["guestbook"][-1]
    assert entry["urls"][0].startswith(gitservers.helm_auth_url), entry
    r = requests.get(entry["urls"][0], verify=str(gitservers.ca_file), timeout=10)
    assert r.status_code == 401
    r = requests.get(entry["urls"][0], auth=auth, verify=str(gitservers.ca_file), timeout=10)
    assert r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == entry["digest"]
    _untar_chart(r.content, "guestbook", entry["version"])


@pytest.mark.parametrize("which", ["helm_url", "helm_http_url"])
def test_helm_repo_anonymous_with_relative_urls(gitservers, which):
    base = getattr(gitservers, which)
    index = _index(gitservers, base)
    entry = next(e for e in index["entries"]["redis"] if e["version"] == "1.0.0")
    assert entry["urls"] == ["redis-1.0.0.tgz"]
    r = requests.get(base + entry["urls"][0], verify=str(gitservers.ca_file), timeout=10)
    assert r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == entry["digest"]
    _untar_chart(r.content, "redis", "1.0.0")
    # Untarred with tar too, as a tool would.
    res = subprocess.run(["tar", "-xzf", "-", "-O", "redis/values.yaml"], input=r.content, capture_output=True,
                         timeout=30)
    assert res.returncode == 0 and b"example/redis" in res.stdout, res.stderr


# ---- the staller ----------------------------------------------------------------------------------


def test_staller_accepts_and_never_answers(gitservers, staller):
    for s in (gitservers.staller, staller):
        before = s.accepted
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as conn:
            conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            conn.settimeout(1.0)
            with pytest.raises(TimeoutError):
                conn.recv(1)
        start = time.monotonic()
        res = subprocess.run(["curl", "-sS", "--max-time", "2", "--cacert", str(gitservers.ca_file),
                              s.url()], capture_output=True, text=True, timeout=30)
        assert res.returncode == 28 and 1.5 < time.monotonic() - start < 10, (res.returncode, res.stderr)
        deadline = time.monotonic() + 5
        while s.accepted < before + 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.accepted >= before + 2
