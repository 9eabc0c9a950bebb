"""The Containerfile: the image is built from the static release binary (TIPHYS_RELEASE_BIN) with
Debian's buildah (vfs storage and chroot isolation under the test's temp dir, no registry), its
configuration and content are checked, and it is run:

- with podman (`--read-only` root, `--network host` on 127.0.0.1, runc with cgroupfs; crun refuses
  this kind of machine's hybrid cgroup layout and the limits it may not raise): /healthz, `tiphys
  version` against the container, the process's user, the initial password and an admin login;
- and from its unpacked root filesystem (`buildah mount`), chrooted as the image's user, so that the
  content is tested even where no container can run.

The variant with the OpenSSH client (`Containerfile.ssh`, its context made by
`tools/image-ssh-context.sh` from this machine's openssh-client) is built on that image, its content
checked, and run with podman against gitkit's sshd: an SSH repository is added and its refs listed.
The image without ssh refuses the same repository, saying that ssh is missing.
"""

import base64
import contextlib
import hashlib
import json
import os
import resource
import shutil
import stat
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from conftest import REPO, TIPHYS_BIN, TIPHYS_RELEASE_BIN, VERSION_RE, clean_env, free_port, require_tool

IMAGE = "localhost/tiphys-e2e:test"
SSH_IMAGE = "localhost/tiphys-e2e:ssh"
USER = "65532:65532"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")  # Debian's ca-certificates
START_TIMEOUT = 30


class Storage:
    """A private containers/storage under `d` (vfs: no overlay mounts, nothing outside `d`)."""

    def __init__(self, d):
        self.d = Path(d)
        self.args = ["--root", str(self.d / "root"), "--runroot", str(self.d / "run"), "--storage-driver", "vfs"]

    def buildah(self, *args, timeout=300, check=True):
        res = subprocess.run([require_tool("buildah"), *self.args, *args], capture_output=True, text=True,
                             timeout=timeout, stdin=subprocess.DEVNULL)
        if check:
            assert res.returncode == 0, f"buildah {' '.join(args)}: {res.stderr}"
        return res

    def podman_cmd(self, *args):
        return [require_tool("podman"), *self.args, "--cgroup-manager", "cgroupfs", "--runtime",
                require_tool("runc"), *args]

    def podman(self, *args, timeout=60):
        return subprocess.run(self.podman_cmd(*args), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)


def build_context(d, binary=True):
    """The build context the Containerfile's head describes."""
    ctx = Path(d)
    (ctx / "data").mkdir(parents=True)
    (ctx / "var" / "lib").mkdir(parents=True)
    shutil.copy(CA_BUNDLE, ctx / "ca-certificates.crt")
    if binary:
        if not os.path.isfile(TIPHYS_RELEASE_BIN):
            pytest.fail(f"the release binary {TIPHYS_RELEASE_BIN} does not exist, and the image is built from it: "
                        "run `cargo build --release` (or set TIPHYS_RELEASE_BIN)")
        shutil.copy(TIPHYS_RELEASE_BIN, ctx / "tiphys")
    return ctx


def build(storage, ctx, tag=IMAGE):
    return storage.buildah("build", "--isolation", "chroot", "-f", str(REPO / "Containerfile"), "-t", tag,
                           str(ctx), check=False)


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    d = tmp_path_factory.mktemp("image")
    storage = Storage(d / "storage")
    res = build(storage, build_context(d / "ctx"))
    assert res.returncode == 0, f"buildah build failed:\n{res.stdout[-3000:]}\n{res.stderr}"
    yield storage
    for container in storage.buildah("containers", "--quiet", check=False).stdout.split():
        storage.buildah("rm", container, check=False)
    storage.buildah("rmi", "--all", "--force", check=False)
    shutil.rmtree(d, ignore_errors=True)


def test_build_without_the_binary_says_so(tmp_path):
    storage = Storage(tmp_path / "storage")
    res = build(storage, build_context(tmp_path / "ctx", binary=False), tag="localhost/tiphys-e2e:nobinary")
    assert res.returncode != 0
    assert "tiphys" in res.stderr and "no such file or directory" in res.stderr.lower(), res.stderr
    storage.buildah("rmi", "--all", "--force", check=False)


