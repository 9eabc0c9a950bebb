"""What tiphys serves from Argo CD's configuration beside applications (issue 22, item 4):
the settings fields clients read from argocd-cm, the notification names of
argocd-notifications-cm (REST, native gRPC with grpcio stubs compiled from our protos, gRPC-Web),
the status badge (/api/badge) and git push webhooks (/api/webhook), each with its bad input."""

import hashlib
import hmac
import importlib
import json
import sys
import time

import grpc
import pytest

from appkit import Api, app_body, grpc_channel, grpc_web, md, rpc_error, uniq
from authkit import ADMIN_PW, login_token, request
from conftest import REPO

NOTIFICATIONS_CM = """apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-notifications-cm
data:
  trigger.on-sync-failed: |
    - when: app.status.operationState.phase in ['Error', 'Failed']
      send: [app-sync-failed]
  trigger.on-deployed: |
    - when: app.status.health.status == 'Healthy'
      send: [app-deployed]
  template.app-sync-failed: |
    message: Sync of {{.app.metadata.name}} failed
  template.app-deployed: |
    message: deployed
  service.slack: |
    token: $slack-token
  service.webhook.github: |
    url: https://api.github.com
  subscriptions: |
    - recipients: [slack:ops]
      triggers: [on-sync-failed]
"""

CM = {
    "statusbadge.enabled": "true",
    "ui.bannercontent": "Maintenance at noon",
    "ui.bannerpermanent": "true",
    "application.instanceLabelKey": "team.example.com/app",
    "exec.enabled": "true",
    "help.download.linux-amd64": "https://dl.example.com/argocd",
    "kustomize.version.v5.4.0": "/usr/local/bin/kustomize-5.4",
}
GITHUB_SECRET = "github-webhook-secret-1"
GITLAB_SECRET = "gitlab-webhook-token-1"
REPO_URL = "https://git.example.com/team/web.git"


@pytest.fixture(scope="module")
def env(module_servers, module_config):
    cfg = module_config(cm=CM, secret={"webhook.github.secret": GITHUB_SECRET,
                                       "webhook.gitlab.secret": GITLAB_SECRET})
    cfg.write_raw("argocd-notifications-cm.yaml", NOTIFICATIONS_CM)
    server = module_servers.start("--insecure", config=cfg)
    token = login_token(server, "admin", ADMIN_PW)
    return type("Env", (), {"server": server, "cfg": cfg, "token": token, "api": Api(server, token)})


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    """notification_pb2 and settings_pb2, compiled from our protos with grpcio-tools."""
    import grpc_tools  # noqa: PLC0415
    from grpc_tools import protoc  # noqa: PLC0415
    out = tmp_path_factory.mktemp("stubs")
    include = REPO / "proto"
    args = ["grpc_tools.protoc", f"-I{include}", f"-I{grpc_tools.__path__[0]}/_proto", f"--python_out={out}",
            f"--grpc_python_out={out}", "notification/notification.proto", "settings/settings.proto"]
    assert protoc.main(args) == 0
    sys.path.insert(0, str(out))
    try:
        return type("Pb", (), {"n": importlib.import_module("notification.notification_pb2"),
                               "s": importlib.import_module("settings.settings_pb2")})
    finally:
        sys.path.remove(str(out))


# ---- settings ---------------------------------------------------------------------------------

def test_settings_carry_the_argocd_cm_keys_clients_read(env):
    mine = env.api.get("/api/v1/settings").json()
    assert mine["appLabelKey"] == "team.example.com/app"
    assert mine["statusBadgeEnabled"] is True and mine["execEnabled"] is True
    assert mine["uiBannerContent"] == "Maintenance at noon" and mine["uiBannerPermanent"] is True
    assert mine["controllerNamespace"] == "argocd"
    assert mine["help"]["binaryUrls"] == {"linux-amd64": "https://dl.example.com/argocd"}
    assert mine["kustomizeVersions"] == ["v5.4.0"]
    anonymous = request(env.server, "GET", "/api/v1/settings").json()
    for hidden in ("uiBannerContent", "uiBannerPermanent", "controllerNamespace", "passwordPattern"):
        assert hidden not in anonymous, anonymous
    assert anonymous["statusBadgeEnabled"] is True


