"""Kubernetes' limits on every stored object, end to end over real sockets (issue 20, item 4):
names are DNS-1123 subdomains (at most 253 characters, no empty part between dots), label keys
and values follow Kubernetes' syntax (values at most 63 characters), annotations hold at most
256 KiB (262144 bytes of keys and values), an object at most 1.5 MiB (1572864 bytes of stored
JSON); cluster servers and repository and credential template URLs need a host (git's scp-like
`user@host:path` stays accepted).

Each rule is checked at its boundary (the last value that passes, the first that fails), on every
write path (create, upsert, update, update spec, merge and JSON patch; over REST and over native
gRPC with grpcio stubs), and every refusal must be 400 / INVALID_ARGUMENT with the exact message
naming the field and the limit, with nothing stored (read back, and the registry revision
unchanged).
"""

import json
import re
from types import SimpleNamespace
from urllib.parse import quote, urlencode

import grpc
import pytest

from appkit import APPS, Api, app_body, grpc_channel, md, rpc_error, uniq
from authkit import ADMIN_PW, assert_api_error, login_token

PROJECTS = "/api/v1/projects"
CLUSTERS = "/api/v1/clusters"
REPOS = "/api/v1/repositories"
REPOCREDS = "/api/v1/repocreds"

MAX_ANNOTATIONS = 262144
MAX_OBJECT = 1572864

NAME_TOO_LONG = "it has 254 characters; a DNS-1123 subdomain has at most 253 characters"
DOTS = ("it and each of its dot-separated parts must start and end with a lower case letter or digit "
        "(a DNS-1123 subdomain)")
KEY_SYNTAX = ("invalid label key: the name must consist of letters, digits, '-', '_' and '.', and start and end "
              "with a letter or digit")
VALUE_TOO_LONG = "it has 64 characters; a label value has at most 63"
ANNOTATIONS_TOO_BIG = ("the annotations are 262145 bytes (keys and values), more than the limit of 262144 bytes "
                       "(256 KiB)")
OBJECT_TOO_BIG = (r"^the {} object is 15\d{{5}} bytes as stored \(canonical JSON\), more than the limit of "
                  r"1572864 bytes \(1\.5 MiB\) for an object$")


def shown(s):
    """How a message quotes a caller's value: JSON-style quotes, cut after 80 characters."""
    return json.dumps(s) if len(s) <= 80 else json.dumps(s[:80]) + "…"


def annotations_of(total):
    """Annotations whose keys and values add up to exactly `total` bytes."""
    return {"note": "x" * (total - len("note"))}


@pytest.fixture(scope="module")
def env(module_servers, module_config):
    server = module_servers.start("--insecure", config=module_config())
    token = login_token(server, "admin", ADMIN_PW)
    return SimpleNamespace(server=server, token=token, api=Api(server, token))


def refused(reply, message):
    """400 / INVALID_ARGUMENT with exactly `message` (a str), or matching `pattern` when given as
    ("re", pattern)."""
    err = assert_api_error(reply, 400, 3)
    if isinstance(message, tuple):
        assert re.search(message[1], err["message"]), err
    else:
        assert err["message"] == message, err
    assert err["error"] == err["message"], err
    return err


def unchanged(env, check):
    """Runs `check` (which must refuse a write) and asserts the registry did not move."""
    before = env.api.revision()
    check()
    assert env.api.revision() == before, "a refused write changed the registry"


# ---- applications over REST -------------------------------------------------------------------

def test_application_names_are_dns_1123_subdomains(env):
    ok = "a" * 253
    assert env.api.create(app_body(ok)).status == 200
    assert env.api.must_get(ok)["metadata"]["name"] == ok
    long = "b" * 254
    for name, why in [(long, NAME_TOO_LONG), ("a..b", DOTS), ("a.-b", DOTS), (".a", DOTS)]:
        unchanged(env, lambda: refused(env.api.create(app_body(name)),
                                       f"metadata.name: invalid application name {shown(name)}: {why}"))
        assert env.api.app(name).status == 404
    assert env.api.create(app_body("a.b-c.d")).status == 200


def test_application_labels_follow_kubernetes_syntax(env):
    good = {"team": "v" * 63, "app.kubernetes.io/" + "n" * 63: "", "p" * 253 + "/x": "A_b.c-9"}
    name = uniq("labels")
    created = env.api.must_create(app_body(name, labels=good))
    assert created["metadata"]["labels"] == good
    for labels, message in [
        ({"team": "v" * 64}, f'metadata.labels["team"]: invalid label value {shown("v" * 64)}: {VALUE_TOO_LONG}'),
        ({"a b": "x"}, f'metadata.labels["a b"]: {KEY_SYNTAX}'),
        ({"team": "-x"}, 'metadata.labels["team"]: invalid label value "-x": it must consist of letters, digits, '
                         "'-', '_' and '.', and start and end with a letter or digit, or be empty"),
        ({"a/b/c": "x"}, 'metadata.labels["a/b/c"]: invalid label key: a key has at most one \'/\', between its '
                         "prefix and its name"),
        ({"n" * 64: "x"}, f'metadata.labels[{shown("n" * 64)}]: invalid label key: the name has 64 characters; '
                          "at most 63 are allowed"),
    ]:
        fresh = uniq("labels")
        unchanged(env, lambda: refused(env.api.create(app_body(fresh, labels=labels)), message))
        assert env.api.app(fresh).status == 404


