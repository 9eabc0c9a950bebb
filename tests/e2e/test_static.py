"""The release binary (TIPHYS_RELEASE_BIN) is fully static, and it still resolves host names
(`localhost`) and talks to a running server. A missing release binary is a failure, not a skip."""

import json
import os
import subprocess

import pytest

from conftest import TIPHYS_RELEASE_BIN, VERSION_RE, cli


@pytest.fixture(scope="module")
def release_bin():
    if not os.path.isfile(TIPHYS_RELEASE_BIN):
        pytest.fail(f"release binary {TIPHYS_RELEASE_BIN} does not exist: run `cargo build --release` "
                    "(or set TIPHYS_RELEASE_BIN)")
    return TIPHYS_RELEASE_BIN


def test_release_binary_is_static(release_bin):
    res = subprocess.run(["ldd", release_bin], capture_output=True, text=True, timeout=30)
    out = (res.stdout + res.stderr).lower()
    assert "not a dynamic executable" in out or "statically linked" in out, f"ldd {release_bin}:\n{out}"
    assert "libc.so" not in out


def test_release_cli_resolves_hostname(release_bin, tls_server):
    res = cli("version", "--server", f"localhost:{tls_server.port}", "--insecure", "-o", "json", bin_path=release_bin)
    assert res.returncode == 0, res.stderr
    assert VERSION_RE.match(json.loads(res.stdout)["server"]["Version"])


def test_release_cli_grpc_web_by_hostname(release_bin, tls_server):
    res = cli("version", "--server", f"localhost:{tls_server.port}", "--insecure", "--grpc-web", "-o", "json",
              bin_path=release_bin)
    assert res.returncode == 0, res.stderr
    assert VERSION_RE.match(json.loads(res.stdout)["server"]["Version"])
