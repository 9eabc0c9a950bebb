"""Real Git and Helm servers on loopback for the end-to-end tests of repository access (issue 23),
all built and started at test time in a temp dir; test_gitkit.py proves each of them, and each
refusal, with the `git` CLI, curl and ssh alone.

Repositories (built with the `git` CLI under fixed names, emails and dates, so their SHAs are the
same on every machine; `APPS_FILES` etc. below are their contents):
  * `apps.git`: branches `main` (3 commits) and `dev` (main + 1 commit adding `dev-only/`), tags
    `v1.0.0` (lightweight, on main's 1st commit) and `v1.1.0` (annotated, on main's 2nd commit).
    main holds `guestbook/` (deployment.yaml, service.yaml, multi.yaml with two documents,
    config.json, README.md, extra/cm.yaml), `kustomize-app/` (namePrefix, nameSuffix, two images,
    resources), `helm-app/` (Chart.yaml, values.yaml, values-prod.yaml, templates/) and
    `nested/deep/app/app.yaml`. The guestbook Deployment has 1 replica at v1.0.0, 2 on main.
    `AppsRepo` (`gitservers.apps`) holds every SHA, message, author, committer and date.
  * `empty.git`: no commits at all.
  * `big.git`: one commit with a ~20 MB incompressible blob (`big_repo()`, os.urandom in 1 MB
    chunks), for size limits.
  * `many_refs_repo(path, refs=1000, apps=100)`: a generator for benchmarks (git fast-import; a
    second). Made under `gitservers.root`, it is served by every server below at once.
  The bare repos allow fetching any reachable SHA (`uploadpack.allowReachableSHA1InWant`) and
  partial clone filters, as GitHub and GitLab do.

Servers (`start_gitservers(workdir)` or the session fixture `gitservers` -> `GitServers`; every
process runs in a process group of its own, stopped by that id (its PID) at teardown, everything binds 127.0.0.1 on free ports):
  * one nginx (its own prefix, conf, pid, logs and temp paths) with three server blocks:
    - https (private CA `ca_file`; certificate for 127.0.0.1 and localhost): smart-HTTP git via
      `git http-backend` behind `fcgiwrap` (on a unix socket in the temp dir; protocol v2: the
      `Git-Protocol` header reaches the CGI) at `/open/` (anonymous), `/basic/` (HTTP basic, user
      `BASIC_USER`/`BASIC_PASSWORD`), `/bearer/` (only `Authorization: Bearer BEARER_TOKEN`, else
      401 with `WWW-Authenticate: Bearer`), and Helm repositories `/charts/` (anonymous, relative
      chart URLs as `helm repo index` writes by default) and `/charts-auth/` (basic auth, absolute
      https chart URLs as `helm repo index --url` writes);
    - https with `ssl_verify_client on` (client CA `client_ca_file`; `client_cert_file` and
      `client_key_file` are the credential): `/open/` and `/charts/`;
    - plain http: `/open/`, `/basic/` (HTTP basic as above, credentials in clear text), `/charts/`
      and `/charts-auth/` (basic auth).
  * `git daemon --export-all` (git:// URLs) over the same root.
  * OpenSSH `sshd` as the current user (root in CI: PermitRootLogin prohibit-password, and
    /run/sshd is created when missing), public key only: `ssh_private_key` (OpenSSH PEM text),
    `ssh_known_hosts` (the right line), `ssh_wrong_known_hosts` (same host, another key). URLs are
    `ssh://<user>@127.0.0.1:<port>/<abs path>/apps.git`. Run as root, sshd (without PAM) refuses
    a locked root account (`!` in /etc/shadow); run as another user it cannot read /etc/shadow and
    lets a locked account in.
  * a staller (`Staller`): a thread that accepts TCP connections and never answers.

Fixtures (in conftest.py, so that a session starts the servers once, whichever modules use them):
`gitservers` (session; GitServers) and `staller` (one test; a Staller of its own).
`gitservers.url(kind, repo="apps.git")` gives a repository's URL, kind one of `KINDS`;
`git_env()` and `ssh_command()` make a client environment that reads no user or system config:

    def test_example(gitservers):
        env = git_env(GIT_SSH_COMMAND=ssh_command(gitservers.ssh_key_file, known_hosts_path))
        git("ls-remote", gitservers.url("ssh"), env=env)   # known_hosts_path holds ssh_known_hosts
        git("-c", f"http.sslCAInfo={gitservers.ca_file}", "ls-remote", gitservers.url("open", "empty.git"))
        gitservers.apps.main, gitservers.apps.tags["v1.0.0"], gitservers.apps.commit(sha).author
"""

import base64
import gzip
import hashlib
import io
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import tarfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from conftest import require_tool

SSHD = "/usr/sbin/sshd"
FCGIWRAP = "/usr/sbin/fcgiwrap"
STARTUP = 20  # seconds for a server to listen
STOP = 10  # seconds for a server to exit after SIGTERM
ATTEMPTS = 3  # a port picked free may be taken before a server binds it: start over

