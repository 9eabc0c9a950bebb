"""Personal access tokens of single sign-on users (`tiphys.personaltokens.enabled`), against the
real test provider (npm oidc-provider on loopback; ID tokens signed with its key, so a test picks
the groups): made, listed and revoked over REST and gRPC, by tiphys's CLI and by upstream's
`argocd account generate-token`; expiry; groups frozen when the token was made; a revocation in
force at once on a second replica of the same etcd; the switch off refusing creation and use;
RBAC `accounts, update, <self>` with the denial audited once; each use audited with the token's
id; a disabled and a deleted user's tokens refused with a message saying so.
"""

import re
import time

import grpc
import pytest

from authkit import ADMIN_PW, generate_stubs, login_token, wait_until
from conftest import cli
from oidckit import session
from test_rbac import audit_lines
from test_sso import enable_sso, setup_sso, write_rbac

SWITCH = "tiphys.personaltokens.enabled"
SELF = ["ann", "cora", "dave", "erin", "frank"]
POLICY = "".join(f"p, {u}, accounts, update, {u}, allow\np, {u}, accounts, get, {u}, allow\n" for u in SELF)
POLICY += "g, admins, role:admin\np, admin, accounts, delete, *, allow\n"
RBAC = {"policy.csv": POLICY, "scopes": "[groups]"}
CAN_CREATE = "/api/v1/account/can-i/projects/create/p1"


@pytest.fixture(scope="module")
def plane(tmp_path_factory, module_servers, module_config):
    config = module_config(cm={SWITCH: "true"})
    write_rbac(config, RBAC)
    server = module_servers.start("--insecure", config=config)
    from oidckit import Provider  # noqa: PLC0415
    provider = module_servers.also_stop(Provider(tmp_path_factory.mktemp("oidc"), [server.url("/auth/callback")]))
    enable_sso(config, server, provider)

    class Plane:
        pass

    p = Plane()
    p.server, p.provider, p.config = server, provider, config
    p.admin = login_token(server, "admin", ADMIN_PW)
    return p


def id_token(plane, login, groups=("devs",)):
    """An ID token of the provider for `login` with these groups."""
    return plane.provider.sign("rs256", plane.provider.claims(sub=login, email=f"{login}@example.test",
                                                              groups=list(groups))).strip()


def call(server, method, path, token=None, body=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return session().request(method, server.url(path), headers=headers, json=body, timeout=15)


def make(plane, login, token, **body):
    r = call(plane.server, "POST", f"/api/v1/account/{login}/token", token, body)
    assert r.status_code == 200, r.text
    return r.json()["token"]


def refused(server, token, why):
    """A call made with `token` is 401 and its message says `why`."""
    r = call(server, "GET", "/api/v1/account", token)
    assert r.status_code == 401 and why in r.json()["message"], (r.status_code, r.text)
    return r.json()["message"]


def pat_id(token):
    import base64  # noqa: PLC0415
    import json  # noqa: PLC0415
    body = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))["jti"]


# ---- REST ------------------------------------------------------------------------------------

