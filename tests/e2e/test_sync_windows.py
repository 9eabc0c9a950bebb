"""AppProject sync windows end to end, over REST (and gRPC for the refused sync): which windows an
application is assigned and which are active now (GET /api/v1/applications/{name}/syncwindows),
the project's active windows (GET /api/v1/projects/{name}/syncwindows), a manual sync refused by
an active deny window (PermissionDenied, naming the window) or allowed by its `manualSync`, an
inactive allow window that keeps a manual sync out, and bad windows refused at project create.

Windows that must be inactive are scheduled twelve hours from now (UTC) for one minute, so the
tests do not depend on the time of day they run at.
"""

import datetime
from types import SimpleNamespace

import grpc
import pytest

from appkit import APPS, Api, app_body, grpc_channel, md, rpc_error, uniq
from authkit import ADMIN_PW, assert_api_error, login_token

PROJECTS = "/api/v1/projects"
BLOCKED = r"cannot sync: blocked by sync window"


@pytest.fixture(scope="module")
def env(module_servers, module_config):
    server = module_servers.start("--insecure", config=module_config())
    token = login_token(server, "admin", ADMIN_PW)
    return SimpleNamespace(server=server, token=token, admin=Api(server, token))


def far_schedule():
    """A cron schedule that fires twelve hours from now (UTC): a short window on it is inactive."""
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=12)
    return f"{later.minute} {later.hour} * * *"


def window(kind, schedule, duration, **extra):
    return {"kind": kind, "schedule": schedule, "duration": duration, **extra}