def test_application_annotations_hold_at_most_256_kib(env):
    name = uniq("annotations")
    created = env.api.must_create(app_body(name, annotations=annotations_of(MAX_ANNOTATIONS)))
    assert len(created["metadata"]["annotations"]["note"]) == MAX_ANNOTATIONS - 4
    fresh = uniq("annotations")
    unchanged(env, lambda: refused(env.api.create(app_body(fresh, annotations=annotations_of(MAX_ANNOTATIONS + 1))),
                                   f"metadata.annotations: {ANNOTATIONS_TOO_BIG}"))
    assert env.api.app(fresh).status == 404
    unchanged(env, lambda: refused(env.api.create(app_body(uniq("annotations"), annotations={"a b": "x"})),
                                   'metadata.annotations["a b"]: invalid annotation key: the name must consist of '
                                   "letters, digits, '-', '_' and '.', and start and end with a letter or digit"))


def test_an_application_is_at_most_1_5_mib(env):
    # The bulk in a plain string (spec.source.path); the rest of the object is well under 8 KiB.
    name = uniq("big")
    fits = env.api.create(app_body(name, path="p" * (MAX_OBJECT - 8192)))
    assert fits.status == 200, fits
    over = uniq("big")
    unchanged(env, lambda: refused(env.api.create(app_body(over, path="p" * MAX_OBJECT)),
                                   ("re", OBJECT_TOO_BIG.format("application"))))
    assert env.api.app(over).status == 404
    # Growing a stored one past the limit is refused too, and the stored one stays.
    before = env.api.app(name).body
    unchanged(env, lambda: refused(env.api.call("PATCH", f"{APPS}/{name}", {
        "patch": json.dumps({"spec": {"source": {"path": "p" * MAX_OBJECT}}}), "patchType": "merge"}),
        ("re", OBJECT_TOO_BIG.format("application"))))
    assert env.api.app(name).body == before


def test_every_application_write_path_applies_the_limits(env):
    name = uniq("paths")
    stored = env.api.must_create(app_body(name, labels={"team": "a"}))
    before = env.api.app(name).body
    bad_value = f'metadata.labels["team"]: invalid label value {shown("v" * 64)}: {VALUE_TOO_LONG}'
    big = annotations_of(MAX_ANNOTATIONS + 1)

    def still():
        assert env.api.app(name).body == before

    # upsert
    upsert = app_body(name, labels={"team": "v" * 64}, path="other")
    unchanged(env, lambda: refused(env.api.create(upsert, "upsert=true"), bad_value))
    still()
    # update (PUT)
    updated = json.loads(json.dumps(stored))
    updated["metadata"]["labels"] = {"a b": "x"}
    unchanged(env, lambda: refused(env.api.call("PUT", f"{APPS}/{name}", updated),
                                   f'metadata.labels["a b"]: {KEY_SYNTAX}'))
    still()
    # merge patch
    unchanged(env, lambda: refused(env.api.call("PATCH", f"{APPS}/{name}", {
        "patch": json.dumps({"metadata": {"annotations": big}}), "patchType": "merge"}),
        f"metadata.annotations: {ANNOTATIONS_TOO_BIG}"))
    still()
    # JSON patch
    unchanged(env, lambda: refused(env.api.call("PATCH", f"{APPS}/{name}", {
        "patch": json.dumps([{"op": "add", "path": "/metadata/labels/team", "value": "v" * 64}]),
        "patchType": "json"}), bad_value))
    still()
    # update spec: only the spec changes, so only the size limit can apply
    spec = dict(stored["spec"], source=dict(stored["spec"]["source"], path="p" * MAX_OBJECT))
    unchanged(env, lambda: refused(env.api.call("PUT", f"{APPS}/{name}/spec", spec),
                                   ("re", OBJECT_TOO_BIG.format("application"))))
    still()
    # a repository URL without a host, in sources[1]
    two = app_body(uniq("paths"))
    two["spec"]["sources"] = [two["spec"].pop("source"), {"repoURL": "https:///org/repo.git"}]
    unchanged(env, lambda: refused(env.api.create(two), 'spec.sources[1].repoURL: invalid repository URL '
                                                        '"https:///org/repo.git": it has no host'))


