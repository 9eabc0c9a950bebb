"""Pod logs (issue 38, item 2): tiphys --kube --redis --cluster-access on beside upstream
argocd-server on the installation of controlplane.py, an application synced by the real
controller, and PodLogs asked of both over REST (NDJSON), gRPC and gRPC-Web.

No kubelet runs on the plane, so no container ever writes a line. What is tested is everything up
to the kubelet:
- the pods chosen from the tree (a Deployment's Pending pods through its ReplicaSet; one pod by
  name), the API server's log request made for each, and the stream's shape (each pod's entries,
  then the entry whose `last` is true), as argocd-server answers;
- the API server's refusals, shown as the line upstream shows in the pod's place: a pod bound to a
  Node whose kubelet port is closed (the API server really dials it and is refused), a pod of two
  containers asked without one, a container that does not exist;
- argocd-cm `server.maxPodLogsToRender`; `logs, get` denied (one audit line); a bad `untilTime`.
What is not tested here, for want of a kubelet: lines with content, `follow` receiving them live,
`tailLines`/`sinceSeconds` cutting them, and the merge by time. The parsing, the filter and the
cut at `untilTime` are unit tests in src/service/application/logs.rs.

Runs under tools/upstream/isolated (see controlplane.py); .ci/test-all runs it there.
"""

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from types import SimpleNamespace

import pytest

from appkit import APPS, Api, app_body, grpc_channel, grpc_web, md, uniq
from authkit import bearer, connection
from conftest import free_port
from test_kube_backend import NS
# tiphys --kube --redis --cluster-access on, and local accounts on both servers.
from test_live_resources import kube, local_accounts  # noqa: F401 (fixture)
from test_resource_tree import upstream_token  # noqa: F401 (fixture)
from test_upstream_chain import Repo, wait_for

pytestmark = pytest.mark.controlplane

NODE = "logs-node"
USER = "logsreader"


def manifests():
    pod = lambda name, containers, node=None: {  # noqa: E731
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {**({"nodeName": node} if node else {}),
                 "containers": [{"name": c, "image": "registry.invalid/logs:1"} for c in containers]}}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "logs-web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "logs-web"}},
                 "template": {"metadata": {"labels": {"app": "logs-web"}},
                              "spec": {"containers": [{"name": "main", "image": "registry.invalid/logs:1"}]}}}}
    files = {
        "manifests/deployment.json": deployment,
        "manifests/bound.json": pod("logs-bound", ["main"], node=NODE),
        "manifests/two.json": pod("logs-two", ["a", "b"]),
    }
    return {path: json.dumps(obj) for path, obj in files.items()}


def node_object(kubelet_port):
    """A Node with no kubelet behind it: the API server dials 127.0.0.1:`kubelet_port` for logs."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
            "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                       "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}}}}


@pytest.fixture(scope="module")
def logged(controlplane, kube, gitservers, tmp_path_factory):
    """The application: a Deployment of two Pending pods, a pod bound to the kubelet-less Node, a
    pod of two containers; synced by the real controller, every pod in the tree."""
    plane = controlplane
    port = free_port()  # nothing listens there: the "kubelet" refuses
    plane.apply([node_object(port)])
    repo = Repo(gitservers, tmp_path_factory.mktemp("logs-repo"), uniq("logs"))
    repo.commit(manifests(), "first")
    ns = plane.new_namespace("logs")
    name = uniq("logs")
    body = app_body(name, project="default", repo=repo.url, path="manifests", dest_namespace=ns)
    body["spec"]["source"]["targetRevision"] = "main"
    kube.api.must_create(body)
    r = kube.api.call("POST", f"{APPS}/{name}/sync", {"revision": "main"})
    assert r.status == 200, r

    def pods():
        tree = kube.api.get(f"{APPS}/{name}/resource-tree").json()
        return {n["name"] for n in tree.get("nodes", []) if n["kind"] == "Pod" and n.get("uid")}
    wait_for("four pods in the tree", lambda: len(pods()) == 4 and {"logs-bound", "logs-two"} <= pods(), timeout=120)
    yield SimpleNamespace(name=name, ns=ns, port=port)
    kube.api.delete(name)
    plane.kubectl("delete", "node", NODE, "--ignore-not-found", "--wait=false", check=False)


def logs_path(app, pod=None, **query):
    base = f"{APPS}/{app}/pods/{pod}/logs" if pod else f"{APPS}/{app}/logs"
    return base + ("?" + urllib.parse.urlencode(query) if query else "")


def ndjson(body: bytes):
    """The messages of a REST stream, and its error if it ended with one."""
    results, error = [], None
    for line in body.decode().splitlines():
        if line.strip():
            frame = json.loads(line)
            if "result" in frame:
                results.append(frame["result"])
            else:
                error = frame.get("error", frame)
    return results, error


def ours(kube, path, token=None):
    """(status, entries, error) of tiphys's REST stream (it ends: no `follow`)."""
    conn = connection(kube.server, timeout=60)
    conn.request("GET", path, headers=bearer(token or kube.api.token))
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    if resp.status != 200:
        return resp.status, [], json.loads(body or b"{}")
    return (200, *ndjson(body))