def test_create_list_use_and_revoke_over_rest(plane):
    idt = id_token(plane, "ann")
    pat = make(plane, "ann", idt, expiresIn=3600, description="CI pipeline", id="ci-1")
    assert pat_id(pat) == "ci-1"
    info = call(plane.server, "GET", "/api/v1/session/userinfo", pat).json()
    assert info == {"loggedIn": True, "username": "ann@example.test", "iss": plane.provider.issuer,
                    "groups": ["devs"]}, info
    # Named by the email upstream's CLI sends (GetUserInfo's username), or by the subject.
    for name in ("ann", "ann@example.test"):
        account = call(plane.server, "GET", f"/api/v1/account/{name}", idt).json()
        assert account["name"] == "ann" and account["enabled"] is True, account
        [listed] = account["tokens"]
        assert listed["id"] == "ci-1" and listed["description"] == "CI pipeline", listed
        assert listed["expiresAt"] - listed["issuedAt"] == 3600, listed
    # The same id again is refused; so is a bad id and a bad description.
    r = call(plane.server, "POST", "/api/v1/account/ann/token", idt, {"id": "ci-1"})
    assert r.status_code == 409 and "ci-1" in r.json()["message"], r.text
    r = call(plane.server, "POST", "/api/v1/account/ann/token", idt, {"id": "a/b"})
    assert r.status_code == 400 and "token id" in r.json()["message"], r.text
    r = call(plane.server, "POST", "/api/v1/account/ann/token", idt, {"description": "x" * 257})
    assert r.status_code == 400 and "description" in r.json()["message"], r.text
    r = call(plane.server, "POST", "/api/v1/account/ann/token", idt, {"expiresIn": -1})
    assert r.status_code == 400 and "negative" in r.json()["message"], r.text
    # A token cannot make another.
    r = call(plane.server, "POST", "/api/v1/account/ann/token", pat, {})
    assert r.status_code == 400 and "sign in" in r.json()["message"], r.text

    # Each use leaves one audit line naming the token, the subject and the method.
    before = len(audit_lines(plane.server, token_id="ci-1", subject="ann",
                             method="/account.AccountService/ListAccounts"))
    assert call(plane.server, "GET", "/api/v1/account", pat).status_code == 200
    wait_until(lambda: len(audit_lines(plane.server, token_id="ci-1", subject="ann",
                                       method="/account.AccountService/ListAccounts")) == before + 1,
               5, what="one audit line for the use")

    r = call(plane.server, "DELETE", "/api/v1/account/ann/token/ci-1", idt)
    assert r.status_code == 200, r.text
    refused(plane.server, pat, "personal access token ci-1 has been revoked")
    r = call(plane.server, "DELETE", "/api/v1/account/ann/token/ci-1", idt)
    assert r.status_code == 404, r.text
    assert "tokens" not in call(plane.server, "GET", "/api/v1/account/ann", idt).json()


def test_expiry_is_honoured(plane):
    idt = id_token(plane, "ann")
    pat = make(plane, "ann", idt, expiresIn=1)
    assert call(plane.server, "GET", "/api/v1/account", pat).status_code == 200
    time.sleep(2.1)
    refused(plane.server, pat, "expired")
    listed = [t["id"] for t in call(plane.server, "GET", "/api/v1/account/ann", idt).json()["tokens"]]
    assert pat_id(pat) in listed, listed
    # Making another drops the expired one.
    other = make(plane, "ann", idt)
    listed = [t["id"] for t in call(plane.server, "GET", "/api/v1/account/ann", idt).json()["tokens"]]
    assert pat_id(pat) not in listed and pat_id(other) in listed, listed
    call(plane.server, "DELETE", f"/api/v1/account/ann/token/{pat_id(other)}", idt)


def test_groups_are_frozen_when_the_token_is_made(plane):
    as_admin = id_token(plane, "cora", groups=["admins"])
    pat = make(plane, "cora", as_admin, description="made while an admin")
    # cora has left the admins group at the provider since.
    later = id_token(plane, "cora", groups=[])
    assert call(plane.server, "GET", CAN_CREATE, later).json()["value"] == "no"
    assert call(plane.server, "GET", CAN_CREATE, pat).json()["value"] == "yes"
    info = call(plane.server, "GET", "/api/v1/session/userinfo", pat).json()
    assert info["username"] == "cora@example.test" and info["groups"] == ["admins"], info
    call(plane.server, "DELETE", f"/api/v1/account/cora/token/{pat_id(pat)}", later)


def test_without_accounts_update_on_self_creation_is_denied_and_audited_once(plane):
    idt = id_token(plane, "ben")
    want = "permission denied: accounts, update, ben"
    before = len(audit_lines(plane.server, subject="ben", decision="deny"))
    r = call(plane.server, "POST", "/api/v1/account/ben/token", idt, {"description": "x"})
    assert r.status_code == 403 and r.json()["message"].startswith(want), r.text
    wait_until(lambda: len(audit_lines(plane.server, subject="ben", decision="deny")) == before + 1, 5,
               what="the denial's audit line")
    time.sleep(0.3)
    assert len(audit_lines(plane.server, subject="ben", decision="deny")) == before + 1
    # Nor may ben revoke or list ann's tokens by naming her.
    ann = make(plane, "ann", id_token(plane, "ann"))
    r = call(plane.server, "DELETE", f"/api/v1/account/ann/token/{pat_id(ann)}", idt)
    assert r.status_code == 403, r.text
    assert call(plane.server, "GET", "/api/v1/account", ann).status_code == 200