# ---- applications over gRPC -------------------------------------------------------------------

@pytest.fixture(scope="module")
def stub(env, app_pb):
    with grpc_channel(env.server) as ch:
        yield app_pb.grpc.ApplicationServiceStub(ch)


def pb_app(pb, name, labels=None):
    app = pb.v1.Application()
    app.metadata.name = name
    for k, v in (labels or {}).items():
        app.metadata.labels[k] = v
    app.spec.destination.server = "https://kubernetes.default.svc"
    app.spec.destination.namespace = "default"
    app.spec.source.repoURL = "https://github.com/argoproj/argocd-example-apps.git"
    app.spec.source.path = "guestbook"
    return app


def grpc_refused(fn, request, message, token):
    err = rpc_error(fn, request, metadata=md(token), timeout=20)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
    if isinstance(message, tuple):
        assert re.search(message[1], err.details()), err.details()
    else:
        assert err.details() == message, err.details()


def test_grpc_writes_apply_the_limits(env, stub, app_pb):
    pb, token = app_pb, env.token
    ok = "g" * 253
    assert stub.Create(pb.app.ApplicationCreateRequest(application=pb_app(pb, ok, {"team": "v" * 63})),
                       metadata=md(token), timeout=20).metadata.name == ok
    long = "h" * 254
    unchanged(env, lambda: grpc_refused(stub.Create, pb.app.ApplicationCreateRequest(application=pb_app(pb, long)),
                                        f"metadata.name: invalid application name {shown(long)}: {NAME_TOO_LONG}",
                                        token))
    assert env.api.app(long).status == 404
    bad = uniq("grpc")
    unchanged(env, lambda: grpc_refused(
        stub.Create, pb.app.ApplicationCreateRequest(application=pb_app(pb, bad, {"team": "v" * 64})),
        f'metadata.labels["team"]: invalid label value {shown("v" * 64)}: {VALUE_TOO_LONG}', token))
    assert env.api.app(bad).status == 404

    before = env.api.app(ok).body
    upd = pb_app(pb, ok, {"a b": "x"})
    unchanged(env, lambda: grpc_refused(stub.Update, pb.app.ApplicationUpdateRequest(application=upd),
                                        f'metadata.labels["a b"]: {KEY_SYNTAX}', token))
    patch = json.dumps({"metadata": {"annotations": annotations_of(MAX_ANNOTATIONS + 1)}})
    unchanged(env, lambda: grpc_refused(stub.Patch, pb.app.ApplicationPatchRequest(
        name=ok, patch=patch, patchType="merge"), f"metadata.annotations: {ANNOTATIONS_TOO_BIG}", token))
    big = pb_app(pb, uniq("grpc"))
    big.spec.source.path = "p" * MAX_OBJECT
    unchanged(env, lambda: grpc_refused(stub.Create, pb.app.ApplicationCreateRequest(application=big),
                                        ("re", OBJECT_TOO_BIG.format("application")), token))
    assert env.api.app(ok).body == before
    # exactly 256 KiB of annotations passes over gRPC too
    patch = json.dumps({"metadata": {"annotations": annotations_of(MAX_ANNOTATIONS)}})
    done = stub.Patch(pb.app.ApplicationPatchRequest(name=ok, patch=patch, patchType="merge"),
                      metadata=md(token), timeout=20)
    assert len(done.metadata.annotations["note"]) == MAX_ANNOTATIONS - 4


# ---- projects ---------------------------------------------------------------------------------

def project(name, **meta):
    return {"metadata": {"name": name, **meta}, "spec": {"sourceRepos": ["*"],
                                                         "destinations": [{"server": "*", "namespace": "*"}]}}


def test_projects_apply_the_limits(env):
    ok = "p" * 253
    created = env.api.call("POST", PROJECTS, {"project": project(ok, labels={"team": "v" * 63},
                                                                 annotations=annotations_of(MAX_ANNOTATIONS))})
    assert created.status == 200, created
    for body, message in [
        (project("p" * 254), f"metadata.name: invalid project name {shown('p' * 254)}: {NAME_TOO_LONG}"),
        (project("a..b"), f'metadata.name: invalid project name "a..b": {DOTS}'),
        (project("x-lbl", labels={"team": "v" * 64}),
         f'metadata.labels["team"]: invalid label value {shown("v" * 64)}: {VALUE_TOO_LONG}'),
        (project("x-ann", annotations=annotations_of(MAX_ANNOTATIONS + 1)),
         f"metadata.annotations: {ANNOTATIONS_TOO_BIG}"),
    ]:
        unchanged(env, lambda: refused(env.api.call("POST", PROJECTS, {"project": body}), message))
        assert env.api.get(f"{PROJECTS}/{quote(body['metadata']['name'])}").status == 404
    stored = env.api.get(f"{PROJECTS}/{ok}")
    # update and upsert
    changed = created.json()
    changed["metadata"]["labels"] = {"a b": "x"}
    unchanged(env, lambda: refused(env.api.call("PUT", f"{PROJECTS}/{ok}", {"project": changed}),
                                   f'metadata.labels["a b"]: {KEY_SYNTAX}'))
    upsert = project(ok, labels={"a b": "x"})
    upsert["spec"]["description"] = "changed"
    unchanged(env, lambda: refused(env.api.call("POST", PROJECTS, {"project": upsert, "upsert": True}),
                                   f'metadata.labels["a b"]: {KEY_SYNTAX}'))
    assert env.api.get(f"{PROJECTS}/{ok}").body == stored.body


