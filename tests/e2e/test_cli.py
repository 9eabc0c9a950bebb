"""The tiphys CLI (`tiphys version`) in every connection mode against real servers: native gRPC
over TLS (--server-crt, --insecure) and h2c (--plaintext), gRPC-Web over TLS and plaintext, a root
path, output formats, extra headers, --client, and the errors users see when something is wrong."""

import json
import os
import subprocess

import pytest

from conftest import TIPHYS_BIN, VERSION_RE, clean_env, cli, free_port, rest_version


def server_version(res):
    """The server version from `-o json` output."""
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["server"]["Version"]


def test_tls_with_server_crt(tls_server):
    res = cli("version", "--server", tls_server.addr, "--server-crt", str(tls_server.ca), "-o", "json")
    assert server_version(res) == rest_version(tls_server)


def test_tls_with_server_crt_by_hostname(tls_server):
    res = cli("version", "--server", f"localhost:{tls_server.port}", "--server-crt", str(tls_server.ca), "-o", "json")
    assert VERSION_RE.match(server_version(res))


def test_tls_insecure(tls_server):
    res = cli("version", "--server", tls_server.addr, "--insecure", "-o", "json")
    assert VERSION_RE.match(server_version(res))
    assert "gRPC-Web" not in res.stderr  # native gRPC worked, no fallback


def test_untrusted_cert_names_the_options(tls_server):
    res = cli("version", "--server", tls_server.addr)
    assert res.returncode != 0
    assert "--insecure" in res.stderr or "--server-crt" in res.stderr, res.stderr


def test_plaintext_against_insecure_server(insecure_server):
    res = cli("version", "--server", insecure_server.addr, "--plaintext", "-o", "json")
    assert server_version(res) == rest_version(insecure_server)
    assert "gRPC-Web" not in res.stderr


@pytest.mark.parametrize("mode", ["tls", "plaintext"])
def test_grpc_web(mode, tls_server, insecure_server):
    if mode == "tls":
        res = cli("version", "--server", tls_server.addr, "--insecure", "--grpc-web", "-o", "json")
    else:
        res = cli("version", "--server", insecure_server.addr, "--plaintext", "--grpc-web", "-o", "json")
    assert VERSION_RE.match(server_version(res))


def test_grpc_web_root_path(tiphys):
    server = tiphys("--rootpath", "/argocd")
    res = cli("version", "--server", server.addr, "--insecure", "--grpc-web-root-path", "/argocd", "-o", "json")
    assert VERSION_RE.match(server_version(res))
    # native gRPC is served at the root too
    res = cli("version", "--server", server.addr, "--insecure", "-o", "json")
    assert VERSION_RE.match(server_version(res))


def test_grpc_web_without_root_path_gives_clear_error(tiphys):
    server = tiphys("--rootpath", "/argocd")
    res = cli("version", "--server", server.addr, "--insecure", "--grpc-web")
    assert res.returncode != 0
    # The server answers 404 JSON outside the root path; the CLI must say so, not misparse the body.
    assert "Invalid header bit" not in res.stderr, res.stderr
    assert "--grpc-web-root-path" in res.stderr, res.stderr


def test_output_formats(tls_server):
    res = cli("version", "--server", tls_server.addr, "--insecure", "-o", "json")
    doc = json.loads(res.stdout)
    assert VERSION_RE.match(doc["client"]["Version"]) and VERSION_RE.match(doc["server"]["Version"])
    short = cli("version", "--server", tls_server.addr, "--insecure", "-o", "short")
    assert short.returncode == 0, short.stderr
    assert short.stdout.split() == ["tiphys:", doc["client"]["Version"], "tiphys-server:", doc["server"]["Version"]]
    text = cli("version", "--server", tls_server.addr, "--insecure")
    assert text.returncode == 0 and doc["server"]["Version"] in text.stdout


def test_extra_header_accepted(tls_server):
    res = cli("version", "--server", tls_server.addr, "--insecure", "--header", "X-Test: 1", "-o", "json")
    assert VERSION_RE.match(server_version(res))
    res = cli("version", "--server", tls_server.addr, "--insecure", "--grpc-web", "-H", "X-Test: 1", "-o", "json")
    assert VERSION_RE.match(server_version(res))


def test_malformed_header_rejected(tls_server):
    res = cli("version", "--server", tls_server.addr, "--insecure", "--header", "no colon here")
    assert res.returncode != 0 and res.stderr.strip()


def test_client_only_needs_no_server():
    res = cli("version", "--client", "-o", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert VERSION_RE.match(doc["client"]["Version"]) and "server" not in doc


@pytest.mark.parametrize("extra", [[], ["--grpc-web"], ["--plaintext"]])
def test_unreachable_server(extra):
    port = free_port()  # nothing listens there
    res = cli("version", "--server", f"127.0.0.1:{port}", "--insecure", *extra)
    assert res.returncode != 0
    assert f"127.0.0.1:{port}" in res.stderr, res.stderr
    assert "refused" in res.stderr.lower() or "reach" in res.stderr.lower(), res.stderr
    assert "panicked" not in res.stderr


def test_no_server_given():
    res = cli("version", "--insecure")
    assert res.returncode != 0
    assert "--server" in res.stderr, res.stderr


def test_a_closed_output_ends_the_command_quietly(insecure_server):
    """`tiphys … | head -1`: when the reader has gone, the command stops without an error line."""
    read, write = os.pipe()
    os.close(read)
    try:
        res = subprocess.run([TIPHYS_BIN, "version", "--server", insecure_server.addr, "--plaintext", "-o", "json"],
                             stdout=write, stderr=subprocess.PIPE, text=True, timeout=30, env=clean_env(NO_COLOR="1"),
                             stdin=subprocess.DEVNULL)
    finally:
        os.close(write)
    assert res.returncode == 0, res.stderr
    assert res.stderr == "", res.stderr
