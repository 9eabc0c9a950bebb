"""ApplicationSetService end to end on a real server: CRUD over REST (create, idempotent create,
upsert, stale resourceVersion, dry run, list filters, delete), the Applications `generate` renders
for the list, clusters and matrix generators in both template styles (checked against
hand-worked expectations), RBAC allow and deny, every kind of bad input answered 400 with nothing
stored, and the same service over native gRPC (grpcio stubs compiled from our protos) and
gRPC-Web, and its watch stream.
"""

import json
import socket
import time
from types import SimpleNamespace

import grpc
import pytest

from appkit import IN_CLUSTER, REPO_URL, Api, grpc_channel, grpc_web, md, rpc_error, rv_of, uniq, write_rbac
from authkit import ADMIN_PW, ALICE_PW, BOB_PW, assert_api_error, connection, login_token

SETS = "/api/v1/applicationsets"
POLICY = [
    # alice may only look at the sets of the default project
    "p, alice, applicationsets, get, default/*, allow",
    # bob may do anything with the sets of the default project, nothing elsewhere
    "p, bob, applicationsets, *, default/*, allow",
]
PROD = {"server": "https://prod-east.example:6443", "name": "Prod_East",
        "labels": {"env": "prod"}, "annotations": {"owner": "team-a"}}
DEV = {"server": "https://dev-west.example:6443", "name": "dev-west", "labels": {"env": "dev"}}


