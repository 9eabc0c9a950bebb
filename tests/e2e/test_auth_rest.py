"""Local accounts and sessions over REST against real servers: login, userinfo and logout; the
session cookie (attributes, chunks, clearing); accounts and API keys; the --config-dir files
(startup errors, hot reload, password policy); revocations across restarts; token renewal."""

import json
import re
import subprocess
import time
from urllib.parse import quote

import pytest

from authkit import (ADMIN_PW, ALICE_PW, BOB_PW, CAROL_PW, HASHES, JWT_RE, assert_api_error, bearer,
                     cookie_header, forge, fresh_source, get_accounts, jwt_claims, login, login_claims,
                     login_token, metric, request, run_server_expecting_exit, userinfo, wait_until)

RELOAD_WITHIN = 2.0  # the documented bound for a config change to take effect
SLACK = 0.5  # for the requests that observe it


@pytest.fixture(scope="module")
def std(module_servers, module_config):
    """A plaintext server with the standard accounts, shared by tests that leave it usable."""
    return module_servers.start("--insecure", config=module_config())


@pytest.fixture(scope="module")
def std_tls(module_servers, module_config):
    return module_servers.start(config=module_config())


def names(reply):
    assert reply.status == 200, reply
    return {a["name"]: a for a in reply.json()["items"]}


# ---- login, userinfo, logout ----------------------------------------------------------------

def test_login_userinfo_logout(std):
    r = login(std, "admin", ADMIN_PW)
    assert r.status == 200, r
    assert set(r.json()) == {"token"}
    token = r.json()["token"]
    assert JWT_RE.fullmatch(token)
    assert r.cookie("argocd.token").value == token
    claims = jwt_claims(token)
    assert (claims["iss"], claims["sub"]) == ("argocd", "admin:login")
    assert claims["jti"] and claims["iat"] == claims["nbf"]
    assert claims["exp"] - claims["iat"] == 24 * 3600  # the default session duration
    assert abs(claims["iat"] - time.time()) < 5

    want = {"loggedIn": True, "username": "admin", "iss": "argocd"}
    assert userinfo(std, cookie_header(token)) == want
    assert userinfo(std, bearer(token)) == want
    assert {"admin", "alice", "bob"} <= set(names(get_accounts(std, cookie_header(token))))

    r = request(std, "DELETE", "/api/v1/session", headers=cookie_header(token), content_type="application/json")
    assert r.status == 200, r
    cleared = r.cookie("argocd.token")
    assert cleared is not None and cleared.value == "" and cleared.attrs.get("max-age") == "0", r
    assert cleared.attrs.get("path") == "/"
    # revoked: for REST (either carrier) and for userinfo
    assert_api_error(get_accounts(std, bearer(token)), 401, 16, "revoked")
    assert_api_error(get_accounts(std, cookie_header(token)), 401, 16, "revoked")
    assert userinfo(std, cookie_header(token)) == {}


def test_anonymous_userinfo_is_empty_and_accounts_need_a_session(std):
    assert userinfo(std) == {}
    assert_api_error(get_accounts(std), 401, 16, "no session")


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_bearer_scheme_is_case_insensitive(scheme, std):
    token = login_token(std, "alice", ALICE_PW)
    r = get_accounts(std, {"Authorization": f"{scheme} {token}"})
    assert r.status == 200, r


def test_other_authorization_schemes_carry_no_token(std):
    assert_api_error(get_accounts(std, {"Authorization": "Basic YWRtaW46eA=="}), 401, 16, "no session")
    assert_api_error(get_accounts(std, {"Authorization": "Bearer "}), 401, 16)
    # the gRPC metadata name is not a REST credential
    token = login_token(std, "alice", ALICE_PW)
    assert_api_error(get_accounts(std, {"token": token}), 401, 16, "no session")


def test_login_errors(std):
    src = fresh_source()
    r = login(std, "admin", "wrong-password", source=src)
    assert_api_error(r, 401, 16, "^Invalid username or password$")
    assert r.cookies == []
    assert_api_error(login(std, "admin", "", source=src), 401, 16)
    assert_api_error(request(std, "POST", "/api/v1/session", {"token": "x.y.z"}, source=src), 401, 16,
                     "not supported")
    assert_api_error(login(std, "u" * 33, "x", source=src), 400, 3, "too long")
    assert_api_error(request(std, "POST", "/api/v1/session", "{not json", content_type="application/json",
                             source=src), 400, 3)


# ---- the session cookie -----------------------------------------------------------------------

def test_cookie_attributes_over_plaintext(std):
    c = login(std, "alice", ALICE_PW).cookie("argocd.token")
    assert c.attrs.get("httponly") is True
    assert c.attrs.get("samesite") == "Lax"
    assert c.attrs.get("path") == "/"
    assert "secure" not in c.attrs, c


