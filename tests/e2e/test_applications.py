"""ApplicationService end to end, real servers over real sockets: CRUD over REST, native gRPC
(grpcio stubs compiled from our protos at test time, h2c and TLS) and hand-framed gRPC-Web; the
REST JSON rules (shared/reference/argocd-api.md §1.3) on the stored object, list shape, filters
and the UI's `fields=` projection (§3.2); optimistic concurrency; sync, terminate and the
`override` check for local manifests (SEC-23); the existence oracle (SEC-13), also with a project
in the request and for project names on create; what projects permit (destinations, sources,
application namespaces: SEC-22); bad input (names, unknown projects, `javascript:` URLs (SEC-25),
malformed JSON and patches, wrong types, oversized bodies), each refused clearly with nothing
stored; and durability: every acknowledged write survives repeated `kill -9` of the release binary.

Watches are in test_app_watch.py.
"""

import copy
import http.client
import json
import os
import random
import re
import statistics
import threading
import time
import uuid
from types import SimpleNamespace
from urllib.parse import quote, unquote

import grpc
import pytest

import conftest
from appkit import (APPS, IN_CLUSTER, REPO_URL, Api, app_body, grpc_channel, grpc_web, md, rpc_error, rv_of,
                    uniq, write_rbac)
from authkit import ADMIN_PW, ALICE_PW, BOB_PW, assert_api_error, login_token
from conftest import TIPHYS_RELEASE_BIN

MAX_BODY = 262144  # --max-body-bytes of the module's server
RFC3339_SECONDS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")

POLICY = [
    # alice: may read and sync the `visible-*` applications of the default project, no override
    "p, alice, applications, get, default/visible-*, allow",
    "p, alice, applications, sync, default/visible-*, allow",
    # bob: may read, sync and override (local manifests) in the default project
    "p, bob, applications, get, default/*, allow",
    "p, bob, applications, sync, default/*, allow",
    "p, bob, applications, override, default/*, allow",
    # alice may read the applications of project `a` (not `b`)
    "p, alice, applications, get, a/*, allow",
]
PROJECT_A = {"metadata": {"name": "a"}, "spec": {
    "sourceRepos": ["https://github.com/argoproj/*"],
    "destinations": [{"server": IN_CLUSTER, "namespace": "team-a"}],
    # apps-y: permitted by the project, not served (the server enables apps-a only)
    "sourceNamespaces": ["apps-a", "apps-y"]}}
