"""Kubernetes ServiceAccount tokens as bearer tokens (issue 41, argo-cd #14083; README,
"Kubernetes ServiceAccount tokens"): `tiphys server --kube` on the installation of
controlplane.py, with `tiphys.serviceaccountlogin.*` in its argocd-cm. Tokens are minted by the
real kube-apiserver (`kubectl create token`) and reviewed by it (TokenReview):

  an allowed ServiceAccount lists applications over REST and gRPC, userinfo shows its subject
  and groups, policy.csv lines by subject and by group decide (a denial is audited); a wrong
  audience, a ServiceAccount not allowed, a deleted one (after the cache duration), an expired
  or forged token are 401 naming why; garbage never costs a TokenReview; with the feature off
  the token is refused as any unknown token is; a bad value keeps the last good settings; an API
  server lost mid-run answers 503 naming it (a relay that the test cuts); and the ClusterRole of
  deploy/serviceaccount-login grants argocd-server's ServiceAccount the review.

Runs under tools/upstream/isolated (see controlplane.py).
"""

import json
import re
import time
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest

from appkit import APPS, Api, app_body, grpc_channel, md, rpc_error, uniq
from authkit import b64url, bearer, login_token, metrics_text, request, userinfo
from conftest import REPO
from test_kube_backend import NS, Cuttable, can_i, start_kube_server
from test_upstream_chain import wait_for

AUDIENCE = "tiphys"
CACHE = 2  # seconds: tiphys.serviceaccountlogin.cacheduration here, so a deletion shows quickly
KEY = "tiphys.serviceaccountlogin."
APISERVER_CACHE = 10  # seconds kube-apiserver itself keeps a token it accepted (its token cache)


