"""The server's own OpenAPI document (/swagger.json) against the real server: it lists exactly the
operations tiphys serves, each of upstream's operations (src/rpc/table/upstream-operations.txt)
is either in it with the same path parameters or answers 501 naming the operation, and
schemathesis, with an admin token, finds every response of every operation conforming to it (no
500, no schema violation, no undocumented status or content type), bounded in examples and time.

Left out of the schemathesis run, each with its reason:
- server streams (`x-stream`: the watches): they end only when the client does, and their frames
  are checked by test_app_watch.py;
- DELETE /api/v1/session: it would log the run's own admin token out half-way;
- PUT /api/v1/account/password: it could change the admin password the run logs in with.
Checks left out: `negative_data_rejection` and `positive_data_acceptance` (REST reads input as Go's
encoding/json does: unknown fields and some type slack are accepted, as upstream; and a
schema-valid request for a random name is a 404), `ignored_auth` (version, settings and login
are public by design), `unsupported_method` (axum answers 405 as upstream's gateway does, which
this check does not expect for HEAD/OPTIONS on every path).
"""

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests

from appkit import IN_CLUSTER, Api, app_body, uniq
from authkit import ADMIN_PW, bearer, login_token

UPSTREAM = Path(__file__).resolve().parents[2] / "src" / "rpc" / "table" / "upstream-operations.txt"
SCHEMATHESIS_BUDGET = 150  # seconds of wall clock for the whole schemathesis run
SKIPPED_OPERATIONS = {("DELETE", "/api/v1/session"), ("PUT", "/api/v1/account/password")}
# tiphys's own operations (README, "Personal access tokens for SSO users"); nothing else is added.
EXTENSIONS = {("get", "/api/v1/ssousers"), ("put", "/api/v1/ssousers/{name}"),
              ("delete", "/api/v1/ssousers/{name}")}


@pytest.fixture(scope="module")
def env(module_servers, module_config):
    server = module_servers.start("--insecure", config=module_config())
    token = login_token(server, "admin", ADMIN_PW)
    doc = requests.get(server.url("/swagger.json"), timeout=10)
    assert doc.status_code == 200, doc.text
    assert doc.headers["content-type"].startswith("application/json")
    return SimpleNamespace(server=server, token=token, admin=Api(server, token), doc=doc.json())


def upstream_operations():
    """(gRPC method, verb, OpenAPI path, path parameters) of each of upstream's operations."""
    ops = []
    for line in UPSTREAM.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        method, verb, template = line.split(" ")
        path = re.sub(r"\{([^}=]+)(=[^}]*)?\}", r"{\1}", template)
        ops.append((method, verb, path, set(re.findall(r"\{([^}]+)\}", path))))
    assert len(ops) > 100
    return ops


def fill(path):
    """A concrete path for a template: each parameter a name that exists nowhere."""
    return re.sub(r"\{[^}]+\}", "no-such-thing", path)


def test_every_upstream_operation_is_documented_or_answers_501(env):
    paths = env.doc["paths"]
    served = 0
    for method, verb, path, params in upstream_operations():
        op = paths.get(path, {}).get(verb.lower())
        if op is not None:
            documented = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert documented == params, (verb, path)
            assert all(p["required"] for p in op.get("parameters", []) if p["in"] == "path")
            served += 1
            continue
        # Not in the document: declared not served, with the reason.
        r = env.admin.call(verb, fill(path), {} if verb in ("POST", "PUT", "PATCH") else None)
        assert r.status == 501, (verb, path, r.status, r.body[:300])
        message = r.json()["message"]
        assert f"{method.lstrip('/')} is not served by tiphys: " in message, message
    assert served >= 55, served


