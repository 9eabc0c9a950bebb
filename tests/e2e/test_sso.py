"""Single sign-on against a real OpenID Connect provider (npm oidc-provider on loopback): the
dashboard login driven by a browser-less user agent, ID tokens as bearer tokens, groups in RBAC,
every forged or misdirected token refused (SEC-01, SEC-02) even with anonymous access on, state
and nonce rules (SEC-04), nothing reflected (SEC-05, SEC-06), open redirects refused, logout, key
rotation, a provider behind TLS with a private CA (SEC-03), a provider that is down, and the
settings an anonymous caller sees (SEC-19).
"""

import http.client
import json
import re
import subprocess
import time
import urllib.parse as up

import pytest

from authkit import ADMIN_PW, login_token, manifest, wait_until
from conftest import cli, free_port
from oidckit import Provider, api, client_token, oidc_config, query, session, walk
from oidckit import cli_sso_login as oidckit_cli_sso_login

SECRET = {"oidc.clientSecret": "argo-cd-secret"}
RBAC = {"policy.csv": "g, admins, role:admin\n", "scopes": "[groups]"}


def write_rbac(config, data):
    config.write_raw("argocd-rbac-cm.yaml", manifest("ConfigMap", "argocd-rbac-cm", data))


def settings(server, **kw):
    return session().get(server.url("/api/v1/settings"), timeout=10, **kw).json()


def enable_sso(config, server, provider, cm=None, **extra):
    """Turns SSO on by editing argocd-cm while the server runs; waits until it is in force."""
    config.write(secret={**config.secret, **SECRET})
    changes = {"url": server.url(""), "oidc.config": oidc_config(provider, **extra)}
    changes.update(cm or {})
    config.update_cm(changes)
    wait_until(lambda: settings(server).get("oidcConfig", {}).get("issuer") == provider.issuer
               and settings(server).get("url") == server.url(""), 10, what="SSO settings in force")


class Sso:
    def __init__(self, server, provider, config, cli_port=None):
        self.server, self.provider, self.config, self.cli_port = server, provider, config, cli_port

    def login(self, login="alice", return_url="/applications"):
        """The whole dashboard login; returns (agent, callback response)."""
        agent = session()
        start = self.server.url("/auth/login?" + up.urlencode({"return_url": return_url}))
        callback = walk(agent, start, login, lambda u: u.startswith(self.server.url("/auth/callback")))
        r = agent.get(callback, allow_redirects=False, timeout=15)
        return agent, r

    def callback_url(self, agent, login="alice"):
        start = self.server.url("/auth/login")
        return walk(agent, start, login, lambda u: u.startswith(self.server.url("/auth/callback")))


def setup_sso(tmp_path, servers, config_dir, cm=None, rbac=RBAC, tls=None, id_token_ttl=None, server_args=(),
              provider_args=None, **extra):
    """A server (started with `server_args` too) with SSO on through a new provider."""
    config = config_dir(cm=cm or {})
    write_rbac(config, rbac)
    server = servers.start("--insecure", *server_args, config=config)
    cli_port = free_port()
    provider = servers.also_stop(Provider(tmp_path / f"oidc-{server.port}",
                        [server.url("/auth/callback"), f"http://localhost:{cli_port}/auth/callback"],
                        tls=tls, id_token_ttl=id_token_ttl, **(provider_args or {})))
    enable_sso(config, server, provider, **extra)
    return Sso(server, provider, config, cli_port)


@pytest.fixture(scope="module")
def sso(tmp_path_factory, module_servers, module_config):
    config = module_config(cm={"users.anonymous.enabled": "true"})
    write_rbac(config, RBAC)
    server = module_servers.start("--insecure", config=config)
    # A keep-alive connection opened before SSO is switched on must survive the change.
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("GET", "/api/version")
    assert conn.getresponse().read()
    cli_port = free_port()
    provider = Provider(tmp_path_factory.mktemp("oidc"),
                        [server.url("/auth/callback"), f"http://localhost:{cli_port}/auth/callback"])
    enable_sso(config, server, provider)
    conn.request("GET", "/api/v1/settings")
    reply = conn.getresponse()
    assert reply.status == 200 and json.loads(reply.read())["oidcConfig"]["issuer"] == provider.issuer
    conn.close()
    yield Sso(server, provider, config, cli_port)
    provider.stop()


