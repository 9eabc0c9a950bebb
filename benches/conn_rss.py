"""Resident memory per idle connection, and whether it goes back after they close.

    python3 benches/conn_rss.py TIPHYS_BIN MODE [CONNECTIONS]

MODE is h1-plain, h2-plain (the server in --insecure), h1-tls or h2-tls. Starts the server on
127.0.0.1, opens 50 connections and closes them (warm-up), reads VmRSS, opens CONNECTIONS (default
2000) that each make one request (GET /healthz) and then stay open and idle, reads VmRSS again,
closes them all, and reads VmRSS 3 s and 15 s later. Needs the `h2` package for the HTTP/2 modes
(the e2e venv has it) and an open-files limit above CONNECTIONS. The server is stopped by its PID.
"""

import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time

import h2.config
import h2.connection
import h2.events


def main():
    binary, mode = sys.argv[1], sys.argv[2]
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    plain, http2 = mode.endswith("plain"), mode.startswith("h2")
    data = tempfile.mkdtemp(prefix="conn-rss-")
    ready = os.path.join(data, "ready.json")
    args = [binary, "server", "--address", "127.0.0.1", "--port", "0", "--metrics-address", "127.0.0.1",
            "--metrics-port", "0", "--data-dir", data, "--ready-file", ready] + (["--insecure"] if plain else [])
    with open(os.path.join(data, "server.log"), "w") as log:
        server = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                  env=dict(os.environ, TIPHYS_SHUTDOWN_DELAY="0"))
    try:
        port = wait_ready(ready)
        tls = ssl.create_default_context()
        tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE
        tls.set_alpn_protocols(["h2"] if http2 else ["http/1.1"])

        def connect():
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            if not plain:
                sock = tls.wrap_socket(sock)
            (one_h2 if http2 else one_h1)(sock)
            return sock

        for sock in [connect() for _ in range(50)]:
            sock.close()
        time.sleep(1)
        base = rss(server.pid)
        held = [connect() for _ in range(count)]
        time.sleep(2)
        full = rss(server.pid)
        for sock in held:
            sock.close()
        time.sleep(3)
        after = rss(server.pid)
        time.sleep(12)
        later = rss(server.pid)
        print(f"{mode}: idle {base} KB; {count} idle connections {full} KB "
              f"({(full - base) / count:.1f} KB each); closed: {after} KB after 3 s, {later} KB after 15 s")
    finally:
        server.terminate()
        server.wait(timeout=60)


def wait_ready(path):
    for _ in range(300):
        try:
            with open(path) as f:
                return json.load(f)["port"]
        except (OSError, ValueError):
            time.sleep(0.1)
    raise SystemExit("the server wrote no ready file within 30 s")


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def one_h1(sock):
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: bench\r\n\r\n")
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = sock.recv(4096)
        if not chunk:
            raise SystemExit("the server closed a connection during the request")
        got += chunk


def one_h2(sock):
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    conn.send_headers(1, [(":method", "GET"), (":path", "/healthz"), (":scheme", "https"),
                          (":authority", "bench")], end_stream=True)
    sock.sendall(conn.data_to_send())
    for _ in range(100):
        events = conn.receive_data(sock.recv(65536))
        sock.sendall(conn.data_to_send())
        if any(isinstance(e, h2.events.StreamEnded) for e in events):
            return
    raise SystemExit("no HTTP/2 response")


if __name__ == "__main__":
    main()
