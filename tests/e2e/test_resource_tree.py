"""What the application-controller reports, served from its Redis cache (issue 38, item 1):
tiphys --kube --redis beside upstream argocd-server on the installation of controlplane.py, an
application synced by the real controller, and each answer compared field by field with
argocd-server's: ResourceTree, ManagedResources (with their filters; a Secret's values masked),
Get's per-resource health (`resourceHealthSource: appTree`) and the clusters' info. Also: the
tree over gRPC (grpcio) and gRPC-Web, WatchResourceTree delivering a new tree after a change,
the raw entries the controller wrote decoding to what tiphys answers, a tree split into shards
read whole, a caller without `applications, get` denied and audited, a Redis that is down giving
UNAVAILABLE while the rest of the API answers, and no `--redis` giving a clear error.

Runs under tools/upstream/isolated (see controlplane.py); .ci/test-all runs it there.
"""

import gzip
import json
import os
import queue
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest

from appkit import APPS, Api, RestWatch, Watch, app_body, grpc_channel, grpc_web, md, rpc_error, uniq
from authkit import bearer, connection
from conftest import free_port, wait_port
from test_kube_backend import kube_beside_controller, NS, differences, start_kube_server, upstream_call
from test_upstream_chain import Repo, manifests, wait_for

SECRET_VALUE = "tree-canary-s3cr3t"
CACHE_VERSION = "1.8.3"
IN_CLUSTER = "https://kubernetes.default.svc"


def tree_manifests(extra_cm=False):
    """The chain's ConfigMaps and Service, a Secret (its value must never be shown) and a
    Deployment (no kubelet runs: its ReplicaSet and Pod give the tree parents and Pending pods)."""
    files = manifests("tree")
    files["manifests/secret.yaml"] = f"""---
apiVersion: v1
kind: Secret
metadata:
  name: tree-secret
stringData:
  password: {SECRET_VALUE}
"""
    files["manifests/deployment.yaml"] = """---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: tree
spec:
  replicas: 1
  selector:
    matchLabels: {app: chain}
  template:
    metadata:
      labels: {app: chain}
    spec:
      containers:
      - name: main
        image: registry.invalid/tree:1
"""
    if extra_cm:
        files["manifests/extra.yaml"] = """---
apiVersion: v1
kind: ConfigMap
metadata:
  name: tree-extra
data:
  added: "yes"
"""
    return files


@pytest.fixture(scope="module")
def kube(controlplane, tmp_path_factory):
    """tiphys --kube --redis (the controller's Redis) on the session's installation."""
    kube = kube_beside_controller(controlplane, tmp_path_factory.mktemp("tree"))
    yield kube
    kube.server.stop()


@pytest.fixture(scope="module")
def upstream_token(controlplane):
    status, body = upstream_call(controlplane, "POST", "/api/v1/session",
                                 body={"username": "admin", "password": controlplane.state["argocd"]["admin_password"]})
    assert status == 200, body
    return body["token"]


@pytest.fixture(scope="module")
def synced(controlplane, kube, gitservers, tmp_path_factory):
    """An application synced by the real controller, its tree written to Redis."""
    plane = controlplane
    repo = Repo(gitservers, tmp_path_factory.mktemp("tree-repo"), uniq("tree"))
    repo.commit(tree_manifests(), "first")
    ns = plane.new_namespace("tree")
    name = uniq("tree")
    body = app_body(name, project="default", repo=repo.url, path="manifests", dest_namespace=ns)
    body["spec"]["source"]["targetRevision"] = "main"
    kube.api.must_create(body)
    r = kube.api.call("POST", f"{APPS}/{name}/sync", {"revision": "main"})
    assert r.status == 200, r
    wait_for("the sync done and the Deployment's pod in the tree", lambda: (
        (s := kube.api.must_get(name).get("status", {})).get("operationState", {}).get("phase") == "Succeeded"
        and s.get("sync", {}).get("status") == "Synced"
        and any(n["kind"] == "Pod" for n in tree_of(kube.api, name).get("nodes", []))))
    yield SimpleNamespace(name=name, ns=ns, repo=repo)
    kube.api.delete(name)