def test_cookie_is_secure_over_tls(std_tls):
    r = login(std_tls, "alice", ALICE_PW)
    assert r.status == 200, r
    c = r.cookie("argocd.token")
    assert (c.attrs.get("secure"), c.attrs.get("httponly"), c.attrs.get("samesite"), c.attrs.get("path")) == \
        (True, True, "Lax", "/"), c
    # and clearing it keeps the same scope
    r = request(std_tls, "DELETE", "/api/v1/session", headers=cookie_header(c.value), content_type="application/json")
    cleared = r.cookie("argocd.token")
    assert cleared.attrs.get("max-age") == "0" and cleared.attrs.get("secure") is True, r


@pytest.mark.parametrize("mode, trusted, header, secure", [
    ("insecure", "127.0.0.0/8", {"X-Forwarded-Proto": "https"}, True),
    ("insecure", "127.0.0.0/8", {"Forwarded": "for=192.0.2.1;proto=https"}, True),
    ("insecure", "127.0.0.0/8", {}, False),
    ("insecure", "127.0.0.0/8", {"X-Forwarded-Proto": "http"}, False),
    ("insecure", "10.0.0.0/8", {"X-Forwarded-Proto": "https"}, False),  # not a trusted proxy: ignored
    ("tls", "127.0.0.0/8", {"X-Forwarded-Proto": "https"}, True),  # plaintext from a TLS-terminating proxy
])
def test_cookie_secure_behind_a_trusted_proxy(mode, trusted, header, secure, servers, config_dir):
    server = servers.start(*(["--insecure"] if mode == "insecure" else []), "--trusted-proxies", trusted,
                           config=config_dir())
    r = request(server, "POST", "/api/v1/session", {"username": "alice", "password": ALICE_PW}, headers=header,
                plain=True)
    assert r.status == 200, r
    assert ("secure" in r.cookie("argocd.token").attrs) is secure, r


def test_cookie_path_under_rootpath(servers, config_dir):
    server = servers.start("--insecure", "--rootpath", "/argocd", config=config_dir())
    r = request(server, "POST", "/argocd/api/v1/session", {"username": "alice", "password": ALICE_PW})
    assert r.status == 200 and r.cookie("argocd.token").attrs.get("path") == "/argocd", r
    r = request(server, "GET", "/argocd/auth/logout", headers=cookie_header(r.json()["token"]))
    assert (r.status, r.header("location")) == (303, "/argocd/"), r
    assert r.cookie("argocd.token").attrs.get("path") == "/argocd", r


def test_cookie_path_follows_basehref(servers, config_dir):
    server = servers.start("--insecure", "--basehref", "/argo", config=config_dir())
    r = login(server, "alice", ALICE_PW)
    assert r.cookie("argocd.token").attrs.get("path") == "/argo", r
    r = request(server, "GET", "/auth/logout", headers=cookie_header(r.json()["token"]))
    assert r.status == 303 and r.header("location") == "/argo/", r
    assert r.cookie("argocd.token").attrs.get("path") == "/argo", r


