"""Memory per idle keep-alive connection: tiphys beside upstream argocd-server, in one run.

    python3 benches/conn_rss_peer.py TIPHYS_BIN [CONNECTIONS] [ROUNDS]

Starts the control plane of tests/e2e/controlplane.py without a controller (kube-apiserver,
Redis, argocd-repo-server) and upstream argocd-server (TLS, the plane's serving certificate), and
tiphys (TLS, the same certificate and key, its embedded store), both on 127.0.0.1 and both with no
application. Each round starts both servers afresh, then for each in turn (the order
alternating): 50 connections opened
and closed (warm-up), VmRSS, then CONNECTIONS (default 1000) TLS HTTP/2 connections that each make
one gRPC `/version.VersionService/Version` call (the one kind of HTTP/2 connection argocd-server's
listener serves: it hands h2 only to its gRPC server) and stay open and idle, VmRSS 2 s after the
last one opened, and the difference per connection; then they are closed. Prints each round and
the medians, and the ratio tiphys / argocd-server per round.

Needs the upstream parts (bash tools/upstream/build.sh), etcd, Redis, kubectl, root (the
in-cluster mount namespace), the `h2` package (the e2e venv has it) and an open-files limit above
CONNECTIONS (raised here when the hard limit allows). Every process is stopped by its PID.
"""

import json
import os
import resource
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h2.config
import h2.connection
import h2.events

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from controlplane import ControlPlane, stop_pid  # noqa: E402

from conn_rss import rss, wait_ready  # noqa: E402

WARMUP = 50


def version_call(sock):
    """One gRPC Version call over a new HTTP/2 connection on `sock`; returns once it has ended."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.send_headers(1, [(":method", "POST"), (":path", "/version.VersionService/Version"),
                          (":scheme", "https"), (":authority", "127.0.0.1"),
                          ("content-type", "application/grpc"), ("te", "trailers")])
    conn.send_data(1, b"\x00\x00\x00\x00\x00", end_stream=True)
    sock.sendall(conn.data_to_send())
    for _ in range(200):
        data = sock.recv(65536)
        if not data:
            raise SystemExit("the server closed a connection during the call")
        events = conn.receive_data(data)
        sock.sendall(conn.data_to_send())
        for event in events:
            if isinstance(event, h2.events.StreamEnded):
                return
    raise SystemExit("no end of the gRPC reply")


def measure(name, pid, port, ca, count):
    tls = ssl.create_default_context(cafile=ca)
    tls.set_alpn_protocols(["h2"])

    def connect():
        sock = tls.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=20),
                               server_hostname="localhost")
        version_call(sock)
        return sock

    for sock in [connect() for _ in range(WARMUP)]:
        sock.close()
    time.sleep(1)
    base = rss(pid)
    held = []
    try:
        for _ in range(count):
            held.append(connect())
        time.sleep(2)
        full = rss(pid)
    finally:
        for sock in held:
            sock.close()
    per = (full - base) / count
    print(f"  {name}: idle {base} KB; with {count} idle connections {full} KB: {per:.1f} KB each", flush=True)
    time.sleep(3)
    return per


def start_tiphys(binary, work, pki):
    data = Path(tempfile.mkdtemp(prefix="tiphys-", dir=work))
    ready = data / "ready.json"
    args = [binary, "server", "--address", "127.0.0.1", "--port", "0", "--metrics-address", "127.0.0.1",
            "--metrics-port", "0", "--data-dir", str(data), "--ready-file", str(ready),
            "--tls-cert", str(pki.serving), "--tls-key", str(pki.serving_key)]
    with open(data / "server.log", "w") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=dict(os.environ, TIPHYS_SHUTDOWN_DELAY="0", RUST_LOG="warn"))
    return proc, wait_ready(str(ready))


def main():
    binary = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = count + WARMUP + 200
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    work = Path(tempfile.mkdtemp(prefix="conn-rss-peer-"))
    plane = ControlPlane(work / "plane")
    tiphys = None
    try:
        plane.up(controller=False, controller_manager=False)
        results = {"tiphys": [], "argocd-server": []}
        ratios = []
        for r in range(rounds):
            # Fresh processes each round: Go keeps the heap it grew (and tiphys its allocator's
            # pages) after the connections close, so a second round on the same process would
            # measure memory reused, not memory taken.
            print(f"round {r + 1}", flush=True)
            upstream = plane.start_argocd_server(extra_args=("--loglevel", "warn"))
            tiphys, tiphys_port = start_tiphys(binary, work, plane.pki)
            servers = [("tiphys", tiphys.pid, tiphys_port),
                       ("argocd-server", plane.parts["argocd-server"].proc.pid, upstream["port"])]
            order = servers if r % 2 == 0 else servers[::-1]
            got = {name: measure(name, pid, port, str(plane.pki.ca), count) for name, pid, port in order}
            for name, per in got.items():
                results[name].append(per)
            ratios.append(got["tiphys"] / got["argocd-server"])
            stop_tiphys(tiphys)
            tiphys = None
            stop_pid(plane.parts.pop("argocd-server").proc.pid)
            plane.state.pop("argocd_server")
        t, a = statistics.median(results["tiphys"]), statistics.median(results["argocd-server"])
        print(json.dumps({"connections": count, "rounds": rounds, "tiphys_kb": results["tiphys"],
                          "argocd_server_kb": results["argocd-server"]}))
        print(f"| memory per idle TLS HTTP/2 connection (one gRPC call made) | KiB | {t:.1f} | {a:.1f} | "
              f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f}) | {rounds} |")
    finally:
        if tiphys is not None:
            stop_tiphys(tiphys)
        plane.down()


def stop_tiphys(proc):
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