def tree_of(api, name):
    r = api.get(f"{APPS}/{name}/resource-tree")
    assert r.status == 200, r
    return r.json()


def same_answers(path, api, token, plane, settle=None, tries=20):
    """tiphys's and argocd-server's answers to GET `path`, read until they agree (the controller
    rewrites its cache every few seconds), and the differences left at the last try."""
    found = None
    for _ in range(tries):
        status, theirs = upstream_call(plane, "GET", path, token)
        assert status == 200, (path, theirs)
        r = api.get(path)
        assert r.status == 200, (path, r)
        ours = r.json()
        found = [d for d in differences(ours, theirs) if not (settle and settle(d[0]))]
        if not found:
            return ours, theirs
        time.sleep(0.5)
    pytest.fail(f"{path}:\n" + "\n".join(f"{p}: tiphys {a!r}, argocd-server {b!r}" for p, a, b in found))


def test_the_tree_and_managed_resources_answer_as_argocd_server_does(plane, kube, synced, upstream_token):
    tree, _ = same_answers(f"{APPS}/{synced.name}/resource-tree", kube.api, upstream_token, plane)
    kinds = {n["kind"] for n in tree["nodes"]}
    assert {"ConfigMap", "Service", "Secret", "Deployment", "ReplicaSet", "Pod"} <= kinds, kinds
    pod = next(n for n in tree["nodes"] if n["kind"] == "Pod")
    assert pod["parentRefs"][0]["kind"] == "ReplicaSet" and pod["images"] == ["registry.invalid/tree:1"], pod

    managed, _ = same_answers(f"{APPS}/{synced.name}/managed-resources", kube.api, upstream_token, plane)
    assert {i["name"] for i in managed["items"]} == {"chain-1", "chain-2", "chain", "tree-secret", "tree"}, managed
    # The Secret's value is masked, as the controller masks it, in every state shown.
    secret = next(i for i in managed["items"] if i["kind"] == "Secret")
    for field in ("targetState", "liveState", "normalizedLiveState", "predictedLiveState"):
        if secret.get(field):
            assert re.search(r'"password":"\++"', secret[field]), (field, secret[field])
    assert SECRET_VALUE not in json.dumps(managed)
    assert SECRET_VALUE.encode() not in kube.api.get(f"{APPS}/{synced.name}/resource-tree").body

    # The query's filters, as upstream's isMatchingResource.
    for query in ("kind=ConfigMap", "kind=ConfigMap&name=chain-2", f"namespace={synced.ns}&group=apps",
                  "name=nosuch", "version=v9&kind=Service"):
        ours, _ = same_answers(f"{APPS}/{synced.name}/managed-resources?{query}", kube.api, upstream_token, plane)
        want = {"kind=ConfigMap": {"chain-1", "chain-2"}, "kind=ConfigMap&name=chain-2": {"chain-2"},
                f"namespace={synced.ns}&group=apps": {"tree"}, "name=nosuch": set(),
                "version=v9&kind=Service": {"chain"}}[query]
        assert {i["name"] for i in ours.get("items", [])} == want, (query, ours)


def test_get_fills_resource_health_from_the_tree_as_argocd_server_does(plane, kube, synced, upstream_token):
    app = kube.api.must_get(synced.name)
    assert app["status"].get("resourceHealthSource") == "appTree", app["status"]
    stored = plane.get_json("application", synced.name, "-n", NS)["status"]["resources"]
    assert not any("health" in r for r in stored), stored  # the controller keeps health in the tree only
    ours, _ = same_answers(f"{APPS}/{synced.name}", kube.api, upstream_token, plane,
                           settle=lambda p: p.startswith("metadata.managedFields"))
    health = {r["name"]: r.get("health", {}).get("status") for r in ours["status"]["resources"]}
    assert health["chain"] == "Healthy" and health["tree"] == "Progressing", health
    assert health["chain-1"] is None, health  # a ConfigMap has no health


