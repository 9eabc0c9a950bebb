"""Upstream's `argocd` CLI (Argo CD v3.2, built by tools/upstream/build.sh) as a client of tiphys:
every command that needs no application-controller, with what it did checked through tiphys's
REST API or the CLI's own `-o json`, and the refusals by their exit code and text.

Transports (each CLI has a config of its own and logs in over its transport):
  grpc            native gRPC over TLS to a TLS-mode tiphys (the main transport: every command)
  grpc-web        --grpc-web over TLS to the same server
  root-path       --grpc-web-root-path /argocd to a tiphys started with --rootpath /argocd
  plaintext       --plaintext (h2c) to an --insecure tiphys
  nginx           nginx terminating TLS (h2 from the CLI, grpc_pass h2c to an --insecure tiphys)
  nginx-plaintext --plaintext to nginx's h2c listener, grpc_pass h2c to the same tiphys
  nginx-grpc-web  --grpc-web through nginx's HTTP/1.1-only path (proxy_pass)
On every transport one command of each group runs (login, version, account, proj, repo, repocreds,
cert, gpg, cluster, app, appset, logout); on the main one every command listed in the README's
section "Upstream's argocd CLI against tiphys", and `login --sso` with the test OpenID Connect
provider (oidckit.py) on grpc and grpc-web, its login form filled in by a browser-less agent.

The servers contact repositories (--repo-access on): the CLI's `repo add` asks ValidateAccess
first, and `app create` validates its path, both against gitkit's real Git servers.
"""

import re
import subprocess
import threading
import time
import urllib.parse as up
from pathlib import Path

import pytest

from appkit import write_rbac
from argocdkit import ArgoCli
from authkit import ADMIN_PW, ALICE_PW, BOB_PW, bearer, request, wait_until
from conftest import Processes, free_port, require_tool
from oidckit import Provider, oidc_config, session, walk
from test_proxies import run_nginx
from test_sso import RBAC, SECRET
from test_sso import write_rbac as write_sso_rbac

IN_CLUSTER = "https://kubernetes.default.svc"
ROOT = "/argocd"
# alice may read projects and log in; bob may only log in (authkit's standard accounts).
POLICY = ["p, alice, projects, get, *, allow"]
SSO_WAIT = 60  # seconds for `argocd login --sso` to finish once its URL is printed

NGINX_CONF = """\
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log {d}/access.log;
  client_body_temp_path {d}/tmp/body; proxy_temp_path {d}/tmp/proxy; fastcgi_temp_path {d}/tmp/fcgi;
  uwsgi_temp_path {d}/tmp/uwsgi; scgi_temp_path {d}/tmp/scgi;
  proxy_max_temp_file_size 0;
  upstream backend_http {{ server 127.0.0.1:{backend}; keepalive 8; }}
  upstream backend_grpc {{ server 127.0.0.1:{backend}; keepalive 8; }}
  map $http_content_type $is_grpc {{ default 0; "~^application/grpc($|\\+|;)" 1; }}
  ssl_certificate {cert}; ssl_certificate_key {key};
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  proxy_set_header Host $http_host;
  server {{                                   # TLS terminated here: gRPC -> grpc_pass (h2c)
    listen 127.0.0.1:{tls_port} ssl http2;
    location / {{
      if ($is_grpc) {{ grpc_pass grpc://backend_grpc; }}
      proxy_pass http://backend_http;
    }}
  }}
  server {{                                   # h2c from the client (argocd --plaintext)
    listen 127.0.0.1:{h2c_port} http2;
    location / {{
      if ($is_grpc) {{ grpc_pass grpc://backend_grpc; }}
      proxy_pass http://backend_http;
    }}
  }}
  server {{                                   # HTTP/1.1 only, both sides: gRPC-Web
    listen 127.0.0.1:{h1_port} ssl;
    location / {{ proxy_pass http://backend_http; }}
  }}
}}
"""


# ---- servers, proxies and clients ---------------------------------------------------------------


class Target:
    """Where one transport's CLI connects: the tiphys behind it, the address, the flags, the CA."""

    def __init__(self, name, server, addr, flags=(), ca=None, prefix="", login_flags=()):
        self.name, self.server, self.addr, self.flags, self.ca, self.prefix = name, server, addr, flags, ca, prefix
        self.login_flags = list(login_flags)

    def cli(self, workdir):
        return ArgoCli(Path(workdir) / self.name, *self.flags, ca=self.ca)

    def rest(self, method, path, token, body=None):
        """tiphys's REST API, directly (not through the transport)."""
        r = request(self.server, method, self.prefix + path, body, headers=bearer(token), timeout=30)
        return r.status, (r.json() if r.body else None)


