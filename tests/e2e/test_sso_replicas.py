"""A dashboard SSO login across tiphys replicas that run at the same time on one real etcd
(etcdkit: Debian's etcd on loopback) and share one `--etcd-prefix`, behind no sticky load
balancer: a login that starts on replica A completes on replica B, since no replica keeps the
login in memory (it travels in a sealed cookie), and the store they share remembers which states
were used, so a replay is refused on every replica and racing callbacks make one session only.

No `server.secretkey` in argocd-secret: replica A generates the key and keeps it in etcd, and B,
started after A, takes it from there. A process on another prefix (its own generated key)
refuses the cookie.
"""

import threading
import urllib.parse as up

from oidckit import query, session
from test_sso import BAD_STATE, setup_sso

PREFIX = "/sso-replicas/"


def sso_on_replicas(tmp_path, servers, config_dir, etcd):
    """SSO on replica A (generated key, store in etcd), and replica B on the same prefix with the
    same configuration (replicas mount one config) and its own data dir; both have SSO on."""
    sso = setup_sso(tmp_path, servers, lambda cm: config_dir(cm=cm, secret_key=False),
                    server_args=etcd.flags(PREFIX))
    b = servers.start(*sso.server.args)
    assert b.port != sso.server.port and b.data_dir != sso.server.data_dir
    for replica in (sso.server, b):
        oidc = session().get(replica.url("/api/v1/settings"), timeout=10).json().get("oidcConfig", {})
        assert oidc.get("issuer") == sso.provider.issuer, (replica.port, oidc)
    return sso, b


def on(server, url):
    """`url` (a callback URL of another replica) sent to `server` instead."""
    parts = up.urlsplit(url)
    return server.url(parts.path + "?" + parts.query)


def session_cookies(r):
    return [c for c in r.raw.headers.getlist("Set-Cookie") if c.startswith("argocd.token=")]


def test_a_login_started_on_replica_a_completes_on_replica_b_once(tmp_path, servers, config_dir, etcd):
    sso, b = sso_on_replicas(tmp_path, servers, config_dir, etcd)
    a = sso.server
    agent = session()
    callback = sso.callback_url(agent, "admin1")  # /auth/login on A, then the provider
    assert callback.startswith(a.url("/auth/callback?"))
    cookie = agent.cookies.get("argocd.oauthstate", path="/auth")
    assert cookie and query(callback)["state"] not in cookie

    # The browser comes back to B while A still runs.
    assert a.proc.poll() is None
    r = agent.get(on(b, callback), allow_redirects=False, timeout=15)
    assert r.status_code == 303 and r.headers["Location"] == "/", (r.status_code, r.text)
    assert session_cookies(r), r.raw.headers.getlist("Set-Cookie")
    done = "SSO login user=admin1 username=admin1@example.test"
    assert done in b.logs() and done not in a.logs()
    for replica in (b, a):  # the session is good on both
        info = agent.get(replica.url("/api/v1/session/userinfo"), timeout=10).json()
        assert info["loggedIn"] and info["username"] == "admin1@example.test", (replica.port, info)

    # The same callback again, with a kept copy of the state cookie: refused on A and on B.
    replay = {"Cookie": f"argocd.oauthstate={cookie}"}
    for replica in (a, b):
        r = session().get(on(replica, callback), allow_redirects=False, timeout=15, headers=replay)
        assert (r.status_code, r.text) == (400, BAD_STATE), replica.port
        assert not session_cookies(r), (replica.port, r.raw.headers.getlist("Set-Cookie"))
    for replica in (a, b):
        assert "SSO callback refused" in replica.logs() and "already used" in replica.logs(), replica.port


def test_racing_callbacks_on_both_replicas_make_one_session(tmp_path, servers, config_dir, etcd):
    """The same callback (with copies of the cookie) sent to A and B at once, several logins in
    a row: each time exactly one replica starts a session."""
    sso, b = sso_on_replicas(tmp_path, servers, config_dir, etcd)
    a = sso.server
    for i in range(4):
        agent = session()
        callback = sso.callback_url(agent, f"racer{i}")
        headers = {"Cookie": f"argocd.oauthstate={agent.cookies.get('argocd.oauthstate', path='/auth')}"}
        barrier = threading.Barrier(2, timeout=15)
        answers = {}

        def send(replica):
            barrier.wait()
            answers[replica.port] = session().get(on(replica, callback), allow_redirects=False, timeout=30,
                                                  headers=headers)

        threads = [threading.Thread(target=send, args=(replica,)) for replica in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=40)
        assert not any(t.is_alive() for t in threads) and len(answers) == 2, answers
        won = [r for r in answers.values() if r.status_code == 303 and session_cookies(r)]
        lost = [r for r in answers.values() if r not in won]
        assert len(won) == 1 and len(lost) == 1, [(r.status_code, r.text) for r in answers.values()]
        # The loser was refused either by the store (the state was used) or by the provider (the
        # code was used): no session either way.
        assert (lost[0].status_code, lost[0].text) == (400, BAD_STATE) or lost[0].status_code == 502, \
            (lost[0].status_code, lost[0].text)
        assert not session_cookies(lost[0])


def test_a_process_with_another_server_key_refuses_the_cookie(tmp_path, servers, config_dir, etcd):
    sso, _ = sso_on_replicas(tmp_path, servers, config_dir, etcd)
    # Same configuration and provider, another prefix of the same etcd: its own generated key.
    args = list(sso.server.args)
    args[args.index("--etcd-prefix") + 1] = "/sso-stranger/"
    stranger = servers.start(*args)
    agent = session()
    callback = sso.callback_url(agent, "alice")
    cookie = {"Cookie": f"argocd.oauthstate={agent.cookies.get('argocd.oauthstate', path='/auth')}"}
    r = session().get(on(stranger, callback), allow_redirects=False, timeout=15, headers=cookie)
    assert (r.status_code, r.text) == (400, BAD_STATE)
    assert any(c.startswith("argocd.oauthstate=;") and "Max-Age=0" in c for c in r.raw.headers.getlist("Set-Cookie"))
    assert not session_cookies(r)
    assert "does not open" in stranger.logs()
    # The refusal kept nothing: the replica that started the login completes it.
    r = agent.get(callback, allow_redirects=False, timeout=15)
    assert r.status_code == 303 and session_cookies(r), (r.status_code, r.text)
