"""Live resources of an application's destination (issue 38, items 2-4 in part): tiphys --kube
--redis beside upstream argocd-server on the installation of controlplane.py, an application
synced by the real controller (ConfigMaps, a Service, a Secret, a Deployment), and each method
asked of both and compared: GetResource (a Secret masked, its value never shown), PatchResource
with each patch type (the change seen with kubectl), ListResourceEvents (the application's and
the Deployment's), DeleteResource (normal; orphan, which leaves the ReplicaSet; force), over REST
and gRPC; bad input (a resource not in the tree, a JSON patch that does not apply, an unknown
patch type, an unknown kind or version); and the fine-grained RBAC of changes with argocd-cm's
`server.rbac.disableApplicationFineGrainedRBACInheritance` absent, "false" and "true", decided
alike by both servers, each tiphys denial audited once.

Runs under tools/upstream/isolated (see controlplane.py); .ci/test-all runs it there.
"""

import base64
import json
import urllib.parse
from types import SimpleNamespace

import grpc
import pytest

from appkit import APPS, grpc_channel, md, rpc_error
from authkit import ALICE_PW, HASHES, request
from test_kube_backend import kube_beside_controller, NS, differences, start_kube_server, upstream_call
from test_resource_tree import SECRET_VALUE, tree_of
# The application synced by the real controller, on this module's tiphys (`kube`).
from test_resource_tree import synced, upstream_token  # noqa: F401 (fixtures)
from test_upstream_chain import wait_for

INHERITANCE = "server.rbac.disableApplicationFineGrainedRBACInheritance"
# The API server's bookkeeping, which each server's own writes change.
BOOKKEEPING = ("metadata.managedFields", "metadata.resourceVersion", "metadata.generation")
USERS = ("liveget", "livecm", "liveupd")


@pytest.fixture(scope="module")
def kube(controlplane, tmp_path_factory):
    kube = kube_beside_controller(controlplane, tmp_path_factory.mktemp("live"), "--cluster-access", "on")
    yield kube
    kube.server.stop()


@pytest.fixture(scope="module")
def users(controlplane, kube):
    """Three local accounts on both servers: `liveget` may only get applications; `livecm` may also
    update ConfigMaps (fine-grained); `liveupd` may update and delete applications (plain)."""
    lines = [f"p, {u}, applications, get, default/*, allow" for u in USERS] + [
        "p, livecm, applications, update/*/ConfigMap/*/*, default/*, allow",
        "p, liveupd, applications, update, default/*, allow",
        "p, liveupd, applications, delete, default/*, allow",
    ]
    yield from local_accounts(controlplane, kube, USERS, lines)


def local_accounts(plane, kube, users, lines):
    """Local accounts `users` on both servers with the policy `lines` added, their tokens from each
    (by name: SimpleNamespace(ours, theirs)) yielded, then all of it undone."""
    saved = [plane.get_json("configmap", name, "-n", NS) for name in ("argocd-cm", "argocd-rbac-cm")]
    policy = saved[1].get("data", {}).get("policy.csv", "")
    plane.kubectl("patch", "configmap", "argocd-cm", "-n", NS, "--type", "merge",
                  "-p", json.dumps({"data": {f"accounts.{u}": "login" for u in users}}))
    plane.kubectl("patch", "secret", "argocd-secret", "-n", NS, "--type", "merge",
                  "-p", json.dumps({"stringData": {f"accounts.{u}.password": HASHES[ALICE_PW] for u in users}}))
    plane.kubectl("patch", "configmap", "argocd-rbac-cm", "-n", NS, "--type", "merge",
                  "-p", json.dumps({"data": {"policy.csv": policy + "\n" + "\n".join(lines) + "\n"}}))
    tokens = {}
    for u in users:
        ours = wait_for(f"{u} able to log in to tiphys", lambda u=u: (r := request(
            kube.server, "POST", "/api/v1/session", {"username": u, "password": ALICE_PW})).status == 200
            and r.json()["token"], timeout=20, interval=0.2)
        theirs = wait_for(f"{u} able to log in to argocd-server", lambda u=u: (r := upstream_call(
            plane, "POST", "/api/v1/session", body={"username": u, "password": ALICE_PW}))[0] == 200
            and r[1]["token"], timeout=30, interval=0.5)
        tokens[u] = SimpleNamespace(ours=ours, theirs=theirs)
    yield tokens
    # Undone key by key: the servers write argocd-secret meanwhile, so a replace could conflict.
    def remove(kind, name, keys):
        present = [k for k in keys if k in (plane.get_json(kind, name, "-n", NS).get("data") or {})]
        if present:
            plane.kubectl("patch", kind, name, "-n", NS, "--type", "json", "-p", json.dumps(
                [{"op": "remove", "path": f"/data/{k}"} for k in present]))
    remove("configmap", "argocd-cm", [f"accounts.{u}" for u in users])
    remove("secret", "argocd-secret", [f"accounts.{u}.password" for u in users])
    if "policy.csv" in saved[1].get("data", {}):
        plane.kubectl("patch", "configmap", "argocd-rbac-cm", "-n", NS, "--type", "merge",
                      "-p", json.dumps({"data": {"policy.csv": policy}}))
    else:
        remove("configmap", "argocd-rbac-cm", ["policy.csv"])