PROJECT_B = {"metadata": {"name": "b"}, "spec": {
    "sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}]}}


@pytest.fixture(scope="module")
def env(module_servers, module_config):
    """One plaintext server for the module: standard accounts (admin, alice, bob) with POLICY."""
    cfg = module_config()
    write_rbac(cfg, POLICY)
    # apps-a: the application namespace test_project_restrictions_are_enforced_and_nothing_is_stored uses.
    server = module_servers.start("--insecure", "--max-body-bytes", str(MAX_BODY), "--application-namespaces", "apps-a",
                                  config=cfg)
    tokens = {"admin": login_token(server, "admin", ADMIN_PW), "alice": login_token(server, "alice", ALICE_PW),
              "bob": login_token(server, "bob", BOB_PW)}
    return SimpleNamespace(server=server, cfg=cfg, tokens=tokens, admin=Api(server, tokens["admin"]),
                           alice=Api(server, tokens["alice"]), bob=Api(server, tokens["bob"]),
                           anonymous=Api(server, None))


@pytest.fixture(scope="module")
def projects(env):
    """AppProjects `a` (restricted) and `b` (open), created through ProjectService over REST."""
    for project in (PROJECT_A, PROJECT_B):
        r = env.admin.call("POST", "/api/v1/projects", {"project": project})
        assert r.status == 200, f"POST /api/v1/projects failed (ProjectService needed by this test): {r}"
    return "a", "b"


@pytest.fixture(scope="module")
def stub(env, app_pb):
    with grpc_channel(env.server) as ch:
        yield app_pb.grpc.ApplicationServiceStub(ch)


def pb_app(pb, name, labels=None, repo=REPO_URL, project=None):
    app = pb.v1.Application()
    app.metadata.name = name
    for k, v in (labels or {}).items():
        app.metadata.labels[k] = v
    app.spec.destination.server = IN_CLUSTER
    app.spec.destination.namespace = "default"
    app.spec.source.repoURL = repo
    app.spec.source.path = "guestbook"
    app.spec.source.targetRevision = "HEAD"
    if project is not None:
        app.spec.project = project
    return app


# ---- REST CRUD and the JSON rules ---------------------------------------------------------------

def test_create_and_get_follow_the_rest_json_rules(env):
    name = uniq("shape")
    body = app_body(name, labels={"team": "a"}, annotations={"note": "x"})
    # what a client may not set: apiVersion/kind are accepted and not echoed, status and
    # operation are the server's (an injected operation would be a sync without `sync` rights)
    sent = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", **body,
            "status": {"health": {"status": "Healthy"}, "sync": {"status": "Synced"}},
            "operation": {"sync": {"revision": "HEAD"}, "initiatedBy": {"username": "mallory"}}}
    r = env.admin.create(sent)
    assert r.status == 200, r
    assert r.header("content-type") == "application/json", r
    app = r.json()
    assert set(app) == {"metadata", "spec", "status"}, app  # no apiVersion, kind or operation
    meta = app["metadata"]
    assert meta["name"] == name and meta["namespace"] == "argocd", meta
    assert isinstance(meta["resourceVersion"], str) and meta["resourceVersion"].isdigit(), meta
    assert type(meta["generation"]) is int and meta["generation"] == 1, meta
    assert RFC3339_SECONDS.fullmatch(meta["creationTimestamp"]), meta
    assert uuid.UUID(meta["uid"]), meta
    assert meta["labels"] == {"team": "a"} and meta["annotations"] == {"note": "x"}, meta
    spec = app["spec"]
    assert spec["project"] == "default", spec  # the project an empty one means
    assert spec["destination"] == {"server": IN_CLUSTER, "namespace": "default"}, spec
    assert spec["source"] == {"repoURL": REPO_URL, "path": "guestbook", "targetRevision": "HEAD"}, spec
    status = app["status"]
    assert isinstance(status["sync"], dict) and isinstance(status["sync"]["status"], str), status
    assert isinstance(status["health"], dict) and isinstance(status["summary"], dict), status
    assert status["health"].get("status") != "Healthy" and status["sync"]["status"] != "Synced", status

    got = env.admin.app(name)
    assert got.status == 200 and got.body == r.body, (got, r)

    # Create again with the same spec: the stored object, untouched; with another spec: refused
    # unless upsert
    again = env.admin.create(body)
    assert again.status == 200 and again.body == r.body, again
    changed = app_body(name, labels={"team": "a"}, annotations={"note": "x"}, path="other")
    assert_api_error(env.admin.create(changed), 400, 3, "existing application spec is different.*upsert")
    assert env.admin.app(name).body == r.body
    up = env.admin.create(changed, query="upsert=true")
    assert up.status == 200, up
    assert up.json()["spec"]["source"]["path"] == "other" and rv_of(up.json()) > rv_of(app), up
    assert up.json()["metadata"]["uid"] == meta["uid"], up


def test_unauthenticated_calls_are_refused(env):
    assert_api_error(env.anonymous.get(APPS), 401, 16)
    assert_api_error(env.anonymous.create(app_body(uniq("anon"))), 401, 16)
    r = env.admin.call("GET", APPS, headers={"Authorization": "Bearer " + env.tokens["admin"][:-4] + "AAAA"})
    assert_api_error(r, 401, 16)


def test_unknown_fields_are_dropped_and_types_are_checked(env):
    name = uniq("unknown")
    body = app_body(name)
    body["spec"]["bogus"] = {"x": 1}
    body["metadata"]["alsoBogus"] = True
    r = env.admin.create(body)
    assert r.status == 200, r
    assert "bogus" not in r.json()["spec"] and "alsoBogus" not in r.json()["metadata"], r
    # int64 fields take JSON numbers and come back as numbers
    body = app_body(uniq("history"), revisionHistoryLimit=7)
    r = env.admin.create(body)
    assert r.status == 200 and r.json()["spec"]["revisionHistoryLimit"] == 7, r


def test_list_shape_and_filters(env):
    run = uniq("run")
    other_repo = "https://gitlab.example.com/team/other.git"
    n = {k: uniq(f"list-{k}") for k in ("a1", "a2", "b", "none")}
    vis = "visible-" + uniq("list")
    env.admin.must_create(app_body(n["a1"], labels={"run": run, "team": "a"}))
    env.admin.must_create(app_body(n["a2"], labels={"run": run, "team": "a"}, repo=other_repo))
    env.admin.must_create(app_body(n["b"], labels={"run": run, "team": "b"}))
    env.admin.must_create(app_body(n["none"], labels={"run": run}))
    env.admin.must_create(app_body(vis, labels={"run": run, "team": "v"}))
    everyone = sorted([*n.values(), vis])

    listed = env.admin.list(selector=f"run={run}")
    assert set(listed) == {"metadata", "items"} and set(listed["metadata"]) == {"resourceVersion"}, listed
    list_rv = rv_of(listed)
    assert sorted(i["metadata"]["name"] for i in listed["items"]) == everyone, listed
    assert all(rv_of(i) <= list_rv for i in listed["items"]), listed
    for item in listed["items"]:  # the items are the full objects, as Get answers them
        assert item == env.admin.must_get(item["metadata"]["name"])

    def sel(extra, **kw):
        return sorted(env.admin.names(selector=f"run={run}" + (f",{extra}" if extra else ""), **kw))

    assert sel("team=a") == sorted([n["a1"], n["a2"]])
    assert sel("team==a") == sorted([n["a1"], n["a2"]])
    assert sel("team!=a") == sorted([n["b"], n["none"], vis])
    assert sel("team in (a,b)") == sorted([n["a1"], n["a2"], n["b"]])
    assert sel("team notin (a,v)") == sorted([n["b"], n["none"]])
    assert sel("!team") == [n["none"]]
    assert sel("team") == sorted([n["a1"], n["a2"], n["b"], vis])
    assert sel("", repo=other_repo) == [n["a2"]]
    assert sel("", repo=REPO_URL) == sorted([n["a1"], n["b"], n["none"], vis])
    assert sel("", repo="https://example.com/nothing.git") == []
    assert sel("", projects="default") == everyone
    assert sel("", projects="nope") == []
    assert sel("", projects=["nope", "default"]) == everyone
    assert env.admin.names(name=n["b"]) == [n["b"]]
    assert env.admin.names(name=n["b"], selector="team=a") == []

    empty = env.admin.list(selector=f"run={run},team=zzz")
    assert set(empty) == {"metadata", "items"} and empty["items"] in ([], None), empty
    assert rv_of(empty) >= list_rv

    # RBAC per item: alice sees only the `visible-*` application; bob (default/*) sees all
    assert env.alice.names(selector=f"run={run}") == [vis]
    assert sorted(env.bob.names(selector=f"run={run}")) == everyone

    assert_api_error(env.admin.get(f"{APPS}?selector={quote('team in a')}"), 400, 3, "selector")


UI_LIST_FIELDS = ("metadata.resourceVersion,items.metadata.name,items.metadata.namespace,items.metadata.annotations,"
                  "items.metadata.labels,items.metadata.creationTimestamp,items.metadata.deletionTimestamp,"
                  "items.spec.destination,items.spec.project,items.spec.source,items.spec.sources,"
                  "items.spec.sourceHydrator,items.spec.syncPolicy,items.operation.sync,items.status.sourceHydrator,"
                  "items.status.summary,items.status.sync.status,items.status.sync.revision,items.status.health,"
                  "items.status.operationState.phase,items.status.operationState.startedAt,"
                  "items.status.operationState.finishedAt")


def test_fields_projection_as_the_ui_lists(env):
    run = uniq("run")
    name = uniq("fields")
    env.admin.must_create(app_body(name, labels={"run": run}, annotations={"a": "b"},
                                   syncPolicy={"automated": {"prune": True}}))
    full = env.admin.must_get(name)
    r = env.admin.get(f"{APPS}?selector=run%3D{run}&appNamespace=&fields={quote(UI_LIST_FIELDS)}")
    assert r.status == 200, r
    body = r.json()
    assert set(body) == {"metadata", "items"} and set(body["metadata"]) == {"resourceVersion"}, body
    assert body["metadata"]["resourceVersion"].isdigit(), body
    [item] = body["items"]
    assert set(item) <= {"metadata", "spec", "operation", "status"}, item
    meta = item["metadata"]
    assert set(meta) <= {"name", "namespace", "annotations", "labels", "creationTimestamp", "deletionTimestamp"}, meta
    for key in ("name", "namespace", "annotations", "labels", "creationTimestamp"):
        assert meta[key] == full["metadata"][key], (key, meta)
    spec = item["spec"]
    assert set(spec) <= {"destination", "project", "source", "sources", "sourceHydrator", "syncPolicy"}, spec
    for key in ("destination", "project", "source", "syncPolicy"):
        assert spec[key] == full["spec"][key], (key, spec)
    status = item["status"]
    assert set(status) <= {"sourceHydrator", "summary", "sync", "health", "operationState"}, status
    assert set(status["sync"]) <= {"status", "revision"} and "status" in status["sync"], status
    assert status["health"] == full["status"]["health"] and status["summary"] == full["status"]["summary"], status

    # the UI's project list query, and a single object projected
    r = env.admin.app(name, "fields=metadata.name,spec.project")
    assert (r.status, r.json()) == (200, {"metadata": {"name": name}, "spec": {"project": "default"}}), r


def test_update_updatespec_patch_and_delete_over_rest(env):
    name = uniq("crud")
    created = env.admin.must_create(app_body(name, labels={"k": "v"}))
    rv0 = rv_of(created)

    upd = copy.deepcopy(created)
    upd["metadata"]["labels"]["k2"] = "v2"
    upd["spec"]["destination"]["namespace"] = "ns2"
    upd["status"]["health"] = {"status": "Healthy"}  # not the client's to set
    r = env.admin.call("PUT", f"{APPS}/{name}", upd)
    assert r.status == 200, r
    a1 = r.json()
    assert rv_of(a1) > rv0 and a1["metadata"]["generation"] == 2, a1["metadata"]
    assert a1["metadata"]["labels"] == {"k": "v", "k2": "v2"}, a1
    assert a1["spec"]["destination"]["namespace"] == "ns2", a1
    assert a1["status"] == created["status"], a1
    assert a1["metadata"]["uid"] == created["metadata"]["uid"], a1
    assert a1["metadata"]["creationTimestamp"] == created["metadata"]["creationTimestamp"], a1
    assert env.admin.must_get(name) == a1

    # a metadata-only change does not bump the generation
    upd = copy.deepcopy(a1)
    upd["metadata"]["annotations"] = {"x": "y"}
    r = env.admin.call("PUT", f"{APPS}/{name}", upd)
    assert r.status == 200, r
    a2 = r.json()
    assert rv_of(a2) > rv_of(a1) and a2["metadata"]["generation"] == 2, a2["metadata"]

    # UpdateSpec answers the spec as stored
    spec = copy.deepcopy(a2["spec"])
    spec["source"]["path"] = "elsewhere"
    r = env.admin.call("PUT", f"{APPS}/{name}/spec", spec)
    assert (r.status, r.json()) == (200, spec), r
    a3 = env.admin.must_get(name)
    assert a3["spec"] == spec and a3["metadata"]["generation"] == 3 and rv_of(a3) > rv_of(a2), a3

    # merge patch: add one label, remove another (null)
    r = env.admin.call("PATCH", f"{APPS}/{name}", {
        "patch": json.dumps({"metadata": {"labels": {"k": None, "m": "1"}}}), "patchType": "merge"})
    assert r.status == 200, r
    assert r.json()["metadata"]["labels"] == {"k2": "v2", "m": "1"}, r
    # JSON patch
    r = env.admin.call("PATCH", f"{APPS}/{name}", {"patchType": "json", "patch": json.dumps([
        {"op": "replace", "path": "/spec/destination/namespace", "value": "ns3"},
        {"op": "add", "path": "/metadata/labels/j", "value": "2"},
        {"op": "test", "path": "/spec/source/path", "value": "elsewhere"}])})
    assert r.status == 200, r
    a5 = r.json()
    assert a5["spec"]["destination"]["namespace"] == "ns3" and a5["metadata"]["labels"]["j"] == "2", a5
    assert a5 == env.admin.must_get(name)
    # Without patchType a patch is a JSON patch, as upstream; a merge-style object is refused.
    r = env.admin.call("PATCH", f"{APPS}/{name}", {"patch": json.dumps([
        {"op": "replace", "path": "/spec/destination/namespace", "value": "ns4"}])})
    assert r.status == 200 and r.json()["spec"]["destination"]["namespace"] == "ns4", r
    r = env.admin.call("PATCH", f"{APPS}/{name}", {"patch": json.dumps({"spec": {"project": "x"}})})
    assert r.status == 400 and "JSON patch" in r.json()["message"], r
    assert env.admin.must_get(name)["spec"]["project"] != "x"

    r = env.admin.delete(name)
    assert (r.status, r.json()) == (200, {}), r
    assert_api_error(env.admin.app(name), 404, 5, f'"{name}" not found')
    assert_api_error(env.admin.delete(name), 404, 5, f'"{name}" not found')
    assert env.admin.names(name=name) == []


def test_update_spec_without_project_stores_the_default_project(env):
    """Create stores an empty spec.project as `default` (upstream's NormalizeApplicationSpec);
    UpdateSpec and Update must too, or the stored object says `"project":""`."""
    name = uniq("noproj")
    created = env.admin.must_create(app_body(name))
    spec = copy.deepcopy(created["spec"])
    del spec["project"]
    r = env.admin.call("PUT", f"{APPS}/{name}/spec", spec)
    assert r.status == 200, r
    assert r.json()["project"] == "default", r
    assert env.admin.must_get(name)["spec"]["project"] == "default"
    upd = env.admin.must_get(name)
    upd["spec"]["project"] = ""
    r = env.admin.call("PUT", f"{APPS}/{name}", upd)
    assert r.status == 200 and r.json()["spec"]["project"] == "default", r


# ---- optimistic concurrency --------------------------------------------------------------------

def test_an_update_applies_to_the_latest_application_whatever_its_resource_version(env, stub, app_pb):
    """As upstream's Update (server/application/application.go `updateApp`): the body's spec,
    labels, annotations and finalizers are applied to the latest stored application; a stale or
    missing resourceVersion is no conflict, and status and operation stay the server's."""
    name = uniq("occ")
    created = env.admin.must_create(app_body(name, labels={"keep": "no"}))
    first = copy.deepcopy(created)
    first["spec"]["destination"]["namespace"] = "first"
    r = env.admin.call("PUT", f"{APPS}/{name}", first)
    assert r.status == 200, r
    current = env.admin.must_get(name)

    stale = copy.deepcopy(created)  # still carries the creation's resourceVersion
    stale["spec"]["destination"]["namespace"] = "second"
    stale["metadata"]["labels"] = {"team": "web"}
    stale["metadata"]["finalizers"] = ["resources-finalizer.argocd.argoproj.io"]
    r = env.admin.call("PUT", f"{APPS}/{name}", stale)
    assert r.status == 200, r
    after = r.json()
    assert after["spec"]["destination"]["namespace"] == "second", after
    assert after["metadata"]["labels"] == {"team": "web"}, after
    assert after["metadata"]["finalizers"] == ["resources-finalizer.argocd.argoproj.io"], after
    assert after["metadata"]["uid"] == current["metadata"]["uid"], after
    assert rv_of(after) > rv_of(current), after
    assert env.admin.must_get(name) == after

    # the same over gRPC, without any resourceVersion
    msg = app_pb.v1.Application()
    msg.metadata.name = name
    msg.spec.destination.server = IN_CLUSTER
    msg.spec.destination.namespace = "third"
    msg.spec.source.repoURL = REPO_URL
    done = stub.Update(app_pb.app.ApplicationUpdateRequest(application=msg), metadata=md(env.tokens["admin"]),
                       timeout=10)
    assert done.spec.destination.namespace == "third"
    assert not done.metadata.labels and not done.metadata.finalizers, done.metadata


# ---- native gRPC --------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["h2c", "tls"])
def test_crud_over_native_grpc(mode, env, servers, app_pb):
    pb = app_pb
    if mode == "h2c":
        server, token = env.server, env.tokens["admin"]
    else:
        server = servers.start(config=env.cfg)  # TLS with its generated certificate
        assert server.tls
        token = login_token(server, "admin", ADMIN_PW)
    auth = md(token)
    with grpc_channel(server) as ch:
        stub = pb.grpc.ApplicationServiceStub(ch)
        run, name = uniq("run"), uniq(f"grpc-{mode}")
        created = stub.Create(pb.app.ApplicationCreateRequest(application=pb_app(pb, name, {"run": run})),
                              metadata=auth, timeout=10)
        assert created.metadata.name == name and created.metadata.namespace == "argocd"
        assert created.metadata.resourceVersion.isdigit() and created.metadata.generation == 1
        assert created.spec.project == "default" and created.metadata.uid
        assert created.HasField("status") and created.status.HasField("sync") and created.status.HasField("health")
        assert created.metadata.creationTimestamp.seconds > 0
        # the CLI sends its token as `token` metadata
        got = stub.Get(pb.app.ApplicationQuery(name=name), metadata=md(token, "token"), timeout=10)
        assert got == created
        rest = Api(server, token).must_get(name)
        assert rest["metadata"]["resourceVersion"] == created.metadata.resourceVersion
        assert rest["spec"]["source"]["repoURL"] == REPO_URL and rest["metadata"]["labels"] == {"run": run}

        def names(**q):
            reply = stub.List(pb.app.ApplicationQuery(selector=f"run={run}", **q), metadata=auth, timeout=10)
            assert reply.metadata.resourceVersion.isdigit()
            assert int(reply.metadata.resourceVersion) >= int(created.metadata.resourceVersion)
            return [i.metadata.name for i in reply.items]

        assert names() == [name]
        assert names(projects=["default"]) == [name] and names(projects=["nope"]) == []
        assert names(repo=REPO_URL) == [name] and names(repo="https://example.com/x.git") == []
        assert names(name=name) == [name] and names(name="other") == []

        upd = pb.v1.Application()
        upd.CopyFrom(got)
        upd.spec.destination.namespace = "ns2"
        upd.metadata.labels["u"] = "1"
        u = stub.Update(pb.app.ApplicationUpdateRequest(application=upd), metadata=auth, timeout=10)
        assert u.spec.destination.namespace == "ns2" and u.metadata.labels["u"] == "1"
        assert u.metadata.generation == 2 and int(u.metadata.resourceVersion) > int(got.metadata.resourceVersion)

        spec = pb.v1.ApplicationSpec()
        spec.CopyFrom(u.spec)
        spec.source.path = "p2"
        s = stub.UpdateSpec(pb.app.ApplicationUpdateSpecRequest(name=name, spec=spec), metadata=auth, timeout=10)
        assert s == spec
        assert stub.Get(pb.app.ApplicationQuery(name=name), metadata=auth, timeout=10).spec == spec

        p = stub.Patch(pb.app.ApplicationPatchRequest(
            name=name, patch=json.dumps({"metadata": {"labels": {"m": "1"}}}), patchType="merge"),
            metadata=auth, timeout=10)
        assert dict(p.metadata.labels) == {"run": run, "u": "1", "m": "1"}
        p = stub.Patch(pb.app.ApplicationPatchRequest(
            name=name, patch=json.dumps([{"op": "replace", "path": "/spec/destination/namespace", "value": "ns3"}]),
            patchType="json"), metadata=auth, timeout=10)
        assert p.spec.destination.namespace == "ns3"

        stub.Delete(pb.app.ApplicationDeleteRequest(name=name), metadata=auth, timeout=10)
        e = rpc_error(stub.Get, pb.app.ApplicationQuery(name=name), metadata=auth, timeout=10)
        assert e.code() == grpc.StatusCode.NOT_FOUND and name in e.details(), e
        assert names() == []

        e = rpc_error(stub.List, pb.app.ApplicationQuery(), timeout=10)
        assert e.code() == grpc.StatusCode.UNAUTHENTICATED, e
        e = rpc_error(stub.Create, pb.app.ApplicationCreateRequest(application=pb_app(pb, "Bad_Name")),
                      metadata=auth, timeout=10)
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "Bad_Name" in e.details(), e


# ---- gRPC-Web -----------------------------------------------------------------------------------

def test_a_grpc_list_larger_than_one_chunk_matches_rest(env, app_pb):
    """A gRPC List is written in chunks of about 256 KB read from the store as the reply goes out;
    80 applications of about 8.5 KB need three. One of them changes after it was written, so the
    stored encodings of both versions have been made."""
    pb, run = app_pb, uniq("big")
    names = [f"{run}-{i:02d}" for i in range(80)]
    for i, name in enumerate(names):
        env.admin.must_create(app_body(name, labels={"run": run}, annotations={"pad": f"{i:02d}" + "x" * 8000}))
    r = env.admin.call("PATCH", f"{APPS}/{names[7]}", {"patch": json.dumps({"metadata": {"labels": {"v": "2"}}}),
                                                        "patchType": "merge"})
    assert r.status == 200, r
    rest = {i["metadata"]["name"]: i for i in env.admin.list(selector=f"run={run}")["items"]}
    with grpc_channel(env.server) as ch:
        stub = pb.grpc.ApplicationServiceStub(ch)
        reply = stub.List(pb.app.ApplicationQuery(selector=f"run={run}"), metadata=md(env.tokens["admin"]), timeout=20)
    assert reply.ByteSize() > 2 * 256 * 1024, reply.ByteSize()  # three chunks or more
    assert [i.metadata.name for i in reply.items] == names
    for item in reply.items:
        want = rest[item.metadata.name]
        assert item.metadata.resourceVersion == want["metadata"]["resourceVersion"]
        assert item.metadata.annotations["pad"] == want["metadata"]["annotations"]["pad"]
        assert dict(item.metadata.labels) == want["metadata"]["labels"]
    assert reply.items[7].metadata.labels["v"] == "2"


def test_grpc_web_calls_and_trailers_only_errors(env, app_pb):
    pb, server, token = app_pb, env.server, env.tokens["admin"]
    run, name = uniq("run"), uniq("web")
    r = grpc_web(server, "Create", pb.app.ApplicationCreateRequest(application=pb_app(pb, name, {"run": run})), token)
    assert r.status == 200 and r.headers["content-type"].startswith("application/grpc-web+proto"), r
    assert r.trailers.get("grpc-status") == "0" and len(r.messages) == 1, r
    created = pb.v1.Application.FromString(r.messages[0])
    assert created.metadata.name == name and created.spec.project == "default"

    r = grpc_web(server, "Get", pb.app.ApplicationQuery(name=name), token)
    assert r.status == 200 and r.trailers.get("grpc-status") == "0" and len(r.messages) == 1, r
    assert pb.v1.Application.FromString(r.messages[0]) == created
    r = grpc_web(server, "List", pb.app.ApplicationQuery(selector=f"run={run}"), token)
    assert r.trailers.get("grpc-status") == "0", r
    listed = pb.v1.ApplicationList.FromString(r.messages[0])
    assert [i.metadata.name for i in listed.items] == [name] and listed.metadata.resourceVersion.isdigit()

    cases = [
        ("Get", pb.app.ApplicationQuery(name=uniq("missing")), token, 5, "not found"),
        ("Get", pb.app.ApplicationQuery(name=name), None, 16, ""),
        ("Create", pb.app.ApplicationCreateRequest(application=pb_app(pb, "Bad_Name")), token, 3, "Bad_Name"),
        ("Update", pb.app.ApplicationUpdateRequest(application=pb_app(pb, uniq("missing"))), token, 5, "not found"),
    ]
    for method, msg, tok, code, words in cases:
        r = grpc_web(server, method, msg, tok)
        # trailers-only: HTTP 200, grpc-status/grpc-message in the headers, no frame at all
        assert r.status == 200, (method, r)
        assert r.header_status == str(code), (method, r)
        assert r.body == b"", (method, r)
        assert words.lower() in unquote(r.header_message or "").lower(), (method, r)
    assert env.admin.must_get(name)["metadata"]["resourceVersion"] == created.metadata.resourceVersion


# ---- sync, terminate, override ------------------------------------------------------------------

def test_sync_records_the_operation_and_terminate_withdraws_it(env, stub, app_pb):
    name = uniq("sync")
    env.admin.must_create(app_body(name))
    req = {"revision": "HEAD", "prune": True, "dryRun": True, "syncOptions": {"items": ["CreateNamespace=true"]},
           "resources": [{"group": "apps", "kind": "Deployment", "name": "web", "namespace": "default"}]}
    r = env.bob.call("POST", f"{APPS}/{name}/sync", req)
    assert r.status == 200, r
    op = r.json()["operation"]
    assert op["initiatedBy"]["username"] == "bob", op
    assert op["sync"]["revision"] == "HEAD" and op["sync"]["prune"] is True and op["sync"]["dryRun"] is True, op
    assert op["sync"]["syncOptions"] == ["CreateNamespace=true"], op
    assert op["sync"]["resources"] == [{"group": "apps", "kind": "Deployment", "name": "web",
                                        "namespace": "default"}], op
    stored = env.admin.app(name)
    assert stored.json()["operation"] == op, stored

    # a second sync while the operation is pending is refused and changes nothing
    err = assert_api_error(env.admin.call("POST", f"{APPS}/{name}/sync", {"revision": "v2"}), 400, 9,
                           "another operation is already in progress")
    assert err
    assert env.admin.app(name).body == stored.body
    e = rpc_error(stub.Sync, app_pb.app.ApplicationSyncRequest(name=name), metadata=md(env.tokens["admin"]),
                  timeout=10)
    assert e.code() == grpc.StatusCode.FAILED_PRECONDITION, e
    assert env.admin.app(name).body == stored.body

    # TerminateOperation withdraws an operation no controller has started
    r = env.bob.call("DELETE", f"{APPS}/{name}/operation")
    assert (r.status, r.json()) == (200, {}), r
    after = env.admin.must_get(name)
    assert "operation" not in after and rv_of(after) > rv_of(stored.json()), after
    assert_api_error(env.bob.call("DELETE", f"{APPS}/{name}/operation"), 400, 9, "no operation is in progress")

    # over gRPC: sync (the caller's name recorded), terminate
    synced = stub.Sync(app_pb.app.ApplicationSyncRequest(name=name, revision="main"),
                       metadata=md(env.tokens["admin"]), timeout=10)
    assert synced.operation.sync.revision == "main" and synced.operation.initiatedBy.username == "admin"
    stub.TerminateOperation(app_pb.app.OperationTerminateRequest(name=name), metadata=md(env.tokens["admin"]),
                            timeout=10)
    assert "operation" not in env.admin.must_get(name)


def test_sync_takes_the_applications_sync_options_and_retry_unless_the_request_gives_its_own(env):
    """As upstream's Sync: spec.syncPolicy.syncOptions and .retry are copied into the recorded
    operation; a request's own syncOptions (even an empty list) or retryStrategy win."""
    retry = {"limit": 3, "backoff": {"duration": "5s", "factor": 2, "maxDuration": "3m"}}
    policy = {"syncOptions": ["CreateNamespace=true", "PruneLast=true"], "retry": retry}
    name = uniq("syncopts")
    env.admin.must_create(app_body(name, syncPolicy=policy))
    r = env.admin.call("POST", f"{APPS}/{name}/sync", {"dryRun": True})
    assert r.status == 200, r
    op = r.json()["operation"]
    assert op["sync"]["syncOptions"] == policy["syncOptions"] and op["retry"] == retry, op
    env.admin.call("DELETE", f"{APPS}/{name}/operation")
    own = {"limit": 1}
    r = env.admin.call("POST", f"{APPS}/{name}/sync", {"dryRun": True, "syncOptions": {"items": []},
                                                      "retryStrategy": own})
    assert r.status == 200, r
    op = r.json()["operation"]
    assert "syncOptions" not in op["sync"] and op["retry"] == own, op


def test_sync_with_local_manifests_needs_override(env, stub, app_pb):
    """SEC-23: alice has `sync` but not `override` on visible-*; bob has both."""
    name = "visible-" + uniq("override")
    env.admin.must_create(app_body(name))
    before = env.admin.app(name)
    manifests = [json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "local"}})]

    err = assert_api_error(env.alice.call("POST", f"{APPS}/{name}/sync", {"manifests": manifests}), 403, 7,
                           "permission denied")
    assert "override" in err["message"], err
    assert env.admin.app(name).body == before.body
    e = rpc_error(stub.Sync, app_pb.app.ApplicationSyncRequest(name=name, manifests=manifests),
                  metadata=md(env.tokens["alice"]), timeout=10)
    assert e.code() == grpc.StatusCode.PERMISSION_DENIED, e
    assert env.admin.app(name).body == before.body

    # a plain sync is within alice's rights
    r = env.alice.call("POST", f"{APPS}/{name}/sync", {})
    assert r.status == 200 and r.json()["operation"]["initiatedBy"]["username"] == "alice", r
    assert env.alice.call("DELETE", f"{APPS}/{name}/operation").status == 200

    r = env.bob.call("POST", f"{APPS}/{name}/sync", {"manifests": manifests})
    assert r.status == 200, r
    assert r.json()["operation"]["sync"]["manifests"] == manifests, r
    assert r.json()["operation"]["initiatedBy"]["username"] == "bob", r