def split(token, n):
    size = -(-len(token) // n)
    return [token[i * size:(i + 1) * size] for i in range(n)]


def test_chunks_in_separate_cookie_headers_over_h2c(std):
    """HTTP/2 clients may send each cookie in its own `cookie` field."""
    token = login_token(std, "alice", ALICE_PW)
    a, b = split(token, 2)
    out = subprocess.run(["curl", "-sS", "--max-time", "10", "--http2-prior-knowledge",
                          "-H", f"Cookie: argocd.token=2:{a}", "-H", f"Cookie: argocd.token-1={b}",
                          std.url("/api/v1/session/userinfo")], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"loggedIn": True, "username": "alice", "iss": "argocd"}


def test_chunked_cookie_is_joined(std):
    token = login_token(std, "alice", ALICE_PW)
    a, b = split(token, 2)
    r = get_accounts(std, {"Cookie": f"argocd.token=2:{a}; argocd.token-1={b}"})
    assert r.status == 200, r
    a, b, c = split(token, 3)
    # any order, other cookies around
    assert userinfo(std, {"Cookie": f"x=1; argocd.token-2={c}; argocd.token=3:{a}; argocd.token-1={b}; y=2"}) == \
        {"loggedIn": True, "username": "alice", "iss": "argocd"}
    # a cut-short join is a wrong token, not a valid one
    assert_api_error(get_accounts(std, {"Cookie": f"argocd.token=2:{a}; argocd.token-1={b}"}), 401, 16)


@pytest.mark.parametrize("cookie, message", [
    ("argocd.token=2:{a}", "truncated"),
    ("argocd.token=3:{a}; argocd.token-1={b}", "truncated"),
    ("argocd.token=2:{a}; argocd.token-2={b}", "truncated"),
    ("argocd.token=x:{a}; argocd.token-1={b}", "malformed"),
    ("argocd.token=0:{a}", "malformed"),
    ("argocd.token=99:{a}; argocd.token-1={b}", "malformed"),
    ("argocd.token=2:{a}:{b}", "malformed"),
])
def test_bad_session_cookie_is_401(cookie, message, std):
    token = login_token(std, "alice", ALICE_PW)
    a, b = split(token, 2)
    headers = {"Cookie": cookie.format(a=a, b=b)}
    assert_api_error(get_accounts(std, headers), 401, 16, message)
    assert userinfo(std, headers) == {}


def test_delete_session_clears_every_chunk_sent(std):
    token = login_token(std, "alice", ALICE_PW)
    a, b = split(token, 2)
    r = request(std, "DELETE", "/api/v1/session", headers={"Cookie": f"argocd.token=2:{a}; argocd.token-1={b}"},
                content_type="application/json")
    assert r.status == 200, r
    assert {c.name: (c.value, c.attrs.get("max-age")) for c in r.cookies} == \
        {"argocd.token": ("", "0"), "argocd.token-1": ("", "0")}, r
    assert_api_error(get_accounts(std, bearer(token)), 401, 16, "revoked")


def test_auth_logout_clears_all_chunks_revokes_and_redirects(std):
    token = login_token(std, "alice", ALICE_PW)
    a, b, c = split(token, 3)
    r = request(std, "GET", "/auth/logout",
                headers={"Cookie": f"argocd.token=3:{a}; argocd.token-1={b}; argocd.token-2={c}"})
    assert r.status == 303, r
    assert r.header("location") == "/"
    cleared = {c.name: c for c in r.cookies}
    assert set(cleared) == {"argocd.token", "argocd.token-1", "argocd.token-2"}, r
    for ck in cleared.values():
        assert ck.value == "" and ck.attrs.get("max-age") == "0" and ck.attrs.get("path") == "/", ck
    assert_api_error(get_accounts(std, bearer(token)), 401, 16, "revoked")
    # without any cookie, or with an expired one, it still clears argocd.token and redirects
    now = int(time.time())
    for headers in ({}, cookie_header(forge(login_claims("alice", iat=now - 99, nbf=now - 99, exp=now - 9)))):
        r = request(std, "GET", "/auth/logout", headers=headers)
        assert r.status == 303 and r.cookie("argocd.token").attrs.get("max-age") == "0", r


@pytest.mark.parametrize("method, path", [("DELETE", "/api/v1/session"), ("GET", "/auth/logout")])
def test_logout_with_a_token_due_for_renewal_hands_out_no_new_one(method, path, std):
    now = int(time.time())
    token = forge(login_claims("alice", iat=now - 3600, nbf=now - 3600, exp=now + 60))
    r = request(std, method, path, headers=cookie_header(token),
                content_type="application/json" if method == "DELETE" else None)
    assert r.status in (200, 303), r
    assert [(c.name, c.value, c.attrs.get("max-age")) for c in r.cookies] == [("argocd.token", "", "0")], r
    assert not JWT_RE.search(str(r.headers))
    assert_api_error(get_accounts(std, bearer(token)), 401, 16, "revoked")


def test_huge_authorization_header_is_refused_clearly(std):
    token = login_token(std, "alice", ALICE_PW)
    # larger than the server's header limit (64 KiB by default)
    r = get_accounts(std, bearer("x" * 100_000))
    assert r.status in (431, 401), r
    # within the header limit but longer than any token may be
    assert_api_error(get_accounts(std, bearer("a" * 20_000)), 401, 16, "too large")
    # the server is fine
    assert get_accounts(std, bearer(token)).status == 200
    assert std.proc.poll() is None


# ---- accounts from --config-dir ---------------------------------------------------------------

def test_accounts_from_config(servers, config_dir):
    cfg = config_dir(cm={"accounts.carol": "apiKey", "accounts.carol.enabled": "false"})
    server = servers.start("--insecure", config=cfg)
    admin = login_token(server, "admin", ADMIN_PW)
    accounts = names(get_accounts(server, bearer(admin)))
    assert set(accounts) == {"admin", "alice", "bob", "carol"}
    assert accounts["admin"] == {"name": "admin", "enabled": True, "capabilities": ["login"]}
    assert accounts["alice"] == {"name": "alice", "enabled": True, "capabilities": ["login", "apiKey"]}
    assert accounts["bob"]["capabilities"] == ["login"]
    assert not accounts["carol"].get("enabled", False) and accounts["carol"]["capabilities"] == ["apiKey"]
    r = request(server, "GET", "/api/v1/account/alice", headers=bearer(admin))
    assert r.status == 200 and r.json() == accounts["alice"], r
    assert_api_error(request(server, "GET", "/api/v1/account/nobody", headers=bearer(admin)), 404, 5)

    # passwords from argocd-secret; can-i: admin may, others may not (built-in policy for now)
    alice = login_token(server, "alice", ALICE_PW)
    can_i = "/api/v1/account/can-i/applications/get/default/app"
    assert request(server, "GET", can_i, headers=bearer(admin)).json() == {"value": "yes"}
    assert request(server, "GET", can_i, headers=bearer(alice)).json() == {"value": "no"}
    assert_api_error(request(server, "GET", can_i), 401, 16)
    assert_api_error(login(server, "bob", ALICE_PW, source=fresh_source()), 401, 16, "Invalid username or password")


def test_session_duration_from_config(servers, config_dir):
    server = servers.start("--insecure", config=config_dir(cm={"users.session.duration": "1h30m"}))
    claims = jwt_claims(login_token(server, "alice", ALICE_PW))
    assert claims["exp"] - claims["iat"] == 5400


def test_hot_reload_adds_api_key_capability(servers, config_dir):
    cfg = config_dir()
    server = servers.start("--insecure", config=cfg)
    admin = login_token(server, "admin", ADMIN_PW)

    def create():
        r = request(server, "POST", "/api/v1/account/bob/token", {"id": "k1"}, headers=bearer(admin))
        return r if r.status == 200 else None

    assert_api_error(request(server, "POST", "/api/v1/account/bob/token", {"id": "k1"}, headers=bearer(admin)),
                     400, 3, "apiKey")
    cfg.update_cm({"accounts.bob": "login, apiKey"})
    start = time.monotonic()
    r = wait_until(create, RELOAD_WITHIN + SLACK, what="bob's apiKey capability")
    assert time.monotonic() - start <= RELOAD_WITHIN + SLACK
    token = r.json()["token"]
    assert jwt_claims(token)["sub"] == "bob:apiKey"
    assert userinfo(server, bearer(token))["username"] == "bob"


@pytest.mark.parametrize("cm, secret, key", [
    ({"users.session.duration": "0"}, {}, "users.session.duration"),
    ({"users.session.duration": "90 minutes"}, {}, "users.session.duration"),
    ({"users.anonymous.enabled": "maybe"}, {}, "users.anonymous.enabled"),
    ({"passwordPattern": "(["}, {}, "passwordPattern"),
    ({}, {"admin.password": "plain-text-password"}, "admin.password"),
    ({}, {"accounts.alice.passwordMtime": "yesterday"}, "accounts.alice.passwordMtime"),
])
def test_malformed_config_at_startup_names_file_and_line(cm, secret, key, tmp_path, config_dir):
    cfg = config_dir(cm=cm, secret=secret)
    path = cfg.path / ("argocd-cm.yaml" if cm else "argocd-secret.yaml")
    line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.strip().startswith(f'"{key}"'))
    res = run_server_expecting_exit(tmp_path, "--config-dir", str(cfg.path))
    assert res.returncode != 0, res
    assert f"{path}:{line}" in res.stderr, res.stderr
    assert key in res.stderr, res.stderr


