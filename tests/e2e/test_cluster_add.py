"""`tiphys cluster add CONTEXT` as `argocd cluster add` does it (issue 39), against a second,
"external" API server on loopback (controlplane.py `up(argocd=False)`: etcd, kube-apiserver and
kube-controller-manager, whose token controller fills ServiceAccount token Secrets):

  the add creates the ServiceAccount argocd-manager, the ClusterRole argocd-manager-role, its
  binding and the long-lived token Secret there, and registers the cluster with that token (which
  the API server accepts); `--namespace` makes Roles in those namespaces only; a second add is
  accepted, a different one only with `--upsert`; `cluster rm --remove-rbac` removes what the add
  made (and the old token is refused); upstream's `argocd cluster add` against tiphys --kube
  stores the same cluster Secret as tiphys's own add and as against upstream argocd-server.

Bad input, each with a clear error, and nothing registered nor left in the cluster: a kubeconfig
without the context, an unreachable server, a CA mismatch, a user without rights, a user with
rights to create the ServiceAccount only, a registration the server refuses.

The cluster an add registers is then used: tiphys (contacting clusters) shows it Successful with
the external server's version; upstream's application-controller deploys an application there
through the registered Secret; deleting the manager's token Secret turns the state to Failed.

Runs under tools/upstream/isolated, as the other control-plane tests.
"""

import base64
import json
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from appkit import Api, app_body, uniq
from argocdkit import ArgoCli
from authkit import initial_admin_password, login_token
from conftest import cli, free_port, start_server
from controlplane import ControlPlane, PartFailed, Pki, require

pytestmark = pytest.mark.controlplane

SYSTEM_NS = "kube-system"
SA = "argocd-manager"
ROLE = "argocd-manager-role"
BINDING = "argocd-manager-role-binding"
TOKEN_SECRET = "argocd-manager-long-lived-token"
ARGOCD_NS = "argocd"


@pytest.fixture(scope="module")
def external(tmp_path_factory):
    """The external cluster: a bare API server with its own CA."""
    plane = ControlPlane(tmp_path_factory.mktemp("external"))
    try:
        plane.up(argocd=False)
    except PartFailed as e:
        plane.down()
        pytest.fail(f"the external cluster did not start: {e}", pytrace=False)
    yield plane
    plane.down()


def b64(path):
    return base64.b64encode(Path(path).read_bytes()).decode()