def theirs(plane, path, token):
    server = plane.start_argocd_server()
    ctx = ssl.create_default_context(cafile=plane.state["pki"]["ca"])
    req = urllib.request.Request(server["url"] + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=60, context=ctx) as resp:
            return (resp.status, *ndjson(resp.read()))
    except urllib.error.HTTPError as e:
        return e.code, [], json.loads(e.read() or b"{}")


def refusal(body):
    """(gRPC code, message) of a refused REST call: a unary error body, or grpc-gateway's
    `{"error": {...}}` for a stream refused before its first message."""
    inner = body.get("error") if isinstance(body.get("error"), dict) else body
    return inner.get("code", inner.get("grpc_code")), inner.get("message")


def shape(entries):
    """What both servers must agree on: each entry but the times (the last entry's is now)."""
    return [(e.get("podName", ""), e.get("content", ""), bool(e.get("last"))) for e in entries]


def agree(plane, kube, upstream_token, path):
    a, b = ours(kube, path), theirs(plane, path, upstream_token)
    assert a[0] == 200 and b[0] == 200, (a, b)
    assert a[2] is None and b[2] is None, (a, b)
    assert shape(a[1]) == shape(b[1]), (a[1], b[1])
    return a[1]


def test_a_workloads_pods_are_streamed_as_argocd_server_streams_them(plane, kube, logged, upstream_token):
    # The Deployment's two pods are Pending: the API server answers each log empty, so the
    # stream is just its last entry, in both servers.
    entries = agree(plane, kube, upstream_token, logs_path(logged.name, namespace=logged.ns, kind="Deployment",
                                                           group="apps", resourceName="logs-web", container="main"))
    assert shape(entries) == [("", "", True)], entries
    last = entries[-1]
    assert last["timeStampStr"].startswith(last["timeStamp"][:19]), last
    # A name that selects nothing: no message at all (upstream returns at once).
    assert agree(plane, kube, upstream_token, logs_path(logged.name, namespace=logged.ns, kind="Deployment",
                                                        group="apps", resourceName="nosuch")) == []


def test_the_api_servers_refusals_are_the_pods_lines(plane, kube, logged, upstream_token):
    # Bound to a Node whose kubelet port is closed: the API server dials it, and its error is the line.
    entries = agree(plane, kube, upstream_token, logs_path(logged.name, "logs-bound", namespace=logged.ns,
                                                           container="main"))
    assert len(entries) == 2 and entries[-1]["last"], entries
    refused = entries[0]["content"]
    assert f"127.0.0.1:{logged.port}" in refused and "containerLogs" in refused, refused
    assert entries[0]["timeStampStr"] == "0001-01-01T00:00:00Z", entries[0]
    # Two containers and none named; a container that does not exist.
    entries = agree(plane, kube, upstream_token, logs_path(logged.name, "logs-two", namespace=logged.ns))
    assert "a container name must be specified for pod logs-two" in entries[0]["content"], entries
    entries = agree(plane, kube, upstream_token, logs_path(logged.name, "logs-two", namespace=logged.ns,
                                                           container="nosuch"))
    assert "container nosuch is not valid for pod logs-two" in entries[0]["content"], entries
    # The whole application: four pods, four lines of reasons or none, then the last entry.
    entries = agree(plane, kube, upstream_token, logs_path(logged.name, namespace=logged.ns, container="main"))
    assert entries[-1]["last"] and sum(1 for e in entries if e["content"]) >= 2, entries