def test_invalid_yaml_at_startup_names_file_and_line(tmp_path, config_dir):
    cfg = config_dir()
    cfg.write_raw("argocd-cm.yaml", "kind: ConfigMap\nmetadata:\n  name: argocd-cm\ndata:\n  a: [\n")
    res = run_server_expecting_exit(tmp_path, "--config-dir", str(cfg.path))
    assert res.returncode != 0, res
    assert re.search(rf"{re.escape(str(cfg.cm_file))}:\d+", res.stderr) and "YAML" in res.stderr, res.stderr


def test_malformed_config_on_reload_keeps_the_last_good_one(servers, config_dir):
    cfg = config_dir(cm={"users.session.duration": "1h"})
    server = servers.start("--insecure", config=cfg)
    alice = login_token(server, "alice", ALICE_PW)
    assert metric(server, "tiphys_config_reload_errors_total") == 0
    good = cfg.cm_file.read_text()

    cfg.write_raw("argocd-cm.yaml", good + "  broken: [\n")
    wait_until(lambda: metric(server, "tiphys_config_reload_errors_total") == 1, RELOAD_WITHIN + SLACK,
               what="the broken YAML being rejected")
    cfg.update_cm({"users.session.duration": "0"})  # well-formed YAML, invalid value
    wait_until(lambda: metric(server, "tiphys_config_reload_errors_total") == 2, RELOAD_WITHIN + SLACK,
               what="the zero duration being rejected")
    assert "argocd-cm.yaml" in server.logs()
    # the last good config is in force: alice still exists, sessions last 1h
    assert get_accounts(server, bearer(alice)).status == 200
    claims = jwt_claims(login_token(server, "alice", ALICE_PW))
    assert claims["exp"] - claims["iat"] == 3600

    # and a good edit is still taken
    cfg.update_cm({"users.session.duration": "2h"})

    def duration():
        c = jwt_claims(login_token(server, "alice", ALICE_PW))
        return c["exp"] - c["iat"] == 7200

    wait_until(duration, RELOAD_WITHIN + SLACK, interval=0.2, what="the fixed config")