@pytest.fixture(scope="module")
def kc(external, tmp_path_factory):
    """A kubeconfig of the external cluster with one context per case: `ext` (a cluster-admin
    ServiceAccount's token), `ext-admin` (the admin client certificate), `ext-nobody` (a token
    without any binding), `ext-sa-only` (may create ServiceAccounts and Secrets in kube-system,
    nothing else), `ext-badca` (another CA), `ext-down` (a closed port)."""
    d = tmp_path_factory.mktemp("kubeconfig")
    external.apply([
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": n, "namespace": "default"}}
        for n in ("installer", "nobody", "sa-only")
    ] + [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "installer"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
         "subjects": [{"kind": "ServiceAccount", "name": "installer", "namespace": "default"}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "sa-only", "namespace": SYSTEM_NS},
         "rules": [{"apiGroups": [""], "resources": ["serviceaccounts", "secrets"], "verbs": ["*"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "sa-only", "namespace": SYSTEM_NS},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sa-only"},
         "subjects": [{"kind": "ServiceAccount", "name": "sa-only", "namespace": "default"}]},
    ])
    tokens = {n: external.kubectl("create", "token", n, "-n", "default", "--duration", "2h").strip()
              for n in ("installer", "nobody", "sa-only")}
    other = Pki(d / "other-pki")  # a CA that did not sign the external server's certificate
    url = external.state["apiserver"]["url"]
    ca = b64(external.pki.ca)
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [
            {"name": "ext", "cluster": {"server": url, "certificate-authority-data": ca}},
            {"name": "ext-badca", "cluster": {"server": url, "certificate-authority-data": b64(other.ca)}},
            {"name": "ext-down", "cluster": {"server": f"https://127.0.0.1:{free_port()}",
                                             "certificate-authority-data": ca}},
        ],
        "users": [
            *({"name": n, "user": {"token": t}} for n, t in tokens.items()),
            {"name": "admin", "user": {"client-certificate-data": b64(external.pki.admin),
                                       "client-key-data": b64(external.pki.admin_key)}},
        ],
        "contexts": [
            {"name": "ext", "context": {"cluster": "ext", "user": "installer"}},
            {"name": "ext-admin", "context": {"cluster": "ext", "user": "admin"}},
            {"name": "ext-nobody", "context": {"cluster": "ext", "user": "nobody"}},
            {"name": "ext-sa-only", "context": {"cluster": "ext", "user": "sa-only"}},
            {"name": "ext-badca", "context": {"cluster": "ext-badca", "user": "installer"}},
            {"name": "ext-down", "context": {"cluster": "ext-down", "user": "installer"}},
        ],
    }
    path = d / "kubeconfig"
    path.write_text(json.dumps(config))
    # An exec credential plugin, as a cluster registered with --exec-command runs it: it prints
    # the installer's token as an ExecCredential.
    plugin = d / "credential-plugin"
    credential = {"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                  "status": {"token": tokens["installer"]}}
    plugin.write_text(f"#!/bin/sh\nprintf '%s' '{json.dumps(credential)}'\n")
    plugin.chmod(0o755)
    return SimpleNamespace(path=str(path), url=url, plugin=str(plugin))


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """tiphys on its embedded store, and the CLI flags that reach it as admin."""
    server = start_server(tmp_path_factory.mktemp("local"), "--insecure")
    token = login_token(server, "admin", initial_admin_password(server))
    yield SimpleNamespace(server=server, conn=("--server", server.addr, "--plaintext", "--auth-token", token))
    server.stop()


def tiphys(local, *args, timeout=90):
    return cli(*args, *local.conn, timeout=timeout)


def manager_objects(external, namespaces=()):
    """Which of the manager's objects exist in the external cluster."""
    def exists(*args):
        return external.kubectl("get", *args, "--ignore-not-found", "-o", "name").strip() != ""
    found = {
        "sa": exists("serviceaccount", SA, "-n", SYSTEM_NS),
        "secret": exists("secret", TOKEN_SECRET, "-n", SYSTEM_NS),
        "clusterrole": exists("clusterrole", ROLE),
        "clusterrolebinding": exists("clusterrolebinding", BINDING),
    }
    for ns in namespaces:
        found[f"role/{ns}"] = exists("role", ROLE, "-n", ns)
        found[f"rolebinding/{ns}"] = exists("rolebinding", BINDING, "-n", ns)
    return found


def reset(external, namespaces=()):
    """No manager in the external cluster."""
    external.kubectl("delete", "clusterrolebinding", BINDING, "--ignore-not-found")
    external.kubectl("delete", "clusterrole", ROLE, "--ignore-not-found")
    for ns in namespaces:
        external.kubectl("delete", "rolebinding", BINDING, "-n", ns, "--ignore-not-found")
        external.kubectl("delete", "role", ROLE, "-n", ns, "--ignore-not-found")
    external.kubectl("delete", "secret", TOKEN_SECRET, "-n", SYSTEM_NS, "--ignore-not-found")
    external.kubectl("delete", "serviceaccount", SA, "-n", SYSTEM_NS, "--ignore-not-found")
    assert not any(manager_objects(external, namespaces).values())


def manager_token(external):
    secret = external.get_json("secret", TOKEN_SECRET, "-n", SYSTEM_NS)
    assert secret["type"] == "kubernetes.io/service-account-token", secret
    assert secret["metadata"]["annotations"]["kubernetes.io/service-account.name"] == SA, secret
    return base64.b64decode(secret["data"]["token"]).decode()


def as_token(external, token, *args):
    """kubectl as the bearer of `token` (no kubeconfig user)."""
    return subprocess.run([require("kubectl", "kubernetes-client"), "--kubeconfig", "/dev/null",
                           "--server", external.state["apiserver"]["url"],
                           "--certificate-authority", str(external.pki.ca), "--token", token, *args],
                          capture_output=True, text=True, timeout=30)


def can_i(external, token, verb, resource, namespace):
    res = as_token(external, token, "auth", "can-i", verb, resource, "-n", namespace)
    return res.stdout.strip() == "yes"


def servers(local):
    res = tiphys(local, "cluster", "list", "-o", "name")
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


def ensure_namespaces(external, *names):
    for ns in names:
        if not external.kubectl("get", "namespace", ns, "--ignore-not-found", "-o", "name").strip():
            external.kubectl("create", "namespace", ns)


# ---- tiphys cluster add and rm ------------------------------------------------------------------


def test_add_creates_the_manager_and_rm_removes_it(external, kc, local):
    reset(external)
    res = tiphys(local, "cluster", "add", "ext", "--kubeconfig", kc.path, "--yes")
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"Cluster '{kc.url}' added\n", res.stdout
    assert manager_objects(external) == {"sa": True, "secret": True, "clusterrole": True, "clusterrolebinding": True}
    role = external.get_json("clusterrole", ROLE)
    assert role["rules"] == [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                             {"nonResourceURLs": ["*"], "verbs": ["*"]}], role
    binding = external.get_json("clusterrolebinding", BINDING)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SA, "namespace": SYSTEM_NS}], binding
    token = manager_token(external)
    assert can_i(external, token, "create", "deployments", "anywhere"), "the manager's token has no rights"

    res = tiphys(local, "cluster", "get", kc.url, "-o", "json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["name"] == "ext" and got["server"] == kc.url, got
    assert got["config"]["tlsClientConfig"] == {"insecure": False}, got  # the rest is sanitized

    # rm without --remove-rbac leaves the cluster side alone.
    res = tiphys(local, "cluster", "rm", kc.url, "-y")
    assert res.returncode == 0 and res.stdout == f"Cluster '{kc.url}' removed\n", (res.stdout, res.stderr)
    assert all(manager_objects(external).values())

    res = tiphys(local, "cluster", "add", "ext", "--kubeconfig", kc.path, "--yes")
    assert res.returncode == 0, res.stderr
    assert manager_token(external) == token, "the existing token Secret is reused"
    # The context named like the cluster ("ext") reaches it, as upstream's rm does.
    res = tiphys(local, "cluster", "rm", "ext", "-y", "--remove-rbac", "--kubeconfig", kc.path)
    assert res.returncode == 0, res.stderr
    for removed in (f"ClusterRoleBinding {BINDING}", f"ClusterRole {ROLE}", f"ServiceAccount {SYSTEM_NS}/{SA}",
                    f"Secret {SYSTEM_NS}/{TOKEN_SECRET}"):
        assert f"{removed} removed" in res.stdout, res.stdout
    assert not any(manager_objects(external).values())
    assert kc.url not in servers(local)
    # The API server stops accepting the token once its informer sees the Secret gone.
    wait_until("the removed manager's token refused (401)",
               lambda: "Unauthorized" in as_token(external, token, "get", "namespaces").stderr)


def test_namespaces_limit_the_manager_to_roles(external, kc, local):
    namespaces = ("apps", "web")
    ensure_namespaces(external, *namespaces, "elsewhere")
    reset(external, namespaces)
    res = tiphys(local, "cluster", "add", "ext", "--kubeconfig", kc.path, "--yes", "--name", "ext-ns",
                 "--namespace", "apps", "--namespace", "web", "--cluster-resources")
    assert res.returncode == 0, res.stderr
    assert manager_objects(external, namespaces) == {
        "sa": True, "secret": True, "clusterrole": False, "clusterrolebinding": False,
        "role/apps": True, "rolebinding/apps": True, "role/web": True, "rolebinding/web": True}
    role = external.get_json("role", ROLE, "-n", "apps")
    assert role["rules"] == [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}], role
    token = manager_token(external)
    assert can_i(external, token, "create", "configmaps", "apps")
    assert not can_i(external, token, "create", "configmaps", "elsewhere")
    got = json.loads(tiphys(local, "cluster", "get", "ext-ns", "-o", "json").stdout)
    assert got["namespaces"] == ["apps", "web"] and got.get("clusterResources") is True, got

    res = tiphys(local, "cluster", "rm", "ext-ns", "-y", "--remove-rbac", "--context", "ext", "--kubeconfig", kc.path)
    assert res.returncode == 0, res.stderr
    assert not any(manager_objects(external, namespaces).values()), manager_objects(external, namespaces)
    assert kc.url not in servers(local)


