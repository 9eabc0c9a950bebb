"""session.SessionService and account.AccountService through Python grpcio (stubs generated from
proto/ at test time, over h2c and TLS) and through hand-framed gRPC-Web: login, userinfo, logout,
accounts, API keys, bad tokens, throttling and token renewal."""

import base64
import time

import grpc
import pytest
import requests

from authkit import (ADMIN_PW, ALICE_PW, JWT_RE, assert_api_error, bearer, forge, generate_stubs,
                     get_accounts, grpc_web_frame, grpc_web_text_decode, grpc_web_unframe, jwt_claims,
                     login_claims)

MODES = ["h2c", "tls"]


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    session_pb2, session_grpc, account_pb2, account_grpc = generate_stubs(tmp_path_factory.mktemp("stubs"))

    class PB:
        pass

    pb = PB()
    pb.session, pb.session_grpc, pb.account, pb.account_grpc = session_pb2, session_grpc, account_pb2, account_grpc
    return pb


@pytest.fixture(scope="module")
def shared(module_servers, module_config):
    """{"h2c": plaintext server, "tls": TLS server}, standard accounts, shared by the module."""
    return {"h2c": module_servers.start("--insecure", config=module_config()),
            "tls": module_servers.start(config=module_config())}


def channel(server):
    if server.tls:
        creds = grpc.ssl_channel_credentials(root_certificates=server.ca.read_bytes())
        return grpc.secure_channel(f"127.0.0.1:{server.port}", creds)
    return grpc.insecure_channel(server.addr)


class Client:
    def __init__(self, pb, server):
        self.pb = pb
        self.channel = channel(server)
        self.session = pb.session_grpc.SessionServiceStub(self.channel)
        self.account = pb.account_grpc.AccountServiceStub(self.channel)

    def login(self, username, password):
        return self.session.Create(self.pb.session.SessionCreateRequest(username=username, password=password),
                                   timeout=20).token

    def userinfo(self, token=None, metadata=None):
        md = metadata if metadata is not None else ([("token", token)] if token else [])
        return self.session.GetUserInfo(self.pb.session.GetUserInfoRequest(), metadata=md, timeout=10)

    def list_accounts(self, token=None, metadata=None):
        md = metadata if metadata is not None else ([("token", token)] if token else [])
        return self.account.ListAccounts(self.pb.account.ListAccountRequest(), metadata=md, timeout=10)

    def close(self):
        self.channel.close()


@pytest.fixture
def client(pb):
    made = []

    def make(server):
        made.append(Client(pb, server))
        return made[-1]

    yield make
    for c in made:
        c.close()


def rpc_error(fn, *args, **kw):
    with pytest.raises(grpc.RpcError) as err:
        fn(*args, **kw)
    return err.value


@pytest.mark.parametrize("mode", MODES)
def test_create_userinfo_delete(mode, shared, client):
    c = client(shared[mode])
    token = c.login("admin", ADMIN_PW)
    assert JWT_RE.fullmatch(token)
    assert jwt_claims(token)["sub"] == "admin:login"
    info = c.userinfo(token)
    assert (info.loggedIn, info.username, info.iss, list(info.groups)) == (True, "admin", "argocd", [])
    assert c.userinfo() == c.pb.session.GetUserInfoResponse()  # anonymous: all empty
    # Authorization metadata works as well as `token`
    assert c.userinfo(metadata=[("authorization", f"Bearer {token}")]).username == "admin"

    reply = c.session.Delete(c.pb.session.SessionDeleteRequest(), metadata=[("token", token)], timeout=10)
    assert reply.token == ""
    assert c.userinfo(token).loggedIn is False
    err = rpc_error(c.list_accounts, token)
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED and "revoked" in err.details()
    # also refused over REST
    assert_api_error(get_accounts(shared[mode], bearer(token)), 401, 16, "revoked")