BASIC_USER = "alice"
BASIC_PASSWORD = "gitkit-alice-pw"
BEARER_TOKEN = "gitkit-bearer-token-3f9c"
KINDS = ("open", "basic", "bearer", "mtls", "http", "http-basic", "git", "ssh")

# ---- repository contents ----------------------------------------------------------------------

AUTHOR = ("Alice Author", "alice@example.com")
COMMITTER = ("Carl Committer", "carl@example.com")
EPOCH = 1704067200  # 2024-01-01T00:00:00Z; commit i is authored EPOCH + i hours, committed 60 s later

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: guestbook-ui
spec:
  replicas: {replicas}
  revisionHistoryLimit: 3
  selector:
    matchLabels:
      app: guestbook-ui
  template:
    metadata:
      labels:
        app: guestbook-ui
    spec:
      containers:
        - name: guestbook-ui
          image: gcr.io/heptio-images/ks-guestbook-demo:0.2
          ports:
            - containerPort: 80
"""

GUESTBOOK_V1 = {
    "guestbook/deployment.yaml": DEPLOYMENT.format(replicas=1),
    "guestbook/service.yaml": """\
apiVersion: v1
kind: Service
metadata:
  name: guestbook-ui
spec:
  ports:
    - port: 80
      targetPort: 80
  selector:
    app: guestbook-ui
""",
    "guestbook/README.md": "# guestbook\n\nPlain manifests. This file is not one.\n",
}

HELM_AND_KUSTOMIZE = {
    "kustomize-app/kustomization.yaml": """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namePrefix: pre-
nameSuffix: -suf
images:
  - name: nginx
    newName: registry.example.com/mirror/nginx
    newTag: "1.25.3"
  - name: busybox
    newName: registry.example.com/mirror/busybox
    newTag: "1.36"
resources:
  - deploy.yaml
""",
    "kustomize-app/deploy.yaml": """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      initContainers:
        - name: init
          image: busybox
      containers:
        - name: web
          image: nginx
""",
    "helm-app/Chart.yaml": """\
apiVersion: v2
name: helm-guestbook
description: A Helm chart in a Git repository
type: application
version: 0.1.0
appVersion: "1.0"
""",
    "helm-app/values.yaml": """\
replicaCount: 1
image:
  repository: gcr.io/heptio-images/ks-guestbook-demo
  tag: "0.2"
  pullPolicy: IfNotPresent
service:
  type: ClusterIP
  port: 80
ingress:
  enabled: false
  hosts:
    - guestbook.example.com
    - guestbook.example.org
nameOverride: ""
""",
    "helm-app/values-prod.yaml": """\
replicaCount: 3
ingress:
  enabled: true
""",
    "helm-app/templates/deployment.yaml": """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-{{ .Chart.Name }}
spec:
  replicas: {{ .Values.replicaCount }}
  selector:
    matchLabels:
      app: {{ .Release.Name }}
  template:
    metadata:
      labels:
        app: {{ .Release.Name }}
    spec:
      containers:
        - name: {{ .Chart.Name }}
          image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
          imagePullPolicy: {{ .Values.image.pullPolicy }}
""",
}

MORE_MANIFESTS = {
    "guestbook/deployment.yaml": DEPLOYMENT.format(replicas=2),
    "guestbook/multi.yaml": """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: guestbook-first
data:
  which: first
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: guestbook-second
data:
  which: second
""",
    "guestbook/config.json": """\
{
  "apiVersion": "v1",
  "kind": "ConfigMap",
  "metadata": {"name": "guestbook-json"},
  "data": {"format": "json"}
}
""",
    "guestbook/extra/cm.yaml": """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: guestbook-extra
data:
  nested: "true"
""",
    "nested/deep/app/app.yaml": """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: deep-app
data:
  depth: "3"
""",
}

DEV_ONLY = {
    "dev-only/cm.yaml": """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: dev-only
data:
  branch: dev
""",
}

# (message, files written) per commit; main gets the first three, dev the fourth on top of them.
COMMITS = [
    ("Add the guestbook app\n", GUESTBOOK_V1),
    ("Add a Kustomize app and a Helm app\n\nBoth in their own directories.\n", HELM_AND_KUSTOMIZE),
    ("Add multi-document, JSON and nested manifests\n\nAnd two guestbook replicas.\n", MORE_MANIFESTS),
    ("Add an app that only dev has\n", DEV_ONLY),
]
V1_1_0_MESSAGE = "Release 1.1.0\n\nKustomize and Helm apps.\n"

# The files of main's head (path -> text).
APPS_FILES = {**GUESTBOOK_V1, **HELM_AND_KUSTOMIZE, **MORE_MANIFESTS}
# Helm repository charts: name -> versions.
CHARTS = {"guestbook": ["0.1.0", "0.2.0"], "redis": ["1.0.0", "1.1.0", "1.2.0"]}


@dataclass
class Commit:
    sha: str
    message: str  # full message, trailing newline included
    author_name: str
    author_email: str
    author_time: int  # seconds since the epoch (the zone is +0000)
    committer_name: str
    committer_email: str
    committer_time: int

    @property
    def subject(self):
        return self.message.split("\n", 1)[0]

    @property
    def author(self):
        """As `git log --format='%an <%ae>'` shows it (and Argo CD's RevisionMetadata.author)."""
        return f"{self.author_name} <{self.author_email}>"

    @property
    def author_date(self):
        """RFC 3339 in UTC, e.g. 2024-01-01T01:00:00Z."""
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.author_time))