AUTO_SYNC_REFUSALS = {
    "local-manifests": ({"manifests": [json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                                                   "metadata": {"name": "local"}})]},
                        r"local sync.*automat"),
    "other-revision": ({"revision": "some-branch"}, r"some-branch.*auto-sync"),
}


@pytest.mark.parametrize("case", list(AUTO_SYNC_REFUSALS))
def test_sync_overrides_refused_while_auto_sync_is_on(case, env):
    """Upstream (server/application/application.go Sync): with an automated sync policy, local
    manifests and a revision other than the target are refused (FailedPrecondition, 400) unless
    it is a dry run."""
    req, message = AUTO_SYNC_REFUSALS[case]
    name = uniq("autosync")
    env.admin.must_create(app_body(name, syncPolicy={"automated": {"prune": True}}))
    before = env.admin.app(name)
    assert_api_error(env.bob.call("POST", f"{APPS}/{name}/sync", req), 400, 9, message)
    assert env.admin.app(name).body == before.body
    r = env.bob.call("POST", f"{APPS}/{name}/sync", {**req, "dryRun": True})
    assert r.status == 200, r


# ---- existence oracle (SEC-13) -------------------------------------------------------------------

def oracle_calls(name, spec):
    return [
        ("GET", f"{APPS}/{name}", None),
        ("GET", f"{APPS}/{name}?project=default", None),
        ("GET", f"{APPS}/{name}?appNamespace=argocd", None),
        ("GET", f"{APPS}/{name}/resource-tree", None),
        ("GET", f"{APPS}/{name}/syncwindows", None),
        ("GET", f"{APPS}/{name}/events", None),
        ("GET", f"{APPS}/{name}/links", None),
        ("GET", f"{APPS}/{name}/managed-resources", None),
        ("GET", f"{APPS}/{name}/logs", None),
        ("GET", f"{APPS}/{name}/revisions/HEAD/metadata", None),
        ("GET", f"/api/v1/stream/applications/{name}/resource-tree", None),
        ("POST", f"{APPS}/{name}/sync", {}),
        ("POST", f"{APPS}/{name}/sync", {"manifests": ["{}"]}),
        ("POST", f"{APPS}/{name}/rollback", {"id": 1}),
        ("DELETE", f"{APPS}/{name}", None),
        ("DELETE", f"{APPS}/{name}/operation", None),
        ("PUT", f"{APPS}/{name}/spec", spec),
        ("PUT", f"{APPS}/{name}", {"metadata": {"name": name}, "spec": spec}),
        ("PATCH", f"{APPS}/{name}", {"patch": "{}", "patchType": "merge"}),
    ]


