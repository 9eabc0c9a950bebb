"""ServerSideDiff (issue 38): tiphys --kube --redis --cluster-access on beside upstream
argocd-server on the installation of controlplane.py, an application synced by the real
controller, and the same requests asked of both over gRPC (argocd-server's TLS port) and REST:
a changed ConfigMap, a Deployment with more replicas (what the API server adds on its own, such
as the generation, reverted to the live values), an unchanged Service (not modified), a Secret
(masked on both sides, its values never shown) and a resource to create (REST: no live side).
The dry run changes nothing (kubectl sees the old objects). Bad input: a target manifest that
does not parse and live states that do not match their entry (400 naming why), a resource the
application does not manage (refused as argocd-server refuses it, audited once). gRPC-Web too.

Runs under tools/upstream/isolated (see controlplane.py); .ci/test-all runs it there.
"""

import base64
import json
import urllib.parse

import grpc
import pytest

from appkit import APPS, grpc_channel, grpc_web, md, rpc_error
from test_kube_backend import kube_beside_controller, differences, upstream_call
from test_resource_tree import SECRET_VALUE
# The application synced by the real controller, on this module's tiphys (`kube`).
from test_resource_tree import synced, upstream_token  # noqa: F401 (fixtures)
from test_upstream_chain import wait_for

NEW_SECRET = "ssd-new-s3cr3t"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@pytest.fixture(scope="module")
def kube(controlplane, tmp_path_factory):
    kube = kube_beside_controller(controlplane, tmp_path_factory.mktemp("ssd"), "--cluster-access", "on")
    yield kube
    kube.server.stop()


@pytest.fixture
def upstream_grpc(plane):
    server = plane.start_argocd_server()
    creds = grpc.ssl_channel_credentials(root_certificates=open(plane.state["pki"]["ca"], "rb").read())
    with grpc.secure_channel(urllib.parse.urlparse(server["url"]).netloc, creds) as ch:
        yield ch


def tracked(live):
    """The metadata a target manifest carries: the name, namespace and the tracking the
    controller set (its annotation or label)."""
    m = live["metadata"]
    meta = {"name": m["name"], "namespace": m["namespace"]}
    annotations = {k: v for k, v in (m.get("annotations") or {}).items() if k != LAST_APPLIED}
    if annotations:
        meta["annotations"] = annotations
    if m.get("labels"):
        meta["labels"] = m["labels"]
    return meta


def targets(plane, ns):
    """(kind, group, name, live object, target manifest) of the four resources."""
    cm = plane.get_json("configmap", "chain-1", "-n", ns)
    dep = plane.get_json("deployment", "tree", "-n", ns)
    svc = plane.get_json("service", "chain", "-n", ns)
    sec = plane.get_json("secret", "tree-secret", "-n", ns)
    ports = [{k: p[k] for k in ("name", "port", "targetPort", "protocol") if k in p} for p in svc["spec"]["ports"]]
    return [
        ("ConfigMap", "", "chain-1", cm, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": tracked(cm),
                                          "data": {**cm.get("data", {}), "ssd": "predicted"}}),
        ("Deployment", "apps", "tree", dep, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": tracked(dep),
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "chain"}}, "template": {
                "metadata": {"labels": {"app": "chain"}},
                "spec": {"containers": [{"name": "main", "image": "registry.invalid/tree:1"}]}}}}),
        ("Service", "", "chain", svc, {"apiVersion": "v1", "kind": "Service", "metadata": tracked(svc),
                                       "spec": {"selector": svc["spec"]["selector"], "ports": ports}}),
        ("Secret", "", "tree-secret", sec, {"apiVersion": "v1", "kind": "Secret", "metadata": tracked(sec),
                                            "stringData": {"password": NEW_SECRET}}),
    ]


def query(app_pb, synced, resources):
    lives = [app_pb.v1.ResourceDiff(group=g, kind=k, namespace=synced.ns, name=n, liveState=json.dumps(live))
             for k, g, n, live, _ in resources]
    return app_pb.app.ApplicationServerSideDiffQuery(appName=synced.name, liveResources=lives,
                                                     targetManifests=[json.dumps(t) for *_, t in resources])


def items_of(reply):
    return [{"kind": i.kind, "group": i.group, "name": i.name, "namespace": i.namespace, "modified": i.modified,
             "target": json.loads(i.targetState), "live": json.loads(i.liveState)} for i in reply.items]