def start_nginx(procs, d, backend):
    return run_nginx(procs, d, NGINX_CONF, backend.port, ("tls_port", "h2c_port", "h1_port"))


@pytest.fixture(scope="module")
def targets(tmp_path_factory, module_servers, module_config):
    """Three tiphys servers (TLS; TLS under --rootpath; --insecure behind nginx) with the standard
    accounts and POLICY, and one Target per transport."""
    cfg = module_config()
    write_rbac(cfg, POLICY)
    tls = module_servers.start("--repo-access", "on", config=cfg)
    rooted = module_servers.start("--repo-access", "on", "--rootpath", ROOT, config=cfg)
    plain = module_servers.start("--insecure", "--repo-access", "on", config=cfg)
    procs = Processes()
    crt, ports = start_nginx(procs, tmp_path_factory.mktemp("nginx"), plain)
    yield {t.name: t for t in [
        Target("grpc", tls, tls.addr, ca=tls.ca),
        Target("grpc-web", tls, tls.addr, ["--grpc-web"], ca=tls.ca),
        Target("root-path", rooted, rooted.addr, ["--grpc-web-root-path", ROOT], ca=rooted.ca, prefix=ROOT),
        Target("plaintext", plain, plain.addr, ["--plaintext"]),
        Target("nginx", plain, f"127.0.0.1:{ports['tls_port']}", ca=crt),
        Target("nginx-plaintext", plain, f"127.0.0.1:{ports['h2c_port']}", ["--plaintext"]),
        # `argocd login` first probes the server with a gRPC (HTTP/2) connection, which an
        # HTTP/1.1-only proxy cannot carry (grpc_util.TestTLS): --skip-test-tls, as upstream's docs say.
        Target("nginx-grpc-web", plain, f"127.0.0.1:{ports['h1_port']}", ["--grpc-web"], ca=crt,
               login_flags=["--skip-test-tls"]),
    ]}
    procs.stop_all()


@pytest.fixture(scope="module")
def main(targets):
    return targets["grpc"]


def login(target, workdir, user="admin", password=ADMIN_PW):
    cli = target.cli(workdir)
    res = cli("login", target.addr, "--username", user, "--password", password, *target.login_flags)
    assert f"'{user}:login' logged in successfully" in res.stdout, res.stdout
    return cli


@pytest.fixture
def admin(main, tmp_path):
    return login(main, tmp_path)


def fails(cli, *args, code=None, text=None):
    """Runs a command that must fail; returns its stderr. upstream's CLI exits 20 on an error
    from the server (errors.ErrorAPIResponse) and 1 on one of its own."""
    res = cli(*args, check=False)
    assert res.returncode != 0, f"argocd {' '.join(args)} succeeded:\n{res.stdout}"
    if code is not None:
        assert res.returncode == code, (res.returncode, res.stderr)
    if text is not None:
        assert text in res.stderr, res.stderr
    return res.stderr


def names(items, key="metadata"):
    return sorted(i[key]["name"] if key else i["name"] for i in items)


@pytest.fixture(scope="module")
def gpg_key(tmp_path_factory):
    """An armored OpenPGP public key made by gpg for this module, and its long key ID."""
    require_tool("gpg")
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    env = {"GNUPGHOME": str(home), "PATH": "/usr/bin:/bin"}
    subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "Tiphys Test <gpg@example.test>",
                    "ed25519", "sign", "1d"], env=env, check=True, capture_output=True, timeout=60)
    armored = subprocess.run(["gpg", "--armor", "--export", "gpg@example.test"], env=env, check=True,
                             capture_output=True, text=True, timeout=30).stdout
    listing = subprocess.run(["gpg", "--list-keys", "--with-colons"], env=env, check=True, capture_output=True,
                             text=True, timeout=30).stdout
    key_id = next(line.split(":")[4] for line in listing.splitlines() if line.startswith("pub:"))
    path = home / "key.asc"
    path.write_text(armored)
    return path, key_id


