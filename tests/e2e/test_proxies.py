"""Real proxies in front of tiphys, configured at test time:
(a) nginx terminating TLS before an --insecure tiphys: REST and UI over proxy_pass, native gRPC over
    grpc_pass (grpcio and the CLI), and HTTP/1.1-only paths where the CLI needs gRPC-Web;
(b) haproxy doing TLS passthrough by SNI to a TLS-mode tiphys, plus an http frontend (307 redirect)."""

import json
import subprocess

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from conftest import VERSION_RE, cli, decode_fields, free_port, require_tool, wait_port

# The server flags of each gateway mode, as deploy/'s overlays give them to the container
# (tests/e2e/test_deploy.py checks that they match): nginx terminating TLS stands for
# deploy/istio-terminate, haproxy passing TLS through by SNI for deploy/istio-passthrough.
TERMINATE_FLAGS = ("--insecure",)
PASSTHROUGH_FLAGS = ("--tls-cert={crt}", "--tls-key={key}")

NGINX_CONF = """\
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log {d}/access.log;
  client_body_temp_path {d}/tmp/body; proxy_temp_path {d}/tmp/proxy; fastcgi_temp_path {d}/tmp/fcgi;
  uwsgi_temp_path {d}/tmp/uwsgi; scgi_temp_path {d}/tmp/scgi;
  proxy_max_temp_file_size 0;   # workers may not be able to write under the test's temp dir
  # Two upstreams for the same port: one keepalive pool shared by proxy_pass and grpc_pass breaks grpc_pass.
  upstream backend_http {{ server 127.0.0.1:{backend}; keepalive 8; }}
  upstream backend_grpc {{ server 127.0.0.1:{backend}; keepalive 8; }}
  # native gRPC only; application/grpc-web* stays on the HTTP/1.1 path
  map $http_content_type $is_grpc {{ default 0; "~^application/grpc($|\\+|;)" 1; }}
  ssl_certificate {cert}; ssl_certificate_key {key};
  ssl_protocols TLSv1.2 TLSv1.3;
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  proxy_set_header Host $http_host;
  proxy_set_header X-Forwarded-Proto https;
  server {{                                   # h2 to clients; gRPC -> grpc_pass (h2c), rest -> HTTP/1.1
    listen 127.0.0.1:{grpc_port} ssl http2;   # nginx 1.22 syntax
    location / {{
      if ($is_grpc) {{ grpc_pass grpc://backend_grpc; }}
      proxy_pass http://backend_http;
    }}
  }}
  server {{                                   # h2 to clients, but everything downgraded to HTTP/1.1
    listen 127.0.0.1:{h1_upstream_port} ssl http2;
    location / {{ proxy_pass http://backend_http; }}
  }}
  server {{                                   # HTTP/1.1 only, both sides
    listen 127.0.0.1:{h1_port} ssl;
    location / {{ proxy_pass http://backend_http; }}
  }}
}}
"""

HAPROXY_CFG = """\
global
  maxconn 256
defaults
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend tls_passthrough
  mode tcp
  bind 127.0.0.1:{tls_port}
  tcp-request inspect-delay 5s
  tcp-request content accept if {{ req.ssl_hello_type 1 }}
  use_backend tiphys_tls if {{ req.ssl_sni -i localhost }}
  # no default backend: other names are refused
frontend plain_http
  mode http
  bind 127.0.0.1:{http_port}
  default_backend tiphys_http
backend tiphys_tls
  mode tcp
  server tiphys 127.0.0.1:{backend}
backend tiphys_http
  mode http
  server tiphys 127.0.0.1:{backend}
"""


def make_cert(d):
    crt, key = d / "proxy.crt", d / "proxy.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-addext", "basicConstraints=critical,CA:FALSE",  # rustls refuses a CA cert as a leaf
                    "-addext", "extendedKeyUsage=serverAuth",
                    "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True, timeout=60)
    return crt, key


class Nginx:
    def __init__(self, grpc_port, h1_upstream_port, h1_port, crt, log):
        self.grpc_port, self.h1_upstream_port, self.h1_port = grpc_port, h1_upstream_port, h1_port
        self.crt, self.log = crt, log


def run_nginx(procs, d, template, backend_port, port_names):
    """Starts nginx in `d` from `template`, formatted with `d`, `backend` (the port), `cert`, `key`
    (made here) and a free port for each of `port_names`; returns (cert, ports) once every port
    listens. `procs` (conftest.Processes) stops it."""
    require_tool("nginx")
    (d / "tmp").mkdir(parents=True)
    crt, key = make_cert(d)
    ports = {name: free_port() for name in port_names}
    conf = d / "nginx.conf"
    conf.write_text(template.format(d=d, backend=backend_port, cert=crt, key=key, **ports))
    check = subprocess.run(["nginx", "-t", "-q", "-p", str(d), "-c", str(conf)], capture_output=True, text=True,
                           timeout=30)
    assert check.returncode == 0, check.stderr
    proc = procs.start(["nginx", "-p", str(d), "-c", str(conf), "-g", "daemon off;"], d / "stdout.log")
    for port in ports.values():
        wait_port("127.0.0.1", port, proc=proc, log=d / "error.log")
    return crt, ports


@pytest.fixture
def nginx(tiphys, processes, tmp_path):
    backend = tiphys(*TERMINATE_FLAGS)
    d = tmp_path / "nginx"
    crt, ports = run_nginx(processes, d, NGINX_CONF, backend.port, ("grpc_port", "h1_upstream_port", "h1_port"))
    return Nginx(crt=crt, log=d / "error.log", **ports)