@pytest.fixture(scope="module")
def env(module_servers, module_config):
    cfg = module_config()
    write_rbac(cfg, POLICY)
    server = module_servers.start("--insecure", config=cfg)
    tokens = {"admin": login_token(server, "admin", ADMIN_PW), "alice": login_token(server, "alice", ALICE_PW),
              "bob": login_token(server, "bob", BOB_PW)}
    admin = Api(server, tokens["admin"])
    for cluster in (PROD, DEV):
        r = admin.call("POST", "/api/v1/clusters", cluster)
        assert r.status == 200, r
    r = admin.call("POST", "/api/v1/projects", {"project": {"metadata": {"name": "other"}, "spec": {
        "sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}]}}})
    assert r.status == 200, r
    return SimpleNamespace(server=server, tokens=tokens, admin=admin, alice=Api(server, tokens["alice"]),
                           bob=Api(server, tokens["bob"]), anonymous=Api(server, None))


def list_set(name, elements, project="default", **spec):
    """A set of one list generator whose Applications are `<cluster>-guestbook`."""
    return {"metadata": {"name": name, "labels": {"suite": "appsets"}}, "spec": {
        "generators": [{"list": {"elements": elements}}],
        "template": {"metadata": {"name": "{{cluster}}-guestbook", "labels": {"team": "{{cluster}}"}},
                     "spec": {"project": project,
                              "source": {"repoURL": REPO_URL, "targetRevision": "HEAD",
                                         "path": "guestbook/{{cluster}}"},
                              "destination": {"server": "{{url}}", "namespace": "{{values.ns}}"}}},
        **spec}}


def generate(api, appset):
    return api.call("POST", f"{SETS}/generate", {"applicationSet": appset})


def must_generate(api, appset):
    r = generate(api, appset)
    assert r.status == 200, r
    return r.json().get("applications", [])


def shape(app):
    """What the tests compare of a generated Application."""
    return {"metadata": app["metadata"], "spec": app["spec"]}


def assert_missing(env, name):
    assert env.admin.get(f"{SETS}/{name}").status == 404


# ---- generate: hand-worked expectations --------------------------------------------------------

def test_list_generator_with_fasttemplate(env):
    appset = list_set("gen-list", [
        {"cluster": "engineering-dev", "url": IN_CLUSTER},
        {"cluster": "engineering-prod", "url": "https://prod-east.example:6443", "values": {"ns": "prod-ns"}},
    ])
    apps = must_generate(env.admin, appset)
    assert [shape(a) for a in apps] == [
        {"metadata": {"name": "engineering-dev-guestbook", "namespace": "argocd",
                      "labels": {"team": "engineering-dev"}},
         "spec": {"source": {"repoURL": REPO_URL, "path": "guestbook/engineering-dev", "targetRevision": "HEAD"},
                  # fasttemplate keeps a tag it has no parameter for, as upstream
                  "destination": {"server": IN_CLUSTER, "namespace": "{{values.ns}}"},
                  "project": "default"}},
        {"metadata": {"name": "engineering-prod-guestbook", "namespace": "argocd",
                      "labels": {"team": "engineering-prod"}},
         "spec": {"source": {"repoURL": REPO_URL, "path": "guestbook/engineering-prod", "targetRevision": "HEAD"},
                  "destination": {"server": "https://prod-east.example:6443", "namespace": "prod-ns"},
                  "project": "default"}},
    ]
    assert_missing(env, "gen-list")  # generate stores nothing
    assert env.admin.get("/api/v1/applications/engineering-dev-guestbook").status == 404


def cluster_set(name, selector=None):
    clusters = {"values": {"ns": "{{name}}-ns"}}
    if selector is not None:
        clusters["selector"] = selector
    return {"metadata": {"name": name}, "spec": {
        "generators": [{"clusters": clusters}],
        "template": {"metadata": {"name": "{{nameNormalized}}-app",
                                  "labels": {"env": "{{metadata.labels.env}}",
                                             "owner": "{{metadata.annotations.owner}}"}},
                     "spec": {"project": "default", "source": {"repoURL": REPO_URL, "path": "p"},
                              "destination": {"server": "{{server}}", "namespace": "{{values.ns}}"}}}}}


def test_clusters_generator_with_a_selector(env):
    apps = must_generate(env.admin, cluster_set("gen-clusters", {"matchLabels": {"env": "prod"}}))
    assert [shape(a) for a in apps] == [
        {"metadata": {"name": "prod-east-app", "namespace": "argocd",
                      "labels": {"env": "prod", "owner": "team-a"}},
         "spec": {"source": {"repoURL": REPO_URL, "path": "p"},
                  "destination": {"server": "https://prod-east.example:6443", "namespace": "Prod_East-ns"},
                  "project": "default"}},
    ]
    expr = {"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev", "qa"]}]}
    assert [a["metadata"]["name"] for a in must_generate(env.admin, cluster_set("gen-expr", expr))] == [
        "dev-west-app"]
    # without a selector: every registered cluster and the in-cluster destination (which has no
    # labels, so its tags stay as written)
    apps = must_generate(env.admin, cluster_set("gen-all"))
    assert [a["metadata"]["name"] for a in apps] == ["dev-west-app", "prod-east-app", "in-cluster-app"]
    assert apps[2]["metadata"]["labels"] == {"env": "{{metadata.labels.env}}",
                                             "owner": "{{metadata.annotations.owner}}"}
    assert apps[2]["spec"]["destination"] == {"server": IN_CLUSTER, "namespace": "in-cluster-ns"}
    bad = cluster_set("gen-bad-op", {"matchExpressions": [{"key": "env", "operator": "Is"}]})
    assert_api_error(generate(env.admin, bad), 400, 3, r"matchExpressions\[0\]\.operator.*\"Is\"")


def test_matrix_generator_with_go_templates(env):
    appset = {"metadata": {"name": "gen-matrix"}, "spec": {
        "goTemplate": True, "goTemplateOptions": ["missingkey=error"],
        "generators": [{"matrix": {"generators": [
            {"list": {"elements": [{"app": "Guestbook", "path": "guestbook"},
                                   {"app": "Helm", "path": "helm-guestbook"}]}},
            {"clusters": {"selector": {"matchLabels": {"env": "dev"}}}},
        ]}}],
        "template": {"metadata": {"name": "{{ .app | lower }}-{{ .nameNormalized }}",
                                  "labels": {"env": "{{ index .metadata.labels \"env\" }}"}},
                     "spec": {"project": "default",
                              "source": {"repoURL": REPO_URL, "path": "{{ .path }}"},
                              "destination": {"server": "{{ .server }}",
                                              "namespace": "{{ if eq .app \"Helm\" }}charts{{ else }}apps{{ end }}"}}}}}
    apps = must_generate(env.admin, appset)
    assert [shape(a) for a in apps] == [
        {"metadata": {"name": "guestbook-dev-west", "namespace": "argocd", "labels": {"env": "dev"}},
         "spec": {"source": {"repoURL": REPO_URL, "path": "guestbook"},
                  "destination": {"server": "https://dev-west.example:6443", "namespace": "apps"},
                  "project": "default"}},
        {"metadata": {"name": "helm-dev-west", "namespace": "argocd", "labels": {"env": "dev"}},
         "spec": {"source": {"repoURL": REPO_URL, "path": "helm-guestbook"},
                  "destination": {"server": "https://dev-west.example:6443", "namespace": "charts"},
                  "project": "default"}},
    ]
    # the same matrix with fasttemplate: flat parameters of both generators
    flat = json.loads(json.dumps(appset))
    flat["spec"].pop("goTemplate")
    flat["spec"].pop("goTemplateOptions")
    flat["spec"]["template"]["metadata"] = {"name": "{{path}}-{{name}}"}
    flat["spec"]["template"]["spec"]["source"]["path"] = "{{path}}"
    flat["spec"]["template"]["spec"]["destination"] = {"server": "{{server}}", "namespace": "{{app}}"}
    apps = must_generate(env.admin, flat)
    assert [(a["metadata"]["name"], a["spec"]["destination"]["namespace"]) for a in apps] == [
        ("guestbook-dev-west", "Guestbook"), ("helm-guestbook-dev-west", "Helm")]
    one = json.loads(json.dumps(appset))
    one["spec"]["generators"][0]["matrix"]["generators"].pop()
    assert_api_error(generate(env.admin, one), 400, 3, r"matrix combines exactly two generators, found 1")


def go_set(name, template_name, options=None, namespace="ns"):
    spec = {"goTemplate": True,
            "generators": [{"list": {"elements": [{"cluster": "a"}]}}],
            "template": {"metadata": {"name": template_name},
                         "spec": {"project": "default", "source": {"repoURL": REPO_URL, "path": "p"},
                                  "destination": {"server": IN_CLUSTER, "namespace": namespace}}}}
    if options is not None:
        spec["goTemplateOptions"] = options
    return {"metadata": {"name": name}, "spec": spec}


def test_go_template_missing_keys_and_errors(env):
    # missingkey=default: a missing key prints Go's "<no value>"
    apps = must_generate(env.admin, go_set("go-default", "{{ .cluster }}-x", namespace="{{ .region }}"))
    assert apps[0]["spec"]["destination"]["namespace"] == "<no value>"
    for options in (["missingkey=error"], ["missingkey=zero", "missingkey=error"]):
        r = generate(env.admin, go_set("go-error", "{{ .cluster }}-x", options, namespace="{{ .region }}"))
        assert_api_error(r, 400, 3, r"spec\.template\.spec\.destination\.namespace: .*map has no entry for key \"region\"")
    r = generate(env.admin, go_set("go-bad", "{{ .cluster "))
    assert_api_error(r, 400, 3, r"spec\.template\.metadata\.name: .*unclosed action")
    r = generate(env.admin, go_set("go-func", "{{ .cluster | shout }}"))
    assert_api_error(r, 400, 3, r"function \"shout\" not defined")
    r = generate(env.admin, go_set("go-opt", "x", ["missingkey=maybe"]))
    assert_api_error(r, 400, 3, r"goTemplateOptions.*missingkey=maybe")
    # the same errors on create: nothing is stored
    r = env.admin.call("POST", SETS, go_set("go-stored", "{{ .nope }}", ["missingkey=error"]))
    assert_api_error(r, 400, 3, r"map has no entry for key \"nope\"")
    assert_missing(env, "go-stored")


# ---- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("generator", ["git", "scmProvider", "pullRequest", "clusterDecisionResource",
                                       "merge", "plugin"])
