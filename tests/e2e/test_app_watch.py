"""ApplicationService/Watch end to end over SSE (`Accept: text/event-stream`), NDJSON and native
gRPC (shared/reference/argocd-api.md §1.6): the initial ADDED snapshot, live events, watching from
a List's resourceVersion, resuming without gap or duplicate, a resourceVersion the server no longer
remembers (after a restart: history is kept in memory only), RBAC decided per event, `fields=`
projections, and the stream ending when the caller's session is revoked (logout, API key deleted)
within the server's 10 s recheck.
"""

import json
import re
import time
from types import SimpleNamespace

import grpc
import pytest

from appkit import (APPS, Api, GrpcWatch, RestWatch, app_body, grpc_channel, open_watch, rv_of, uniq,
                    write_rbac)
from authkit import ADMIN_PW, ALICE_PW, BOB_PW, assert_api_error, login_token, request, wait_until

TRANSPORTS = ["sse", "ndjson", "grpc"]
RECHECK = 10.0  # the server re-checks a quiet stream's session this often
SLACK = 1.5

POLICY = ["p, alice, applications, get, default/visible-*, allow",
          "p, alice, applications, get, a/*, allow"]


@pytest.fixture(scope="module")
def env(module_servers, module_config):
    cfg = module_config()
    write_rbac(cfg, POLICY)
    server = module_servers.start("--insecure", config=cfg)
    tokens = {"admin": login_token(server, "admin", ADMIN_PW), "alice": login_token(server, "alice", ALICE_PW),
              "bob": login_token(server, "bob", BOB_PW)}
    return SimpleNamespace(server=server, cfg=cfg, tokens=tokens, admin=Api(server, tokens["admin"]))