@dataclass
class AppsRepo:
    path: Path
    main: str = ""  # main's head
    dev: str = ""  # dev's head
    tags: dict = field(default_factory=dict)  # tag name -> the commit it names (peeled)
    tag_objects: dict = field(default_factory=dict)  # annotated tag name -> the tag object's SHA
    tag_messages: dict = field(default_factory=dict)  # annotated tag name -> its message
    main_commits: list = field(default_factory=list)  # Commit, oldest first
    dev_commits: list = field(default_factory=list)  # the commits dev has and main has not

    def commit(self, sha):
        return next(c for c in self.main_commits + self.dev_commits if c.sha == sha)


# ---- running git ------------------------------------------------------------------------------


def git_env(**extra):
    """An environment for the `git` CLI that reads no user or system config and never prompts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "SSH_ASKPASS"))}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0",
               GIT_ASKPASS="", LC_ALL="C")
    env.update(extra)
    return env


def git(*args, cwd=None, env=None, timeout=60, check=True, input=None):
    """Runs `git` (text mode); with check, fails the test with git's stderr on a non-zero status."""
    res = subprocess.run(["git", *args], cwd=cwd, env=env or git_env(), capture_output=True, text=True,
                         timeout=timeout, input=input, stdin=None if input is not None else subprocess.DEVNULL)
    if check and res.returncode != 0:
        pytest.fail(f"git {' '.join(args)} failed ({res.returncode}): {res.stderr}")
    return res


def ssh_command(key_file, known_hosts_file=os.devnull, strict="yes"):
    """A GIT_SSH_COMMAND that reads no ssh config and uses only `key_file` and `known_hosts_file`."""
    return " ".join(shlex.quote(a) for a in [
        "ssh", "-F", os.devnull, "-i", str(key_file), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
        "-o", f"UserKnownHostsFile={known_hosts_file}", "-o", f"GlobalKnownHostsFile={os.devnull}",
        "-o", f"StrictHostKeyChecking={strict}", "-o", "ConnectTimeout=10"])


def _build_env(when):
    name, email = AUTHOR
    cname, cemail = COMMITTER
    return git_env(GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email, GIT_AUTHOR_DATE=f"@{when} +0000",
                   GIT_COMMITTER_NAME=cname, GIT_COMMITTER_EMAIL=cemail, GIT_COMMITTER_DATE=f"@{when + 60} +0000")


def _init_bare(path):
    path = Path(path)
    git("init", "-q", "--bare", "--initial-branch=main", str(path))
    for key, value in [("uploadpack.allowReachableSHA1InWant", "true"), ("uploadpack.allowFilter", "true"),
                       ("http.receivepack", "false")]:
        git("config", key, value, cwd=path)
    return path


def build_apps_repo(root):
    """Builds `root/apps.git` (see the module's docstring) and returns its AppsRepo."""
    require_tool("git")
    root = Path(root)
    bare = _init_bare(root / "apps.git")
    work = root / "apps-work"
    git("init", "-q", "--initial-branch=main", str(work))
    repo = AppsRepo(path=bare)

    def commit(i, message, files):
        for rel, text in files.items():
            p = work / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        when = EPOCH + (i + 1) * 3600
        git("add", "-A", cwd=work)
        git("-c", "commit.gpgsign=false", "commit", "-q", "--no-verify", "-F", "-", cwd=work,
            env=_build_env(when), input=message)
        sha = git("rev-parse", "HEAD", cwd=work).stdout.strip()
        return Commit(sha, message, *AUTHOR, when, *COMMITTER, when + 60)

    for i, (message, files) in enumerate(COMMITS[:3]):
        repo.main_commits.append(commit(i, message, files))
        if i == 0:
            git("tag", "v1.0.0", cwd=work)
        if i == 1:
            git("-c", "tag.gpgsign=false", "tag", "-a", "v1.1.0", "-F", "-", cwd=work,
                env=_build_env(EPOCH + 2 * 3600 + 120), input=V1_1_0_MESSAGE)
    git("checkout", "-q", "-b", "dev", cwd=work)
    repo.dev_commits.append(commit(3, *COMMITS[3]))
    git("push", "-q", str(bare), "main", "dev", "v1.0.0", "v1.1.0", cwd=work)
    shutil.rmtree(work)

    repo.main = git("rev-parse", "main", cwd=bare).stdout.strip()
    repo.dev = git("rev-parse", "dev", cwd=bare).stdout.strip()
    for tag in ("v1.0.0", "v1.1.0"):
        repo.tags[tag] = git("rev-parse", f"{tag}^{{commit}}", cwd=bare).stdout.strip()
    repo.tag_objects["v1.1.0"] = git("rev-parse", "v1.1.0", cwd=bare).stdout.strip()
    repo.tag_messages["v1.1.0"] = V1_1_0_MESSAGE
    assert repo.main == repo.main_commits[-1].sha and repo.dev == repo.dev_commits[-1].sha
    return repo