def test_config_in_volume_form(servers, tmp_path):
    """argocd-cm and argocd-secret as mounted volumes: one file per key."""
    cfg = tmp_path / "volumes"
    files = {
        "argocd-cm/accounts.alice": "login\n",
        "argocd-cm/users.session.duration": "45m\n",
        "argocd-secret/accounts.alice.password": HASHES[ALICE_PW],
        "argocd-secret/admin.password": HASHES[ADMIN_PW],
    }
    for rel, text in files.items():
        (cfg / rel).parent.mkdir(parents=True, exist_ok=True)
        (cfg / rel).write_text(text)
    server = servers.start("--insecure", "--config-dir", str(cfg))
    claims = jwt_claims(login_token(server, "alice", ALICE_PW))
    assert claims["exp"] - claims["iat"] == 45 * 60
    admin = login_token(server, "admin", ADMIN_PW)
    assert names(get_accounts(server, bearer(admin)))["alice"]["capabilities"] == ["login"]


def test_admin_can_be_disabled(servers, config_dir):
    cfg = config_dir(cm={"admin.enabled": "false"})
    server = servers.start("--insecure", config=cfg)
    assert_api_error(login(server, "admin", ADMIN_PW), 401, 16, "disabled")
    assert_api_error(get_accounts(server, bearer(forge(login_claims("admin")))), 401, 16, "disabled")
    assert login(server, "alice", ALICE_PW).status == 200


def test_hot_reload_of_a_rotated_secret_password(servers, config_dir):
    cfg = config_dir()
    server = servers.start("--insecure", config=cfg)
    alice = login_token(server, "alice", ALICE_PW)
    cfg.write(secret={**cfg.secret, "accounts.alice.password": HASHES[CAROL_PW]})
    wait_until(lambda: login(server, "alice", CAROL_PW, source=fresh_source()).status == 200, RELOAD_WITHIN + SLACK,
               interval=0.2, what="the rotated password")
    assert login(server, "alice", ALICE_PW, source=fresh_source()).status == 401
    assert_api_error(get_accounts(server, bearer(alice)), 401, 16, "password")


def test_api_keys_from_argocd_secret(servers, config_dir):
    """Keys listed in `accounts.<name>.tokens` (signed with server.secretkey, as Argo CD made them)
    work; deleting one through the API sticks across a restart."""
    iat = int(time.time()) - 3600
    listed = [{"id": "old-ci", "iat": iat}, {"id": "old-bot", "iat": iat, "exp": iat + 10 * 24 * 3600}]
    cfg = config_dir(secret={"accounts.alice.tokens": json.dumps(listed),
                             "accounts.alice.passwordMtime": "2020-01-01T00:00:00Z"})
    server = servers.start("--insecure", config=cfg)
    keys = {t["id"]: forge({"iss": "argocd", "sub": "alice:apiKey", "jti": t["id"], "iat": iat, "nbf": iat,
                            **({"exp": t["exp"]} if "exp" in t else {})}) for t in listed}
    for key in keys.values():
        assert userinfo(server, bearer(key))["username"] == "alice"
    unlisted = forge({"iss": "argocd", "sub": "alice:apiKey", "jti": "never-issued", "iat": iat, "nbf": iat})
    assert_api_error(get_accounts(server, bearer(unlisted)), 401, 16, "never-issued")
    admin = login_token(server, "admin", ADMIN_PW)
    tokens = request(server, "GET", "/api/v1/account/alice", headers=bearer(admin)).json()["tokens"]
    assert {t["id"]: t.get("expiresAt", 0) for t in tokens} == {"old-ci": 0, "old-bot": iat + 10 * 24 * 3600}

    assert request(server, "DELETE", "/api/v1/account/alice/token/old-ci", headers=bearer(admin)).status == 200
    assert_api_error(get_accounts(server, bearer(keys["old-ci"])), 401, 16)
    server = servers.restart(server)
    assert_api_error(get_accounts(server, bearer(keys["old-ci"])), 401, 16)
    assert get_accounts(server, bearer(keys["old-bot"])).status == 200


# ---- passwords --------------------------------------------------------------------------------

def change_password(server, token, current, new, name="", source="127.0.0.1"):
    body = {"currentPassword": current, "newPassword": new}
    if name:
        body["name"] = name
    return request(server, "PUT", "/api/v1/account/password", body, headers=bearer(token), source=source)