def test_document_lists_only_served_operations_and_names_their_schemas(env):
    doc = env.doc
    assert doc["openapi"].startswith("3.0")
    upstream = {(verb.lower(), path) for _, verb, path, _ in upstream_operations()}
    for path, ops in doc["paths"].items():
        for verb in ops:
            # Everything documented is one of upstream's operations or one of tiphys's listed own.
            assert (verb, path) in upstream | EXTENSIONS, (verb, path)
    for verb, path in EXTENSIONS:
        assert verb in doc["paths"][path], (verb, path)
    schemas = doc["components"]["schemas"]
    assert schemas["v1ObjectMeta"]["properties"]["generation"]["type"] == "integer"
    assert schemas["v1ObjectMeta"]["properties"]["creationTimestamp"] == {"type": "string", "format": "date-time"}
    # Served as once built: the same bytes twice.
    again = requests.get(env.server.url("/swagger.json"), timeout=10).json()
    assert again == doc


def test_document_under_rootpath(module_servers, module_config):
    server = module_servers.start("--insecure", "--rootpath", "/argocd", config=module_config())
    doc = requests.get(server.url("/argocd/swagger.json"), timeout=10)
    assert doc.status_code == 200, doc.text
    assert doc.json()["servers"] == [{"url": "/argocd"}]
    page = requests.get(server.url("/argocd/swagger-ui"), timeout=10)
    assert page.status_code == 200 and "swagger-ui/init.js" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for asset in ("init.js", "swagger-ui-bundle.js", "swagger-ui.css"):
        r = requests.get(server.url(f"/argocd/swagger-ui/{asset}"), timeout=10)
        assert r.status_code == 200 and len(r.content) > 0, asset
    # Not at the root: everything is under the root path.
    assert requests.get(server.url("/swagger.json"), timeout=10).status_code == 404


def seed(env):
    """A few objects of each kind, so that lists and gets answer real objects; returns, per path
    parameter (by the path's prefix and the parameter's name), the names of the seeded ones."""
    admin = env.admin
    project = uniq("oas-proj")
    r = admin.call("POST", "/api/v1/projects", {"project": {
        "metadata": {"name": project},
        "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*", "namespace": "*"}]}}})
    assert r.status == 200, r
    apps = [uniq("oas-app") for _ in range(2)]
    for app in apps:
        admin.must_create(app_body(app, project=project))
    r = admin.call("POST", "/api/v1/repositories", {"repo": "https://git.example.com/oas.git", "username": "u",
                                                   "password": "p"})
    assert r.status == 200, r
    r = admin.call("POST", "/api/v1/repocreds", {"url": "https://git.example.com/", "username": "u",
                                                "password": "p"})
    assert r.status == 200, r
    r = admin.call("POST", "/api/v1/clusters", {"server": "https://oas.example.com", "name": "oas",
                                               "config": {"bearerToken": "t"}})
    assert r.status == 200, r
    return {
        ("/api/v1/applications/", "name"): apps,
        ("/api/v1/applications/", "application_metadata_name"): apps,
        ("/api/v1/projects/", "name"): [project, "default"],
        ("/api/v1/projects/", "project_metadata_name"): [project],
        ("/api/v1/projects/", "project"): [project],
        ("/api/v1/clusters/", "id_value"): ["https://oas.example.com", IN_CLUSTER],
        ("/api/v1/repositories/", "repo"): ["https://git.example.com/oas.git"],
        ("/api/v1/repositories/", "repo_repo"): ["https://git.example.com/oas.git"],
        ("/api/v1/repocreds/", "url"): ["https://git.example.com/"],
        ("/api/v1/repocreds/", "creds_url"): ["https://git.example.com/"],
        ("/api/v1/account/", "name"): ["admin", "alice"],
    }


def aim(doc, seeded):
    """Path parameters that name an object take a seeded name or a missing one, so that the
    fuzzer reaches real objects (a random name is a 404 every time)."""
    for path, ops in doc["paths"].items():
        for op in ops.values():
            for param in op.get("parameters", []):
                names = next((v for (prefix, name), v in seeded.items()
                              if path.startswith(prefix) and param["in"] == "path" and param["name"] == name), None)
                if names:
                    param["schema"] = {"type": "string", "enum": [*names, "no-such-object"]}


