"""Resource actions (issue 38, item 2): tiphys --kube --redis beside upstream argocd-server on the
installation of controlplane.py, an application synced by the real controller (test_resource_tree's
ConfigMaps, Service, Secret and Deployment), and ListResourceActions, RunResourceAction and
RunResourceActionV2 asked of it over REST, gRPC and gRPC-Web: the lists compared with argocd-server's
(built-in actions of a Deployment, running and paused; custom Lua actions of argocd-cm), restart,
pause and resume seen in the API server, a custom action with a parameter, a change of argocd-cm
taken at once, a looping script and a syntax error refused clearly, RBAC (`action/<group>/<kind>/
<action>`) decided alike by both servers with each tiphys denial audited once, a resource not in
the tree refused as argocd-server refuses it, and an unknown action named.

Runs under tools/upstream/isolated (see controlplane.py); .ci/test-all runs it there.
"""

import json
import time
import urllib.parse
from datetime import datetime, timezone

import grpc
import pytest

from appkit import APPS, grpc_channel, grpc_web, md, rpc_error
from test_kube_backend import NS, upstream_call
from test_live_resources import both, decide, denials, kube, local_accounts, ours_call, same_error  # noqa: F401 (kube: fixture)
# The application synced by the real controller, on this module's tiphys (`kube`).
from test_resource_tree import synced, upstream_token  # noqa: F401 (fixtures)
from test_upstream_chain import wait_for

RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
CUSTOM_KEY = "resource.customizations.actions.ConfigMap"
USERS = ("actget", "actrun")


def custom_actions(suffix):
    """argocd-cm's actions for ConfigMaps: `set-greeting` (a parameter; it appends `suffix`, so a
    change of argocd-cm shows), `loop` (never ends), `broken` (a syntax error), `off` (disabled)."""
    return "\n".join([
        "discovery.lua: |",
        "  local actions = {}",
        '  actions["set-greeting"] = {["params"] = {{["name"] = "value"}}, ["iconClass"] = "fa fa-pen",',
        '                             ["displayName"] = "Set greeting"}',
        '  actions["loop"] = {}',
        '  actions["broken"] = {}',
        '  actions["off"] = {["disabled"] = true}',
        "  return actions",
        "definitions:",
        "- name: set-greeting",
        "  action.lua: |",
        f'    obj.data.greeting = actionParams["value"] .. "{suffix}"',
        "    return obj",
        "- name: loop",
        "  action.lua: |",
        "    while true do end",
        "- name: broken",
        "  action.lua: |",
        "    return {",
        "",
    ])


@pytest.fixture(scope="module")
def users(controlplane, kube):
    """`actget` may get applications; `actrun` may also run a Deployment's restart (only)."""
    lines = [f"p, {u}, applications, get, default/*, allow" for u in USERS] + [
        "p, actrun, applications, action/apps/Deployment/restart, default/*, allow",
    ]
    yield from local_accounts(controlplane, kube, USERS, lines)


@pytest.fixture
def custom(controlplane):
    """Sets argocd-cm's ConfigMap actions (a function of the suffix); removes them after the test."""
    def put(suffix):
        controlplane.kubectl("patch", "configmap", "argocd-cm", "-n", NS, "--type", "merge",
                             "-p", json.dumps({"data": {CUSTOM_KEY: custom_actions(suffix)}}))
    yield put
    controlplane.kubectl("patch", "configmap", "argocd-cm", "-n", NS, "--type", "json", "-p", json.dumps(
        [{"op": "remove", "path": "/data/" + CUSTOM_KEY}]), check=False)


def query(app, ns, kind, name, group="", version="v1"):
    return urllib.parse.urlencode({"namespace": ns, "resourceName": name, "version": version, "group": group,
                                   "kind": kind})


def list_path(app, ns, kind, name, group=""):
    return f"{APPS}/{app}/resource/actions?" + query(app, ns, kind, name, group)


