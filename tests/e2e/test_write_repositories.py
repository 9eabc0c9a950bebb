"""Write repositories and write credential templates (issue 22, item 4): the credentials
upstream's source hydrator pushes with. A registry of their own beside repositories and
repo-creds, with the same rules and redaction, authorised as `write-repositories`; REST, native
gRPC (grpcio, stubs compiled from our protos) and gRPC-Web; `tiphys apply` / `admin export` of
`repository-write` and `repo-write-creds` Secrets."""

import json
from urllib.parse import quote

import grpc
import pytest

from appkit import grpc_channel, grpc_web, md, rpc_error, write_rbac
from authkit import ADMIN_PW, ALICE_PW, BOB_PW, login_token, request
from conftest import cli

WRITE = "/api/v1/write-repositories"
WRITE_CREDS = "/api/v1/write-repocreds"
URL = "https://git.example.com/team/deploy.git"
PASSWORD = "write-password-never-shown-1"
TEMPLATE_PASSWORD = "template-password-never-shown-2"


def enc(url):
    return quote(url, safe="")


@pytest.fixture(scope="module")
def env(module_servers, module_config):
    cfg = module_config()
    # alice may only use write repositories, bob only repositories.
    write_rbac(cfg, ["p, role:writer, write-repositories, *, *, allow", "g, alice, role:writer",
                     "p, role:reader, repositories, *, *, allow", "g, bob, role:reader"])
    server = module_servers.start("--insecure", config=cfg)
    tokens = {name: login_token(server, name, pw) for name, pw in
              (("admin", ADMIN_PW), ("alice", ALICE_PW), ("bob", BOB_PW))}
    return type("Env", (), {"server": server, "cfg": cfg, "tokens": tokens})


def call(env, who, method, path, body=None):
    headers = {"Authorization": f"Bearer {env.tokens[who]}"} if who else {}
    return request(env.server, method, path, body, headers=headers)


def test_write_repositories_are_kept_apart_and_never_show_credentials(env):
    r = call(env, "admin", "POST", WRITE, {"repo": URL, "username": "bot", "password": PASSWORD})
    assert r.status == 200, r
    assert r.json()["repo"] == URL and "password" not in r.json() and PASSWORD not in r.body.decode()
    assert r.json()["connectionState"]["status"] == "Unknown"
    listed = call(env, "admin", "GET", WRITE).json()
    assert [i["repo"] for i in listed["items"]] == [URL]
    assert PASSWORD not in json.dumps(listed)
    # not a repository Argo CD reads from
    assert URL not in [i["repo"] for i in call(env, "admin", "GET", "/api/v1/repositories").json().get("items") or []]
    got = call(env, "admin", "GET", f"{WRITE}/{enc(URL)}")
    assert got.status == 200 and got.json()["username"] == "bot", got
    # create again, different, without upsert: refused; with upsert: replaced
    r = call(env, "admin", "POST", WRITE, {"repo": URL, "username": "other", "password": PASSWORD})
    assert r.status == 400 and "write repository spec is different" in r.json()["message"], r
    r = call(env, "admin", "POST", WRITE + "?upsert=true", {"repo": URL, "username": "other"})
    assert r.status == 200 and r.json()["username"] == "other", r
    r = call(env, "admin", "PUT", f"{WRITE}/{enc(URL)}", {"repo": URL, "username": "third", "password": PASSWORD})
    assert r.status == 200 and r.json()["username"] == "third", r
    assert call(env, "admin", "DELETE", f"{WRITE}/{enc(URL)}").status == 200
    assert call(env, "admin", "GET", f"{WRITE}/{enc(URL)}").status == 404


def test_a_write_repository_inherits_only_write_credentials(env):
    repo = "https://git.example.com/inherit/app.git"
    r = call(env, "admin", "POST", WRITE_CREDS, {"url": "https://git.example.com/inherit/", "username": "pusher",
                                                 "password": TEMPLATE_PASSWORD})
    assert r.status == 200 and TEMPLATE_PASSWORD not in r.body.decode(), r
    assert call(env, "admin", "POST", WRITE, {"repo": repo}).status == 200
    got = call(env, "admin", "GET", f"{WRITE}/{enc(repo)}").json()
    assert got["inheritedCreds"] is True and got["username"] == "pusher", got
    # the same URL as a read repository borrows nothing from write credentials
    assert call(env, "admin", "POST", "/api/v1/repositories", {"repo": repo}).status == 200
    plain = call(env, "admin", "GET", f"/api/v1/repositories/{enc(repo)}").json()
    assert "inheritedCreds" not in plain, plain
    assert [i["url"] for i in call(env, "admin", "GET", WRITE_CREDS).json()["items"]] == \
        ["https://git.example.com/inherit/"]
    assert call(env, "admin", "GET", "/api/v1/repocreds").json().get("items") in (None, [])
    r = call(env, "admin", "PUT", f"{WRITE_CREDS}/{enc('https://git.example.com/inherit/')}",
             {"url": "https://git.example.com/inherit/", "username": "pusher2"})
    assert r.status == 200 and r.json()["username"] == "pusher2", r
    assert call(env, "admin", "DELETE", f"{WRITE_CREDS}/{enc('https://git.example.com/inherit/')}").status == 200
    assert "inheritedCreds" not in call(env, "admin", "GET", f"{WRITE}/{enc(repo)}").json()