def make_project(env, windows):
    """A project open to every source and destination, with `windows`; returns its name."""
    name = uniq("win")
    project = {"metadata": {"name": name}, "spec": {
        "sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}], "syncWindows": windows}}
    r = env.admin.call("POST", PROJECTS, {"project": project})
    assert r.status == 200, r
    return name


def make_app(env, project, name=None, **kw):
    name = name or uniq("win-app")
    env.admin.must_create(app_body(name, project=project, **kw))
    return name


def app_windows(env, name):
    r = env.admin.call("GET", f"{APPS}/{name}/syncwindows")
    assert r.status == 200, r
    return r.json()


def view(w):
    """A window as the application's syncwindows answer shows it."""
    return {"kind": w["kind"], "schedule": w["schedule"], "duration": w["duration"],
            "manualSync": w.get("manualSync", False)}


def test_an_active_deny_window_blocks_a_manual_sync(env, app_pb):
    deny = window("deny", "* * * * *", "1h", applications=["blocked-*"])
    project = make_project(env, [deny])
    blocked = make_app(env, project, name=uniq("blocked"))

    answer = app_windows(env, blocked)
    assert answer == {"activeWindows": [view(deny)], "assignedWindows": [view(deny)], "canSync": False}, answer

    r = env.admin.call("GET", f"{PROJECTS}/{project}/syncwindows")
    assert r.status == 200 and r.json() == {"windows": [deny]}, r

    before = env.admin.must_get(blocked)
    err = assert_api_error(env.admin.call("POST", f"{APPS}/{blocked}/sync", {"revision": "HEAD"}), 403, 7, BLOCKED)
    assert '"* * * * *"' in err["message"] and "1h" in err["message"] and "deny" in err["message"], err
    with grpc_channel(env.server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        e = rpc_error(stub.Sync, app_pb.app.ApplicationSyncRequest(name=blocked), metadata=md(env.token),
                      timeout=10)
        assert e.code() == grpc.StatusCode.PERMISSION_DENIED and "blocked by sync window" in e.details(), e
    assert env.admin.must_get(blocked) == before, "a refused sync must record nothing"

    # An application the window does not select syncs as usual.
    free = make_app(env, project, name=uniq("free"))
    assert app_windows(env, free) == {"canSync": True}
    r = env.admin.call("POST", f"{APPS}/{free}/sync", {"revision": "HEAD"})
    assert r.status == 200 and "operation" in r.json(), r


def test_manual_sync_is_allowed_through_a_deny_window_that_says_so(env):
    deny = window("deny", "* * * * *", "1h", namespaces=["frozen"], manualSync=True)
    project = make_project(env, [deny])
    name = make_app(env, project, dest_namespace="frozen")
    answer = app_windows(env, name)
    assert answer == {"activeWindows": [view(deny)], "assignedWindows": [view(deny)], "canSync": True}, answer
    r = env.admin.call("POST", f"{APPS}/{name}/sync", {"revision": "HEAD"})
    assert r.status == 200 and r.json()["operation"]["sync"]["revision"] == "HEAD", r


def test_a_window_that_is_not_active_is_assigned_only(env):
    later = window("deny", far_schedule(), "1m", clusters=["https://kubernetes.default.svc"])
    project = make_project(env, [later])
    name = make_app(env, project)
    answer = app_windows(env, name)
    assert answer == {"assignedWindows": [view(later)], "canSync": True}, answer
    r = env.admin.call("GET", f"{PROJECTS}/{project}/syncwindows")
    assert r.status == 200 and r.json() == {}, r
    r = env.admin.call("POST", f"{APPS}/{name}/sync", {"revision": "HEAD"})
    assert r.status == 200, r


def test_an_inactive_allow_window_keeps_a_manual_sync_out(env):
    allow = window("allow", far_schedule(), "1m", applications=["*"], andOperator=True, namespaces=["prod"])
    project = make_project(env, [allow])
    in_prod = make_app(env, project, dest_namespace="prod")
    assert app_windows(env, in_prod) == {"assignedWindows": [view(allow)], "canSync": False}
    err = assert_api_error(env.admin.call("POST", f"{APPS}/{in_prod}/sync", {}), 403, 7, BLOCKED)
    assert "allow" in err["message"] and "not active" in err["message"], err
    # andOperator: the namespace must match too.
    elsewhere = make_app(env, project, dest_namespace="dev")
    assert app_windows(env, elsewhere) == {"canSync": True}


@pytest.mark.parametrize(("bad", "message"), [
    (window("deny", "61 * * * *", "1h"), r'sync window 1: schedule "61 \* \* \* \*".*minute field "61": value must be in range 0\.\.=59; found 61'),
    (window("deny", "* * * *", "1h"), r"sync window 1: schedule .*expected 5 fields"),
    (window("deny", "* * * * *", "1 hour"), r'sync window 1: invalid duration "1 hour"'),
    (window("later", "* * * * *", "1h"), r'sync window 1: kind must be allow or deny, not "later"'),
    (window("deny", "* * * * *", "1h", timeZone="Mars/Base"), r'sync window 1: time zone "Mars/Base" is unknown'),
])
def test_a_bad_window_is_refused_at_project_create(env, bad, message):
    name = uniq("badwin")
    project = {"metadata": {"name": name}, "spec": {
        "sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}],
        "syncWindows": [{**bad, "applications": ["*"]}]}}
    assert_api_error(env.admin.call("POST", PROJECTS, {"project": project}), 400, 3, message)
    assert env.admin.call("GET", f"{PROJECTS}/{name}").status == 404


def test_a_window_in_another_time_zone_is_evaluated_there(env):
    # A daily window written in Tokyo's wall time (UTC+9) that opened a minute ago is active; read
    # as UTC it would open nine hours away.
    tokyo = datetime.timezone(datetime.timedelta(hours=9))
    start = datetime.datetime.now(tokyo) - datetime.timedelta(minutes=1)
    active = window("deny", f"{start.minute} {start.hour} * * *", "1h", timeZone="Asia/Tokyo",
                    applications=["*"])
    project = make_project(env, [active])
    name = make_app(env, project)
    answer = app_windows(env, name)
    assert answer["activeWindows"] == [view(active)] and answer["canSync"] is False, answer
