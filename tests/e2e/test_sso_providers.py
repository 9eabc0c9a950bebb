"""Several OpenID Connect providers at once (`tiphys.oidc.providers` in argocd-cm), against two
real providers (npm oidc-provider on two loopback ports, two issuers): a dashboard login through
each, their ID tokens as bearer tokens, `policy.csv` subjects and groups qualified by provider
(`<name>:<value>`), the same `sub` at two providers being two users, `tiphys login --sso
--provider`, logout at the session's own provider, a callback that comes back from another
provider, a provider that is down while the other still logs in, an unknown `provider=`, a token
of an issuer not listed, bad lists refused (at start and at reload, the last good providers kept),
and `oidc.config` beside the list as the provider named `default`.
"""

import base64
import hashlib
import json
import re
import secrets
import urllib.parse as up
from types import SimpleNamespace

import pytest

from authkit import ADMIN_PW, login_token, manifest, run_server_expecting_exit, wait_until
from conftest import cli, free_port
from oidckit import Provider, api, cli_sso_login, client_token, query, session, walk

SECRET = {"oidc.clientSecret": "argo-cd-secret"}
# `a:admins` is provider a's group; `alice` unqualified names no SSO user once the list is set.
POLICY = ("g, a:admins, role:admin\n"
          "p, a:alice, projects, create, *, allow\n"
          "p, b:bob, projects, create, *, allow\n"
          "p, alice, projects, create, *, allow\n")
CAN = "/api/v1/account/can-i/projects/create/p1"
UNKNOWN_PROVIDER = ("unknown provider: choose one of the providers this server offers "
                    "(GET /api/v1/settings, ssoProviders)\n")


def entry(name, provider, **extra):
    """One provider of the list, as oidc.config would be written for it."""
    config = {"name": name, "issuer": provider.issuer, "clientID": "argo-cd",
              "clientSecret": "$oidc.clientSecret", "cliClientID": "argo-cd-cli",
              "requestedScopes": ["openid", "profile", "email", "groups", "offline_access"]}
    config.update(extra)
    return config


def settings(server):
    return session().get(server.url("/api/v1/settings"), timeout=10).json()


def can(server, **kw):
    return api(server, CAN, **kw).json().get("value")


class Plane:
    """A server and the two providers it trusts, `a` and `b`."""

    def __init__(self, server, config, a, b, cli_port):
        self.server, self.config, self.a, self.b, self.cli_port = server, config, a, b, cli_port

    def login(self, login, provider=None, agent=None):
        """The whole dashboard login (through `provider`, by name); returns (agent, callback reply)."""
        agent = agent or session()
        params = {"return_url": "/applications"}
        if provider:
            params["provider"] = provider
        start = self.server.url("/auth/login?" + up.urlencode(params))
        callback = walk(agent, start, login, lambda u: u.startswith(self.server.url("/auth/callback")))
        return agent, agent.get(callback, allow_redirects=False, timeout=15)


def start_plane(tmp_path, servers, config_dir, cm=None, rbac_policy=POLICY):
    config = config_dir(cm={})
    config.write_raw("argocd-rbac-cm.yaml", manifest("ConfigMap", "argocd-rbac-cm", {"policy.csv": rbac_policy}))
    server = servers.start("--insecure", config=config)
    cli_port = free_port()
    redirects = [server.url("/auth/callback"), f"http://localhost:{cli_port}/auth/callback"]
    a = servers.also_stop(Provider(tmp_path / "oidc-a", redirects))
    b = servers.also_stop(Provider(tmp_path / "oidc-b", redirects))
    config.write(secret={**config.secret, **SECRET})
    changes = {"url": server.url("")}
    changes.update(cm(a, b) if cm else {"tiphys.oidc.providers": json.dumps([entry("a", a), entry("b", b)])})
    config.update_cm(changes)
    wait_until(lambda: len(settings(server).get("ssoProviders", [])) == 2, 10, what="both providers in force")
    return Plane(server, config, a, b, cli_port)


@pytest.fixture(scope="module")
def plane(tmp_path_factory, module_servers, module_config):
    return start_plane(tmp_path_factory.mktemp("providers"), module_servers, module_config)


def session_cookie(reply):
    cookies = [c for c in reply.raw.headers.getlist("Set-Cookie") if c.startswith("argocd.token=")]
    assert cookies, reply.headers
    return cookies[0].split(";", 1)[0].split("=", 1)[1]