def curl_json(url, *args):
    res = subprocess.run(["curl", "-sS", "--max-time", "10", "-w", "\n%{http_code} %{http_version}", *args, url],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    body, _, status = res.stdout.rpartition("\n")
    return status, body


# ---- (a) nginx terminating TLS ----

def test_nginx_rest_and_ui(nginx):
    status, body = curl_json(f"https://127.0.0.1:{nginx.grpc_port}/api/version", "--cacert", str(nginx.crt))
    assert status == "200 2"
    assert VERSION_RE.match(json.loads(body)["Version"])
    status, body = curl_json(f"https://127.0.0.1:{nginx.grpc_port}/", "--cacert", str(nginx.crt),
                             "-H", "Accept: text/html")
    assert status == "200 2" and "<html" in body.lower()


def test_nginx_grpcio_through_grpc_pass(nginx):
    creds = grpc.ssl_channel_credentials(root_certificates=nginx.crt.read_bytes())
    with grpc.secure_channel(f"127.0.0.1:{nginx.grpc_port}", creds) as ch:
        version = decode_fields(ch.unary_unary("/version.VersionService/Version")(b"", timeout=10))[1][0].decode()
        assert VERSION_RE.match(version)
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as err:
            ch.unary_unary("/nope.Missing/Call")(b"", timeout=10)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_nginx_cli_native_grpc(nginx):
    res = cli("version", "--server", f"127.0.0.1:{nginx.grpc_port}", "--insecure", "-o", "json")
    assert res.returncode == 0, res.stderr
    assert VERSION_RE.match(json.loads(res.stdout)["server"]["Version"])
    assert "gRPC-Web" not in res.stderr  # grpc_pass carried native gRPC, no fallback needed
    res = cli("version", "--server", f"localhost:{nginx.grpc_port}", "--server-crt", str(nginx.crt), "-o", "json")
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("which", ["h1_upstream_port", "h1_port"])
def test_nginx_http1_path_cli(which, nginx):
    port = getattr(nginx, which)
    res = cli("version", "--server", f"127.0.0.1:{port}", "--insecure", "--grpc-web", "-o", "json")
    assert res.returncode == 0, res.stderr
    assert VERSION_RE.match(json.loads(res.stdout)["server"]["Version"])

    res = cli("version", "--server", f"127.0.0.1:{port}", "--insecure", "-o", "json")
    assert "unexpected content-type" not in res.stderr.lower(), res.stderr
    if res.returncode == 0:  # fell back to gRPC-Web and said so
        assert "grpc-web" in res.stderr.lower(), res.stderr
        assert VERSION_RE.match(json.loads(res.stdout)["server"]["Version"])
    else:
        assert "--grpc-web" in res.stderr, res.stderr


def test_nginx_http1_path_grpcio_gets_clear_error(nginx):
    # A real gRPC client through an h2 proxy that downgrades to HTTP/1.1: a gRPC error naming --grpc-web.
    creds = grpc.ssl_channel_credentials(root_certificates=nginx.crt.read_bytes())
    with grpc.secure_channel(f"127.0.0.1:{nginx.h1_upstream_port}", creds) as ch, pytest.raises(grpc.RpcError) as err:
        ch.unary_unary("/version.VersionService/Version")(b"", timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "--grpc-web" in err.value.details()


# ---- (b) haproxy TLS passthrough by SNI ----

@pytest.fixture
def haproxy(tiphys, processes, tmp_path):
    require_tool("haproxy")
    d = tmp_path / "haproxy"
    d.mkdir()
    crt, key = make_cert(d)  # passthrough: clients see tiphys's own certificate, a real one here
    backend = tiphys(*(f.format(crt=crt, key=key) for f in PASSTHROUGH_FLAGS))
    backend.ca = crt
    tls_port, http_port = free_port(), free_port()
    cfg = d / "haproxy.cfg"
    cfg.write_text(HAPROXY_CFG.format(tls_port=tls_port, http_port=http_port, backend=backend.port))
    check = subprocess.run(["haproxy", "-c", "-q", "-f", str(cfg)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    proc = processes.start(["haproxy", "-db", "-f", str(cfg)], d / "haproxy.log")
    for port in (tls_port, http_port):
        wait_port("127.0.0.1", port, proc=proc, log=d / "haproxy.log")
    return backend, tls_port, http_port


def test_haproxy_passthrough_cli_native_grpc(haproxy):
    backend, tls_port, _ = haproxy
    res = cli("version", "--server", f"localhost:{tls_port}", "--insecure", "-o", "json")
    assert res.returncode == 0, res.stderr
    assert VERSION_RE.match(json.loads(res.stdout)["server"]["Version"])
    assert "gRPC-Web" not in res.stderr
    # passthrough: the certificate is tiphys's own, so it verifies against the generated tls.crt
    res = cli("version", "--server", f"localhost:{tls_port}", "--server-crt", str(backend.ca), "-o", "json")
    assert res.returncode == 0, res.stderr


def test_haproxy_passthrough_routes_by_sni(haproxy):
    backend, tls_port, _ = haproxy
    status, _ = curl_json(f"https://localhost:{tls_port}/api/version", "--cacert", str(backend.ca))
    assert status == "200 2"  # ALPN h2 negotiated end to end with tiphys
    res = subprocess.run(["curl", "-sS", "-k", "--max-time", "10", "--resolve", f"other.test:{tls_port}:127.0.0.1",
                          f"https://other.test:{tls_port}/api/version"], capture_output=True, timeout=30)
    assert res.returncode != 0, "an unknown SNI name must not reach tiphys"


def test_haproxy_plain_http_is_redirected(haproxy):
    _, _, http_port = haproxy
    res = subprocess.run(["curl", "-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}",
                          f"http://127.0.0.1:{http_port}/applications/x%2Fy?a=1"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"307 https://127.0.0.1:{http_port}/applications/x%2Fy?a=1"