def test_cluster_info_is_the_controllers_as_argocd_server_answers_it(plane, kube, synced, upstream_token):
    in_cluster = f"/api/v1/clusters/{urllib.parse.quote(IN_CLUSTER, safe='')}"
    # The controller writes each cluster's info every 10 s: it may not count the application yet.
    def counted():
        info = kube.api.get(in_cluster).json().get("info", {})
        return (info.get("connectionState", {}).get("status") == "Successful"
                and int(info.get("applicationsCount", 0)) >= 1)
    wait_for("the controller's info of the application's cluster, counting the application", counted,
             timeout=60, interval=0.5)
    for server in (IN_CLUSTER, plane.state["apiserver"]["url"]):
        path = f"/api/v1/clusters/{urllib.parse.quote(server, safe='')}"
        ours, _ = same_answers(path, kube.api, upstream_token, plane,
                               settle=lambda p: p.startswith("secretName"))  # tiphys's own field 1000
        info = ours["info"]
        assert ours["connectionState"] == info["connectionState"], ours
        if server == IN_CLUSTER:  # the application's destination, which the controller watches
            assert info["connectionState"]["status"] == "Successful", info
            assert re.fullmatch(r"1\.34", info["serverVersion"]) and ours["serverVersion"] == info["serverVersion"]
        else:  # no application: the controller says it does not watch it
            assert info["connectionState"]["status"] == "Unknown" and "no applications" in \
                info["connectionState"]["message"], info
    listed = kube.api.get("/api/v1/clusters").json()["items"]
    by_server = {c["server"]: c for c in listed}
    assert by_server[IN_CLUSTER]["info"]["applicationsCount"] >= 1, by_server[IN_CLUSTER]["info"]
    assert by_server[IN_CLUSTER]["info"].get("cacheInfo", {}).get("resourcesCount", 0) > 0, by_server[IN_CLUSTER]


def test_the_tree_over_grpc_and_grpc_web(kube, synced, app_pb):
    pb = app_pb
    rest = tree_of(kube.api, synced.name)
    names = sorted((n["kind"], n["name"]) for n in rest["nodes"])
    query = pb.app.ResourcesQuery(applicationName=synced.name)
    with grpc_channel(kube.server) as ch:
        stub = pb.grpc.ApplicationServiceStub(ch)
        tree = stub.ResourceTree(query, metadata=md(kube.api.token), timeout=20)
        assert sorted((n.resourceRef.kind, n.resourceRef.name) for n in tree.nodes) == names
        pod = next(n for n in tree.nodes if n.resourceRef.kind == "Pod")
        assert pod.parentRefs[0].kind == "ReplicaSet" and pod.resourceRef.uid, pod
        managed = stub.ManagedResources(pb.app.ResourcesQuery(applicationName=synced.name, kind="ConfigMap"),
                                        metadata=md(kube.api.token), timeout=20)
        assert sorted(i.name for i in managed.items) == ["chain-1", "chain-2"]
    web = grpc_web(kube.server, "ResourceTree", query, kube.api.token)
    assert web.status == 200 and web.trailers.get("grpc-status") == "0", web
    tree = pb.v1.ApplicationTree.FromString(web.messages[0])
    assert sorted((n.resourceRef.kind, n.resourceRef.name) for n in tree.nodes) == names


class TreeWatch(RestWatch):
    """GET /api/v1/stream/applications/<name>/resource-tree (SSE), read as RestWatch reads."""

    def __init__(self, server, token, name, timeout=120):  # noqa: D107 (RestWatch's, another path)
        Watch.__init__(self)
        self.sse = True
        self.path = f"/api/v1/stream/applications/{name}/resource-tree"
        self.conn = connection(server, timeout=timeout)
        self.conn.request("GET", self.path, headers={**bearer(token), "Accept": "text/event-stream"})
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.headers = {k.lower(): v for k, v in self.resp.getheaders()}
        self.raw, self.body = [], None
        if self.status == 200:
            self.start()
        else:
            self.body = self.resp.read()
            self.conn.close()