# ---- settings -------------------------------------------------------------------------------

def test_settings_list_every_provider_and_upstream_clients_see_the_first(plane):
    body = settings(plane.server)
    assert [(p["name"], p["issuer"]) for p in body["ssoProviders"]] == [
        ("a", plane.a.issuer), ("b", plane.b.issuer)]
    assert body["oidcConfig"]["issuer"] == plane.a.issuer
    raw = session().get(plane.server.url("/api/v1/settings"), timeout=10).text
    assert "argo-cd-secret" not in raw and "clientSecret" not in raw


# ---- dashboard logins -----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["a", "b"])
def test_dashboard_login_through_each_provider(plane, name):
    provider = {"a": plane.a, "b": plane.b}[name]
    r = session().get(plane.server.url(f"/auth/login?provider={name}"), allow_redirects=False, timeout=10)
    assert r.status_code == 303 and r.headers["Location"].startswith(provider.issuer + "/auth?"), r.headers
    agent, r = plane.login("admin1", provider=name)
    assert r.status_code == 303 and r.headers["Location"] == "/applications", (r.status_code, r.text)
    info = agent.get(plane.server.url("/api/v1/session/userinfo"), timeout=10).json()
    assert info == {"loggedIn": True, "username": "admin1@example.test", "iss": provider.issuer,
                    "groups": [f"{name}:devs", f"{name}:admins"]}
    # a:admins is role:admin; b:admins is nothing.
    assert can(plane.server, cookie=agent.cookies.get("argocd.token")) == ("yes" if name == "a" else "no")


def test_login_without_a_provider_goes_to_the_first(plane):
    r = session().get(plane.server.url("/auth/login"), allow_redirects=False, timeout=10)
    assert r.status_code == 303 and r.headers["Location"].startswith(plane.a.issuer + "/auth?")


def test_an_unknown_provider_is_refused_without_echoing_it(plane):
    for name in ("c", "<script>alert(1)</script>", "default"):
        r = session().get(plane.server.url("/auth/login?" + up.urlencode({"provider": name})),
                          allow_redirects=False, timeout=10)
        assert (r.status_code, r.text) == (400, UNKNOWN_PROVIDER), name
        assert "Set-Cookie" not in r.headers


def test_a_callback_from_another_provider_than_the_login_went_to_is_refused(plane):
    """The login starts at a (state cookie for a); b's answer to an authorization request with that
    state comes back: refused, and no session starts."""
    agent = session()
    r = agent.get(plane.server.url("/auth/login?provider=a"), allow_redirects=False, timeout=10)
    assert r.status_code == 303
    state = query(r.headers["Location"])["state"]
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    params = {"client_id": "argo-cd", "redirect_uri": plane.server.url("/auth/callback"), "response_type": "code",
              "scope": "openid email groups", "state": state, "nonce": "n", "code_challenge": challenge,
              "code_challenge_method": "S256"}
    callback = walk(session(), f"{plane.b.issuer}/auth?{up.urlencode(params)}", "admin1",
                    lambda u: u.startswith(plane.server.url("/auth/callback")))
    assert query(callback)["iss"] == plane.b.issuer  # RFC 9207: the provider names itself
    r = agent.get(callback, allow_redirects=False, timeout=15)
    assert (r.status_code, r.text) == (400, "this login came back from another identity provider than the one "
                                            "it was sent to; start the login again\n")
    assert not [c for c in r.raw.headers.getlist("Set-Cookie") if c.startswith("argocd.token=")]


def test_logout_goes_to_the_sessions_own_provider(plane):
    agent, r = plane.login("alice", provider="b")
    assert r.status_code == 303, r.text
    r = agent.get(plane.server.url("/auth/logout"), allow_redirects=False, timeout=10)
    assert r.status_code == 303 and r.headers["Location"].startswith(plane.b.issuer + "/session/end?"), r.headers
    assert api(plane.server, "/api/v1/applications", cookie=agent.cookies.get("argocd.token")).status_code == 401


# ---- bearer tokens and RBAC -----------------------------------------------------------------