def test_settings_over_grpc(env, pb):
    with grpc_channel(env.server) as ch:
        get = ch.unary_unary("/cluster.SettingsService/Get", request_serializer=lambda m: m.SerializeToString(),
                             response_deserializer=pb.s.Settings.FromString)
        got = get(pb.s.SettingsQuery(), metadata=md(env.token), timeout=10)
    assert got.appLabelKey == "team.example.com/app" and got.execEnabled and got.uiBannerPermanent
    assert list(got.kustomizeVersions) == ["v5.4.0"]
    assert dict(got.help.binaryUrls) == {"linux-amd64": "https://dl.example.com/argocd"}


# ---- notifications ----------------------------------------------------------------------------

def names(body):
    return [item["name"] for item in body["items"]]


def test_notification_names_over_rest(env):
    assert names(env.api.get("/api/v1/notifications/triggers").json()) == ["on-deployed", "on-sync-failed"]
    assert names(env.api.get("/api/v1/notifications/templates").json()) == ["app-deployed", "app-sync-failed"]
    assert names(env.api.get("/api/v1/notifications/services").json()) == ["github", "slack"]


def test_notifications_need_a_session(env):
    r = request(env.server, "GET", "/api/v1/notifications/triggers")
    assert r.status == 401, r


def test_notification_names_over_grpc_and_grpc_web(env, pb):
    with grpc_channel(env.server) as ch:
        call = ch.unary_unary("/notification.NotificationService/ListServices",
                              request_serializer=lambda m: m.SerializeToString(),
                              response_deserializer=pb.n.ServiceList.FromString)
        got = call(pb.n.ServicesListRequest(), metadata=md(env.token), timeout=10)
        assert [s.name for s in got.items] == ["github", "slack"]
        err = rpc_error(call, pb.n.ServicesListRequest(), timeout=10)
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    web = grpc_web(env.server, "notification.NotificationService/ListTemplates", pb.n.TemplatesListRequest(),
                   token=env.token)
    assert web.status == 200 and web.trailers.get("grpc-status") == "0", web
    assert [t.name for t in pb.n.TemplateList.FromString(web.messages[0]).items] == ["app-deployed", "app-sync-failed"]


def test_a_broken_notifications_cm_is_named_and_an_edit_shows_at_once(env):
    try:
        env.cfg.write_raw("argocd-notifications-cm.yaml", NOTIFICATIONS_CM + "  service.webhook.a.b: |\n    url: x\n")
        r = env.api.get("/api/v1/notifications/services")
        assert r.status == 400, r
        assert "service.webhook.a.b" in r.json()["message"] and "service.<type>" in r.json()["message"], r.json()
        env.cfg.write_raw("argocd-notifications-cm.yaml", NOTIFICATIONS_CM + "  trigger.on-created: |\n    - when: 'true'\n")
        assert "on-created" in names(env.api.get("/api/v1/notifications/triggers").json())
    finally:
        env.cfg.write_raw("argocd-notifications-cm.yaml", NOTIFICATIONS_CM)


# ---- badge ------------------------------------------------------------------------------------

def badge(env, query):
    return request(env.server, "GET", f"/api/badge?{query}")


def test_the_badge_shows_an_application_without_a_login(env):
    """(The API never stores a client's `status`: only a controller reports it, so here every
    application is Unknown; how a reported status is drawn is a unit test of src/api/badge.rs.)"""
    name = uniq("badge")
    env.api.must_create(app_body(name, project="default"))
    r = badge(env, f"name={name}&revision=true&showAppName=true")
    assert r.status == 200, r
    assert r.header("content-type") == "image/svg+xml" and r.header("access-control-allow-origin") == "*"
    assert r.header("cache-control") == "private, no-store"
    svg = r.body.decode()
    assert svg.startswith("<svg") and 'aria-label="Unknown Unknown"' in svg and name in svg, svg
    assert 'height="40"' in svg and 'height="20"' in badge(env, f"name={name}").body.decode()
    assert 'width="300"' in badge(env, f"name={name}&width=300").body.decode()
    assert "Not Found" in badge(env, "name=no-such-app").body.decode()
    assert "Not Found" in badge(env, f"name={name}&namespace=elsewhere").body.decode()
    # A project's applications: not all Healthy and Synced (none has reported), so the worst.
    svg = badge(env, "project=default").body.decode()
    assert 'aria-label="Degraded OutOfSync"' in svg, svg
    assert 'aria-label="Unknown Unknown"' in badge(env, "project=no-such-project").body.decode()