# ---- settings (SEC-19) ----------------------------------------------------------------------

def test_anonymous_settings_are_exactly_these_fields(sso):
    body = settings(sso.server)
    assert sorted(body) == ["appLabelKey", "googleAnalytics", "help", "kustomizeOptions", "oidcConfig",
                            "syncWithReplaceAllowed", "url"]
    assert body["oidcConfig"] == {
        "name": "Test IdP", "issuer": sso.provider.issuer, "clientID": "argo-cd", "cliClientID": "argo-cd-cli",
        "scopes": ["openid", "profile", "email", "groups", "offline_access"]}
    raw = session().get(sso.server.url("/api/v1/settings"), timeout=10).text
    assert "argo-cd-secret" not in raw and "clientSecret" not in raw


# ---- dashboard login ------------------------------------------------------------------------

def test_dashboard_login_starts_a_small_server_side_session(sso):
    agent = session()
    r = agent.get(sso.server.url("/auth/login?return_url=/applications"), allow_redirects=False, timeout=10)
    assert r.status_code == 303
    auth = query(r.headers["Location"])
    assert r.headers["Location"].startswith(sso.provider.issuer + "/auth?")
    assert auth["code_challenge_method"] == "S256" and len(auth["code_challenge"]) == 43
    assert len(auth["state"]) >= 22 and len(auth["nonce"]) >= 22  # >= 128 bits
    assert auth["redirect_uri"] == sso.server.url("/auth/callback") and auth["client_id"] == "argo-cd"
    state_cookie = r.headers["Set-Cookie"]
    assert state_cookie.startswith("argocd.oauthstate=") and "HttpOnly" in state_cookie
    assert "Max-Age=300" in state_cookie and "SameSite=Lax" in state_cookie

    agent, r = sso.login("admin1")
    assert r.status_code == 303 and r.headers["Location"] == "/applications", (r.status_code, r.text)
    set_cookies = r.raw.headers.getlist("Set-Cookie")
    token_cookie = next(c for c in set_cookies if c.startswith("argocd.token="))
    assert "HttpOnly" in token_cookie and "SameSite=Lax" in token_cookie
    assert len(token_cookie) < 400, token_cookie
    assert any(c.startswith("argocd.oauthstate=;") and "Max-Age=0" in c for c in set_cookies)
    info = agent.get(sso.server.url("/api/v1/session/userinfo"), timeout=10).json()
    assert info == {"loggedIn": True, "username": "admin1@example.test", "iss": sso.provider.issuer,
                    "groups": ["devs", "admins"]}


def test_hundreds_of_groups_keep_the_cookie_small(sso):
    agent, r = sso.login("many1")
    assert r.status_code == 303
    cookies = [c for c in r.raw.headers.getlist("Set-Cookie") if c.startswith("argocd.token")]
    assert len(cookies) == 1 and len(cookies[0]) < 400, cookies
    info = agent.get(sso.server.url("/api/v1/session/userinfo"), timeout=10).json()
    assert len(info["groups"]) == 401


def test_groups_decide_rbac(sso):
    can = "/api/v1/account/can-i/projects/create/p1"
    admin, _ = sso.login("admin2")
    alice, _ = sso.login("alice")
    assert admin.get(sso.server.url(can), timeout=10).json() == {"value": "yes"}
    assert alice.get(sso.server.url(can), timeout=10).json() == {"value": "no"}


