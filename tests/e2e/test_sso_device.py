"""`tiphys login --sso --device` (issue 41, item 4; argo-cd #16069): the device authorization
grant (RFC 8628) against a real provider (npm oidc-provider, which implements it). The user's
part is played by a browser-less user agent on the provider's own pages: it opens the printed
URL, types the printed code, confirms (or aborts), and signs in. Covered: an approved login
saved and usable like a browser login (groups, refresh token); a denied login; a code that
expires first; a provider without the grant; `--device` without `--sso`.
"""

import json
import re
import subprocess
import time
import urllib.parse as up

from conftest import TIPHYS_BIN, clean_env, cli
from oidckit import session
from test_sso import setup_sso

CODE_LINE = re.compile(r"enter the code (\S+) \(valid for (\d+) s\)")


class DeviceLogin:
    """A running `tiphys login --sso --device` (with `extra` arguments); reads the code and URL it
    prints. `s`: anything with the `server` and the `provider` the login goes to."""

    def __init__(self, s, config_path, *extra):
        cmd = [TIPHYS_BIN, "--config", str(config_path), "login", s.server.addr, "--plaintext", "--sso",
               "--device", *extra, "--sso-launch-browser=false"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True, env=clean_env(NO_COLOR="1"))
        self.seen, self.code, self.url, self.complete, self.valid_for = [], None, None, None, None
        deadline = time.monotonic() + 30
        while self.complete is None and time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.seen.append(line)
            if m := CODE_LINE.search(line):
                self.code, self.valid_for = m.group(1), int(m.group(2))
            elif line.startswith(s.provider.issuer):
                if self.url is None:
                    self.url = line.strip()
                else:
                    self.complete = line.strip()

    def result(self, timeout=60):
        """Waits for the CLI to end; returns (exit code, stdout, stderr)."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode, out, "".join(self.seen) + err


def hidden(html, name):
    m = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert m, f"no {name} in {html[:500]}"
    return m.group(1)


def approve(url, code, login, abort=False):
    """The user at the provider's pages: the code typed into the input form, then confirmed (or
    aborted), then the sign-in form filled in; returns the last page's text."""
    agent = session()
    r = agent.get(url, timeout=15)
    assert r.status_code == 200 and 'name="user_code"' in r.text, r.text[:500]
    action = up.urljoin(url, re.search(r'<form[^>]*action="([^"]+)"', r.text).group(1))
    r = agent.post(action, data={"xsrf": hidden(r.text, "xsrf"), "user_code": code}, timeout=15)
    assert r.status_code == 200 and "op.deviceConfirmForm" in r.text, r.text[:500]
    data = {"xsrf": hidden(r.text, "xsrf"), "user_code": hidden(r.text, "user_code")}
    data.update({"abort": "yes"} if abort else {"confirm": "yes"})
    r = agent.post(action, data=data, allow_redirects=False, timeout=15)
    for _ in range(15):  # bounded: the provider's redirects, with its sign-in form on the way
        if r.status_code in (302, 303):
            r = agent.get(up.urljoin(r.url, r.headers["Location"]), allow_redirects=False, timeout=15)
            continue
        if 'name="prompt"' not in r.text:
            return r.text
        form = up.urljoin(r.url, re.search(r'<form[^>]*action="([^"]+)"', r.text).group(1))
        r = agent.post(form, data={"prompt": hidden(r.text, "prompt"), "login": login, "password": "any"},
                       allow_redirects=False, timeout=15)
    raise AssertionError("no end of the provider's pages after 15 steps")


def test_an_approved_device_login_is_saved_and_used_like_a_browser_login(tmp_path, servers, config_dir):
    s = setup_sso(tmp_path, servers, config_dir)
    config_path = tmp_path / "cli-config"
    run = DeviceLogin(s, config_path)
    assert run.code and re.fullmatch(r"[A-Z]{4}-[A-Z]{4}", run.code), run.seen
    assert run.url == f"{s.provider.issuer}/device", run.seen
    assert up.parse_qs(up.urlparse(run.complete).query) == {"user_code": [run.code]}, run.seen
    assert 0 < run.valid_for <= 600
    page = approve(run.url, run.code, "admin7")
    assert "Sign-in Success" in page, page[:500]
    code, out, err = run.result()
    assert code == 0, err
    assert "'admin7@example.test' logged in successfully" in out, out
    saved = config_path.read_text()
    assert "auth-token: eyJ" in saved and "refresh-token:" in saved, saved
    res = cli("--config", str(config_path), "account", "get-user-info", "-o", "json")
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert (info["loggedIn"], info["username"], info["iss"]) == (True, "admin7@example.test", s.provider.issuer)
    assert info["groups"] == ["devs", "admins"]
    # The groups reach RBAC (g, admins, role:admin): an admin-only read passes.
    res = cli("--config", str(config_path), "proj", "list")
    assert res.returncode == 0, res.stderr


def test_a_denied_device_login_ends_with_a_clear_message_and_exit_1(tmp_path, servers, config_dir):
    s = setup_sso(tmp_path, servers, config_dir)
    config_path = tmp_path / "cli-config"
    run = DeviceLogin(s, config_path)
    assert run.code, run.seen
    approve(run.url, run.code, "alice", abort=True)
    code, _, err = run.result()
    assert code == 1, err
    assert "the device login failed: the login was denied at the identity provider" in err, err
    assert not config_path.exists() or "auth-token" not in config_path.read_text()


def test_an_expired_device_code_ends_with_a_clear_message_and_exit_1(tmp_path, servers, config_dir):
    s = setup_sso(tmp_path, servers, config_dir, provider_args={"device_code_ttl": 3})
    run = DeviceLogin(s, tmp_path / "cli-config")
    assert run.valid_for == 3, run.seen
    started = time.monotonic()
    code, _, err = run.result(timeout=40)
    assert code == 1, err
    assert "the login code expired before the login was approved; run the login again" in err, err
    assert time.monotonic() - started < 30, "the wait ends with the code's lifetime"


def test_a_provider_without_the_device_grant_is_named(tmp_path, servers, config_dir):
    s = setup_sso(tmp_path, servers, config_dir, provider_args={"device_flow": False})
    res = cli("--config", str(tmp_path / "c"), "login", s.server.addr, "--plaintext", "--sso", "--device",
              "--sso-launch-browser=false")
    assert res.returncode == 1, res.stderr
    assert "offers no device-code login" in res.stderr and "without --device" in res.stderr, res.stderr


def test_device_needs_sso(tmp_path, tiphys):
    server = tiphys("--insecure")
    res = cli("--config", str(tmp_path / "c"), "login", server.addr, "--plaintext", "--device")
    assert res.returncode == 2, res.stderr
    assert "--sso" in res.stderr, res.stderr