def test_bad_badge_queries_are_400(env):
    for query in ("name=Bad_Name", "project=no%20way", "name=a&namespace=-x"):
        r = badge(env, query)
        assert r.status == 400, (query, r)
        assert r.body, query


def test_the_badge_is_off_unless_enabled(servers, config_dir):
    server = servers.start("--insecure", config=config_dir())
    api = Api(server, login_token(server, "admin", ADMIN_PW))
    name = uniq("off")
    api.must_create(app_body(name))
    svg = request(server, "GET", f"/api/badge?name={name}").body.decode()
    assert "Unknown" in svg and "Not Found" not in svg
    assert request(server, "GET", "/api/v1/settings").json().get("statusBadgeEnabled") is None


# ---- webhooks ---------------------------------------------------------------------------------

def github_push(ref="refs/heads/main", files=("manifests/deploy.yaml",), pad=0):
    return json.dumps({"ref": ref, "before": "a" * 40, "after": "b" * 40,
                       "repository": {"html_url": "https://git.example.com/team/web", "default_branch": "main"},
                       "commits": [{"added": list(files), "modified": [], "removed": [], "message": "x" * pad}]}).encode()


def post_webhook(env, body, headers):
    return request(env.server, "POST", "/api/webhook", body, headers={"Content-Type": "application/json", **headers})


def signed(body, secret=GITHUB_SECRET):
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def refresh_of(env, name):
    return env.api.must_get(name)["metadata"].get("annotations", {}).get("argocd.argoproj.io/refresh")


def test_a_signed_github_push_requests_a_refresh_of_the_apps_it_touched(env):
    touched, other_repo, other_branch = uniq("hook"), uniq("hook"), uniq("hook")
    env.api.must_create(app_body(touched, repo=REPO_URL))
    env.api.must_create(app_body(other_repo, repo="https://git.example.com/team/api.git"))
    body = app_body(other_branch, repo=REPO_URL)
    body["spec"]["source"]["targetRevision"] = "release"
    env.api.must_create(body)
    # A payload above what a caller without a session may send (64 KiB): the signature is the proof.
    push = github_push(pad=100_000)
    r = post_webhook(env, push, {"X-GitHub-Event": "push", "X-Hub-Signature-256": signed(push)})
    assert r.status == 200, r
    assert refresh_of(env, touched) == "normal"
    assert refresh_of(env, other_repo) is None and refresh_of(env, other_branch) is None


def test_a_bad_signature_changes_nothing(env):
    name = uniq("hook")
    env.api.must_create(app_body(name, repo=REPO_URL))
    push = github_push()
    for headers, why in (({"X-GitHub-Event": "push", "X-Hub-Signature-256": signed(push, "wrong")}, "HMAC"),
                         ({"X-GitHub-Event": "push"}, "X-Hub-Signature-256"),
                         ({"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": "wrong"}, "X-Gitlab-Token"),
                         # Gogs has no secret here, but others do: unsigned Gogs events are refused
                         ({"X-Gogs-Event": "push"}, "none is configured for Gogs"),
                         ({"X-Made-Up": "1"}, "Unknown webhook event")):
        r = post_webhook(env, push, headers)
        assert r.status == 400, (headers, r)
        assert why in r.json()["message"], r.json()
    assert refresh_of(env, name) is None


def test_gitlab_pushes_and_github_pings(env):
    name = uniq("hook")
    env.api.must_create(app_body(name, repo="git@git.example.com:team/lab.git"))
    push = json.dumps({"ref": "refs/heads/main", "project": {"web_url": "https://git.example.com/team/lab",
                                                             "default_branch": "main"}, "commits": []}).encode()
    r = post_webhook(env, push, {"X-Gitlab-Event": "Push Hook", "X-Gitlab-Token": GITLAB_SECRET})
    assert r.status == 200, r
    assert refresh_of(env, name) == "normal"
    ping = b'{"zen": "Keep it logically awesome."}'
    assert post_webhook(env, ping, {"X-GitHub-Event": "ping", "X-Hub-Signature-256": signed(ping)}).status == 200


def test_a_webhook_body_above_the_limit_is_413(env):
    push = github_push(pad=3 * 1024 * 1024)
    r = post_webhook(env, push, {"X-GitHub-Event": "push", "X-Hub-Signature-256": signed(push)})
    assert r.status == 413, r
    time.sleep(0)  # the server is still answering
    assert request(env.server, "GET", "/healthz").status == 200