def test_password_policy_is_enforced(servers, config_dir):
    server = servers.start("--insecure", config=config_dir(cm={"passwordPattern": "^[a-z]{12,}$"}))
    alice = login_token(server, "alice", ALICE_PW)
    assert_api_error(change_password(server, alice, ALICE_PW, "Short-1"), 400, 3, r"\^\[a-z\]\{12,\}\$")
    assert_api_error(change_password(server, alice, ALICE_PW, ""), 400, 3, "blank")
    assert login(server, "alice", ALICE_PW, source=fresh_source()).status == 200  # unchanged
    r = change_password(server, alice, ALICE_PW, "abcdefghijklmn")
    assert r.status == 200 and r.json() == {}, r
    assert login(server, "alice", "abcdefghijklmn", source=fresh_source()).status == 200
    assert login(server, "alice", ALICE_PW, source=fresh_source()).status == 401


def test_admin_sets_another_accounts_password_but_others_cannot(servers, config_dir):
    server = servers.start("--insecure", config=config_dir())
    admin = login_token(server, "admin", ADMIN_PW)
    bob = login_token(server, "bob", BOB_PW)
    alice = login_token(server, "alice", ALICE_PW)
    # bob may not change alice's password, even knowing his own
    assert_api_error(change_password(server, bob, BOB_PW, "new-alice-pass", name="alice"), 403, 7)
    assert login(server, "alice", ALICE_PW, source=fresh_source()).status == 200
    r = change_password(server, admin, ADMIN_PW, "new-alice-pass", name="alice")
    assert r.status == 200, r
    assert login(server, "alice", "new-alice-pass", source=fresh_source()).status == 200
    assert login(server, "alice", ALICE_PW, source=fresh_source()).status == 401
    # alice's sessions from before the change end; admin's own session goes on
    assert_api_error(get_accounts(server, bearer(alice)), 401, 16, "password")
    assert get_accounts(server, bearer(admin)).status == 200


def test_wrong_current_password_is_400_and_counts_toward_lockout(servers, config_dir):
    server = servers.start("--insecure", "--login-max-failures", "2", config=config_dir())
    src, other = fresh_source(), fresh_source()
    alice = login_token(server, "alice", ALICE_PW, source=src)
    for _ in range(2):
        assert_api_error(change_password(server, alice, "not-my-password", "new-password-1", source=src), 400, 3,
                         "current password")
    # the pair (alice, src) is now locked: even the right password is throttled
    r = change_password(server, alice, ALICE_PW, "new-password-1", source=src)
    assert_api_error(r, 429, 8)
    r = login(server, "alice", ALICE_PW, source=src)
    assert_api_error(r, 429, 8)
    assert int(r.header("retry-after")) > 200
    # another address is not affected, and the password did not change
    assert login(server, "alice", ALICE_PW, source=other).status == 200
    assert login(server, "alice", "new-password-1", source=fresh_source()).status == 401


# ---- API keys ---------------------------------------------------------------------------------

def test_api_keys_create_list_delete(servers, config_dir):
    server = servers.start("--insecure", config=config_dir())
    admin = login_token(server, "admin", ADMIN_PW)
    before = int(time.time())
    r = request(server, "POST", "/api/v1/account/alice/token", {"id": "ci", "expiresIn": 0}, headers=bearer(admin))
    assert r.status == 200 and set(r.json()) == {"token"}, r
    key = r.json()["token"]
    claims = jwt_claims(key)
    assert (claims["iss"], claims["sub"], claims["jti"]) == ("argocd", "alice:apiKey", "ci")
    assert "exp" not in claims
    assert userinfo(server, bearer(key)) == {"loggedIn": True, "username": "alice", "iss": "argocd"}
    assert get_accounts(server, bearer(key)).status == 200

    r = request(server, "POST", "/api/v1/account/alice/token", {"expiresIn": 3600}, headers=bearer(admin))
    assert r.status == 200, r
    second = jwt_claims(r.json()["token"])
    assert second["jti"] and second["jti"] != "ci" and second["exp"] - second["iat"] == 3600

    tokens = {t["id"]: t for t in request(server, "GET", "/api/v1/account/alice", headers=bearer(admin)).json()["tokens"]}
    assert set(tokens) == {"ci", second["jti"]}
    assert before <= tokens["ci"]["issuedAt"] <= time.time() + 1 and "expiresAt" not in tokens["ci"]
    assert tokens[second["jti"]]["expiresAt"] - tokens[second["jti"]]["issuedAt"] == 3600

    assert_api_error(request(server, "POST", "/api/v1/account/alice/token", {"id": "ci"}, headers=bearer(admin)),
                     400, 3, "already")
    assert_api_error(request(server, "POST", "/api/v1/account/bob/token", {}, headers=bearer(admin)), 400, 3, "apiKey")
    assert_api_error(request(server, "POST", "/api/v1/account/alice/token", {"expiresIn": -1}, headers=bearer(admin)),
                     400, 3)

    r = request(server, "DELETE", "/api/v1/account/alice/token/ci", headers=bearer(admin))
    assert r.status == 200, r
    assert_api_error(get_accounts(server, bearer(key)), 401, 16, "ci")
    assert userinfo(server, bearer(key)) == {}
    tokens = request(server, "GET", "/api/v1/account/alice", headers=bearer(admin)).json()["tokens"]
    assert [t["id"] for t in tokens] == [second["jti"]]
    assert_api_error(request(server, "DELETE", "/api/v1/account/alice/token/ci", headers=bearer(admin)), 404, 5)