def test_logout_ends_the_session_and_goes_to_the_providers_end_session(sso):
    agent, _ = sso.login("bob")
    cookie = agent.cookies.get("argocd.token")
    r = agent.get(sso.server.url("/auth/logout"), allow_redirects=False, timeout=10)
    assert r.status_code == 303
    location = r.headers["Location"]
    assert location.startswith(sso.provider.issuer + "/session/end?id_token_hint=")
    assert query(location)["post_logout_redirect_uri"] == sso.server.url("/")
    assert any(c.startswith("argocd.token=;") and "Max-Age=0" in c for c in r.raw.headers.getlist("Set-Cookie"))
    # The old cookie is dead on the server, not only in this browser.
    r = api(sso.server, "/api/v1/applications", cookie=cookie)
    assert r.status_code == 401, r.text
    # The provider accepts the logout request it was sent to (its client knows the redirect).
    r = agent.get(location, allow_redirects=False, timeout=10)
    assert r.status_code == 200, r.text[:300]


# ---- state, nonce, replay (SEC-04) ----------------------------------------------------------

BAD_STATE = "this login is unknown, expired or was already used; start the login again\n"


def test_a_callback_works_once_and_only_in_the_browser_that_started_it(sso):
    victim = session()
    callback = sso.callback_url(victim)
    # Another browser (no state cookie) cannot use it. The refusal keeps nothing (a state the
    # server cannot authenticate is never written anywhere), so the victim's login goes on.
    r = session().get(callback, allow_redirects=False, timeout=10)
    assert (r.status_code, r.text) == (400, BAD_STATE)
    assert any(c.startswith("argocd.oauthstate=;") and "Max-Age=0" in c for c in r.raw.headers.getlist("Set-Cookie"))
    cookie = victim.cookies.get("argocd.oauthstate", path="/auth")
    r = victim.get(callback, allow_redirects=False, timeout=10)
    assert r.status_code == 303, (r.status_code, r.text)
    # Replayed, whether the browser dropped the cleared cookie or an attacker kept a copy.
    r = victim.get(callback, allow_redirects=False, timeout=10)
    assert (r.status_code, r.text) == (400, BAD_STATE)
    r = session().get(callback, allow_redirects=False, timeout=10, headers={"Cookie": f"argocd.oauthstate={cookie}"})
    assert (r.status_code, r.text) == (400, BAD_STATE)
    assert not [c for c in r.raw.headers.getlist("Set-Cookie") if c.startswith("argocd.token=")]


