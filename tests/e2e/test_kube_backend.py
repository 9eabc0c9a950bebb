"""tiphys in place of argocd-server (issue 37): `tiphys server --kube` on the installation of
controlplane.py, whose Applications and AppProjects are the custom resources that upstream's
application-controller syncs. Each test checks what tiphys answers against what the real
kube-apiserver holds and what the real controller did:

  objects created through tiphys are custom resources, exactly; kubectl's changes appear in
  tiphys's list and watch within a second; a stale resourceVersion is a conflict; a sync
  through tiphys is carried out by the controller, its result and history shown by tiphys, a
  push with auto-sync gives a second entry, a rollback returns to the first; a refresh waits
  for the controller; a cascading delete removes the objects, a non-cascading one leaves them;
  and the start fails clearly without an API server, and without the permission it needs.

Runs under tools/upstream/isolated (see controlplane.py); .ci/test-all runs it there.
"""

import base64
import json
import re
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from appkit import APPS, Api, app_body, open_watch, uniq
from argocdkit import ArgoCli
from authkit import ALICE_PW, HASHES, bearer, login_token, metrics_text, request, run_server_expecting_exit
from conftest import start_server
from test_upstream_chain import Repo, manifests, wait_for

NS = "argocd"
WAIT = 120  # the controller reconciles every 10 s here (controlplane.RECONCILIATION)
SEEN_WITHIN = 1.0  # seconds for a change made with kubectl to reach tiphys's list and watch


def start_kube_server(workdir, kubeconfig, *extra):
    """tiphys --kube with the installation's own settings (argocd-cm, argocd-rbac-cm and
    argocd-secret of controlplane.py, whose admin password is the plane's)."""
    return start_server(workdir, "--insecure", "--kube", "--kubeconfig", str(kubeconfig), "--namespace", NS, *extra)


def kube_beside_controller(controlplane, d, *extra):
    """tiphys --kube --redis (the controller's Redis) on the session's installation in work dir
    `d`, with `extra` flags, and admin's REST client of it."""
    server = start_kube_server(d, controlplane.state["kubeconfig"], "--redis", controlplane.state["redis"]["address"],
                               *extra)
    token = login_token(server, "admin", controlplane.state["argocd"]["admin_password"])
    return SimpleNamespace(server=server, api=Api(server, token), workdir=d)


@pytest.fixture(scope="module")
def kube(controlplane, tmp_path_factory):
    """tiphys --kube on the session's installation, and admin's REST client of it."""
    d = tmp_path_factory.mktemp("kube")
    server = start_kube_server(d, controlplane.state["kubeconfig"], "--redis", controlplane.state["redis"]["address"])
    token = login_token(server, "admin", controlplane.state["argocd"]["admin_password"])
    yield SimpleNamespace(server=server, api=Api(server, token))
    server.stop()


def cr(plane, kind, name):
    return plane.get_json(kind, name, "-n", NS)


def app_cr(name, **spec):
    body = app_body(name, project="default", **spec)
    body["metadata"]["namespace"] = NS
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", **body}


def test_objects_created_through_tiphys_are_the_custom_resources(plane, kube):
    name = uniq("made")
    made = kube.api.must_create(app_body(name, project="default"))
    stored = cr(plane, "application", name)
    assert stored["spec"] == made["spec"], (stored["spec"], made["spec"])
    # (Not the generation: the controller's first status write may already have raised it, the
    # Application CRD having no status subresource.)
    for field in ("uid", "creationTimestamp"):
        assert stored["metadata"][field] == made["metadata"][field], field
    # tiphys's resourceVersion is the API server's.
    assert int(made["metadata"]["resourceVersion"]) <= int(stored["metadata"]["resourceVersion"])
    # The default project is the AppProject argocd-server would have made.
    default = cr(plane, "appproject", "default")
    assert default["spec"]["sourceRepos"] == ["*"], default["spec"]
    r = kube.api.call("DELETE", f"{APPS}/{name}?cascade=false")
    assert r.status == 200, r
    wait_for("the application gone from the API server",
             lambda: plane.kubectl("get", "application", name, "-n", NS, "--ignore-not-found").strip() == "",
             timeout=10)


