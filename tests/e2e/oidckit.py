"""A real OpenID Connect provider for the SSO tests: the npm `oidc-provider` (panva, certified)
started from tests/oidc/server.mjs on a loopback port, stopped by PID; tokens no provider would
issue made by tests/oidc/sign.mjs with the provider's own key; and a browser-less user agent that
follows redirects by hand and fills in the provider's login form.
"""

import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse as up
from pathlib import Path

import pytest
import requests

from conftest import REPO, TIPHYS_BIN, clean_env, free_port

OIDC_DIR = REPO / "tests" / "oidc"
NODE = shutil.which("node")


def require_provider():
    if NODE is None:
        pytest.fail("node is not installed: the SSO tests need it (bash .ci/test-all installs it)")
    if not (OIDC_DIR / "node_modules" / "oidc-provider").is_dir():
        pytest.fail(f"oidc-provider is not installed: run `npm ci --prefix {OIDC_DIR}` (bash .ci/test-all does)")


class Provider:
    """A running oidc-provider; `restart(new_key=True)` rotates its signing key."""

    def __init__(self, workdir, redirect_uris, tls=None, id_token_ttl=None, device_code_ttl=None,
                 device_flow=True):
        require_provider()
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.tls = tls  # (cert, key) paths
        self.issuer = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.redirect_uris = list(redirect_uris)
        self.id_token_ttl = id_token_ttl
        self.device_code_ttl = device_code_ttl
        self.device_flow = device_flow
        self.generation = 0
        self.proc = None
        self.log = self.workdir / "oidc.log"
        self.start()

    @property
    def key_file(self):
        return self.workdir / f"key-{self.generation}.json"

    def start(self):
        env = dict(os.environ, OIDC_PORT=str(self.port), OIDC_KEY_FILE=str(self.key_file),
                   OIDC_REDIRECT_URIS=",".join(self.redirect_uris))
        if self.tls:
            env.update(OIDC_TLS_CERT=str(self.tls[0]), OIDC_TLS_KEY=str(self.tls[1]))
        if self.id_token_ttl:
            env["OIDC_ID_TOKEN_TTL"] = str(self.id_token_ttl)
        if self.device_code_ttl:
            env["OIDC_DEVICE_CODE_TTL"] = str(self.device_code_ttl)
        if not self.device_flow:
            env["OIDC_DEVICE_FLOW"] = "off"
        offset = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([NODE, str(OIDC_DIR / "server.mjs")], cwd=OIDC_DIR, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 30  # generous: a loaded 2-core machine starts node slowly
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"oidc-provider exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            if b"oidc-provider issuer" in self.log.read_bytes()[offset:]:
                return
            time.sleep(0.05)
        self.stop()
        pytest.fail(f"oidc-provider did not start within 30 s: {self.log.read_text()[-2000:]}")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc = None

    def restart(self, new_key=False):
        self.stop()
        if new_key:
            self.generation += 1
        self.start()

    def sign(self, mode, claims, key_file=None):
        """A token made with the provider's key (see tests/oidc/sign.mjs for the modes)."""
        res = subprocess.run([NODE, str(OIDC_DIR / "sign.mjs"), str(key_file or self.key_file), mode,
                              json.dumps(claims)], capture_output=True, text=True, timeout=20, cwd=OIDC_DIR)
        assert res.returncode == 0, res.stderr
        return res.stdout

    def claims(self, **overrides):
        """Valid claims for client argo-cd, which overrides can spoil (None removes a claim)."""
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": "mallory", "aud": "argo-cd", "iat": now, "exp": now + 600,
                  "email": "mallory@example.test", "groups": ["admins"]}
        for k, v in overrides.items():
            if v is None:
                claims.pop(k, None)
            else:
                claims[k] = v
        return claims


def session(verify=None):
    """A user agent; loopback only, so no proxy or CA bundle from the environment (which would
    also override `verify`)."""
    s = requests.Session()
    s.trust_env = False
    if verify is not None:
        s.verify = verify
    return s