def run_v1_path(app, ns, kind, name, group=""):
    return f"{APPS}/{app}/resource/actions?" + query(app, ns, kind, name, group)


def v2_body(app, ns, kind, name, action, group="", **params):
    return {"name": app, "namespace": ns, "resourceName": name, "version": "v1", "group": group, "kind": kind,
            "action": action, "resourceActionParameters": [{"name": k, "value": v} for k, v in params.items()]}


def actions_of(answer):
    """The listed actions by name (upstream lists them in no fixed order)."""
    status, body = answer
    assert status == 200, answer
    return {a["name"]: a for a in body.get("actions", [])}


def deployment(plane, ns):
    return plane.get_json("deployment", "tree", "-n", ns)


def test_built_in_actions_are_listed_as_argocd_server_lists_them(plane, kube, synced, upstream_token, app_pb):
    token = kube.api.token
    path = list_path(synced.name, synced.ns, "Deployment", "tree", group="apps")
    ours, theirs = both(plane, kube, token, upstream_token, "GET", path)
    a, b = actions_of(ours), actions_of(theirs)
    assert a == b, (a, b)
    assert {"restart", "scale", "resume"} <= set(a) and a["resume"].get("disabled") is True, a
    assert a["scale"]["params"] == [{"name": "replicas"}], a
    # A kind with no actions: an empty list from both.
    ours, theirs = both(plane, kube, token, upstream_token, "GET",
                        list_path(synced.name, synced.ns, "Service", "chain"))
    assert actions_of(ours) == actions_of(theirs) == {}, (ours, theirs)
    # gRPC and gRPC-Web answer the same list.
    request = app_pb.app.ApplicationResourceRequest(name=synced.name, namespace=synced.ns, resourceName="tree",
                                                    version="v1", group="apps", kind="Deployment")
    with grpc_channel(kube.server) as ch:
        reply = app_pb.grpc.ApplicationServiceStub(ch).ListResourceActions(request, metadata=md(token), timeout=30)
    assert {x.name: x.disabled for x in reply.actions} == {n: bool(x.get("disabled")) for n, x in a.items()}, reply
    r = grpc_web(kube.server, "ListResourceActions", request, token)
    assert r.status == 200 and r.trailers.get("grpc-status") == "0", r
    listed = app_pb.app.ResourceActionsListResponse.FromString(r.messages[0])
    assert sorted(x.name for x in listed.actions) == sorted(a), listed


def test_restart_pause_and_resume_change_the_deployment(plane, kube, synced, upstream_token, app_pb):
    token = kube.api.token
    before = datetime.now(timezone.utc).replace(microsecond=0)
    # restart over REST (V2): the pod template's annotation, in the API server.
    status, body = ours_call(kube.server, token, "POST", f"{APPS}/{synced.name}/resource/actions/v2",
                             v2_body(synced.name, synced.ns, "Deployment", "tree", "restart", group="apps"))
    assert (status, body) == (200, {}), body
    stamp = deployment(plane, synced.ns)["spec"]["template"]["metadata"]["annotations"][RESTARTED_AT]
    at = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    assert before <= at <= datetime.now(timezone.utc), (before, stamp)

    # pause over gRPC (V1): spec.paused, and both servers now list pause and an enabled resume.
    with grpc_channel(kube.server) as ch:
        app_pb.grpc.ApplicationServiceStub(ch).RunResourceAction(app_pb.app.ResourceActionRunRequest(
            name=synced.name, namespace=synced.ns, resourceName="tree", version="v1", group="apps",
            kind="Deployment", action="pause"), metadata=md(token), timeout=30)
    assert deployment(plane, synced.ns)["spec"].get("paused") is True
    ours, theirs = both(plane, kube, token, upstream_token, "GET",
                        list_path(synced.name, synced.ns, "Deployment", "tree", group="apps"))
    a, b = actions_of(ours), actions_of(theirs)
    assert a == b and "pause" in a and not a["resume"].get("disabled"), (a, b)

    # resume over gRPC-Web (V2); then scale with its parameter over REST V1's sibling, V2.
    r = grpc_web(kube.server, "RunResourceActionV2", app_pb.app.ResourceActionRunRequestV2(
        name=synced.name, namespace=synced.ns, resourceName="tree", version="v1", group="apps", kind="Deployment",
        action="resume"), token)
    assert r.status == 200 and r.trailers.get("grpc-status") == "0", r
    assert "paused" not in deployment(plane, synced.ns)["spec"]
    status, body = ours_call(kube.server, token, "POST", f"{APPS}/{synced.name}/resource/actions/v2",
                             v2_body(synced.name, synced.ns, "Deployment", "tree", "scale", group="apps", replicas="2"))
    assert status == 200, body
    assert deployment(plane, synced.ns)["spec"]["replicas"] == 2
    status, body = ours_call(kube.server, token, "POST", f"{APPS}/{synced.name}/resource/actions/v2",
                             v2_body(synced.name, synced.ns, "Deployment", "tree", "scale", group="apps", replicas="x"))
    assert status == 400 and "scale" in body["message"] and '"x"' in body["message"], body
    # V1 over REST: the body is the action's name.
    status, body = ours_call(kube.server, token, "POST",
                             run_v1_path(synced.name, synced.ns, "Deployment", "tree", group="apps"), "restart")
    assert status == 200, body