def test_kubectl_changes_reach_list_and_watch_within_a_second(plane, kube, watches):
    watch = watches.add(open_watch("sse", kube.server, kube.api.token))
    name = uniq("kubectl")
    plane.apply([app_cr(name)])
    applied = time.monotonic()
    seen = None
    while seen is None:
        kind, who, rv, app = watch.event(timeout=SEEN_WITHIN * 5)
        if who == name:
            seen = time.monotonic() - applied
            assert kind == "ADDED", (kind, app)
    assert seen < SEEN_WITHIN, f"the watch saw kubectl's application after {seen:.2f} s"
    assert name in kube.api.names()

    project = uniq("proj")
    plane.apply([{"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
                  "metadata": {"name": project, "namespace": NS},
                  "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}]}}])
    wait_for("kubectl's project in tiphys's list",
             lambda: project in [p["metadata"]["name"] for p in kube.api.get("/api/v1/projects").json()["items"]],
             timeout=SEEN_WITHIN, interval=0.05)

    plane.kubectl("delete", "application", name, "-n", NS)
    deleted = time.monotonic()
    while True:
        kind, who, _, _ = watch.event(timeout=SEEN_WITHIN * 5)
        if who == name and kind == "DELETED":
            break
    assert time.monotonic() - deleted < SEEN_WITHIN + 1  # kubectl returns once the deletion is done
    assert name not in kube.api.names()
    plane.kubectl("delete", "appproject", project, "-n", NS)
    wait_for("the project gone from tiphys's list",
             lambda: project not in [p["metadata"]["name"] for p in kube.api.get("/api/v1/projects").json()["items"]],
             timeout=SEEN_WITHIN * 2, interval=0.05)


def test_a_stale_resource_version_is_a_conflict(plane, kube):
    project = uniq("stale")
    made = kube.api.call("POST", "/api/v1/projects", {"project": {
        "metadata": {"name": project}, "spec": {"sourceRepos": ["*"]}}})
    assert made.status == 200, made
    first = made.json()
    # Someone else changes it with kubectl; tiphys's caller still holds the first version.
    plane.kubectl("label", "appproject", project, "-n", NS, "changed=yes")
    wait_for("the label in tiphys",
             lambda: kube.api.get(f"/api/v1/projects/{project}").json()["metadata"].get("labels"),
             timeout=5, interval=0.05)
    first["spec"]["description"] = "from a stale read"
    r = kube.api.call("PUT", f"/api/v1/projects/{project}", {"project": first})
    assert r.status == 409, r
    assert "resourceVersion" in r.json()["message"], r.json()
    assert "description" not in cr(plane, "appproject", project)["spec"]
    assert kube.api.call("DELETE", f"/api/v1/projects/{project}").status == 200


def status_of(api, name):
    return api.must_get(name).get("status", {})


def test_a_sync_through_tiphys_is_carried_out_by_the_controller(plane, kube, gitservers, tmp_path):
    repo = Repo(gitservers, tmp_path, uniq("kube-sync"))
    first = repo.commit(manifests("hello"), "first")
    ns = plane.new_namespace("kube-sync")
    name = uniq("sync")
    body = app_body(name, project="default", repo=repo.url, path="manifests", dest_namespace=ns)
    body["spec"]["source"]["targetRevision"] = "main"
    kube.api.must_create(body)

    r = kube.api.call("POST", f"{APPS}/{name}/sync", {"revision": "main"})
    assert r.status == 200, r
    assert r.json()["operation"]["sync"]["revision"] == "main", r.json().get("operation")
    again = kube.api.call("POST", f"{APPS}/{name}/sync", {})
    assert again.status in (200, 400), again  # refused while the first runs, unless it already ended
    st = wait_for("Synced and Healthy after the sync", lambda: (s := status_of(kube.api, name))
                  and s.get("sync", {}).get("status") == "Synced" and s.get("health", {}).get("status") == "Healthy"
                  and s.get("operationState", {}).get("phase") == "Succeeded" and s)
    assert st["sync"]["revision"] == first, st["sync"]
    assert [h["revision"] for h in st["history"]] == [first], st["history"]
    for cm in ("chain-1", "chain-2"):
        assert plane.get_json("configmap", cm, "-n", ns)["data"] == {"greeting": "hello"}

    # Auto-sync picks up a push.
    r = kube.api.call("PATCH", f"{APPS}/{name}", {
        "patch": json.dumps({"spec": {"syncPolicy": {"automated": {}}}}), "patchType": "merge"})
    assert r.status == 200, r
    second = repo.commit(manifests("bonjour"), "second")
    st = wait_for("a second history entry after the push",
                  lambda: (s := status_of(kube.api, name)) and len(s.get("history", [])) == 2 and s)
    assert [h["revision"] for h in st["history"]] == [first, second], st["history"]
    wait_for("the new data in the API server",
             lambda: plane.get_json("configmap", "chain-1", "-n", ns)["data"] == {"greeting": "bonjour"})

    # A rollback is refused while auto-sync would undo it; without auto-sync it returns to the first.
    first_id = st["history"][0]["id"]
    r = kube.api.call("POST", f"{APPS}/{name}/rollback", {"id": first_id})
    assert r.status == 400 and "auto-sync is enabled" in r.json()["message"], r
    r = kube.api.call("PATCH", f"{APPS}/{name}", {
        "patch": json.dumps({"spec": {"syncPolicy": None}}), "patchType": "merge"})
    assert r.status == 200, r
    r = kube.api.call("POST", f"{APPS}/{name}/rollback", {"id": 12345})
    assert r.status == 400 and "does not have deployment with id 12345" in r.json()["message"], r
    r = kube.api.call("POST", f"{APPS}/{name}/rollback", {"id": first_id})
    assert r.status == 200, r
    wait_for("the first data back after the rollback",
             lambda: plane.get_json("configmap", "chain-1", "-n", ns)["data"] == {"greeting": "hello"})
    st = wait_for("a third history entry, of the first revision",
                  lambda: (s := status_of(kube.api, name)) and len(s.get("history", [])) == 3 and s)
    assert st["history"][-1]["revision"] == first, st["history"]

    # A refresh answers once the controller has compared again.
    before = status_of(kube.api, name).get("reconciledAt")
    r = kube.api.get(f"{APPS}/{name}?refresh=normal", timeout=WAIT)
    assert r.status == 200, r
    refreshed = r.json()
    assert "argocd.argoproj.io/refresh" not in (refreshed["metadata"].get("annotations") or {}), refreshed["metadata"]
    assert refreshed["status"].get("reconciledAt") and refreshed["status"]["reconciledAt"] >= (before or ""), \
        (before, refreshed["status"].get("reconciledAt"))

    # A cascading delete (the default) lets the controller delete the objects first.
    r = kube.api.delete(name)
    assert r.status == 200, r
    wait_for("the objects deleted with the application (cascade)",
             lambda: plane.kubectl("get", "configmap", "chain-1", "-n", ns, "--ignore-not-found").strip() == "")
    wait_for("the application gone", lambda: name not in kube.api.names())


def test_pages_filter_and_count_by_what_the_controller_reports(plane, kube, gitservers, tmp_path):
    """Issue 41's pages on the Kubernetes backend: the sync and health the real controller wrote
    into the custom resources select, sort and count."""
    repo = Repo(gitservers, tmp_path, uniq("kube-pages"))
    repo.commit(manifests("hello"), "first")
    prefix = uniq("pages")
    synced, pending = f"{prefix}-synced", f"{prefix}-pending"
    for name in (synced, pending):
        body = app_body(name, project="default", repo=repo.url, path="manifests",
                        dest_namespace=plane.new_namespace(name[-20:]))
        body["spec"]["source"]["targetRevision"] = "main"
        kube.api.must_create(body)
    assert kube.api.call("POST", f"{APPS}/{synced}/sync", {"revision": "main"}).status == 200

    def reported(name):
        s = status_of(kube.api, name)
        return s.get("sync", {}).get("status"), s.get("health", {}).get("status")
    wait_for("the controller's verdicts", lambda: reported(synced) == ("Synced", "Healthy")
             and reported(pending) == ("OutOfSync", "Missing"))

    def names(**params):
        page = kube.api.list(search=prefix, **params)
        return [a["metadata"]["name"] for a in page["items"] or []], page
    assert names(filter="sync=OutOfSync")[0] == [pending]
    assert names(filter="health=Healthy")[0] == [synced]
    assert names(filter=["sync=Synced", "health=Missing"])[0] == []
    assert names(sort="sync", limit=1)[0] == [pending], "out of sync first"
    first, page = names(sort="-sync", limit=1)
    assert first == [synced] and page["metadata"]["continue"], page["metadata"]
    _, page = names(limit=10, facets="sync,health")
    counts = {f["field"]: {v["value"]: v["count"] for v in f["values"]} for f in page["facets"]}
    assert counts == {"sync": {"Synced": 1, "OutOfSync": 1}, "health": {"Healthy": 1, "Missing": 1}}, counts
    # An Application applied with kubectl is in the next page at once.
    late = f"{prefix}-late"
    plane.apply([app_cr(late)])
    wait_for("the kubectl-applied application in the page", lambda: late in names(limit=10)[0], timeout=5)
    for name in (synced, pending, late):
        assert kube.api.delete(name).status == 200


def test_a_delete_without_cascade_leaves_the_objects(plane, kube, gitservers, tmp_path):
    repo = Repo(gitservers, tmp_path, uniq("kube-orphan"))
    repo.commit(manifests("kept"), "only")
    ns = plane.new_namespace("kube-orphan")
    name = uniq("orphan")
    body = app_body(name, project="default", repo=repo.url, path="manifests", dest_namespace=ns,
                    syncPolicy={"automated": {}})
    body["spec"]["source"]["targetRevision"] = "main"
    kube.api.must_create(body)
    wait_for("the objects synced", lambda: plane.kubectl(
        "get", "configmap", "chain-1", "-n", ns, "--ignore-not-found").strip() != "")
    r = kube.api.call("DELETE", f"{APPS}/{name}?cascade=false&propagationPolicy=foreground")
    assert r.status == 400 and "cascading is disabled" in r.json()["message"], r
    r = kube.api.call("DELETE", f"{APPS}/{name}?cascade=false")
    assert r.status == 200, r
    wait_for("the application gone", lambda: name not in kube.api.names(), timeout=30)
    time.sleep(2)  # the controller had its chance to (wrongly) delete them
    assert plane.get_json("configmap", "chain-1", "-n", ns)["data"] == {"greeting": "kept"}


def test_terminate_ends_a_running_operation(plane, kube, gitservers, tmp_path):
    repo = Repo(gitservers, tmp_path, uniq("kube-hook"))
    hook = """---
apiVersion: v1
kind: Pod
metadata:
  name: waits
  annotations:
    argocd.argoproj.io/hook: PreSync
spec:
  restartPolicy: Never
  containers:
  - name: wait
    image: example.invalid/never:1
"""
    repo.commit({**manifests("hooked"), "manifests/hook.yaml": hook}, "with a hook that never ends")
    ns = plane.new_namespace("kube-hook")
    name = uniq("hook")
    body = app_body(name, project="default", repo=repo.url, path="manifests", dest_namespace=ns)
    body["spec"]["source"]["targetRevision"] = "main"
    kube.api.must_create(body)
    assert kube.api.call("POST", f"{APPS}/{name}/sync", {}).status == 200
    # No node runs the hook's pod, so the operation waits on it.
    wait_for("the operation running", lambda: status_of(kube.api, name).get("operationState", {})
             .get("phase") == "Running")
    r = kube.api.call("DELETE", f"{APPS}/{name}/operation")
    assert r.status == 200, r
    st = wait_for("the operation ended", lambda: (s := status_of(kube.api, name).get("operationState", {}))
                  and s.get("phase") in ("Failed", "Error") and s)
    assert "terminated" in st.get("message", "").lower(), st
    r = kube.api.call("DELETE", f"{APPS}/{name}/operation")
    assert r.status == 400 and "No operation is in progress" in r.json()["message"], r
    assert kube.api.call("DELETE", f"{APPS}/{name}?cascade=false").status == 200


def test_no_api_server_is_a_clear_start_error(tmp_path):
    port = subprocess.run(["python3", "-c", "import socket;s=socket.socket();s.bind(('127.0.0.1',0));"
                           "print(s.getsockname()[1])"], capture_output=True, text=True).stdout.strip()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    res = run_server_expecting_exit(tmp_path, "--kube", "--kubeconfig", str(kubeconfig))
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert f"https://127.0.0.1:{port}" in out and "Kubernetes API server" in out, out


def service_account_kubeconfig(plane, tmp_path, name, rules):
    """A kubeconfig of a new ServiceAccount in NS whose Role has `rules`."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": NS}, "rules": rules}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": name, "namespace": NS},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NS}]}
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": NS}}
    plane.apply([sa, role, binding])
    token = plane.kubectl("create", "token", name, "-n", NS).strip()
    kubeconfig = tmp_path / f"{name}.kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": plane.state["apiserver"]["url"],
                                               "certificate-authority": plane.state["pki"]["ca"]}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": NS}}]}))
    return kubeconfig


def test_a_service_account_missing_a_verb_is_named(plane, tmp_path):
    read_only = [{"apiGroups": ["argoproj.io"], "resources": ["applications", "appprojects", "applicationsets"],
                  "verbs": ["get", "list", "watch"]},
                 {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "list", "watch"]}]
    kubeconfig = service_account_kubeconfig(plane, tmp_path, uniq("reader"), read_only)
    # With the default project in place already (made here unless a server made it), the start
    # needs only reads.
    default = {"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
               "metadata": {"name": "default", "namespace": NS},
               "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}],
                        "clusterResourceWhitelist": [{"group": "*", "kind": "*"}]}}
    plane.kubectl("create", "-f", "-", check=False, input=json.dumps(default))
    server = start_kube_server(tmp_path, kubeconfig)
    try:
        api = Api(server, login_token(server, "admin", plane.state["argocd"]["admin_password"]))
        r = api.create(app_body(uniq("denied"), project="default"))
        assert r.status == 400, r
        message = r.json()["message"]
        assert "may not create applications in namespace argocd" in message, message
    finally:
        server.stop()

    nothing = service_account_kubeconfig(plane, tmp_path, uniq("nobody"), [])
    res = run_server_expecting_exit(tmp_path, "--kube", "--kubeconfig", str(nothing), "--namespace", NS)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "may not list applications in namespace argocd" in out, out


def can_i(server, token, resource, action, sub):
    r = request(server, "GET", f"/api/v1/account/can-i/{resource}/{action}/{sub}", headers=bearer(token))
    assert r.status == 200, r
    return r.json()["value"]


def test_the_installation_settings_apply_without_a_restart(plane, kube):
    """argocd-cm, argocd-secret and argocd-rbac-cm edited with kubectl: a new account can log in,
    a policy line changes the next decision, and a bad policy keeps the last good one."""
    user = "kubealice"
    cm, rbac, secret = (plane.get_json(kind, name, "-n", NS) for kind, name in
                        (("configmap", "argocd-cm"), ("configmap", "argocd-rbac-cm"), ("secret", "argocd-secret")))
    try:
        plane.kubectl("patch", "configmap", "argocd-cm", "-n", NS, "--type", "merge",
                      "-p", json.dumps({"data": {f"accounts.{user}": "login"}}))
        plane.kubectl("patch", "secret", "argocd-secret", "-n", NS, "--type", "merge",
                      "-p", json.dumps({"stringData": {f"accounts.{user}.password": HASHES[ALICE_PW]}}))
        token = wait_for("the new account able to log in", lambda: (r := request(
            kube.server, "POST", "/api/v1/session", {"username": user, "password": ALICE_PW})).status == 200
            and r.json()["token"], timeout=10, interval=0.1)
        assert can_i(kube.server, token, "projects", "get", "default") == "no"

        plane.kubectl("patch", "configmap", "argocd-rbac-cm", "-n", NS, "--type", "merge",
                      "-p", json.dumps({"data": {"policy.csv": f"p, {user}, projects, get, *, allow\n"}}))
        edited = time.monotonic()
        wait_for("the policy line in force", lambda: can_i(kube.server, token, "projects", "get", "default") == "yes",
                 timeout=5, interval=0.02)
        assert time.monotonic() - edited < 2, "the edit took more than 2 s to apply"

        errors = metric_value(kube.server, "tiphys_rbac_policy_reload_errors")
        plane.kubectl("patch", "configmap", "argocd-rbac-cm", "-n", NS, "--type", "merge",
                      "-p", json.dumps({"data": {"policy.default": "role:admin",
                                                 "policy.csv": f"p, {user}, projects, get\n"}}))
        wait_for("the bad policy reported", lambda: metric_value(kube.server, "tiphys_rbac_policy_reload_errors")
                 > errors, timeout=5, interval=0.05)
        assert can_i(kube.server, token, "projects", "get", "default") == "yes"
        assert can_i(kube.server, token, "clusters", "delete", "*") == "no", "the bad policy's default took effect"
    finally:
        for obj in (cm, rbac, secret):
            for field in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
                obj["metadata"].pop(field, None)
        plane.kubectl("replace", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                             "items": [cm, rbac, secret]}))


def metric_value(server, name):
    for line in metrics_text(server).splitlines():
        if re.match(rf"{name}(_total)?(\{{.*\}})? ", line):
            return float(line.rsplit(" ", 1)[1])
    pytest.fail(f"no metric {name}")


class Cuttable:
    """A TCP relay from a loopback port to the API server's, which the test can cut (every
    connection closed, new ones refused) and restore on the same port: an API server lost and
    back, as tiphys sees it."""

    def __init__(self, target_port):
        self.target = ("127.0.0.1", target_port)
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.conns = []
        self.lock = threading.Lock()
        self.listener = None
        self.restore()

    def restore(self):
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(64)
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def cut(self):
        # shutdown wakes the accepting thread (close alone leaves the listening socket open
        # while accept() holds it).
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        with self.lock:
            for c in self.conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            self.conns.clear()

    def _accept(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def test_an_api_server_lost_mid_run_fails_requests_clearly_and_nothing_is_lost(plane, tmp_path):
    relay = Cuttable(plane.state["apiserver"]["port"])
    url = f"https://127.0.0.1:{relay.port}"
    kubeconfig = tmp_path / "relayed.kubeconfig"
    config = plane.get_json("configmap", "kube-root-ca.crt", "-n", "default")  # any read works
    assert config["metadata"]["name"] == "kube-root-ca.crt"
    original = Path(plane.state["kubeconfig"]).read_text()
    kubeconfig.write_text(original.replace(plane.state["apiserver"]["url"], url))
    server = start_kube_server(tmp_path, kubeconfig)
    try:
        api = Api(server, login_token(server, "admin", plane.state["argocd"]["admin_password"]))
        before = uniq("before")
        api.must_create(app_body(before, project="default"))

        relay.cut()
        t0 = time.monotonic()
        r = api.create(app_body(uniq("during"), project="default"), timeout=30)
        assert r.status == 503, r
        assert r.json()["code"] == 14 and url in r.json()["message"], r.json()
        assert time.monotonic() - t0 < 12, "the write took longer than its bound to fail"
        # Reads go on from memory.
        assert before in api.names()
        # A change made while tiphys cannot see the API server.
        missed = uniq("missed")
        plane.apply([app_cr(missed)])
        plane.kubectl("delete", "application", before, "-n", NS)

        relay.restore()
        wait_for("the change made during the outage in tiphys's list",
                 lambda: (names := api.names()) and missed in names and before not in names, timeout=60)
        after = uniq("after")
        api.must_create(app_body(after, project="default"))
        assert cr(plane, "application", after)["metadata"]["name"] == after
        for name in (missed, after):
            assert api.call("DELETE", f"{APPS}/{name}?cascade=false").status == 200
    finally:
        server.stop()
        relay.cut()


def test_a_custom_resource_that_does_not_decode_is_skipped_and_reported(plane, kube):
    bad, good = uniq("undecodable"), uniq("decodable")
    # The CRD takes any integer below 2^53 as a replica count; an IntOrString holds an int32
    # (as upstream's Go types do, so its controller cannot read this one either).
    broken = app_cr(bad)
    broken["spec"]["source"]["kustomize"] = {"replicas": [{"name": "web", "count": 1 << 40}]}
    plane.apply([app_cr(good)])
    applied = plane.kubectl("apply", "-f", "-", input=json.dumps(broken))
    wait_for("the good application served", lambda: good in kube.api.names(), timeout=5, interval=0.05)
    if bad in kube.api.names():
        pytest.fail(f"an application tiphys cannot decode was served: {applied}")
    assert f"{bad} from Kubernetes does not decode" in kube.server.logs(), kube.server.logs()[-3000:]
    for name in (good, bad):
        plane.kubectl("delete", "application", name, "-n", NS, "--ignore-not-found")


def upstream_call(plane, method, path, token=None, body=None):
    """One REST call to upstream argocd-server (TLS, the plane's CA): (status, JSON)."""
    server = plane.start_argocd_server()
    ctx = ssl.create_default_context(cafile=plane.state["pki"]["ca"])
    req = urllib.request.Request(server["url"] + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json",
                                          **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_a_token_from_either_server_works_on_the_other(plane, kube):
    password = plane.state["argocd"]["admin_password"]
    status, body = upstream_call(plane, "POST", "/api/v1/session", body={"username": "admin", "password": password})
    assert status == 200, body
    upstream_token = body["token"]
    r = Api(kube.server, upstream_token).get("/api/v1/projects")
    assert r.status == 200, r
    assert "default" in [p["metadata"]["name"] for p in r.json()["items"]]

    tiphys_token = login_token(kube.server, "admin", password)
    status, body = upstream_call(plane, "GET", "/api/v1/projects", tiphys_token)
    assert status == 200, body
    assert "default" in [p["metadata"]["name"] for p in body["items"]]


@pytest.mark.controlplane
def test_missing_crds_stop_the_start_and_are_named(tmp_path):
    """An API server without Argo CD's CRDs (etcd and kube-apiserver alone, from controlplane.py)."""
    from controlplane import ControlPlane, PartFailed, Pki, upstream_bins  # noqa: PLC0415
    bare = ControlPlane(tmp_path / "bare")
    try:
        bare.bins = upstream_bins()
        bare.pki = Pki(bare.root / "pki")
        bare._etcd()
        bare._apiserver()
    except PartFailed as e:
        bare.down()
        pytest.fail(f"the bare API server did not start: {e}", pytrace=False)
    try:
        res = run_server_expecting_exit(tmp_path, "--kube", "--kubeconfig", bare.state["kubeconfig"],
                                        "--namespace", NS, timeout=60)
        out = res.stdout + res.stderr
        assert res.returncode != 0, out
        for crd in ("applications.argoproj.io", "appprojects.argoproj.io", "applicationsets.argoproj.io"):
            assert crd in out, out
        assert "CustomResourceDefinitions" in out, out
    finally:
        bare.down()


def test_upstream_cli_runs_an_application_through_tiphys(plane, kube, gitservers, tmp_path):
    """argocd app create, sync, wait, get, history, rollback and delete (Argo CD's own CLI, over
    plaintext gRPC to tiphys), the controller doing the work."""
    cli = ArgoCli(tmp_path / "cli", "--plaintext")
    res = cli("login", kube.server.addr, "--username", "admin",
              "--password", plane.state["argocd"]["admin_password"], "--plaintext")
    assert "'admin:login' logged in successfully" in res.stdout, res.stdout
    repo = Repo(gitservers, tmp_path, uniq("kube-cli"))
    first = repo.commit(manifests("one"), "first")
    ns = plane.new_namespace("kube-cli")
    name = uniq("cli")
    cli("app", "create", name, "--repo", repo.url, "--path", "manifests", "--revision", "main",
        "--dest-server", "https://kubernetes.default.svc", "--dest-namespace", ns)
    assert cr(plane, "application", name)["spec"]["source"]["repoURL"] == repo.url
    cli("app", "sync", name, "--timeout", str(WAIT), timeout=WAIT + 30)
    cli("app", "wait", name, "--sync", "--health", "--timeout", str(WAIT), timeout=WAIT + 30)
    got = cli.json("app", "get", name)
    assert got["status"]["sync"]["status"] == "Synced" and got["status"]["health"]["status"] == "Healthy", got["status"]
    listed = {a["metadata"]["name"]: a for a in cli.json("app", "list")}  # gRPC List
    assert listed[name]["metadata"]["resourceVersion"] == cr(plane, "application", name)["metadata"]["resourceVersion"] \
        or listed[name]["status"]["sync"]["status"] == "Synced", listed[name]["metadata"]
    second = repo.commit(manifests("two"), "second")
    cli("app", "sync", name, "--timeout", str(WAIT), timeout=WAIT + 30)
    cli("app", "wait", name, "--sync", "--health", "--timeout", str(WAIT), timeout=WAIT + 30)
    assert plane.get_json("configmap", "chain-1", "-n", ns)["data"] == {"greeting": "two"}
    history = cli("app", "history", name).stdout
    assert first[:7] in history and second[:7] in history, history
    first_id = cli.json("app", "get", name)["status"]["history"][0]["id"]
    cli("app", "rollback", name, str(first_id), "--timeout", str(WAIT), timeout=WAIT + 30)
    wait_for("the first data back after `argocd app rollback`",
             lambda: plane.get_json("configmap", "chain-1", "-n", ns)["data"] == {"greeting": "one"})
    cli("app", "delete", name, "--yes", "--wait", timeout=WAIT + 30)
    assert plane.kubectl("get", "application", name, "-n", NS, "--ignore-not-found").strip() == ""
    wait_for("the objects deleted with the application",
             lambda: plane.kubectl("get", "configmap", "chain-1", "-n", ns, "--ignore-not-found").strip() == "")


def test_a_fresh_installation_gets_its_key_and_admin_password_as_upstream_writes_them(plane, tmp_path):
    ns = plane.new_namespace("fresh")
    server = start_server(tmp_path, "--insecure", "--kube", "--kubeconfig", plane.state["kubeconfig"],
                          "--namespace", ns)
    try:
        secret = plane.get_json("secret", "argocd-secret", "-n", ns)
        data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
        assert len(base64.b64decode(data["server.secretkey"])) == 32, data.keys()
        assert data["admin.password"].startswith("$2"), "a bcrypt hash"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", data["admin.passwordMtime"]), data
        assert secret["metadata"]["labels"]["app.kubernetes.io/part-of"] == "argocd"
        initial = plane.get_json("secret", "argocd-initial-admin-secret", "-n", ns)
        password = base64.b64decode(initial["data"]["password"]).decode()
        assert re.fullmatch(r"[0-9A-Za-z-]{16}", password), password
        token = login_token(server, "admin", password)
    finally:
        server.stop()
    # Another start (another replica, or the pod after a restart) keeps both.
    again = start_server(tmp_path, "--insecure", "--kube", "--kubeconfig", plane.state["kubeconfig"],
                         "--namespace", ns)
    try:
        assert plane.get_json("secret", "argocd-secret", "-n", ns)["data"] == secret["data"]
        assert Api(again, token).get("/api/v1/projects").status == 200, "the token signed before the restart"
        login_token(again, "admin", password)
    finally:
        again.stop()


def test_a_logout_on_either_server_revokes_the_token_on_both(plane, kube):
    """Through Argo CD's Redis (`--redis`), as upstream's argocd-server keeps revocations."""
    password = plane.state["argocd"]["admin_password"]
    status, body = upstream_call(plane, "POST", "/api/v1/session", body={"username": "admin", "password": password})
    assert status == 200, body
    upstream_token = body["token"]
    assert Api(kube.server, upstream_token).get("/api/v1/projects").status == 200
    r = Api(kube.server, upstream_token).call("DELETE", "/api/v1/session")
    assert r.status == 200, r
    assert Api(kube.server, upstream_token).get("/api/v1/projects").status == 401
    status, body = upstream_call(plane, "GET", "/api/v1/projects", upstream_token)
    assert status == 401, (status, body)

    tiphys_token = login_token(kube.server, "admin", password)
    assert upstream_call(plane, "GET", "/api/v1/projects", tiphys_token)[0] == 200
    # Upstream's logout is /auth/logout with the session cookie (server/logout/logout.go; its
    # DELETE /api/v1/session revokes nothing).
    server = plane.start_argocd_server()
    req = urllib.request.Request(server["url"] + "/auth/logout", headers={"Cookie": f"argocd.token={tiphys_token}"})
    with urllib.request.urlopen(req, timeout=30, context=ssl.create_default_context(
            cafile=plane.state["pki"]["ca"])) as resp:
        assert resp.status in (200, 303), resp.status
    wait_for("tiphys refusing the token argocd-server logged out",
             lambda: Api(kube.server, tiphys_token).get("/api/v1/projects").status == 401, timeout=2, interval=0.05)


def differences(ours, theirs, path=""):
    """Every field where two JSON values differ, as (path, ours, theirs)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        out = []
        for key in sorted(set(ours) | set(theirs)):
            out += differences(ours.get(key), theirs.get(key), f"{path}.{key}" if path else key)
        return out
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        return [d for i, (a, b) in enumerate(zip(ours, theirs)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if ours == theirs else [(path, ours, theirs)]


# Fields where tiphys's answer differs from argocd-server's on the same object, and why (the
# README's "In place of argocd-server" lists them too).
KNOWN_DIFFERENCES = {
    # The API server's bookkeeping: argocd-server passes it on, tiphys leaves it out of what it
    # holds (a replace without it keeps it).
    "metadata.managedFields",
}


# Fields of a cluster where tiphys's answer differs, and why.
CLUSTER_DIFFERENCES = {
    # What both take from the application-controller's cache in Redis (the cluster's version,
    # connection and counts), which the controller rewrites every few seconds: compared in
    # test_resource_tree.py, which reads both until they agree.
    "info", "connectionState", "serverVersion",
    # tiphys's own field 1000: the Secret the cluster is declared in.
    "secretName",
}


def test_get_and_list_answer_as_argocd_server_does_field_by_field(plane, kube):
    password = plane.state["argocd"]["admin_password"]
    status, body = upstream_call(plane, "POST", "/api/v1/session", body={"username": "admin", "password": password})
    assert status == 200, body
    token = body["token"]
    name = uniq("same")
    plane.apply([app_cr(name)])
    wait_for("the application in tiphys", lambda: name in kube.api.names(), timeout=5, interval=0.05)
    # The controller may write its status between the two reads: compare at one version.
    for path in (f"/api/v1/applications/{name}", "/api/v1/projects/default"):
        for _ in range(20):
            status, theirs = upstream_call(plane, "GET", path, token)
            assert status == 200, theirs
            ours = kube.api.get(path).json()
            if ours["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]:
                break
            time.sleep(0.5)
        found = [d for d in differences(ours, theirs) if not any(d[0].startswith(k) for k in KNOWN_DIFFERENCES)]
        assert not found, "\n".join(f"{p}: tiphys {a!r}, argocd-server {b!r}" for p, a, b in found)
    # A cluster both read from the same Secret (the plane's, cluster-loopback).
    server = urllib.parse.quote(plane.state["apiserver"]["url"], safe="")
    status, theirs = upstream_call(plane, "GET", f"/api/v1/clusters/{server}", token)
    assert status == 200, theirs
    ours = kube.api.get(f"/api/v1/clusters/{server}").json()
    found = [d for d in differences(ours, theirs) if not any(d[0].startswith(k) for k in CLUSTER_DIFFERENCES)]
    assert not found, "\n".join(f"{p}: tiphys {a!r}, argocd-server {b!r}" for p, a, b in found)
    status, theirs = upstream_call(plane, "GET", "/api/v1/applications", token)
    ours = kube.api.list()
    ours_by = {a["metadata"]["name"]: a for a in ours["items"]}
    theirs_by = {a["metadata"]["name"]: a for a in theirs["items"]}
    assert set(ours_by) == set(theirs_by)
    plane.kubectl("delete", "application", name, "-n", NS)


# Clusters, repositories and credential templates as upstream keeps them: labelled Secrets in
# the control namespace (util/db/cluster.go, util/db/repository_secrets.go, util/db/secrets.go).

def secret_data(plane, name):
    secret = plane.get_json("secret", name, "-n", NS)
    data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    return secret, data


def secrets_labelled(plane, secret_type):
    listed = plane.get_json("secret", "-n", NS, "-l", f"argocd.argoproj.io/secret-type={secret_type}")
    return {s["metadata"]["name"]: s for s in listed["items"]}


def test_a_cluster_written_through_tiphys_is_the_secret_argocd_server_writes(plane, kube):
    password = plane.state["argocd"]["admin_password"]
    status, body = upstream_call(plane, "POST", "/api/v1/session", body={"username": "admin", "password": password})
    assert status == 200, body
    token = body["token"]

    # argocd-server asks the cluster for its version before it registers it: its cluster is
    # the plane's API server under a name of its own (the plane registers the address), with a
    # real token; tiphys does not ask (the clusters issue), so its cluster need not answer.
    port = plane.state["apiserver"]["port"]
    sa_token = plane.kubectl("create", "token", "default", "-n", NS).strip()

    def cluster(server):
        return {"server": server, "name": uniq("edge"), "namespaces": ["a", "b"], "project": "default",
                "labels": {"team": "blue"}, "annotations": {"owner": "ops"},
                "config": {"bearerToken": sa_token, "tlsClientConfig": {"insecure": True}}}

    ours_server, theirs_server = "https://10.9.0.1:6443", f"https://localhost:{port}"
    r = kube.api.call("POST", "/api/v1/clusters", cluster(ours_server))
    assert r.status == 200, r
    status, theirs = upstream_call(plane, "POST", "/api/v1/clusters", token, cluster(theirs_server))
    assert status == 200, theirs
    by_server = {}
    for name, secret in secrets_labelled(plane, "cluster").items():
        _, data = secret_data(plane, name)
        by_server[data.get("server")] = (secret, data)
    assert ours_server in by_server and theirs_server in by_server, sorted(by_server)
    (ours, ours_data), (upstream, upstream_data) = by_server[ours_server], by_server[theirs_server]
    # upstream's name: cluster-<host>-<fnv32a of the server URL>.
    assert ours["metadata"]["name"].startswith("cluster-10.9.0.1-"), ours["metadata"]["name"]
    assert sorted(ours_data) == sorted(upstream_data), (sorted(ours_data), sorted(upstream_data))
    for key in ("namespaces", "project"):
        assert ours_data[key] == upstream_data[key], key
    assert json.loads(ours_data["config"]) == json.loads(upstream_data["config"]), (ours_data["config"], upstream_data["config"])
    for field in ("labels", "annotations"):
        assert ours["metadata"][field] == upstream["metadata"][field], (field, ours["metadata"][field], upstream["metadata"][field])

    # Each server reads the other's Secret as the cluster it declares.
    status, seen = upstream_call(plane, "GET", f"/api/v1/clusters/{urllib.parse.quote(ours_server, safe='')}", token)
    assert status == 200 and seen["name"].startswith("edge") and seen["namespaces"] == ["a", "b"], seen
    r = kube.api.get(f"/api/v1/clusters/{urllib.parse.quote(theirs_server, safe='')}")
    assert r.status == 200 and r.json()["labels"] == {"team": "blue"}, r
    for server in (ours_server, theirs_server):
        r = kube.api.call("DELETE", f"/api/v1/clusters/{urllib.parse.quote(server, safe='')}")
        assert r.status == 200, r
    wait_for("both cluster Secrets deleted (both were managed by Argo CD)",
             lambda: not ({ours["metadata"]["name"], upstream["metadata"]["name"]} & set(secrets_labelled(plane, "cluster"))),
             timeout=10)


def declared_repository(plane, url):
    """A repository Secret applied with kubectl (not made through an API: no managed-by)."""
    name = uniq("declared")
    plane.apply([{"apiVersion": "v1", "kind": "Secret", "metadata": {
        "name": name, "namespace": NS, "labels": {"argocd.argoproj.io/secret-type": "repository", "team": "a"}},
        "stringData": {"url": url, "username": "bot", "password": "pw", "insecure": "true", "extra": "kept"}}])
    return name


def test_a_repository_secret_applied_with_kubectl_is_served_and_deleting_it_keeps_the_secret(plane, kube):
    url = f"https://git.example/{uniq('declared')}.git"
    name = declared_repository(plane, url)
    applied = time.monotonic()
    wait_for("kubectl's repository in tiphys's list",
             lambda: url in [x["repo"] for x in kube.api.get("/api/v1/repositories").json()["items"]],
             timeout=SEEN_WITHIN, interval=0.05)
    assert time.monotonic() - applied < SEEN_WITHIN + 0.5
    listed = {x["repo"]: x for x in kube.api.get("/api/v1/repositories").json()["items"]}[url]
    assert listed["username"] == "bot" and listed["insecure"] is True, listed
    assert "password" not in listed, listed  # never shown back

    # Not made through the API (no managed-by): a deletion takes the label off and leaves it.
    r = kube.api.call("DELETE", f"/api/v1/repositories/{urllib.parse.quote(url, safe='')}")
    assert r.status == 200, r
    assert url not in [x["repo"] for x in kube.api.get("/api/v1/repositories").json()["items"]]
    secret, data = secret_data(plane, name)
    assert secret["metadata"]["labels"] == {"team": "a"}, secret["metadata"]
    assert data["url"] == url and data["password"] == "pw", sorted(data)
    plane.kubectl("delete", "secret", name, "-n", NS)

    # An update through tiphys keeps what tiphys has no field for and the Secret's other labels,
    # and marks it as Argo CD's, as upstream's update does (so a later deletion deletes it).
    url = f"https://git.example/{uniq('declared')}.git"
    name = declared_repository(plane, url)
    wait_for("the second repository in tiphys's list",
             lambda: url in [x["repo"] for x in kube.api.get("/api/v1/repositories").json()["items"]], timeout=5)
    r = kube.api.call("POST", "/api/v1/repositories?upsert=true",
                      {"repo": url, "username": "bot2", "password": "pw2", "insecure": True})
    assert r.status == 200, r
    secret, data = secret_data(plane, name)
    assert data["username"] == "bot2" and data["password"] == "pw2" and data["extra"] == "kept", data
    assert secret["metadata"]["labels"] == {"argocd.argoproj.io/secret-type": "repository", "team": "a"}, secret["metadata"]
    assert secret["metadata"]["annotations"]["managed-by"] == "argocd.argoproj.io", secret["metadata"]
    r = kube.api.call("DELETE", f"/api/v1/repositories/{urllib.parse.quote(url, safe='')}")
    assert r.status == 200, r
    wait_for("the updated Secret deleted",
             lambda: plane.kubectl("get", "secret", name, "-n", NS, "--ignore-not-found").strip() == "", timeout=10)


def test_a_private_repository_added_through_tiphys_is_used_by_the_controller(plane, kube, gitservers, tmp_path):
    from gitkit import BASIC_PASSWORD, BASIC_USER  # noqa: PLC0415
    repo = Repo(gitservers, tmp_path, uniq("kube-private"))
    repo.commit(manifests("private"), "first")
    url = gitservers.url("basic", repo.bare.name)
    r = kube.api.call("POST", "/api/v1/repositories",
                      {"repo": url, "username": BASIC_USER, "password": BASIC_PASSWORD, "insecure": True})
    assert r.status == 200, r
    made = [s for s in secrets_labelled(plane, "repository").values()
            if base64.b64decode(s["data"]["url"]).decode() == url]
    assert len(made) == 1, made
    secret, data = secret_data(plane, made[0]["metadata"]["name"])
    assert re.fullmatch(r"repo-\d+", secret["metadata"]["name"]), secret["metadata"]["name"]
    assert secret["metadata"]["annotations"]["managed-by"] == "argocd.argoproj.io", secret["metadata"]
    assert data["username"] == BASIC_USER and data["password"] == BASIC_PASSWORD and data["insecure"] == "true", sorted(data)

    ns = plane.new_namespace("kube-private")
    name = uniq("private")
    body = app_body(name, project="default", repo=url, path="manifests", dest_namespace=ns)
    body["spec"]["source"]["targetRevision"] = "main"
    kube.api.must_create(body)
    r = kube.api.call("POST", f"{APPS}/{name}/sync", {"revision": "main"})
    assert r.status == 200, r
    wait_for("the controller synced from the private repository",
             lambda: (s := status_of(kube.api, name)) and s.get("operationState", {}).get("phase") == "Succeeded")
    assert plane.get_json("configmap", "chain-1", "-n", ns)["data"] == {"greeting": "private"}
    r = kube.api.delete(name)
    assert r.status == 200, r
    wait_for("the application gone", lambda: name not in kube.api.names())
    r = kube.api.call("DELETE", f"/api/v1/repositories/{urllib.parse.quote(url, safe='')}")
    assert r.status == 200, r
    wait_for("the repository Secret deleted",
             lambda: plane.kubectl("get", "secret", made[0]["metadata"]["name"], "-n", NS, "--ignore-not-found").strip() == "",
             timeout=10)


def test_notifications_are_read_from_the_installation_at_each_call(plane, kube):
    def apply_cm(data):
        plane.apply([{"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": "argocd-notifications-cm", "namespace": NS}, "data": data}])

    apply_cm({"trigger.on-synced": "- when: app.status.sync.status == 'Synced'\n  send: [done]\n",
              "template.done": "message: done\n", "service.slack": "token: x\n"})
    r = kube.api.get("/api/v1/notifications/triggers")
    assert r.status == 200 and r.json()["items"] == [{"name": "on-synced"}], r
    r = kube.api.get("/api/v1/notifications/services")
    assert r.status == 200 and r.json()["items"] == [{"name": "slack"}], r
    apply_cm({"trigger.on-synced": "not: [a list"})
    r = kube.api.get("/api/v1/notifications/triggers")
    assert r.status == 400, r
    assert "configmap argocd/argocd-notifications-cm" in r.json()["message"] and "on-synced" in r.json()["message"], r
    plane.kubectl("delete", "configmap", "argocd-notifications-cm", "-n", NS)
    r = kube.api.get("/api/v1/notifications/triggers")
    assert r.status == 200 and r.json()["items"] == [], r


def test_account_passwords_and_api_keys_live_in_argocd_secret_as_upstream_keeps_them(plane, kube):
    """A password changed and an API key made through tiphys are argocd-secret's keys, so that
    argocd-server takes them; a key deleted through tiphys is refused by argocd-server."""
    name = uniq("ci").replace("-", "")
    plane.kubectl("patch", "configmap", "argocd-cm", "-n", NS, "--type", "merge",
                  "-p", json.dumps({"data": {f"accounts.{name}": "apiKey, login"}}))
    admin_pw = plane.state["argocd"]["admin_password"]
    wait_for("the new account in tiphys", lambda: kube.api.get(f"/api/v1/account/{name}").status == 200, timeout=10)

    new_pw = "a-new-password-for-ci-1"
    r = kube.api.call("PUT", "/api/v1/account/password",
                      {"name": name, "currentPassword": admin_pw, "newPassword": new_pw})
    assert r.status == 200, r
    r = kube.api.call("POST", f"/api/v1/account/{name}/token", {"id": "pipeline", "expiresIn": 3600})
    assert r.status == 200, r
    key_token = r.json()["token"]

    _, data = secret_data(plane, "argocd-secret")
    assert data[f"accounts.{name}.password"].startswith("$2"), sorted(data)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", data[f"accounts.{name}.passwordMtime"]), data
    tokens = json.loads(data[f"accounts.{name}.tokens"])
    assert [t["id"] for t in tokens] == ["pipeline"] and tokens[0]["exp"] > tokens[0]["iat"], tokens

    status, body = upstream_call(plane, "POST", "/api/v1/session", body={"username": name, "password": new_pw})
    assert status == 200, body
    status, body = upstream_call(plane, "GET", "/api/v1/session/userinfo", key_token)
    assert status == 200 and body.get("loggedIn") is True, body

    r = kube.api.call("DELETE", f"/api/v1/account/{name}/token/pipeline")
    assert r.status == 200, r
    _, data = secret_data(plane, "argocd-secret")
    assert f"accounts.{name}.tokens" not in data, sorted(data)
    wait_for("argocd-server refuses the deleted key",
             lambda: upstream_call(plane, "GET", "/api/v1/projects", key_token)[0] in (401, 403), timeout=30)
    plane.kubectl("patch", "configmap", "argocd-cm", "-n", NS, "--type", "json",
                  "-p", json.dumps([{"op": "remove", "path": f"/data/accounts.{name}"}]))


def test_applications_created_over_grpc_and_with_the_tiphys_cli_are_synced_by_the_controller(
        plane, kube, gitservers, tmp_path, app_pb):
    from appkit import grpc_channel, md  # noqa: PLC0415
    from conftest import cli  # noqa: PLC0415
    repo = Repo(gitservers, tmp_path, uniq("kube-grpc"))
    repo.commit(manifests("grpc"), "first")
    pb = app_pb
    grpc_ns, cli_ns = plane.new_namespace("kube-grpc"), plane.new_namespace("kube-tcli")
    grpc_name, cli_name = uniq("grpc"), uniq("tcli")
    app = pb.v1.Application(
        metadata=pb.meta.ObjectMeta(name=grpc_name),
        spec=pb.v1.ApplicationSpec(
            project="default",
            source=pb.v1.ApplicationSource(repoURL=repo.url, path="manifests", targetRevision="main"),
            destination=pb.v1.ApplicationDestination(server="https://kubernetes.default.svc", namespace=grpc_ns)))
    with grpc_channel(kube.server) as ch:
        stub = pb.grpc.ApplicationServiceStub(ch)
        made = stub.Create(pb.app.ApplicationCreateRequest(application=app), metadata=md(kube.api.token), timeout=20)
        assert made.metadata.resourceVersion == cr(plane, "application", grpc_name)["metadata"]["resourceVersion"] \
            or int(made.metadata.resourceVersion) < int(cr(plane, "application", grpc_name)["metadata"]["resourceVersion"])
        stub.Sync(pb.app.ApplicationSyncRequest(name=grpc_name, revision="main"), metadata=md(kube.api.token), timeout=20)

    conn = ("--server", kube.server.addr, "--plaintext", "--auth-token", kube.api.token)
    res = cli("app", "create", cli_name, "--repo", repo.url, "--path", "manifests", "--revision", "main",
              "--dest-server", "https://kubernetes.default.svc", "--dest-namespace", cli_ns, *conn)
    assert res.returncode == 0, res.stderr
    res = cli("app", "sync", cli_name, *conn)
    assert res.returncode == 0, res.stderr

    for name, ns in ((grpc_name, grpc_ns), (cli_name, cli_ns)):
        st = wait_for(f"{name} Synced and Healthy by the controller",
                      lambda n=name: (s := status_of(kube.api, n)) and s.get("operationState", {}).get("phase") == "Succeeded"
                      and s.get("sync", {}).get("status") == "Synced" and s.get("health", {}).get("status") == "Healthy" and s)
        assert len(st["history"]) == 1, st["history"]
        assert plane.get_json("configmap", "chain-1", "-n", ns)["data"] == {"greeting": "grpc"}
        r = kube.api.delete(name)
        assert r.status == 200, r
    for name in (grpc_name, cli_name):
        wait_for(f"{name} gone", lambda n=name: n not in kube.api.names())