def set_inheritance(plane, value):
    """argocd-cm's switch: None removes it."""
    cm = plane.get_json("configmap", "argocd-cm", "-n", NS)
    if value is None:
        if INHERITANCE in cm.get("data", {}):
            plane.kubectl("patch", "configmap", "argocd-cm", "-n", NS, "--type", "json", "-p", json.dumps(
                [{"op": "remove", "path": "/data/" + INHERITANCE.replace("~", "~0").replace("/", "~1")}]))
    else:
        plane.kubectl("patch", "configmap", "argocd-cm", "-n", NS, "--type", "merge",
                      "-p", json.dumps({"data": {INHERITANCE: value}}))


def resource_query(app, ns, kind, name, group="", version="v1", **extra):
    q = {"namespace": ns, "resourceName": name, "version": version, "group": group, "kind": kind, **extra}
    return f"{APPS}/{app}/resource?" + urllib.parse.urlencode(q)


def ours_call(server, token, method, path, body=None):
    """(status, JSON) of one tiphys REST call; a str body is sent as a JSON string."""
    payload = json.dumps(body) if body is not None else None
    r = request(server, method, path, payload, headers={"Authorization": f"Bearer {token}"},
                content_type="application/json" if body is not None else None, timeout=60)
    return r.status, (json.loads(r.body) if r.body else {})


def both(plane, kube, token_ours, token_theirs, method, path, body=None):
    return (ours_call(kube.server, token_ours, method, path, body),
            upstream_call(plane, method, path, token_theirs, body=body))


def same_error(ours, theirs):
    """Both refused with the same HTTP status, gRPC code and message."""
    (s1, b1), (s2, b2) = ours, theirs
    assert (s1, b1.get("code"), b1.get("message")) == (s2, b2.get("code"), b2.get("message")), (ours, theirs)


def manifest_of(answer):
    status, body = answer
    assert status == 200, answer
    return json.loads(body["manifest"])


def settled(diffs):
    return [d for d in diffs if not d[0].startswith(BOOKKEEPING)]


