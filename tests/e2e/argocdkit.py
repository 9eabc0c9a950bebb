"""Upstream's `argocd` CLI as a test client (built by tools/upstream/build.sh; see controlplane.py).

`ArgoCli(workdir)` runs the binary with a config file and a HOME of its own, in an environment
without the caller's ARGOCD_* settings, every call bounded in time:

    argocd = ArgoCli(tmp_path, ca=server.ca)
    argocd("login", server.addr, "--username", "admin", "--password", pw)
    apps = argocd.json("app", "list")          # -o json, parsed
    res = argocd("app", "get", "x", check=False); res.returncode, res.stderr
    argocd.token()                             # the session the config holds now
"""

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from controlplane import PartFailed, _bin, upstream_bins


def argocd_bin():
    """The path of the built `argocd` binary; fails the test naming what is missing."""
    try:
        return _bin(upstream_bins(), "argocd")
    except PartFailed as e:
        pytest.fail(str(e), pytrace=False)


class ArgoCli:
    """`ca`: a CA file the CLI trusts as the system's roots (SSL_CERT_FILE, which Go reads on
    Linux). `argocd login` ignores --server-crt (cmd/argocd/commands/login.go builds its client
    options without it) and probes TLS against the system's roots, so this is how a login
    verifies a private CA instead of going --insecure."""

    def __init__(self, workdir, *global_flags, ca=None):
        self.bin = argocd_bin()
        self.home = Path(workdir) / "argocd-cli"
        self.home.mkdir(parents=True, exist_ok=True)
        self.config = self.home / "config"
        self.global_flags = list(global_flags)
        self.ca = ca

    def env(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ARGOCD_", "KUBECONFIG"))}
        env.update(HOME=str(self.home), ARGOCD_BINARY_NAME="argocd", NO_COLOR="1")
        if self.ca:
            env.update(SSL_CERT_FILE=str(self.ca), SSL_CERT_DIR=str(self.home / "no-cert-dir"))
        return env

    def command(self, *args):
        """The full command line of `argocd ARGS` (for a caller that runs it itself)."""
        return [self.bin, *args, "--config", str(self.config), *self.global_flags]

    def __call__(self, *args, check=True, timeout=90, input=None):
        res = subprocess.run(self.command(*args), capture_output=True, text=True, timeout=timeout, env=self.env(),
                             input=input, stdin=None if input is not None else subprocess.DEVNULL)
        if check and res.returncode != 0:
            pytest.fail(f"argocd {' '.join(args)} exited {res.returncode}:\n{res.stderr}\n{res.stdout}")
        return res

    def token(self):
        """The auth token the config holds for its current context ('' when logged out)."""
        config = yaml.safe_load(self.config.read_text()) or {}
        current = config.get("current-context")
        user = next((c["user"] for c in config.get("contexts", []) if c["name"] == current), None)
        return next((u.get("auth-token", "") for u in config.get("users", []) if u["name"] == user), "")

    def json(self, *args, **kw):
        res = self(*args, "-o", "json", **kw)
        try:
            return json.loads(res.stdout)
        except ValueError:
            pytest.fail(f"argocd {' '.join(args)} -o json printed no JSON:\n{res.stdout[:2000]}")