def test_unsupported_generators_are_refused(env, generator):
    name = uniq("unsup")
    appset = list_set(name, [])
    appset["spec"]["generators"] = [{generator: {"repoURL": REPO_URL}}]
    for r in (env.admin.call("POST", SETS, appset), generate(env.admin, appset)):
        assert_api_error(r, 400, 3, rf"spec\.generators\[0\]: generator \"{generator}\" is not supported by this server")
    assert_missing(env, name)
    nested = list_set(name, [])
    nested["spec"]["generators"] = [{"matrix": {"generators": [{"list": {"elements": []}}, {generator: {}}]}}]
    assert_api_error(env.admin.call("POST", SETS, nested), 400, 3,
                     rf"spec\.generators\[0\]\.matrix\.generators\[1\]: generator \"{generator}\"")
    assert_missing(env, name)


def test_bad_input_is_refused_and_nothing_is_stored(env):
    cases = [
        (list_set("Bad_Name", []), r"metadata\.name: invalid applicationset name"),
        (list_set("", []), r"metadata\.name"),
        (list_set("templated-project", [], project="{{cluster}}"), r"templated project"),
        (list_set("unknown-project", [], project="nope"), r"references project nope which does not exist"),
        (list_set("bad-app-name", [{"cluster": "UPPER", "url": IN_CLUSTER}]),
         r"spec\.generators\[0\], parameter set 0: the generated application is invalid"),
        (list_set("dup-app", [{"cluster": "a", "url": IN_CLUSTER}, {"cluster": "a", "url": IN_CLUSTER}]),
         r"more than one application named \"a-guestbook\""),
        (list_set("not-strings", [{"cluster": 7}]), r"elements\[0\]\.cluster: a value must be a string"),
        (list_set("no-generator", [{"cluster": "a"}]) | {"spec": {"generators": [{}], "template": {}}},
         r"no generator is set"),
        (list_set("unclosed", [{"cluster": "a", "url": IN_CLUSTER}]) | {"spec": {
            "generators": [{"list": {"elements": [{"cluster": "a"}]}}],
            "template": {"metadata": {"name": "{{cluster"}, "spec": {"project": "default"}}}},
         r"spec\.template\.metadata\.name: .*end tag"),
        (list_set("secret-url", []) | {"spec": {"generators": [], "template": {"spec": {
            "project": "default", "source": {"repoURL": "https://u:hunter2@git.example/r.git"}}}}},
         r"spec\.template\.spec\.source\.repoURL.*password"),
        (list_set("patch", []) | {"spec": {"generators": [], "templatePatch": "spec: {}",
                                           "template": {"spec": {"project": "default"}}}},
         r"templatePatch is not supported"),
        (list_set("wrong-type", []) | {"spec": {"goTemplate": "yes"}}, r"spec\.goTemplate: expected true or false"),
    ]
    for body, message in cases:
        r = env.admin.call("POST", SETS, body)
        assert_api_error(r, 400, 3, message)
        if body["metadata"]["name"]:
            assert_missing(env, body["metadata"]["name"])
    r = env.admin.call("POST", SETS, b'{"metadata": {"name": "broken"')
    assert r.status == 400, r
    assert_missing(env, "broken")