def without_last_applied(item):
    """The target side without the Secret's last-applied annotation (see the test)."""
    out = json.loads(json.dumps(item))
    (out["target"].get("metadata", {}).get("annotations") or {}).pop(LAST_APPLIED, None)
    return out


def test_the_diff_of_changed_and_unchanged_resources_as_argocd_server_gives_it(plane, kube, synced, app_pb,
                                                                                 upstream_grpc, upstream_token):
    resources = targets(plane, synced.ns)
    q = query(app_pb, synced, resources)
    with grpc_channel(kube.server) as ch:
        ours = app_pb.grpc.ApplicationServiceStub(ch).ServerSideDiff(q, metadata=md(kube.api.token), timeout=60)
    theirs = app_pb.grpc.ApplicationServiceStub(upstream_grpc).ServerSideDiff(q, metadata=md(upstream_token),
                                                                              timeout=60)
    a, b = items_of(ours), items_of(theirs)
    assert ours.modified and theirs.modified
    assert [(i["kind"], i["modified"]) for i in a] == [("ConfigMap", True), ("Deployment", True),
                                                        ("Service", False), ("Secret", True)], a
    # Upstream leaves the live last-applied annotation, with the Secret's old value, in the
    # Secret's predicted side; tiphys masks it (README).
    leaked = b[3]["target"]["metadata"].get("annotations", {}).get(LAST_APPLIED, "")
    for x, y in zip(a, b):
        found = differences(without_last_applied(x), without_last_applied(y))
        assert not found, (x["kind"], found)

    cm, dep, svc, sec = a
    assert cm["target"]["data"]["ssd"] == "predicted" and "ssd" not in cm["live"]["data"], cm
    for item in a:
        for side in ("target", "live"):
            assert "managedFields" not in item[side]["metadata"] and "creationTimestamp" not in item[side]["metadata"]
    assert (dep["target"]["spec"]["replicas"], dep["live"]["spec"]["replicas"]) == (2, 1), dep
    assert dep["target"]["metadata"]["generation"] == dep["live"]["metadata"]["generation"], dep
    assert svc["target"] == svc["live"], differences(svc["target"], svc["live"])

    text = json.dumps(a)
    for value in (SECRET_VALUE, NEW_SECRET):
        assert value not in text and base64.b64encode(value.encode()).decode() not in text, value
    assert set(sec["target"]["data"]["password"]) == {"+"} and sec["target"]["data"] != sec["live"]["data"], sec
    assert "stringData" not in sec["target"], sec
    print("argocd-server's predicted Secret carries the old value in its last-applied annotation:",
          SECRET_VALUE in leaked or base64.b64encode(SECRET_VALUE.encode()).decode() in leaked)

    # A dry run: nothing changed.
    assert "ssd" not in plane.get_json("configmap", "chain-1", "-n", synced.ns).get("data", {})
    assert plane.get_json("deployment", "tree", "-n", synced.ns)["spec"]["replicas"] == 1


def diff_path(app, targets_=(), **extra):
    q = [("targetManifests", t) for t in targets_] + list(extra.items())
    return f"{APPS}/{app}/server-side-diff?" + urllib.parse.urlencode(q)