def test_rbac_uses_write_repositories(env):
    repo = "https://git.example.com/rbac/app.git"
    # bob may manage repositories, not write repositories; alice the other way round
    r = call(env, "bob", "POST", WRITE, {"repo": repo})
    assert r.status == 403, r
    r = call(env, "alice", "POST", WRITE, {"repo": repo})
    assert r.status == 200, r
    assert call(env, "bob", "GET", WRITE).json().get("items") in (None, [])
    assert repo in [i["repo"] for i in call(env, "alice", "GET", WRITE).json()["items"]]
    assert call(env, "alice", "POST", "/api/v1/repositories", {"repo": repo}).status == 403
    assert call(env, "bob", "POST", WRITE_CREDS, {"url": "https://git.example.com/rbac/"}).status == 403
    assert call(env, None, "GET", WRITE).status == 401


def test_bad_write_repositories_are_refused(env):
    for body, why in (({"repo": "javascript:alert(1)"}, "invalid repository URL"),
                      ({"repo": "https://u:hunter2@git.example.com/x.git"}, "password"),
                      ({"repo": "https://git.example.com/x.git", "type": "svn"}, "unknown repository type"),
                      ({"repo": ""}, "URL is required")):
        r = call(env, "admin", "POST", WRITE, body)
        assert r.status == 400, (body, r)
        assert why in r.json()["message"] and "hunter2" not in r.body.decode(), r.json()
    r = call(env, "admin", "POST", f"{WRITE}/{enc(URL)}/validate", {"repo": URL})
    assert r.status == 501 and "ValidateWriteAccess" in r.json()["message"], r


def test_write_repositories_over_grpc_and_grpc_web(env, tmp_path):
    import sys  # noqa: PLC0415
    import grpc_tools  # noqa: PLC0415
    from grpc_tools import protoc  # noqa: PLC0415
    from conftest import REPO  # noqa: PLC0415
    proto = REPO / "proto"
    files = [str(p.relative_to(proto)) for d in ("tiphys", "k8s", "v1alpha1", "repository", "repocreds")
             for p in (proto / d).rglob("*.proto")]
    assert protoc.main(["protoc", f"-I{proto}", f"-I{grpc_tools.__path__[0]}/_proto",
                        f"--python_out={tmp_path}", *files]) == 0
    sys.path.insert(0, str(tmp_path))
    try:
        import importlib  # noqa: PLC0415
        rpb = importlib.import_module("repository.repository_pb2")
        v1 = importlib.import_module("v1alpha1.repository_pb2")
    finally:
        sys.path.remove(str(tmp_path))
    repo = "https://git.example.com/grpc/app.git"
    with grpc_channel(env.server) as ch:
        create = ch.unary_unary("/repository.RepositoryService/CreateWriteRepository",
                                request_serializer=lambda m: m.SerializeToString(),
                                response_deserializer=v1.Repository.FromString)
        made = create(rpb.RepoCreateRequest(repo=v1.Repository(repo=repo, password=PASSWORD)),
                      metadata=md(env.tokens["admin"]), timeout=10)
        assert made.repo == repo and made.password == ""
        err = rpc_error(create, rpb.RepoCreateRequest(repo=v1.Repository(repo=repo)),
                        metadata=md(env.tokens["bob"]), timeout=10)
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    web = grpc_web(env.server, "repository.RepositoryService/ListWriteRepositories", rpb.RepoQuery(),
                   token=env.tokens["admin"])
    assert web.status == 200 and web.trailers.get("grpc-status") == "0", web
    listed = v1.RepositoryList.FromString(web.messages[0])
    assert repo in [i.repo for i in listed.items] and PASSWORD.encode() not in web.body


def test_apply_and_export_write_secrets(env, tmp_path):
    server = f"{env.server.address}:{env.server.port}"
    flags = ["--server", server, "--plaintext", "--auth-token", env.tokens["admin"]]
    secret = f"""apiVersion: v1
kind: Secret
metadata:
  name: hydrator-push
  labels:
    argocd.argoproj.io/secret-type: repository-write
stringData:
  url: https://git.example.com/apply/deploy.git
  username: hydrator
  password: {PASSWORD}
---
apiVersion: v1
kind: Secret
metadata:
  name: hydrator-creds
  labels:
    argocd.argoproj.io/secret-type: repo-write-creds
stringData:
  url: https://git.example.com/apply/
  password: {TEMPLATE_PASSWORD}
"""
    (tmp_path / "w.yaml").write_text(secret)
    r = cli("apply", *flags, "-f", str(tmp_path / "w.yaml"))
    assert r.returncode == 0, r.stderr
    assert "created" in r.stdout, r.stdout
    again = cli("apply", *flags, "-f", str(tmp_path / "w.yaml"))
    assert again.returncode == 0 and "unchanged" in again.stdout, again.stdout + again.stderr
    got = call(env, "admin", "GET", f"{WRITE}/{enc('https://git.example.com/apply/deploy.git')}").json()
    assert got["username"] == "hydrator" and PASSWORD not in json.dumps(got)
    out = cli("admin", "export", *flags)
    assert out.returncode == 0, out.stderr
    assert "argocd.argoproj.io/secret-type: repository-write" in out.stdout
    assert "argocd.argoproj.io/secret-type: repo-write-creds" in out.stdout
    assert "name: hydrator-push" in out.stdout and PASSWORD not in out.stdout