def test_missing_and_forbidden_applications_answer_alike(env, stub, app_pb):
    hidden = uniq("hidden")
    created = env.admin.must_create(app_body(hidden))
    before = env.admin.app(hidden)
    missing = uniq("hidden")  # a name of the same shape that does not exist
    spec = created["spec"]
    mismatches = []
    for (method, path, body), (_, missing_path, missing_body) in zip(oracle_calls(hidden, spec),
                                                                      oracle_calls(missing, spec)):
        a = env.alice.call(method, path, body)
        b = env.alice.call(method, missing_path, missing_body)
        body_a = a.body.replace(hidden.encode(), b"NAME")
        body_b = b.body.replace(missing.encode(), b"NAME")
        if (a.status, body_a) != (b.status, body_b) or a.status < 400:
            mismatches.append((method, path, (a.status, a.body[:200]), (b.status, b.body[:200])))
    assert not mismatches, mismatches
    assert env.admin.app(hidden).body == before.body  # nothing alice tried changed it

    # a fixed answer, not one that names the application
    r = env.alice.app(hidden)
    assert_api_error(r, 403, 7, "permission denied")
    assert hidden.encode() not in r.body, r

    # native gRPC
    pb, auth = app_pb, md(env.tokens["alice"])
    grpc_calls = [
        ("Get", lambda n: pb.app.ApplicationQuery(name=n)),
        ("ResourceTree", lambda n: pb.app.ResourcesQuery(applicationName=n)),
        ("GetApplicationSyncWindows", lambda n: pb.app.ApplicationSyncWindowsQuery(name=n)),
        ("ListResourceEvents", lambda n: pb.app.ApplicationResourceEventsQuery(name=n)),
        ("ListLinks", lambda n: pb.app.ListAppLinksRequest(name=n)),
        ("Sync", lambda n: pb.app.ApplicationSyncRequest(name=n)),
        ("Delete", lambda n: pb.app.ApplicationDeleteRequest(name=n)),
        ("TerminateOperation", lambda n: pb.app.OperationTerminateRequest(name=n)),
        ("Patch", lambda n: pb.app.ApplicationPatchRequest(name=n, patch="{}", patchType="merge")),
    ]
    for method, make in grpc_calls:
        fn = getattr(stub, method)
        ea = rpc_error(fn, make(hidden), metadata=auth, timeout=10)
        eb = rpc_error(fn, make(missing), metadata=auth, timeout=10)
        seen_a = (ea.code(), ea.details().replace(hidden, "NAME"))
        assert seen_a == (eb.code(), eb.details().replace(missing, "NAME")), (method, ea, eb)
        assert ea.code() == grpc.StatusCode.PERMISSION_DENIED, (method, ea)
    streams = [stub.WatchResourceTree(pb.app.ResourcesQuery(applicationName=n), metadata=auth, timeout=10)
               for n in (hidden, missing)]
    errs = []
    for call in streams:
        with pytest.raises(grpc.RpcError) as e:
            next(iter(call))
        errs.append((e.value.code(), e.value.details()))
    assert errs[0] == errs[1] and errs[0][0] == grpc.StatusCode.PERMISSION_DENIED, errs

    # gRPC-Web
    wa = grpc_web(env.server, "Get", pb.app.ApplicationQuery(name=hidden), env.tokens["alice"])
    wb = grpc_web(env.server, "Get", pb.app.ApplicationQuery(name=missing), env.tokens["alice"])
    assert (wa.status, wa.header_status, wa.header_message, wa.body) == \
        (wb.status, wb.header_status, wb.header_message, wb.body), (wa, wb)
    assert wa.header_status == "7", wa
    assert env.admin.app(hidden).body == before.body


