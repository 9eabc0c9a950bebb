"""Repository certificates and GnuPG keys on the Kubernetes backend (issue 37): `tiphys server
--kube` keeps them where upstream argocd-server does, in the ConfigMaps argocd-tls-certs-cm,
argocd-ssh-known-hosts-cm and argocd-gpg-keys-cm of the installation of controlplane.py.

  a TLS bundle, an SSH host key and their deletion through tiphys leave the ConfigMaps exactly as
  the same calls to upstream argocd-server (on the same plane) leave them; a GnuPG key is kept
  under its key ID as upstream keeps it; an edit made with kubectl is listed by tiphys within a
  second, and its removal too; a malformed PEM, a bad known_hosts entry and a bad GnuPG key are
  refused with a message naming the problem, and the ConfigMaps stay as they were.

Test data is made by real tools (openssl, ssh-keygen, gpg: test_certificates.py). Runs under
tools/upstream/isolated (see controlplane.py); .ci/test-all runs it there.
"""

import json
import secrets
import subprocess
from types import SimpleNamespace
from urllib.parse import urlencode

import pytest

from appkit import Api
from authkit import assert_api_error, login_token
from test_certificates import Gpg, b64, make_cert, make_host_key
from test_kube_backend import NS, SEEN_WITHIN, start_kube_server, upstream_call
from test_upstream_chain import wait_for

CERTS = "/api/v1/certificates"
GPG = "/api/v1/gpgkeys"
TLS_CM = "argocd-tls-certs-cm"
SSH_CM = "argocd-ssh-known-hosts-cm"
GPG_CM = "argocd-gpg-keys-cm"


@pytest.fixture(scope="module")
def kube(controlplane, tmp_path_factory):
    """tiphys --kube on the session's installation, admin's tokens for it and for upstream
    argocd-server on the same plane, and a workdir for test data."""
    d = tmp_path_factory.mktemp("kube-certs")
    server = start_kube_server(d, controlplane.state["kubeconfig"], "--redis", controlplane.state["redis"]["address"])
    password = controlplane.state["argocd"]["admin_password"]
    status, body = upstream_call(controlplane, "POST", "/api/v1/session",
                                 body={"username": "admin", "password": password})
    assert status == 200, body
    gpg = Gpg(d)
    yield SimpleNamespace(server=server, api=Api(server, login_token(server, "admin", password)),
                          upstream=body["token"], work=d, gpg=gpg)
    gpg.close()
    server.stop()


def cm_data(plane, name):
    return plane.get_json("configmap", name, "-n", NS).get("data") or {}


def set_cm_data(plane, name, data):
    """Replaces the ConfigMap's data with kubectl (the ConfigMaps exist on the plane)."""
    patch = [{"op": "add", "path": "/data", "value": data}]
    plane.kubectl("patch", "configmap", name, "-n", NS, "--type", "json", "-p", json.dumps(patch))


def tiphys(kube, method, path, body=None, **query):
    q = urlencode(query)
    return kube.api.call(method, path + (f"?{q}" if q else ""), body)


def upstream(plane, kube, method, path, body=None, **query):
    q = urlencode(query)
    status, answer = upstream_call(plane, method, path + (f"?{q}" if q else ""), kube.upstream, body)
    assert status == 200, (status, answer)
    return answer


def ok(reply):
    assert reply.status == 200, reply
    return reply.json()


def listed(kube, **query):
    return ok(tiphys(kube, "GET", CERTS, **query))["items"] or []


@pytest.fixture
def seeded(plane, kube):
    """The two certificate ConfigMaps set to a known start: one TLS host, and a comment and one
    key in known_hosts; returns that data, and sets it again afterwards."""
    pem, _ = make_cert(kube.work, "seed.example")
    kind, blob, _ = make_host_key(kube.work, f"seed-{secrets.token_hex(4)}")
    start = {TLS_CM: {"seed.example": pem},
             SSH_CM: {"ssh_known_hosts": f"# seeded by hand\nseed.example {kind} {blob}\n"}}

    def reset():
        for name, data in start.items():
            set_cm_data(plane, name, data)
        wait_for("tiphys listing the seeded entries again",
                 lambda: sorted(i["serverName"] for i in listed(kube)) == ["seed.example", "seed.example"],
                 timeout=5, interval=0.05)

    reset()
    yield SimpleNamespace(data=start, reset=reset)
    reset()


def both_maps(plane):
    return {TLS_CM: cm_data(plane, TLS_CM), SSH_CM: cm_data(plane, SSH_CM)}


