"""How live calls reach an application's destination (issue 38): tiphys --kube --redis
--cluster-access on, on the installation of controlplane.py, with an application synced by the
real controller.

- Impersonation: with argocd-cm `application.sync.impersonation.enabled` "true", GetResource
  acts as the project's destination ServiceAccount (`spec.destinationServiceAccounts`) on the
  real API server (RBAC on): one whose Role lacks `get` fails naming it, the same once `get` is
  granted passes (and ServerSideDiff's dry run, which needs `patch`, fails naming it); a project with no matching entry is refused with upstream's words.
- An unreachable destination (a cluster Secret pointing to a closed loopback port): GetResource,
  ListResourceEvents of a resource and ServerSideDiff are UNAVAILABLE naming the cluster (its
  token never shown), over REST and gRPC, while List, Get and a healthy application's tree
  answer as before.

Runs under tools/upstream/isolated (see controlplane.py); .ci/test-all runs it there.
"""

import json
import socket
import urllib.parse
from types import SimpleNamespace

import grpc
import pytest

from appkit import APPS, app_body, grpc_channel, grpc_web, md, rpc_error, uniq
from test_kube_backend import kube_beside_controller, NS
# The application synced by the real controller, on this module's tiphys (`kube`).
from test_resource_tree import IN_CLUSTER, synced, upstream_token  # noqa: F401 (fixtures)
from test_upstream_chain import wait_for

ENABLED = "application.sync.impersonation.enabled"
SA = "ssd-reader"


@pytest.fixture(scope="module")
def kube(controlplane, tmp_path_factory):
    kube = kube_beside_controller(controlplane, tmp_path_factory.mktemp("reach"), "--cluster-access", "on")
    yield kube
    kube.server.stop()


def resource_path(app, ns, kind, name, version="v1"):
    q = {"namespace": ns, "resourceName": name, "version": version, "group": "", "kind": kind}
    return f"{APPS}/{app}/resource?" + urllib.parse.urlencode(q)


def role(ns, verbs):
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": SA, "namespace": ns},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}]}


def set_accounts(plane, entries):
    plane.kubectl("patch", "appproject", "default", "-n", NS, "--type", "merge",
                  "-p", json.dumps({"spec": {"destinationServiceAccounts": entries}}))


def test_live_calls_impersonate_the_projects_service_account(plane, kube, synced, app_pb):
    ns = synced.ns
    plane.apply([
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SA, "namespace": ns}},
        role(ns, ["list"]),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": SA, "namespace": ns},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SA},
         "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": ns}]},
    ])
    saved = plane.get_json("appproject", "default", "-n", NS)["spec"].get("destinationServiceAccounts")
    path = resource_path(synced.name, ns, "ConfigMap", "chain-1")
    user = f"system:serviceaccount:{ns}:{SA}"
    try:
        set_accounts(plane, [{"server": "https://other.invalid", "namespace": "*", "defaultServiceAccount": "no"},
                             {"server": IN_CLUSTER, "namespace": ns, "defaultServiceAccount": SA}])
        plane.kubectl("patch", "configmap", "argocd-cm", "-n", NS, "--type", "merge",
                      "-p", json.dumps({"data": {ENABLED: "true"}}))
        # Its Role lacks get: the API server refuses the ServiceAccount, and the message names it.
        r = wait_for("GetResource refused to the ServiceAccount", lambda: (r := kube.api.get(path)).status == 400
                     and r, timeout=30, interval=0.3)
        body = r.json()
        assert body["code"] == 9 and user in body["message"] and "forbidden" in body["message"], body
        with grpc_channel(kube.server) as ch:
            e = rpc_error(app_pb.grpc.ApplicationServiceStub(ch).GetResource, app_pb.app.ApplicationResourceRequest(
                name=synced.name, namespace=ns, resourceName="chain-1", version="v1", group="", kind="ConfigMap"),
                metadata=md(kube.api.token), timeout=30)
            assert e.code() == grpc.StatusCode.FAILED_PRECONDITION and user in e.details(), e

        plane.apply([role(ns, ["get", "list"])])
        r = wait_for("GetResource allowed once get is granted", lambda: (r := kube.api.get(path)).status == 200
                     and r, timeout=30, interval=0.3)
        live = json.loads(r.json()["manifest"])
        assert live["metadata"]["name"] == "chain-1"
        # The server-side diff's dry run acts as the ServiceAccount too, which may not patch.
        target = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "chain-1", "namespace": ns},
                  "data": {"k": "v"}}
        r = kube.api.get(f"{APPS}/{synced.name}/server-side-diff?"
                         + urllib.parse.urlencode({"targetManifests": json.dumps(target)}))
        assert r.status == 400 and r.json()["code"] == 9 and user in r.json()["message"], r
        assert "patch" in r.json()["message"], r

        # No entry for the destination: refused, with upstream's words.
        set_accounts(plane, [{"server": IN_CLUSTER, "namespace": "elsewhere", "defaultServiceAccount": SA}])
        words = ("failed to find a matching service account to impersonate: no matching service account found "
                 f"for destination server {IN_CLUSTER} and namespace {ns}")
        r = wait_for("no matching ServiceAccount", lambda: (r := kube.api.get(path)).status == 400
                     and words in r.json()["message"] and r, timeout=30, interval=0.3)
        assert r.json()["code"] == 9, r
    finally:
        cm = plane.get_json("configmap", "argocd-cm", "-n", NS)
        if ENABLED in cm.get("data", {}):
            plane.kubectl("patch", "configmap", "argocd-cm", "-n", NS, "--type", "json",
                          "-p", json.dumps([{"op": "remove", "path": f"/data/{ENABLED}"}]))
        set_accounts(plane, saved)
    # Off again: the server's own credentials.
    wait_for("GetResource with the server's credentials", lambda: kube.api.get(path).status == 200,
             timeout=30, interval=0.3)


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def unreachable(plane, kube, synced):
    """An application whose cluster Secret points to a closed loopback port."""
    server = f"https://127.0.0.1:{closed_port()}"
    token = "unreach-t0ken-never-shown"
    secret = uniq("unreach")
    plane.apply([{"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                  "metadata": {"name": secret, "namespace": NS, "labels": {"argocd.argoproj.io/secret-type": "cluster"}},
                  "stringData": {"name": secret, "server": server,
                                 "config": json.dumps({"bearerToken": token, "tlsClientConfig": {"insecure": True}})}}])
    name = uniq("unreach")
    body = app_body(name, project="default", repo=synced.repo.url, path="manifests", dest_namespace="far",
                    server=server)
    wait_for("the application created once tiphys knows the cluster",
             lambda: kube.api.call("POST", APPS, body).status == 200, timeout=30, interval=0.3)
    yield SimpleNamespace(name=name, server=server, token=token)
    kube.api.delete(name)
    plane.kubectl("delete", "secret", secret, "-n", NS, "--ignore-not-found")