def test_existence_oracle_timing(env):
    """SEC-13: a missing and a forbidden application take the same time (median within 5 ms)."""
    hidden = uniq("hidden")
    env.admin.must_create(app_body(hidden))
    missing = uniq("hidden")
    conn = http.client.HTTPConnection(env.server.address, env.server.port, timeout=10)
    auth = {"Authorization": f"Bearer {env.tokens['alice']}"}
    times = {hidden: [], missing: []}
    try:
        for i in range(2 * 41 + 4):
            name = (hidden, missing)[i % 2]
            start = time.perf_counter()
            conn.request("GET", f"{APPS}/{name}", headers=auth)
            resp = conn.getresponse()
            resp.read()
            elapsed = time.perf_counter() - start
            assert resp.status == 403
            if i >= 4:  # warm-up
                times[name].append(elapsed)
    finally:
        conn.close()
    diff = abs(statistics.median(times[hidden]) - statistics.median(times[missing]))
    print(f"\nTIMING oracle: median forbidden {statistics.median(times[hidden]) * 1000:.2f} ms, "
          f"missing {statistics.median(times[missing]) * 1000:.2f} ms")
    assert diff < 0.005, (diff, times)


def test_project_restrictions_are_enforced_and_nothing_is_stored(env, projects):
    ok = app_body(uniq("proj"), project="a", dest_namespace="team-a")
    created = env.admin.must_create(ok)
    assert created["spec"]["project"] == "a"
    cases = [
        (app_body(uniq("proj"), project="a", dest_namespace="kube-system"), 400, 3,
         r"destination .*kube-system.* do not match .*project 'a'"),
        (app_body(uniq("proj"), project="a", dest_namespace="team-a", server="https://prod.example.com"), 400, 3,
         r"https://prod\.example\.com.*project 'a'"),
        (app_body(uniq("proj"), project="a", dest_namespace="team-a", repo="https://gitlab.com/evil/repo.git"), 400, 3,
         r"repo https://gitlab\.com/evil/repo\.git is not permitted in project 'a'"),
    ]
    # SEC-22: an application may only live in a namespace its project lists
    other_ns = app_body(uniq("proj"), project="a", dest_namespace="team-a")
    other_ns["metadata"]["namespace"] = "apps-x"
    cases.append((other_ns, 403, 7, r'^app is not allowed in project "a", or the project does not exist$'))
    for body, status, code, message in cases:
        rev = env.admin.revision()
        assert_api_error(env.admin.create(body), status, code, message)
        assert env.admin.revision() == rev and env.admin.names(name=body["metadata"]["name"]) == [], body

    # a namespace the project permits but the server does not serve (upstream's words)
    not_served = app_body(uniq("proj"), project="a", dest_namespace="team-a")
    not_served["metadata"]["namespace"] = "apps-y"
    assert_api_error(env.admin.create(not_served), 403, 7, r"^namespace 'apps-y' is not permitted$")

    # a permitted application namespace
    in_ns = app_body(uniq("proj"), project="a", dest_namespace="team-a")
    in_ns["metadata"]["namespace"] = "apps-a"
    r = env.admin.create(in_ns)
    assert r.status == 200 and r.json()["metadata"]["namespace"] == "apps-a", r
    name = in_ns["metadata"]["name"]
    assert env.admin.app(name, "appNamespace=apps-a").status == 200
    assert env.admin.app(name).status == 404  # not in the server's namespace

    # an update that leaves what the project permits is refused and changes nothing
    before = env.admin.app(created["metadata"]["name"])
    moved = copy.deepcopy(before.json())
    moved["spec"]["destination"]["namespace"] = "kube-system"
    assert_api_error(env.admin.call("PUT", f"{APPS}/{created['metadata']['name']}", moved), 400, 3, r"kube-system")
    spec = copy.deepcopy(before.json()["spec"])
    spec["project"] = "nope-project"
    assert_api_error(env.admin.call("PUT", f"{APPS}/{created['metadata']['name']}/spec", spec), 400, 3,
                     r"nope-project")
    assert env.admin.app(created["metadata"]["name"]).body == before.body