def test_image_config(image):
    info = json.loads(image.buildah("inspect", "--type", "image", IMAGE).stdout)
    config = info["OCIv1"]["config"]
    assert config["User"] == USER, "a numeric user, not root"
    assert config["Entrypoint"] == ["/usr/local/bin/tiphys"] and config["Cmd"] == ["server"]
    assert "/var/lib/tiphys" in config["Volumes"]
    assert {"8080/tcp", "8083/tcp"} <= set(config["ExposedPorts"])
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["TIPHYS_DATA_DIR"] == "/var/lib/tiphys"
    assert info["OCIv1"]["os"] == "linux"
    assert "Healthcheck" not in (info.get("Docker") or {}).get("config", {}), "OCI images have no HEALTHCHECK"


@pytest.fixture(scope="module")
def rootfs(image):
    """The image's root filesystem, mounted by buildah (a working container of it)."""
    container = image.buildah("from", IMAGE).stdout.strip().splitlines()[-1]
    path = Path(image.buildah("mount", container).stdout.strip())
    yield path
    image.buildah("umount", container, check=False)
    image.buildah("rm", container, check=False)


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_image_content(rootfs):
    files = {}
    for path in sorted(rootfs.rglob("*")):
        st = path.lstat()
        files[str(path.relative_to(rootfs))] = (st.st_uid, st.st_gid, oct(st.st_mode & 0o7777))
    expected = {"etc", "etc/ssl", "etc/ssl/certs", "etc/ssl/certs/ca-certificates.crt", "usr", "usr/local",
                "usr/local/bin", "usr/local/bin/tiphys", "var", "var/lib", "var/lib/tiphys"}
    assert set(files) == expected, "the image holds the binary, the CA bundle and the data dir, nothing else"
    assert sha256(rootfs / "usr/local/bin/tiphys") == sha256(TIPHYS_RELEASE_BIN)
    assert sha256(rootfs / "etc/ssl/certs/ca-certificates.crt") == sha256(CA_BUNDLE)
    assert files["var/lib/tiphys"][:2] == (65532, 65532)
    owned_by_user = sorted(p for p, (uid, _, _) in files.items() if uid != 0)
    assert owned_by_user == ["var/lib/tiphys"], "only the data dir belongs to the image's user"
    ldd = subprocess.run(["ldd", str(rootfs / "usr/local/bin/tiphys")], capture_output=True, text=True, timeout=30)
    assert "not a dynamic executable" in ldd.stdout + ldd.stderr or "statically linked" in ldd.stdout


def curl(url, *args):
    res = subprocess.run(["curl", "-sS", "-k", "--max-time", "5", "-w", "\n%{http_code}", *args, url],
                         capture_output=True, text=True, timeout=15)
    body, _, status = res.stdout.rpartition("\n")
    return res.returncode, status, body


def wait_healthy(port, proc, log):
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the image's server exited with {proc.returncode}:\n{Path(log).read_text(errors='replace')}")
        rc, status, body = curl(f"http://127.0.0.1:{port}/healthz")
        if rc == 0 and status == "200":
            return body.strip()
        time.sleep(0.2)
    pytest.fail(f"/healthz did not answer 200 within {START_TIMEOUT} s:\n{Path(log).read_text(errors='replace')}")


def login(port, password):
    rc, status, body = curl(f"https://127.0.0.1:{port}/api/v1/session", "-H", "Content-Type: application/json",
                            "-d", json.dumps({"username": "admin", "password": password}))
    assert rc == 0 and status == "200", body
    token = json.loads(body)["token"]
    assert token.count(".") == 2
    return token


def check_server_version(port):
    res = subprocess.run([TIPHYS_BIN, "version", "--server", f"127.0.0.1:{port}", "--insecure", "-o", "json"],
                         capture_output=True, text=True, timeout=30, env=clean_env(NO_COLOR="1"))
    assert res.returncode == 0, res.stderr
    version = json.loads(res.stdout)["server"]["Version"]
    assert VERSION_RE.match(version)
    return version


def process_ids(pid):
    status = Path(f"/proc/{pid}/status").read_text()
    uid = next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
    gid = next(line.split()[1] for line in status.splitlines() if line.startswith("Gid:"))
    return f"{uid}:{gid}"


def server_args(port, metrics_port):
    return ["server", "--address", "127.0.0.1", "--port", str(port), "--metrics-address", "127.0.0.1",
            "--metrics-port", str(metrics_port), "--shutdown-delay", "0"]