def test_certificates_created_and_deleted_through_tiphys_are_what_argocd_server_writes(plane, kube, seeded):
    pem_a, _ = make_cert(kube.work, "git.example")
    pem_b, _ = make_cert(kube.work, "git2.example")
    kind, blob, fp = make_host_key(kube.work, "ssh-made")
    create = {"items": [
        {"serverName": "git.example", "certType": "https", "certData": b64(pem_a + pem_b)},
        {"serverName": "[ssh.example]:2222", "certType": "ssh", "certSubType": kind, "certData": b64(blob)},
    ]}
    # an upsert of the seeded key changes its line in place
    _, blob2, _ = make_host_key(kube.work, "ssh-upsert")
    upsert = {"items": [{"serverName": "seed.example", "certType": "ssh", "certSubType": kind,
                         "certData": b64(blob2)}]}

    def upstream_sees_the_start():
        # argocd-server reads the ConfigMaps through informers: it must have the reset first
        items = upstream(plane, kube, "GET", CERTS)["items"] or []
        return sorted(i["serverName"] for i in items) == ["seed.example", "seed.example"]

    def through(call, ready=lambda: True):
        seeded.reset()
        wait_for("the server seeing the reset ConfigMaps", ready, timeout=10, interval=0.05)
        call("POST", CERTS, create)
        after_create = both_maps(plane)
        call("POST", CERTS, upsert, upsert="true")
        after_upsert = both_maps(plane)
        call("DELETE", CERTS, certType="https", hostNamePattern="git.example")
        call("DELETE", CERTS, certType="ssh", hostNamePattern="?ssh.example?:2222")  # (upstream reads [ literally)
        return after_create, after_upsert, both_maps(plane)

    ours = through(lambda *a, **q: ok(tiphys(kube, *a, **q)))
    theirs = through(lambda *a, **q: upstream(plane, kube, *a, **q), upstream_sees_the_start)
    assert ours == theirs, json.dumps({"tiphys": ours, "argocd-server": theirs}, indent=1)[:6000]
    created, upserted, deleted = ours
    assert created[TLS_CM]["git.example"] == pem_a + pem_b
    assert created[SSH_CM]["ssh_known_hosts"].endswith(f"[ssh.example]:2222 {kind} {blob}\n")
    assert f"seed.example {kind} {blob2}\n" in upserted[SSH_CM]["ssh_known_hosts"]
    assert deleted[TLS_CM] == seeded.data[TLS_CM]
    assert "ssh.example" not in deleted[SSH_CM]["ssh_known_hosts"]


def test_what_tiphys_creates_it_lists_from_the_config_maps(plane, kube, seeded):
    pem, _ = make_cert(kube.work, "listed.example")
    kind, blob, fp = make_host_key(kube.work, "ssh-listed")
    ok(tiphys(kube, "POST", CERTS, {"items": [
        {"serverName": "listed.example", "certType": "https", "certData": b64(pem)},
        {"serverName": "listed.example", "certType": "ssh", "certSubType": kind, "certData": b64(blob)}]}))
    assert "listed.example" in cm_data(plane, TLS_CM)
    got = [(i["certType"], i["certInfo"]) for i in listed(kube, hostNamePattern="listed.example")]
    assert sorted(got) == [("https", "CN=listed.example,O=Acme"), ("ssh", fp)], got


def test_kubectl_edits_are_listed_within_a_second_and_their_removal_too(plane, kube, seeded):
    pem, _ = make_cert(kube.work, "kubectl.example")
    kind, blob, fp = make_host_key(kube.work, "ssh-kubectl")
    set_cm_data(plane, TLS_CM, {**seeded.data[TLS_CM], "kubectl.example": pem})
    known = seeded.data[SSH_CM]["ssh_known_hosts"] + f"kubectl.example {kind} {blob}\n"
    set_cm_data(plane, SSH_CM, {"ssh_known_hosts": known})
    wait_for("tiphys listing what kubectl added",
             lambda: sorted((i["certType"], i["certInfo"]) for i in listed(kube, hostNamePattern="kubectl.example"))
             == [("https", "CN=kubectl.example,O=Acme"), ("ssh", fp)],
             timeout=SEEN_WITHIN, interval=0.02)
    set_cm_data(plane, TLS_CM, seeded.data[TLS_CM])
    set_cm_data(plane, SSH_CM, seeded.data[SSH_CM])
    wait_for("tiphys no longer listing what kubectl removed",
             lambda: listed(kube, hostNamePattern="kubectl.example") == [], timeout=SEEN_WITHIN, interval=0.02)