def test_the_state_cookie_is_sealed_and_any_change_to_it_is_refused(sso):
    """The cookie carries the login (state, PKCE verifier, nonce, return URL) sealed: nothing in
    it is readable, a changed byte fails, and a failed attempt keeps nothing."""
    agent = session()
    callback = sso.callback_url(agent)
    q = query(callback)
    cookie = agent.cookies.get("argocd.oauthstate", path="/auth")
    assert q["state"] not in cookie and "applications" not in cookie
    assert len(cookie) < 1000, len(cookie)
    for i in (0, 1, 40, len(cookie) // 2, len(cookie) - 1):
        flipped = cookie[:i] + ("A" if cookie[i] != "A" else "B") + cookie[i + 1:]
        r = session().get(callback, allow_redirects=False, timeout=10,
                          headers={"Cookie": f"argocd.oauthstate={flipped}"})
        assert (r.status_code, r.text) == (400, BAD_STATE), i
    for junk in ("", "x", cookie[:-10], cookie + "AAAA", "A" * 3000):
        r = session().get(callback, allow_redirects=False, timeout=10,
                          headers={"Cookie": f"argocd.oauthstate={junk}"})
        assert (r.status_code, r.text) == (400, BAD_STATE), junk[:20]
    # Another login's genuine cookie does not carry this state.
    other = session()
    sso.callback_url(other)
    r = session().get(callback, allow_redirects=False, timeout=10,
                      headers={"Cookie": f"argocd.oauthstate={other.cookies.get('argocd.oauthstate', path='/auth')}"})
    assert (r.status_code, r.text) == (400, BAD_STATE)
    # After all that, the genuine cookie still completes the login, once.
    r = agent.get(callback, allow_redirects=False, timeout=10)
    assert r.status_code == 303, (r.status_code, r.text)
    r = agent.get(callback, allow_redirects=False, timeout=10, headers={"Cookie": f"argocd.oauthstate={cookie}"})
    assert (r.status_code, r.text) == (400, BAD_STATE)


def test_the_longest_return_url_fits_the_state_cookie(sso):
    long = "/applications?" + "q=" + "a" * (2048 - len("/applications?q="))
    assert len(long) == 2048
    agent, r = sso.login("alice", return_url=long)
    assert r.status_code == 303 and r.headers["Location"] == long, (r.status_code, r.text)
    start = agent.seen[0]
    state_cookie = next(c for c in start.raw.headers.getlist("Set-Cookie") if c.startswith("argocd.oauthstate="))
    assert len(state_cookie) <= 4093, len(state_cookie)
    r = session().get(sso.server.url("/auth/login?" + up.urlencode({"return_url": long + "a"})),
                      allow_redirects=False, timeout=10)
    assert r.status_code == 400


def test_a_tampered_state_or_cookie_is_refused(sso):
    agent = session()
    callback = sso.callback_url(agent)
    q = query(callback)
    tampered = callback.replace(q["state"], q["state"][:-1] + ("A" if q["state"][-1] != "A" else "B"))
    r = agent.get(tampered, allow_redirects=False, timeout=10)
    assert (r.status_code, r.text) == (400, BAD_STATE)

    agent = session()
    callback = sso.callback_url(agent)
    agent.cookies.set("argocd.oauthstate", "forged-binding-value", domain="127.0.0.1", path="/auth")
    r = agent.get(callback, allow_redirects=False, timeout=10, headers={})
    assert r.status_code == 400


def test_a_code_from_another_login_does_not_pass(sso):
    """The code of login B with the state of login A: the PKCE verifier of A does not fit."""
    a, b = session(), session()
    ca, cb = sso.callback_url(a), sso.callback_url(b)
    mixed = sso.server.url("/auth/callback?" + up.urlencode({"state": query(ca)["state"], "code": query(cb)["code"]}))
    r = a.get(mixed, allow_redirects=False, timeout=10)
    assert r.status_code in (401, 502), (r.status_code, r.text)
    assert not [c for c in r.raw.headers.getlist("Set-Cookie") if c.startswith("argocd.token=") and "Max-Age=0" not in c]


# ---- nothing reflected (SEC-05, SEC-06), no open redirect -----------------------------------

PAYLOADS = ['<script>alert(1)</script>', '"><img src=x onerror=alert(1)>', "javascript:alert(1)",
            "%3Cscript%3E", "\u202e<svg/onload=alert(1)>"]


@pytest.mark.parametrize("param", ["error", "error_description", "state", "code", "iss", "session_state"])
def test_callback_reflects_no_parameter(sso, param):
    for payload in PAYLOADS:
        params = {"state": "s", "code": "c", param: payload}
        r = session().get(sso.server.url("/auth/callback?" + up.urlencode(params)), allow_redirects=False, timeout=10)
        assert r.status_code in (400, 401), r.status_code
        assert r.headers["Content-Type"] == "text/plain; charset=utf-8"
        assert r.headers["X-Content-Type-Options"] == "nosniff"
        assert "default-src 'none'" in r.headers["Content-Security-Policy"]
        for fragment in ("<", "alert", "javascript", "svg", "%3C"):
            assert fragment not in r.text, (param, payload, r.text)


@pytest.mark.parametrize("target", [
    "https://evil.example/", "//evil.example/x", "/\\evil.example", "http://evil.example@127.0.0.1/",
    "javascript:alert(1)", "http://127.0.0.1:1/", "/a\r\nSet-Cookie: x=1", "<script>alert(1)</script>"])
def test_open_redirects_are_refused(sso, target):
    r = session().get(sso.server.url("/auth/login?" + up.urlencode({"return_url": target})),
                      allow_redirects=False, timeout=10)
    assert r.status_code == 400, (target, r.status_code, r.headers.get("Location"))
    assert "evil" not in r.text and "<" not in r.text and "alert" not in r.text
    assert "Set-Cookie" not in r.headers


def test_same_origin_return_urls_are_kept(sso):
    for target, expected in [("/applications/x?view=tree", "/applications/x?view=tree"),
                             (sso.server.url("/settings"), "/settings")]:
        _, r = sso.login("alice", return_url=target)
        assert (r.status_code, r.headers.get("Location")) == (303, expected)


def test_provider_error_is_not_shown(sso):
    agent = session()
    callback = sso.callback_url(agent)
    state = query(callback)["state"]
    url = sso.server.url("/auth/callback?" + up.urlencode(
        {"error": "access_denied", "error_description": "Your account <b>was</b> locked: call 555", "state": state}))
    r = agent.get(url, allow_redirects=False, timeout=10)
    assert r.status_code == 401
    assert r.text == "the identity provider did not complete the login; start the login again\n"
    r = agent.get(callback, allow_redirects=False, timeout=10)  # the state is gone
    assert r.status_code == 400


# ---- bearer ID tokens (SEC-01, SEC-02) ------------------------------------------------------

def test_cli_id_token_is_a_bearer_token(sso):
    token = client_token(sso.provider, "admin3")
    r = api(sso.server, "/api/v1/session/userinfo", token=token)
    assert r.json() == {"loggedIn": True, "username": "admin3@example.test", "iss": sso.provider.issuer,
                        "groups": ["devs", "admins"]}
    assert api(sso.server, "/api/v1/account/can-i/projects/create/p", token=token).json() == {"value": "yes"}
    # The web client's token is accepted too (audience argo-cd).
    web = client_token(sso.provider, "alice", client_id="argo-cd", secret="argo-cd-secret")
    assert api(sso.server, "/api/v1/session/userinfo", token=web).json()["username"] == "alice@example.test"


def test_anonymous_access_is_on_for_requests_without_a_token(sso):
    assert api(sso.server, "/api/v1/applications").status_code == 200


def forged(provider, case):
    c = provider.claims
    now = int(time.time())
    return {
        "alg none": lambda: provider.sign("none", c()),
        "HS256 with the PEM public key": lambda: provider.sign("hs256-pem", c()),
        "HS256 with the modulus": lambda: provider.sign("hs256-n", c()),
        "expired": lambda: provider.sign("rs256", c(iat=now - 7200, exp=now - 3600)),
        "not yet valid": lambda: provider.sign("rs256", c(nbf=now + 3600, iat=now + 3600, exp=now + 7200)),
        "foreign issuer": lambda: provider.sign("rs256", c(iss="https://evil.example")),
        "issuer with a trailing slash": lambda: provider.sign("rs256", c(iss=provider.issuer + "/")),
        "wrong audience": lambda: provider.sign("rs256", c(aud="other-app")),
        "wrong audiences in a list": lambda: provider.sign("rs256", c(aud=["x", "y"])),
        "no audience": lambda: provider.sign("rs256", c(aud=None)),
        "no expiry": lambda: provider.sign("rs256", c(exp=None)),
        "tampered payload": lambda: tamper(provider.sign("rs256", c(groups=["devs"]))),
        "signature stripped": lambda: provider.sign("rs256", c()).rsplit(".", 1)[0] + ".",
    }[case]()


def tamper(token):
    import base64  # noqa: PLC0415
    h, p, s = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)))
    claims["groups"] = ["admins"]
    p = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{h}.{p}.{s}"


