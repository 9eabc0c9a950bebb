"""Hygiene (issue 20, item 7): credentials that disagree are refused, never "first wins": two
`Authorization` headers, a session cookie with a different bearer token (REST, with curl), two
`token` metadata entries or a `token` entry with a different bearer (native gRPC with grpcio, and
gRPC-Web framed by hand). Each is 400 / INVALID_ARGUMENT with a message saying what to fix."""

import subprocess

import grpc
import pytest
import requests

from authkit import ADMIN_PW, ALICE_PW, generate_stubs, grpc_web_frame, login_token

SETTINGS = "/api/v1/account"  # needs a caller: answers 200 to one, 401 to none


@pytest.fixture(scope="module")
def env(module_servers, module_config, tmp_path_factory):
    server = module_servers.start("--insecure", config=module_config())
    session_pb2, session_grpc, account_pb2, account_grpc = generate_stubs(tmp_path_factory.mktemp("stubs"))
    return dict(server=server, admin=login_token(server, "admin", ADMIN_PW),
                alice=login_token(server, "alice", ALICE_PW), account_pb2=account_pb2, account_grpc=account_grpc)


def curl(url, headers, args=()):
    """One request with curl (headers as given, repeated names kept): (status, body)."""
    cmd = ["curl", "-sS", "--max-time", "10", "-o", "-", "-w", "\n%{http_code}", *args]
    for h in headers:
        cmd += ["-H", h]
    res = subprocess.run(cmd + [url], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    body, _, status = res.stdout.rpartition("\n")
    return int(status), body


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2c"])
def test_rest_credentials_that_disagree_are_400(env, http2):
    server, admin, alice = env["server"], env["admin"], env["alice"]
    url = server.url(SETTINGS)
    extra = ["--http2-prior-knowledge"] if http2 else []
    ok = [(f"Authorization: Bearer {admin}",),
          (f"Authorization: Bearer {admin}", f"Cookie: argocd.token={admin}")]
    for headers in ok:
        status, body = curl(url, headers, extra)
        assert status == 200, (headers, body)
    refused = {
        "two Authorization headers": ("more than one Authorization header",
                                      (f"Authorization: Bearer {admin}", f"Authorization: Bearer {alice}")),
        "the same bearer twice": ("more than one Authorization header",
                                  (f"Authorization: Bearer {admin}", f"Authorization: Bearer {admin}")),
        "cookie and another bearer": ("different tokens",
                                      (f"Cookie: argocd.token={alice}", f"Authorization: Bearer {admin}")),
        "cookie and an empty bearer": ("different tokens",
                                       (f"Cookie: argocd.token={admin}", "Authorization: Bearer ")),
    }
    for case, (message, headers) in refused.items():
        status, body = curl(url, headers, extra)
        assert status == 400, (case, body)
        assert message in body and '"code":3' in body, (case, body)


def test_grpc_credentials_that_disagree_are_invalid_argument(env):
    server, admin, alice = env["server"], env["admin"], env["alice"]
    with grpc.insecure_channel(server.addr) as channel:
        stub = env["account_grpc"].AccountServiceStub(channel)
        req = env["account_pb2"].ListAccountRequest()
        assert stub.ListAccounts(req, metadata=[("token", admin)], timeout=10).items
        assert stub.ListAccounts(req, metadata=[("token", admin), ("authorization", f"Bearer {admin}")],
                                 timeout=10).items
        for md, message in [
            ([("token", admin), ("token", alice)], "more than one `token` metadata entry"),
            ([("token", admin), ("token", admin)], "more than one `token` metadata entry"),
            ([("token", alice), ("authorization", f"Bearer {admin}")], "different tokens"),
            ([("authorization", f"Bearer {admin}"), ("authorization", f"Bearer {alice}")],
             "more than one Authorization header"),
        ]:
            with pytest.raises(grpc.RpcError) as err:
                stub.ListAccounts(req, metadata=md, timeout=10)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (md, err.value)
            assert message in err.value.details(), (md, err.value.details())


def test_grpc_web_credentials_that_disagree_are_invalid_argument(env):
    server, admin, alice = env["server"], env["admin"], env["alice"]
    body = grpc_web_frame(env["account_pb2"].ListAccountRequest().SerializeToString())
    session = requests.Session()
    headers = {"Content-Type": "application/grpc-web+proto", "Accept": "application/grpc-web+proto",
               "X-Grpc-Web": "1", "token": alice, "Authorization": f"Bearer {admin}"}
    r = session.post(server.url("/account.AccountService/ListAccounts"), data=body, headers=headers, timeout=20)
    assert r.status_code == 200, r
    assert r.headers.get("content-type", "").startswith("application/grpc-web"), r.headers
    assert (r.headers.get("grpc-status"), "different%20tokens" in r.headers.get("grpc-message", "")) == ("3", True), \
        r.headers


GRPC_WEB_TEXT = {
    # case: (body, what grpc-message must say)
    "a symbol outside base64": (b"!!!!AAAA", "not valid base64"),
    "a length that is no multiple of 4": (b"AAAAAAUAAAA", "not valid base64"),
    "a truncated frame": (b"AAAAAAU=", "truncated gRPC message frame"),  # 5 bytes announced, none sent
}


@pytest.mark.parametrize("http2", [False, True], ids=["h1", "h2c"])
@pytest.mark.parametrize("case", sorted(GRPC_WEB_TEXT))
def test_malformed_grpc_web_text_is_invalid_argument(env, http2, case):
    body, message = GRPC_WEB_TEXT[case]
    cmd = ["curl", "-sS", "--max-time", "10", "-D", "-", "-o", "/dev/null", "-X", "POST",
           *(["--http2-prior-knowledge"] if http2 else []),
           "-H", "content-type: application/grpc-web-text", "-H", "accept: application/grpc-web-text",
           "--data-binary", "@-", env["server"].url("/session.SessionService/Create")]
    res = subprocess.run(cmd, input=body, capture_output=True, timeout=30)
    assert res.returncode == 0, res.stderr
    head = dict(line.split(": ", 1) for line in res.stdout.decode().splitlines()[1:] if ": " in line)
    head = {k.lower(): v for k, v in head.items()}
    assert head.get("grpc-status") == "3", (case, head)
    assert message.replace(" ", "%20") in head.get("grpc-message", ""), (case, head)
