"""Golden REST bodies: what the REST API answers for each kind of object, compared with hand-written
files in golden/ (see golden/README.md for how they were written and the deliberate differences
from upstream). One fresh server, so the in-cluster destination counts exactly one application.
"""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from appkit import APPS, Api
from authkit import ADMIN_PW, login_token

GOLDEN = Path(__file__).parent / "golden"
UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
# The UI's kind of projection: leaves that are typed nils upstream (maps, pointers) come back null.
FIELDS = ",".join([
    "metadata.resourceVersion", "items.metadata.name", "items.metadata.annotations",
    "items.metadata.labels", "items.spec.syncPolicy", "items.spec.project", "items.status.sync.status",
    "items.status.health", "items.status.operationState",
])


@pytest.fixture(scope="module")
def env(module_servers, module_config):
    server = module_servers.start("--insecure", config=module_config())
    admin = Api(server, login_token(server, "admin", ADMIN_PW))
    app = {"metadata": {"name": "golden", "labels": {"team": "a"}}, "spec": {
        "project": "default",
        "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps.git", "path": "guestbook",
                   "targetRevision": "HEAD"},
        "destination": {"server": "https://kubernetes.default.svc", "namespace": "default"}}}
    admin.must_create(app)
    r = admin.call("POST", "/api/v1/repositories",
                   {"repo": "https://github.com/argoproj/golden.git", "username": "reader", "password": "s3cret-pw"})
    assert r.status == 200, r
    return SimpleNamespace(server=server, admin=admin)


def golden(name):
    return json.loads((GOLDEN / name).read_text())


def placeholders(body, golden_body):
    """`body` with the values that differ per run replaced where the golden file has a placeholder,
    after checking that each has the expected form."""
    if isinstance(golden_body, str) and golden_body.startswith("<") and golden_body.endswith(">"):
        check = {"<uid>": UID.fullmatch, "<time>": TIME.fullmatch,
                 "<rv>": lambda v: re.fullmatch(r"[1-9]\d*", v), "<message>": bool}[golden_body]
        assert isinstance(body, str) and check(body), f"{body!r} is not a {golden_body}"
        return golden_body
    if isinstance(body, dict) and isinstance(golden_body, dict):
        return {k: placeholders(v, golden_body.get(k)) for k, v in body.items()}
    if isinstance(body, list) and isinstance(golden_body, list) and len(body) == len(golden_body):
        return [placeholders(v, g) for v, g in zip(body, golden_body)]
    return body


def assert_golden(r, file, status=200):
    assert r.status == status, r
    want = golden(file)
    got = placeholders(r.json(), want)
    assert got == want, f"{file}:\n got  {json.dumps(got, sort_keys=True)}\n want {json.dumps(want, sort_keys=True)}"


def test_application(env):
    assert_golden(env.admin.get(f"{APPS}/golden"), "application.json")


def test_application_list_with_fields(env):
    assert_golden(env.admin.get(f"{APPS}?fields={FIELDS}"), "application_list_fields.json")


def test_default_project(env):
    assert_golden(env.admin.get("/api/v1/projects/default"), "project_default.json")


def test_in_cluster_destination(env):
    r = env.admin.get("/api/v1/clusters/https%3A%2F%2Fkubernetes.default.svc")
    assert_golden(r, "cluster_in_cluster.json")


def test_repository_without_its_secret(env):
    r = env.admin.get("/api/v1/repositories/https%3A%2F%2Fgithub.com%2Fargoproj%2Fgolden.git")
    assert_golden(r, "repository.json")
    assert b"s3cret-pw" not in r.body


def test_not_found_error(env):
    assert_golden(env.admin.get(f"{APPS}/no-such-app"), "error_not_found.json", status=404)


def test_empty_list(env):
    r = env.admin.get(f"{APPS}?name=no-such-app")
    assert r.status == 200, r
    body = r.json()
    assert body["items"] == [] and re.fullmatch(r"[1-9]\d*", body["metadata"]["resourceVersion"]), body
