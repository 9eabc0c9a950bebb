"""Manifests and revision metadata through the real argocd-repo-server (issue 38, item 2): tiphys
--kube with `--repo-server` (the plaintext repo-server of controlplane.py, which upstream
argocd-server uses too), applications on a loopback Git repository (gitkit) with a plain
directory, a Helm chart, a Kustomize overlay and a multi-source application, each asked of both
servers and compared: GetManifests over REST and gRPC, RevisionMetadata, `argocd app manifests`
(upstream's CLI) against tiphys; a repo-server that cannot be reached gives UNAVAILABLE naming
its address over REST and gRPC; GetOCIMetadata (no OCI registry runs on loopback here: only the
repo-server's refusal, passed on as upstream passes it); a caller without `applications, get`
denied and audited once.

The repo-server renders Helm and Kustomize sources with the `helm` and `kustomize` programs; where
they are not installed both servers must give the same refusal (the test says which it saw).

Runs under tools/upstream/isolated (see controlplane.py); .ci/test-all runs it there.
"""

import json
import urllib.parse
from types import SimpleNamespace

import grpc
import pytest

from appkit import APPS, Api, grpc_channel, md, rpc_error, uniq
from argocdkit import ArgoCli
from authkit import login_token
from controlplane import free_ports
from test_kube_backend import NS, app_cr, start_kube_server, upstream_call
from test_live_resources import denials, local_accounts, ours_call
from test_upstream_chain import Repo, wait_for

DIRECTORY = {
    "plain/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain-cm\ndata:\n  k: v\n",
    "plain/secret.yaml": ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: plain-secret\n"
                          "stringData:\n  password: not-to-be-shown\n"),
}
CHART = {
    "chart/Chart.yaml": "apiVersion: v2\nname: demo\nversion: 0.1.0\n",
    "chart/values.yaml": "greeting: hello\n",
    "chart/templates/cm.yaml": ("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\n"
                                "data:\n  greeting: {{ .Values.greeting }}\n"),
}
KUSTOMIZE = {
    "kust/kustomization.yaml": "resources:\n- cm.yaml\nnamePrefix: kz-\n",
    "kust/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: base\ndata:\n  k: v\n",
}
SECRET_VALUE = "not-to-be-shown"


@pytest.fixture(scope="module")
def env(controlplane, gitservers, tmp_path_factory):
    d = tmp_path_factory.mktemp("reposerver")
    repo = Repo(gitservers, d, uniq("rs"))
    sha = repo.commit({**DIRECTORY, **CHART, **KUSTOMIZE}, "everything to render")
    address = controlplane.state["repo_server"]["address"]
    server = start_kube_server(d, controlplane.state["kubeconfig"], "--redis", controlplane.state["redis"]["address"],
                               "--repo-server", address, "--repo-server-plaintext", "--repo-access", "on")
    token = login_token(server, "admin", controlplane.state["argocd"]["admin_password"])
    status, body = upstream_call(controlplane, "POST", "/api/v1/session", body={
        "username": "admin", "password": controlplane.state["argocd"]["admin_password"]})
    assert status == 200, body
    names = SimpleNamespace(directory=uniq("rs-dir"), helm=uniq("rs-helm"), kustomize=uniq("rs-kz"),
                            multi=uniq("rs-multi"))
    source = {"repoURL": repo.url, "targetRevision": "main"}
    multi = app_cr(names.multi, sources=[{**source, "path": "plain"}, {**source, "path": "kust"}])
    del multi["spec"]["source"]
    controlplane.apply([
        app_cr(names.directory, source={**source, "path": "plain"}),
        app_cr(names.helm, source={**source, "path": "chart"}),
        app_cr(names.kustomize, source={**source, "path": "kust"}),
        multi,
    ])
    api = Api(server, token)
    wait_for("the applications in tiphys", lambda: set(vars(names).values()) <= set(api.names()), timeout=20,
             interval=0.1)
    yield SimpleNamespace(server=server, api=api, token=token, theirs=body["token"], repo=repo, sha=sha,
                          names=names, address=address, dir=d,
                          password=controlplane.state["argocd"]["admin_password"])
    controlplane.kubectl("delete", "applications.argoproj.io", "-n", NS, *vars(names).values(), "--wait=false",
                         check=False)
    server.stop()


def both(plane, env, path):
    return ours_call(env.server, env.token, "GET", path), upstream_call(plane, "GET", path, env.theirs)


def manifests_of(answer):
    status, body = answer
    assert status == 200, answer
    return sorted((json.loads(m) for m in body.get("manifests", [])), key=lambda o: o["metadata"]["name"])


def same_answer(ours, theirs):
    """Both rendered the same documents, or both refused alike; True when they rendered."""
    if theirs[0] == 200:
        assert manifests_of(ours) == manifests_of(theirs), (ours, theirs)
        return True
    (s1, b1), (s2, b2) = ours, theirs
    assert (s1, b1.get("code"), b1.get("message")) == (s2, b2.get("code"), b2.get("message")), (ours, theirs)
    return False