def api(server, path, token=None, cookie=None):
    """GET `path` of `server` with a bearer token and/or a session cookie; redirects not followed."""
    headers = {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if cookie:
        headers["Cookie"] = f"argocd.token={cookie}"
    return session().get(server.url(path), headers=headers, allow_redirects=False, timeout=15)


def walk(agent, url, login, stop, limit=15):
    """Follows redirects from `url` by hand, filling in the provider's login form on the way, until
    a redirect points at a URL for which `stop(url)` is true; returns that URL without requesting
    it. The responses seen are in agent.seen."""
    agent.seen = []
    for _ in range(limit):
        if stop(url):
            return url
        r = agent.get(url, allow_redirects=False, timeout=15)
        agent.seen.append(r)
        if r.status_code in (302, 303):
            url = up.urljoin(url, r.headers["Location"])
            continue
        assert r.status_code == 200, (url, r.status_code, r.text[:500])
        form = re.search(r'<form[^>]*action="([^"]+)"', r.text)
        assert form, f"no login form at {url}: {r.text[:500]}"
        action = up.urljoin(url, form.group(1))
        prompt = re.search(r'name="prompt" value="([^"]+)"', r.text).group(1)
        r = agent.post(action, data={"prompt": prompt, "login": login, "password": "any"},
                       allow_redirects=False, timeout=15)
        agent.seen.append(r)
        assert r.status_code in (302, 303), (r.status_code, r.text[:500])
        url = up.urljoin(action, r.headers["Location"])
    pytest.fail(f"no end of the redirect chain after {limit} hops (last: {url})")


def query(url):
    return dict(up.parse_qsl(up.urlparse(url).query))


def client_token(provider, login, client_id="argo-cd-cli", secret=None, redirect_uri=None, verify=None):
    """An ID token from the provider for `login`, obtained the way a CLI does (code + PKCE)."""
    import base64  # noqa: PLC0415
    import hashlib  # noqa: PLC0415
    import secrets  # noqa: PLC0415

    redirect_uri = redirect_uri or provider.redirect_uris[0]
    agent = session(verify)
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    params = {"client_id": client_id, "redirect_uri": redirect_uri, "response_type": "code",
              "scope": "openid profile email groups", "state": "s", "nonce": "n",
              "code_challenge": challenge, "code_challenge_method": "S256"}
    start = f"{provider.issuer}/auth?{up.urlencode(params)}"
    back = walk(agent, start, login, lambda u: u.startswith(redirect_uri))
    code = query(back)["code"]
    auth = (client_id, secret) if secret else None
    data = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
            "code_verifier": verifier}
    if not secret:
        data["client_id"] = client_id
    r = agent.post(f"{provider.issuer}/token", data=data, auth=auth, timeout=15)
    assert r.status_code == 200, r.text
    return r.json()["id_token"]


def oidc_config(provider, **extra):
    """`oidc.config` for the test provider (YAML as JSON)."""
    config = {"name": "Test IdP", "issuer": provider.issuer, "clientID": "argo-cd",
              "clientSecret": "$oidc.clientSecret", "cliClientID": "argo-cd-cli",
              "requestedScopes": ["openid", "profile", "email", "groups", "offline_access"]}
    config.update(extra)
    return json.dumps(config)


def cli_sso_login(server, cli_port, issuer, config_path, login, *extra):
    """`tiphys login --sso` (with `extra` arguments) with the browser's part played by a user agent
    logging in as `login` at the provider `issuer`; returns its stdout."""
    cmd = [TIPHYS_BIN, "--config", str(config_path), "login", server.addr, "--plaintext", "--sso", *extra,
           "--sso-port", str(cli_port), "--sso-launch-browser=false"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, env=clean_env(NO_COLOR="1"))
    try:
        url, seen = None, []
        deadline = time.monotonic() + 30
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            if line.startswith(issuer):
                url = line.strip()
        assert url, f"no login URL of {issuer} printed: {seen}"
        assert query(url)["code_challenge_method"] == "S256" and query(url)["client_id"] == "argo-cd-cli"
        assert "offline_access" in query(url)["scope"].split()
        agent = session()
        callback = walk(agent, url, login, lambda u: u.startswith(f"http://localhost:{cli_port}/auth/callback"))
        r = agent.get(callback, timeout=30)
        assert r.status_code == 200 and "Login complete" in r.text, r.text
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
    assert proc.returncode == 0, err
    return out