def test_a_second_add_needs_upsert_to_change_the_cluster(external, kc, local):
    reset(external)
    add = ("cluster", "add", "ext", "--kubeconfig", kc.path, "--yes")
    assert tiphys(local, *add).returncode == 0
    res = tiphys(local, *add)
    assert res.returncode == 0, f"the same add twice is accepted: {res.stderr}"
    res = tiphys(local, *add, "--label", "team=a")
    assert res.returncode != 0, res.stdout
    assert "upsert" in res.stderr, res.stderr
    # A refused registration of a cluster this run did not create leaves the manager in place.
    assert all(manager_objects(external).values())
    for _ in range(2):
        res = tiphys(local, *add, "--label", "team=a", "--annotation", "note=x", "--upsert")
        assert res.returncode == 0, res.stderr
    got = json.loads(tiphys(local, "cluster", "get", kc.url, "-o", "json").stdout)
    assert got["labels"] == {"team": "a"} and got["annotations"] == {"note": "x"}, got
    assert tiphys(local, "cluster", "rm", kc.url, "-y", "--remove-rbac", "--context", "ext",
                  "--kubeconfig", kc.path).returncode == 0
    assert not any(manager_objects(external).values())


def test_an_existing_service_account_gets_a_token_and_no_rbac(external, kc, local):
    reset(external)
    res = tiphys(local, "cluster", "add", "ext", "--kubeconfig", kc.path, "--service-account", "installer",
                 "--system-namespace", "default")
    assert res.returncode == 0, res.stderr
    assert not any(manager_objects(external).values()), "--service-account makes no manager"
    secret = external.get_json("secret", "installer-long-lived-token", "-n", "default")
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert can_i(external, token, "create", "deployments", "anywhere")
    external.kubectl("delete", "secret", "installer-long-lived-token", "-n", "default")
    assert tiphys(local, "cluster", "rm", kc.url, "-y").returncode == 0

    # One that does not exist: the token controller removes the Secret, and the add says why.
    res = tiphys(local, "cluster", "add", "ext", "--kubeconfig", kc.path, "--service-account", "ghost")
    assert res.returncode == 5, (res.returncode, res.stderr)
    assert "ServiceAccount kube-system/ghost does not exist" in res.stderr, res.stderr
    assert not external.kubectl("get", "secret", "ghost-long-lived-token", "-n", SYSTEM_NS,
                                "--ignore-not-found", "-o", "name").strip()
    assert kc.url not in servers(local)


