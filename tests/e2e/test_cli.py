"""The tiphys CLI (`tiphys version`) in every connection mode against real servers: native gRPC
over TLS (--server-crt, --insecure) and h2c (--plaintext), gRPC-Web over TLS and plaintext, a root
path, output formats, extra headers, --client, and the errors users see when something is wrong."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from authkit import ADMIN_PW, bearer, login_token, request
from conftest import REPO, TIPHYS_BIN, VERSION_RE, clean_env, cli, free_port, rest_version


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


def test_build_facts_of_a_signed_in_caller_are_the_binarys_own(servers, config_dir):
    """Upstream sends BuildDate, GitCommit and GitTreeState to a signed-in caller; tiphys stamps
    them at build time from git about its own checkout, and leaves out what it cannot know."""
    server = servers.start("--insecure", config=config_dir())
    anonymous = request(server, "GET", "/api/version").json()
    assert set(anonymous) == {"Version"}, anonymous
    facts = request(server, "GET", "/api/version", headers=bearer(login_token(server, "admin", ADMIN_PW))).json()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", facts["BuildDate"]), facts
    client = json.loads(cli("version", "--client", "-o", "json").stdout)["client"]
    for field in ("BuildDate", "GitCommit", "GitTreeState", "GitTag"):
        assert facts.get(field) == client.get(field), (field, facts, client)
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=REPO, capture_output=True, text=True,
                         timeout=30) if shutil.which("git") else None
    if top is None or top.returncode != 0 or Path(top.stdout.strip()).resolve() != REPO.resolve():
        # Built without git or outside a checkout: not known, so not sent.
        assert "GitCommit" not in facts and "GitTreeState" not in facts, facts
        return
    assert re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", facts["GitCommit"]), facts
    known = subprocess.run(["git", "cat-file", "-e", facts["GitCommit"] + "^{commit}"], cwd=REPO, timeout=30)
    assert known.returncode == 0, f"GitCommit {facts['GitCommit']} is not a commit of this checkout"
    assert facts["GitTreeState"] in ("clean", "dirty"), facts
    assert "GitTag" not in facts or facts["GitTreeState"] == "clean", facts


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
