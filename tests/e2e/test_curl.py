"""The curl binary against real servers: plaintext-to-https redirects (raw path, query, IPv6 host),
/healthz on the plaintext side, trusted-proxy headers, HTTP/2 (h2c and ALPN), security headers,
the SPA fallback, gRPC downgraded to HTTP/1.1, and the REST body limit."""

import json
import subprocess
from dataclasses import dataclass

import pytest

RAW_PATH = "/api/v1/clusters/https%3A%2F%2Fk8s.example%3A6443?x=1&y=%2F"


@dataclass
class Reply:
    status: int
    http_version: str
    headers: dict  # lower-case name -> list of values
    body: bytes

    def header(self, name):
        values = self.headers.get(name.lower(), [])
        return values[-1] if values else None


def curl(url, *args, tmp_path):
    """Run curl once (no redirects followed); returns the final response."""
    body, head = tmp_path / "curl.body", tmp_path / "curl.head"
    cmd = ["curl", "-sS", "--path-as-is", "--globoff", "--max-time", "10", "-o", str(body), "-D", str(head),
           "-w", "%{http_code} %{http_version}", *args, url]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, f"{' '.join(cmd)} -> rc {res.returncode}: {res.stderr}"
    status, version = res.stdout.split()
    headers = {}
    # -D holds every response curl read (e.g. 100 Continue); keep the last block.
    block = head.read_bytes().decode("latin-1").strip().split("\r\n\r\n")[-1]
    for line in block.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    return Reply(int(status), version, headers, body.read_bytes())


def test_plaintext_get_redirects_with_raw_path_and_query(tls_server, tmp_path):
    r = curl(f"http://{tls_server.addr}{RAW_PATH}", tmp_path=tmp_path)
    assert r.status == 307
    assert r.header("location") == f"https://{tls_server.addr}{RAW_PATH}"


def test_plaintext_post_redirects(tls_server, tmp_path):
    r = curl(f"http://{tls_server.addr}/api/v1/settings?a=b", "-X", "POST", "-d", "{}", tmp_path=tmp_path)
    assert r.status == 307
    assert r.header("location") == f"https://{tls_server.addr}/api/v1/settings?a=b"


def test_redirect_keeps_an_allowed_host_header_and_refuses_a_forged_one(tiphys, tmp_path):
    server = tiphys("--redirect-hosts", "cd.example.test")
    r = curl(f"http://{server.addr}/x", "-H", "Host: cd.example.test:8443", tmp_path=tmp_path)
    assert r.status == 307
    assert r.header("location") == "https://cd.example.test:8443/x"
    # no open redirect: a host outside the certificate's names and --redirect-hosts gets a 400
    r = curl(f"http://{server.addr}/x", "-H", "Host: evil.example", tmp_path=tmp_path)
    assert (r.status, r.header("location")) == (400, None), r
    assert b"does not answer for" in r.body, r


def test_redirect_with_ipv6_host(tiphys, tmp_path):
    server = tiphys(address="::1")
    r = curl(f"http://[::1]:{server.port}/applications/a%2Fb?q=1", tmp_path=tmp_path)
    assert r.status == 307
    assert r.header("location") == f"https://[::1]:{server.port}/applications/a%2Fb?q=1"
    # and TLS on ::1 serves the API (the generated cert covers ::1)
    r = curl(f"https://[::1]:{server.port}/api/version", "--cacert", str(server.ca), tmp_path=tmp_path)
    assert r.status == 200


def test_healthz_on_plaintext_side_of_tls_port(tls_server, tmp_path):
    r = curl(f"http://{tls_server.addr}/healthz", tmp_path=tmp_path)
    assert (r.status, r.body) == (200, b"ok\n")


def test_healthz_over_tls(tls_server, tmp_path):
    r = curl(f"https://{tls_server.addr}/healthz", "--cacert", str(tls_server.ca), tmp_path=tmp_path)
    assert (r.status, r.body) == (200, b"ok\n")