def test_watch_resource_tree_delivers_the_new_tree(plane, kube, synced, app_pb, watches):
    sse = watches.add(TreeWatch(kube.server, kube.api.token, synced.name))
    assert sse.status == 200, (sse.status, sse.body)
    kind, first = sse.next(20, "the current tree")
    assert kind == "result" and {"ConfigMap", "Pod"} <= {n["kind"] for n in first["nodes"]}, (kind, first)
    frames = queue.Queue()
    with grpc_channel(kube.server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        call = stub.WatchResourceTree(app_pb.app.ResourcesQuery(applicationName=synced.name),
                                      metadata=md(kube.api.token), timeout=120)

        def read():
            try:
                for tree in call:
                    frames.put(tree)
            except grpc.RpcError as e:
                frames.put(e)
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert any(n.resourceRef.name == "chain-1" for n in frames.get(timeout=20).nodes)

        synced.repo.commit(tree_manifests(extra_cm=True), "one more ConfigMap")
        r = kube.api.call("POST", f"{APPS}/{synced.name}/sync", {"revision": "main"})
        assert r.status == 200, r
        deadline = time.monotonic() + 120
        while True:
            kind, tree = sse.next(max(1, deadline - time.monotonic()), "a tree with the new ConfigMap")
            assert kind == "result", (kind, tree)
            if any(n["name"] == "tree-extra" for n in tree.get("nodes", [])):
                break
        while True:
            tree = frames.get(timeout=max(1, deadline - time.monotonic()))
            assert not isinstance(tree, grpc.RpcError), tree
            if any(n.resourceRef.name == "tree-extra" for n in tree.nodes):
                break
        call.cancel()
        reader.join(timeout=5)


def redis_get(address, key):
    """GET `key` from Redis at `address` over RESP, the raw bytes (None when missing)."""
    host, port = address.rsplit(":", 1)
    k = key.encode()
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(k), k))
        f = s.makefile("rb")
        head = f.readline()
        if head == b"$-1\r\n":
            return None
        assert head.startswith(b"$"), head
        data = f.read(int(head[1:-2]))
        assert len(data) == int(head[1:-2])
        return data


def redis_set(address, key, value):
    host, port = address.rsplit(":", 1)
    k = key.encode()
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(value), value))
        assert s.makefile("rb").readline() == b"+OK\r\n"


def test_the_controllers_entries_decode_to_what_tiphys_answers(plane, kube, synced):
    """The raw entries, as the controller wrote them: gzip'd JSON at `<key>|1.8.3.gz`, which decode
    (here, with Python's gzip and json) to tiphys's answers. TIPHYS_CAPTURE_DIR keeps them (the
    Rust unit tests of src/controller_cache read such a capture)."""
    redis = plane.state["redis"]["address"]
    keys = {"tree": f"app|resources-tree|{synced.name}|{CACHE_VERSION}.gz",
            "managed": f"app|managed-resources|{synced.name}|{CACHE_VERSION}.gz",
            "cluster": f"cluster|info|{IN_CLUSTER}|{CACHE_VERSION}.gz"}
    def read():
        raw = {what: redis_get(redis, key) for what, key in keys.items()}
        for what, data in raw.items():
            assert data and data[:2] == b"\x1f\x8b", (what, data[:20] if data else data)
        theirs = (json.loads(gzip.decompress(raw["tree"]))["nodes"], json.loads(gzip.decompress(raw["managed"])))
        ours = (tree_of(kube.api, synced.name)["nodes"],
                kube.api.get(f"{APPS}/{synced.name}/managed-resources").json()["items"])
        seen = [([(n["kind"], n["name"], n.get("uid")) for n in nodes], [(m["kind"], m["name"]) for m in managed])
                for nodes, managed in (theirs, ours)]
        return raw, seen
    # The controller may rewrite an entry between the two reads (after a sync): read until they agree.
    for _ in range(20):
        raw, (theirs, ours) = read()
        if theirs == ours:
            break
        time.sleep(0.5)
    assert theirs == ours
    capture = os.environ.get("TIPHYS_CAPTURE_DIR")
    if capture:
        Path(capture).mkdir(parents=True, exist_ok=True)
        for what, data in raw.items():
            (Path(capture) / f"{what}.json.gz").write_bytes(data)