BAD_CASES = ["alg none", "HS256 with the PEM public key", "HS256 with the modulus", "expired", "not yet valid",
             "foreign issuer", "issuer with a trailing slash", "wrong audience", "wrong audiences in a list",
             "no audience", "no expiry", "tampered payload", "signature stripped"]


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_id_tokens_get_401_even_with_anonymous_access(sso, case):
    token = forged(sso.provider, case)
    for path in ("/api/v1/applications", "/api/v1/account/can-i/projects/create/p"):
        r = api(sso.server, path, token=token)
        assert r.status_code == 401, (case, path, r.status_code, r.text)
        assert r.json()["message"].startswith("invalid session: "), r.text
    info = api(sso.server, "/api/v1/session/userinfo", token=token).json()
    assert not info.get("loggedIn") and "mallory" not in json.dumps(info)


def test_a_valid_forgery_control_is_accepted(sso):
    """The forging helper itself works: the same claims, properly signed, pass."""
    token = sso.provider.sign("rs256", sso.provider.claims())
    assert api(sso.server, "/api/v1/session/userinfo", token=token).json()["username"] == "mallory@example.test"


def test_audience_errors_name_both_sides(sso):
    r = api(sso.server, "/api/v1/applications", token=forged(sso.provider, "wrong audience"))
    assert r.json()["message"] == (
        "invalid session: token aud=[\"other-app\"]; accepted=[\"argo-cd\", \"argo-cd-cli\"]")