@pytest.mark.parametrize("entry,message", [
    ({"serverName": "bad.example", "certType": "https",
      "certData": b64("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")},
     "bad.example: PEM block 1: not an X.509 certificate"),
    ({"serverName": "bad.example", "certType": "https", "certData": b64("not PEM at all")},
     "no PEM certificate found"),
    ({"serverName": "bad.example", "certType": "ssh", "certSubType": "ssh-ed25519", "certData": b64("AAAA")},
     "bad.example: not a valid SSH public key"),
    ({"serverName": "bad host", "certType": "ssh", "certSubType": "ssh-ed25519",
      "certData": b64("AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl")},
     "invalid host name"),
], ids=["pem-not-x509", "not-pem", "ssh-key-not-a-key", "ssh-bad-host"])
def test_bad_certificates_are_refused_and_the_config_maps_stay(plane, kube, seeded, entry, message):
    before = both_maps(plane)
    good, _ = make_cert(kube.work, "good.example")
    # one good entry beside the bad one: nothing of the request is written
    body = {"items": [{"serverName": "good.example", "certType": "https", "certData": b64(good)}, entry]}
    assert_api_error(tiphys(kube, "POST", CERTS, body), 400, 3, message)
    assert both_maps(plane) == before


# ---- GnuPG keys ---------------------------------------------------------------------------------


def fingerprints(kube, armored):
    """The fingerprints gpg reads in an armored text (without importing it)."""
    out = subprocess.run(["gpg", "--batch", "--with-colons", "--import-options", "show-only", "--import"],
                         input=armored.encode(), capture_output=True, check=True, timeout=60,
                         env=kube.gpg.env).stdout.decode()
    return [line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:")][:1]


def gpg_ids(kube):
    return sorted(k["keyID"] for k in ok(tiphys(kube, "GET", GPG))["items"] or [])


def test_gpg_keys_are_kept_in_the_config_map_as_argocd_server_keeps_them(plane, kube):
    set_cm_data(plane, GPG_CM, {})
    key = kube.gpg.generate("Kube Key <kube@example.com>", "ed25519")
    made = ok(tiphys(kube, "POST", GPG, {"keyData": key.public}))
    assert [k["keyID"] for k in made["created"]["items"]] == [key.key_id], made
    ours = cm_data(plane, GPG_CM)
    assert list(ours) == [key.key_id], ours
    # gpg reads the stored key as the same key
    assert fingerprints(kube, ours[key.key_id]) == [key.fingerprint]
    ok(tiphys(kube, "DELETE", GPG, keyID=key.key_id))
    assert cm_data(plane, GPG_CM) == {}

    # upstream: the same key under the same ID (its armour is gpg's export, tiphys's is rPGP's)
    upstream(plane, kube, "POST", GPG, {"keyData": key.public})
    theirs = cm_data(plane, GPG_CM)
    assert list(theirs) == [key.key_id], theirs
    assert fingerprints(kube, theirs[key.key_id]) == [key.fingerprint]
    # what argocd-server wrote, tiphys lists, and deletes
    wait_for("tiphys listing argocd-server's key", lambda: gpg_ids(kube) == [key.key_id], timeout=SEEN_WITHIN,
             interval=0.02)
    assert ok(tiphys(kube, "GET", f"{GPG}/{key.key_id}"))["owner"] == key.uid
    ok(tiphys(kube, "DELETE", GPG, keyID=key.key_id))
    assert cm_data(plane, GPG_CM) == {}


def test_gpg_keys_put_with_kubectl_are_listed_and_bad_ones_refused(plane, kube):
    set_cm_data(plane, GPG_CM, {})
    key = kube.gpg.generate("Kubectl Key <kubectl@example.com>", "ed25519")
    set_cm_data(plane, GPG_CM, {key.key_id: key.public})
    wait_for("tiphys listing the key kubectl added", lambda: gpg_ids(kube) == [key.key_id], timeout=SEEN_WITHIN,
             interval=0.02)
    before = cm_data(plane, GPG_CM)
    bad = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nnot a key\n-----END PGP PUBLIC KEY BLOCK-----\n"
    assert_api_error(tiphys(kube, "POST", GPG, {"keyData": bad}), 400, 3, "invalid GnuPG public key")
    assert_api_error(tiphys(kube, "POST", GPG, {"keyData": key.secret}), 400, 3, "private key")
    assert cm_data(plane, GPG_CM) == before
    set_cm_data(plane, GPG_CM, {})
    wait_for("tiphys no longer listing it", lambda: gpg_ids(kube) == [], timeout=SEEN_WITHIN, interval=0.02)