def reviews(server):
    """tiphys_serviceaccount_token_reviews_total by result."""
    out = {}
    for line in metrics_text(server).splitlines():
        m = re.match(r'tiphys_serviceaccount_token_reviews_total\{result="(\w+)"\} (\S+)', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    assert set(out) == {"accepted", "refused", "failed"}, out
    return out


def mint(plane, name, namespace, audience=AUDIENCE):
    return plane.kubectl("create", "token", name, "-n", namespace, "--audience", audience,
                         "--duration", "10m").strip()


def patch_cm(plane, name, data):
    plane.kubectl("patch", "configmap", name, "-n", NS, "--type", "merge", "-p", json.dumps({"data": data}))


def unauthorized(server, token):
    """The 401 of a REST call with `token`: its message."""
    r = request(server, "GET", APPS, headers=bearer(token))
    assert r.status == 401, r
    return r.json()["message"]


@pytest.fixture(scope="module")
def sa(controlplane, tmp_path_factory):
    """Namespaces `ci` (deployer, viewer, doomed: allowed) and `other` (outsider: not allowed),
    the feature on in argocd-cm, and policy lines for the deployer (by subject) and the `ci`
    namespace's group; tiphys --kube on top. argocd-cm and argocd-rbac-cm are put back after."""
    plane = controlplane
    saved = [plane.get_json("configmap", name, "-n", NS) for name in ("argocd-cm", "argocd-rbac-cm")]
    ci, other = plane.new_namespace("ci"), plane.new_namespace("other")
    for ns, names in ((ci, ("deployer", "viewer", "doomed")), (other, ("outsider",))):
        plane.apply([{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": n, "namespace": ns}}
                     for n in names])
    role = uniq("role-sa")
    policy = saved[1].get("data", {}).get("policy.csv", "")
    patch_cm(plane, "argocd-rbac-cm", {"policy.csv": policy + "\n".join([
        f"p, system:serviceaccount:{ci}:deployer, applications, get, */*, allow",
        f"p, role:{role}, projects, get, *, allow",
        f"g, system:serviceaccounts:{ci}, role:{role}", ""])})
    patch_cm(plane, "argocd-cm", {f"{KEY}enabled": "true", f"{KEY}audiences": f"other-audience, {AUDIENCE}",
                                  f"{KEY}allowed": f"{ci}/*", f"{KEY}cacheduration": f"{CACHE}s"})
    server = start_kube_server(tmp_path_factory.mktemp("satoken"), plane.state["kubeconfig"])
    try:
        admin = Api(server, login_token(server, "admin", plane.state["argocd"]["admin_password"]))
        yield SimpleNamespace(server=server, admin=admin, ci=ci, other=other, role=role,
                              deployer=mint(plane, "deployer", ci), viewer=mint(plane, "viewer", ci))
    finally:
        server.stop()
        for obj in saved:
            for field in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
                obj["metadata"].pop(field, None)
        plane.kubectl("replace", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": saved}))
        plane.kubectl("delete", "namespace", ci, other, "--wait=false")


def test_an_allowed_service_account_lists_over_rest_and_grpc(plane, sa, app_pb):
    name = uniq("satoken")
    sa.admin.must_create(app_body(name, project="default"))
    try:
        r = request(sa.server, "GET", APPS, headers=bearer(sa.deployer))
        assert r.status == 200, r
        assert name in [i["metadata"]["name"] for i in r.json()["items"] or []], r.json()
        with grpc_channel(sa.server) as ch:
            stub = app_pb.grpc.ApplicationServiceStub(ch)
            listed = stub.List(app_pb.app.ApplicationQuery(), metadata=md(sa.deployer), timeout=20)
            assert name in [a.metadata.name for a in listed.items]
            listed = stub.List(app_pb.app.ApplicationQuery(), metadata=md(sa.deployer, key="token"), timeout=20)
            assert name in [a.metadata.name for a in listed.items]
        info = userinfo(sa.server, bearer(sa.deployer))
        assert info["loggedIn"] is True, info
        assert info["username"] == f"system:serviceaccount:{sa.ci}:deployer", info
        assert {"system:serviceaccounts", f"system:serviceaccounts:{sa.ci}"} <= set(info["groups"]), info
        assert info["iss"] == "https://kubernetes.default.svc.cluster.local", info
        # Repeated calls answer from the cache: one review for the token, not one per call.
        before = reviews(sa.server)
        for _ in range(5):
            assert request(sa.server, "GET", APPS, headers=bearer(sa.deployer)).status == 200
        assert reviews(sa.server) == before
    finally:
        sa.admin.call("DELETE", f"{APPS}/{name}?cascade=false")


def test_policy_decides_by_subject_and_by_group(plane, sa):
    viewer = f"system:serviceaccount:{sa.ci}:viewer"
    # By subject: only the deployer's line grants applications.
    assert can_i(sa.server, sa.deployer, "applications", "get", "default/x") == "yes"
    assert can_i(sa.server, sa.viewer, "applications", "get", "default/x") == "no"
    # By group: every ServiceAccount of the namespace gets the role.
    assert can_i(sa.server, sa.viewer, "projects", "get", "default") == "yes"
    r = request(sa.server, "GET", "/api/v1/projects/default", headers=bearer(sa.viewer))
    assert r.status == 200, r
    # A denial names the subject and leaves its audit line.
    r = request(sa.server, "GET", "/api/v1/account/admin", headers=bearer(sa.viewer))
    assert r.status == 403, r
    assert f"permission denied: accounts, get, admin, sub: {viewer}" in r.json()["message"], r.json()
    wait_for("the denial's audit line", lambda: any(
        " audit: " in line and f'subject="{viewer}"' in line and 'decision="deny"' in line
        and 'resource="accounts"' in line for line in sa.server.logs().splitlines()), timeout=5, interval=0.1)


def test_bad_tokens_are_401_naming_why(plane, sa, app_pb):
    before = reviews(sa.server)
    elsewhere = mint(plane, "deployer", sa.ci, audience="someone-else")
    message = unauthorized(sa.server, elsewhere)
    assert "audiences [\"someone-else\"] are not accepted" in message, message
    assert f"{KEY}audiences" in message, message
    with grpc_channel(sa.server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        e = rpc_error(stub.List, app_pb.app.ApplicationQuery(), metadata=md(elsewhere), timeout=20)
        assert e.code() == grpc.StatusCode.UNAUTHENTICATED and "are not accepted" in e.details(), e
    message = unauthorized(sa.server, mint(plane, "outsider", sa.other))
    assert f"the ServiceAccount {sa.other}/outsider may not sign in" in message, message
    # A token of the right shape that the API server did not sign.
    claims = {"iss": "https://kubernetes.default.svc.cluster.local", "sub": f"system:serviceaccount:{sa.ci}:deployer",
              "aud": [AUDIENCE], "exp": int(time.time()) + 600, "iat": int(time.time()),
              "kubernetes.io": {"namespace": sa.ci, "serviceaccount": {"name": "deployer", "uid": "x"}}}

    def forged(claims):
        header = b64url(json.dumps({"alg": "RS256", "kid": "k"}).encode())
        return f"{header}.{b64url(json.dumps(claims).encode())}.{b64url(b'not a signature')}"

    message = unauthorized(sa.server, forged(claims))
    assert "the Kubernetes API server did not accept the ServiceAccount token" in message, message
    after = reviews(sa.server)
    assert after["refused"] == before["refused"] + 1, (before, after)
    assert after["accepted"] == before["accepted"] + 1, "the outsider's review accepted the token"
    # Refused without asking: expired, garbage.
    message = unauthorized(sa.server, forged({**claims, "exp": int(time.time()) - 10}))
    assert "the ServiceAccount token has expired" in message, message
    for garbage in ("garbage", "a.b.c", "eyJhbGciOiJSUzI1NiJ9.e30.c2ln"):
        t0 = time.monotonic()
        unauthorized(sa.server, garbage)
        assert time.monotonic() - t0 < 1, garbage
    assert reviews(sa.server) == after
    # Each refusal is audited, as for any bad token.
    lines = [line for line in sa.server.logs().splitlines() if " audit: " in line and "may not sign in" in line]
    assert lines and 'result="Unauthenticated"' in lines[-1], lines


def test_a_deleted_service_account_loses_access_after_the_cache_duration(plane, sa):
    token = mint(plane, "doomed", sa.ci)
    assert request(sa.server, "GET", APPS, headers=bearer(token)).status == 200
    plane.kubectl("delete", "serviceaccount", "doomed", "-n", sa.ci)
    deleted = time.monotonic()
    message = wait_for("the deleted ServiceAccount's token refused", lambda: (
        r := request(sa.server, "GET", APPS, headers=bearer(token))).status == 401 and r.json()["message"],
        timeout=CACHE + APISERVER_CACHE + 20, interval=0.2)
    assert "did not accept the ServiceAccount token" in message, message
    assert time.monotonic() - deleted < CACHE + APISERVER_CACHE + 5


def test_feature_off_refuses_as_any_unknown_token_and_a_bad_value_keeps_the_last_good(plane, sa):
    foreign = "eyJhbGciOiJSUzI1NiJ9." + b64url(json.dumps({"iss": "https://idp.example", "sub": "x"}).encode()) + ".c2ln"
    unknown = unauthorized(sa.server, foreign)
    errors = sa_metric(sa.server, "tiphys_config_reload_errors_total")
    try:
        # No audiences while enabled: refused, the last good settings stay.
        patch_cm(plane, "argocd-cm", {f"{KEY}audiences": ""})
        wait_for("the bad value reported", lambda: sa_metric(sa.server, "tiphys_config_reload_errors_total") > errors,
                 timeout=10, interval=0.1)
        assert f"{KEY}audiences: required when" in sa.server.logs()
        assert request(sa.server, "GET", APPS, headers=bearer(sa.deployer)).status == 200
        patch_cm(plane, "argocd-cm", {f"{KEY}audiences": AUDIENCE, f"{KEY}enabled": "false"})
        before = reviews(sa.server)
        message = wait_for("the feature off", lambda: (
            r := request(sa.server, "GET", APPS, headers=bearer(sa.deployer))).status == 401 and r.json()["message"],
            timeout=10, interval=0.1)
        assert message == unknown, (message, unknown)
        assert "ServiceAccount" not in message
        assert reviews(sa.server) == before
    finally:
        patch_cm(plane, "argocd-cm", {f"{KEY}enabled": "true", f"{KEY}audiences": AUDIENCE})
    wait_for("the feature back on", lambda: request(sa.server, "GET", APPS, headers=bearer(sa.deployer)).status == 200,
             timeout=10, interval=0.1)


def sa_metric(server, name):
    for line in metrics_text(server).splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    pytest.fail(f"no metric {name}")


def test_an_api_server_lost_answers_503_naming_it(plane, sa, tmp_path, app_pb):
    """A second tiphys reaching the API server through a relay the test cuts: a token it has not
    reviewed yet gets UNAVAILABLE naming the API server (REST and gRPC), never a 401; one it has
    reviewed goes on answering from the cache until the cache duration passes."""
    relay = Cuttable(plane.state["apiserver"]["port"])
    url = f"https://127.0.0.1:{relay.port}"
    kubeconfig = tmp_path / "relayed.kubeconfig"
    kubeconfig.write_text(Path(plane.state["kubeconfig"]).read_text().replace(plane.state["apiserver"]["url"], url))
    server = start_kube_server(tmp_path, kubeconfig)
    try:
        assert request(server, "GET", APPS, headers=bearer(sa.deployer)).status == 200
        fresh = mint(plane, "viewer", sa.ci)
        relay.cut()
        t0 = time.monotonic()
        r = request(server, "GET", APPS, headers=bearer(fresh), timeout=30)
        assert r.status == 503, r
        assert r.json()["code"] == 14 and url in r.json()["message"], r.json()
        assert "ServiceAccount token" in r.json()["message"], r.json()
        assert time.monotonic() - t0 < 12
        with grpc_channel(server) as ch:
            stub = app_pb.grpc.ApplicationServiceStub(ch)
            e = rpc_error(stub.List, app_pb.app.ApplicationQuery(), metadata=md(fresh), timeout=30)
            assert e.code() == grpc.StatusCode.UNAVAILABLE and url in e.details(), e
        assert reviews(server)["failed"] >= 2
        wait_for("the refusal's audit line", lambda: any(
            " audit: " in line and 'result="Unavailable"' in line and url in line
            for line in server.logs().splitlines()), timeout=5, interval=0.1)
    finally:
        server.stop()
        relay.cut()


def test_the_overlay_grants_argocd_server_the_token_review(plane):
    who = f"system:serviceaccount:{NS}:argocd-server"

    def can():
        return plane.kubectl("auth", "can-i", "create", "tokenreviews.authentication.k8s.io", "--as", who,
                             check=False).strip()

    assert can() == "no"
    overlay = REPO / "deploy" / "serviceaccount-login"
    plane.kubectl("apply", "-k", str(overlay))
    try:
        wait_for("the grant in force", lambda: can() == "yes", timeout=10, interval=0.2)
    finally:
        plane.kubectl("delete", "-k", str(overlay))