@pytest.fixture
def own_redis(tmp_path):
    """A Redis of this test's own on a free loopback port (so that stopping it harms no one)."""
    binary = shutil.which("redis-server")
    if not binary:
        pytest.fail("redis-server is not installed (Debian's redis-server)")
    port = free_port()
    log = tmp_path / "redis.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    wait_port("127.0.0.1", port, timeout=10, proc=proc, log=log)
    yield SimpleNamespace(address=f"127.0.0.1:{port}", proc=proc)
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_sharded_tree_is_read_whole_and_a_redis_that_is_down_is_unavailable(plane, kube, synced, own_redis,
                                                                               tmp_path, app_pb):
    """The controller's tree split into shards of two nodes (as its ARGOCD_APPLICATION_TREE_SHARD_SIZE
    splits it) in a Redis of the test's own: tiphys reads it whole; what that Redis lacks makes
    tiphys ask the controller for a refresh, as upstream. Then that Redis stops: the tree is
    UNAVAILABLE over REST and gRPC, naming Redis, and the rest of the API answers."""
    whole = json.loads(gzip.decompress(redis_get(plane.state["redis"]["address"],
                                                 f"app|resources-tree|{synced.name}|{CACHE_VERSION}.gz")))
    items = [("nodes", n) for n in whole.get("nodes", [])] + [("orphanedNodes", n) for n in whole.get("orphanedNodes", [])]
    shards = []
    for i in range(0, len(items), 2):
        shard = {}
        for field, item in items[i:i + 2]:
            shard.setdefault(field, []).append(item)
        shards.append(shard)
    shards[0]["shardsCount"] = len(shards)
    assert len(shards) >= 3, len(shards)
    base = f"app|resources-tree|{synced.name}"
    for i, shard in enumerate(shards):
        key = base if i == 0 else f"{base}|{i}"
        redis_set(own_redis.address, f"{key}|{CACHE_VERSION}.gz", gzip.compress(json.dumps(shard).encode()))

    server = start_kube_server(tmp_path, plane.state["kubeconfig"], "--redis", own_redis.address)
    try:
        api = Api(server, kube.api.token)  # one installation, one signing key
        merged = tree_of(api, synced.name)
        assert merged.pop("shardsCount") == len(shards)
        assert merged == whole  # every field the controller wrote, in upstream's order

        # No managed resources in this Redis: tiphys asks the real controller to refresh the
        # application (it does, and writes to its own Redis), reads again, and says what is missing.
        before = kube.api.must_get(synced.name)["status"]["reconciledAt"]
        r = api.get(f"{APPS}/{synced.name}/managed-resources", timeout=90)
        assert r.status == 503 and "even after a refresh" in r.json()["message"], r
        after = kube.api.must_get(synced.name)["status"]["reconciledAt"]
        assert after >= before and "argocd.argoproj.io/refresh" not in \
            (kube.api.must_get(synced.name)["metadata"].get("annotations") or {}), (before, after)

        own_redis.proc.terminate()
        own_redis.proc.wait(timeout=10)
        for sub in ("resource-tree", "managed-resources"):
            r = api.get(f"{APPS}/{synced.name}/{sub}", timeout=30)
            assert r.status == 503 and r.json()["code"] == 14, (sub, r)
            assert f"Redis at {own_redis.address}" in r.json()["message"], r.json()
        with grpc_channel(server) as ch:
            stub = app_pb.grpc.ApplicationServiceStub(ch)
            e = rpc_error(stub.ResourceTree, app_pb.app.ResourcesQuery(applicationName=synced.name),
                          metadata=md(api.token), timeout=30)
            assert e.code() == grpc.StatusCode.UNAVAILABLE and "Redis" in e.details(), e
        # The rest of the API: the application (its health left as stored), lists, clusters.
        r = api.get(f"{APPS}/{synced.name}")
        assert r.status == 200 and r.json()["metadata"]["name"] == synced.name, r
        assert synced.name in api.names()
        r = api.get(f"/api/v1/clusters/{urllib.parse.quote(IN_CLUSTER, safe='')}")
        assert r.status == 200 and r.json()["server"] == IN_CLUSTER, r
        assert api.get("/api/v1/projects/default").status == 200
    finally:
        server.stop()