def test_project_hint_does_not_reveal_existence(env, projects):
    """SEC-13 with a project in the request (upstream getAppEnforceRBAC): alice may get `a/*`.
    An application of project `b`, asked for as if in project `a`, must answer like a missing one
    (upstream: 404 for both), or alice learns that the name exists elsewhere."""
    in_b = uniq("in-b")
    env.admin.must_create(app_body(in_b, project="b"))
    missing = uniq("in-b")
    a = env.alice.app(in_b, "project=a")
    b = env.alice.app(missing, "project=a")
    seen_a = (a.status, a.body.replace(in_b.encode(), b"NAME"))
    assert seen_a == (b.status, b.body.replace(missing.encode(), b"NAME")), (a, b)
    assert a.status in (403, 404), a


def test_create_answers_alike_for_existing_and_missing_projects_without_rights(env, projects):
    """alice may not create applications: whether the project she names exists must not show."""
    name = uniq("probe")
    exists = env.alice.create(app_body(name, project="b"))
    absent = env.alice.create(app_body(name, project="no-such-project"))
    assert exists.status == 403, exists
    assert (absent.status, absent.json()["code"]) == (exists.status, exists.json()["code"]), (exists, absent)
    # The messages may only differ by the project name alice gave herself.
    assert absent.json()["message"].replace("no-such-project", "P") == exists.json()["message"].replace("b/", "P/"), (
        exists, absent)
    assert "does not exist" not in absent.json()["message"], absent


# ---- bad input ----------------------------------------------------------------------------------

def _with(body, path, value):
    body = copy.deepcopy(body)
    target = body
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value
    return body