def test_a_token_the_provider_issued_to_another_app_is_refused(sso):
    token = client_token(sso.provider, "admin4", client_id="other-app", secret="other-secret")
    r = api(sso.server, "/api/v1/applications", token=token)
    assert r.status_code == 401 and "other-app" in r.json()["message"]


# ---- key rotation, provider down, logout URL, TLS (fresh servers) ---------------------------

def test_key_rotation_without_restarting_tiphys(tmp_path, servers, config_dir):
    s = setup_sso(tmp_path, servers, config_dir)
    old = client_token(s.provider, "alice")
    assert api(s.server, "/api/v1/session/userinfo", token=old).json()["loggedIn"]
    s.provider.restart(new_key=True)
    new = client_token(s.provider, "alice")
    # The unknown key makes tiphys fetch the key set again (at most every 5 s).
    wait_until(lambda: api(s.server, "/api/v1/applications", token=new).status_code == 200, 15,
               what="the new key accepted")
    r = api(s.server, "/api/v1/applications", token=old)
    assert r.status_code == 401 and "signing key" in r.json()["message"], r.text
    _, r = s.login("alice")
    assert r.status_code == 303


def test_provider_down_gives_a_clear_error_and_local_logins_still_work(tmp_path, servers, config_dir):
    s = setup_sso(tmp_path, servers, config_dir)
    s.provider.stop()
    time.sleep(0.2)
    r = session().get(s.server.url("/auth/login"), allow_redirects=False, timeout=20)
    assert (r.status_code, r.text) == (502, "the identity provider cannot be reached; try again later\n")
    token = login_token(s.server, "admin", ADMIN_PW)
    assert api(s.server, "/api/v1/applications", token=token).status_code == 200


def test_sso_sessions_end_when_sso_is_removed(tmp_path, servers, config_dir):
    s = setup_sso(tmp_path, servers, config_dir)
    agent, r = s.login("alice")
    assert r.status_code == 303, r.text
    cookie = agent.cookies.get("argocd.token")
    assert api(s.server, "/api/v1/applications", cookie=cookie).status_code == 200
    s.config.update_cm({"oidc.config": None})
    wait_until(lambda: "oidcConfig" not in settings(s.server), 10, what="SSO off")
    r = api(s.server, "/api/v1/applications", cookie=cookie)
    assert r.status_code == 401, r.text
    assert "no longer configured" in r.json()["message"], r.text


def test_logout_url_template_is_filled_in_encoded(tmp_path, servers, config_dir):
    s = setup_sso(tmp_path, servers, config_dir,
                  logoutURL="https://idp.example/logout?id_token_hint={{token}}&return={{logoutRedirectURL}}&a=b")
    agent, _ = s.login("alice")
    r = agent.get(s.server.url("/auth/logout"), allow_redirects=False, timeout=10)
    location = r.headers["Location"]
    assert location.startswith("https://idp.example/logout?id_token_hint=eyJ")
    q = query(location)
    assert q["return"] == s.server.url("/") and q["a"] == "b"
    assert "&return=http%3A%2F%2F127.0.0.1%3A" in location