# ---- CRUD --------------------------------------------------------------------------------------

def test_create_get_list_upsert_and_delete(env):
    name = uniq("crud")
    first = list_set(name, [{"cluster": "c1", "url": IN_CLUSTER}])
    r = env.admin.call("POST", SETS, first)
    assert r.status == 200, r
    created = r.json()
    rv = rv_of(created)
    assert created["metadata"]["namespace"] == "argocd"
    assert created["spec"]["generators"] == first["spec"]["generators"]
    got = env.admin.get(f"{SETS}/{name}").json()
    assert got == created
    # the same spec again: answered as stored
    again = env.admin.call("POST", SETS, first).json()
    assert rv_of(again) == rv
    # a different spec without upsert: refused, unchanged
    second = list_set(name, [{"cluster": "c2", "url": IN_CLUSTER}])
    assert_api_error(env.admin.call("POST", SETS, second), 400, 3, r"use upsert flag")
    assert rv_of(env.admin.get(f"{SETS}/{name}").json()) == rv
    # upsert, naming the version it replaces
    second["metadata"]["resourceVersion"] = str(rv)
    second["metadata"]["labels"] = {"extra": "yes"}
    r = env.admin.call("POST", f"{SETS}?upsert=true", second)
    assert r.status == 200, r
    updated = r.json()
    assert rv_of(updated) > rv
    assert updated["spec"]["generators"][0]["list"]["elements"] == [{"cluster": "c2", "url": IN_CLUSTER}]
    assert updated["metadata"]["labels"] == {"suite": "appsets", "extra": "yes"}  # merged, as upstream
    # a stale version: 409, nothing written
    third = list_set(name, [{"cluster": "c3", "url": IN_CLUSTER}])
    third["metadata"]["resourceVersion"] = str(rv)
    assert_api_error(env.admin.call("POST", f"{SETS}?upsert=true", third), 409, 10)
    assert env.admin.get(f"{SETS}/{name}").json() == updated
    # list: selector and project filters
    listed = env.admin.get(f"{SETS}?selector=extra%3Dyes").json()
    assert [i["metadata"]["name"] for i in listed["items"]] == [name]
    assert rv_of(listed) >= rv_of(updated)
    assert env.admin.get(f"{SETS}?selector=extra%3Dno").json()["items"] in (None, [])
    assert env.admin.get(f"{SETS}?projects=other&selector=extra%3Dyes").json()["items"] in (None, [])
    assert_api_error(env.admin.get(f"{SETS}?selector=a%20b%3Dc"), 400, 3, r"invalid selector")
    # tree and events
    assert env.admin.get(f"{SETS}/{name}/resource-tree").json() == {}
    assert env.admin.get(f"{SETS}/{name}/events").status == 200
    # delete
    r = env.admin.call("DELETE", f"{SETS}/{name}")
    assert r.status == 200 and r.json() == {}, r
    assert_missing(env, name)
    assert env.admin.call("DELETE", f"{SETS}/{name}").status == 404


