"""The server contacts clusters (issue 39, item 2): a cluster's connection state and server
version come from the cluster itself, reached with the credentials of its cluster Secret.

The cluster is the real kube-apiserver of controlplane.py, each test cluster reached through a
TCP relay of its own (a distinct server URL, the same API server and certificate). tiphys runs on
the installation (`--kube`) with `--cluster-access on`, and each case checks the state tiphys
answers against what the API server did:

  the registered clusters are Successful with the API server's `major.minor`; Create asks the
  cluster its version first, as upstream's does, and refuses a token the API server rejects, a CA
  that is not the server's, and a refused port, naming why and never the token; the same clusters
  declared as Secrets with kubectl show Failed with that reason, and so does an identity without
  rights; a ServiceAccount token Secret deleted turns a Successful cluster to Failed; an exec
  provider (a program written here, printing an ExecCredential with a token from TokenRequest)
  gives Successful and is run again once its credential expires; one that hangs or prints garbage
  fails within its bound, saying so.

Runs under tools/upstream/isolated (see controlplane.py); .ci/test-all runs it there.
"""

import base64
import json
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from types import SimpleNamespace

import pytest

from appkit import Api, uniq
from authkit import login_token
from test_kube_backend import NS, Cuttable, start_kube_server

CLUSTERS = "/api/v1/clusters"
EXEC_BOUND = 3  # --cluster-exec-timeout, seconds
CHECK_INTERVAL = 1  # --cluster-check-interval, seconds


@pytest.fixture(scope="module")
def kube(controlplane, tmp_path_factory):
    d = tmp_path_factory.mktemp("cluster-state")
    server = start_kube_server(
        d, controlplane.state["kubeconfig"],
        "--cluster-access", "on", "--cluster-exec-timeout", f"{EXEC_BOUND}s",
        "--cluster-check-interval", f"{CHECK_INTERVAL}s", "--cluster-timeout", "10s",
    )
    token = login_token(server, "admin", controlplane.state["argocd"]["admin_password"])
    yield SimpleNamespace(server=server, api=Api(server, token))
    server.stop()


def server_version(plane):
    version = json.loads(plane.kubectl("get", "--raw", "/version"))
    return f"{version['major']}.{version['minor']}"


def ca_data(plane):
    return base64.b64encode(Path(plane.state["pki"]["ca"]).read_bytes()).decode()


def path_of(server):
    return f"{CLUSTERS}/{urllib.parse.quote(server, safe='')}"


def get_cluster(kube, server, wait_seen=5):
    """Get, waiting up to `wait_seen` s for a cluster declared with kubectl to reach tiphys."""
    deadline = time.monotonic() + wait_seen
    while True:
        r = kube.api.get(path_of(server), timeout=30)
        if r.status != 404 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert r.status == 200, r
    return r.json()


def declare_cluster(plane, server, config):
    """A cluster Secret written with kubectl, as users declare clusters: no Create call."""
    plane.apply([{
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": uniq("declared"), "namespace": NS,
                     "labels": {"argocd.argoproj.io/secret-type": "cluster"}},
        "stringData": {"name": uniq("d"), "server": server, "config": json.dumps(config)},
    }])


def refused_create(kube, server, config):
    r = kube.api.call("POST", CLUSTERS, {"server": server, "name": uniq("c"), "config": config}, timeout=30)
    assert r.status in (400, 412, 503), r
    message = r.json()["message"]
    assert message.startswith(f"cannot register cluster {server}: asking its version failed: "), message
    assert kube.api.get(path_of(server)).status in (403, 404), "a refused cluster is not stored"
    return message


def add_cluster(kube, server, config, **extra):
    body = {"server": server, "name": uniq("c"), "config": config, **extra}
    r = kube.api.call("POST", CLUSTERS, body)
    assert r.status == 200, r
    return r.json()


def wait_state(kube, server, status, timeout=30):
    """The cluster's state once it is `status` (Get, which checks a cluster never checked)."""
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        got = get_cluster(kube, server)
        if got["connectionState"]["status"] == status:
            return got
        time.sleep(0.5)
    pytest.fail(f"{server} never became {status}: {got}")


def relay(plane):
    """A server URL of its own for one cluster: a relay to the API server."""
    r = Cuttable(plane.state["apiserver"]["port"])
    return r, f"https://127.0.0.1:{r.port}"


