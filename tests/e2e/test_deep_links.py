"""Deep links (issue 38, item 2: ListLinks and ListResourceLinks; and the projects' ListLinks):
argocd-cm's `application.links`, `resource.links` and `project.links`, each link's URL a Go
template (with sprig) and its `if` an expr-lang condition.

On the embedded backend (settings from --config-dir): the application's and the project's links
over REST and gRPC, a condition true and one false, a bad condition that drops its link alone, a
bad `*.links` value on reload that keeps the last good links (counted as a rejected reload), and a
caller without `get` denied with one audit line per request.

On the control plane (controlplane.py; tools/upstream/isolated): tiphys --kube beside upstream
argocd-server, the application synced by the real controller, the same argocd-cm for both, and
their answers compared: the application's links, a ConfigMap's and a Secret's links (the Secret's
values masked in what the template sees), the project's links, and a resource not in the tree
refused alike; a condition that fails only when run (`in` on a string) drops its link on both.
"""

import json
import urllib.parse
from types import SimpleNamespace

import grpc
import pytest

from appkit import APPS, Api, app_body, grpc_channel, md, rpc_error, uniq
from authkit import ADMIN_PW, ALICE_PW, login_token, metric, request, wait_until
from test_kube_backend import NS, start_kube_server, upstream_call
from test_resource_tree import IN_CLUSTER, SECRET_VALUE
# The application synced by the real controller, on this module's tiphys (`kube`).
from test_resource_tree import synced, upstream_token  # noqa: F401 (fixtures)
from test_upstream_chain import wait_for

APP_LINKS = """
- url: "https://mon.example/{{ .app.metadata.name | upper }}?ns={{ .app.spec.destination.namespace }}&c={{ .cluster.name }}"
  title: Monitoring
  description: the dashboards
  icon.class: fa-chart
- url: "https://logs.example/{{ .application.metadata.name | trunc 3 }}"
  title: Logs
  if: app.spec.destination.namespace == "prod" && cluster.server startsWith "https://"
- url: "https://never.example"
  title: Never
  if: app.metadata.name startsWith "zzz"
- url: "https://broken.example"
  title: Broken
  if: app.metadata.name ==
"""
PROJECT_LINKS = """
- url: "https://team.example/{{ .project.metadata.name | quote }}"
  title: Team
  if: '"default" in [project.metadata.name, "other"]'
"""
RELOAD_WITHIN, SLACK = 2, 10