def test_a_custom_lua_action_runs_and_argocd_cm_changes_apply_at_once(plane, kube, synced, upstream_token, custom,
                                                                      app_pb):
    token = kube.api.token
    custom("")
    path = list_path(synced.name, synced.ns, "ConfigMap", "chain-1")

    def agree():
        ours, theirs = both(plane, kube, token, upstream_token, "GET", path)
        a, b = actions_of(ours), actions_of(theirs)
        return a == b and len(a) == 4 and a
    listed = wait_for("both servers listing argocd-cm's ConfigMap actions", agree, timeout=30, interval=0.5)
    assert listed["set-greeting"] == {"name": "set-greeting", "params": [{"name": "value"}],
                                      "iconClass": "fa fa-pen", "displayName": "Set greeting"}, listed
    assert listed["off"]["disabled"] is True and listed["loop"] == {"name": "loop"}, listed

    with grpc_channel(kube.server) as ch:
        app_pb.grpc.ApplicationServiceStub(ch).RunResourceActionV2(app_pb.app.ResourceActionRunRequestV2(
            name=synced.name, namespace=synced.ns, resourceName="chain-1", version="v1", group="", kind="ConfigMap",
            action="set-greeting", resourceActionParameters=[app_pb.app.ResourceActionParameters(
                name="value", value="hello")]), metadata=md(token), timeout=30)
    assert plane.get_json("configmap", "chain-1", "-n", synced.ns)["data"]["greeting"] == "hello"

    # A new script in argocd-cm, no restart: the next run is the new script's.
    custom("!")
    body = v2_body(synced.name, synced.ns, "ConfigMap", "chain-1", "set-greeting", value="again")
    wait_for("the changed action run", lambda: ours_call(kube.server, token, "POST",
             f"{APPS}/{synced.name}/resource/actions/v2", body)[0] == 200
             and plane.get_json("configmap", "chain-1", "-n", synced.ns)["data"]["greeting"] == "again!",
             timeout=10, interval=0.2)

    # A script that never ends is stopped, and says so; a syntax error is named. Nothing changed.
    started = time.monotonic()
    status, answer = ours_call(kube.server, token, "POST", f"{APPS}/{synced.name}/resource/actions/v2",
                               v2_body(synced.name, synced.ns, "ConfigMap", "chain-1", "loop"))
    assert time.monotonic() - started < 20, "the looping script ran on"
    assert status == 400 and '"loop"' in answer["message"] and "budget" in answer["message"], answer
    status, answer = ours_call(kube.server, token, "POST", f"{APPS}/{synced.name}/resource/actions/v2",
                               v2_body(synced.name, synced.ns, "ConfigMap", "chain-1", "broken"))
    assert status == 400 and '"broken"' in answer["message"] and "syntax error" in answer["message"], answer
    assert "stack traceback" not in answer["message"], answer
    theirs = upstream_call(plane, "POST", f"{APPS}/{synced.name}/resource/actions/v2", upstream_token,
                           body=v2_body(synced.name, synced.ns, "ConfigMap", "chain-1", "broken"))
    assert theirs[0] >= 400, theirs
    assert plane.get_json("configmap", "chain-1", "-n", synced.ns)["data"]["greeting"] == "again!"