def service_account(plane, ns, name, role=None):
    """A ServiceAccount in `ns`, bound cluster-wide to `role` (none: no rights at all)."""
    plane.kubectl("create", "serviceaccount", name, "-n", ns)
    if role:
        plane.kubectl("create", "clusterrolebinding", f"{ns}-{name}", f"--clusterrole={role}",
                      f"--serviceaccount={ns}:{name}")


def assert_state(cluster, status, *words, never=()):
    state = cluster["connectionState"]
    assert state["status"] == status, cluster
    assert cluster["info"]["connectionState"] == state, cluster
    for word in words:
        assert word in state["message"], (word, state)
    for secret in never:
        assert secret not in json.dumps(cluster), "a credential is in the answer"
    if status == "Successful":
        assert state["attemptedAt"], state


def test_registered_clusters_are_successful_with_the_api_servers_version(plane, kube):
    version = server_version(plane)
    # cluster-loopback of controlplane.py: a bearer token and the CA.
    loopback = wait_state(kube, plane.state["apiserver"]["url"], "Successful")
    assert_state(loopback, "Successful")
    assert loopback["serverVersion"] == version and loopback["info"]["serverVersion"] == version, loopback
    # The in-cluster destination is the API server tiphys keeps its objects on.
    in_cluster = wait_state(kube, "https://kubernetes.default.svc", "Successful")
    assert in_cluster["serverVersion"] == version, in_cluster
    # A list shows the states checked since, without waiting.
    items = kube.api.get(CLUSTERS).json()["items"]
    by_server = {c["server"]: c for c in items}
    assert by_server[plane.state["apiserver"]["url"]]["connectionState"]["status"] == "Successful", items


def test_each_failure_names_its_reason_and_never_the_token(plane, kube, tmp_path):
    ns = plane.new_namespace("cstate")
    service_account(plane, ns, "nobody")
    no_rights = plane.kubectl("create", "token", "nobody", "-n", ns, "--duration", "1h").strip()
    wrong_token = "not-a-valid-token-" + uniq("t")
    # Another CA: the API server's certificate does not chain to it.
    other_ca = tmp_path / "other-ca.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(tmp_path / "k.pem"), "-out", str(other_ca), "-days", "1",
                    "-subj", "/CN=not-the-api-servers-ca"], check=True, capture_output=True)
    good_ca = {"caData": ca_data(plane)}
    unreachable = []
    for config, words, never in [
        ({"bearerToken": wrong_token, "tlsClientConfig": good_ca}, ["401 Unauthorized"], [wrong_token]),
        ({"bearerToken": no_rights, "tlsClientConfig": {"caData": base64.b64encode(other_ca.read_bytes()).decode()}},
         ["TLS handshake failed"], [no_rights]),
    ]:
        _, url = relay(plane)
        unreachable.append((url, config, words, never))
    r, refused = relay(plane)
    r.cut()  # a port nobody listens on
    unreachable.append((refused, {"bearerToken": wrong_token, "tlsClientConfig": good_ca},
                        ["connection was refused"], [wrong_token]))
    for url, config, words, never in unreachable:
        # Create refuses, as upstream's...
        message = refused_create(kube, url, config)
        for word in words:
            assert word in message, (word, message)
        for secret in never:
            assert secret not in message
        # ... and declared with kubectl, the cluster is served Failed with the reason.
        declare_cluster(plane, url, config)
        assert_state(get_cluster(kube, url), "Failed", f"Unable to connect to cluster {url}", *words, never=never)
    # An identity without rights can be registered (the version answers anyone authenticated,
    # as upstream's Create asks only that), and its state says what it may not do.
    _, url = relay(plane)
    add_cluster(kube, url, {"bearerToken": no_rights, "tlsClientConfig": good_ca})
    got = wait_state(kube, url, "Failed")
    assert_state(got, "Failed", "403 Forbidden", "namespaces", never=[no_rights])
    assert "serverVersion" not in got, got
    # The rest of the API is unaffected by clusters that fail.
    assert kube.api.get("/api/v1/applications").status == 200