BAD_CREATES = {
    # id: (body for a fresh valid name, what the error message must say)
    "uppercase-name": (lambda n: app_body("Upper-" + n), r"invalid application name \"Upper-.*lower case"),
    "underscore-name": (lambda n: app_body("a_b-" + n), r"invalid application name \"a_b-"),
    "254-char-name": (lambda n: app_body("a" * 254), r"invalid application name .*253 characters"),
    "empty-name": (lambda n: app_body(""), r"invalid application name"),
    "unknown-project": (lambda n: app_body(n, project="nope-" + n), r"project nope-\S+ .*(not exist|not found)"),
    "javascript-repo": (lambda n: app_body(n, repo="javascript:alert(1)"), r"repository URL.*javascript:alert"),
    "javascript-repo-mixed-case": (lambda n: app_body(n, repo="JavaScript:alert(document.domain)"),
                                   r"repository URL"),
    "file-repo": (lambda n: app_body(n, repo="file:///etc/passwd"), r"repository URL"),
    "javascript-repo-in-sources": (lambda n: _with(app_body(n), ("spec", "sources"),
                                                   [{"repoURL": REPO_URL}, {"repoURL": "javascript:alert(1)"}]),
                                   r"repository URL"),
    "javascript-link-annotation": (lambda n: app_body(n, annotations={
        "link.argocd.argoproj.io/x": "javascript:alert(1)"}), r"link\.argocd\.argoproj\.io/x"),
    "javascript-link-annotation-spaced": (lambda n: app_body(n, annotations={
        "link.argocd.argoproj.io/external-link": "  JAVASCRIPT:alert(1)"}),
        r"link\.argocd\.argoproj\.io/external-link"),
    "data-link-annotation": (lambda n: app_body(n, annotations={
        "link.argocd.argoproj.io/y": "data:text/html,<script>"}), r"link\.argocd\.argoproj\.io/y"),
    "project-is-a-number": (lambda n: _with(app_body(n), ("spec", "project"), 5), r"spec\.project"),
    "labels-are-a-list": (lambda n: _with(app_body(n), ("metadata", "labels"), ["a"]), r"metadata\.labels"),
    "destination-is-a-string": (lambda n: _with(app_body(n), ("spec", "destination"), "x"), r"spec\.destination"),
    "generation-is-a-string": (lambda n: _with(app_body(n), ("metadata", "generation"), "x"), r"metadata\.generation"),
    "no-source": (lambda n: {"metadata": {"name": n}, "spec": {"destination": {"server": IN_CLUSTER}}}, r"source"),
    "destination-server-and-name": (lambda n: _with(app_body(n), ("spec", "destination", "name"), "in-cluster"),
                                    r"both name and server"),
    "destination-unknown-cluster-name": (lambda n: _with(app_body(n), ("spec", "destination"),
                                                         {"name": "nope-cluster"}), r"nope-cluster"),
}


@pytest.mark.parametrize("case", list(BAD_CREATES))
def test_bad_create_is_refused_and_nothing_is_stored(case, env):
    make, message = BAD_CREATES[case]
    name = uniq("bad")
    body = make(name)
    before = env.admin.revision()
    err = assert_api_error(env.admin.create(body), 400, 3, message)
    assert err["error"] == err["message"], err
    assert env.admin.revision() == before, "a refused create changed the registry"
    candidate = body.get("metadata", {}).get("name", "") if isinstance(body.get("metadata"), dict) else ""
    if candidate:
        assert env.admin.names(name=candidate) == []


@pytest.mark.parametrize("raw, message", [
    (b'{"metadata": {"name": "x"', r"invalid JSON"),
    (b"{'metadata': 1}", r"invalid JSON"),
    (b"[1, 2]", r"(object|array|sequence)"),
    (b'"just a string"', r"(object|string)"),
    (b'{"metadata": {"name": "x"}} trailing', r"invalid JSON"),
], ids=["truncated", "single-quotes", "array", "string", "trailing-garbage"])
def test_malformed_json_body_is_refused(raw, message, env):
    before = env.admin.revision()
    assert_api_error(env.admin.call("POST", APPS, raw, content_type="application/json"), 400, 3, message)
    assert env.admin.revision() == before


BAD_PATCHES = {
    "patch-not-json": ({"patch": "{not json", "patchType": "merge"}, r"patch.*(JSON|json)"),
    "json-patch-not-a-list": ({"patch": '{"op": "add"}', "patchType": "json"}, r"JSON patch"),
    "json-patch-unknown-op": ({"patch": '[{"op": "frobnicate", "path": "/spec"}]', "patchType": "json"},
                              r"JSON patch"),
    "json-patch-missing-path": ({"patch": '[{"op": "replace", "path": "/spec/nope/x", "value": 1}]',
                                 "patchType": "json"}, r"JSON patch"),
    "json-patch-failed-test": ({"patch": '[{"op": "test", "path": "/spec/project", "value": "other"}]',
                                "patchType": "json"}, r"JSON patch"),
    "unknown-patch-type": ({"patch": "{}", "patchType": "strategic"}, r"strategic"),
    "patch-renames": ({"patch": '{"metadata": {"name": "renamed"}}', "patchType": "merge"}, r"name"),
    "patch-javascript-repo": ({"patch": '{"spec": {"source": {"repoURL": "javascript:alert(1)"}}}',
                               "patchType": "merge"}, r"repository URL"),
    "patch-javascript-link": ({"patch": '{"metadata": {"annotations": {"link.argocd.argoproj.io/a": "javascript:x"}}}',
                               "patchType": "merge"}, r"link\.argocd\.argoproj\.io/a"),
    "patch-wrong-type": ({"patch": '{"spec": {"project": 5}}', "patchType": "merge"}, r"spec\.project"),
    "patch-field-wrong-type": ({"patch": 5, "patchType": "merge"}, r"patch"),
}


@pytest.fixture(scope="module")
def patch_target(env):
    name = uniq("patch-target")
    env.admin.must_create(app_body(name))
    return name


@pytest.mark.parametrize("case", list(BAD_PATCHES))
def test_bad_patch_is_refused_and_nothing_changes(case, env, patch_target):
    body, message = BAD_PATCHES[case]
    before = env.admin.app(patch_target)
    rev = env.admin.revision()
    assert_api_error(env.admin.call("PATCH", f"{APPS}/{patch_target}", body), 400, 3, message)
    assert env.admin.app(patch_target).body == before.body
    assert env.admin.revision() == rev
    assert env.admin.names(name="renamed") == []


def test_bad_updates_are_refused_and_nothing_changes(env):
    name = uniq("badupd")
    app = env.admin.must_create(app_body(name))
    before = env.admin.app(name)
    rev = env.admin.revision()
    cases = [
        ("PUT", f"{APPS}/{name}", _with(app, ("metadata", "resourceVersion"), "abc"), 400, r"resourceVersion.*abc"),
        ("PUT", f"{APPS}/{name}", _with(app, ("metadata", "resourceVersion"), "-1"), 400, r"resourceVersion"),
        ("PUT", f"{APPS}/{name}/spec", _with(app["spec"], ("source", "repoURL"), "javascript:alert(1)"), 400,
         r"repository URL"),
        ("PUT", f"{APPS}/{name}/spec", _with(app["spec"], ("project",), "nope-project"), 400, r"nope-project"),
        ("PUT", f"{APPS}/{name}/spec", _with(app["spec"], ("destination",), 7), 400, r"destination"),
        ("PUT", f"{APPS}/{name}", _with(app, ("metadata", "annotations"),
                                        {"link.argocd.argoproj.io/z": "javascript:alert(1)"}), 400,
         r"link\.argocd\.argoproj\.io/z"),
        ("PUT", f"{APPS}/{name}", b'{"metadata": ', 400, r"invalid JSON"),
    ]
    for method, path, body, status, message in cases:
        r = env.admin.call(method, path, body, content_type="application/json")
        assert_api_error(r, status, 3, message)
    assert env.admin.app(name).body == before.body
    assert env.admin.revision() == rev


