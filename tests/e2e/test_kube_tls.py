"""The server's own certificate on an installation (issue 37): tiphys --kube with TLS and no
--tls-cert serves what upstream argocd-server serves, from the same Secrets
(util/settings/settings.go): `argocd-server-tls` when it holds tls.crt and tls.key, else
`argocd-secret`'s, else a self-signed one it generates and stores in argocd-secret for every
replica. Changes apply to new handshakes without a restart, beside argocd-server doing the same;
a certificate that does not load is refused and the previous one stays.

Runs under tools/upstream/isolated (see controlplane.py); .ci/test-all runs it there.
"""

import base64
import socket
import ssl
import subprocess
import time

import pytest

from conftest import start_server
from test_kube_backend import NS

SERVER_TLS = "argocd-server-tls"


def presented(port):
    """The DER certificate a server presents on 127.0.0.1:port (not verified)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, ctx.wrap_socket(raw) as tls:
        return tls.getpeercert(binary_form=True)


def describe(der_cert, *fields):
    """What openssl prints of a DER certificate (`-subject`, `-ext subjectAltName`, ...)."""
    res = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", *fields], input=der_cert,
                         capture_output=True, check=True, timeout=30)
    return res.stdout.decode()


def der(pem):
    return ssl.PEM_cert_to_DER_cert(pem if isinstance(pem, str) else pem.decode())


def wait_presented(port, want, what, timeout=20):
    deadline = time.monotonic() + timeout
    got = None
    while time.monotonic() < deadline:
        got = presented(port)
        if got == want:
            return
        time.sleep(0.2)
    subject = describe(got, "-subject").strip() if got else None
    pytest.fail(f"{what}: still presenting {subject} after {timeout} s")


def leaf(plane, d, cn):
    """A serving certificate for 127.0.0.1 from the plane's CA: (cert PEM, key PEM)."""
    d.mkdir(parents=True, exist_ok=True)
    key, csr, crt, ext = d / f"{cn}.key", d / f"{cn}.csr", d / f"{cn}.crt", d / f"{cn}.ext"
    ext.write_text("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                   "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run = lambda *a: subprocess.run(["openssl", *a], check=True, capture_output=True, timeout=30)  # noqa: E731
    run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(key))
    run("req", "-new", "-key", str(key), "-subj", f"/CN={cn}", "-out", str(csr))
    run("x509", "-req", "-in", str(csr), "-CA", str(plane.pki.ca), "-CAkey", str(plane.pki.ca_key),
        "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(crt))
    return crt.read_text(), key.read_text()


def put_secret(plane, name, namespace, data):
    """argocd-server-tls as cert-manager or `kubectl create secret tls` makes it."""
    plane.apply([{"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                  "metadata": {"name": name, "namespace": namespace}, "stringData": data}])


def secret_data(plane, name, namespace):
    data = plane.get_json("secret", name, "-n", namespace).get("data") or {}
    return {k: base64.b64decode(v).decode() for k, v in data.items()}


@pytest.fixture(scope="module")
def tls_server(controlplane, tmp_path_factory):
    d = tmp_path_factory.mktemp("kube-tls")
    server = start_server(d, "--kube", "--kubeconfig", controlplane.state["kubeconfig"], "--namespace", NS)
    yield server
    server.stop()


def test_the_installations_certificate_is_served_and_follows_its_secrets(plane, tls_server, tmp_path):
    original = secret_data(plane, SERVER_TLS, NS)
    upstream = plane.start_argocd_server()
    # At start: argocd-server-tls, as upstream serves it, and verified with the plane's CA.
    assert presented(tls_server.port) == der(original["tls.crt"])
    assert presented(upstream["port"]) == der(original["tls.crt"])
    ctx = ssl.create_default_context(cafile=str(plane.pki.ca))
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
    assert f"tls: Secret {NS}/{SERVER_TLS}" in tls_server.logs()
    try:
        # A new certificate in argocd-server-tls: both servers present it, without a restart.
        cert, key = leaf(plane, tmp_path, "rotated-by-cert-manager")
        put_secret(plane, SERVER_TLS, NS, {"tls.crt": cert, "tls.key": key})
        wait_presented(tls_server.port, der(cert), "tiphys after the rotation")
        wait_presented(upstream["port"], der(cert), "argocd-server after the rotation")

        # A certificate that does not load is refused; the previous one stays.
        put_secret(plane, SERVER_TLS, NS, {"tls.crt": "not a certificate", "tls.key": key})
        deadline = time.monotonic() + 20
        while "new TLS certificate rejected" not in tls_server.logs() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "new TLS certificate rejected" in tls_server.logs()
        assert f"Secret {NS}/{SERVER_TLS}, key tls.crt" in tls_server.logs()
        assert presented(tls_server.port) == der(cert)

        # A key of another certificate: refused too, naming both keys.
        _, other_key = leaf(plane, tmp_path, "other")
        put_secret(plane, SERVER_TLS, NS, {"tls.crt": cert, "tls.key": other_key})
        deadline = time.monotonic() + 20
        while "do not belong together" not in tls_server.logs() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "do not belong together" in tls_server.logs()
        assert presented(tls_server.port) == der(cert)
    finally:
        put_secret(plane, SERVER_TLS, NS, {"tls.crt": original["tls.crt"], "tls.key": original["tls.key"]})
    wait_presented(tls_server.port, der(original["tls.crt"]), "tiphys after the restore")


def test_without_a_certificate_one_is_generated_stored_and_shared_by_replicas(plane, tmp_path):
    ns = plane.new_namespace("tls")
    first = start_server(tmp_path, "--kube", "--kubeconfig", plane.state["kubeconfig"], "--namespace", ns)
    try:
        stored = secret_data(plane, "argocd-secret", ns)
        assert "server.secretkey" in stored, sorted(stored)
        served = presented(first.port)
        assert served == der(stored["tls.crt"]), "the generated certificate is the stored one"
        names = [n.strip().removeprefix("DNS:") for n in
                 describe(served, "-ext", "subjectAltName").splitlines()[-1].split(",")]
        for want in ("localhost", "argocd-server", f"argocd-server.{ns}", f"argocd-server.{ns}.svc",
                     f"argocd-server.{ns}.svc.cluster.local"):
            assert want in names, (want, names)
        assert f"tls: Secret {ns}/argocd-secret" in first.logs()
        # A second replica serves the same certificate, and writes nothing new.
        version = plane.get_json("secret", "argocd-secret", "-n", ns)["metadata"]["resourceVersion"]
        second = start_server(tmp_path, "--kube", "--kubeconfig", plane.state["kubeconfig"], "--namespace", ns)
        try:
            assert presented(second.port) == served
            assert plane.get_json("secret", "argocd-secret", "-n", ns)["metadata"]["resourceVersion"] == version
            # argocd-server-tls, once made, wins on both.
            crt, key = leaf(plane, tmp_path, "external")
            put_secret(plane, SERVER_TLS, ns, {"tls.crt": crt, "tls.key": key})
            wait_presented(first.port, der(crt), "the first replica")
            wait_presented(second.port, der(crt), "the second replica")
            # Deleted again: back to argocd-secret's.
            plane.kubectl("delete", "secret", SERVER_TLS, "-n", ns)
            wait_presented(first.port, served, "the first replica after the delete")
        finally:
            second.stop()
    finally:
        first.stop()
        plane.kubectl("delete", "namespace", ns, "--wait=false", check=False)