def test_a_revoked_token_turns_the_state_to_failed(plane, kube):
    ns = plane.new_namespace("crevoke")
    service_account(plane, ns, "deployer", role="view")
    plane.apply([{
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": "deployer-token", "namespace": ns,
                     "annotations": {"kubernetes.io/service-account.name": "deployer"}},
    }])
    deadline = time.monotonic() + 30
    token = ""
    while not token and time.monotonic() < deadline:
        data = plane.get_json("secret", "deployer-token", "-n", ns).get("data") or {}
        token = base64.b64decode(data.get("token", "")).decode()
        time.sleep(0.2)
    assert token, "the token controller never filled the Secret (kube-controller-manager)"
    r, url = relay(plane)
    add_cluster(kube, url, {"bearerToken": token, "tlsClientConfig": {"caData": ca_data(plane)}})
    assert_state(wait_state(kube, url, "Successful"), "Successful")
    plane.kubectl("delete", "secret", "deployer-token", "-n", ns)
    # Re-checked in the background once due (every CHECK_INTERVAL here).
    failed = wait_state(kube, url, "Failed", timeout=30)
    assert_state(failed, "Failed", "401 Unauthorized", never=[token])


PROVIDER = r'''
import json, os, subprocess, sys, datetime
mode = os.environ["MODE"]
with open(os.environ["RUNS"], "a") as runs:
    runs.write("run\n")
if mode == "hang":
    import time; time.sleep(600)
if mode == "garbage":
    print("hello, I am not an ExecCredential"); sys.exit(0)
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
token = subprocess.run([os.environ["KUBECTL"], "--kubeconfig", os.environ["KUBECONFIG_FILE"], "create", "token",
                        os.environ["SA"], "-n", os.environ["SA_NS"], "--duration", "10m"],
                       check=True, capture_output=True, text=True).stdout.strip()
expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=float(os.environ["LIFETIME"]))
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential",
                  "status": {"token": token, "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}}))
'''


def provider(plane, tmp_path, mode, ns="", lifetime=9):
    import shutil  # noqa: PLC0415
    script = tmp_path / "provider.py"
    script.write_text(PROVIDER)
    runs = tmp_path / f"runs-{mode}"
    runs.write_text("")
    env = {"MODE": mode, "RUNS": str(runs), "KUBECTL": shutil.which("kubectl"),
           "KUBECONFIG_FILE": plane.state["kubeconfig"], "SA": "provided", "SA_NS": ns, "LIFETIME": str(lifetime)}
    config = {"execProviderConfig": {"command": sys.executable, "args": [str(script)], "env": env,
                                     "apiVersion": "client.authentication.k8s.io/v1"},
              "tlsClientConfig": {"caData": ca_data(plane)}}
    return config, runs


def run_count(runs):
    return len(runs.read_text().splitlines())


def test_an_exec_provider_gives_the_token_and_is_run_again_when_it_expires(plane, kube, tmp_path):
    ns = plane.new_namespace("cexec")
    service_account(plane, ns, "provided", role="view")
    # Fresh for 4 s (tiphys renews 5 s before the 9 s expiry), re-checked every second.
    config, runs = provider(plane, tmp_path, "token", ns=ns, lifetime=9)
    r, url = relay(plane)
    add_cluster(kube, url, config)
    got = wait_state(kube, url, "Successful")
    assert got["serverVersion"] == server_version(plane), got
    assert "execProviderConfig" not in got.get("config", {}), "the provider is a credential: not shown"
    first = run_count(runs)
    assert first >= 1
    deadline = time.monotonic() + 20
    while run_count(runs) == first and time.monotonic() < deadline:
        assert get_cluster(kube, url)["connectionState"]["status"] == "Successful"
        time.sleep(0.5)
    assert run_count(runs) > first, "the provider was not run again after its credential expired"
    assert get_cluster(kube, url)["connectionState"]["status"] == "Successful"


@pytest.mark.parametrize("mode, words", [
    ("hang", [f"did not finish within {EXEC_BOUND}s"]),
    ("garbage", ["printed no valid ExecCredential", "not ExecCredential JSON"]),
])
def test_a_provider_that_hangs_or_prints_garbage_fails_within_its_bound(plane, kube, tmp_path, mode, words):
    config, runs = provider(plane, tmp_path, mode)
    _, url = relay(plane)
    started = time.monotonic()
    message = refused_create(kube, url, config)
    took = time.monotonic() - started
    for word in words:
        assert word in message, (word, message)
    assert took < EXEC_BOUND + 5, f"the refusal took {took:.1f} s"
    # Declared with kubectl: Failed, within the bound.
    declare_cluster(plane, url, config)
    started = time.monotonic()
    got = get_cluster(kube, url)
    took = time.monotonic() - started
    assert_state(got, "Failed", *words)
    assert took < EXEC_BOUND + 10, f"the answer took {took:.1f} s"
    assert run_count(runs) >= 2