def test_actions_are_authorized_as_argocd_server_authorizes_them(plane, kube, synced, users):
    deploy = v2_body(synced.name, synced.ns, "Deployment", "tree", "restart", group="apps")
    pause = v2_body(synced.name, synced.ns, "Deployment", "tree", "pause", group="apps")
    v2 = f"{APPS}/{synced.name}/resource/actions/v2"
    listing = list_path(synced.name, synced.ns, "Deployment", "tree", group="apps")
    before = len(denials(kube.server, "actget"))
    assert decide(plane, kube, users, "actget", "GET", listing)[0] == 200
    ours = decide(plane, kube, users, "actget", "POST", v2, deploy)
    assert ours[0] == 403 and ours[1]["message"] == "permission denied", ours
    lines = wait_for("an audit line", lambda: len(d := denials(kube.server, "actget")) >= before + 1 and d,
                     timeout=5, interval=0.1)
    assert len(lines) == before + 1, lines
    assert 'action="action/apps/Deployment/restart"' in lines[-1].split(), lines[-1]

    before = len(denials(kube.server, "actrun"))
    assert decide(plane, kube, users, "actrun", "POST", v2, deploy)[0] == 200
    assert decide(plane, kube, users, "actrun", "POST", v2, pause)[0] == 403
    lines = wait_for("an audit line", lambda: len(d := denials(kube.server, "actrun")) >= before + 1 and d,
                     timeout=5, interval=0.1)
    assert len(lines) == before + 1 and 'action="action/apps/Deployment/pause"' in lines[-1].split(), lines


def test_bad_requests_are_refused_clearly(plane, kube, synced, upstream_token, app_pb):
    token = kube.api.token
    # Not in the application's tree: refused as argocd-server refuses it, listing and running.
    ours, theirs = both(plane, kube, token, upstream_token, "GET",
                        list_path(synced.name, synced.ns, "ConfigMap", "nosuch"))
    assert ours[0] == 400 and "not found as part of application" in ours[1]["message"], ours
    same_error(ours, theirs)
    ours, theirs = both(plane, kube, token, upstream_token, "POST", f"{APPS}/{synced.name}/resource/actions/v2",
                        v2_body(synced.name, synced.ns, "ConfigMap", "nosuch", "restart"))
    assert ours[0] == 400, ours
    same_error(ours, theirs)
    # An action the kind does not have: named (argocd-server answers an internal error).
    ours, theirs = both(plane, kube, token, upstream_token, "POST", f"{APPS}/{synced.name}/resource/actions/v2",
                        v2_body(synced.name, synced.ns, "Deployment", "tree", "frobnicate", group="apps"))
    assert ours[0] == 400 and '"frobnicate"' in ours[1]["message"] and "apps/Deployment" in ours[1]["message"], ours
    assert theirs[0] >= 400, theirs
    with grpc_channel(kube.server) as ch:
        e = rpc_error(app_pb.grpc.ApplicationServiceStub(ch).RunResourceActionV2,
                      app_pb.app.ResourceActionRunRequestV2(name=synced.name, namespace=synced.ns, resourceName="tree",
                                                            version="v1", group="apps", kind="Deployment",
                                                            action="frobnicate"), metadata=md(token), timeout=30)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and '"frobnicate"' in e.details(), e