APPSET = """\
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata:
  name: {name}
spec:
  goTemplate: true
  goTemplateOptions: ["missingkey=error"]
  generators:
  - list:
      elements:
      - env: dev
      - env: prod
  template:
    metadata:
      name: '{name}-{{{{.env}}}}'
    spec:
      project: default
      source:
        repoURL: {repo}
        path: guestbook
      destination:
        server: https://kubernetes.default.svc
        namespace: '{{{{.env}}}}'
"""


# ---- every transport: one command of each group -------------------------------------------------


TRANSPORTS = ["grpc", "grpc-web", "root-path", "plaintext", "nginx", "nginx-plaintext", "nginx-grpc-web"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_every_group_over(transport, targets, gitservers, gpg_key, tmp_path):
    t = targets[transport]
    tag = transport.replace("-", "")
    cli = login(t, tmp_path)
    token = cli.token()
    assert t.rest("GET", "/api/v1/session/userinfo", token)[1]["username"] == "admin"

    version = cli("version").stdout
    assert re.search(r"^argocd-server: v\d+\.\d+\.\d+\+tiphys\.", version, re.M), version

    info = cli.json("account", "get-user-info")
    assert info == {"loggedIn": True, "username": "admin", "iss": "argocd"}, info
    assert cli("account", "can-i", "create", "projects", "*").stdout.strip() == "yes"

    proj = f"mx-{tag}"
    cli("proj", "create", proj, "-d", f"{IN_CLUSTER},{tag}", "-s", "*")
    status, body = t.rest("GET", f"/api/v1/projects/{proj}", token)
    assert status == 200 and body["spec"]["destinations"] == [{"server": IN_CLUSTER, "namespace": tag}], body

    repo = gitservers.url("http")
    cli("repo", "add", repo, "--upsert")
    got = cli.json("repo", "get", repo)
    assert got["repo"] == repo and got["connectionState"]["status"] == "Successful", got

    creds = f"https://{tag}.git.example/org"
    cli("repocreds", "add", creds, "--username", "bot", "--password", f"pw-{tag}", "--upsert")
    listed = {c["url"]: c for c in cli.json("repocreds", "list")}
    assert listed[creds].get("username") == "bot" and "password" not in listed[creds], listed

    known = tmp_path / "known_hosts"
    known.write_text(f"{tag}.git.example " + gitservers.ssh_known_hosts.split(" ", 1)[1] + "\n")
    cli("cert", "add-ssh", "--batch", "--from", str(known), "--upsert")
    certs = cli.json("cert", "list", "--hostname-pattern", f"{tag}.git.example")
    assert [(c["serverName"], c["certType"]) for c in certs] == [(f"{tag}.git.example", "ssh")], certs

    key_file, key_id = gpg_key
    cli("gpg", "add", "--from", str(key_file))
    assert cli.json("gpg", "get", key_id)["keyID"] == key_id

    cluster = cli.json("cluster", "get", IN_CLUSTER)
    assert cluster["server"] == IN_CLUSTER and cluster["name"] == "in-cluster", cluster

    app = f"mx-{tag}"
    cli("app", "create", app, "--repo", repo, "--path", "guestbook", "--revision", "main", "--project", proj,
        "--dest-server", IN_CLUSTER, "--dest-namespace", tag, "--upsert")
    status, body = t.rest("GET", f"/api/v1/applications/{app}", token)
    assert status == 200 and body["spec"]["source"] == {"repoURL": repo, "path": "guestbook",
                                                        "targetRevision": "main"}, body
    assert cli.json("app", "get", app)["spec"]["project"] == proj

    appset = tmp_path / "appset.yaml"
    appset.write_text(APPSET.format(name=f"mx-{tag}", repo=repo))
    cli("appset", "create", str(appset), "--upsert")
    got = cli.json("appset", "get", f"mx-{tag}")
    assert got["spec"]["goTemplateOptions"] == ["missingkey=error"], got["spec"]
    assert t.rest("GET", f"/api/v1/applicationsets/mx-{tag}", token)[0] == 200

    cli("app", "delete", app, "-y")
    cli("logout", cli_context(cli))
    assert cli.token() == ""
    fails(cli, "app", "list")


def cli_context(cli):
    return re.search(r"current-context: (\S+)", cli.config.read_text()).group(1)


# ---- the main transport: every command ----------------------------------------------------------


def test_login_and_logout_with_a_local_account(main, tmp_path):
    cli = main.cli(tmp_path)
    stderr = fails(cli, "login", main.addr, "--username", "admin", "--password", "wrong", code=20)
    assert "Invalid username or password" in stderr, stderr
    res = cli("login", main.addr, "--username", "admin", "--password", ADMIN_PW, "--name", "here")
    assert "Context 'here' updated" in res.stdout, res.stdout
    token = cli.token()
    assert main.rest("GET", "/api/v1/session/userinfo", token)[1] == {"loggedIn": True, "username": "admin",
                                                                     "iss": "argocd"}
    res = cli("logout", "here")
    assert "Logged out from 'here'" in res.stdout
    assert cli.token() == ""
    # upstream's `argocd logout` only forgets the token (cmd/argocd/commands/logout.go): it never
    # asks the server, so the token stays valid until it expires, on upstream's server as here.
    assert main.rest("GET", "/api/v1/session/userinfo", token)[1]["loggedIn"] is True
    assert cli("account", "get-user-info").stdout.startswith("Logged In: false")
    fails(cli, "app", "list", code=20, text="Unauthenticated")


def test_account_commands(main, admin, tmp_path):
    assert names(admin.json("account", "list"), key=None) == ["admin", "alice", "bob"]
    alice = admin.json("account", "get", "--account", "alice")
    assert alice["name"] == "alice" and alice["enabled"] and sorted(alice["capabilities"]) == ["apiKey", "login"]

    assert admin("account", "can-i", "create", "projects", "*").stdout.strip() == "yes"
    as_alice = login(main, tmp_path / "alice", "alice", ALICE_PW)
    assert as_alice("account", "can-i", "get", "projects", "default").stdout.strip() == "yes"
    assert as_alice("account", "can-i", "create", "projects", "*").stdout.strip() == "no"

    token = admin("account", "generate-token", "--account", "alice", "--id", "ci-1", "-e", "1h").stdout.strip()
    assert main.rest("GET", "/api/v1/session/userinfo", token)[1]["username"] == "alice"
    alice = admin.json("account", "get", "--account", "alice")
    assert [t["id"] for t in alice["tokens"]] == ["ci-1"], alice
    stderr = fails(admin, "account", "generate-token", "--account", "bob", code=20)
    assert "does not have apiKey capability" in stderr, stderr
    admin("account", "delete-token", "--account", "alice", "ci-1")
    assert "tokens" not in admin.json("account", "get", "--account", "alice")
    assert main.rest("GET", "/api/v1/applications", token)[0] == 401

    as_bob = login(main, tmp_path / "bob", "bob", BOB_PW)
    assert as_bob.json("account", "get-user-info")["username"] == "bob"
    stderr = fails(as_bob, "account", "update-password", "--current-password", "not-it",
                   "--new-password", "bob-password-2x", code=20)
    assert "current password does not match" in stderr.lower(), stderr
    res = as_bob("account", "update-password", "--current-password", BOB_PW, "--new-password", "bob-password-2x")
    assert "Password updated" in res.stdout, res.stdout
    # The CLI logs in again with the new password: its new token works, the old password does not.
    assert as_bob.json("account", "get-user-info")["username"] == "bob"
    fails(main.cli(tmp_path / "bob-old"), "login", main.addr, "--username", "bob", "--password", BOB_PW, code=20)
    login(main, tmp_path / "bob-new", "bob", "bob-password-2x")


def test_proj_commands(main, admin, tmp_path):
    token = admin.token()
    admin("proj", "create", "web", "-d", f"{IN_CLUSTER},web", "-s", "https://github.com/org/*",
          "--description", "first")
    got = admin.json("proj", "get", "web")
    assert got["spec"] == {"sourceRepos": ["https://github.com/org/*"], "description": "first",
                           "destinations": [{"server": IN_CLUSTER, "namespace": "web"}]}, got["spec"]
    assert "web" in names(admin.json("proj", "list"))
    # InvalidArgument, as upstream's server/project/project.go answers a different spec without upsert.
    stderr = fails(admin, "proj", "create", "web", "-d", f"{IN_CLUSTER},other", code=20)
    assert "InvalidArgument" in stderr and "upsert" in stderr, stderr

    admin("proj", "set", "web", "--description", "second")
    admin("proj", "add-source", "web", "https://example.com/x.git")
    admin("proj", "add-destination", "web", IN_CLUSTER, "web-2")
    spec = main.rest("GET", "/api/v1/projects/web", token)[1]["spec"]
    assert spec["description"] == "second", spec
    assert spec["sourceRepos"] == ["https://github.com/org/*", "https://example.com/x.git"], spec
    assert spec["destinations"] == [{"server": IN_CLUSTER, "namespace": "web"},
                                    {"server": IN_CLUSTER, "namespace": "web-2"}], spec

    admin("proj", "role", "create", "web", "ci", "--description", "ci role")
    admin("proj", "role", "add-policy", "web", "ci", "-a", "get", "-o", "*", "-p", "allow")
    out = admin("proj", "role", "create-token", "web", "ci", "-e", "1h").stdout
    assert "Create token succeeded for proj:web:ci." in out, out
    role_token = re.search(r"Token: (\S+)", out).group(1)
    issued_at = re.search(r"Issued At: (\S+)", out).group(1)
    listed = admin("proj", "role", "list-tokens", "web", "ci").stdout
    assert issued_at in listed, listed
    role = main.rest("GET", "/api/v1/projects/web", token)[1]["spec"]["roles"][0]
    assert role["name"] == "ci" and role["policies"] == ["p, proj:web:ci, applications, get, web/*, allow"], role
    iat = role["jwtTokens"][0]["iat"]
    # The role's token reads the project's applications, and nothing else.
    assert main.rest("GET", "/api/v1/applications?projects=web", role_token)[0] == 200
    assert main.rest("GET", "/api/v1/projects/default", role_token)[0] == 403

    admin("proj", "role", "delete-token", "web", "ci", str(iat))
    assert "No tokens for web.ci" in admin("proj", "role", "list-tokens", "web", "ci").stdout
    assert main.rest("GET", "/api/v1/applications?projects=web", role_token)[0] == 401
    admin("proj", "role", "delete", "web", "ci")
    assert "roles" not in main.rest("GET", "/api/v1/projects/web", token)[1]["spec"]

    admin("proj", "delete", "web")
    assert main.rest("GET", "/api/v1/projects/web", token)[0] == 404
    fails(admin, "proj", "get", "web", code=20, text="NotFound")

    as_alice = login(main, tmp_path / "alice", "alice", ALICE_PW)
    fails(as_alice, "proj", "create", "alices", code=20, text="PermissionDenied")
    assert main.rest("GET", "/api/v1/projects/alices", token)[0] == 404


def test_repo_commands(main, admin, gitservers, tmp_path):
    token = admin.token()
    # tiphys trusts gitkit's https server through the certificates API, set by the CLI.
    admin("cert", "add-tls", "127.0.0.1", "--from", str(gitservers.ca_file), "--upsert")
    open_url, basic_url, ssh_url = gitservers.url("open"), gitservers.url("basic"), gitservers.url("ssh")
    admin("repo", "add", open_url, "--upsert")
    stderr = fails(admin, "repo", "add", basic_url, "--username", gitservers.basic_user, "--password", "wrong",
                   code=20)
    assert "InvalidArgument" in stderr and "repository not accessible" in stderr, stderr
    assert main.rest("GET", f"/api/v1/repositories/{up.quote(basic_url, safe='')}", token)[0] == 404
    admin("repo", "add", basic_url, "--username", gitservers.basic_user, "--password", gitservers.basic_password,
          "--upsert")
    known = tmp_path / "known_hosts"
    known.write_text(gitservers.ssh_known_hosts + "\n")
    admin("cert", "add-ssh", "--batch", "--from", str(known), "--upsert")
    admin("repo", "add", ssh_url, "--ssh-private-key-path", str(gitservers.ssh_key_file), "--upsert")

    # A Helm repository: tiphys fetches its index.yaml to check it.
    admin("repo", "add", gitservers.helm_url, "--type", "helm", "--name", "charts", "--upsert")
    fails(admin, "repo", "add", gitservers.helm_auth_url, "--type", "helm", "--name", "private", code=20,
          text="repository not accessible")

    repos = {r["repo"]: r for r in admin.json("repo", "list")}
    for url in (open_url, basic_url, ssh_url, gitservers.helm_url):
        assert repos[url]["connectionState"]["status"] == "Successful", repos[url]
    assert (repos[gitservers.helm_url]["type"], repos[gitservers.helm_url]["name"]) == ("helm", "charts")
    assert gitservers.helm_auth_url not in repos
    got = admin.json("repo", "get", basic_url)
    assert got["username"] == gitservers.basic_user and "password" not in got, got
    admin("repo", "rm", basic_url)
    assert main.rest("GET", f"/api/v1/repositories/{up.quote(basic_url, safe='')}", token)[0] == 404
    assert basic_url not in {r["repo"] for r in admin.json("repo", "list")}


def test_repocreds_commands(main, admin, gitservers):
    admin("cert", "add-tls", "127.0.0.1", "--from", str(gitservers.ca_file), "--upsert")
    prefix = gitservers.url("basic", "")
    admin("repocreds", "add", prefix, "--username", gitservers.basic_user, "--password",
          gitservers.basic_password, "--upsert")
    listed = {c["url"]: c for c in admin.json("repocreds", "list")}
    assert listed[prefix]["username"] == gitservers.basic_user and "password" not in listed[prefix], listed
    # A repository under the template is added without credentials of its own: it inherits them.
    url = gitservers.url("basic", "apps.git")
    admin("repo", "add", url, "--upsert")
    assert admin.json("repo", "get", url)["connectionState"]["status"] == "Successful"
    admin("repo", "rm", url)
    admin("repocreds", "rm", prefix)
    assert prefix not in {c["url"] for c in admin.json("repocreds", "list")}
    stderr = fails(admin, "repo", "add", url, code=20)
    assert "repository not accessible" in stderr, stderr


def test_cert_commands(main, admin, gitservers, tmp_path):
    token = admin.token()
    admin("cert", "add-tls", "certs.example", "--from", str(gitservers.ca_file))
    stderr = fails(admin, "cert", "add-tls", "certs.example", "--from", str(gitservers.wrong_ca_file), code=20)
    assert "AlreadyExists" in stderr or "upsert" in stderr, stderr
    admin("cert", "add-tls", "certs.example", "--from", str(gitservers.wrong_ca_file), "--upsert")
    known = tmp_path / "known_hosts"
    known.write_text(gitservers.ssh_known_hosts.replace("[127.0.0.1]:" + str(gitservers.ssh_port), "certs.example")
                     + "\n")
    admin("cert", "add-ssh", "--batch", "--from", str(known))
    listed = {c["certType"]: c for c in admin.json("cert", "list", "--hostname-pattern", "certs.example")}
    assert sorted(listed) == ["https", "ssh"], listed
    assert listed["https"]["certInfo"] == "CN=gitkit unrelated CA", listed  # the upserted bundle
    assert listed["ssh"]["certInfo"].startswith("SHA256:"), listed
    assert [c["certType"] for c in admin.json("cert", "list", "--cert-type", "ssh",
                                              "--hostname-pattern", "certs.*")] == ["ssh"]
    admin("cert", "rm", "certs.example", "--cert-type", "ssh")
    status, body = main.rest("GET", "/api/v1/certificates?hostNamePattern=certs.example", token)
    assert status == 200 and [c["certType"] for c in body["items"]] == ["https"], body
    admin("cert", "rm", "certs.example")
    assert admin.json("cert", "list", "--hostname-pattern", "certs.example") == []


def test_gpg_commands(main, admin, gpg_key, tmp_path):
    key_file, key_id = gpg_key
    res = admin("gpg", "add", "--from", str(key_file))
    assert "Created 1 key(s)" in res.stdout or "key(s)" in res.stdout, res.stdout
    listed = {k["keyID"]: k for k in admin.json("gpg", "list")}
    assert listed[key_id]["owner"] == "Tiphys Test <gpg@example.test>" and listed[key_id]["subType"] == "ed25519"
    got = admin.json("gpg", "get", key_id)
    assert got["keyID"] == key_id and len(got["fingerprint"]) == 40 and got["fingerprint"].endswith(key_id)
    bad = tmp_path / "bad.asc"
    bad.write_text("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nnot a key\n-----END PGP PUBLIC KEY BLOCK-----\n")
    fails(admin, "gpg", "add", "--from", str(bad), code=20, text="InvalidArgument")
    admin("gpg", "rm", key_id)
    assert main.rest("GET", f"/api/v1/gpgkeys/{key_id}", admin.token())[0] == 404
    fails(admin, "gpg", "get", key_id, code=20, text="NotFound")


def test_cluster_commands(main, admin):
    token = admin.token()
    listed = admin.json("cluster", "list")
    assert [(c["server"], c["name"]) for c in listed] == [(IN_CLUSTER, "in-cluster")], listed
    assert admin.json("cluster", "get", "in-cluster")["server"] == IN_CLUSTER
    admin("cluster", "set", "in-cluster", "--namespace", "ns-a", "--namespace", "ns-b")
    status, body = main.rest("GET", f"/api/v1/clusters/{up.quote(IN_CLUSTER, safe='')}", token)
    assert status == 200 and body["namespaces"] == ["ns-a", "ns-b"], body
    # '*' is sent as one empty namespace: all of them again, as upstream reads its cluster Secret.
    admin("cluster", "set", "in-cluster", "--namespace", "*")
    assert "namespaces" not in admin.json("cluster", "get", IN_CLUSTER)
    assert "namespaces" not in main.rest("GET", f"/api/v1/clusters/{up.quote(IN_CLUSTER, safe='')}", token)[1]
    fails(admin, "cluster", "get", "https://nowhere.example", code=20, text="NotFound")


def test_app_commands(main, admin, gitservers):
    token = admin.token()
    repo = gitservers.url("http")
    admin("app", "create", "guestbook", "--repo", repo, "--path", "guestbook", "--revision", "main",
          "--dest-server", IN_CLUSTER, "--dest-namespace", "default", "--label", "team=web")
    stderr = fails(admin, "app", "create", "nothing", "--repo", repo, "--path", "no-such-dir",
                   "--dest-server", IN_CLUSTER, "--dest-namespace", "default", code=20)
    assert "Unable to generate manifests in no-such-dir" in stderr, stderr
    assert main.rest("GET", "/api/v1/applications/nothing", token)[0] == 404

    got = admin.json("app", "get", "guestbook")
    assert got["spec"]["source"] == {"repoURL": repo, "path": "guestbook", "targetRevision": "main"}, got
    assert got["metadata"]["labels"] == {"team": "web"}
    assert "Name:               argocd/guestbook" in admin("app", "get", "guestbook").stdout
    assert "guestbook" in names(admin.json("app", "list"))
    assert names(admin.json("app", "list", "-l", "team=web")) == ["guestbook"]

    admin("app", "set", "guestbook", "--revision", "v1.0.0", "--directory-recurse", "--sync-policy", "automated",
          "--helm-set", "replicas=2", "--helm-set", "image=x")
    spec = main.rest("GET", "/api/v1/applications/guestbook", token)[1]["spec"]
    # (`directory.jsonnet` comes back as {}: the CLI sends the empty struct, and upstream's JSON
    # keeps it too, Go's omitempty never dropping a struct.)
    assert spec["source"]["targetRevision"] == "v1.0.0" and spec["source"]["directory"]["recurse"] is True, spec
    assert "automated" in spec["syncPolicy"], spec
    assert spec["source"]["helm"]["parameters"] == [{"name": "replicas", "value": "2"}, {"name": "image", "value": "x"}]
    admin("app", "unset", "guestbook", "--parameter", "replicas")
    spec = main.rest("GET", "/api/v1/applications/guestbook", token)[1]["spec"]
    assert spec["source"]["helm"]["parameters"] == [{"name": "image", "value": "x"}], spec
    admin("app", "set", "guestbook", "--sync-policy", "none")
    assert "automated" not in main.rest("GET", "/api/v1/applications/guestbook", token)[1]["spec"].get(
        "syncPolicy", {})
    stderr = fails(admin, "app", "set", "guestbook", "--dest-server", "https://unknown.example", code=20)
    assert "has not been configured" in stderr, stderr

    admin("app", "delete", "guestbook", "-y")
    assert main.rest("GET", "/api/v1/applications/guestbook", token)[0] == 404
    fails(admin, "app", "get", "guestbook", code=20, text="NotFound")


def test_appset_commands(main, admin, gitservers, tmp_path):
    token = admin.token()
    manifest = tmp_path / "set.yaml"
    manifest.write_text(APPSET.format(name="envs", repo=gitservers.url("http")))
    res = admin("appset", "create", str(manifest))
    assert "ApplicationSet 'envs' created" in res.stderr, res.stderr
    got = admin.json("appset", "get", "envs")
    assert got["spec"]["goTemplate"] is True and got["spec"]["goTemplateOptions"] == ["missingkey=error"], got
    status, body = main.rest("GET", "/api/v1/applicationsets/envs", token)
    assert status == 200 and body["spec"]["generators"][0]["list"]["elements"] == [{"env": "dev"}, {"env": "prod"}]
    assert "envs" in names(admin.json("appset", "list"))
    generated = admin.json("appset", "generate", str(manifest))
    assert names(generated) == ["envs-dev", "envs-prod"], generated
    admin("appset", "delete", "envs", "-y")
    assert main.rest("GET", "/api/v1/applicationsets/envs", token)[0] == 404
    fails(admin, "appset", "get", "envs", code=20, text="NotFound")


def test_version(main, admin):
    out = admin("version").stdout
    assert re.search(r"^argocd: v3\.", out, re.M), out
    server = main.rest("GET", "/api/version", admin.token())[1]
    assert f"argocd-server: {server['Version']}" in out, out
    # Upstream's CLI prints each build fact the server sent under argocd-server (and those it did
    # not send not at all): tiphys sends the date always, the git facts when it was built from a
    # checkout.
    served = out.split("argocd-server:", 1)[1]
    assert f"  BuildDate: {server['BuildDate']}\n" in served, out
    for field in ("GitCommit", "GitTreeState"):
        if field in server:
            assert f"  {field}: {server[field]}\n" in served, out
        else:
            assert f"  {field}:" not in served, out
    short = admin("version", "--short").stdout
    assert f"argocd-server: {server['Version']}" in short, short


# ---- single sign-on -----------------------------------------------------------------------------


def enable_sso_tls(config, server, provider):
    """test_sso.enable_sso for a TLS-mode server: SSO on while it runs, waited for."""
    config.write(secret={**config.secret, **SECRET})
    config.update_cm({"url": server.url(""), "oidc.config": oidc_config(provider)})

    def in_force():
        r = request(server, "GET", "/api/v1/settings")
        return r.status == 200 and r.json().get("oidcConfig", {}).get("issuer") == provider.issuer

    wait_until(in_force, 10, what="SSO settings in force")


@pytest.mark.parametrize("transport", ["grpc", "grpc-web"])
def test_sso_login_and_logout(transport, tmp_path, servers, config_dir):
    config = config_dir()
    write_sso_rbac(config, RBAC)
    server = servers.start(config=config)
    cli_port = free_port()
    provider = servers.also_stop(Provider(tmp_path / "oidc", [server.url("/auth/callback"),
                                                              f"http://localhost:{cli_port}/auth/callback"]))
    enable_sso_tls(config, server, provider)
    flags = ["--grpc-web"] if transport == "grpc-web" else []
    cli = ArgoCli(tmp_path / "cli", *flags, ca=server.ca)
    proc = subprocess.Popen(cli.command("login", server.addr, "--sso", "--sso-port", str(cli_port),
                                        "--sso-launch-browser=false"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            env=cli.env())
    try:
        out = []
        reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)
        reader.start()
        url = None
        deadline = time.monotonic() + SSO_WAIT
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            m = re.search(r"copy-and-paste the following URL into your preferred browser: (\S+)", "".join(out))
            url = m.group(1) if m else time.sleep(0.1)
        assert url, f"no login URL printed: {''.join(out)} {proc.stderr.read() if proc.poll() is not None else ''}"
        assert url.startswith(provider.issuer + "/auth?"), url
        callback = f"http://localhost:{cli_port}/auth/callback"
        agent = session()
        back = walk(agent, url, "admin9", lambda u: u.startswith(callback))
        # The CLI starts its callback server a second after printing the URL.
        deadline = time.monotonic() + 15
        while True:
            try:
                r = agent.get(back, timeout=15)
                break
            except OSError:
                assert time.monotonic() < deadline, "the CLI's callback server never listened"
                time.sleep(0.1)
        assert r.status_code == 200 and "Authentication successful" in r.text, r.text[:500]
        proc.wait(timeout=SSO_WAIT)
        reader.join(timeout=5)
        assert proc.returncode == 0, (proc.returncode, "".join(out), proc.stderr.read())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
    assert "'admin9@example.test' logged in successfully" in "".join(out), out
    info = cli.json("account", "get-user-info")
    assert info["loggedIn"] and info["username"] == "admin9@example.test" and "admins" in info["groups"], info
    assert cli("account", "can-i", "create", "projects", "*").stdout.strip() == "yes"
    cli("proj", "create", "by-sso")
    status, _ = Target("sso", server, server.addr).rest("GET", "/api/v1/projects/by-sso", cli.token())
    assert status == 200
    cli("logout", server.addr)
    assert cli.token() == ""
    fails(cli, "proj", "get", "by-sso")