def stop(proc, log):
    proc.terminate()
    try:
        assert proc.wait(timeout=30) == 0, Path(log).read_text(errors="replace")[-3000:]
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        pytest.fail("the image's server did not stop within 30 s of SIGTERM")


def ulimits():
    """podman's default limits may exceed what this process may raise: pass its own."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 4096)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


def test_image_runs_in_podman(image, tmp_path):
    name = f"tiphys-e2e-{os.getpid()}"
    port, metrics_port = free_port(), free_port()
    cmd = image.podman_cmd("run", "--rm", "--name", name, "--network", "host", "--read-only", *ulimits(),
                           IMAGE, *server_args(port, metrics_port))
    log = tmp_path / "podman.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        assert wait_healthy(port, proc, log) == "ok"
        state = json.loads(image.podman("inspect", name).stdout)[0]["State"]
        assert process_ids(state["Pid"]) == "65532:65532", "the server runs as the image's user"
        inner = image.podman("exec", name, "tiphys", "version", "--client")
        assert inner.returncode == 0, inner.stderr
        # The server reports the Argo CD API level with tiphys's version as build metadata
        # (v3.4.0+tiphys.0.1.0); the client in the image prints tiphys's own (tiphys: v0.1.0).
        own = "v" + check_server_version(port).split("+tiphys.", 1)[1]
        assert inner.stdout.startswith(f"tiphys: {own}\n"), inner.stdout
        res = image.podman("exec", name, "tiphys", "admin", "initial-password")
        assert res.returncode == 0, res.stderr
        login(port, res.stdout.split()[0])
        stop(proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        image.podman("rm", "--force", "--ignore", name)


def test_image_rootfs_runs_as_its_user(rootfs, tmp_path):
    """The unpacked image, chrooted as its user: the content alone serves, with no host file."""
    chroot = require_tool("chroot")
    port, metrics_port = free_port(), free_port()
    # What a container runtime provides beside the image: /dev/null, /dev/random and /dev/urandom (in
    # the working container's layer, not the image's).
    (rootfs / "dev").mkdir(exist_ok=True)
    for node, minor in (("null", 3), ("random", 8), ("urandom", 9)):
        if not (rootfs / "dev" / node).exists():
            os.mknod(rootfs / "dev" / node, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    env = {"PATH": "/usr/local/bin", "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
           "TIPHYS_DATA_DIR": "/var/lib/tiphys", "RUST_LOG": "info"}
    log = tmp_path / "rootfs.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([chroot, f"--userspec={USER}", str(rootfs), "/usr/local/bin/tiphys",
                                 *server_args(port, metrics_port)],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    try:
        assert wait_healthy(port, proc, log) == "ok"
        assert process_ids(proc.pid) == "65532:65532"
        check_server_version(port)
        password = (rootfs / "var/lib/tiphys/initial-admin-password").read_text().split()[0]
        login(port, password)
        stop(proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


# ---- the variant with the OpenSSH client ----------------------------------------------------------


@pytest.fixture(scope="module")
def ssh_context(image, tmp_path_factory):
    ctx = tmp_path_factory.mktemp("image-ssh") / "ctx"
    res = subprocess.run(["bash", str(REPO / "tools" / "image-ssh-context.sh"), str(ctx)], capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    return ctx


@pytest.fixture(scope="module")
def ssh_image(image, ssh_context):
    res = image.buildah("build", "--isolation", "chroot", "-f", str(REPO / "Containerfile.ssh"), "--build-arg",
                        f"BASE={IMAGE}", "-t", SSH_IMAGE, str(ssh_context), check=False)
    assert res.returncode == 0, f"buildah build (ssh) failed:\n{res.stdout[-3000:]}\n{res.stderr}"
    return image


def test_the_ssh_context_script_refuses_a_directory_that_exists(tmp_path):
    res = subprocess.run(["bash", str(REPO / "tools" / "image-ssh-context.sh"), str(tmp_path)], capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode == 2 and "already exists" in res.stderr, res


def test_ssh_image_is_the_image_plus_ssh(ssh_image, ssh_context):
    info = json.loads(ssh_image.buildah("inspect", "--type", "image", SSH_IMAGE).stdout)
    config = info["OCIv1"]["config"]
    assert config["User"] == USER and config["Entrypoint"] == ["/usr/local/bin/tiphys"], config
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["PATH"].split(":")[:2] == ["/usr/local/bin", "/usr/bin"], env
    assert env["TIPHYS_DATA_DIR"] == "/var/lib/tiphys"
    container = ssh_image.buildah("from", SSH_IMAGE).stdout.strip().splitlines()[-1]
    try:
        root = Path(ssh_image.buildah("mount", container).stdout.strip())
        files = {str(p.relative_to(root)): p.lstat() for p in root.rglob("*")}
        added = {str(p.relative_to(ssh_context / "root")) for p in (ssh_context / "root").rglob("*")}
        assert {"usr/bin/ssh", "bin/sh", "etc/passwd"} <= added, added
        base = {"etc", "etc/ssl", "etc/ssl/certs", "etc/ssl/certs/ca-certificates.crt", "usr", "usr/local",
                "usr/local/bin", "usr/local/bin/tiphys", "var", "var/lib", "var/lib/tiphys"}
        assert set(files) == base | added, set(files) ^ (base | added)
        assert sha256(root / "usr/bin/ssh") == sha256(ssh_context / "root/usr/bin/ssh")
        assert sha256(root / "usr/local/bin/tiphys") == sha256(TIPHYS_RELEASE_BIN)
        # What was copied in belongs to root; the data dir still to the image's user.
        assert all(files[p].st_uid == 0 for p in added), "copied files belong to root"
        assert (files["var/lib/tiphys"].st_uid, files["var/lib/tiphys"].st_gid) == (65532, 65532)
        assert "tiphys:x:65532:65532:" in (root / "etc/passwd").read_text()
    finally:
        ssh_image.buildah("umount", container, check=False)
        ssh_image.buildah("rm", container, check=False)


@contextlib.contextmanager
def podman_server(storage, tag, tmp_path):
    """`tag` serving with repository access on, in podman (host network, read-only root): yields
    (port, admin token)."""
    name = f"tiphys-e2e-{os.getpid()}-{tag.rsplit(':', 1)[1]}"
    port, metrics_port = free_port(), free_port()
    cmd = storage.podman_cmd("run", "--rm", "--name", name, "--network", "host", "--read-only", *ulimits(), tag,
                             *server_args(port, metrics_port), "--repo-access", "on")
    log = tmp_path / f"podman-{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        assert wait_healthy(port, proc, log) == "ok"
        res = storage.podman("exec", name, "tiphys", "admin", "initial-password")
        assert res.returncode == 0, res.stderr
        yield port, login(port, res.stdout.split()[0])
        stop(proc, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        storage.podman("rm", "--force", "--ignore", name)


def api(port, token, method, path, body=None):
    args = ["-X", method, "-H", f"Authorization: Bearer {token}"]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    rc, status, text = curl(f"https://127.0.0.1:{port}{path}", *args)
    assert rc == 0, text
    return int(status), json.loads(text or "{}")


def trust_and_add_ssh_repository(port, token, gs):
    host, kind, blob = gs.ssh_known_hosts.split()
    item = {"serverName": host, "certType": "ssh", "certSubType": kind,
            "certData": base64.b64encode(blob.encode()).decode()}
    status, answer = api(port, token, "POST", "/api/v1/certificates", {"items": [item]})
    assert status == 200, answer
    return api(port, token, "POST", "/api/v1/repositories",
               {"repo": gs.url("ssh"), "sshPrivateKey": gs.ssh_private_key})


def test_ssh_repositories_work_in_the_ssh_image(ssh_image, gitservers, tmp_path):
    with podman_server(ssh_image, SSH_IMAGE, tmp_path) as (port, token):
        status, added = trust_and_add_ssh_repository(port, token, gitservers)
        assert status == 200, added
        assert added["connectionState"]["status"] == "Successful", added
        url = gitservers.url("ssh")
        status, refs = api(port, token, "GET", f"/api/v1/repositories/{quote(url, safe='')}/refs")
        assert status == 200, refs
        assert refs["branches"] == ["dev", "main"] and refs["tags"] == ["v1.0.0", "v1.1.0"], refs


def test_the_image_without_ssh_says_so_for_an_ssh_repository(image, gitservers, tmp_path):
    with podman_server(image, IMAGE, tmp_path) as (port, token):
        status, refused = trust_and_add_ssh_repository(port, token, gitservers)
        assert status == 400, refused
        assert "OpenSSH client" in refused["message"] and "Containerfile.ssh" in refused["message"], refused