def test_get_resource_answers_as_argocd_server_does_and_masks_the_secret(plane, kube, synced, upstream_token, app_pb):
    token = kube.api.token
    for kind, name in (("ConfigMap", "chain-1"), ("Secret", "tree-secret"), ("Service", "chain")):
        path = resource_query(synced.name, synced.ns, kind, name)
        ours, theirs = both(plane, kube, token, upstream_token, "GET", path)
        a, b = manifest_of(ours), manifest_of(theirs)
        assert a["kind"] == kind and a["metadata"]["name"] == name, a
        assert not differences(a, b), differences(a, b)
    secret = manifest_of(ours_call(kube.server, token, "GET", resource_query(synced.name, synced.ns, "Secret",
                                                                           "tree-secret")))
    assert secret["data"]["password"] == "++++++++", secret
    text = json.dumps(secret)
    assert SECRET_VALUE not in text and base64.b64encode(SECRET_VALUE.encode()).decode() not in text, text
    applied = secret["metadata"].get("annotations", {}).get("kubectl.kubernetes.io/last-applied-configuration")
    if applied:
        assert SECRET_VALUE not in applied and "++++++++" in applied, applied

    with grpc_channel(kube.server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        reply = stub.GetResource(app_pb.app.ApplicationResourceRequest(
            name=synced.name, namespace=synced.ns, resourceName="chain-1", version="v1", group="", kind="ConfigMap"),
            metadata=md(token), timeout=30)
        assert json.loads(reply.manifest)["metadata"]["name"] == "chain-1"
        reply = stub.GetResource(app_pb.app.ApplicationResourceRequest(
            name=synced.name, namespace=synced.ns, resourceName="tree-secret", version="v1", group="", kind="Secret"),
            metadata=md(token), timeout=30)
        assert SECRET_VALUE not in reply.manifest and json.loads(reply.manifest)["data"]["password"] == "++++++++"
        e = rpc_error(stub.GetResource, app_pb.app.ApplicationResourceRequest(
            name=synced.name, namespace=synced.ns, resourceName="nosuch", version="v1", group="", kind="ConfigMap"),
            metadata=md(token), timeout=30)
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "not found as part of application" in e.details(), e


PATCHES = [
    ("application/merge-patch+json", '{"data": {"merged": "m1"}}', "merged", "m1"),
    ("application/json-patch+json", '[{"op": "add", "path": "/data/jsonpatched", "value": "j1"}]', "jsonpatched", "j1"),
    ("application/strategic-merge-patch+json", '{"data": {"strategic": "s1"}}', "strategic", "s1"),
]


@pytest.mark.parametrize("patch_type,patch,key,value", PATCHES, ids=[p[0].split("/")[1] for p in PATCHES])
def test_patch_resource_with_each_type_as_argocd_server_does(plane, kube, synced, upstream_token,
                                                             patch_type, patch, key, value):
    """tiphys patches, kubectl sees it; argocd-server applies the same patch (a no-op now) and both
    answer the same object."""
    path = resource_query(synced.name, synced.ns, "ConfigMap", "chain-1", patchType=patch_type)
    ours = ours_call(kube.server, kube.api.token, "POST", path, patch)
    live = plane.get_json("configmap", "chain-1", "-n", synced.ns)
    assert live["data"][key] == value, live
    a = manifest_of(ours)
    assert a["data"][key] == value, a
    theirs = upstream_call(plane, "POST", path, upstream_token, body=patch)
    b = manifest_of(theirs)
    assert not settled(differences(a, b)), settled(differences(a, b))


def test_patch_resource_over_grpc_and_a_secret_answer_masked(plane, kube, synced, app_pb):
    with grpc_channel(kube.server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        reply = stub.PatchResource(app_pb.app.ApplicationResourcePatchRequest(
            name=synced.name, namespace=synced.ns, resourceName="chain-2", version="v1", group="", kind="ConfigMap",
            patch='{"data": {"grpc": "g1"}}', patchType="application/merge-patch+json"),
            metadata=md(kube.api.token), timeout=30)
        assert json.loads(reply.manifest)["data"]["grpc"] == "g1"
        assert plane.get_json("configmap", "chain-2", "-n", synced.ns)["data"]["grpc"] == "g1"
        reply = stub.PatchResource(app_pb.app.ApplicationResourcePatchRequest(
            name=synced.name, namespace=synced.ns, resourceName="tree-secret", version="v1", group="", kind="Secret",
            patch='{"metadata": {"labels": {"patched": "yes"}}}', patchType="application/merge-patch+json"),
            metadata=md(kube.api.token), timeout=30)
        shown = json.loads(reply.manifest)
        assert shown["metadata"]["labels"]["patched"] == "yes" and shown["data"]["password"] == "++++++++", shown
        assert SECRET_VALUE not in reply.manifest


def test_bad_input_is_refused_as_argocd_server_refuses_it(plane, kube, synced, upstream_token):
    token = kube.api.token
    # Not in the application's tree (a name, a kind the cluster does not know).
    for path in (resource_query(synced.name, synced.ns, "ConfigMap", "nosuch"),
                 resource_query(synced.name, synced.ns, "Frobnicator", "chain-1", group="example.com")):
        ours, theirs = both(plane, kube, token, upstream_token, "GET", path)
        assert ours[0] == 400 and "not found as part of application" in ours[1]["message"], ours
        same_error(ours, theirs)
    # A version the cluster does not serve.
    ours, theirs = both(plane, kube, token, upstream_token, "GET",
                        resource_query(synced.name, synced.ns, "ConfigMap", "chain-1", version="v9"))
    assert ours[0] == 404, ours
    assert ours[0] == theirs[0] and ours[1]["code"] == theirs[1]["code"], (ours, theirs)
    # A JSON patch that does not apply: 400, saying why.
    path = resource_query(synced.name, synced.ns, "ConfigMap", "chain-1", patchType="application/json-patch+json")
    patch = '[{"op": "test", "path": "/data/greeting", "value": "not-this"}]'
    ours, theirs = both(plane, kube, token, upstream_token, "POST", path, patch)
    assert ours[0] == 400 and ours[1]["code"] == 3 and "error patching resource" in ours[1]["message"], ours
    same_error(ours, theirs)
    # An unknown patch type: tiphys refuses it before asking the cluster (see README).
    path = resource_query(synced.name, synced.ns, "ConfigMap", "chain-1", patchType="application/bogus")
    ours, theirs = both(plane, kube, token, upstream_token, "POST", path, '{"data": {"x": "y"}}')
    assert ours[0] == 400 and ours[1]["code"] == 3 and "application/merge-patch+json" in ours[1]["message"], ours
    assert theirs[0] >= 400, theirs
    assert "x" not in plane.get_json("configmap", "chain-1", "-n", synced.ns)["data"]


def denials(server, user):
    return [line for line in server.logs().splitlines()
            if " audit: " in line and f'subject="{user}"' in line.split() and 'decision="deny"' in line.split()]


def decide(plane, kube, users, user, method, path, body=None):
    """Both servers' status for the request of `user`; they must agree."""
    ours, theirs = both(plane, kube, users[user].ours, users[user].theirs, method, path, body)
    assert ours[0] == theirs[0], (user, path, ours, theirs)
    return ours


def switch(plane, kube, users, value, path, patch, status):
    """Sets the inheritance switch and waits until both servers decide liveupd's patch `status`."""
    set_inheritance(plane, value)
    wait_for(f"{INHERITANCE}={value} in tiphys", lambda: ours_call(
        kube.server, users["liveupd"].ours, "POST", path, patch)[0] == status, timeout=10, interval=0.2)
    wait_for(f"{INHERITANCE}={value} in argocd-server", lambda: upstream_call(
        plane, "POST", path, users["liveupd"].theirs, body=patch)[0] == status, timeout=30, interval=0.5)


def test_changes_are_authorized_as_argocd_server_authorizes_them(plane, kube, synced, users):
    merge = "application/merge-patch+json"
    cm = resource_query(synced.name, synced.ns, "ConfigMap", "chain-1", patchType=merge)
    deploy = resource_query(synced.name, synced.ns, "Deployment", "tree", group="apps", patchType=merge)
    patch = '{"metadata": {"annotations": {"rbac": "x"}}}'
    set_inheritance(plane, None)
    try:
        # get only: patch and delete denied, one audit line each.
        before = len(denials(kube.server, "liveget"))
        assert decide(plane, kube, users, "liveget", "GET", resource_query(synced.name, synced.ns, "ConfigMap",
                                                                          "chain-1"))[0] == 200
        ours = decide(plane, kube, users, "liveget", "POST", cm, patch)
        assert ours[0] == 403 and ours[1]["message"] == "permission denied", ours
        assert decide(plane, kube, users, "liveget", "DELETE",
                      resource_query(synced.name, synced.ns, "ConfigMap", "chain-1"))[0] == 403
        lines = wait_for("two audit lines", lambda: len(d := denials(kube.server, "liveget")) >= before + 2 and d,
                         timeout=5, interval=0.1)
        assert len(lines) == before + 2, lines
        assert 'action="update//ConfigMap/' + synced.ns + '/chain-1"' in lines[-2].split(), lines[-2]

        # The fine-grained ConfigMap rule: the ConfigMap, not the Deployment.
        assert decide(plane, kube, users, "livecm", "POST", cm, patch)[0] == 200
        assert decide(plane, kube, users, "livecm", "POST", deploy, patch)[0] == 403

        # Plain update: inherited only when argocd-cm says "false" (absent means disabled in 3.x).
        assert decide(plane, kube, users, "liveupd", "POST", cm, patch)[0] == 403
        switch(plane, kube, users, "false", cm, patch, 200)
        assert decide(plane, kube, users, "liveupd", "POST", deploy, patch)[0] == 200
        assert decide(plane, kube, users, "livecm", "POST", cm, patch)[0] == 200
        switch(plane, kube, users, "true", cm, patch, 403)
        assert decide(plane, kube, users, "liveupd", "POST", deploy, patch)[0] == 403
        assert decide(plane, kube, users, "livecm", "POST", cm, patch)[0] == 200
    finally:
        set_inheritance(plane, None)


def uid_of(api, app, kind, name):
    node = next(n for n in tree_of(api, app)["nodes"] if n["kind"] == kind and n["name"] == name)
    return node["uid"]


def test_events_of_the_application_and_of_a_resource_as_argocd_server_lists_them(plane, kube, synced,
                                                                                 upstream_token, app_pb):
    token = kube.api.token
    uid = uid_of(kube.api, synced.name, "Deployment", "tree")
    for query in ("", "?" + urllib.parse.urlencode({"resourceNamespace": synced.ns, "resourceName": "tree",
                                                     "resourceUID": uid})):
        path = f"{APPS}/{synced.name}/events{query}"

        def agree(path=path):
            ours, theirs = both(plane, kube, token, upstream_token, "GET", path)
            assert ours[0] == 200 and theirs[0] == 200, (ours, theirs)
            # managedFields: tiphys leaves them out of what it answers (KNOWN_DIFFERENCES).
            found = [d for d in differences(ours[1], theirs[1]) if d[0] != "metadata.resourceVersion"
                     and not d[0].endswith("metadata.managedFields")]
            return (not found and ours[1].get("items")) and ours[1]
        listed = wait_for(f"both servers listing the same events at {path}", agree, timeout=30, interval=1)
        involved = {(e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in listed["items"]}
        assert involved == ({("Application", synced.name)} if not query else {("Deployment", "tree")}), involved
    ours, theirs = both(plane, kube, token, upstream_token, "GET", f"{APPS}/{synced.name}/events?" +
                        urllib.parse.urlencode({"resourceNamespace": synced.ns, "resourceName": "tree",
                                                "resourceUID": "not-the-uid"}))
    assert ours[0] == 400, ours
    same_error(ours, theirs)
    with grpc_channel(kube.server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        events = stub.ListResourceEvents(app_pb.app.ApplicationResourceEventsQuery(
            name=synced.name, resourceNamespace=synced.ns, resourceName="tree", resourceUID=uid),
            metadata=md(token), timeout=30)
        assert events.items and all(e.involvedObject.name == "tree" for e in events.items)


def test_without_cluster_access_live_resources_say_so_and_app_events_are_listed(plane, kube, synced, tmp_path):
    server = start_kube_server(tmp_path, plane.state["kubeconfig"], "--redis", plane.state["redis"]["address"])
    try:  # the harness's default: --cluster-access off
        token = kube.api.token  # one installation, one signing key
        status, body = ours_call(server, token, "GET", resource_query(synced.name, synced.ns, "ConfigMap", "chain-1"))
        assert status == 400 and body["code"] == 9 and "--cluster-access off" in body["message"], body
        status, body = ours_call(server, token, "GET", f"{APPS}/{synced.name}/events")
        assert status == 200 and body.get("items"), body
    finally:
        server.stop()


def gone(plane, kind, name, ns):
    return plane.kubectl("get", kind, name, "-n", ns, "--ignore-not-found", "-o", "name").strip() == ""


def test_delete_resource_normal_orphan_and_force(plane, kube, synced, upstream_token, app_pb):
    token = kube.api.token
    # Normal (Foreground) through tiphys and through argocd-server: both answer {} and the objects go.
    ours = ours_call(kube.server, token, "DELETE", resource_query(synced.name, synced.ns, "ConfigMap", "chain-2"))
    theirs = upstream_call(plane, "DELETE", resource_query(synced.name, synced.ns, "Service", "chain"), upstream_token)
    assert ours == (200, {}) and theirs[0] == 200 and not differences(ours[1], theirs[1]), (ours, theirs)
    wait_for("the ConfigMap and the Service gone", lambda: gone(plane, "configmap", "chain-2", synced.ns)
             and gone(plane, "service", "chain", synced.ns), timeout=30)
    # Not in the tree any more (the controller's tree may lag): refused as argocd-server refuses it, once both see it.
    path = resource_query(synced.name, synced.ns, "ConfigMap", "chain-2")
    wait_for("the deleted ConfigMap out of the tree", lambda: ours_call(kube.server, token, "GET", path)[0] == 400,
             timeout=60, interval=1)

    # Orphan: the Deployment goes, its ReplicaSet stays.
    rs = [r["metadata"]["name"] for r in plane.get_json("replicasets", "-n", synced.ns)["items"]]
    assert rs, "no ReplicaSet"
    ours = ours_call(kube.server, token, "DELETE",
                     resource_query(synced.name, synced.ns, "Deployment", "tree", group="apps", orphan="true"))
    assert ours == (200, {}), ours
    wait_for("the Deployment gone", lambda: gone(plane, "deployment", "tree", synced.ns), timeout=30)
    left = plane.get_json("replicasets", "-n", synced.ns)["items"]
    assert [r["metadata"]["name"] for r in left] == rs and not left[0]["metadata"].get("ownerReferences"), left

    # Force (over gRPC): at once.
    with grpc_channel(kube.server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        stub.DeleteResource(app_pb.app.ApplicationResourceDeleteRequest(
            name=synced.name, namespace=synced.ns, resourceName="tree-secret", version="v1", group="", kind="Secret",
            force=True), metadata=md(token), timeout=30)
    wait_for("the Secret gone", lambda: gone(plane, "secret", "tree-secret", synced.ns), timeout=10)