def unavailable(r, u):
    body = r.json()
    assert r.status == 503 and body["code"] == 14, (r, body)
    assert u.server in body["message"] and u.token not in body["message"], body
    return body


def test_an_unreachable_destination_is_named_and_the_rest_unaffected(plane, kube, synced, unreachable, app_pb):
    u = unreachable
    unavailable(kube.api.get(resource_path(u.name, "far", "ConfigMap", "chain-1")), u)
    events = f"{APPS}/{u.name}/events?" + urllib.parse.urlencode(
        {"resourceNamespace": "far", "resourceName": "chain-1", "resourceUID": "00000000-0000-0000-0000-000000000000"})
    unavailable(kube.api.get(events), u)
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "chain-1", "namespace": "far"}}
    ssd = f"{APPS}/{u.name}/server-side-diff?" + urllib.parse.urlencode({"targetManifests": json.dumps(manifest)})
    unavailable(kube.api.get(ssd), u)

    with grpc_channel(kube.server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        e = rpc_error(stub.GetResource, app_pb.app.ApplicationResourceRequest(
            name=u.name, namespace="far", resourceName="chain-1", version="v1", group="", kind="ConfigMap"),
            metadata=md(kube.api.token), timeout=60)
        assert e.code() == grpc.StatusCode.UNAVAILABLE and u.server in e.details(), e
        e = rpc_error(stub.ServerSideDiff, app_pb.app.ApplicationServerSideDiffQuery(
            appName=u.name, targetManifests=[json.dumps(manifest)]), metadata=md(kube.api.token), timeout=60)
        assert e.code() == grpc.StatusCode.UNAVAILABLE and u.server in e.details(), e
        # The rest is unaffected.
        listed = stub.List(app_pb.app.ApplicationQuery(), metadata=md(kube.api.token), timeout=30)
        assert {u.name, synced.name} <= {a.metadata.name for a in listed.items}
        tree = stub.ResourceTree(app_pb.app.ResourcesQuery(applicationName=synced.name),
                                 metadata=md(kube.api.token), timeout=30)
        assert any(n.resourceRef.kind == "Deployment" for n in tree.nodes), tree

    web = grpc_web(kube.server, "ServerSideDiff", app_pb.app.ApplicationServerSideDiffQuery(
        appName=u.name, targetManifests=[json.dumps(manifest)]), kube.api.token, timeout=60)
    status = web.trailers.get("grpc-status") or web.header_status
    message = urllib.parse.unquote(web.trailers.get("grpc-message") or web.header_message or "")
    assert status == "14" and u.server in message and u.token not in message, web

    r = kube.api.get(APPS)
    assert r.status == 200 and u.name in [a["metadata"]["name"] for a in r.json()["items"]], r
    assert kube.api.get(f"{APPS}/{u.name}").status == 200
    r = kube.api.get(f"{APPS}/{synced.name}/resource-tree")
    assert r.status == 200 and any(n["kind"] == "Pod" for n in r.json()["nodes"]), r
    r = kube.api.get(resource_path(synced.name, synced.ns, "ConfigMap", "chain-1"))
    assert r.status == 200, r