def test_schemathesis_finds_every_response_conforming(env, tmp_path):
    seeded = seed(env)
    doc = json.loads(json.dumps(env.doc))
    streams = [(verb.upper(), path) for path, ops in doc["paths"].items()
               for verb, op in ops.items() if op.get("x-stream")]
    assert ("GET", "/api/v1/stream/applications") in streams, "the watches are documented as streams"
    # The operations left out (see the module's doc) are taken out of the document it reads.
    for verb, path in [*streams, *SKIPPED_OPERATIONS]:
        del doc["paths"][path][verb.lower()]
    doc["paths"] = {undot(path): ops for path, ops in doc["paths"].items()}
    for ops in doc["paths"].values():
        for op in ops.values():
            for param in op.get("parameters", []):
                if param["in"] == "path":
                    param["name"] = param["name"].replace(".", "_")
    aim(doc, seeded)
    tested = sum(len(ops) for ops in doc["paths"].values())
    report = tmp_path / "report.xml"
    run, took = schemathesis(env, doc, tmp_path, report)
    output = run.stdout + run.stderr
    assert run.returncode == 0, f"schemathesis found problems ({took:.0f} s):\n{output[-20000:]}"
    # It really tested: one test case per operation in the report, none skipped.
    cases = re.findall(r"<testcase ", report.read_text())
    assert len(cases) == tested, (len(cases), tested, output[-3000:])
    assert "<skipped" not in report.read_text(), output[-3000:]


def schemathesis(env, doc, tmp_path, report, *extra):
    """Runs schemathesis on `doc` against the server with the admin token; (the completed process,
    seconds taken). Fails the test past SCHEMATHESIS_BUDGET."""
    schema = tmp_path / "swagger.json"
    schema.write_text(json.dumps(doc))
    cmd = [
        str(Path(sys.executable).with_name("schemathesis")), "run", str(schema),
        "--url", env.server.url("/").rstrip("/"),
        "-H", f"Authorization: Bearer {env.token}",
        "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
                    "response_schema_conformance,response_headers_conformance",
        # Fuzzing only: the schemas have no examples, and the coverage phase's thousands of cases
        # (and its calls of every method on every path, DELETE /api/v1/session among them) do
        # not fit the time budget.
        "--phases", "fuzzing",
        "--max-examples", "8",
        "--seed", "22",
        "--workers", "2",
        "--request-timeout", "10",
        "--no-color",
        "--generation-database", "none",
        "--report", "junit", "--report-junit-path", str(report),
        *extra,
    ]
    began = time.monotonic()
    try:
        # In tmp_path: schemathesis keeps a cache directory (.schemathesis) where it runs.
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=SCHEMATHESIS_BUDGET, check=False,
                             cwd=tmp_path)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"schemathesis ran over {SCHEMATHESIS_BUDGET} s:\n{str(e.stdout or '')[-4000:]}")
    return run, time.monotonic() - began


def test_schemathesis_catches_a_document_that_lies(env, tmp_path):
    """The negative control: the same run, on one operation whose documented answer is made wrong
    (an application list's items as strings), fails on the schema check."""
    doc = json.loads(json.dumps(env.doc))
    doc["components"]["schemas"]["v1alpha1ApplicationList"]["properties"]["items"]["items"] = {"type": "string"}
    env.admin.must_create(app_body(uniq("oas-lie")))
    run, _ = schemathesis(env, doc, tmp_path, tmp_path / "report.xml",
                          "--include-path", "/api/v1/applications", "--include-method", "GET")
    output = run.stdout + run.stderr
    assert run.returncode != 0, output[-3000:]
    assert "Response violates schema" in output, output[-3000:]


def undot(path):
    """`{id.value}` as `{id_value}`: schemathesis fills paths with Python's str.format, which reads
    a dot as an attribute (a schema error); the server sees the same URLs either way."""
    return re.sub(r"\{([^}]+)\}", lambda m: "{" + m.group(1).replace(".", "_") + "}", path)