def test_bearer_tokens_of_each_provider_with_qualified_subjects(plane):
    server = plane.server
    for login, at_a, at_b in [("alice", "yes", "no"), ("bob", "no", "yes"), ("carol", "no", "no")]:
        assert can(server, token=client_token(plane.a, login)) == at_a, login
        assert can(server, token=client_token(plane.b, login)) == at_b, login
    info = api(server, "/api/v1/session/userinfo", token=client_token(plane.b, "bob")).json()
    assert (info["iss"], info["groups"]) == (plane.b.issuer, ["b:devs"])


def test_the_same_sub_at_two_providers_is_two_users(plane):
    """alice at b is not alice at a, whatever b's token claims: b cannot mint a's users."""
    alice_a = plane.a.sign("rs256", plane.a.claims(sub="alice", groups=[]))
    alice_b = plane.b.sign("rs256", plane.b.claims(sub="alice", groups=[]))
    posing = plane.b.sign("rs256", plane.b.claims(sub="a:alice", groups=["a:admins", "admins"]))
    assert can(plane.server, token=alice_a) == "yes"
    assert can(plane.server, token=alice_b) == "no"
    assert can(plane.server, token=posing) == "no"
    info = api(plane.server, "/api/v1/session/userinfo", token=posing).json()
    assert info["groups"] == ["b:a:admins", "b:admins"]
    # Dashboard sessions alike: alice's session at b may not create projects.
    agent, r = plane.login("alice", provider="b")
    assert r.status_code == 303
    assert can(plane.server, cookie=agent.cookies.get("argocd.token")) == "no"
    agent, r = plane.login("alice", provider="a")
    assert can(plane.server, cookie=agent.cookies.get("argocd.token")) == "yes"


def test_a_token_of_an_issuer_not_listed_is_refused(plane, tmp_path):
    other = Provider(tmp_path / "oidc-c", [plane.server.url("/auth/callback")])
    try:
        token = client_token(other, "admin1")
    finally:
        other.stop()
    forged = plane.a.sign("rs256", plane.a.claims(iss="https://evil.example"))
    for t in (token, forged):
        r = api(plane.server, "/api/v1/applications", token=t)
        assert r.status_code == 401, r.text
        assert r.json()["message"] == "invalid session: token issuer is not trusted", r.text
    # A token whose signature is another provider's key, with this provider's issuer.
    swapped = plane.b.sign("rs256", plane.b.claims(iss=plane.a.issuer))
    assert api(plane.server, "/api/v1/applications", token=swapped).status_code == 401


# ---- CLI ------------------------------------------------------------------------------------