def test_body_above_the_limit_is_413_and_nothing_is_stored(env):
    """--max-body-bytes 262144: a body of exactly the limit is served, one byte more is 413."""
    at_limit_name, over_name = uniq("limit"), uniq("over")

    def padded(name, size):
        text = json.dumps(app_body(name))
        return (text + " " * (size - len(text))).encode()  # trailing blanks are valid JSON

    rev = env.admin.revision()
    r = env.admin.call("POST", APPS, padded(over_name, MAX_BODY + 1), content_type="application/json")
    assert r.status == 413, r
    err = r.json()
    assert {"error", "code", "message"} <= err.keys() and err["code"] == 8, err
    assert re.search(r"larger than 262144 bytes|too large", err["message"], re.I), err
    assert env.admin.revision() == rev and env.admin.names(name=over_name) == []
    r = env.admin.call("POST", APPS, padded(at_limit_name, MAX_BODY), content_type="application/json")
    assert r.status == 200, r
    # a big value inside the body counts the same
    body = app_body(over_name, annotations={"big": "x" * MAX_BODY})
    r = env.admin.create(body)
    assert r.status == 413, r
    assert env.admin.names(name=over_name) == []


# ---- durability ---------------------------------------------------------------------------------

WRITES = 1000
MAX_KILLS = 10
MIN_KILLS = 5
DURABILITY_BUDGET = 600.0


def test_acknowledged_creates_survive_kill_9(servers, config_dir, monkeypatch):
    """The release binary, SIGKILLed at random moments (0.5-3 s apart) while applications are
    created one by one, then restarted on the same data dir: every create that was answered 2xx
    is there afterwards, and List's resourceVersion never goes backwards."""
    if not os.path.isfile(TIPHYS_RELEASE_BIN):
        pytest.fail(f"release binary {TIPHYS_RELEASE_BIN} does not exist: run `cargo build --release`")
    monkeypatch.setattr(conftest, "TIPHYS_BIN", TIPHYS_RELEASE_BIN)
    # One caller creating as fast as it can: what the write rate limit exists to refuse.
    cfg = config_dir(cm={"tiphys.ratelimit.enabled": "false"})
    server = servers.start("--insecure", config=cfg)
    assert server.proc.args[0] == TIPHYS_RELEASE_BIN
    token = login_token(server, "admin", ADMIN_PW)
    rng = random.Random()
    acked, unacked = [], []  # names answered 2xx; names whose create got no answer
    max_acked_rv = 0
    last_list_rv = 0
    kills = 0
    start = time.monotonic()
    prefix = f"dur-{uuid.uuid4().hex[:8]}"
    seq = 0

    def list_all(srv):
        r = Api(srv, token).get(APPS + "?fields=metadata.resourceVersion,items.metadata.name", timeout=60)
        assert r.status == 200, r
        body = r.json()
        return rv_of(body), {i["metadata"]["name"] for i in body["items"] or []}

    while len(acked) < WRITES or kills < MIN_KILLS:
        assert time.monotonic() - start < DURABILITY_BUDGET, \
            f"durability loop over budget: {len(acked)} acknowledged, {kills} kills"
        proc = server.proc
        timer = None
        if kills < MAX_KILLS:
            timer = threading.Timer(rng.uniform(0.5, 3.0), proc.kill)  # SIGKILL to this PID only
            timer.start()
        conn = http.client.HTTPConnection(server.address, server.port, timeout=10)
        try:
            for _ in range(1_000_000):  # bounded; ends when the server dies or (without a kill) enough
                if timer is None and len(acked) >= WRITES:
                    break
                assert time.monotonic() - start < DURABILITY_BUDGET, "durability loop over budget"
                seq += 1
                name = f"{prefix}-{seq}"
                body = json.dumps(app_body(name)).encode()
                try:
                    conn.request("POST", APPS, body=body, headers={
                        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
                    resp = conn.getresponse()
                    data = resp.read()
                except (OSError, http.client.HTTPException):
                    unacked.append(name)
                    break
                assert resp.status == 200, (resp.status, data[:300])
                acked.append(name)
                max_acked_rv = max(max_acked_rv, rv_of(json.loads(data)))
            else:
                pytest.fail("write loop bound reached without the server dying")
        finally:
            conn.close()
            if timer is not None:
                timer.join(timeout=10)
        if timer is None:
            break
        proc.wait(timeout=10)
        assert proc.returncode == -9, f"the server exited with {proc.returncode}, not by SIGKILL"
        kills += 1
        server = servers.restart(server, kill=True)  # already dead: restarts on the same data dir
        list_rv, names = list_all(server)
        lost = [n for n in acked if n not in names]
        assert not lost, f"after kill {kills}: {len(lost)} acknowledged creates lost, e.g. {lost[:5]}"
        assert list_rv >= max_acked_rv and list_rv >= last_list_rv, (list_rv, max_acked_rv, last_list_rv)
        last_list_rv = list_rv
    list_rv, names = list_all(server)
    lost = [n for n in acked if n not in names]
    assert not lost, f"{len(lost)} acknowledged creates lost, e.g. {lost[:5]}"
    assert list_rv >= last_list_rv and list_rv >= max_acked_rv
    assert len(acked) >= WRITES and kills >= MIN_KILLS
    # nothing else appeared: every name is one we sent (acknowledged, or in flight at a kill)
    assert names <= set(acked) | set(unacked), names - set(acked) - set(unacked)
    print(f"\nDURABILITY: {len(acked)} acknowledged creates, {kills} kills, {len(unacked)} in flight at a kill "
          f"({sum(n in names for n in unacked)} of them stored), {time.monotonic() - start:.1f} s")


def test_what_only_a_controller_reports_is_empty_not_an_error(env):
    """tiphys runs no controller: the resource tree and the managed resources of an application
    are the empty answers upstream gives an application without resources (omitempty lists:
    `{}`), not 501, and a caller who may not see the application is refused as for any read."""
    name = uniq("ctl")
    env.admin.must_create(app_body(name))
    for sub in ("resource-tree", "managed-resources"):
        r = env.admin.call("GET", f"{APPS}/{name}/{sub}")
        assert (r.status, r.json()) == (200, {}), (sub, r)
        assert_api_error(env.alice.call("GET", f"{APPS}/{name}/{sub}"), 403, 7, "permission denied")


def test_a_destination_server_must_be_a_registered_cluster(env):
    """As upstream's ValidatePermissions: an application whose destination server is no cluster
    tiphys knows is refused on create and on update (400, the cluster named), and accepted once
    the cluster is registered."""
    name = uniq("dest")
    server = f"https://{name}.example:6443"
    r = env.admin.call("POST", APPS, app_body(name, server=server))
    assert_api_error(r, 400, 3, f"InvalidSpecError: cluster '{server}' has not been configured")
    assert env.admin.app(name).status == 404
    env.admin.must_create(app_body(name))
    r = env.admin.call("PUT", f"{APPS}/{name}", app_body(name, server=server))
    assert_api_error(r, 400, 3, "has not been configured")
    r = env.admin.call("POST", "/api/v1/clusters", {"server": server, "name": name})
    assert r.status == 200, r
    r = env.admin.call("PUT", f"{APPS}/{name}", app_body(name, server=server))
    assert r.status == 200 and r.json()["spec"]["destination"]["server"] == server, r
