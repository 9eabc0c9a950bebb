"""Repository certificates (`/api/v1/certificates`) and GnuPG keys (`/api/v1/gpgkeys`) against a
real server: seeded from argocd-tls-certs-cm, argocd-ssh-known-hosts-cm and argocd-gpg-keys-cm in
the config dir, then listed, created (with upsert) and deleted over REST, native gRPC (grpcio,
stubs built from our protos) and gRPC-Web. The test data is made by real tools: X.509 certificates
by openssl, SSH host keys by ssh-keygen, OpenPGP keys by gpg, whose own listing is what the
server's key ID, fingerprint, owner and subtype are checked against. Each kind of bad input is a
400 (or a 409 for an existing entry without upsert) naming the problem, with nothing stored; RBAC
(resources `certificates` and `gpgkeys`) allows and denies as the policy says."""

import base64
import importlib
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlencode

import grpc
import pytest

from appkit import grpc_channel, grpc_web, md, rpc_error, write_rbac
from authkit import ALICE_PW, ADMIN_PW, BOB_PW, assert_api_error, bearer, login_token, manifest, request, \
    run_server_expecting_exit
from conftest import REPO, cli, require_tool

CERTS = "/api/v1/certificates"
GPG = "/api/v1/gpgkeys"
TOOL_TIMEOUT = 60

# ---- test data made by real tools ---------------------------------------------------------------


def run(*cmd, cwd=None, env=None, input=None):
    return subprocess.run(cmd, cwd=cwd, env=env, input=input, capture_output=True, check=True,
                          timeout=TOOL_TIMEOUT).stdout


def make_cert(workdir, cn):
    """A self-signed certificate (PEM) for `cn`, and its private key (PEM)."""
    require_tool("openssl")
    key, crt = Path(workdir) / f"{cn}.key", Path(workdir) / f"{cn}.crt"
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", str(key), "-out", str(crt), "-days", "2", "-subj", f"/O=Acme/CN={cn}")
    return crt.read_text(), key.read_text()


def make_host_key(workdir, name):
    """(key type, base64 blob, SHA256 fingerprint as ssh-keygen prints it) of a new ed25519 key."""
    require_tool("ssh-keygen")
    path = Path(workdir) / name
    run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(path))
    kind, blob = path.with_suffix(".pub").read_text().split()[:2]
    fp = run("ssh-keygen", "-l", "-E", "sha256", "-f", str(path.with_suffix(".pub"))).decode().split()[1]
    return kind, blob, fp


def hashed_known_hosts(workdir, host, kind, blob):
    """The known_hosts line of host `host` with its name hashed by ssh-keygen -H."""
    path = Path(workdir) / "known_hosts"
    path.write_text(f"{host} {kind} {blob}\n")
    run("ssh-keygen", "-H", "-f", str(path))
    return path.read_text().strip()