def test_a_directory_renders_as_argocd_server_renders_it_with_the_secret_masked(plane, env):
    ours, theirs = both(plane, env, f"{APPS}/{env.names.directory}/manifests")
    assert same_answer(ours, theirs)
    docs = manifests_of(ours)
    assert [d["metadata"]["name"] for d in docs] == ["plain-cm", "plain-secret"], docs
    # The repo-server applies tiphys's tracking (annotation, upstream's default) as upstream's.
    assert docs[0]["metadata"]["annotations"]["argocd.argoproj.io/tracking-id"].startswith(env.names.directory)
    assert SECRET_VALUE not in json.dumps(ours[1]), ours


@pytest.mark.parametrize("kind", ["helm", "kustomize"])
def test_helm_and_kustomize_sources_answer_as_argocd_server_does(plane, env, kind):
    name = getattr(env.names, kind)
    ours, theirs = both(plane, env, f"{APPS}/{name}/manifests")
    rendered = same_answer(ours, theirs)
    if rendered:
        expected = {"helm": f"{name}-cm", "kustomize": "kz-base"}[kind]
        assert [d["metadata"]["name"] for d in manifests_of(ours)] == [expected]
    else:
        # Without the tool on this machine both refuse alike; the refusal is the repo-server's.
        print(f"{kind}: the repo-server could not render ({ours[1].get('message')}); compared the refusals")
        assert ours[1]["code"] == grpc.StatusCode.UNKNOWN.value[0] and "executable file not found" in ours[1]["message"], ours


def test_multi_source_with_positions_and_revisions_as_argocd_server(plane, env):
    base = f"{APPS}/{env.names.multi}/manifests"
    ours, theirs = both(plane, env, base)
    same_answer(ours, theirs)
    query = urllib.parse.urlencode([("sourcePositions", "1"), ("revisions", env.sha)])
    ours, theirs = both(plane, env, f"{base}?{query}")
    same_answer(ours, theirs)
    # A position past the sources is refused by both.
    query = urllib.parse.urlencode([("sourcePositions", "3"), ("revisions", env.sha)])
    ours, theirs = both(plane, env, f"{base}?{query}")
    assert ours[0] >= 400 and theirs[0] >= 400, (ours, theirs)
    assert "source position is out of range" in ours[1]["message"], ours