# ---- gRPC ------------------------------------------------------------------------------------

def test_create_list_revoke_over_grpc(plane, tmp_path):
    (tmp_path / "stubs").mkdir()
    _, _, account_pb2, account_grpc = generate_stubs(tmp_path / "stubs")
    stub = account_grpc.AccountServiceStub(grpc.insecure_channel(plane.server.addr))
    idt = [("token", id_token(plane, "erin"))]
    made = stub.CreateToken(account_pb2.CreateTokenRequest(name="erin", expiresIn=600, id="g-1",
                                                           description="over gRPC"), metadata=idt, timeout=10)
    got = stub.GetAccount(account_pb2.GetAccountRequest(name="erin"), metadata=idt, timeout=10)
    assert [(t.id, t.description) for t in got.tokens] == [("g-1", "over gRPC")], got
    mine = stub.ListAccounts(account_pb2.ListAccountRequest(), metadata=[("token", made.token)], timeout=10)
    assert "erin" in [a.name for a in mine.items], mine
    stub.DeleteToken(account_pb2.DeleteTokenRequest(name="erin", id="g-1"), metadata=idt, timeout=10)
    with pytest.raises(grpc.RpcError) as err:
        stub.ListAccounts(account_pb2.ListAccountRequest(), metadata=[("token", made.token)], timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED and "revoked" in err.value.details()


# ---- the administrator's part ----------------------------------------------------------------

def test_a_disabled_and_a_deleted_users_tokens_are_refused_saying_so(plane):
    idt = id_token(plane, "dave")
    pat = make(plane, "dave", idt, description="dave's")
    users = call(plane.server, "GET", "/api/v1/ssousers", plane.admin).json()["items"]
    assert {"name": "dave", "username": "dave@example.test", "state": "active", "tokens": 1} in users, users
    # Only who may `accounts, update, dave`.
    r = call(plane.server, "PUT", "/api/v1/ssousers/dave", id_token(plane, "ann"), {"disabled": True})
    assert r.status_code == 403, r.text
    r = call(plane.server, "PUT", "/api/v1/ssousers/nobody", plane.admin, {"disabled": True})
    assert r.status_code == 404, r.text

    r = call(plane.server, "PUT", "/api/v1/ssousers/dave", plane.admin, {"disabled": True})
    assert r.status_code == 200 and r.json()["state"] == "disabled", r.text
    refused(plane.server, pat, "the SSO user dave is disabled by an administrator")
    r = call(plane.server, "POST", "/api/v1/account/dave/token", idt, {})
    assert r.status_code == 400 and "disabled" in r.json()["message"], r.text
    assert "enabled" not in call(plane.server, "GET", "/api/v1/account/dave", idt).json()  # false: left out

    r = call(plane.server, "PUT", "/api/v1/ssousers/dave", plane.admin, {"disabled": False})
    assert r.status_code == 200 and r.json()["state"] == "active", r.text
    assert call(plane.server, "GET", "/api/v1/account", pat).status_code == 200

    # Deleting needs `accounts, delete`: role:admin's `update` is not enough.
    admin1 = id_token(plane, "admin1", groups=["admins"])
    r = call(plane.server, "DELETE", "/api/v1/ssousers/dave", admin1)
    assert r.status_code == 403 and "accounts, delete, dave" in r.json()["message"], r.text
    r = call(plane.server, "DELETE", "/api/v1/ssousers/dave", plane.admin)
    assert r.status_code == 200, r.text
    refused(plane.server, pat, "the SSO user dave was deleted by an administrator")
    users = call(plane.server, "GET", "/api/v1/ssousers", plane.admin).json()["items"]
    assert {"name": "dave", "username": "dave@example.test", "state": "deleted"} in users, users
    # Signed in again, dave may start over; the old token stays refused.
    again = make(plane, "dave", id_token(plane, "dave"))
    assert call(plane.server, "GET", "/api/v1/account", again).status_code == 200
    refused(plane.server, pat, "was deleted")


# ---- CLIs ------------------------------------------------------------------------------------

def test_tiphys_cli_generates_lists_and_deletes(plane):
    conn = ["--server", plane.server.addr, "--plaintext", "--auth-token", id_token(plane, "frank")]
    r = cli("account", "generate-token", "-e", "1h", "-d", "from the CLI", "--id", "cli-1", *conn)
    assert r.returncode == 0, r.stderr
    pat = r.stdout.strip()
    assert call(plane.server, "GET", "/api/v1/account", pat).status_code == 200
    r = cli("account", "list-tokens", *conn)
    assert r.returncode == 0 and re.search(r"cli-1 .* from the CLI", r.stdout), (r.stdout, r.stderr)
    r = cli("account", "delete-token", "cli-1", *conn)
    assert r.returncode == 0, r.stderr
    refused(plane.server, pat, "revoked")
    r = cli("account", "list-tokens", *conn)
    assert r.returncode == 0 and "NONE" in r.stdout, r.stdout


def test_tiphys_cli_disables_enables_and_deletes_an_sso_user(plane):
    pat = make(plane, "erin", id_token(plane, "erin"), description="erin's")
    admin = ["--server", plane.server.addr, "--plaintext", "--auth-token", plane.admin]
    r = cli("account", "list-sso-users", *admin)
    assert r.returncode == 0 and re.search(r"^erin\s+erin@example.test\s+active\s+1$", r.stdout, re.M), r.stdout
    r = cli("account", "disable-sso-user", "erin", *admin)
    assert (r.returncode, r.stdout) == (0, "SSO user 'erin' is disabled\n"), (r.stdout, r.stderr)
    refused(plane.server, pat, "the SSO user erin is disabled")
    r = cli("account", "enable-sso-user", "erin", *admin)
    assert r.returncode == 0 and "active" in r.stdout, r.stderr
    assert call(plane.server, "GET", "/api/v1/account", pat).status_code == 200
    # Not someone who may not update erin; nor an unknown user.
    r = cli("account", "disable-sso-user", "erin", "--server", plane.server.addr, "--plaintext",
            "--auth-token", id_token(plane, "ann"))
    assert r.returncode != 0 and "permission denied: accounts, update, erin" in r.stderr, r.stderr
    r = cli("account", "delete-sso-user", "nobody", *admin)
    assert r.returncode != 0 and "SSO user nobody not found" in r.stderr, r.stderr
    r = cli("account", "delete-sso-user", "erin", *admin)
    assert (r.returncode, r.stdout) == (0, "SSO user 'erin' deleted\n"), (r.stdout, r.stderr)
    refused(plane.server, pat, "the SSO user erin was deleted")


def test_upstream_argocd_cli_generate_token(plane, tmp_path):
    from argocdkit import ArgoCli  # noqa: PLC0415
    argocd = ArgoCli(tmp_path, "--server", plane.server.addr, "--plaintext",
                     "--auth-token", id_token(plane, "frank"))
    pat = argocd("account", "generate-token", "-e", "1h").stdout.strip()
    info = call(plane.server, "GET", "/api/v1/session/userinfo", pat).json()
    assert info["loggedIn"] and info["username"] == "frank@example.test", info
    listed = argocd.json("account", "get")
    assert [t["id"] for t in listed["tokens"]] == [pat_id(pat)], listed
    argocd("account", "delete-token", pat_id(pat))
    refused(plane.server, pat, "revoked")


# ---- the switch (last: it changes the module's server) ----------------------------------------

def test_the_switch_off_refuses_creation_and_use(plane):
    idt = id_token(plane, "ann")
    pat = make(plane, "ann", idt)
    plane.config.update_cm({SWITCH: "false"})
    try:
        wait_until(lambda: call(plane.server, "GET", "/api/v1/account", pat).status_code == 401, 10,
                   what="the switch off in force")
        refused(plane.server, pat, f"personal access tokens are turned off on this server ({SWITCH}")
        r = call(plane.server, "POST", "/api/v1/account/ann/token", idt, {})
        assert r.status_code == 400 and SWITCH in r.json()["message"], r.text
    finally:
        plane.config.update_cm({SWITCH: "true"})
    wait_until(lambda: call(plane.server, "GET", "/api/v1/account", pat).status_code == 200, 10,
               what="the switch on again")


# ---- replicas --------------------------------------------------------------------------------

def test_a_revocation_is_in_force_at_once_on_a_second_replica(tmp_path, servers, config_dir, etcd):
    sso = setup_sso(tmp_path, servers, lambda cm: config_dir(cm={**cm, SWITCH: "true"}),
                    rbac=RBAC, server_args=etcd.flags("/pats/"))
    a = sso.server
    b = servers.start(*a.args)

    class Plane:
        provider = sso.provider

    idt = id_token(Plane, "ann")
    r = call(a, "POST", "/api/v1/account/ann/token", idt, {"description": "replicas"})
    assert r.status_code == 200, r.text
    pat = r.json()["token"]
    wait_until(lambda: call(b, "GET", "/api/v1/account", pat).status_code == 200, 10, what="B takes the token")
    assert call(a, "DELETE", f"/api/v1/account/ann/token/{pat_id(pat)}", idt).status_code == 200
    # At once: B's very next request is refused.
    refused(b, pat, "has been revoked")


def test_the_extension_is_in_the_openapi_document(plane):
    doc = session().get(plane.server.url("/swagger.json"), timeout=10).json()
    assert {"get"} <= doc["paths"]["/api/v1/ssousers"].keys(), doc["paths"].get("/api/v1/ssousers")
    assert {"put", "delete"} <= doc["paths"]["/api/v1/ssousers/{name}"].keys()
    schemas = doc["components"]["schemas"]
    for name in ("accountCreateTokenRequest", "accountToken"):
        assert "description" in schemas[name]["properties"], schemas[name]
    assert {"name", "username", "state", "tokens"} <= schemas["accountSsoUser"]["properties"].keys()


# ---- several providers -----------------------------------------------------------------------

def test_among_several_providers_a_token_is_its_providers_user(tmp_path, servers, config_dir):
    import json  # noqa: PLC0415

    from test_sso_providers import entry, start_plane  # noqa: PLC0415
    policy = "".join(f"p, {u}, accounts, update, {u}, allow\np, {u}, accounts, get, {u}, allow\n"
                     for u in ("a:ann", "b:ann"))
    providers = lambda a, b: {"tiphys.oidc.providers": json.dumps([entry("a", a), entry("b", b)]),  # noqa: E731
                              SWITCH: "true"}
    plane = start_plane(tmp_path, servers, config_dir, cm=providers, rbac_policy=policy)

    def idt(provider):
        return provider.sign("rs256", provider.claims(sub="ann", email="ann@example.test", groups=["devs"])).strip()

    at_a, at_b = idt(plane.a), idt(plane.b)
    pat = make(plane, "a:ann", at_a, description="a's")
    info = call(plane.server, "GET", "/api/v1/session/userinfo", pat).json()
    assert info == {"loggedIn": True, "username": "ann@example.test", "iss": plane.a.issuer,
                    "groups": ["a:devs"]}, info
    # The same `sub` at provider b is another user: it neither sees nor revokes a's token.
    assert "tokens" not in call(plane.server, "GET", "/api/v1/account/b:ann", at_b).json()
    r = call(plane.server, "DELETE", f"/api/v1/account/a:ann/token/{pat_id(pat)}", at_b)
    assert r.status_code == 403 and "accounts, update, a:ann" in r.json()["message"], r.text
    assert call(plane.server, "GET", "/api/v1/account", pat).status_code == 200
    # Provider a removed: its users' tokens stop working.
    plane.config.update_cm({"tiphys.oidc.providers": json.dumps([entry("b", plane.b)])})
    wait_until(lambda: call(plane.server, "GET", "/api/v1/account", pat).status_code == 401, 10,
               what="provider a gone")
    refused(plane.server, pat, "no longer configured")