def test_grpc_and_grpc_web_stream_the_same_entries(kube, logged, app_pb):
    query = app_pb.app.ApplicationPodLogsQuery(name=logged.name, podName="logs-bound", namespace=logged.ns,
                                               container="main")
    with grpc_channel(kube.server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        entries = list(stub.PodLogs(query, metadata=md(kube.api.token), timeout=60))
    assert [e.last for e in entries] == [False, True], entries
    assert f"127.0.0.1:{logged.port}" in entries[0].content and entries[1].content == "", entries
    web = grpc_web(kube.server, "PodLogs", query, kube.api.token, timeout=60)
    assert web.status == 200 and web.trailers.get("grpc-status") == "0", (web.status, web.trailers)
    decoded = [app_pb.app.LogEntry.FromString(m) for m in web.messages]
    assert [e.content for e in decoded] == [e.content for e in entries], decoded


def test_the_limit_of_pods_is_argocd_cms(plane, kube, logged, upstream_token):
    key = "server.maxPodLogsToRender"
    path = logs_path(logged.name, namespace=logged.ns, kind="Deployment", group="apps", resourceName="logs-web")
    plane.kubectl("patch", "configmap", "argocd-cm", "-n", NS, "--type", "merge", "-p", json.dumps({"data": {key: "1"}}))
    try:
        mine = wait_for("tiphys applying the limit", lambda: (a := ours(kube, path))[0] == 400 and a, timeout=10,
                        interval=0.2)
        code, message = refusal(mine[2])
        assert code == 3 and "max pods to view logs are reached" in message, mine
        upstream = wait_for("argocd-server applying it", lambda: (b := theirs(plane, path, upstream_token))[0] == 400
                            and b, timeout=30, interval=0.5)
        assert refusal(mine[2]) == refusal(upstream[2]), (mine, upstream)
    finally:
        plane.kubectl("patch", "configmap", "argocd-cm", "-n", NS, "--type", "json",
                      "-p", json.dumps([{"op": "remove", "path": f"/data/{key}"}]))
    wait_for("the default limit back", lambda: ours(kube, path)[0] == 200, timeout=10, interval=0.2)


@pytest.fixture(scope="module")
def reader(controlplane, kube):
    """A local account that may get applications but not their logs, on both servers."""
    accounts = local_accounts(controlplane, kube, [USER], [f"p, {USER}, applications, get, default/*, allow"])
    yield next(accounts)[USER]
    next(accounts, None)


def denials(server):
    return [line for line in server.logs().splitlines()
            if " audit: " in line and f'subject="{USER}"' in line.split() and 'decision="deny"' in line.split()]


def test_logs_need_their_own_permission_and_a_denial_is_audited_once(plane, kube, logged, reader):
    path = logs_path(logged.name, "logs-bound", namespace=logged.ns, container="main")
    assert Api(kube.server, reader.ours).get(f"{APPS}/{logged.name}").status == 200
    before = len(denials(kube.server))
    mine = ours(kube, path, reader.ours)
    upstream = theirs(plane, path, reader.theirs)
    assert mine[0] == 403 and upstream[0] == 403, (mine, upstream)
    # Each names its own token's issue time: compared up to it.
    denied = [(code, message.split(", iat: ")[0]) for code, message in (refusal(mine[2]), refusal(upstream[2]))]
    assert denied[0] == denied[1] == (7, f"permission denied: logs, get, default/{logged.name}, sub: {USER}"), \
        (mine, upstream)
    lines = wait_for("the audit line", lambda: len(d := denials(kube.server)) > before and d, timeout=5, interval=0.1)
    assert len(lines) == before + 1 and 'resource="logs"' in lines[-1].split(), lines


def test_bad_input_is_refused_before_any_cluster_call(kube, logged):
    status, _, error = ours(kube, logs_path(logged.name, "logs-bound", namespace=logged.ns, untilTime="yesterday"))
    assert status == 400 and "invalid untilTime parameter value" in refusal(error)[1], error
    status, _, error = ours(kube, logs_path("no-such-app", "p"))
    assert status in (403, 404), error
