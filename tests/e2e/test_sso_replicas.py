"""A dashboard SSO login that starts on one tiphys process and comes back to another: no
process keeps the login in its memory (it travels in a sealed cookie), and the one store they
share remembers which states were used, so a replay is refused on any of them.

Two processes cannot open one redb data dir at once, and `tiphys server` has no etcd flags yet:
here the second process starts on the same data dir (same store, same generated server key)
after the first has stopped. A process with another server key refuses the cookie.

No `server.secretkey` in argocd-secret: the key is the one the first process generated and
keeps in the store, which is what replicas sharing a store share.
"""

import urllib.parse as up

from oidckit import query, session
from test_sso import BAD_STATE, setup_sso


def sso_on_generated_key(tmp_path, servers, config_dir):
    return setup_sso(tmp_path, servers, lambda cm: config_dir(cm=cm, secret_key=False))


def on(server, url):
    """`url` (a callback URL of another process) sent to `server` instead."""
    parts = up.urlsplit(url)
    return server.url(parts.path + "?" + parts.query)


def test_a_login_started_on_one_process_completes_on_another_once(tmp_path, servers, config_dir):
    sso = sso_on_generated_key(tmp_path, servers, config_dir)
    first = sso.server
    agent = session()
    callback = sso.callback_url(agent, "admin1")
    cookie = agent.cookies.get("argocd.oauthstate", path="/auth")
    assert cookie and query(callback)["state"] not in cookie

    # Process 1 stops before the browser comes back; process 2 opens the same store.
    servers.running.remove(first)
    first.stop()
    second = servers.start(*first.args, data_dir=first.data_dir)
    assert second.port != first.port
    r = agent.get(on(second, callback), allow_redirects=False, timeout=15)
    assert r.status_code == 303 and r.headers["Location"] == "/", (r.status_code, r.text)
    assert any(c.startswith("argocd.token=") for c in r.raw.headers.getlist("Set-Cookie"))
    info = agent.get(second.url("/api/v1/session/userinfo"), timeout=10).json()
    assert info["loggedIn"] and info["username"] == "admin1@example.test", info

    # The same callback again, with a kept copy of the cookie: refused, and no session.
    replay = {"Cookie": f"argocd.oauthstate={cookie}"}
    r = session().get(on(second, callback), allow_redirects=False, timeout=15, headers=replay)
    assert (r.status_code, r.text) == (400, BAD_STATE)
    assert not [c for c in r.raw.headers.getlist("Set-Cookie") if c.startswith("argocd.token=")]

    # Remembered in the store, not in process 2: refused after another restart too.
    third = servers.restart(second)
    r = session().get(on(third, callback), allow_redirects=False, timeout=15, headers=replay)
    assert (r.status_code, r.text) == (400, BAD_STATE)
    assert "SSO callback refused" in third.logs() and "already used" in third.logs()


def test_a_process_with_another_server_key_refuses_the_cookie(tmp_path, servers, config_dir):
    sso = sso_on_generated_key(tmp_path, servers, config_dir)
    # Same configuration and provider, its own data dir: its own generated server key.
    stranger = servers.start(*sso.server.args)
    assert stranger.data_dir != sso.server.data_dir
    agent = session()
    callback = sso.callback_url(agent, "alice")
    cookie = {"Cookie": f"argocd.oauthstate={agent.cookies.get('argocd.oauthstate', path='/auth')}"}
    r = session().get(on(stranger, callback), allow_redirects=False, timeout=15, headers=cookie)
    assert (r.status_code, r.text) == (400, BAD_STATE)
    assert any(c.startswith("argocd.oauthstate=;") and "Max-Age=0" in c for c in r.raw.headers.getlist("Set-Cookie"))
    assert "does not open" in stranger.logs()
    # The refusal kept nothing: the process that started the login completes it.
    r = agent.get(callback, allow_redirects=False, timeout=15)
    assert r.status_code == 303, (r.status_code, r.text)
