"""Pages, filters, sorts and facet counts of applications (README, "Pages, filters and facets")
over real sockets: REST, native gRPC (grpcio) and gRPC-Web give the same pages; continue tokens
follow to the end of the list and are refused, by name, when altered or reused for another query;
facet counts leave out what the caller may not see; a Watch takes the same filters; and two
replicas on one etcd honour each other's tokens (the key is derived from the shared server key).

The sync and health filters need the controller's status: `test_kube_backend.py` checks them on
the Kubernetes backend against the real controller; `tests/inproc/pages.rs` checks every filter
against a scan of the list.
"""

from types import SimpleNamespace

import grpc
import pytest

from appkit import APPS, Api, app_body, grpc_channel, grpc_web, md, open_watch, uniq, write_rbac
from authkit import ADMIN_PW, ALICE_PW, login_token

POLICY = ["p, alice, applications, get, team-a/*, allow"]
N = 36


def make_apps(api, prefix):
    """Project team-a, and N applications: every third in it, destination namespaces ns-0..ns-5,
    two repos."""
    r = api.call("POST", "/api/v1/projects", {"project": {"metadata": {"name": "team-a"}, "spec": {
        "sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}]}}, "upsert": True})
    assert r.status == 200, r
    names = []
    for i in range(N):
        name = f"{prefix}-{i:02d}"
        body = app_body(name, project="team-a" if i % 3 == 0 else "default", dest_namespace=f"ns-{i % 6}",
                        labels={"tier": "web" if i % 2 else "db"},
                        repo=f"https://git.example.test/org/repo-{i % 2}.git")
        api.must_create(body)
        names.append(name)
    return names


@pytest.fixture(scope="module")
def env(module_servers, module_config):
    cfg = module_config()
    write_rbac(cfg, POLICY)
    server = module_servers.start("--insecure", config=cfg)
    admin = Api(server, login_token(server, "admin", ADMIN_PW))
    prefix = uniq("pg")
    names = make_apps(admin, prefix)
    return SimpleNamespace(server=server, admin=admin, alice=Api(server, login_token(server, "alice", ALICE_PW)),
                           names=names, prefix=prefix)


def rest_pages(api, **params):
    """Every page of a REST list, following metadata.continue; the names in order."""
    out, token = [], None
    for _ in range(N + 2):
        page = api.list(**params, **({"continue": token} if token else {}))
        out += [a["metadata"]["name"] for a in page["items"] or []]
        token = page["metadata"].get("continue")
        if not token:
            return out
    raise AssertionError("the pages never end")


def test_rest_pages_follow_to_the_end_in_each_order(env):
    mine = sorted(env.names)
    assert rest_pages(env.admin, limit=5, search=env.prefix) == mine
    assert rest_pages(env.admin, limit=7, search=env.prefix, sort="-name") == mine[::-1]
    # Created in name order, so the creation order is the name order.
    assert rest_pages(env.admin, limit=8, search=env.prefix, sort="created") == mine


def test_rest_filters_select_as_their_fields_say(env):
    names = env.names
    team_a = [n for i, n in enumerate(names) if i % 3 == 0]
    assert rest_pages(env.admin, limit=4, search=env.prefix, filter="project=team-a") == team_a
    ns = [n for i, n in enumerate(names) if i % 6 in (1, 2)]
    assert rest_pages(env.admin, limit=50, search=env.prefix, filter=["namespace=ns-1", "namespace=ns-2"]) == ns
    both = [n for i, n in enumerate(names) if i % 3 == 0 and i % 2 == 1]
    assert rest_pages(env.admin, limit=3, search=env.prefix, filter=["project=team-a", "repo=https://git.example.test/org/repo-1"]) == both
    web = [n for i, n in enumerate(names) if i % 2 == 1 and i % 6 == 3]
    assert rest_pages(env.admin, limit=50, search=env.prefix, selector="tier=web", filter="namespace=ns-3") == web
    assert rest_pages(env.admin, limit=50, search=env.prefix, filter="cluster=no-such-cluster") == []


def test_facets_count_only_what_the_caller_may_see(env):
    def facets(api):
        page = api.list(limit=1, search=env.prefix, facets="project,namespace")
        return {f["field"]: {v["value"]: v["count"] for v in f["values"]} for f in page["facets"]}
    admin = facets(env.admin)
    assert admin["project"] == {"team-a": N // 3, "default": N - N // 3}
    assert sum(admin["namespace"].values()) == N
    alice = facets(env.alice)
    assert alice["project"] == {"team-a": N // 3}, "alice sees no count of what she may not get"
    assert sum(alice["namespace"].values()) == N // 3


def test_bad_page_parameters_are_refused_by_name(env):
    page = env.admin.list(limit=5, search=env.prefix)
    token = page["metadata"]["continue"]
    cases = [({"filter": "colour=red"}, 'unknown filter field "colour"'),
             ({"facets": "colour"}, 'unknown facet field "colour"'),
             ({"sort": "size"}, 'unknown sort "size"'),
             ({"limit": 5, "search": env.prefix, "continue": token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")},
              "not one this server issued"),
             ({"limit": 5, "search": env.prefix + "x", "continue": token}, "another query")]
    for params, needle in cases:
        r = env.admin.get(APPS + "?" + "&".join(f"{k}={v}" for k, v in params.items()))
        assert r.status == 400, (params, r)
        assert needle in r.json()["message"], (params, r.json())
        assert "list again" in r.json()["message"] or "unknown" in r.json()["message"]


def test_grpc_and_grpc_web_give_the_rest_pages(env, app_pb):
    expected = env.admin.list(limit=6, search=env.prefix, sort="-name", filter="project=default", facets="namespace")
    want = [a["metadata"]["name"] for a in expected["items"]]
    query = app_pb.app.ApplicationQuery(limit=6, search=env.prefix, sort="-name", filter=["project=default"],
                                        facets=["namespace"])
    with grpc_channel(env.server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        got = stub.List(query, metadata=md(env.admin.token), timeout=20)
        assert [a.metadata.name for a in got.items] == want
        token = getattr(got.metadata, "continue")
        assert token
        counts = {v.value: v.count for v in got.facets[0].values}
        assert counts == {v["value"]: v["count"] for v in expected["facets"][0]["values"]}
        nxt = app_pb.app.ApplicationQuery(limit=6, search=env.prefix, sort="-name", filter=["project=default"],
                                          **{"continue": token})
        second = stub.List(nxt, metadata=md(env.admin.token), timeout=20)
        rest_second = env.admin.list(limit=6, search=env.prefix, sort="-name", filter="project=default",
                                     **{"continue": expected["metadata"]["continue"]})
        assert [a.metadata.name for a in second.items] == [a["metadata"]["name"] for a in rest_second["items"]]
        with pytest.raises(grpc.RpcError) as err:
            stub.List(app_pb.app.ApplicationQuery(filter=["colour=red"]), metadata=md(env.admin.token), timeout=20)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "unknown filter field" in err.value.details()
    web = grpc_web(env.server, "List", query, token=env.admin.token)
    assert web.status == 200 and web.trailers.get("grpc-status") == "0", web
    listed = app_pb.v1.ApplicationList.FromString(web.messages[0])
    assert [a.metadata.name for a in listed.items] == want
    assert listed.facets[0].field == "namespace"


@pytest.mark.parametrize("transport", ["sse", "grpc"])
def test_a_watch_takes_the_same_filters(env, app_pb, watches, transport):
    with grpc_channel(env.server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        w = watches.add(open_watch(transport, env.server, env.admin.token, stub=stub, pb=app_pb,
                                   resourceVersion=str(env.admin.revision()),
                                   filter=["project=team-a", "namespace=ns-9"]))
        other = uniq("pw-other")
        env.admin.must_create(app_body(other, project="team-a", dest_namespace="ns-8"))
        wanted = uniq("pw-wanted")
        env.admin.must_create(app_body(wanted, project="team-a", dest_namespace="ns-9"))
        kind, name, _, _ = w.event()
        assert (kind, name) == ("ADDED", wanted), "the first event is the matching one"


def test_replicas_on_one_etcd_honour_each_others_tokens(servers, etcd, config_dir):
    cfg = config_dir()
    a = servers.start("--insecure", *etcd.flags("/pages/"), config=cfg)
    b = servers.start("--insecure", *etcd.flags("/pages/"), config=cfg)
    api_a = Api(a, login_token(a, "admin", ADMIN_PW))
    api_b = Api(b, login_token(b, "admin", ADMIN_PW))
    names = sorted(make_apps(api_a, "rep")[:N])
    first = api_a.list(limit=10, search="rep-")
    second = api_b.list(limit=100, search="rep-", **{"continue": first["metadata"]["continue"]})
    got = [x["metadata"]["name"] for x in first["items"] + second["items"]]
    assert got == names