def test_get_manifests_over_grpc(env, app_pb):
    with grpc_channel(env.server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        reply = stub.GetManifests(app_pb.app.ApplicationManifestQuery(name=env.names.directory),
                                  metadata=md(env.token), timeout=60)
    names = sorted(json.loads(m)["metadata"]["name"] for m in reply.manifests)
    assert names == ["plain-cm", "plain-secret"], names


def test_revision_metadata_comes_from_the_repo_server(plane, env):
    path = f"{APPS}/{env.names.directory}/revisions/{env.sha}/metadata"
    ours, theirs = both(plane, env, path)
    assert ours[0] == 200 and theirs[0] == 200, (ours, theirs)
    assert ours[1] == theirs[1], (ours, theirs)
    assert ours[1]["message"].strip() == "everything to render" and ours[1]["author"].startswith("Chain"), ours


def test_oci_metadata_refusal_is_the_repo_servers(plane, env):
    """No OCI registry runs here: a Git source has no OCI metadata, and both pass the repo-server's
    refusal on alike."""
    path = f"{APPS}/{env.names.directory}/revisions/{env.sha}/ocimetadata"
    ours, theirs = both(plane, env, path)
    assert ours[0] >= 400, ours
    (s1, b1), (s2, b2) = ours, theirs
    assert (s1, b1.get("code")) == (s2, b2.get("code")), (ours, theirs)
    assert b2["message"] in b1["message"] or b1["message"] in b2["message"], (ours, theirs)


def test_argocd_app_manifests_against_tiphys(env):
    cli = ArgoCli(env.dir / "cli", "--plaintext")
    cli("login", env.server.addr, "--username", "admin", "--password", env.password)
    res = cli("app", "manifests", env.names.directory)
    assert "name: plain-cm" in res.stdout and "name: plain-secret" in res.stdout, res.stdout
    assert SECRET_VALUE not in res.stdout


def test_an_unreachable_repo_server_is_unavailable_naming_it(controlplane, env, app_pb):
    (port,) = free_ports(1)
    address = f"127.0.0.1:{port}"
    server = start_kube_server(env.dir, controlplane.state["kubeconfig"], "--repo-server", address,
                               "--repo-server-plaintext", "--repo-server-timeout-seconds", "5")
    try:
        token = login_token(server, "admin", controlplane.state["argocd"]["admin_password"])
        wait_for("the application in the second tiphys", lambda: env.names.directory in Api(server, token).names(),
                 timeout=20, interval=0.1)
        status, body = ours_call(server, token, "GET", f"{APPS}/{env.names.directory}/manifests")
        assert status == 503 and body["code"] == grpc.StatusCode.UNAVAILABLE.value[0], (status, body)
        assert address in body["message"], body
        with grpc_channel(server) as ch:
            stub = app_pb.grpc.ApplicationServiceStub(ch)
            e = rpc_error(stub.GetManifests, app_pb.app.ApplicationManifestQuery(name=env.names.directory),
                          metadata=md(token), timeout=30)
        assert e.code() == grpc.StatusCode.UNAVAILABLE and address in e.details(), e
        # The rest of the API goes on.
        assert Api(server, token).get(f"{APPS}/{env.names.directory}").status == 200
    finally:
        server.stop()


def test_without_get_the_caller_is_denied_and_audited_once(plane, env):
    user = "rsnoget"
    tokens = local_accounts(plane, SimpleNamespace(server=env.server), [user], [
        f"p, {user}, projects, get, default, allow"])
    try:
        token = next(tokens)[user]
        before = len(denials(env.server, user))
        path = f"{APPS}/{env.names.directory}/manifests"
        ours = ours_call(env.server, token.ours, "GET", path)
        theirs = upstream_call(plane, "GET", path, token.theirs)
        assert ours[0] == theirs[0] == 403, (ours, theirs)
        lines = wait_for("one audit line", lambda: len(d := denials(env.server, user)) > before and d,
                         timeout=10, interval=0.1)
        assert len(lines) == before + 1, lines
    finally:
        next(tokens, None)


def local_dir(root, files):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_app_diff_local_server_side_generate_uploads_to_tiphys_as_to_argocd_server(plane, env):
    """`argocd app diff --local --server-side-generate` is the CLI's GetManifestsWithFiles: the
    directory is uploaded, the repo-server renders it, and both servers' diffs read alike."""
    # The upload is the repository's root: the source's path (plain) is in it.
    local = local_dir(env.dir / "local", {
        "plain/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: local-cm\ndata:\n  k: local\n",
        "plain/secret.yaml": ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: local-secret\n"
                        f"stringData:\n  password: {SECRET_VALUE}\n")})
    ours_cli = ArgoCli(env.dir / "cli-diff", "--plaintext")
    ours_cli("login", env.server.addr, "--username", "admin", "--password", env.password)
    server = plane.start_argocd_server()
    theirs_cli = ArgoCli(env.dir / "cli-diff-upstream", ca=plane.state["pki"]["ca"])
    theirs_cli("login", server["address"], "--username", "admin", "--password", env.password)
    args = ("app", "diff", env.names.directory, "--local", str(local), "--server-side-generate")
    ours, theirs = ours_cli(*args, check=False), theirs_cli(*args, check=False)
    # 1: a difference found (nothing of the upload is live), as upstream finds it.
    assert (ours.returncode, theirs.returncode) == (1, 1), (ours.stderr, theirs.stderr)
    assert "local-cm" in ours.stdout, ours.stdout
    assert ours.stdout == theirs.stdout, (ours.stdout, theirs.stdout)
    assert SECRET_VALUE not in ours.stdout
    lines = [line for line in env.server.logs().splitlines()
             if " audit: " in line and "GetManifestsWithFiles" in line]
    assert lines and 'result="ok"' in lines[-1], lines[-3:]


def upload(app_pb, server, token, name, chunks, timeout=60):
    """GetManifestsWithFiles from grpcio: the query, then `chunks` (bytes each)."""
    wrapper = app_pb.app.ApplicationManifestQueryWithFilesWrapper

    def parts():
        yield wrapper(query=app_pb.app.ApplicationManifestQueryWithFiles(name=name, checksum="0" * 64))
        for chunk in chunks:
            yield wrapper(chunk=app_pb.app.FileChunk(chunk=chunk))
    with grpc_channel(server) as ch:
        call = ch.stream_unary("/application.ApplicationService/GetManifestsWithFiles",
                               request_serializer=wrapper.SerializeToString,
                               response_deserializer=lambda b: b)
        return call(parts(), metadata=md(token), timeout=timeout)


def test_an_upload_over_the_limit_is_refused_clearly(env, app_pb):
    """The upload as a whole is held to --grpc-max-request-bytes (4 MiB by default): past it the call
    is refused with RESOURCE_EXHAUSTED naming the limit, however small each message."""
    chunk = b"x" * (64 << 10)
    e = rpc_error(upload, app_pb, env.server, env.token, env.names.directory, [chunk] * 80)
    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e
    assert "upload" in e.details() and "--grpc-max-request-bytes" in e.details(), e.details()
    # Under it, the same upload reaches the repo-server, which refuses an archive that is not one
    # (its checksum does not match) with its own words.
    e = rpc_error(upload, app_pb, env.server, env.token, env.names.directory, [chunk])
    assert e.code() == grpc.StatusCode.UNKNOWN and "checksum" in e.details(), e.details()
    # A stream without its query first is refused before anything is sent on.
    with grpc_channel(env.server) as ch:
        wrapper = app_pb.app.ApplicationManifestQueryWithFilesWrapper
        call = ch.stream_unary("/application.ApplicationService/GetManifestsWithFiles",
                               request_serializer=wrapper.SerializeToString, response_deserializer=lambda b: b)
        e = rpc_error(call, iter([wrapper(chunk=app_pb.app.FileChunk(chunk=b"x"))]), metadata=md(env.token),
                      timeout=30)
    assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "query is nil" in e.details(), e.details()