def test_cli_login_with_a_named_provider(plane, tmp_path):
    config_path = tmp_path / "cli-config"
    out = cli_sso_login(plane.server, plane.cli_port, plane.b.issuer, config_path, "bob", "--provider", "b")
    assert "'bob@example.test' logged in successfully" in out, out
    res = cli("--config", str(config_path), "account", "get-user-info", "-o", "json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert (info["iss"], info["groups"]) == (plane.b.issuer, ["b:devs"])
    res = cli("--config", str(config_path), "account", "can-i", "create", "projects", "p1")
    assert (res.returncode, res.stdout.strip()) == (0, "yes"), res.stderr


def test_cli_device_login_with_a_named_provider(plane, tmp_path):
    from test_sso_device import DeviceLogin, approve  # noqa: PLC0415 (a test module's helpers)
    config_path = tmp_path / "cli-config"
    run = DeviceLogin(SimpleNamespace(server=plane.server, provider=plane.b), config_path, "--provider", "b")
    assert run.code and run.url == f"{plane.b.issuer}/device", run.seen
    assert "Sign-in Success" in approve(run.url, run.code, "bob")
    code, out, err = run.result()
    assert code == 0, err
    assert "'bob@example.test' logged in successfully" in out, out
    res = cli("--config", str(config_path), "account", "get-user-info", "-o", "json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["iss"] == plane.b.issuer


def test_cli_login_with_an_unknown_provider_names_those_there_are(plane, tmp_path):
    res = cli("--config", str(tmp_path / "c"), "login", plane.server.addr, "--plaintext", "--sso",
              "--provider", "c", "--sso-launch-browser=false")
    assert res.returncode == 1, res.stderr
    assert 'the server has no single sign-on provider named "c"; it offers: a, b' in res.stderr, res.stderr


# ---- oidc.config beside the list, a provider down, bad lists --------------------------------

def test_oidc_config_beside_the_list_is_default_and_a_provider_down_leaves_the_other(tmp_path, servers,
                                                                                     config_dir):
    def cm(a, b):
        primary = {k: v for k, v in entry("", a).items() if k != "name"}
        return {"oidc.config": json.dumps({"name": "Corp", **primary}),
                "tiphys.oidc.providers": json.dumps([entry("b", b)])}

    p = start_plane(tmp_path, servers, config_dir, cm=cm, rbac_policy="g, default:admins, role:admin\n")
    body = settings(p.server)
    assert [x["name"] for x in body["ssoProviders"]] == ["default", "b"]
    assert body["oidcConfig"]["name"] == "Corp" and body["oidcConfig"]["issuer"] == p.a.issuer

    # b is down before the server ever reached it: its logins say so; the default provider's
    # logins and tokens go on, and so do local logins.
    token_b = client_token(p.b, "admin1")
    p.b.stop()
    r = session().get(p.server.url("/auth/login?provider=b"), allow_redirects=False, timeout=20)
    assert (r.status_code, r.text) == (502, "the identity provider cannot be reached; try again later\n")
    agent, r = p.login("admin2", provider="default")
    assert r.status_code == 303, r.text
    assert can(p.server, cookie=agent.cookies.get("argocd.token")) == "yes"
    assert can(p.server, token=client_token(p.a, "admin1")) == "yes"
    assert can(p.server, token=login_token(p.server, "admin", ADMIN_PW)) == "yes"
    r = api(p.server, "/api/v1/applications", token=token_b)
    assert r.status_code == 401 and "cannot be reached" in r.json()["message"], (r.status_code, r.text)

    # b is back (its failure is remembered for a few seconds): its token works, as b's user
    # (b:admins is not default:admins).
    p.b.restart()
    wait_until(lambda: can(p.server, token=token_b) == "no", 15, interval=0.5, what="b's token checked again")
    at_b, r = p.login("bob", provider="b")
    assert r.status_code == 303, r.text

    # A list that does not load is refused at reload; the last good providers stay in force.
    before = len(p.server.log.read_text())
    p.config.update_cm({"tiphys.oidc.providers": json.dumps([entry("b", p.b), entry("b", p.b)])})
    wait_until(lambda: "keeping the last good configuration" in p.server.log.read_text()[before:], 10,
               what="the bad list rejected")
    assert "providers[1] (b): the name is used twice (also providers[0])" in p.server.log.read_text()[before:]
    assert api(p.server, "/api/v1/session/userinfo", cookie=at_b.cookies.get("argocd.token")).json()["groups"] == [
        "b:devs"]
    again, r = p.login("bob", provider="b")
    assert r.status_code == 303, r.text
    assert [x["name"] for x in settings(p.server)["ssoProviders"]] == ["default", "b"]


@pytest.mark.parametrize("providers, message", [
    ([{"name": "a", "issuer": "https://a.example", "clientID": "x"},
      {"name": "a", "issuer": "https://b.example", "clientID": "y"}],
     "tiphys.oidc.providers: providers[1] (a): the name is used twice (also providers[0])"),
    ([{"name": "a", "clientID": "x"}], "tiphys.oidc.providers: providers[0] (a): issuer is required"),
    ([{"name": "a", "issuer": "https://a.example"}], "tiphys.oidc.providers: providers[0] (a): clientID is required"),
    ([{"issuer": "https://a.example", "clientID": "x"}], "tiphys.oidc.providers: providers[0]: name is required"),
    ([{"name": "role", "issuer": "https://a.example", "clientID": "x"}],
     'tiphys.oidc.providers: providers[0]: name "role" is reserved'),
    ([{"name": "a", "issuer": "https://a.example", "clientID": "x"},
      {"name": "b", "issuer": "https://a.example", "clientID": "y"}],
     'tiphys.oidc.providers: providers[1] (b): issuer "https://a.example" is also provider "a"\'s'),
])
def test_a_bad_list_is_refused_at_start_with_its_location(tmp_path, config_dir, providers, message):
    config = config_dir(cm={"url": "http://127.0.0.1:1", "tiphys.oidc.providers": json.dumps(providers)})
    res = run_server_expecting_exit(tmp_path, "--config-dir", str(config.path))
    assert res.returncode != 0
    assert message in res.stderr, res.stderr
    assert re.search(r"argocd-cm", res.stderr), res.stderr