@pytest.mark.parametrize("kid", ["ci key", "ü-ключ", "a%2Fb", "x?y#z", ".."])
def test_api_key_ids_are_taken_literally(kid, std):
    admin = login_token(std, "admin", ADMIN_PW)
    r = request(std, "POST", "/api/v1/account/alice/token", {"id": kid}, headers=bearer(admin))
    assert r.status == 200, r
    key = r.json()["token"]
    assert jwt_claims(key)["jti"] == kid
    assert kid in [t["id"] for t in request(std, "GET", "/api/v1/account/alice", headers=bearer(admin)).json()["tokens"]]
    r = request(std, "DELETE", "/api/v1/account/alice/token/" + quote(kid, safe=""), headers=bearer(admin))
    assert r.status == 200, r
    assert_api_error(get_accounts(std, bearer(key)), 401, 16)
    assert_api_error(request(std, "POST", "/api/v1/account/alice/token", {"id": "a/b"}, headers=bearer(admin)), 400, 3)


def test_deleted_api_key_stays_rejected_even_if_its_id_comes_back(servers, config_dir):
    server = servers.start("--insecure", config=config_dir())
    admin = login_token(server, "admin", ADMIN_PW)
    old = request(server, "POST", "/api/v1/account/alice/token", {"id": "ci"}, headers=bearer(admin)).json()["token"]
    assert request(server, "DELETE", "/api/v1/account/alice/token/ci", headers=bearer(admin)).status == 200
    assert_api_error(get_accounts(server, bearer(old)), 401, 16)
    time.sleep(max(0.0, jwt_claims(old)["iat"] + 1.1 - time.time()))  # a later second: no ambiguity
    r = request(server, "POST", "/api/v1/account/alice/token", {"id": "ci"}, headers=bearer(admin))
    if r.status == 200:  # the id may be given out again, but only to the new key
        assert get_accounts(server, bearer(r.json()["token"])).status == 200
    else:
        assert_api_error(r, 400, 3, "ci")
    assert_api_error(get_accounts(server, bearer(old)), 401, 16)
    server = servers.restart(server)
    assert_api_error(get_accounts(server, bearer(old)), 401, 16)


def test_account_manages_its_own_keys_only(servers, config_dir):
    server = servers.start("--insecure", config=config_dir(cm={"accounts.bob": "login, apiKey"}))
    alice = login_token(server, "alice", ALICE_PW)
    r = request(server, "POST", "/api/v1/account/alice/token", {"id": "mine"}, headers=bearer(alice))
    assert r.status == 200, r
    assert_api_error(request(server, "POST", "/api/v1/account/bob/token", {"id": "x"}, headers=bearer(alice)), 403, 7)
    assert_api_error(request(server, "GET", "/api/v1/account/bob", headers=bearer(alice)), 403, 7)
    # the list shows only what the caller may see: itself
    assert set(names(get_accounts(server, bearer(alice)))) == {"alice"}
    r = request(server, "DELETE", "/api/v1/account/alice/token/mine", headers=bearer(alice))
    assert r.status == 200, r


def test_revocations_and_keys_survive_restart(servers, config_dir):
    # The server's own (generated) signing key: it must persist too.
    server = servers.start("--insecure", config=config_dir(secret_key=False))
    admin = login_token(server, "admin", ADMIN_PW)
    logged_out = login_token(server, "alice", ALICE_PW)
    kept = login_token(server, "alice", ALICE_PW)
    assert request(server, "DELETE", "/api/v1/session", headers=bearer(logged_out)).status == 200
    keys = {}
    for kid in ("gone", "kept"):
        r = request(server, "POST", "/api/v1/account/alice/token", {"id": kid}, headers=bearer(admin))
        keys[kid] = r.json()["token"]
    assert request(server, "DELETE", "/api/v1/account/alice/token/gone", headers=bearer(admin)).status == 200

    server = servers.restart(server)
    assert_api_error(get_accounts(server, bearer(logged_out)), 401, 16, "revoked")
    assert_api_error(get_accounts(server, bearer(keys["gone"])), 401, 16)
    assert get_accounts(server, bearer(kept)).status == 200
    assert get_accounts(server, bearer(keys["kept"])).status == 200
    assert get_accounts(server, bearer(admin)).status == 200