def test_user_info_groups_join_the_id_token_groups(tmp_path, servers, config_dir):
    s = setup_sso(tmp_path, servers, config_dir, enableUserInfoGroups=True, userInfoPath="/me")
    agent, r = s.login("alice")
    assert r.status_code == 303
    info = agent.get(s.server.url("/api/v1/session/userinfo"), timeout=10).json()
    assert info["groups"] == ["devs", "from-userinfo"]


def make_ca(tmp_path):
    """A private CA and a certificate for 127.0.0.1 signed by it (openssl)."""
    d = tmp_path / "pki"
    d.mkdir()

    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
        "-subj", "/CN=tiphys test CA")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "idp.key", "-out", "idp.csr", "-subj", "/CN=127.0.0.1")
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    run("x509", "-req", "-in", "idp.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out",
        "idp.crt", "-days", "2", "-extfile", "ext.cnf")
    return d


def test_tls_provider_needs_root_ca_or_explicit_skip(tmp_path, servers, config_dir):
    pki = make_ca(tmp_path)
    ca = (pki / "ca.crt").read_text()
    s = setup_sso(tmp_path, servers, config_dir, tls=(pki / "idp.crt", pki / "idp.key"), rootCA=ca)
    token = client_token(s.provider, "admin5", verify=str(pki / "ca.crt"))
    # With rootCA: discovery, keys and code exchange all work.
    assert api(s.server, "/api/v1/session/userinfo", token=token).json()["loggedIn"]
    agent = session(verify=str(pki / "ca.crt"))
    callback = walk(agent, s.server.url("/auth/login"), "admin5", lambda u: u.startswith(s.server.url("/auth/")) and "code=" in u)
    assert agent.get(callback, allow_redirects=False, timeout=15).status_code == 303

    # Without rootCA: the same provider is not trusted, for login and for API tokens alike.
    s.config.update_cm({"oidc.config": oidc_config(s.provider)})
    wait_until(lambda: api(s.server, "/api/v1/session/userinfo", token=token).json().get("loggedIn") is None, 10,
               what="the provider distrusted")
    r = api(s.server, "/api/v1/applications", token=token)
    assert r.status_code == 401, r.text
    # A fixed text for the unauthenticated caller; the details go to the server's log.
    assert r.json()["message"] == "invalid session: the identity provider cannot be reached; the token cannot be verified now", r.text
    r = session().get(s.server.url("/auth/login"), allow_redirects=False, timeout=20)
    assert r.status_code == 502
    assert "certificate" in s.server.logs() or "UnknownIssuer" in s.server.logs()

    # Skip-verify only when it is asked for by name.
    s.config.update_cm({"oidc.tls.insecure.skip.verify": "true"})
    wait_until(lambda: api(s.server, "/api/v1/session/userinfo", token=token).json().get("loggedIn"), 10,
               what="skip-verify in force")


def test_sso_without_url_refuses_to_start(tmp_path, config_dir):
    from authkit import run_server_expecting_exit  # noqa: PLC0415
    config = config_dir(cm={"oidc.config": json.dumps({"issuer": "https://idp.example", "clientID": "x"})})
    res = run_server_expecting_exit(tmp_path, "--config-dir", str(config.path))
    assert res.returncode != 0
    assert "oidc.config is set in argocd-cm, but the server's external URL is not" in res.stderr, res.stderr


def test_bad_oidc_config_is_refused_with_its_location(tmp_path, config_dir):
    from authkit import run_server_expecting_exit  # noqa: PLC0415
    config = config_dir(cm={"url": "http://127.0.0.1:1", "oidc.config": json.dumps(
        {"issuer": "https://idp.example", "clientID": "x", "clientSecret": "$nope"})})
    res = run_server_expecting_exit(tmp_path, "--config-dir", str(config.path))
    assert res.returncode != 0
    assert "oidc.config: clientSecret refers to $nope, which argocd-secret does not have" in res.stderr, res.stderr