def empty_repo(path):
    """A bare repo with no commits (ls-remote lists nothing)."""
    return _init_bare(path)


def _fast_import(path, chunks, timeout=120):
    """Feeds `chunks` (bytes) to `git fast-import` in the bare repo `path`."""
    proc = subprocess.Popen(["git", "fast-import", "--quiet", "--done"], cwd=path, env=git_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for chunk in chunks:
            proc.stdin.write(chunk)
        proc.stdin.write(b"done\n")
        proc.stdin.close()
        err = proc.stderr.read()
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
    if proc.returncode != 0:
        pytest.fail(f"git fast-import failed ({proc.returncode}): {err.decode(errors='replace')}")


def _data(payload):
    return b"data %d\n%s\n" % (len(payload), payload)


def _who(kind, when):
    name, email = AUTHOR if kind == "author" else COMMITTER
    return f"{kind} {name} <{email}> {when} +0000\n".encode()


def big_repo(path, size_mb=20):
    """A bare repo whose `main` has one commit with `blob.bin`: `size_mb` MB of os.urandom (made in
    1 MB chunks; incompressible). Returns main's SHA (random content: it differs on every call)."""
    path = _init_bare(path)
    size = size_mb * 1024 * 1024

    def chunks():
        yield b"blob\nmark :1\ndata %d\n" % size
        for _ in range(size_mb):
            yield os.urandom(1024 * 1024)
        yield b"\ncommit refs/heads/main\n" + _who("author", EPOCH) + _who("committer", EPOCH)
        yield _data(b"Add a big incompressible blob\n")
        yield b"M 100644 :1 blob.bin\nM 100644 inline README.md\n" + _data(b"# big\n") + b"\n"

    _fast_import(path, chunks())
    return git("rev-parse", "main", cwd=path).stdout.strip()


def many_refs_repo(path, refs=1000, apps=100):
    """A bare repo for benchmarks: `apps` app directories `apps/app-NNN/cm.yaml` on `main`, and
    `refs` refs in all: main, branches `branch-NNNN` (one commit each on top of main, changing
    `apps/app-<i % apps>/cm.yaml`) and tags `tag-NNNN` on main (lightweight and annotated in turn),
    about half of each. Built with one `git fast-import` (about a second). Returns {ref: sha} as
    `git show-ref` gives it (annotated tags: the tag object)."""
    path = _init_bare(path)
    n_branches = refs // 2 - 1  # and main
    n_tags = refs - n_branches - 1

    def cm(name, value):
        return (f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n").encode()

    def chunks():
        ops = []
        for a in range(apps):
            yield b"blob\nmark :%d\n" % (a + 1) + _data(cm(f"app-{a:03d}", "main"))
            ops.append(b"M 100644 :%d apps/app-%03d/cm.yaml\n" % (a + 1, a))
        base = apps + 1
        yield (b"commit refs/heads/main\nmark :%d\n" % base + _who("author", EPOCH) + _who("committer", EPOCH)
               + _data(b"Add %d apps\n" % apps) + b"".join(ops) + b"\n")
        for b in range(n_branches):
            when = EPOCH + b + 1
            yield (b"commit refs/heads/branch-%04d\n" % b + _who("author", when) + _who("committer", when)
                   + _data(b"Change app %d on branch %d\n" % (b % apps, b)) + b"from :%d\n" % base
                   + b"M 100644 inline apps/app-%03d/cm.yaml\n" % (b % apps)
                   + _data(cm(f"app-{b % apps:03d}", f"branch-{b}")) + b"\n")
        for t in range(n_tags):
            if t % 2:
                yield (b"tag tag-%04d\nfrom :%d\n" % (t, base) + _who("tagger", EPOCH)
                       + _data(b"Tag %d\n" % t))  # a tag has no optional LF after its data
            else:
                yield b"reset refs/tags/tag-%04d\nfrom :%d\n\n" % (t, base)

    _fast_import(path, chunks())
    git("pack-refs", "--all", cwd=path)
    out = git("show-ref", cwd=path).stdout
    return {ref: sha for sha, ref in (line.split(" ", 1) for line in out.splitlines())}


# ---- Helm repositories ------------------------------------------------------------------------


def chart_archive(name, version):
    """A chart .tgz (bytes; the same bytes on every call): <name>/Chart.yaml, values.yaml and
    templates/configmap.yaml, as `helm package` lays them out."""
    files = {
        "Chart.yaml": yaml.safe_dump({
            "apiVersion": "v2", "name": name, "version": version, "appVersion": f"{version}-app",
            "description": f"The {name} chart, version {version}", "type": "application",
            "maintainers": [{"name": "Gitkit Maintainer", "email": "charts@example.com"}]}, sort_keys=False),
        "values.yaml": f"replicaCount: 1\nimage:\n  repository: example/{name}\n  tag: \"{version}\"\n",
        "templates/configmap.yaml": ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n"
                                     "  name: {{ .Release.Name }}-" + name + "\ndata:\n"
                                     "  version: \"" + version + "\"\n"),
    }
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}/{rel}")
            info.size, info.mtime, info.mode = len(data), EPOCH, 0o644
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def helm_repo(d, base_url=None):
    """Writes a Helm repository into `d`: every chart of CHARTS as `<name>-<version>.tgz` and an
    index.yaml listing them, with `urls` relative to the repository (no `base_url`) or absolute."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    entries = {}
    for name, versions in CHARTS.items():
        for version in reversed(versions):  # newest first, as helm writes it
            data = chart_archive(name, version)
            fname = f"{name}-{version}.tgz"
            (d / fname).write_bytes(data)
            entries.setdefault(name, []).append({
                "apiVersion": "v2", "name": name, "version": version, "appVersion": f"{version}-app",
                "description": f"The {name} chart, version {version}", "type": "application",
                "maintainers": [{"name": "Gitkit Maintainer", "email": "charts@example.com"}],
                "created": "2024-01-01T00:00:00Z", "digest": hashlib.sha256(data).hexdigest(),
                "urls": [f"{base_url.rstrip('/')}/{fname}" if base_url else fname]})
    index = {"apiVersion": "v1", "entries": entries, "generated": "2024-01-01T00:00:00Z"}
    (d / "index.yaml").write_text(yaml.safe_dump(index, sort_keys=False))
    return d


# ---- TLS and SSH material ---------------------------------------------------------------------


def _openssl(*args, cwd):
    res = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        pytest.fail(f"openssl {' '.join(args)} failed: {res.stderr}")
    return res.stdout


def _key(d, name):
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", f"{name}.key", cwd=d)
    os.chmod(d / f"{name}.key", 0o600)
    return d / f"{name}.key"


def make_ca(d, name, cn):
    """A self-signed CA: (crt, key) paths."""
    key = _key(d, name)
    _openssl("req", "-x509", "-new", "-key", key.name, "-days", "3", "-subj", f"/CN={cn}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-out", f"{name}.crt", cwd=d)
    return d / f"{name}.crt", key


def make_leaf(d, name, cn, ca, usage, sans=None):
    """A certificate signed by `ca` (crt, key): usage serverAuth or clientAuth."""
    key = _key(d, name)
    _openssl("req", "-new", "-key", key.name, "-subj", f"/CN={cn}", "-out", f"{name}.csr", cwd=d)
    ext = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature",
           f"extendedKeyUsage={usage}", "subjectKeyIdentifier=hash", "authorityKeyIdentifier=keyid"]
    if sans:
        ext.append(f"subjectAltName={sans}")
    (d / f"{name}.ext").write_text("\n".join(ext) + "\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", ca[0].name, "-CAkey", ca[1].name, "-CAcreateserial",
             "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=d)
    return d / f"{name}.crt", key


def ssh_key(d, name):
    """An ed25519 key pair without passphrase: (private key path, public key text)."""
    require_tool("ssh-keygen")
    key = d / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"gitkit-{name}", "-f", str(key)],
                   check=True, capture_output=True, timeout=60)
    return key, Path(f"{key}.pub").read_text().strip()


# ---- processes --------------------------------------------------------------------------------


class Procs:
    """Processes started here, each in a process group of its own, stopped in reverse order: SIGTERM
    to the group whose id is the started PID (fcgiwrap's preforked workers, and the per-connection
    children of git daemon and sshd, outlive their parent otherwise), then SIGKILL to what is left."""

    def __init__(self):
        self.procs = []

    def start(self, cmd, log, env=None, cwd=None):
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, cwd=cwd, start_new_session=True)
        self.procs.append(proc)
        return proc

    @staticmethod
    def _signal_group(proc, sig):
        try:
            os.killpg(proc.pid, sig)
            return True
        except (ProcessLookupError, PermissionError):
            return False  # the group is gone

    def stop(self, proc):
        self._signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=STOP)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        deadline = time.monotonic() + STOP
        while self._signal_group(proc, 0) and time.monotonic() < deadline:
            time.sleep(0.05)  # the group's other members are exiting
        self._signal_group(proc, signal.SIGKILL)
        if proc in self.procs:
            self.procs.remove(proc)

    def stop_all(self):
        while self.procs:
            self.stop(self.procs[-1])


def free_ports(n):
    """`n` distinct loopback ports, bound at once and released for the servers to take."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def _listening(port, proc, timeout=STARTUP):
    """True once something accepts on 127.0.0.1:port; False when `proc` exits first or on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


def _tail(path, n=3000):
    try:
        return Path(path).read_text(errors="replace")[-n:]
    except OSError:
        return ""


def _start_retrying(procs, name, start, log):
    """Runs `start()` -> (proc, ports) until every port listens, at most ATTEMPTS times (a port picked
    free may have been taken meanwhile)."""
    for _ in range(ATTEMPTS):
        proc, ports = start()
        if all(_listening(p, proc) for p in ports):
            return proc, ports
        procs.stop(proc)
    pytest.fail(f"{name} did not listen after {ATTEMPTS} attempts: {_tail(log)}")


# ---- the staller ------------------------------------------------------------------------------


class Staller:
    """Accepts TCP connections on a loopback port and never answers (nor closes them) until stopped:
    a server that hangs, for deadline tests. `port`; `stop()` closes everything (bounded)."""

    MAX_LIFETIME = 3600  # seconds; the accept loop ends by then even if nobody stops it

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.conns = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"staller-{self.port}", daemon=True)
        self._thread.start()

    def _run(self):
        deadline = time.monotonic() + self.MAX_LIFETIME
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            self.accepted += 1
            self.conns.append(conn)

    def url(self, scheme="https", path="/apps.git"):
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()
        for conn in self.conns:
            conn.close()
        self.conns.clear()


# ---- the servers ------------------------------------------------------------------------------

NGINX_CONF = """\
{user}
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log {d}/access.log;
  client_body_temp_path {d}/tmp/body; proxy_temp_path {d}/tmp/proxy; fastcgi_temp_path {d}/tmp/fcgi;
  uwsgi_temp_path {d}/tmp/uwsgi; scgi_temp_path {d}/tmp/scgi;
  client_max_body_size 0;
  types {{ text/yaml yaml yml; application/gzip tgz; }}
  default_type application/octet-stream;
  ssl_certificate {tls_crt}; ssl_certificate_key {tls_key};
  ssl_protocols TLSv1.2 TLSv1.3;
  server {{
    listen 127.0.0.1:{https_port} ssl;
{open}
    location ~ ^/basic(?<gitpath>/.*)$ {{
      auth_basic "gitkit"; auth_basic_user_file {htpasswd};
{git}
    }}
    location ~ ^/bearer(?<gitpath>/.*)$ {{
      if ($http_authorization != "Bearer {token}") {{
        add_header WWW-Authenticate 'Bearer realm="gitkit"' always;
        return 401;
      }}
{git}
    }}
    location /charts/ {{ root {helm}; }}
    location /charts-auth/ {{ root {helm}; auth_basic "gitkit charts"; auth_basic_user_file {htpasswd}; }}
  }}
  server {{
    listen 127.0.0.1:{mtls_port} ssl;
    ssl_client_certificate {client_ca}; ssl_verify_client on; ssl_verify_depth 2;
{open}
    location /charts/ {{ root {helm}; }}
  }}
  server {{
    listen 127.0.0.1:{http_port};
{open}
    location ~ ^/basic(?<gitpath>/.*)$ {{
      auth_basic "gitkit"; auth_basic_user_file {htpasswd};
{git}
    }}
    location /charts/ {{ root {helm}; }}
    location /charts-auth/ {{ root {helm}; auth_basic "gitkit charts"; auth_basic_user_file {htpasswd}; }}
  }}
}}
"""

GIT_FASTCGI = """\
      fastcgi_pass unix:{sock};
      fastcgi_param SCRIPT_FILENAME {backend};
      fastcgi_param GIT_PROJECT_ROOT {root};
      fastcgi_param GIT_HTTP_EXPORT_ALL 1;
      fastcgi_param GIT_PROTOCOL $http_git_protocol if_not_empty;
      fastcgi_param PATH_INFO $gitpath;
      fastcgi_param QUERY_STRING $query_string;
      fastcgi_param REQUEST_METHOD $request_method;
      fastcgi_param CONTENT_TYPE $content_type;
      fastcgi_param CONTENT_LENGTH $content_length;
      fastcgi_param REMOTE_USER $remote_user;
      fastcgi_param REMOTE_ADDR $remote_addr;
      fastcgi_param SERVER_PROTOCOL $server_protocol;
      fastcgi_param HTTP_CONTENT_ENCODING $http_content_encoding;
      fastcgi_buffering off;
      fastcgi_read_timeout 120s;"""

SSHD_CONFIG = """\
ListenAddress 127.0.0.1
Port {port}
HostKey {host_key}
PidFile {d}/sshd.pid
AuthorizedKeysFile {authorized_keys}
AllowUsers {user}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitRootLogin {root_login}
AcceptEnv GIT_PROTOCOL
X11Forwarding no
AllowTcpForwarding no
AllowAgentForwarding no
PermitTTY no
PrintMotd no
LogLevel VERBOSE
"""


class GitServers:
    """Every server of this kit, running; see the module's docstring. Attributes: `root` (the served
    directory), `apps` (AppsRepo), `big_sha`, ports (`https_port`, `mtls_port`, `http_port`,
    `daemon_port`, `ssh_port`, `staller`.port), credentials and their files (`ca_pem`/`ca_file`,
    `wrong_ca_pem`/`wrong_ca_file`, `client_ca_file`, `client_cert_pem`/`client_cert_file`,
    `client_key_pem`/`client_key_file`, `basic_user`, `basic_password`, `bearer_token`, `ssh_user`,
    `ssh_private_key`/`ssh_key_file`, `ssh_known_hosts`, `ssh_wrong_known_hosts`), Helm repository
    URLs (`helm_url`, `helm_auth_url`, `helm_mtls_url`, `helm_http_url`, `helm_http_auth_url`), and
    `logs()`."""

    def __init__(self, workdir):
        for tool in ("git", "nginx", "openssl", "ssh-keygen"):
            require_tool(tool)
        for path in (SSHD, FCGIWRAP):
            if not os.access(path, os.X_OK):
                pytest.fail(f"{path} is not installed (bash .ci/test-all installs it)")
        self.dir = Path(workdir)
        self.procs = Procs()
        self.staller = None
        self.ssh_user = pwd.getpwuid(os.geteuid()).pw_name
        self.basic_user, self.basic_password, self.bearer_token = BASIC_USER, BASIC_PASSWORD, BEARER_TOKEN
        try:
            self._make_repos()
            self._make_credentials()
            self._start_fcgiwrap()
            self._start_nginx()
            self._start_daemon()
            self._start_sshd()
            self.staller = Staller()
        except BaseException:
            self.stop()
            raise

    # -- material --

    def _make_repos(self):
        self.root = self.dir / "repos"
        self.root.mkdir(parents=True)
        self.apps = build_apps_repo(self.root)
        empty_repo(self.root / "empty.git")
        self.big_sha = big_repo(self.root / "big.git")

    def _make_credentials(self):
        t = self.dir / "tls"
        t.mkdir()
        ca = make_ca(t, "ca", "gitkit test CA")
        wrong = make_ca(t, "wrong-ca", "gitkit unrelated CA")
        client_ca = make_ca(t, "client-ca", "gitkit client CA")
        self.tls_crt, self.tls_key = make_leaf(t, "server", "localhost", ca, "serverAuth",
                                               "DNS:localhost,IP:127.0.0.1")
        self.client_cert_file, self.client_key_file = make_leaf(t, "client", "gitkit-client", client_ca,
                                                                "clientAuth")
        self.ca_file, self.wrong_ca_file, self.client_ca_file = ca[0], wrong[0], client_ca[0]
        self.ca_pem, self.wrong_ca_pem = self.ca_file.read_text(), self.wrong_ca_file.read_text()
        self.client_ca_pem = self.client_ca_file.read_text()
        self.client_cert_pem, self.client_key_pem = self.client_cert_file.read_text(), self.client_key_file.read_text()
        hashed = _openssl("passwd", "-apr1", BASIC_PASSWORD, cwd=t).strip()
        self.htpasswd = t / "htpasswd"
        self.htpasswd.write_text(f"{BASIC_USER}:{hashed}\n")

        s = self.dir / "ssh"
        s.mkdir()
        self.ssh_host_key, self.ssh_host_pub = ssh_key(s, "host")
        self.ssh_key_file, client_pub = ssh_key(s, "client")
        _, self.ssh_other_pub = ssh_key(s, "other-host")
        self.ssh_private_key = self.ssh_key_file.read_text()
        self.authorized_keys = s / "authorized_keys"
        self.authorized_keys.write_text(client_pub + "\n")

    # -- servers --

    def _start_fcgiwrap(self):
        d = self.dir / "fcgiwrap"
        d.mkdir()
        self.fcgi_sock = d / "fcgiwrap.sock"
        self.http_backend = Path(git("--exec-path").stdout.strip()) / "git-http-backend"
        log = d / "fcgiwrap.log"
        proc = self.procs.start([FCGIWRAP, "-f", "-c", "4", "-p", str(self.http_backend), "-s",
                                 f"unix:{self.fcgi_sock}"], log, env=git_env(), cwd=d)
        deadline = time.monotonic() + STARTUP
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.settimeout(0.5)
                    s.connect(str(self.fcgi_sock))
                    return
            except OSError:
                time.sleep(0.05)
        pytest.fail(f"fcgiwrap did not listen on {self.fcgi_sock}: {_tail(log)}")

    def _start_nginx(self):
        d = self.dir / "nginx"
        (d / "tmp").mkdir(parents=True)
        helm = d / "helm"
        conf = d / "nginx.conf"
        log = d / "error.log"
        git_block = GIT_FASTCGI.format(sock=self.fcgi_sock, backend=self.http_backend, root=self.root)
        open_block = f"    location ~ ^/open(?<gitpath>/.*)$ {{\n{git_block}\n    }}"

        def start():
            self.https_port, self.mtls_port, self.http_port = free_ports(3)
            self.helm_url = f"https://127.0.0.1:{self.https_port}/charts/"
            self.helm_auth_url = f"https://127.0.0.1:{self.https_port}/charts-auth/"
            self.helm_mtls_url = f"https://127.0.0.1:{self.mtls_port}/charts/"
            self.helm_http_url = f"http://127.0.0.1:{self.http_port}/charts/"
            self.helm_http_auth_url = f"http://127.0.0.1:{self.http_port}/charts-auth/"
            helm_repo(helm / "charts")
            helm_repo(helm / "charts-auth", base_url=self.helm_auth_url)
            # Workers of a root master run as nobody unless told: they read the charts and htpasswd.
            user = f"user {self.ssh_user};" if os.geteuid() == 0 else ""
            conf.write_text(NGINX_CONF.format(
                user=user, d=d, tls_crt=self.tls_crt, tls_key=self.tls_key, https_port=self.https_port,
                mtls_port=self.mtls_port, http_port=self.http_port, open=open_block, git=git_block,
                htpasswd=self.htpasswd, token=BEARER_TOKEN, helm=helm, client_ca=self.client_ca_file))
            check = subprocess.run(["nginx", "-t", "-q", "-p", str(d), "-c", str(conf)], capture_output=True,
                                   text=True, timeout=30)
            if check.returncode != 0:
                pytest.fail(f"nginx -t: {check.stderr}")
            proc = self.procs.start(["nginx", "-p", str(d), "-c", str(conf), "-g", "daemon off;"], d / "stdout.log")
            return proc, (self.https_port, self.mtls_port, self.http_port)

        self.nginx_log = log
        _start_retrying(self.procs, "nginx", start, log)

    def _start_daemon(self):
        d = self.dir / "daemon"
        d.mkdir()
        log = d / "daemon.log"

        def start():
            (self.daemon_port,) = free_ports(1)
            proc = self.procs.start(["git", "daemon", "--reuseaddr", "--export-all", "--informative-errors",
                                     f"--base-path={self.root}", "--listen=127.0.0.1", f"--port={self.daemon_port}",
                                     "--verbose", str(self.root)], log, env=git_env())
            return proc, (self.daemon_port,)

        self.daemon_log = log
        _start_retrying(self.procs, "git daemon", start, log)

    def _start_sshd(self):
        d = self.dir / "sshd"
        d.mkdir()
        conf = d / "sshd_config"
        log = d / "sshd.log"
        root = os.geteuid() == 0
        if root and not os.path.isdir("/run/sshd"):
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory

        def start():
            (self.ssh_port,) = free_ports(1)
            conf.write_text(SSHD_CONFIG.format(
                port=self.ssh_port, host_key=self.ssh_host_key, d=d, authorized_keys=self.authorized_keys,
                user=self.ssh_user, root_login="prohibit-password" if root else "no"))
            check = subprocess.run([SSHD, "-t", "-f", str(conf)], capture_output=True, text=True, timeout=30)
            if check.returncode != 0:
                pytest.fail(f"sshd -t: {check.stderr}")
            proc = self.procs.start([SSHD, "-D", "-e", "-f", str(conf)], log, env=git_env())
            return proc, (self.ssh_port,)

        self.sshd_log = log
        _start_retrying(self.procs, "sshd", start, log)
        host_key = " ".join(self.ssh_host_pub.split()[:2])
        other_key = " ".join(self.ssh_other_pub.split()[:2])
        self.ssh_known_hosts = f"[127.0.0.1]:{self.ssh_port} {host_key}"
        self.ssh_wrong_known_hosts = f"[127.0.0.1]:{self.ssh_port} {other_key}"

    # -- use --

    def url(self, kind, repo="apps.git"):
        """The URL of `repo` (a path under `root`) for a server `kind` of KINDS."""
        return {
            "open": f"https://127.0.0.1:{self.https_port}/open/{repo}",
            "basic": f"https://127.0.0.1:{self.https_port}/basic/{repo}",
            "bearer": f"https://127.0.0.1:{self.https_port}/bearer/{repo}",
            "mtls": f"https://127.0.0.1:{self.mtls_port}/open/{repo}",
            "http": f"http://127.0.0.1:{self.http_port}/open/{repo}",
            "http-basic": f"http://127.0.0.1:{self.http_port}/basic/{repo}",
            "git": f"git://127.0.0.1:{self.daemon_port}/{repo}",
            "ssh": f"ssh://{self.ssh_user}@127.0.0.1:{self.ssh_port}{self.root / repo}",
        }[kind]

    def basic_auth_header(self, user=BASIC_USER, password=BASIC_PASSWORD):
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def logs(self):
        """The servers' logs (for a failing test's message)."""
        return "\n".join(f"--- {name}\n{_tail(path)}" for name, path in [
            ("nginx", self.nginx_log), ("git daemon", self.daemon_log), ("sshd", self.sshd_log)])

    def stop(self):
        if self.staller is not None:
            self.staller.stop()
        self.procs.stop_all()


def start_gitservers(workdir):
    """Builds the repositories and starts every server under `workdir`; call `.stop()` when done.
    (conftest.py's session fixture `gitservers` does this once per session.)"""
    return GitServers(workdir)