def test_dry_run_answers_the_applications_and_stores_nothing(env):
    name = uniq("dry")
    body = list_set(name, [{"cluster": "d1", "url": IN_CLUSTER}, {"cluster": "d2", "url": IN_CLUSTER}])
    r = env.admin.call("POST", f"{SETS}?dryRun=true", body)
    assert r.status == 200, r
    answer = r.json()
    assert answer["status"]["resources"] == [
        {"group": "argoproj.io", "version": "v1alpha1", "kind": "Application", "namespace": "argocd",
         "name": "d1-guestbook"},
        {"group": "argoproj.io", "version": "v1alpha1", "kind": "Application", "namespace": "argocd",
         "name": "d2-guestbook"}]
    assert_missing(env, name)


# ---- RBAC --------------------------------------------------------------------------------------

def test_rbac_allow_and_deny(env):
    mine = uniq("bob")
    assert env.bob.call("POST", SETS, list_set(mine, [{"cluster": "b1", "url": IN_CLUSTER}])).status == 200
    elsewhere = uniq("other")
    assert env.admin.call("POST", SETS, list_set(elsewhere, [], project="other")).status == 200
    # bob: everything in default, nothing in `other`
    assert_api_error(env.bob.call("POST", SETS, list_set(uniq("bob"), [], project="other")), 403, 7)
    assert_api_error(generate(env.bob, list_set("x", [], project="other")), 403, 7)
    assert len(must_generate(env.bob, list_set("x", [{"cluster": "g", "url": IN_CLUSTER}]))) == 1
    assert_api_error(env.bob.get(f"{SETS}/{elsewhere}"), 403, 7)
    # a generator template moving applications to another project needs the right there too
    moved = list_set(uniq("bob"), [{"cluster": "m", "url": IN_CLUSTER}])
    moved["spec"]["generators"][0]["list"]["template"] = {"spec": {"project": "other"}}
    assert_api_error(env.bob.call("POST", SETS, moved), 403, 7)
    assert_missing(env, moved["metadata"]["name"])
    # alice: get in default only
    names = [i["metadata"]["name"] for i in env.alice.get(SETS).json()["items"]]
    assert mine in names and elsewhere not in names
    assert env.alice.get(f"{SETS}/{mine}").status == 200
    assert_api_error(env.alice.get(f"{SETS}/{elsewhere}"), 403, 7)
    assert_api_error(env.alice.get(f"{SETS}/no-such-set"), 403, 7)  # no existence oracle
    assert_api_error(env.alice.call("POST", SETS, list_set(uniq("alice"), [])), 403, 7)
    assert_api_error(generate(env.alice, list_set("x", [])), 403, 7)
    assert_api_error(env.alice.call("DELETE", f"{SETS}/{mine}"), 403, 7)
    assert env.admin.get(f"{SETS}/{mine}").status == 200
    assert_api_error(env.anonymous.get(SETS), 401, 16)
    assert env.bob.call("DELETE", f"{SETS}/{mine}").status == 200