# ---- clusters, repositories, credential templates ---------------------------------------------

def clusters(env, server):
    r = env.api.get(f"{CLUSTERS}?{urlencode({'server': server})}")
    assert r.status == 200, r
    return r.json().get("items") or []


def test_clusters_need_a_host_and_kubernetes_labels(env):
    server = "https://prod.example.com:6443"
    body = {"server": server, "name": "prod", "labels": {"env": "v" * 63},
            "annotations": annotations_of(MAX_ANNOTATIONS)}
    created = env.api.call("POST", CLUSTERS, body)
    assert created.status == 200, created
    for bad, message in [
        ("https://", 'server: invalid cluster server "https:": it is not a URL; it must be an http or https URL '
                     "with a host"),
        ("https:///x", 'server: invalid cluster server "https:///x": it has no host; it must be an http or https '
                       "URL with a host"),
        ("prod.example.com", 'server: invalid cluster server "prod.example.com": it is not a URL; it must be an '
                             "http or https URL with a host"),
    ]:
        unchanged(env, lambda: refused(env.api.call("POST", CLUSTERS, {"server": bad, "name": "x"}), message))
    other = "https://other.example.com"
    for extra, message in [
        ({"labels": {"env": "v" * 64}}, f'labels["env"]: invalid label value {shown("v" * 64)}: {VALUE_TOO_LONG}'),
        ({"labels": {"a b": "x"}}, f'labels["a b"]: {KEY_SYNTAX}'),
        ({"annotations": annotations_of(MAX_ANNOTATIONS + 1)}, f"annotations: {ANNOTATIONS_TOO_BIG}"),
    ]:
        unchanged(env, lambda: refused(env.api.call("POST", CLUSTERS, {"server": other, "name": "o", **extra}),
                                       message))
        assert clusters(env, other) == []
    # update, whole and by updatedFields
    before = clusters(env, server)
    path = f"{CLUSTERS}/{quote(server, safe='')}"
    unchanged(env, lambda: refused(env.api.call("PUT", path, {**body, "labels": {"a b": "x"}}),
                                   f'labels["a b"]: {KEY_SYNTAX}'))
    unchanged(env, lambda: refused(env.api.call("PUT", path + "?updatedFields=annotations",
                                                {"server": server, "annotations": annotations_of(MAX_ANNOTATIONS + 1)}),
                                   f"annotations: {ANNOTATIONS_TOO_BIG}"))
    assert clusters(env, server) == before


def test_repositories_and_templates_need_a_host(env):
    for url in ["https://git.example.com/a.git", "git@github.com:org/repo.git", "ssh://git@github.com:org/x.git",
                "registry.example.com/charts"]:
        r = env.api.call("POST", REPOS, {"repo": url})
        assert r.status == 200, (url, r)
    for url, why in [
        ("https://", "it has no host"),
        ("https:///org/repo.git", "it has no host"),
        ("ssh://", "it has no host"),
        ("ftp://host/x", "only https, http, ssh and git URLs with a host, or git's scp-like user@host:path, "
                         "are accepted"),
        ("repo", "only https, http, ssh and git URLs with a host, or git's scp-like user@host:path, are accepted"),
    ]:
        unchanged(env, lambda: refused(env.api.call("POST", REPOS, {"repo": url}),
                                       f"repo: invalid repository URL {json.dumps(url)}: {why}"))
        unchanged(env, lambda: refused(env.api.call("POST", REPOCREDS, {"url": url, "username": "u",
                                                                        "password": "p"}),
                                       f"url: invalid repository URL {json.dumps(url)}: {why}"))
    assert env.api.call("POST", REPOCREDS, {"url": "git@github.com:org", "sshPrivateKey": "k"}).status == 200
    listed = env.api.get(REPOS).json().get("items") or []
    assert sorted(i["repo"] for i in listed) == sorted(
        ["https://git.example.com/a.git", "git@github.com:org/repo.git", "ssh://git@github.com:org/x.git",
         "registry.example.com/charts"]), listed
    templates = env.api.get(REPOCREDS).json().get("items") or []
    assert [t["url"] for t in templates] == ["git@github.com:org"], templates