class Gpg:
    """A throwaway gpg home: keys are generated there, and gpg's own listing says what they are."""

    def __init__(self, workdir):
        require_tool("gpg")
        self.home = Path(workdir) / "gnupg"
        self.home.mkdir(mode=0o700)
        self.env = {**os.environ, "GNUPGHOME": str(self.home)}

    def gpg(self, *args):
        return run("gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "", *args, env=self.env)

    def generate(self, uid, algo):
        self.gpg("--quick-generate-key", uid, algo, "sign", "never")
        for line in self.gpg("--with-colons", "--list-keys", uid).decode().splitlines():
            if line.startswith("fpr:"):
                fpr = line.split(":")[9]
                break
        return SimpleNamespace(fingerprint=fpr, key_id=fpr[-16:], uid=uid,
                               public=self.gpg("--armor", "--export", fpr).decode(),
                               secret=self.gpg("--armor", "--export-secret-keys", fpr).decode())

    def close(self):
        subprocess.run(["gpgconf", "--kill", "all"], env=self.env, timeout=TOOL_TIMEOUT, check=False)


# ---- stubs --------------------------------------------------------------------------------------


def compile_stubs(out_dir):
    """grpcio-tools stubs of proto/{tiphys,k8s,v1alpha1,certificate,gpgkey}."""
    import grpc_tools  # noqa: PLC0415
    from grpc_tools import protoc  # noqa: PLC0415

    root = REPO / "proto"
    include = Path(grpc_tools.__file__).parent / "_proto"
    files = sorted(str(p.relative_to(root)) for d in ("tiphys", "k8s", "v1alpha1", "certificate", "gpgkey")
                   for p in (root / d).rglob("*.proto"))
    args = ["grpc_tools.protoc", f"-I{root}", f"-I{include}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}", *files]
    assert protoc.main(args) == 0, args
    sys.path.insert(0, str(out_dir))
    try:
        mods = {n: importlib.import_module(n) for n in (
            "v1alpha1.certificate_pb2", "certificate.certificate_pb2", "certificate.certificate_pb2_grpc",
            "gpgkey.gpgkey_pb2", "gpgkey.gpgkey_pb2_grpc")}
    finally:
        sys.path.remove(str(out_dir))
    return SimpleNamespace(v1=mods["v1alpha1.certificate_pb2"], cert=mods["certificate.certificate_pb2"],
                           cert_grpc=mods["certificate.certificate_pb2_grpc"], gpg=mods["gpgkey.gpgkey_pb2"],
                           gpg_grpc=mods["gpgkey.gpgkey_pb2_grpc"])


# ---- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def env(tmp_path_factory, module_config, tiphys_session):
    """One server whose config dir holds a TLS bundle, two SSH keys (one with a hashed name) and a
    GnuPG key; admin, alice (may read certificates and GnuPG keys) and bob (nothing)."""
    work = tmp_path_factory.mktemp("certdata")
    gpg = Gpg(work)
    seeded_cert, _ = make_cert(work, "seed.example")
    kind, blob, fp = make_host_key(work, "seed_host")
    hashed = hashed_known_hosts(work, "hashed.example", *make_host_key(work, "hashed_host")[:2])
    seeded_key = gpg.generate("Seed Key <seed@example.com>", "ed25519")
    cfg = module_config()
    cfg.write_raw("argocd-tls-certs-cm.yaml", manifest("ConfigMap", "argocd-tls-certs-cm",
                                                       {"seed.example": seeded_cert}))
    cfg.write_raw("argocd-ssh-known-hosts-cm.yaml", manifest(
        "ConfigMap", "argocd-ssh-known-hosts-cm",
        {"ssh_known_hosts": f"# seeded\nseed.example {kind} {blob}\n{hashed}\n"}))
    cfg.write_raw("argocd-gpg-keys-cm.yaml", manifest("ConfigMap", "argocd-gpg-keys-cm",
                                                      {seeded_key.key_id: seeded_key.public}))
    write_rbac(cfg, ["p, alice, certificates, get, *, allow", "p, alice, gpgkeys, get, *, allow"])
    server = tiphys_session("--insecure", "--config-dir", str(cfg.path))
    yield SimpleNamespace(
        server=server, work=work, gpg=gpg, seeded_key=seeded_key, seed_fp=fp, hashed=hashed,
        admin=login_token(server, "admin", ADMIN_PW), alice=login_token(server, "alice", ALICE_PW),
        bob=login_token(server, "bob", BOB_PW), pb=compile_stubs(tmp_path_factory.mktemp("cert-stubs")))
    gpg.close()


def call(env, method, path, body=None, token=None, **query):
    q = urlencode(query)
    return request(env.server, method, path + (f"?{q}" if q else ""), body, headers=bearer(token or env.admin))


def ok(reply):
    assert reply.status == 200, reply
    return reply.json()


def b64(text):
    return base64.b64encode(text.encode()).decode()


def listing(env, **query):
    # (an empty list is `null` today, as every list of the JSON codec; upstream sends [])
    return ok(call(env, "GET", CERTS, **query))["items"] or []


def items(reply):
    return ok(reply)["items"] or []


# ---- seeding ------------------------------------------------------------------------------------


def test_config_dir_entries_are_listed_as_upstream_shows_them(env):
    ssh = listing(env, certType="ssh", hostNamePattern="seed.*")
    assert [(i["serverName"], i["certSubType"], i["certInfo"]) for i in ssh] == [
        ("seed.example", "ssh-ed25519", env.seed_fp)], ssh
    tls = listing(env, certType="https", hostNamePattern="seed.example")
    assert [(i["serverName"], i["certType"], i["certSubType"], i["certInfo"]) for i in tls] == [
        ("seed.example", "https", "ecdsa", "CN=seed.example,O=Acme")], tls
    # the hashed name is kept as written; only `*` (or no pattern) lists it
    hashed_name = env.hashed.split()[0]
    assert hashed_name in [i["serverName"] for i in listing(env, certType="ssh")]
    assert hashed_name not in [i["serverName"] for i in listing(env, hostNamePattern="hashed.*")]
    key = ok(call(env, "GET", f"{GPG}/{env.seeded_key.key_id}"))
    assert key["keyID"] == env.seeded_key.key_id and key["owner"] == env.seeded_key.uid, key


def test_a_malformed_config_dir_entry_stops_the_start(tmp_path, config_dir):
    cfg = config_dir()
    cfg.write_raw("argocd-ssh-known-hosts-cm.yaml", manifest(
        "ConfigMap", "argocd-ssh-known-hosts-cm", {"ssh_known_hosts": "git.example ssh-ed25519 AAAA\n"}))
    proc = run_server_expecting_exit(tmp_path, "--config-dir", str(cfg.path))
    assert proc.returncode != 0
    assert "argocd-ssh-known-hosts-cm" in proc.stderr and "not a valid" in proc.stderr, proc.stderr


# ---- certificates over REST ---------------------------------------------------------------------


def test_tls_certificates_are_created_upserted_and_deleted(env):
    pem, _ = make_cert(env.work, "git.example")
    pem2, _ = make_cert(env.work, "git2.example")
    body = {"items": [{"serverName": "git.example", "certType": "https", "certData": b64(pem + pem2)}]}
    created = ok(call(env, "POST", CERTS, body))["items"]
    assert [i["serverName"] for i in created] == ["git.example", "git.example"], created
    assert base64.b64decode(created[0]["certData"]).decode().strip() == pem.strip()
    listed = listing(env, hostNamePattern="git.example")
    assert sorted(i["certInfo"] for i in listed) == ["CN=git.example,O=Acme", "CN=git2.example,O=Acme"]
    # the same again: nothing to do; different without upsert: 409 and nothing changes
    assert items(call(env, "POST", CERTS, body)) == []
    other = {"items": [{"serverName": "git.example", "certType": "https", "certData": b64(pem2)}]}
    assert_api_error(call(env, "POST", CERTS, other), 409, 6, "already exists.*upsert")
    assert len(listing(env, hostNamePattern="git.example")) == 2
    assert len(ok(call(env, "POST", CERTS, other, upsert="true"))["items"]) == 1
    assert [i["certInfo"] for i in listing(env, hostNamePattern="git.example")] == ["CN=git2.example,O=Acme"]
    removed = ok(call(env, "DELETE", CERTS, certType="https", hostNamePattern="git.exam*"))["items"]
    assert [i["serverName"] for i in removed] == ["git.example"], removed
    assert listing(env, hostNamePattern="git.example") == []


def test_ssh_known_hosts_are_created_and_deleted_by_subtype(env):
    kind, blob, fp = make_host_key(env.work, "ssh_a")
    body = {"items": [{"serverName": "[ssh.example]:2222", "certType": "ssh", "certSubType": kind,
                       "certData": b64(blob)}]}
    created = ok(call(env, "POST", CERTS, body))["items"]
    assert created[0]["certInfo"] == fp, created
    listed = listing(env, certType="ssh", certSubType=kind, hostNamePattern="\\[ssh.example\\]:2222")
    assert [(i["serverName"], i["certInfo"]) for i in listed] == [("[ssh.example]:2222", fp)]
    _, blob2, _ = make_host_key(env.work, "ssh_b")
    changed = {"items": [{**body["items"][0], "certData": b64(blob2)}]}
    assert_api_error(call(env, "POST", CERTS, changed), 409, 6, r"SSH key for .*ssh\.example.* upsert")
    assert items(call(env, "DELETE", CERTS, certType="ssh", certSubType="ssh-rsa",
                      hostNamePattern="[[]ssh.example]:2222")) == []
    removed = ok(call(env, "DELETE", CERTS, certType="ssh", hostNamePattern="[[]ssh.example]:2222"))["items"]
    assert [i["certSubType"] for i in removed] == [kind]
    assert listing(env, hostNamePattern="[[]ssh.example]:2222") == []


def test_bad_certificates_are_refused_and_nothing_is_stored(env):
    pem, key = make_cert(env.work, "bad.example")
    kind, blob, _ = make_host_key(env.work, "ssh_bad")
    good = {"serverName": "good.example", "certType": "https", "certData": b64(pem)}
    before = listing(env)
    cases = [
        ({"serverName": "bad.example", "certType": "https", "certData": b64("not a certificate")},
         "no PEM certificate"),
        ({"serverName": "bad.example", "certType": "https",
          "certData": b64("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")}, "not an X.509"),
        ({"serverName": "bad.example", "certType": "https", "certData": b64(key)}, "private key"),
        ({"serverName": "bad host", "certType": "https", "certData": b64(pem)}, "invalid host name"),
        ({"serverName": "bad.example", "certType": "x509", "certData": b64(pem)}, "unknown certificate type"),
        ({"serverName": "bad.example", "certType": "ssh", "certSubType": kind, "certData": b64("AAAA")},
         "not a valid"),
        ({"serverName": "bad.example", "certType": "ssh", "certSubType": "ssh-rsa", "certData": b64(blob)},
         "is a ssh-ed25519 key, not ssh-rsa"),
        ({"serverName": "bad.example", "certType": "ssh", "certSubType": "ssh-foo", "certData": b64(blob)},
         "unknown SSH key type"),
        ({"serverName": "bad.example", "certType": "ssh", "certSubType": kind, "certData": b64("AA!!")},
         "not base64"),
        ({"serverName": "bad.example", "certType": "https", "certData": "%%%"}, "certData: invalid base64"),
    ]
    for bad, reason in cases:
        # a good entry beside the bad one is not stored either
        assert_api_error(call(env, "POST", CERTS, {"items": [good, bad]}), 400, 3, reason)
    assert listing(env) == before
    assert_api_error(call(env, "GET", CERTS, certType="pem"), 400, 3, "unknown certificate type")
    assert_api_error(call(env, "GET", CERTS, hostNamePattern="[abc"), 400, 3, "invalid host name pattern")
    assert_api_error(call(env, "POST", CERTS, {"items": []}), 400, 3, "no certificates")


# ---- GnuPG keys over REST -----------------------------------------------------------------------


@pytest.mark.parametrize("algo,sub_type", [("ed25519", "ed25519"), ("rsa2048", "rsa2048")])
def test_gpg_keys_are_parsed_as_gpg_sees_them(env, algo, sub_type):
    key = env.gpg.generate(f"Key {algo} <{algo}@example.com>", algo)
    answer = ok(call(env, "POST", GPG, {"keyData": key.public}))
    assert answer.get("skipped") in (None, []), answer
    [created] = answer["created"]["items"]
    assert (created["keyID"], created["fingerprint"], created["owner"], created["subType"], created["trust"]) == (
        key.key_id, key.fingerprint, key.uid, sub_type, "unknown"), created
    listed = items(call(env, "GET", GPG))
    mine = [k for k in listed if k["keyID"] == key.key_id]
    assert len(mine) == 1 and "keyData" not in mine[0], mine
    got = ok(call(env, "GET", f"{GPG}/{key.fingerprint}"))
    assert "BEGIN PGP PUBLIC KEY BLOCK" in got["keyData"], got
    # again: skipped; with upsert and the same key: skipped too (nothing to change)
    assert ok(call(env, "POST", GPG, {"keyData": key.public}))["skipped"] == [key.key_id]
    assert ok(call(env, "POST", GPG, {"keyData": key.public}, upsert="true"))["skipped"] == [key.key_id]
    assert ok(call(env, "DELETE", GPG, keyID=key.key_id)) == {}
    assert_api_error(call(env, "GET", f"{GPG}/{key.key_id}"), 404, 5, "not found")
    assert_api_error(call(env, "DELETE", GPG, keyID=key.key_id), 404, 5, "not found")


def test_bad_gpg_keys_are_refused_and_nothing_is_stored(env):
    key = env.gpg.generate("Secret Holder <secret@example.com>", "ed25519")
    before = items(call(env, "GET", GPG))
    body = key.public.splitlines()
    broken = "\n".join(body[:3] + [body[3][:-4] + "AAAA"] + body[4:])
    for data, reason in [
        (key.secret, "private key"),
        ("garbage", "not an ASCII-armored OpenPGP key"),
        ("", "no key data"),
        ("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nAAAA\n-----END PGP PUBLIC KEY BLOCK-----\n", "OpenPGP"),
        (broken, "OpenPGP|self-signatures do not verify"),
        ("-----BEGIN PGP MESSAGE-----\n\nAAAA\n-----END PGP MESSAGE-----\n", "OpenPGP"),
    ]:
        assert_api_error(call(env, "POST", GPG, {"keyData": data}), 400, 3, reason)
    assert items(call(env, "GET", GPG)) == before
    assert_api_error(call(env, "GET", f"{GPG}/not-a-key-id"), 400, 3, "not a GnuPG key ID")
    assert_api_error(call(env, "DELETE", GPG), 400, 3, "not a GnuPG key ID")


# ---- RBAC ---------------------------------------------------------------------------------------


def test_rbac_allows_and_denies_as_upstream_names_it(env):
    assert listing(env) == items(call(env, "GET", CERTS, token=env.alice))
    ok(call(env, "GET", GPG, token=env.alice))
    pem, _ = make_cert(env.work, "rbac.example")
    body = {"items": [{"serverName": "rbac.example", "certType": "https", "certData": b64(pem)}]}
    assert_api_error(call(env, "POST", CERTS, body, token=env.alice), 403, 7, "permission denied")
    assert_api_error(call(env, "DELETE", CERTS, token=env.alice), 403, 7, "permission denied")
    assert_api_error(call(env, "POST", GPG, {"keyData": env.seeded_key.public}, token=env.alice), 403, 7,
                     "permission denied")
    assert_api_error(call(env, "DELETE", GPG, token=env.alice, keyID=env.seeded_key.key_id), 403, 7,
                     "permission denied")
    for path in (CERTS, GPG, f"{GPG}/{env.seeded_key.key_id}"):
        assert_api_error(call(env, "GET", path, token=env.bob), 403, 7, "permission denied")
    assert listing(env, hostNamePattern="rbac.example") == []
    assert request(env.server, "GET", CERTS).status == 401


# ---- native gRPC and gRPC-Web -------------------------------------------------------------------


def test_grpc_clients_list_create_and_delete(env):
    pb = env.pb
    channel = grpc_channel(env.server)
    certs = pb.cert_grpc.CertificateServiceStub(channel)
    keys = pb.gpg_grpc.GPGKeyServiceStub(channel)
    admin = md(env.admin)
    kind, blob, fp = make_host_key(env.work, "grpc_host")
    item = pb.v1.RepositoryCertificate(serverName="grpc.example", certType="ssh", certSubType=kind,
                                       certData=blob.encode())
    req = pb.cert.RepositoryCertificateCreateRequest(
        certificates=pb.v1.RepositoryCertificateList(items=[item]))
    created = certs.CreateCertificate(req, metadata=admin, timeout=10)
    assert [(c.serverName, c.certInfo) for c in created.items] == [("grpc.example", fp)]
    listed = certs.ListCertificates(pb.cert.RepositoryCertificateQuery(hostNamePattern="grpc.*"),
                                    metadata=admin, timeout=10)
    assert [c.certSubType for c in listed.items] == [kind]
    bad = pb.cert.RepositoryCertificateCreateRequest(certificates=pb.v1.RepositoryCertificateList(
        items=[pb.v1.RepositoryCertificate(serverName="grpc.example", certType="ssh", certSubType=kind,
                                           certData=b"AAAA")]))
    err = rpc_error(certs.CreateCertificate, bad, metadata=admin, timeout=10)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "not a valid" in err.details(), err
    err = rpc_error(certs.CreateCertificate, req, metadata=md(env.alice), timeout=10)
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED, err
    removed = certs.DeleteCertificate(pb.cert.RepositoryCertificateQuery(hostNamePattern="grpc.example"),
                                      metadata=admin, timeout=10)
    assert len(removed.items) == 1

    key = env.gpg.generate("Grpc Key <grpc@example.com>", "ed25519")
    answer = keys.Create(pb.gpg.GnuPGPublicKeyCreateRequest(publickey=pb.v1.GnuPGPublicKey(keyData=key.public)),
                         metadata=admin, timeout=10)
    assert [k.keyID for k in answer.created.items] == [key.key_id]
    got = keys.Get(pb.gpg.GnuPGPublicKeyQuery(keyID=key.key_id), metadata=md(env.alice), timeout=10)
    assert got.fingerprint == key.fingerprint
    err = rpc_error(keys.Create, pb.gpg.GnuPGPublicKeyCreateRequest(
        publickey=pb.v1.GnuPGPublicKey(keyData=key.secret)), metadata=admin, timeout=10)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "private key" in err.details(), err
    keys.Delete(pb.gpg.GnuPGPublicKeyQuery(keyID=key.key_id), metadata=admin, timeout=10)
    assert key.key_id not in [k.keyID for k in keys.List(pb.gpg.GnuPGPublicKeyQuery(), metadata=admin,
                                                          timeout=10).items]
    channel.close()


def test_grpc_web_clients_list_certificates_and_keys(env):
    pb = env.pb
    r = grpc_web(env.server, "certificate.CertificateService/ListCertificates",
                 pb.cert.RepositoryCertificateQuery(certType="https"), token=env.alice)
    assert r.status == 200 and r.trailers.get("grpc-status") == "0", r
    listed = pb.v1.RepositoryCertificateList.FromString(r.messages[0])
    assert "seed.example" in [c.serverName for c in listed.items]
    r = grpc_web(env.server, "gpgkey.GPGKeyService/List", pb.gpg.GnuPGPublicKeyQuery(), token=env.alice)
    keys = pb.v1.GnuPGPublicKeyList.FromString(r.messages[0])
    assert env.seeded_key.key_id in [k.keyID for k in keys.items]
    r = grpc_web(env.server, "gpgkey.GPGKeyService/List", pb.gpg.GnuPGPublicKeyQuery(), token=env.bob)
    assert (r.header_status or r.trailers.get("grpc-status")) == "7", r


# ---- CLI ----------------------------------------------------------------------------------------


def test_cli_verbs_as_upstream_has_them(env):
    conn = ["--server", env.server.addr, "--plaintext", "--auth-token", env.admin]
    pem, _ = make_cert(env.work, "cli.example")
    pem_file = env.work / "cli.pem"
    pem_file.write_text(pem)
    res = cli("cert", "add-tls", "cli.example", "--from", str(pem_file), *conn)
    assert res.returncode == 0 and "1 PEM certificates" in res.stdout, res
    kind, blob, fp = make_host_key(env.work, "cli_host")
    hosts_file = env.work / "cli_known_hosts"
    hosts_file.write_text(f"# from ssh-keyscan\ncli.example {kind} {blob}\n")
    res = cli("cert", "add-ssh", "--batch", "--from", str(hosts_file), *conn)
    assert res.returncode == 0 and "1 SSH known host entries" in res.stdout, res
    res = cli("cert", "list", "--hostname-pattern", "cli.*", *conn)
    assert res.returncode == 0, res
    assert f"cli.example  ssh    {kind}" in res.stdout and fp in res.stdout and "CN=cli.example,O=Acme" in res.stdout, \
        res.stdout
    hosts_file.write_text(f"cli.example {kind} AAAA\n")
    res = cli("cert", "add-ssh", "--batch", "--from", str(hosts_file), *conn)
    assert res.returncode != 0 and "not a valid" in res.stderr, res
    res = cli("cert", "rm", "cli.*", *conn)
    assert res.returncode == 0 and "Removed 2 certificates" in res.stdout, res

    key = env.gpg.generate("Cli Key <cli@example.com>", "ed25519")
    key_file = env.work / "cli.asc"
    key_file.write_text(key.public)
    res = cli("gpg", "add", "--from", str(key_file), *conn)
    assert res.returncode == 0 and key.key_id in res.stdout, res
    res = cli("gpg", "list", *conn)
    assert res.returncode == 0 and f"{key.key_id}  ed25519  Cli Key <cli@example.com>" in res.stdout, res.stdout
    res = cli("gpg", "get", key.key_id, *conn)
    assert res.returncode == 0 and key.fingerprint in res.stdout and "BEGIN PGP PUBLIC KEY BLOCK" in res.stdout, res
    key_file.write_text(key.secret)
    res = cli("gpg", "add", "--from", str(key_file), *conn)
    assert res.returncode != 0 and "private key" in res.stderr, res
    res = cli("gpg", "rm", key.key_id, *conn)
    assert res.returncode == 0, res
    res = cli("gpg", "get", key.key_id, *conn)
    assert res.returncode != 0 and "not found" in res.stderr, res