# ---- gRPC, gRPC-Web and watch ------------------------------------------------------------------

def pb_set(pb, name, elements):
    s = pb.v1set.ApplicationSet()
    s.metadata.name = name
    s.metadata.labels["via"] = "grpc"
    gen = s.spec.generators.add()
    for element in elements:
        gen.list.elements.add().raw = json.dumps(element).encode()
    s.spec.template.metadata.name = "{{cluster}}-grpc"
    s.spec.template.spec.project = "default"
    s.spec.template.spec.source.repoURL = REPO_URL
    s.spec.template.spec.source.path = "p"
    s.spec.template.spec.destination.server = IN_CLUSTER
    s.spec.template.spec.destination.namespace = "{{cluster}}"
    return s


def test_native_grpc_and_grpc_web(env, app_pb):
    pb = app_pb
    name = uniq("grpc")
    token = env.tokens["admin"]
    with grpc_channel(env.server) as ch:
        stub = pb.appset_grpc.ApplicationSetServiceStub(ch)
        created = stub.Create(pb.appset.ApplicationSetCreateRequest(applicationset=pb_set(pb, name, [{"cluster": "g1"}])),
                              metadata=md(token))
        assert created.metadata.name == name and created.metadata.resourceVersion.isdigit()
        got = stub.Get(pb.appset.ApplicationSetGetQuery(name=name), metadata=md(token))
        assert got == created
        assert json.loads(got.spec.generators[0].list.elements[0].raw) == {"cluster": "g1"}
        listed = stub.List(pb.appset.ApplicationSetListQuery(selector="via=grpc"), metadata=md(token))
        assert [i.metadata.name for i in listed.items] == [name]
        generated = stub.Generate(pb.appset.ApplicationSetGenerateRequest(
            applicationSet=pb_set(pb, "x", [{"cluster": "g1"}, {"cluster": "g2"}])), metadata=md(token))
        assert [(a.metadata.name, a.spec.destination.namespace) for a in generated.applications] == [
            ("g1-grpc", "g1"), ("g2-grpc", "g2")]
        bad = pb_set(pb, "x", [{"cluster": "g1"}])
        bad.spec.goTemplate = True
        bad.spec.template.metadata.name = "{{ .cluster"
        err = rpc_error(stub.Generate, pb.appset.ApplicationSetGenerateRequest(applicationSet=bad), metadata=md(token))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "unclosed action" in err.details(), err
        assert stub.Get(pb.appset.ApplicationSetGetQuery(name=name), metadata=md(env.tokens["alice"])) == created
        err = rpc_error(stub.Create, pb.appset.ApplicationSetCreateRequest(
                            applicationset=pb_set(pb, uniq("a"), [{"cluster": "a1"}])),
                        metadata=md(env.tokens["alice"]))
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED, err

        web = grpc_web(env.server, "applicationset.ApplicationSetService/Get",
                       pb.appset.ApplicationSetGetQuery(name=name), token=token)
        assert web.status == 200 and web.trailers.get("grpc-status") == "0", web
        assert pb.v1set.ApplicationSet.FromString(web.messages[0]) == created
        web = grpc_web(env.server, "applicationset.ApplicationSetService/Get",
                       pb.appset.ApplicationSetGetQuery(name=name), token=env.tokens["bob"])
        assert web.status == 200 and web.trailers.get("grpc-status") == "0", web
        web = grpc_web(env.server, "applicationset.ApplicationSetService/Create",
                       pb.appset.ApplicationSetCreateRequest(applicationset=pb_set(pb, uniq("w"), [{"cluster": "w"}])),
                       token=env.tokens["alice"])
        assert "7" in (web.header_status, web.trailers.get("grpc-status")), web

        stub.Delete(pb.appset.ApplicationSetDeleteRequest(name=name), metadata=md(token))
        err = rpc_error(stub.Get, pb.appset.ApplicationSetGetQuery(name=name), metadata=md(token))
        assert err.code() == grpc.StatusCode.NOT_FOUND