@pytest.fixture(scope="module")
def projects(env):
    """AppProjects `a` and `b`, created through ProjectService over REST."""
    for name in ("a", "b"):
        r = env.admin.call("POST", "/api/v1/projects", {"project": {"metadata": {"name": name}, "spec": {
            "sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}]}}})
        assert r.status == 200, f"POST /api/v1/projects failed (ProjectService needed by this test): {r}"
    return "a", "b"


@pytest.fixture(scope="module")
def stub(env, app_pb):
    with grpc_channel(env.server) as ch:
        yield app_pb.grpc.ApplicationServiceStub(ch)


def patch_labels(api, name, labels):
    r = api.call("PATCH", f"{APPS}/{name}", {"patch": json.dumps({"metadata": {"labels": labels}}),
                                             "patchType": "merge"})
    assert r.status == 200, r
    return r.json()


def delete(api, name):
    """Deletes `name`; returns the registry revision right after (the deletion's revision)."""
    r = api.delete(name)
    assert r.status == 200, r
    return api.revision()


def brief(events):
    return [e[:3] for e in events]


# ---- snapshot and live events -------------------------------------------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
def test_snapshot_then_live_events(transport, env, stub, app_pb, watches):
    run = uniq("run")
    a, b, c = uniq("snap-a"), uniq("snap-b"), uniq("snap-c")
    ca = env.admin.must_create(app_body(a, labels={"run": run}))
    cb = env.admin.must_create(app_body(b, labels={"run": run}))
    w = watches.add(open_watch(transport, env.server, env.tokens["admin"], stub, app_pb, selector=f"run={run}"))
    snapshot = w.events(2)
    assert sorted(brief(snapshot)) == sorted([("ADDED", a, rv_of(ca)), ("ADDED", b, rv_of(cb))]), snapshot

    cc = env.admin.must_create(app_body(c, labels={"run": run}))
    added = w.event()
    assert added[:3] == ("ADDED", c, rv_of(cc)), added
    if transport != "grpc":
        assert added[3] == cc  # the whole object, as Create answered it
    ma = patch_labels(env.admin, a, {"x": "1"})
    assert w.event()[:3] == ("MODIFIED", a, rv_of(ma))
    delete(env.admin, b)
    gone = w.event()
    assert gone[:2] == ("DELETED", b), gone
    # a change outside the selector is not sent: the next event is the one after it
    env.admin.must_create(app_body(uniq("snap-other"), labels={"run": "other"}))
    mc = patch_labels(env.admin, c, {"y": "2"})
    assert w.event()[:3] == ("MODIFIED", c, rv_of(mc))
    assert not w.violations, w.violations

    if transport == "sse":
        assert w.headers["content-type"] == "text/event-stream", w.headers
        # a comment first (so proxies pass the headers on at once), then the frames
        assert w.raw[0] == b":\n", w.raw[:3]
        assert w.raw[1].startswith(b'data: {"result":{"type":"ADDED","application":{"metadata":{'), w.raw[:3]
        assert w.raw[1].endswith(b"}} \n") and w.raw[2] == b"\n", w.raw[:3]
    elif transport == "ndjson":
        assert w.headers["content-type"] == "application/json", w.headers
        assert w.raw[0].startswith(b'{"result":{"type":"ADDED","application":{"metadata":{'), w.raw[:1]


def test_unauthenticated_watch_is_refused(env, stub, app_pb):
    w = RestWatch(env.server, None, {}, sse=True)
    assert w.status == 401 and json.loads(w.body)["code"] == 16, (w.status, w.body)
    w = RestWatch(env.server, env.tokens["admin"][:-4] + "AAAA", {}, sse=False)
    assert w.status == 401, (w.status, w.body)
    g = GrpcWatch(stub, app_pb, None, timeout=10)
    kind, err = g.next()
    assert kind == "error" and err.code() == grpc.StatusCode.UNAUTHENTICATED, (kind, err)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_watch_from_a_list_version_sends_only_later_events(transport, env, stub, app_pb, watches):
    run = uniq("run")
    a, b = uniq("from-a"), uniq("from-b")
    env.admin.must_create(app_body(a, labels={"run": run}))
    listed = env.admin.list(selector=f"run={run}")
    cb = env.admin.must_create(app_body(b, labels={"run": run}))
    w = watches.add(open_watch(transport, env.server, env.tokens["admin"], stub, app_pb, selector=f"run={run}",
                               resourceVersion=listed["metadata"]["resourceVersion"]))
    assert w.event()[:3] == ("ADDED", b, rv_of(cb))  # not a snapshot of `a`
    ma = patch_labels(env.admin, a, {"z": "1"})
    assert w.event()[:3] == ("MODIFIED", a, rv_of(ma))
    # with a name, the named application comes first as ADDED even with a resourceVersion (§1.6)
    n = watches.add(open_watch(transport, env.server, env.tokens["admin"], stub, app_pb, name=a,
                               resourceVersion=str(rv_of(ma))))
    first = n.event()
    assert first[:3] == ("ADDED", a, rv_of(ma)), first


# ---- resume -------------------------------------------------------------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
def test_resume_gets_exactly_the_missed_events(transport, env, stub, app_pb, watches):
    run = uniq("run")
    x = uniq("resume-x")
    env.admin.must_create(app_body(x, labels={"run": run}))
    w1 = watches.add(open_watch(transport, env.server, env.tokens["admin"], stub, app_pb, selector=f"run={run}"))
    assert w1.event()[:2] == ("ADDED", x)
    mx = patch_labels(env.admin, x, {"seen": "1"})
    last = w1.event()
    assert last[:3] == ("MODIFIED", x, rv_of(mx))
    w1.close()

    # five changes while disconnected
    y, z = uniq("resume-y"), uniq("resume-z")
    missed = []
    missed.append(("ADDED", y, rv_of(env.admin.must_create(app_body(y, labels={"run": run})))))
    missed.append(("MODIFIED", y, rv_of(patch_labels(env.admin, y, {"n": "1"}))))
    missed.append(("DELETED", y, delete(env.admin, y)))
    missed.append(("MODIFIED", x, rv_of(patch_labels(env.admin, x, {"n": "2"}))))
    missed.append(("ADDED", z, rv_of(env.admin.must_create(app_body(z, labels={"run": run})))))

    w2 = watches.add(open_watch(transport, env.server, env.tokens["admin"], stub, app_pb, selector=f"run={run}",
                                resourceVersion=str(last[2])))
    got = w2.events(5)
    assert [e[:2] for e in got] == [m[:2] for m in missed], (brief(got), missed)
    assert [e[2] for e in got if e[0] != "DELETED"] == [m[2] for m in missed if m[0] != "DELETED"], \
        (brief(got), missed)
    # nothing else was pending: the next event is a new change
    mz = patch_labels(env.admin, z, {"after": "1"})
    assert w2.event()[:3] == ("MODIFIED", z, rv_of(mz))
    assert not w2.violations, w2.violations


def test_deleted_event_carries_the_deletion_resource_version(env, watches):
    """A DELETED event's object has the resourceVersion of the deletion (as Kubernetes sends it),
    so that a client resuming from the last resourceVersion it saw does not get it again."""
    run = uniq("run")
    q = uniq("del-q")
    created = env.admin.must_create(app_body(q, labels={"run": run}))
    w = watches.add(open_watch("sse", env.server, env.tokens["admin"], selector=f"run={run}"))
    assert w.event()[:2] == ("ADDED", q)
    deleted_at = delete(env.admin, q)
    gone = w.event()
    assert gone[:2] == ("DELETED", q), gone
    assert gone[2] == deleted_at, (f"DELETED event carries resourceVersion {gone[2]} (the creation's was "
                                   f"{rv_of(created)}), the deletion's is {deleted_at}")


def test_resume_after_a_deleted_event_does_not_repeat_it(env, watches):
    run = uniq("run")
    q, r = uniq("del-q"), uniq("del-r")
    w = watches.add(open_watch("ndjson", env.server, env.tokens["admin"], selector=f"run={run}"))
    env.admin.must_create(app_body(q, labels={"run": run}))
    assert w.event()[:2] == ("ADDED", q)
    delete(env.admin, q)
    last = w.event()
    assert last[:2] == ("DELETED", q)
    w.close()
    cr = env.admin.must_create(app_body(r, labels={"run": run}))
    w2 = watches.add(open_watch("ndjson", env.server, env.tokens["admin"], selector=f"run={run}",
                                resourceVersion=str(last[2])))
    first = w2.event()
    assert first[:3] == ("ADDED", r, rv_of(cr)), f"resuming from the DELETED event's resourceVersion gave {first[:3]}"


def test_old_resource_version_after_a_restart_is_refused_clearly(servers, config_dir, app_pb, watches):
    """History is in memory: after a restart a resourceVersion older than the current one cannot
    be resumed from; the answer says to list again."""
    cfg = config_dir()
    server = servers.start("--insecure", config=cfg)
    token = login_token(server, "admin", ADMIN_PW)
    api = Api(server, token)
    run = uniq("run")
    for _ in range(2):
        api.must_create(app_body(uniq("old"), labels={"run": run}))
    current = api.revision()
    assert current >= 2
    server = servers.restart(server)
    api = Api(server, token)
    assert api.revision() == current

    for sse in (True, False):
        w = RestWatch(server, token, {"resourceVersion": current - 1, "selector": f"run={run}"}, sse=sse)
        assert w.status == 409, (w.status, w.body)
        err = w.json()
        assert err["code"] == 10 and err["error"] == err["message"], err
        assert f"resourceVersion {current - 1} is too old" in err["message"], err
        assert "list again" in err["message"], err
    with grpc_channel(server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        g = GrpcWatch(stub, app_pb, token, timeout=10, resourceVersion=str(current - 1))
        kind, e = g.next()
        assert kind == "error" and e.code() == grpc.StatusCode.ABORTED and "list again" in e.details(), (kind, e)

        # the current version itself is fine: later events only
        w = watches.add(open_watch("grpc", server, token, stub, app_pb, selector=f"run={run}",
                                   resourceVersion=str(current)))
        name = uniq("old-new")
        created = api.must_create(app_body(name, labels={"run": run}))
        assert w.event()[:3] == ("ADDED", name, rv_of(created))
        w.close()

    # a version from the future, or no number at all
    w = RestWatch(server, token, {"resourceVersion": current + 1000}, sse=True)
    assert w.status == 400 and "list again" in w.json()["message"], (w.status, w.body)
    w = RestWatch(server, token, {"resourceVersion": "abc"}, sse=True)
    assert w.status == 400 and w.json()["code"] == 3 and "resourceVersion" in w.json()["message"], (w.status, w.body)


# ---- RBAC ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
def test_events_are_filtered_per_application_by_rbac(transport, env, stub, app_pb, watches):
    """alice may only get `default/visible-*`: she gets neither the snapshot nor the events of
    other applications."""
    run = uniq("run")
    hidden, visible = uniq("hidden"), "visible-" + uniq("rbac")
    env.admin.must_create(app_body(hidden, labels={"run": run}))
    cv = env.admin.must_create(app_body(visible, labels={"run": run}))
    w = watches.add(open_watch(transport, env.server, env.tokens["alice"], stub, app_pb, selector=f"run={run}"))
    assert w.event()[:3] == ("ADDED", visible, rv_of(cv))
    hidden2, visible2 = uniq("hidden"), "visible-" + uniq("rbac")
    env.admin.must_create(app_body(hidden2, labels={"run": run}))
    patch_labels(env.admin, hidden, {"a": "1"})
    delete(env.admin, hidden)
    cv2 = env.admin.must_create(app_body(visible2, labels={"run": run}))
    assert w.event()[:3] == ("ADDED", visible2, rv_of(cv2))  # nothing of hidden/hidden2 before it
    mv = patch_labels(env.admin, visible, {"b": "2"})
    assert w.event()[:3] == ("MODIFIED", visible, rv_of(mv))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_events_follow_project_rbac_and_the_projects_filter(transport, env, projects, stub, app_pb, watches):
    """alice may get the applications of project `a` only; admin's watch with `projects=a` gets
    only those too."""
    run = uniq("run")
    in_b = uniq("proj-b")
    env.admin.must_create(app_body(in_b, labels={"run": run}, project="b"))
    alice = watches.add(open_watch(transport, env.server, env.tokens["alice"], stub, app_pb, selector=f"run={run}"))
    admin = watches.add(open_watch(transport, env.server, env.tokens["admin"], stub, app_pb, selector=f"run={run}",
                                   projects=["a"]))
    in_a = uniq("proj-a")
    ca = env.admin.must_create(app_body(in_a, labels={"run": run}, project="a"))
    for w in (alice, admin):
        assert w.event()[:3] == ("ADDED", in_a, rv_of(ca))  # neither the snapshot of in_b nor anything else
    patch_labels(env.admin, in_b, {"x": "1"})
    delete(env.admin, in_b)
    ma = patch_labels(env.admin, in_a, {"x": "1"})
    for w in (alice, admin):
        assert w.event()[:3] == ("MODIFIED", in_a, rv_of(ma))
    # moving an application into project b hides its later events from alice (RBAC on the new object)
    r = env.admin.call("PATCH", f"{APPS}/{in_a}", {"patchType": "merge", "patch": json.dumps(
        {"spec": {"project": "b"}})})
    assert r.status == 200, r
    other = uniq("proj-a")
    co = env.admin.must_create(app_body(other, labels={"run": run}, project="a"))
    got = alice.event()
    assert got[:3] == ("ADDED", other, rv_of(co)), got


def test_policy_change_applies_to_an_open_watch(servers, config_dir, watches):
    cfg = config_dir()
    policy = ["p, alice, applications, get, default/visible-*, allow",
              "p, alice, applications, get, default/extra-*, allow"]
    write_rbac(cfg, policy)
    server = servers.start("--insecure", config=cfg)
    admin = Api(server, login_token(server, "admin", ADMIN_PW))
    alice_token = login_token(server, "alice", ALICE_PW)
    run = uniq("run")
    extra, visible = "extra-" + uniq("pol"), "visible-" + uniq("pol")
    admin.must_create(app_body(extra, labels={"run": run}))
    admin.must_create(app_body(visible, labels={"run": run}))
    w = watches.add(open_watch("sse", server, alice_token, selector=f"run={run}"))
    assert sorted(e[1] for e in w.events(2)) == sorted([extra, visible])

    write_rbac(cfg, policy[:1])
    can_i = f"/api/v1/account/can-i/applications/get/default/{extra}"
    wait_until(lambda: request(server, "GET", can_i, headers={"Authorization": f"Bearer {alice_token}"}).json()
               == {"value": "no"}, 3.0, what="extra-* no longer allowed")
    patch_labels(admin, extra, {"a": "1"})
    mv = patch_labels(admin, visible, {"a": "1"})
    assert w.event()[:3] == ("MODIFIED", visible, rv_of(mv))


# ---- fields= ------------------------------------------------------------------------------------

def test_stream_fields_projection_and_identical_events_dropped(env, watches):
    run = uniq("run")
    a, b = uniq("proj-a"), uniq("proj-b")
    env.admin.must_create(app_body(a, labels={"run": run}))
    w = watches.add(RestWatch(env.server, env.tokens["admin"], {
        "selector": f"run={run}", "fields": "result.type,result.application.metadata.name,"
                                            "result.application.spec.destination"}, sse=True))
    assert w.status == 200, (w.status, w.body)
    kind, first = w.next()
    assert (kind, first) == ("result", {"type": "ADDED", "application": {"metadata": {"name": a}, "spec": {
        "destination": {"server": "https://kubernetes.default.svc", "namespace": "default"}}}}), first
    r = env.admin.call("PATCH", f"{APPS}/{a}", {"patchType": "merge", "patch": json.dumps(
        {"spec": {"destination": {"namespace": "moved"}}})})
    assert r.status == 200, r
    kind, second = w.next()
    assert second == {"type": "MODIFIED", "application": {"metadata": {"name": a}, "spec": {
        "destination": {"server": "https://kubernetes.default.svc", "namespace": "moved"}}}}, second
    # a change the projection does not show gives the same MODIFIED frame: not sent again
    # (upstream drops an event identical to the last one sent for that application)
    patch_labels(env.admin, a, {"invisible": "1"})
    env.admin.must_create(app_body(b, labels={"run": run}))
    kind, third = w.next()
    assert (kind, third["type"], third["application"]["metadata"]["name"]) == ("result", "ADDED", b), third
    assert not w.violations, w.violations


# ---- session end --------------------------------------------------------------------------------

def test_watches_end_when_the_session_is_revoked(env, stub, app_pb, watches):
    """Logout (DELETE /api/v1/session) and deleting an API key end open watches with
    UNAUTHENTICATED: a quiet one within the 10 s recheck, a busy one at its next event."""
    run = uniq("run")
    env.admin.must_create(app_body("visible-" + uniq("sess"), labels={"run": run}))
    login = login_token(env.server, "alice", ALICE_PW)
    key_id = uniq("watch-key")
    r = request(env.server, "POST", "/api/v1/account/alice/token", {"id": key_id},
                headers={"Authorization": f"Bearer {env.tokens['admin']}"})
    assert r.status == 200, r
    api_key = r.json()["token"]
    busy_login = login_token(env.server, "alice", ALICE_PW)

    quiet = {
        "sse/logout": watches.add(open_watch("sse", env.server, login, selector=f"run={run}")),
        "grpc/logout": watches.add(open_watch("grpc", env.server, login, stub, app_pb, selector=f"run={run}")),
        "ndjson/api-key": watches.add(open_watch("ndjson", env.server, api_key, selector=f"run={run}")),
    }
    busy = watches.add(open_watch("sse", env.server, busy_login, selector=f"run={run}"))
    for w in (*quiet.values(), busy):
        assert w.event()[0] == "ADDED"  # each stream is live and authorized

    # quiet streams: no application changes at all from here until they end
    r = request(env.server, "DELETE", "/api/v1/session", headers={"Authorization": f"Bearer {login}"})
    assert r.status == 200, r
    r = request(env.server, "DELETE", f"/api/v1/account/alice/token/{key_id}",
                headers={"Authorization": f"Bearer {env.tokens['admin']}"})
    assert r.status == 200, r
    revoked = time.monotonic()
    for what, w in quiet.items():
        left = RECHECK + SLACK - (time.monotonic() - revoked)
        frames = w.until_end(timeout=max(left, 0.1))
        kind, err = frames[-1]
        assert all(k != "result" for k, _ in frames), (what, frames)
        if what.startswith("grpc"):
            assert kind == "error" and err.code() == grpc.StatusCode.UNAUTHENTICATED, (what, frames)
            assert "revoked" in err.details(), (what, err.details())
        else:
            assert kind == "error" and err["grpc_code"] == 16 and err["http_code"] == 401, (what, frames)
            assert err["http_status"] == "Unauthorized", (what, err)
            assert re.search(r"revoked|no API key", err["message"]), (what, err)
        print(f"\nTIMING {what}: stream ended {time.monotonic() - revoked:.2f} s after the revocation")
    assert busy.frames.empty(), busy.frames.queue  # a valid session's stream stays open

    # a stream with events is cut at the next event after the logout, without waiting
    r = request(env.server, "DELETE", "/api/v1/session", headers={"Authorization": f"Bearer {busy_login}"})
    assert r.status == 200, r
    busy_revoked = time.monotonic()
    env.admin.must_create(app_body("visible-" + uniq("sess"), labels={"run": run}))
    frames = busy.until_end(timeout=3.0)
    busy_elapsed = time.monotonic() - busy_revoked
    kind, err = frames[-1]
    assert kind == "error" and err["grpc_code"] == 16 and err["http_code"] == 401, frames
    assert all(k != "result" for k, _ in frames), f"an event was sent after the logout: {frames}"
    assert busy_elapsed < 2.0, busy_elapsed

    # and the tokens open nothing any more
    for token in (login, api_key):
        w = RestWatch(env.server, token, {}, sse=True)
        assert w.status == 401, (w.status, w.body)
    assert_api_error(Api(env.server, login).get(APPS), 401, 16)