@pytest.mark.parametrize("mode", MODES)
def test_create_with_wrong_password_is_unauthenticated(mode, shared, client):
    c = client(shared[mode])
    for user in ("nobody-grpc", "bob"):
        err = rpc_error(c.login, user, "wrong-password")
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED
        assert err.details() == "Invalid username or password"
    err = rpc_error(c.session.Create, c.pb.session.SessionCreateRequest(token="x.y.z"), timeout=10)
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("mode", MODES)
def test_list_get_accounts_and_can_i(mode, shared, client):
    c = client(shared[mode])
    admin = c.login("admin", ADMIN_PW)
    md = [("token", admin)]
    items = {a.name: a for a in c.list_accounts(admin).items}
    assert set(items) == {"admin", "alice", "bob"}
    assert (items["alice"].enabled, list(items["alice"].capabilities)) == (True, ["login", "apiKey"])
    assert list(items["bob"].capabilities) == ["login"]
    alice = c.account.GetAccount(c.pb.account.GetAccountRequest(name="alice"), metadata=md, timeout=10)
    assert alice.name == "alice" and alice.enabled
    err = rpc_error(c.account.GetAccount, c.pb.account.GetAccountRequest(name="nobody"), metadata=md, timeout=10)
    assert err.code() == grpc.StatusCode.NOT_FOUND
    req = c.pb.account.CanIRequest(resource="applications", action="get", subresource="default/app")
    assert c.account.CanI(req, metadata=md, timeout=10).value == "yes"
    alice_token = c.login("alice", ALICE_PW)
    assert c.account.CanI(req, metadata=[("token", alice_token)], timeout=10).value == "no"
    err = rpc_error(c.account.CanI, req, timeout=10)
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("mode", MODES)
def test_create_and_delete_api_key(mode, shared, client):
    server = shared[mode]
    c = client(server)
    md = [("token", c.login("admin", ADMIN_PW))]
    A = c.pb.account
    key = c.account.CreateToken(A.CreateTokenRequest(name="alice", id="grpc-key", expiresIn=600), metadata=md,
                                timeout=10).token
    claims = jwt_claims(key)
    assert (claims["sub"], claims["jti"], claims["exp"] - claims["iat"]) == ("alice:apiKey", "grpc-key", 600)
    assert c.userinfo(key).username == "alice"
    tokens = {t.id: t for t in c.account.GetAccount(A.GetAccountRequest(name="alice"), metadata=md,
                                                    timeout=10).tokens}
    assert tokens["grpc-key"].expiresAt - tokens["grpc-key"].issuedAt == 600
    err = rpc_error(c.account.CreateToken, A.CreateTokenRequest(name="bob"), metadata=md, timeout=10)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "apiKey" in err.details()

    c.account.DeleteToken(A.DeleteTokenRequest(name="alice", id="grpc-key"), metadata=md, timeout=10)
    err = rpc_error(c.list_accounts, key)
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    assert_api_error(get_accounts(server, bearer(key)), 401, 16)
    err = rpc_error(c.account.DeleteToken, A.DeleteTokenRequest(name="alice", id="grpc-key"), metadata=md, timeout=10)
    assert err.code() == grpc.StatusCode.NOT_FOUND