@pytest.mark.parametrize("header", ["X-Forwarded-Proto: https", "Forwarded: for=192.0.2.1;proto=https"])
def test_trusted_proxy_https_header_is_served(header, tiphys, tmp_path):
    server = tiphys("--trusted-proxies", "127.0.0.0/8")
    r = curl(f"http://{server.addr}/api/version", "-H", header, tmp_path=tmp_path)
    assert r.status == 200, r
    assert json.loads(r.body)["Version"].startswith("v")
    assert r.header("strict-transport-security"), "the client used https, so HSTS applies"
    # without the header it is still a plaintext request: redirected
    assert curl(f"http://{server.addr}/api/version", tmp_path=tmp_path).status == 307


def test_trusted_proxy_http_header_still_redirects(tiphys, tmp_path):
    server = tiphys("--trusted-proxies", "127.0.0.0/8")
    r = curl(f"http://{server.addr}/api/version", "-H", "X-Forwarded-Proto: http", tmp_path=tmp_path)
    assert r.status == 307


def test_untrusted_proxy_header_is_ignored(tiphys, tmp_path):
    server = tiphys("--trusted-proxies", "10.0.0.0/8")
    r = curl(f"http://{server.addr}/api/version", "-H", "X-Forwarded-Proto: https", tmp_path=tmp_path)
    assert r.status == 307
    assert r.header("location") == f"https://{server.addr}/api/version"


def test_h2c_prior_knowledge(insecure_server, tmp_path):
    r = curl(f"http://{insecure_server.addr}/api/version", "--http2-prior-knowledge", tmp_path=tmp_path)
    assert (r.status, r.http_version) == (200, "2")
    assert json.loads(r.body)["Version"].startswith("v")


def test_tls_negotiates_h2_by_alpn(tls_server, tmp_path):
    r = curl(f"https://{tls_server.addr}/api/version", "--http2", "-k", tmp_path=tmp_path)
    assert (r.status, r.http_version) == (200, "2")
    r = curl(f"https://{tls_server.addr}/api/version", "--http1.1", "-k", tmp_path=tmp_path)
    assert (r.status, r.http_version) == (200, "1.1")


def _script_src(csp):
    for directive in csp.split(";"):
        parts = directive.split()
        if parts and parts[0] == "script-src":
            return parts[1:]
    return None


def test_security_headers_over_tls(tls_server, tmp_path):
    r = curl(f"https://{tls_server.addr}/", "-k", tmp_path=tmp_path)
    assert r.status == 200
    assert r.header("content-type").startswith("text/html")
    script_src = _script_src(r.header("content-security-policy") or "")
    assert script_src is not None, r.headers
    assert "'unsafe-inline'" not in script_src
    assert r.header("x-frame-options").lower() in ("sameorigin", "deny")
    assert r.header("x-content-type-options") == "nosniff"
    assert r.header("referrer-policy")
    assert r.header("strict-transport-security").startswith("max-age=")


def test_no_hsts_over_plaintext(insecure_server, tmp_path):
    r = curl(f"http://{insecure_server.addr}/", tmp_path=tmp_path)
    assert r.status == 200
    assert r.header("x-content-type-options") == "nosniff"
    assert r.header("content-security-policy")
    assert r.header("strict-transport-security") is None


def test_spa_deep_link_needs_accept_html(insecure_server, tmp_path):
    index = curl(f"http://{insecure_server.addr}/", tmp_path=tmp_path)
    r = curl(f"http://{insecure_server.addr}/applications/foo", "-H", "Accept: text/html,*/*;q=0.8",
             tmp_path=tmp_path)
    assert r.status == 200
    assert r.header("content-type").startswith("text/html")
    assert r.body == index.body and b"<html" in r.body.lower()
    r = curl(f"http://{insecure_server.addr}/applications/foo", tmp_path=tmp_path)
    assert r.status == 404


@pytest.mark.parametrize("mode", ["insecure", "tls"])
def test_grpc_over_http1_gets_grpc_error_naming_grpc_web(mode, tls_server, insecure_server, tmp_path):
    server = tls_server if mode == "tls" else insecure_server
    (tmp_path / "frame").write_bytes(b"\x00\x00\x00\x00\x00")
    r = curl(server.url("/version.VersionService/Version"), "-k", "--http1.1", "-X", "POST",
             "-H", "content-type: application/grpc", "-H", "te: trailers",
             "--data-binary", f"@{tmp_path / 'frame'}", tmp_path=tmp_path)
    assert r.http_version == "1.1"
    assert r.header("grpc-status") == "14", r
    assert "--grpc-web" in (r.header("grpc-message") or "")
    assert not (r.header("content-type") or "").startswith("text/html")
    assert b"<html" not in r.body.lower()


