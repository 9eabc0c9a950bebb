"""The harness of the real Kubernetes and Argo CD parts (controlplane.py, tools/upstream/): what it
starts, what it says when a part cannot be built or started, and what a machine without Go is
told. The chain through those parts is proved in test_upstream_chain.py."""

import json
import os
import subprocess
import urllib.request

import pytest

from conftest import REPO
from controlplane import STATE_FILE, ControlPlane, PartFailed, isolated_network, upstream_bins

BUILD = REPO / "tools" / "upstream" / "build.sh"


def test_a_machine_without_go_is_told_what_to_install(tmp_path):
    # PATH without Go's folder: the script must not get far enough to touch the caches.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TIPHYS_UPSTREAM_CACHE": str(tmp_path / "cache")}
    res = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 1, res
    assert "Go is not installed" in res.stderr and "Install Go 1.25 or newer" in res.stderr, res.stderr
    assert not (tmp_path / "cache").exists()


def test_print_names_a_part_that_is_not_built(tmp_path):
    env = {**os.environ, "TIPHYS_UPSTREAM_CACHE": str(tmp_path / "empty-cache")}
    res = subprocess.run(["bash", str(BUILD), "--print"], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 1
    assert "kube-apiserver is not built: run bash tools/upstream/build.sh" in res.stderr, res.stderr


def test_a_part_that_fails_to_start_names_itself_and_why(tmp_path, monkeypatch):
    """A kube-apiserver that exits at once (here: `false` in its place): the error names the part,
    its exit status and its log; etcd, started before it, is ended."""
    bins = tmp_path / "bins"
    bins.mkdir()
    (bins / "kube-apiserver").symlink_to("/bin/false")
    monkeypatch.setenv("TIPHYS_UPSTREAM_BIN", str(bins))
    plane = ControlPlane(tmp_path / "plane")
    with pytest.raises(PartFailed) as failed:
        try:
            plane.up(controller=False)
        finally:
            pids = [p.proc.pid for p in plane.parts.values()]
            plane.down()
    assert failed.value.part == "kube-apiserver"
    assert "exited with status 1" in failed.value.reason and "kube-apiserver.log" in failed.value.reason
    assert pids, "etcd should have started first"
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower()


def test_the_controller_refuses_to_start_outside_a_network_namespace(tmp_path):
    if isolated_network():
        pytest.fail("this test runs outside tools/upstream/isolated (the controlplane tests run inside)")
    with pytest.raises(PartFailed) as failed:
        ControlPlane(tmp_path / "plane").up(controller=True)
    assert failed.value.part == "argocd-application-controller"
    assert "tools/upstream/isolated" in failed.value.reason


def test_every_part_is_up_and_described(controlplane):
    state = json.loads((controlplane.root / STATE_FILE).read_text())
    expected = {"etcd", "kube-apiserver", "kube-controller-manager", "redis", "argocd-repo-server",
                "argocd-application-controller"}
    assert expected <= set(state["parts"]), state["parts"]
    for name, part in state["parts"].items():
        assert part["ready_in_s"] is not None and part["ready_in_s"] > 0, (name, part)
        assert os.path.exists(f"/proc/{part['pid']}"), (name, part)
        assert os.path.isfile(part["log"]), (name, part)
    assert state["in_cluster"] is True, "the in-cluster mapping needs unshare (root)"
    # The API server reports the pinned release, as the version stamp of build.sh makes it.
    version = json.loads(controlplane._get("/version", raw=True))
    assert version["gitVersion"] == "v1.34.2", version
    crds = controlplane.get_json("crd")["items"]
    assert {c["metadata"]["name"] for c in crds} >= {"applications.argoproj.io", "appprojects.argoproj.io",
                                                     "applicationsets.argoproj.io"}
    # The destination by its loopback URL (in-cluster needs no Secret: test_upstream_chain.py).
    secret = controlplane.get_json("secret", "cluster-loopback", "-n", "argocd")
    assert secret["metadata"]["labels"]["argocd.argoproj.io/secret-type"] == "cluster"
    metrics = state["repo_server"]["metrics_port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as resp:
        assert b"go_goroutines" in resp.read()  # the repo-server's own metrics server answers


def test_the_upstream_binaries_report_their_pinned_versions():
    bins = upstream_bins()
    argocd = next(str(d / "argocd") for d in bins if (d / "argocd").exists())
    out = subprocess.run([argocd, "version", "--client", "--short"], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "ARGOCD_BINARY_NAME": "argocd"}).stdout
    assert "v3.2.11" in out, out