def rest(server, token, path):
    r = request(server, "GET", path, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return r.status, (json.loads(r.body) if r.body else {})


def denials(server, user):
    return [line for line in server.logs().splitlines()
            if " audit: " in line and f'subject="{user}"' in line.split() and 'decision="deny"' in line.split()]


def project_links_grpc(app_pb, channel, name, token):
    """project.ProjectService/ListLinks with a hand-encoded ListProjectLinksRequest {name = 1}."""
    raw = name.encode()
    call = channel.unary_unary("/project.ProjectService/ListLinks",
                               request_serializer=lambda b: b,
                               response_deserializer=app_pb.app.LinksResponse.FromString)
    return call(b"\x0a" + bytes([len(raw)]) + raw, metadata=md(token), timeout=20)


@pytest.fixture
def embedded(servers, config_dir):
    cfg = config_dir(cm={"application.links": APP_LINKS, "project.links": PROJECT_LINKS})
    server = servers.start("--insecure", config=cfg)
    admin = login_token(server, "admin", ADMIN_PW)
    api = Api(server, admin)
    prod, dev = uniq("links"), uniq("links")
    api.must_create(app_body(prod, project="default", dest_namespace="prod"))
    api.must_create(app_body(dev, project="default", dest_namespace="dev"))
    return SimpleNamespace(server=server, cfg=cfg, admin=admin, prod=prod, dev=dev)


def test_application_and_project_links_on_the_embedded_backend(embedded, app_pb):
    e = embedded
    status, body = rest(e.server, e.admin, f"{APPS}/{e.prod}/links")
    assert status == 200, body
    assert body == {"items": [
        {"title": "Monitoring", "url": f"https://mon.example/{e.prod.upper()}?ns=prod&c=in-cluster",
         "description": "the dashboards", "iconClass": "fa-chart"},
        {"title": "Logs", "url": f"https://logs.example/{e.prod[:3]}"},
    ]}, body
    # The condition false for the other application; the bad condition drops only its link.
    status, body = rest(e.server, e.admin, f"{APPS}/{e.dev}/links")
    assert status == 200 and [i["title"] for i in body["items"]] == ["Monitoring"], body
    assert "failed to evaluate link condition 'app.metadata.name =='" in e.server.logs()
    status, body = rest(e.server, e.admin, "/api/v1/projects/default/links")
    assert status == 200 and body == {"items": [{"title": "Team", "url": 'https://team.example/"default"'}]}, body
    with grpc_channel(e.server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        reply = stub.ListLinks(app_pb.app.ListAppLinksRequest(name=e.prod), metadata=md(e.admin), timeout=20)
        assert [(i.title, i.url) for i in reply.items] == [
            ("Monitoring", f"https://mon.example/{e.prod.upper()}?ns=prod&c=in-cluster"),
            ("Logs", f"https://logs.example/{e.prod[:3]}")], reply
        assert reply.items[0].iconClass == "fa-chart" and not reply.items[1].HasField("description")
        reply = project_links_grpc(app_pb, ch, "default", e.admin)
        assert [(i.title, i.url) for i in reply.items] == [("Team", 'https://team.example/"default"')], reply


def test_a_bad_links_value_keeps_the_last_good_links(embedded):
    e = embedded
    assert metric(e.server, "tiphys_config_reload_errors_total") == 0
    e.cfg.update_cm({"project.links": "url: not-a-list"})
    wait_until(lambda: metric(e.server, "tiphys_config_reload_errors_total") == 1, RELOAD_WITHIN + SLACK,
               what="the bad project.links being rejected")
    assert "project.links" in e.server.logs()
    status, body = rest(e.server, e.admin, "/api/v1/projects/default/links")
    assert status == 200 and [i["title"] for i in body["items"]] == ["Team"], body
    # A good edit is taken.
    e.cfg.update_cm({"project.links": "- url: https://new.example\n  title: New\n"})
    wait_until(lambda: rest(e.server, e.admin, "/api/v1/projects/default/links")[1].get("items")
               == [{"title": "New", "url": "https://new.example"}], RELOAD_WITHIN + SLACK, what="the new links")


def test_links_need_get_and_each_denial_is_audited_once(embedded, app_pb):
    e = embedded
    alice = login_token(e.server, "alice", ALICE_PW)
    before = len(denials(e.server, "alice"))
    for path in (f"{APPS}/{e.prod}/links", "/api/v1/projects/default/links",
                 f"{APPS}/{e.prod}/resource/links?" + urllib.parse.urlencode(
                     {"namespace": "prod", "resourceName": "x", "version": "v1", "kind": "ConfigMap"})):
        status, body = rest(e.server, alice, path)
        assert status == 403 and body["message"].startswith("permission denied"), (path, body)
    with grpc_channel(e.server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        err = rpc_error(stub.ListLinks, app_pb.app.ListAppLinksRequest(name=e.prod), metadata=md(alice), timeout=20)
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED, err
    lines = wait_until(lambda: len(d := denials(e.server, "alice")) >= before + 4 and d, 5, what="four audit lines")
    assert len(lines) == before + 4, lines


# ---- beside upstream argocd-server on the control plane --------------------------------------

RESOURCE_LINKS = """
- url: "https://res.example/{{ .resource.kind | lower }}/{{ .resource.metadata.name }}?app={{ .app.metadata.name }}&p={{ .project.metadata.name }}&c={{ .cluster.name }}"
  title: Resource
- url: "https://secret.example/{{ .resource.data.password }}"
  title: Secret
  if: resource.kind == "Secret"
- url: "https://cm.example/{{ .resource.metadata.namespace }}"
  title: ConfigMap
  if: resource.kind == "ConfigMap" and resource.metadata.name contains "chain"
- url: "https://never.example"
  title: Failing
  if: '"chain" in resource.metadata.name'
- url: "https://bad.example"
  title: Bad
  if: resource.kind +
"""
CP_APP_LINKS = """
- url: "https://app.example/{{ .app.metadata.name }}/{{ .app.spec.destination.namespace | upper }}?c={{ .cluster.server }}"
  title: App
  if: cluster.name == "in-cluster"
- url: "https://never.example"
  title: Never
  if: app.metadata.name endsWith "-nope"
"""
CP_KEYS = ("application.links", "resource.links", "project.links")


@pytest.fixture(scope="module")
def kube(controlplane, tmp_path_factory):
    """tiphys --kube --redis with cluster access (a resource's links read it live)."""
    server = start_kube_server(tmp_path_factory.mktemp("links"), controlplane.state["kubeconfig"],
                               "--redis", controlplane.state["redis"]["address"], "--cluster-access", "on")
    token = login_token(server, "admin", controlplane.state["argocd"]["admin_password"])
    yield SimpleNamespace(server=server, api=Api(server, token))
    server.stop()


@pytest.fixture(scope="module")
def cp_links(controlplane):
    """The links in the installation's argocd-cm, removed again afterwards."""
    data = {"application.links": CP_APP_LINKS, "resource.links": RESOURCE_LINKS, "project.links": PROJECT_LINKS}
    controlplane.kubectl("patch", "configmap", "argocd-cm", "-n", NS, "--type", "merge",
                         "-p", json.dumps({"data": data}))
    yield data
    controlplane.kubectl("patch", "configmap", "argocd-cm", "-n", NS, "--type", "json", "-p", json.dumps(
        [{"op": "remove", "path": f"/data/{k}"} for k in CP_KEYS]))


def resource_links_path(app, ns, kind, name, group="", version="v1"):
    q = {"namespace": ns, "resourceName": name, "version": version, "group": group, "kind": kind}
    return f"{APPS}/{app}/resource/links?" + urllib.parse.urlencode(q)


def agreeing(plane, kube, token_theirs, path, timeout=40):
    """Both servers' answers to GET `path`, read until they agree and have links (each takes
    argocd-cm's change in its own time)."""
    last = {}

    def same():
        ours = rest(kube.server, kube.api.token, path)
        theirs = upstream_call(plane, "GET", path, token_theirs)
        last["pair"] = (ours, theirs)
        return ours == theirs and ours[0] == 200 and ours[1].get("items") and ours

    try:
        return wait_for(f"the same links for {path}", same, timeout=timeout, interval=0.5)
    except BaseException:
        print("last answers (tiphys, argocd-server):", last.get("pair"))
        raise


@pytest.mark.usefixtures("cp_links")
def test_links_answer_as_argocd_server_does_on_the_control_plane(plane, kube, synced, upstream_token, app_pb):
    app, theirs_token = synced, upstream_token
    _, body = agreeing(plane, kube, theirs_token, f"{APPS}/{app.name}/links")
    assert [i["title"] for i in body["items"]] == ["App"], body
    assert body["items"][0]["url"] == f"https://app.example/{app.name}/{app.ns.upper()}?c={IN_CLUSTER}", body
    _, body = agreeing(plane, kube, theirs_token, resource_links_path(app.name, app.ns, "ConfigMap", "chain-1"))
    assert [i["title"] for i in body["items"]] == ["Resource", "ConfigMap"], body
    assert body["items"][0]["url"] == f"https://res.example/configmap/chain-1?app={app.name}&p=default&c=in-cluster"
    _, body = agreeing(plane, kube, theirs_token, resource_links_path(app.name, app.ns, "Secret", "tree-secret"))
    assert [i["title"] for i in body["items"]] == ["Resource", "Secret"], body
    assert body["items"][1]["url"] == "https://secret.example/++++++++", body
    assert SECRET_VALUE not in json.dumps(body)
    _, body = agreeing(plane, kube, theirs_token, "/api/v1/projects/default/links")
    assert body == {"items": [{"title": "Team", "url": 'https://team.example/"default"'}]}, body
    # Not in the tree: refused alike.
    path = resource_links_path(app.name, app.ns, "ConfigMap", "nosuch")
    ours, theirs = rest(kube.server, kube.api.token, path), upstream_call(plane, "GET", path, theirs_token)
    assert ours[0] == 400 and "not found as part of application" in ours[1]["message"], ours
    assert (ours[0], ours[1].get("code"), ours[1].get("message")) == (
        theirs[0], theirs[1].get("code"), theirs[1].get("message")), (ours, theirs)
    # And over gRPC.
    with grpc_channel(kube.server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        request_of = lambda name: app_pb.app.ApplicationResourceRequest(  # noqa: E731
            name=app.name, namespace=app.ns, resourceName=name, version="v1", kind="ConfigMap")
        reply = stub.ListResourceLinks(request_of("chain-1"), metadata=md(kube.api.token), timeout=30)
        assert [i.title for i in reply.items] == ["Resource", "ConfigMap"], reply
        err = rpc_error(stub.ListResourceLinks, request_of("nosuch"), metadata=md(kube.api.token), timeout=30)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