def test_oversized_rest_body_is_413_json(tiphys, tmp_path):
    server = tiphys("--insecure", "--max-body-bytes", "1000")
    (tmp_path / "big.json").write_text('{"x":"' + "a" * 5000 + '"}')
    r = curl(server.url("/api/v1/settings"), "-X", "POST", "-H", "content-type: application/json",
             "--data-binary", f"@{tmp_path / 'big.json'}", tmp_path=tmp_path)
    assert r.status == 413, r
    err = json.loads(r.body)
    assert {"error", "code", "message"} <= err.keys(), err
    assert isinstance(err["code"], int) and "--max-body-bytes" in err["message"]
    # a small body is not refused for its size
    assert curl(server.url("/api/v1/settings"), "-X", "POST", "-d", "{}", tmp_path=tmp_path).status != 413
    assert server.proc.poll() is None


def test_bad_host_on_plaintext_side_is_400(tls_server, tmp_path):
    r = curl(f"http://{tls_server.addr}/x", "-H", "Host: evil.example/x", tmp_path=tmp_path)
    assert r.status == 400
    assert r.header("location") is None


def test_rootpath(tiphys, tmp_path):
    server = tiphys("--rootpath", "/argocd")
    r = curl(server.url("/argocd/api/version"), "-k", tmp_path=tmp_path)
    assert r.status == 200 and json.loads(r.body)["Version"].startswith("v")
    assert curl(server.url("/api/version"), "-k", tmp_path=tmp_path).status == 404
    assert curl(server.url("/argocdx/api/version"), "-k", tmp_path=tmp_path).status == 404
    r = curl(server.url("/healthz"), "-k", tmp_path=tmp_path)  # always at the root
    assert (r.status, r.body) == (200, b"ok\n")
    # the plaintext redirect adds the root path once
    r = curl(f"http://{server.addr}/api/version?a=1", tmp_path=tmp_path)
    assert (r.status, r.header("location")) == (307, f"https://{server.addr}/argocd/api/version?a=1")
    r = curl(f"http://{server.addr}/argocd/api/version", tmp_path=tmp_path)
    assert (r.status, r.header("location")) == (307, f"https://{server.addr}/argocd/api/version")


@pytest.mark.parametrize("args, path, base", [
    (["--rootpath", "/argocd"], "/argocd/applications/x", "/argocd/"),
    (["--basehref", "/x"], "/applications/x", "/x/"),
])
def test_ui_base_href(args, path, base, tiphys, tmp_path):
    server = tiphys("--insecure", *args)
    r = curl(server.url(path), "-H", "Accept: text/html", tmp_path=tmp_path)
    assert r.status == 200
    assert f'<base href="{base}"'.encode() in r.body


def test_download_offers_the_servers_own_binary_under_upstreams_name(insecure_server, tmp_path):
    """Upstream's UI links its CLI as /download/argocd-<os>-<arch>: tiphys offers the binary it
    runs from (which is also its CLI) under the name for its own platform, byte for byte, and a
    page naming what it offers for any other."""
    import hashlib
    import platform

    from conftest import TIPHYS_BIN

    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    name = f"argocd-linux-{arch}"
    r = curl(f"http://{insecure_server.addr}/download/{name}", "--max-time", "60", tmp_path=tmp_path)
    assert r.status == 200 and r.header("content-type") == "application/octet-stream", r.status
    assert r.header("content-disposition") == f'attachment; filename="{name}"'
    with open(TIPHYS_BIN, "rb") as f:
        assert hashlib.sha256(r.body).hexdigest() == hashlib.sha256(f.read()).hexdigest()
    r = curl(f"http://{insecure_server.addr}/download/argocd-windows-amd64.exe", tmp_path=tmp_path)
    assert r.status == 404 and f"as download/{name}" in r.body.decode(), r
