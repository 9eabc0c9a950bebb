"""The reference chain, without tiphys: upstream's argocd CLI against upstream argocd-server, with
the real kube-apiserver, application-controller, repo-server and Redis of controlplane.py, and a
loopback Git server (gitkit.py). What this file proves is what the next issues hold tiphys to:

  log in; add a repository; create an application of plain manifests (ConfigMaps and a Service,
  Healthy without nodes); sync it and find its objects in the API server; Synced/Healthy with one
  history entry; with auto-sync on, a push gives a second entry.

The destination is written as users write it (`https://kubernetes.default.svc`, the in-cluster
cluster); a second application goes to the loopback cluster Secret (`loopback`).
Runs under tools/upstream/isolated (see controlplane.py); .ci/test-all runs it there.
"""

import json
import time

import pytest

from argocdkit import ArgoCli
from gitkit import git, git_env

WAIT = 120  # the controller reconciles every 10 s here (controlplane.RECONCILIATION)


def manifests(greeting):
    cms = "".join(f"""---
apiVersion: v1
kind: ConfigMap
metadata:
  name: chain-{i}
data:
  greeting: {greeting}
""" for i in (1, 2))
    svc = """---
apiVersion: v1
kind: Service
metadata:
  name: chain
spec:
  type: ClusterIP
  selector:
    app: chain
  ports:
  - port: 80
    targetPort: 8080
"""
    return {"manifests/configmaps.yaml": cms, "manifests/service.yaml": svc}


class Repo:
    """A bare repository under the git servers' root, and a work tree that pushes to it."""

    def __init__(self, gitservers, tmp_path, name):
        self.bare = gitservers.root / f"{name}.git"
        git("init", "-q", "--bare", "--initial-branch=main", str(self.bare))
        self.work = tmp_path / f"{name}-work"
        git("init", "-q", "--initial-branch=main", str(self.work))
        self.url = gitservers.url("http", f"{name}.git")

    def commit(self, files, message):
        for rel, text in files.items():
            p = self.work / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        env = git_env(GIT_AUTHOR_NAME="Chain", GIT_AUTHOR_EMAIL="chain@example.test",
                      GIT_COMMITTER_NAME="Chain", GIT_COMMITTER_EMAIL="chain@example.test")
        git("add", "-A", cwd=self.work, env=env)
        git("-c", "commit.gpgsign=false", "commit", "-q", "-m", message, cwd=self.work, env=env)
        git("push", "-q", str(self.bare), "main", cwd=self.work, env=env)
        return git("rev-parse", "HEAD", cwd=self.work).stdout.strip()


@pytest.fixture(scope="module")
def upstream(controlplane, tmp_path_factory):
    """argocd-server (TLS) and an argocd CLI logged in to it as admin."""
    server = controlplane.start_argocd_server()
    cli = ArgoCli(tmp_path_factory.mktemp("cli"), ca=controlplane.state["pki"]["ca"])
    cli("login", server["address"], "--username", "admin",
        "--password", controlplane.state["argocd"]["admin_password"])
    return cli


def wait_for(what, probe, timeout=WAIT, interval=1.0):
    """probe()'s first truthy answer, polled every `interval` s; fails after `timeout` s with the last."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"{what} within {timeout} s; last: {json.dumps(last)[:3000] if last else last}")


def status(cli, name):
    return cli.json("app", "get", name)["status"]


@pytest.mark.parametrize("dest", ["in-cluster", "loopback"])
def test_sync_then_auto_sync_after_a_push(plane, upstream, gitservers, tmp_path, dest):
    repo = Repo(gitservers, tmp_path, f"chain-{dest}")
    first = repo.commit(manifests("hello"), "first")
    upstream("repo", "add", repo.url)
    repos = {r["repo"]: r for r in upstream.json("repo", "list")}
    assert repos[repo.url]["connectionState"]["status"] == "Successful", repos[repo.url]

    ns = plane.new_namespace("chain")
    app = f"chain-{dest}"
    dest_flag = (["--dest-server", "https://kubernetes.default.svc"] if dest == "in-cluster"
                 else ["--dest-name", "loopback"])
    upstream("app", "create", app, "--repo", repo.url, "--path", "manifests", "--revision", "main",
             *dest_flag, "--dest-namespace", ns)
    upstream("app", "sync", app, "--timeout", str(WAIT), timeout=WAIT + 30)
    upstream("app", "wait", app, "--sync", "--health", "--timeout", str(WAIT), timeout=WAIT + 30)

    # The controller applied the objects: they are in the API server, as git says.
    for cm in ("chain-1", "chain-2"):
        assert plane.get_json("configmap", cm, "-n", ns)["data"] == {"greeting": "hello"}
    assert plane.get_json("service", "chain", "-n", ns)["spec"]["ports"][0]["port"] == 80

    st = status(upstream, app)
    assert st["sync"]["status"] == "Synced" and st["sync"]["revision"] == first, st["sync"]
    assert st["health"]["status"] == "Healthy", st["health"]
    assert st["operationState"]["phase"] == "Succeeded", st["operationState"]
    assert [h["revision"] for h in st["history"]] == [first], st["history"]
    kinds = sorted((r["kind"], r["name"], r["status"]) for r in st["resources"])
    assert kinds == [("ConfigMap", "chain-1", "Synced"), ("ConfigMap", "chain-2", "Synced"),
                     ("Service", "chain", "Synced")], kinds

    # Auto-sync: a push is picked up by the controller's next reconciliation, no refresh asked.
    upstream("app", "set", app, "--sync-policy", "automated")
    second = repo.commit(manifests("bonjour"), "second")
    st = wait_for("a second history entry after the push",
                  lambda: (s := status(upstream, app)) and len(s.get("history", [])) == 2 and s)
    assert [h["revision"] for h in st["history"]] == [first, second], st["history"]
    assert st["operationState"]["phase"] == "Succeeded" and st["sync"]["revision"] == second
    wait_for("the new data in the API server",
             lambda: plane.get_json("configmap", "chain-1", "-n", ns)["data"] == {"greeting": "bonjour"})

    upstream("app", "delete", app, "--yes", "--wait", timeout=WAIT + 30)
    wait_for("the objects deleted with the application (cascade)",
             lambda: plane.kubectl("get", "configmap", "chain-1", "-n", ns, check=False, part="check")
             .strip() == "")