def test_invalidate_cache_checks_anew(plane, kube):
    r, url = relay(plane)
    add_cluster(kube, url, {"bearerToken": plane.state["service_account_token"],
                            "tlsClientConfig": {"caData": ca_data(plane)}})
    assert_state(wait_state(kube, url, "Successful"), "Successful")
    r.cut()
    resp = kube.api.call("POST", f"{path_of(url)}/invalidate-cache", {})
    assert resp.status == 200, resp
    assert_state(resp.json(), "Failed", "connection was refused")
    r.restore()
    resp = kube.api.call("POST", f"{path_of(url)}/invalidate-cache", {})
    assert_state(resp.json(), "Successful")


def token_secret(plane, ns, sa, name):
    """A long-lived token Secret of `sa`, once the token controller has filled it."""
    plane.apply([{
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": name, "namespace": ns, "annotations": {"kubernetes.io/service-account.name": sa}},
    }])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        data = plane.get_json("secret", name, "-n", ns).get("data") or {}
        if data.get("token"):
            return base64.b64decode(data["token"]).decode()
        time.sleep(0.2)
    pytest.fail("the token controller never filled the Secret (kube-controller-manager)")


def token_works(plane, token):
    res = subprocess.run(["kubectl", "--server", plane.state["apiserver"]["url"], "--certificate-authority",
                          plane.state["pki"]["ca"], "--token", token, "get", "--raw", "/api/v1/namespaces?limit=1"],
                         capture_output=True, text=True, timeout=30)
    return res.returncode == 0


def stored_config(plane, server):
    """The config of the cluster Secret for `server`, as the API server holds it."""
    for secret in plane.get_json("secret", "-n", NS, "-l", "argocd.argoproj.io/secret-type=cluster")["items"]:
        data = secret.get("data") or {}
        if base64.b64decode(data.get("server", "")).decode() == server:
            return json.loads(base64.b64decode(data["config"]))
    pytest.fail(f"no cluster Secret for {server}")


def test_rotate_auth_gives_a_new_token_and_revokes_the_old(plane, kube):
    ns = plane.new_namespace("crotate")
    service_account(plane, ns, "manager", role="cluster-admin")
    old = token_secret(plane, ns, "manager", "manager-long-lived-token")
    _, url = relay(plane)
    add_cluster(kube, url, {"bearerToken": old, "tlsClientConfig": {"caData": ca_data(plane)}})
    r = kube.api.call("POST", f"{path_of(url)}/rotate-auth", {}, timeout=90)
    assert r.status == 200, r
    assert r.json() == {}, r.json()
    new = stored_config(plane, url)["bearerToken"]
    assert new and new != old
    assert token_works(plane, new), "the new token is refused"
    # The API server caches token reviews for a few seconds: the old one stops working soon.
    deadline = time.monotonic() + 30
    while token_works(plane, old) and time.monotonic() < deadline:
        time.sleep(1)
    assert not token_works(plane, old), "the old token still works"
    secrets = [s["metadata"]["name"] for s in plane.get_json("secret", "-n", ns)["items"]]
    assert "manager-long-lived-token" not in secrets, secrets
    assert any(s.startswith("manager-long-lived-") for s in secrets), secrets
    assert_state(get_cluster(kube, url), "Successful")