# ---- CLI: tiphys login --sso -----------------------------------------------------------------

def cli_sso_login(s, config_path, login):
    """`tiphys login --sso` with the browser's part played by a user agent; returns its stdout."""
    return oidckit_cli_sso_login(s.server, s.cli_port, s.provider.issuer, config_path, login)


def test_cli_sso_login_then_api_calls_then_logout(sso, tmp_path):
    config_path = tmp_path / "cli-config"
    out = cli_sso_login(sso, config_path, "admin6")
    assert "'admin6@example.test' logged in successfully" in out, out
    saved = config_path.read_text()
    assert "auth-token: eyJ" in saved and "refresh-token:" in saved
    res = cli("--config", str(config_path), "account", "get-user-info", "-o", "json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert (info["loggedIn"], info["username"], info["iss"]) == (True, "admin6@example.test", sso.provider.issuer)
    assert info["groups"] == ["devs", "admins"]
    res = cli("--config", str(config_path), "logout")
    assert res.returncode == 0, res.stderr
    saved = config_path.read_text()
    assert "auth-token" not in saved and "refresh-token" not in saved


def test_cli_refreshes_an_expired_id_token(tmp_path, servers, config_dir):
    s = setup_sso(tmp_path, servers, config_dir, id_token_ttl=5)
    config_path = tmp_path / "cli-config"
    cli_sso_login(s, config_path, "alice")
    saved = config_path.read_text()
    first = re.search(r"auth-token: (\S+)", saved).group(1)
    first_refresh = re.search(r"refresh-token: (\S+)", saved).group(1)
    time.sleep(1.1)  # a new token issued in a later second differs from the old one
    # The ID token lives 5 s; within 10 s of its expiry the CLI redeems the refresh token first.
    res = cli("--config", str(config_path), "account", "get-user-info", "-o", "json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["username"] == "alice@example.test"
    saved = config_path.read_text()
    second = re.search(r"auth-token: (\S+)", saved).group(1)
    assert second != first and second.startswith("eyJ"), res.stderr
    # The provider rotates refresh tokens of public clients: the new one is saved.
    assert re.search(r"refresh-token: (\S+)", saved).group(1) != first_refresh


def test_cli_sso_against_a_server_without_sso(tiphys, tmp_path):
    server = tiphys("--insecure")
    res = cli("--config", str(tmp_path / "c"), "login", server.addr, "--plaintext", "--sso",
              "--sso-launch-browser=false")
    assert res.returncode != 0
    assert "the server has no single sign-on configured" in res.stderr, res.stderr



# ---- long-lived streams with an ID token ------------------------------------------------------

def test_a_watch_opened_with_an_id_token_streams_live_events_and_ends_at_expiry(sso, watches):
    """A watch authenticated by a provider ID token is revalidated as every other caller is (by
    the same check): it keeps streaming past its snapshot, and ends when the token expires."""
    from appkit import Api, RestWatch, app_body, uniq  # noqa: PLC0415
    ttl = 15
    now = int(time.time())
    token = sso.provider.sign("rs256", sso.provider.claims(iat=now, exp=now + ttl))
    admin = Api(sso.server, token)  # group admins: role:admin
    run = uniq("sso-watch")
    admin.must_create(app_body(uniq("sso-a"), labels={"run": run}))
    w = watches.add(RestWatch(sso.server, token, params={"selector": f"run={run}"}))
    assert w.event()[0] == "ADDED"  # the snapshot
    admin.must_create(app_body(uniq("sso-b"), labels={"run": run}))
    assert w.event()[0] == "ADDED", "a live event after the snapshot"
    frames = w.until_end(timeout=ttl + 10)
    kind, err = frames[-1]
    assert kind == "error" and err["grpc_code"] == 16, frames
    assert "expired" in err["message"], err
    assert time.time() >= now + ttl - 1, "ended at the token's expiry, not before"