# ---- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize("context, code, message", [
    ("missing", 3, 'no context "missing" in the kubeconfig (contexts: ext, ext-admin, ext-nobody'),
    ("ext-down", 7, "cannot be reached (to create ServiceAccount kube-system/argocd-manager): "
                    "the connection was refused"),
    ("ext-badca", 7, "its TLS certificate is not trusted"),
    ("ext-nobody", 4, "the credentials may not create ServiceAccount kube-system/argocd-manager"),
    ("ext-sa-only", 4, "the credentials may not create ClusterRole argocd-manager-role"),
])
def test_bad_input_registers_nothing_and_leaves_nothing(external, kc, local, context, code, message):
    reset(external)
    started = time.monotonic()
    res = tiphys(local, "cluster", "add", context, "--kubeconfig", kc.path, "--yes")
    assert res.returncode == code, (res.returncode, res.stdout, res.stderr)
    assert message in res.stderr, res.stderr
    assert time.monotonic() - started < 30, "the failure took too long"
    assert "left in the cluster" not in res.stderr, res.stderr
    assert not any(manager_objects(external).values()), manager_objects(external)
    assert kc.url not in servers(local)


def test_a_refused_registration_removes_what_the_add_made(external, kc, local):
    """The server refuses the add (a different cluster of that URL is registered, no --upsert):
    the ServiceAccount, role, binding and Secret this run made are removed again."""
    reset(external)
    res = tiphys(local, "cluster", "add", "ext", "--kubeconfig", kc.path, "--name", "other",
                 "--bearer-token", "not-the-managers")
    assert res.returncode == 0, res.stderr
    assert not any(manager_objects(external).values()), "--bearer-token creates nothing"
    res = tiphys(local, "cluster", "add", "ext", "--kubeconfig", kc.path, "--yes")
    assert res.returncode != 0 and "upsert" in res.stderr, (res.stdout, res.stderr)
    assert not any(manager_objects(external).values()), manager_objects(external)
    got = json.loads(tiphys(local, "cluster", "get", kc.url, "-o", "json").stdout)
    assert got["name"] == "other", got
    assert tiphys(local, "cluster", "rm", kc.url, "-y").returncode == 0


# ---- the stored cluster, side by side with upstream ---------------------------------------------