def test_rotate_auth_refuses_what_it_cannot_rotate(plane, kube, tmp_path):
    ns = plane.new_namespace("cnorotate")
    service_account(plane, ns, "bound", role="view")
    bound = plane.kubectl("create", "token", "bound", "-n", ns, "--duration", "1h").strip()
    _, url = relay(plane)
    add_cluster(kube, url, {"bearerToken": bound, "tlsClientConfig": {"caData": ca_data(plane)}})
    r = kube.api.call("POST", f"{path_of(url)}/rotate-auth", {}, timeout=60)
    assert r.status == 400 and "cannot be rotated" in r.json()["message"], r
    assert bound not in r.json()["message"]
    assert stored_config(plane, url)["bearerToken"] == bound, "nothing changed"
    service_account(plane, ns, "provided", role="view")
    config, _ = provider(plane, tmp_path, "token", ns=ns)
    _, url = relay(plane)
    add_cluster(kube, url, config)
    r = kube.api.call("POST", f"{path_of(url)}/rotate-auth", {}, timeout=60)
    assert r.status == 400 and "does not use bearer token authentication" in r.json()["message"], r


class ConnectProxy:
    """A proxy on loopback that serves HTTP CONNECT tunnels (what client-go and kube-rs send
    through an http `proxyUrl` for an https server) and SOCKS5 CONNECT, and records where each
    tunnel went."""

    def __init__(self):
        import socket  # noqa: PLC0415
        import threading  # noqa: PLC0415
        self.tunnels = []
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self._socket, self._threading = socket, threading
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        for _ in range(200):
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self._threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        first = client.recv(1, self._socket.MSG_PEEK)
        if first == b"\x05":
            return self._socks5(client)
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 8192:
            chunk = client.recv(1024)
            if not chunk:
                client.close()
                return
            head += chunk
        method, target = head.split(b" ", 2)[:2]
        if method != b"CONNECT":
            client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            client.close()
            return
        host, port = target.decode().rsplit(":", 1)
        self.tunnels.append(target.decode())
        upstream = self._socket.create_connection((host, int(port)), timeout=5)
        upstream.settimeout(None)
        client.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        for a, b in ((client, upstream), (upstream, client)):
            self._threading.Thread(target=Cuttable._pipe, args=(a, b), daemon=True).start()

    def _socks5(self, client):
        """SOCKS5 (RFC 1928), no authentication, CONNECT only."""
        def read(n):
            data = b""
            while len(data) < n:
                chunk = client.recv(n - len(data))
                if not chunk:
                    raise OSError("closed")
                data += chunk
            return data
        try:
            _, n = read(2)
            read(n)
            client.sendall(b"\x05\x00")
            _, cmd, _, kind = read(4)
            if kind == 1:
                host = self._socket.inet_ntoa(read(4))
            elif kind == 3:
                host = read(read(1)[0]).decode()
            else:
                raise OSError("address type not served")
            port = int.from_bytes(read(2), "big")
            if cmd != 1:
                raise OSError("only CONNECT")
            self.tunnels.append(f"socks5 {host}:{port}")
            upstream = self._socket.create_connection((host, port), timeout=5)
            upstream.settimeout(None)
            client.sendall(b"\x05\x00\x00\x01" + bytes(4) + bytes(2))
        except OSError:
            client.close()
            return
        for a, b in ((client, upstream), (upstream, client)):
            self._threading.Thread(target=Cuttable._pipe, args=(a, b), daemon=True).start()

    def close(self):
        self.listener.close()


@pytest.mark.parametrize("scheme, tunnel", [("http", "{}"), ("socks5", "socks5 {}")])
def test_a_cluster_behind_its_proxy_url_is_reached_through_it(plane, kube, scheme, tunnel):
    proxy = ConnectProxy()
    try:
        r, url = relay(plane)
        config = {"bearerToken": plane.state["service_account_token"], "tlsClientConfig": {"caData": ca_data(plane)},
                  "proxyUrl": f"{scheme}://127.0.0.1:{proxy.port}"}
        add_cluster(kube, url, config)
        got = get_cluster(kube, url)
        assert_state(got, "Successful")
        assert got["config"].get("proxyUrl") == config["proxyUrl"], "proxyUrl is shown, as upstream's Sanitized"
        assert tunnel.format(f"127.0.0.1:{r.port}") in proxy.tunnels, proxy.tunnels
        # A proxy scheme upstream refuses is named.
        _, other = relay(plane)
        r2 = kube.api.call("POST", CLUSTERS, {"server": other, "name": uniq("c"),
                                              "config": {**config, "proxyUrl": "ftp://127.0.0.1:1"}})
        assert r2.status == 400 and "unsupported scheme \"ftp\"" in r2.json()["message"], r2
    finally:
        proxy.close()