# ---- renewal ----------------------------------------------------------------------------------

def test_login_token_renewed_near_expiry_for_cookie_rest_only(servers, config_dir):
    server = servers.start("--insecure", config=config_dir(cm={"users.session.duration": "6s"}))
    token = login_token(server, "admin", ADMIN_PW)
    old = jwt_claims(token)
    assert old["exp"] - old["iat"] == 6
    # fresh: nothing renewed
    r = get_accounts(server, cookie_header(token))
    assert r.status == 200 and r.all("set-cookie") == [], r

    # Less than min(5 min, half of 6 s) = 3 s left: renewed. Whole seconds: iat + 4 leaves 2.
    time.sleep(max(0.0, old["iat"] + 4.2 - time.time()))
    assert time.time() < old["exp"] - 1, "too slow to test renewal"
    r = get_accounts(server, bearer(token))
    assert r.status == 200, r
    assert r.all("set-cookie") == [] and not any(JWT_RE.search(v) for _, v in r.headers), r
    r = get_accounts(server, cookie_header(token))
    assert r.status == 200, r
    fresh = r.cookie("argocd.token")
    assert fresh is not None and JWT_RE.fullmatch(fresh.value), r
    assert (fresh.attrs.get("httponly"), fresh.attrs.get("samesite"), fresh.attrs.get("path")) == (True, "Lax", "/")
    new = jwt_claims(fresh.value)
    assert new["sub"] == "admin:login" and new["exp"] > old["exp"]
    assert new["exp"] - new["iat"] == 6
    # the renewed token works, and no header but Set-Cookie carried it
    assert userinfo(server, cookie_header(fresh.value))["username"] == "admin"
    assert not any(JWT_RE.search(v) for k, v in r.headers if k != "set-cookie"), r
    # once expired, the old one is refused
    time.sleep(max(0.0, old["exp"] + 0.2 - time.time()))
    assert_api_error(get_accounts(server, cookie_header(token)), 401, 16, "expired")


def test_logout_ends_the_session_including_its_renewed_tokens(servers, config_dir):
    """Logging out with a token revokes the tokens renewed from it too, until they expire: also
    after the older token expired and the server restarted."""
    server = servers.start("--insecure", config=config_dir(cm={"users.session.duration": "6s"}))
    token = login_token(server, "alice", ALICE_PW)
    old = jwt_claims(token)
    time.sleep(max(0.0, old["iat"] + 4.2 - time.time()))
    renewed = get_accounts(server, cookie_header(token)).cookie("argocd.token").value
    assert jwt_claims(renewed)["exp"] > old["exp"]
    r = request(server, "DELETE", "/api/v1/session", headers=bearer(token))
    assert r.status == 200, r
    assert_api_error(get_accounts(server, bearer(renewed)), 401, 16, "revoked")
    time.sleep(max(0.0, old["exp"] + 0.5 - time.time()))
    server = servers.restart(server)
    assert time.time() < jwt_claims(renewed)["exp"] - 1, "too slow to test"
    assert_api_error(get_accounts(server, bearer(renewed)), 401, 16, "revoked")


@pytest.mark.parametrize("lifetime, left, renewed", [
    (3800, 200, True),    # less than 5 min left of a long session
    (3800, 400, False),   # more than 5 min left
    (600, 200, True),     # half of 10 min is 5 min
    (1200, 400, False),
])
def test_renewal_window_is_at_most_five_minutes(lifetime, left, renewed, std):
    now = int(time.time())
    token = forge(login_claims(iat=now + left - lifetime, nbf=now + left - lifetime, exp=now + left))
    r = get_accounts(std, cookie_header(token))
    assert r.status == 200, r
    fresh = r.cookie("argocd.token")
    assert (fresh is not None) is renewed, r
    if renewed:
        claims = jwt_claims(fresh.value)
        assert claims["exp"] - claims["iat"] == 24 * 3600  # a full session of the configured duration
        assert claims["sub"] == "admin:login"


def test_renewal_replaces_a_chunked_cookie(std):
    now = int(time.time())
    token = forge(login_claims(iat=now - 3600, nbf=now - 3600, exp=now + 60))
    a, b, c = split(token, 3)
    r = get_accounts(std, {"Cookie": f"argocd.token=3:{a}; argocd.token-1={b}; argocd.token-2={c}"})
    assert r.status == 200, r
    cookies = {ck.name: ck for ck in r.cookies}
    assert set(cookies) == {"argocd.token", "argocd.token-1", "argocd.token-2"}, r
    assert JWT_RE.fullmatch(cookies["argocd.token"].value)
    for stale in ("argocd.token-1", "argocd.token-2"):
        assert cookies[stale].value == "" and cookies[stale].attrs.get("max-age") == "0", r