def cluster_secret(plane, url):
    """The cluster Secret of `url` in the installation, its data decoded (config parsed)."""
    items = plane.get_json("secret", "-n", ARGOCD_NS, "-l", "argocd.argoproj.io/secret-type=cluster")["items"]
    found = [s for s in items if base64.b64decode(s["data"]["server"]).decode() == url]
    if not found:
        return None
    assert len(found) == 1, [s["metadata"]["name"] for s in found]
    s = found[0]
    data = {k: base64.b64decode(v).decode() for k, v in s["data"].items()}
    data["config"] = json.loads(data["config"])
    return {"name": s["metadata"]["name"], "type": s.get("type"), "labels": s["metadata"].get("labels"),
            "annotations": s["metadata"].get("annotations"), "data": data}


def wait_until(what, probe, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(0.1)
    pytest.fail(f"not within {timeout} s: {what}")


@pytest.fixture(scope="module")
def installation(controlplane, tmp_path_factory):
    """tiphys --kube and upstream argocd-server on the session's installation, and the upstream
    CLI logged in to each."""
    d = tmp_path_factory.mktemp("installation")
    password = controlplane.state["argocd"]["admin_password"]
    server = start_server(d, "--insecure", "--kube", "--kubeconfig", controlplane.state["kubeconfig"],
                          "--namespace", ARGOCD_NS, "--redis", controlplane.state["redis"]["address"],
                          "--cluster-access", "on")
    upstream = controlplane.start_argocd_server()
    to_tiphys = ArgoCli(d / "to-tiphys", "--plaintext")
    to_tiphys("login", server.addr, "--username", "admin", "--password", password, "--plaintext")
    to_upstream = ArgoCli(d / "to-upstream", ca=controlplane.pki.ca)
    to_upstream("login", upstream["address"], "--username", "admin", "--password", password)
    token = login_token(server, "admin", password)
    yield SimpleNamespace(plane=controlplane, server=server, to_tiphys=to_tiphys, to_upstream=to_upstream,
                          token=token, conn=("--server", server.addr, "--plaintext", "--auth-token", token))
    server.stop()


@pytest.mark.parametrize("context, flags", [
    ("ext", ("--label", "team=a", "--annotation", "note=x", "--project", "default")),
    ("ext-admin", ("--namespace", "apps", "--cluster-resources", "--name", "ext-cert")),
    ("ext", ("--exec-command", "PLUGIN", "--exec-command-args", "get-token", "--exec-command-args", "--fast",
             "--exec-command-env", "A=1", "--exec-command-env", "B=2",
             "--exec-command-api-version", "client.authentication.k8s.io/v1beta1",
             "--exec-command-install-hint", "see the docs", "--shard", "1", "--name", "ext-exec")),
])
def test_the_stored_cluster_is_upstreams(external, kc, installation, context, flags):
    """The same add three ways (upstream's CLI to argocd-server, upstream's CLI to tiphys,
    tiphys's CLI to tiphys) stores the same cluster Secret, field by field. The token is the same
    too: each add reuses the token Secret of the first."""
    ensure_namespaces(external, "apps")
    reset(external, ("apps",))
    plane = installation.plane
    flags = tuple(kc.plugin if f == "PLUGIN" else f for f in flags)
    args = ("cluster", "add", context, "--kubeconfig", kc.path, "-y", *flags)

    def via_upstream_to_upstream():
        installation.to_upstream(*args)

    def via_upstream_to_tiphys():
        installation.to_tiphys(*args)

    def via_tiphys():
        res = cli(*args, *installation.conn, timeout=90)
        assert res.returncode == 0, res.stderr

    stored = {}
    for how in (via_upstream_to_upstream, via_upstream_to_tiphys, via_tiphys):
        how()
        stored[how.__name__] = wait_until(f"the cluster Secret after {how.__name__}",
                                          lambda: cluster_secret(plane, kc.url))
        plane.kubectl("delete", "secret", stored[how.__name__]["name"], "-n", ARGOCD_NS)
        wait_until("the cluster gone from tiphys",
                   lambda: kc.url not in cli("cluster", "list", "-o", "name", *installation.conn).stdout.split())
    upstream = stored["via_upstream_to_upstream"]
    config = upstream["data"]["config"]
    assert config["tlsClientConfig"]["caData"] == b64(external.pki.ca), config
    if "--exec-command" in flags:
        assert "bearerToken" not in config, config
        assert config["execProviderConfig"] == {
            "command": kc.plugin, "args": ["get-token", "--fast"], "env": {"A": "1", "B": "2"},
            "apiVersion": "client.authentication.k8s.io/v1beta1", "installHint": "see the docs"}, config
        assert upstream["data"]["shard"] == "1", upstream
        assert not any(manager_objects(external).values()), "an exec provider makes no manager"
    elif context == "ext":
        assert config["bearerToken"] == manager_token(external), "upstream registers the manager's token"
        assert "certData" not in config["tlsClientConfig"], config
        assert upstream["labels"]["team"] == "a" and upstream["annotations"]["note"] == "x", upstream
        assert upstream["data"]["name"] == "ext" and upstream["data"]["project"] == "default", upstream
    else:
        assert "bearerToken" not in config, "with a client certificate, upstream registers no token"
        assert config["tlsClientConfig"]["certData"] == b64(external.pki.admin), config
        assert upstream["data"]["namespaces"] == "apps" and upstream["data"]["clusterResources"] == "true", upstream
    for how in ("via_upstream_to_tiphys", "via_tiphys"):
        got = stored[how]
        for field in ("name", "type", "labels", "annotations"):
            assert got[field] == upstream[field], (how, field, got[field], upstream[field])
        assert sorted(got["data"]) == sorted(upstream["data"]), (how, sorted(got["data"]), sorted(upstream["data"]))
        for key in upstream["data"]:
            assert got["data"][key] == upstream["data"][key], (how, key, got["data"][key], upstream["data"][key])
    reset(external, ("apps",))


# ---- the added cluster in use --------------------------------------------------------------------


def test_the_controller_deploys_to_the_added_cluster(external, kc, installation, gitservers, tmp_path):
    from test_upstream_chain import Repo, manifests, wait_for  # noqa: PLC0415

    reset(external)
    res = cli("cluster", "add", "ext", "--kubeconfig", kc.path, "-y", "--upsert", *installation.conn, timeout=90)
    assert res.returncode == 0, res.stderr
    api = Api(installation.server, installation.token)
    path = "/api/v1/clusters/" + kc.url.replace(":", "%3A").replace("/", "%2F")
    version = json.loads(external.kubectl("get", "--raw", "/version"))
    got = api.get(path, timeout=30).json()
    assert got["connectionState"]["status"] == "Successful", got
    assert got["serverVersion"] == f"{version['major']}.{version['minor']}", got

    # An application to the external cluster, synced by upstream's controller through the Secret.
    repo = Repo(gitservers, tmp_path, uniq("ext-deploy"))
    repo.commit(manifests("hello"), "first")
    ensure_namespaces(external, "deployed")
    name = uniq("ext-app")
    body = app_body(name, project="default", repo=repo.url, path="manifests", dest_namespace="deployed",
                    server=kc.url, syncPolicy={"automated": {}})
    body["spec"]["source"]["targetRevision"] = "main"
    api.must_create(body)
    wait_for("the application's ConfigMap in the external cluster",
             lambda: external.kubectl("get", "configmap", "chain-1", "-n", "deployed", "--ignore-not-found",
                                      "-o", "json").strip())
    assert external.get_json("configmap", "chain-1", "-n", "deployed")["data"] == {"greeting": "hello"}
    wait_for("the application Synced", lambda: (api.must_get(name).get("status", {}).get("sync", {})
                                               .get("status") == "Synced"))
    r = api.delete(name)
    assert r.status == 200, r
    wait_for("the objects deleted with the application",
             lambda: external.kubectl("get", "configmap", "chain-1", "-n", "deployed", "--ignore-not-found").strip() == "")
    wait_for("the application gone", lambda: name not in api.names())

    # The manager's token revoked: the state says so once checked again.
    token = manager_token(external)
    external.kubectl("delete", "secret", TOKEN_SECRET, "-n", SYSTEM_NS)
    failed = wait_for("the cluster Failed after its token was revoked", lambda: (
        (c := api.call("POST", f"{path}/invalidate-cache", {}, timeout=30).json())
        and c["connectionState"]["status"] == "Failed" and c), timeout=60, interval=2)
    assert "401 Unauthorized" in failed["connectionState"]["message"], failed
    assert token not in json.dumps(failed)
    assert cli("cluster", "rm", kc.url, "-y", *installation.conn).returncode == 0
    reset(external)