def test_watch_streams_added_and_deleted(env):
    name = uniq("watch")
    assert env.admin.call("POST", SETS, list_set(name, [])).status == 200
    conn = connection(env.server, timeout=5)
    try:
        conn.request("GET", f"/api/v1/stream/applicationsets?name={name}",
                     headers={"Authorization": f"Bearer {env.tokens['admin']}"})
        resp = conn.getresponse()
        assert resp.status == 200
        events = []
        deadline = time.monotonic() + 10
        deleted = False
        while time.monotonic() < deadline and len(events) < 2:
            try:
                line = resp.readline()
            except (socket.timeout, TimeoutError):
                continue
            if line.strip():
                events.append(json.loads(line)["result"])
                if not deleted:
                    assert env.admin.call("DELETE", f"{SETS}/{name}").status == 200
                    deleted = True
        assert [(e["type"], e["applicationSet"]["metadata"]["name"]) for e in events] == [
            ("ADDED", name), ("DELETED", name)]
    finally:
        conn.close()


# ---- CLI ---------------------------------------------------------------------------------------

def test_cli_verbs(env, tmp_path):
    from conftest import cli  # noqa: PLC0415

    name = uniq("cli")
    manifest = tmp_path / "appset.yaml"
    manifest.write_text(json.dumps({"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
                                    **list_set(name, [{"cluster": "k1", "url": IN_CLUSTER},
                                                      {"cluster": "k2", "url": IN_CLUSTER}])}))
    conn = ["--server", env.server.addr, "--plaintext", "--auth-token", env.tokens["admin"]]
    r = cli("appset", "generate", "-f", str(manifest), "-o", "json", *conn)
    assert r.returncode == 0, r.stderr
    assert [a["metadata"]["name"] for a in json.loads(r.stdout)] == ["k1-guestbook", "k2-guestbook"]
    assert_missing(env, name)
    r = cli("appset", "create", "-f", str(manifest), "--dry-run", *conn)
    assert r.returncode == 0 and "k2-guestbook" in r.stdout, (r.stdout, r.stderr)
    assert_missing(env, name)
    r = cli("appset", "create", "-f", str(manifest), *conn)
    assert r.returncode == 0 and f"ApplicationSet '{name}' created" in r.stdout, (r.stdout, r.stderr)
    r = cli("appset", "list", "-l", "suite=appsets", "-o", "name", *conn)
    assert r.returncode == 0 and name in r.stdout.split(), (r.stdout, r.stderr)
    r = cli("appset", "get", name, "-o", "json", *conn)
    assert r.returncode == 0 and json.loads(r.stdout)["metadata"]["name"] == name, r.stderr
    r = cli("appset", "get", name, "--server", env.server.addr, "--plaintext", "--auth-token", env.tokens["alice"])
    assert r.returncode == 0 and "list" in r.stdout, (r.stdout, r.stderr)
    r = cli("appset", "delete", name, "--server", env.server.addr, "--plaintext", "--auth-token", env.tokens["alice"])
    assert r.returncode != 0 and "permission denied" in r.stderr.lower(), (r.stdout, r.stderr)
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps(list_set("bad", []) | {"spec": {"generators": [{"git": {}}]}}))
    r = cli("appset", "generate", "-f", str(bad), *conn)
    assert r.returncode != 0 and "generator \"git\" is not supported" in r.stderr, (r.stdout, r.stderr)
    # apply: unchanged, then configured; export lists it as a manifest apply takes back
    r = cli("apply", "-f", str(manifest), *conn)
    assert r.returncode == 0 and f"applicationset.argoproj.io/{name} unchanged" in r.stdout, (r.stdout, r.stderr)
    changed = json.loads(manifest.read_text())
    changed["spec"]["generators"][0]["list"]["elements"].append({"cluster": "k3", "url": IN_CLUSTER})
    manifest.write_text(json.dumps(changed))
    r = cli("apply", "-f", str(manifest), *conn)
    assert r.returncode == 0 and f"applicationset.argoproj.io/{name} configured" in r.stdout, (r.stdout, r.stderr)
    r = cli("admin", "export", *conn)
    assert r.returncode == 0 and "kind: ApplicationSet" in r.stdout and f"name: {name}" in r.stdout, r.stderr
    typo = tmp_path / "typo.yaml"
    typo.write_text(json.dumps({"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
                                **list_set(uniq("typo"), []), "spec": {"generatorz": []}}))
    r = cli("apply", "-f", str(typo), *conn)
    assert r.returncode != 0 and "unknown field \"spec.generatorz\"" in r.stdout + r.stderr, (r.stdout, r.stderr)
    r = cli("appset", "delete", name, *conn)
    assert r.returncode == 0, r.stderr
    assert_missing(env, name)