def test_without_redis_the_tree_is_a_clear_error(plane, kube, synced, tmp_path):
    server = start_kube_server(tmp_path, plane.state["kubeconfig"])
    try:
        api = Api(server, kube.api.token)
        for sub in ("resource-tree", "managed-resources"):
            r = api.get(f"{APPS}/{synced.name}/{sub}")
            assert r.status == 400 and r.json()["code"] == 9, (sub, r)
            assert "controller's cache is not configured" in r.json()["message"] and "--redis" in r.json()["message"], r
        assert api.get(f"{APPS}/{synced.name}").status == 200
    finally:
        server.stop()


def test_a_caller_without_get_on_the_application_is_denied_and_audited(plane, kube, synced, app_pb):
    """A project role allowed to get another application only: each tree call is refused with
    upstream's permission denied, and each denial leaves one audit line."""
    project, role = uniq("treeproj"), "viewer"
    r = kube.api.call("POST", "/api/v1/projects", {"project": {
        "metadata": {"name": project},
        "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}],
                 "roles": [{"name": role, "policies": [f"p, proj:{project}:{role}, applications, get, {project}/other, allow"]}]}}})
    assert r.status == 200, r
    name = uniq("treedeny")
    kube.api.must_create(app_body(name, project=project, repo=synced.repo.url, path="manifests", dest_namespace=synced.ns))
    try:
        r = kube.api.call("POST", f"/api/v1/projects/{project}/roles/{role}/token", {"expiresIn": 600})
        assert r.status == 200, r
        token = r.json()["token"]
        api = Api(kube.server, token)
        before = len(denials(kube.server, project, name))
        for path in (f"{APPS}/{name}/resource-tree", f"{APPS}/{name}/managed-resources",
                     f"/api/v1/stream/applications/{name}/resource-tree"):
            r = api.get(path)
            assert r.status == 403 and r.json()["message"] == "permission denied", (path, r)
        with grpc_channel(kube.server) as ch:
            stub = app_pb.grpc.ApplicationServiceStub(ch)
            e = rpc_error(stub.ResourceTree, app_pb.app.ResourcesQuery(applicationName=name),
                          metadata=md(token), timeout=20)
            assert e.code() == grpc.StatusCode.PERMISSION_DENIED, e
        lines = wait_for("four audit lines", lambda: len(denials(kube.server, project, name)) >= before + 4
                         and denials(kube.server, project, name), timeout=5, interval=0.1)
        assert len(lines) == before + 4, lines
    finally:
        kube.api.delete(name)
        wait_for("the application gone", lambda: name not in kube.api.names(), timeout=60)
        kube.api.call("DELETE", f"/api/v1/projects/{project}")


def denials(server, project, name):
    """The audit lines of the role's `applications, get` denials on the application."""
    want = (f'subject="proj:{project}:viewer"', 'resource="applications"', 'action="get"',
            f'object="{project}/{name}"', 'decision="deny"')
    return [line for line in server.logs().splitlines()
            if " audit: " in line and all(field in line.split() for field in want)]