BAD_TOKENS = {
    "malformed": lambda: "not-a-jwt",
    "alg-none": lambda: forge(login_claims(), alg="none"),
    "hs384": lambda: forge(login_claims(), alg="HS384"),
    "wrong-key": lambda: forge(login_claims(), key="another-key"),
    "expired": lambda: forge(login_claims(exp=int(time.time()) - 5)),
    "foreign-issuer": lambda: forge(login_claims(iss="https://idp.example.test")),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", sorted(BAD_TOKENS))
def test_bad_token_is_unauthenticated(kind, mode, shared, client):
    c = client(shared[mode])
    assert len(c.list_accounts(forge(login_claims())).items) == 3  # the forging itself is right
    token = BAD_TOKENS[kind]()
    for md in ([("token", token)], [("authorization", f"Bearer {token}")]):
        err = rpc_error(c.list_accounts, metadata=md)
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED, (kind, err.details())
        assert c.userinfo(metadata=md).loggedIn is False


def test_cookie_is_not_a_grpc_credential(shared, client):
    c = client(shared["h2c"])
    token = c.login("admin", ADMIN_PW)
    err = rpc_error(c.list_accounts, metadata=[("cookie", f"argocd.token={token}")])
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    assert c.userinfo(metadata=[("cookie", f"argocd.token={token}")]).loggedIn is False


def test_wrong_current_password_is_invalid_argument(servers, config_dir, client):
    server = servers.start("--insecure", config=config_dir())
    c = client(server)
    md = [("token", c.login("alice", ALICE_PW))]
    req = c.pb.account.UpdatePasswordRequest(currentPassword="wrong-password", newPassword="new-password-1")
    err = rpc_error(c.account.UpdatePassword, req, metadata=md, timeout=20)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    req = c.pb.account.UpdatePasswordRequest(currentPassword=ALICE_PW, newPassword="new-password-1")
    c.account.UpdatePassword(req, metadata=md, timeout=20)
    assert c.login("alice", "new-password-1")
    assert rpc_error(c.list_accounts, md[0][1]).code() == grpc.StatusCode.UNAUTHENTICATED  # older session


@pytest.mark.parametrize("mode", MODES)
def test_throttled_login_is_resource_exhausted(mode, servers, config_dir, client):
    server = servers.start("--login-max-failures", "2", *(["--insecure"] if mode == "h2c" else []),
                           config=config_dir())
    c = client(server)
    for _ in range(2):
        assert rpc_error(c.login, "alice", "wrong-password").code() == grpc.StatusCode.UNAUTHENTICATED
    err = rpc_error(c.login, "alice", ALICE_PW)
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.details()
    retry = dict(err.trailing_metadata() or ()).get("retry-after")
    assert retry is not None and int(retry) > 200, err.trailing_metadata()


# ---- gRPC-Web, framed by hand -----------------------------------------------------------------

def grpc_web(server, method, message, headers=None):
    """POST one binary gRPC-Web call with requests; (response, messages, trailers)."""
    r = requests.post(server.url(f"/{method}"), data=grpc_web_frame(message), timeout=20,
                      verify=str(server.ca) if server.tls else True,
                      headers={"Content-Type": "application/grpc-web+proto", "Accept": "application/grpc-web+proto",
                               "X-Grpc-Web": "1", **(headers or {})})
    assert r.status_code == 200, (r.status_code, r.headers, r.content[:300])
    messages, trailers = grpc_web_unframe(r.content)
    # a trailers-only answer puts the status in the headers
    for k in ("grpc-status", "grpc-message"):
        if k in r.headers:
            trailers.setdefault(k, r.headers[k])
    return r, messages, trailers


@pytest.mark.parametrize("mode", MODES)
def test_grpc_web_session_create(mode, shared, pb):
    server = shared[mode]
    req = pb.session.SessionCreateRequest(username="admin", password=ADMIN_PW).SerializeToString()
    r, messages, trailers = grpc_web(server, "session.SessionService/Create", req)
    assert trailers.get("grpc-status") == "0", trailers
    assert len(messages) == 1
    token = pb.session.SessionResponse.FromString(messages[0]).token
    assert jwt_claims(token)["sub"] == "admin:login"
    assert "set-cookie" not in r.headers
    assert get_accounts(server, bearer(token)).status == 200

    bad = pb.session.SessionCreateRequest(username="nobody-web", password="wrong").SerializeToString()
    _, messages, trailers = grpc_web(server, "session.SessionService/Create", bad)
    assert (messages, trailers.get("grpc-status")) == ([], "16"), trailers


def test_grpc_web_text_session_create(shared, pb):
    server = shared["h2c"]
    req = pb.session.SessionCreateRequest(username="alice", password=ALICE_PW).SerializeToString()
    r = requests.post(server.url("/session.SessionService/Create"), data=base64.b64encode(grpc_web_frame(req)),
                      headers={"Content-Type": "application/grpc-web-text", "Accept": "application/grpc-web-text"},
                      timeout=20)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/grpc-web-text"), r.headers
    messages, trailers = grpc_web_unframe(grpc_web_text_decode(r.content))
    assert trailers.get("grpc-status", r.headers.get("grpc-status")) == "0", trailers
    token = pb.session.SessionResponse.FromString(messages[0]).token
    assert jwt_claims(token)["sub"] == "alice:login"


# ---- renewal ----------------------------------------------------------------------------------

def test_renewal_in_metadata_for_native_grpc_only(servers, config_dir, client, pb):
    server = servers.start("--insecure", config=config_dir(cm={"users.session.duration": "6s"}))
    c = client(server)
    token = c.login("admin", ADMIN_PW)
    old = jwt_claims(token)
    _, call = c.account.ListAccounts.with_call(pb.account.ListAccountRequest(), metadata=[("token", token)], timeout=10)
    assert "renew-token" not in dict(call.initial_metadata())  # fresh: nothing to renew

    time.sleep(max(0.0, old["iat"] + 4.2 - time.time()))
    assert time.time() < old["exp"] - 1, "too slow to test renewal"
    _, call = c.account.ListAccounts.with_call(pb.account.ListAccountRequest(), metadata=[("token", token)], timeout=10)
    renewed = dict(call.initial_metadata()).get("renew-token")
    assert renewed and JWT_RE.fullmatch(renewed), call.initial_metadata()
    new = jwt_claims(renewed)
    assert new["sub"] == "admin:login" and new["exp"] > old["exp"] and new["exp"] - new["iat"] == 6

    # gRPC-Web (a browser page could read its headers): no token anywhere in the answer
    r, messages, trailers = grpc_web(server, "session.SessionService/GetUserInfo",
                                     pb.session.GetUserInfoRequest().SerializeToString(), headers={"token": token})
    assert trailers.get("grpc-status") == "0", trailers
    assert pb.session.GetUserInfoResponse.FromString(messages[0]).username == "admin"
    assert not any(JWT_RE.search(f"{k}: {v}") for k, v in r.headers.items()), r.headers
    assert not any(JWT_RE.search(f"{k}: {v}") for k, v in trailers.items()), trailers
    assert time.time() < old["exp"], "the checks above ran after expiry"
    assert c.userinfo(renewed).username == "admin"


@pytest.mark.parametrize("mode", MODES)
def test_an_unserved_method_authenticates_first_and_names_itself(mode, shared, client):
    """A method tiphys does not serve answers UNAUTHENTICATED to a caller without a session, as
    every method does, and UNIMPLEMENTED naming the method to everyone else (grpcio, raw bytes:
    the request is never read)."""
    c = client(shared[mode])
    call = c.channel.unary_unary("/repository.RepositoryService/ListOCITags")
    err = rpc_error(call, b"", timeout=10)
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED, err
    token = c.login("admin", ADMIN_PW)
    err = rpc_error(call, b"", metadata=[("token", token)], timeout=10)
    assert err.code() == grpc.StatusCode.UNIMPLEMENTED, err
    assert err.details().startswith("repository.RepositoryService/ListOCITags is not served by tiphys: "), err