def test_a_set_named_like_the_generate_route_is_reachable_over_rest(env):
    """`/api/v1/applicationsets/generate` is Generate for POST and an ApplicationSet named
    `generate` for GET and DELETE, as upstream's gateway matches the method first."""
    r = env.admin.call("POST", SETS, list_set("generate", [{"cluster": "g1", "url": IN_CLUSTER}]))
    assert r.status == 200, r
    got = env.admin.get(f"{SETS}/generate")
    assert got.status == 200 and got.json()["metadata"]["name"] == "generate", got
    apps = must_generate(env.admin, list_set("other-name", [{"cluster": "g2", "url": IN_CLUSTER}]))
    assert [a["metadata"]["name"] for a in apps] == ["g2-guestbook"]
    assert env.admin.call("DELETE", f"{SETS}/generate").status == 200
    assert_missing(env, "generate")


def test_a_template_that_would_cost_too_much_is_refused(env):
    """Nesting, string growth and loops are bounded; the server goes on answering."""
    base = list_set(uniq("costly"), [{"cluster": "c1", "url": IN_CLUSTER, "l": list(range(10000))}], goTemplate=True)
    for name, why in ((f"{{{{ {'(' * 5000}1{')' * 5000} }}}}", "nested more than"),
                      ("{{ .cluster" + ' | replace "c" "cccccccccc"' * 10 + " }}", "result of replace"),
                      ("x{{range .l}}{{range $.l}}{{range $.l}}x{{end}}{{end}}{{end}}", "")):
        appset = json.loads(json.dumps(base))
        template = appset["spec"]["template"]
        template["metadata"] = {"name": name}
        template["spec"]["source"]["path"] = "guestbook"
        template["spec"]["destination"] = {"server": "{{.url}}", "namespace": "default"}
        r = generate(env.admin, appset)
        assert r.status == 400, r
        assert why in r.json()["message"], r.json()
    assert env.admin.get("/healthz").status == 200