def test_over_rest_the_live_side_is_read_and_bad_input_refused(plane, kube, synced, app_pb, upstream_token,
                                                                upstream_grpc):
    """REST's query cannot carry live resources: tiphys reads them from the cluster and answers as
    over gRPC with them given (argocd-server fails: it indexes the live resources it lacks)."""
    cm = plane.get_json("configmap", "chain-2", "-n", synced.ns)
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": tracked(cm),
                "data": {**cm.get("data", {}), "rest": "yes"}}
    path = diff_path(synced.name, [json.dumps(manifest)])
    r = kube.api.get(path)
    assert r.status == 200, r
    ours = r.json()
    with grpc_channel(kube.server) as ch:
        given = app_pb.grpc.ApplicationServiceStub(ch).ServerSideDiff(
            query(app_pb, synced, [("ConfigMap", "", "chain-2", cm, manifest)]), metadata=md(kube.api.token), timeout=60)
    item = ours["items"][0]
    assert ours["modified"] and item["modified"] and item["resourceVersion"] == cm["metadata"]["resourceVersion"], ours
    for got, want in zip([item], items_of(given)):
        assert json.loads(got["targetState"]) == want["target"] and json.loads(got["liveState"]) == want["live"], got
    assert json.loads(item["targetState"])["data"]["rest"] == "yes" and "rest" not in json.loads(item["liveState"])["data"]
    status, theirs = upstream_call(plane, "GET", path, upstream_token)
    assert status == 500 and "index out of range" in theirs.get("message", ""), (status, theirs)
    # A resource to create: its target as the prediction, no live side.
    created = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "chain-1", "namespace": synced.ns}}
    plane.kubectl("delete", "configmap", "chain-1", "-n", synced.ns, "--ignore-not-found")
    r = kube.api.get(diff_path(synced.name, [json.dumps(created)]))
    plane.kubectl("create", "configmap", "chain-1", "-n", synced.ns, "--from-literal=greeting=tree")
    assert r.status == 200, r
    item = r.json()["items"][0]
    assert item["modified"] and item["liveState"] == "null" and json.loads(item["targetState"]) == created, item

    # A manifest that does not parse: 400 naming why (argocd-server: 500, the same words).
    r = kube.api.get(diff_path(synced.name, ["kind: [unclosed"]))
    assert r.status == 400 and r.json()["message"].startswith("error unmarshaling target manifest 0:"), r
    status, theirs = upstream_call(plane, "GET", diff_path(synced.name, ["{not json"]), upstream_token)
    assert status >= 400 and "error unmarshaling target manifest 0" in theirs.get("message", ""), theirs
    r = kube.api.get(diff_path(synced.name, ['["a list"]']))
    assert r.status == 400 and r.json()["message"] == "error unmarshaling target manifest 0: not an object", r

    # Not the application's: refused as argocd-server refuses it (over gRPC: its REST fails
    # first, see above), and audited once per refusal.
    other = dict(manifest, metadata={"name": "nosuch", "namespace": synced.ns})
    r = kube.api.get(diff_path(synced.name, [json.dumps(other)]))
    q = app_pb.app.ApplicationServerSideDiffQuery(
        appName=synced.name, targetManifests=[json.dumps(other)],
        liveResources=[app_pb.v1.ResourceDiff(kind="ConfigMap", name="nosuch", namespace=synced.ns)])
    theirs = rpc_error(app_pb.grpc.ApplicationServiceStub(upstream_grpc).ServerSideDiff, q,
                       metadata=md(upstream_token), timeout=30)
    with grpc_channel(kube.server) as ch:
        e = rpc_error(app_pb.grpc.ApplicationServiceStub(ch).ServerSideDiff, q, metadata=md(kube.api.token), timeout=30)
    assert theirs.code() == e.code() == grpc.StatusCode.PERMISSION_DENIED, (theirs, e)
    assert e.details() == theirs.details() == r.json()["message"], (e.details(), theirs.details(), r.json())
    assert r.status == 403 and r.json()["code"] == 7 and "nosuch" in r.json()["message"], r
    lines = wait_for("two audit lines", lambda: len(found := [
        line for line in kube.server.logs().splitlines() if "not_in_app" in line and "nosuch" in line]) >= 2 and found,
        timeout=10, interval=0.2)
    assert len(lines) == 2, lines


def test_over_grpc_and_grpc_web_bad_live_states_and_the_answer(plane, kube, synced, app_pb):
    resources = targets(plane, synced.ns)[:1]
    kind, group, name, live, target = resources[0]
    with grpc_channel(kube.server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        for state, words in ((json.dumps(dict(live, metadata={**live["metadata"], "name": "other"})),
                              "name mismatch: expected chain-1, got other"),
                             ("{not json", "error unmarshaling live state for ConfigMap/chain-1")):
            q = app_pb.app.ApplicationServerSideDiffQuery(
                appName=synced.name, targetManifests=[json.dumps(target)],
                liveResources=[app_pb.v1.ResourceDiff(kind=kind, group=group, name=name, namespace=synced.ns,
                                                      liveState=state)])
            e = rpc_error(stub.ServerSideDiff, q, metadata=md(kube.api.token), timeout=30)
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and words in e.details(), e
        e = rpc_error(stub.ServerSideDiff, query(app_pb, synced, resources), timeout=30)
        assert e.code() == grpc.StatusCode.UNAUTHENTICATED, e

    web = grpc_web(kube.server, "ServerSideDiff", query(app_pb, synced, resources), kube.api.token)
    assert web.status == 200 and web.trailers.get("grpc-status") == "0", web
    reply = app_pb.app.ApplicationServerSideDiffResponse.FromString(web.messages[0])
    assert reply.modified and json.loads(reply.items[0].targetState)["data"]["ssd"] == "predicted", reply
