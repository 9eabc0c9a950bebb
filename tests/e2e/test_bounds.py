"""What one client can hold is bounded, and every bound answers (issue 20, item 3): a caller's open
watches (`--max-watches-per-caller`, 429 / RESOURCE_EXHAUSTED over SSE and native gRPC), the
server's open connections (`--max-connections`: 503 / UNAVAILABLE with Retry-After, then a clean
close; health probes still answered), idle connections (closed after `--idle-timeout` even while
the client pings over HTTP/2, kept while a watch is open), and watch streams that never read (1,000
on one HTTP/2 connection keep the server under 300 MB while writes go on, other clients are not
slowed, and a watcher that fell behind ends with ABORTED "list again").
"""

import json
import socket
import struct
import time
import urllib.request
from urllib.parse import unquote

import grpc
import h2.config
import h2.connection
import h2.events
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from appkit import Api, GrpcWatch, RestWatch, app_body, grpc_channel, uniq
from authkit import ADMIN_PW, ALICE_PW, connection, login_token, request, wait_until

OVER_CAPACITY = ("the server holds as many connections as it allows (--max-connections); retry shortly, "
                 "or reuse an open connection")
LAGGED = ("this watch fell too far behind the changes: list again and watch from the list's "
          "resourceVersion")
BACKLOG = 2048  # events a watcher may fall behind (registry/watch.rs)


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    raise AssertionError(f"no VmRSS for {pid}")


def metric(server, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "_total "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


# ---- watches per caller -----------------------------------------------------------------------


def test_a_caller_holds_at_most_its_allowance_of_watches_over_every_transport(module_servers, module_config,
                                                                              app_pb):
    server = module_servers.start("--insecure", "--max-watches-per-caller", "3", config=module_config())
    admin, alice = login_token(server, "admin", ADMIN_PW), login_token(server, "alice", ALICE_PW)
    sse = RestWatch(server, admin)
    ndjson = RestWatch(server, admin, sse=False)
    assert (sse.status, ndjson.status) == (200, 200)
    with grpc_channel(server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        g = GrpcWatch(stub, app_pb, admin)
        g.call.initial_metadata()  # the stream is open on the server
        expected = "too many watches open for admin: 3 at once (--max-watches-per-caller); close one and retry"
        for rounds in range(3):
            fourth = RestWatch(server, admin)
            assert fourth.status == 429, (rounds, fourth.status, fourth.body)
            assert fourth.json() == {"error": expected, "code": 8, "message": expected}, fourth.body
            refused = GrpcWatch(stub, app_pb, admin)
            kind, err = refused.next()
            assert kind == "error", (kind, err)
            assert (err.code(), err.details()) == (grpc.StatusCode.RESOURCE_EXHAUSTED, expected)
        # Someone else is not affected.
        other = RestWatch(server, alice)
        assert other.status == 200, other.body
        other.close()
        # A closed watch gives its slot back.
        g.call.cancel()

        def reopened():
            w = RestWatch(server, admin)
            if w.status == 200:
                return w
            assert w.status == 429, w.body
            return None
        again = wait_until(reopened, 10, interval=0.1, what="a watch after one was closed")
        again.close()
    sse.close()
    ndjson.close()


# ---- connections ------------------------------------------------------------------------------


def test_a_connection_beyond_the_cap_gets_503_then_a_clean_close_and_probes_are_answered(module_servers,
                                                                                       module_config):
    server = module_servers.start("--insecure", "--max-connections", "4", config=module_config())
    held = []
    for _ in range(4):
        c = connection(server)
        c.request("GET", "/api/version")
        r = c.getresponse()
        r.read()
        assert r.status == 200
        held.append(c)
    for rounds in range(5):
        c = connection(server)
        c.request("GET", "/api/version")
        r = c.getresponse()
        body = r.read()
        assert r.status == 503, (rounds, r.status, body)
        assert r.getheader("Retry-After") == "1"
        assert json.loads(body) == {"error": OVER_CAPACITY, "code": 14, "message": OVER_CAPACITY}
        # Then the server closes the connection (HTTP/1.1: after the answer).
        c.sock.settimeout(10)
        assert c.sock.recv(1) == b"", "the over-capacity connection stayed open"
        c.close()
        # A health probe is still answered, on a connection of its own.
        probe = request(server, "GET", "/healthz")
        assert probe.status == 200, probe
    # Native gRPC (HTTP/2) gets UNAVAILABLE with the same message, from grpcio.
    with grpc.insecure_channel(server.addr) as ch:
        with pytest.raises(grpc.RpcError) as err:
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert (err.value.code(), err.value.details()) == (grpc.StatusCode.UNAVAILABLE, OVER_CAPACITY)
    assert metric(server, "tiphys_connections_over_capacity") >= 6
    # A closed connection makes room.
    held.pop().close()

    def served():
        return request(server, "GET", "/api/version").status == 200
    wait_until(served, 10, interval=0.1, what="a connection served after one closed")
    for c in held:
        c.close()


# ---- idle connections -------------------------------------------------------------------------


def h2_connect(server):
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    return sock, conn


def test_an_idle_http2_connection_is_closed_although_the_client_pings(module_servers, module_config, app_pb):
    server = module_servers.start("--insecure", "--idle-timeout", "2s", config=module_config())
    token = login_token(server, "admin", ADMIN_PW)
    sock, conn = h2_connect(server)
    conn.send_headers(1, [(":method", "GET"), (":path", "/healthz"), (":scheme", "http"),
                          (":authority", server.addr)], end_stream=True)
    sock.sendall(conn.data_to_send())
    # A watch on another connection keeps that one open past the timeout.
    watch = RestWatch(server, token)
    assert watch.status == 200
    start = time.monotonic()
    closed_after = None
    sock.settimeout(0.3)
    while time.monotonic() - start < 8:
        conn.ping(b"12345678")
        try:
            sock.sendall(conn.data_to_send())
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            data = b""
        if not data:
            closed_after = time.monotonic() - start
            break
        conn.receive_data(data)
    sock.close()
    assert closed_after is not None, "a pinging HTTP/2 connection without requests was kept 8 s (timeout 2 s)"
    assert 1.5 <= closed_after <= 4, closed_after
    # The watching connection is still open and delivers.
    api = Api(server, token)
    name = uniq("idle")
    api.must_create(app_body(name))
    for _ in range(50):
        kind, _name, _rv, _app = watch.event(timeout=10)
        if _name == name:
            break
    else:
        pytest.fail("the watch did not deliver the new application")
    watch.close()


# ---- watchers that do not read ----------------------------------------------------------------


def grpc_frame(payload=b""):
    return struct.pack(">BI", 0, len(payload)) + payload


def open_raw_watches(server, token, count):
    """`count` ApplicationService/Watch streams on one HTTP/2 connection; the client never gives
    the server more flow-control window than the initial 64 KiB."""
    sock, conn = h2_connect(server)
    for i in range(count):
        sid = 1 + 2 * i
        conn.send_headers(sid, [(":method", "POST"), (":path", "/application.ApplicationService/Watch"),
                                (":scheme", "http"), (":authority", server.addr),
                                ("content-type", "application/grpc"), ("te", "trailers"),
                                ("authorization", f"Bearer {token}")])
        conn.send_data(sid, grpc_frame(), end_stream=True)
        if i % 100 == 99:
            sock.sendall(conn.data_to_send())
    sock.sendall(conn.data_to_send())
    return sock, conn


def test_a_thousand_watches_that_never_read_stay_bounded_and_others_are_not_slowed(module_servers, module_config,
                                                                                  app_pb):
    server = module_servers.start("--insecure", "--max-watches-per-caller", "2000", config=module_config())
    token = login_token(server, "admin", ADMIN_PW)
    api = Api(server, token)
    for _ in range(20):
        api.must_create(app_body(uniq("seed")))
    idle_rss = rss_mb(server.proc.pid)
    sock, _conn = open_raw_watches(server, token, 1000)
    # The client reads nothing from here on.
    wait_until(lambda: metric(server, "tiphys_connections_open") >= 1, 10, what="the watch connection")
    peak = rss_mb(server.proc.pid)
    with grpc_channel(server) as ch:
        stub = app_pb.grpc.ApplicationServiceStub(ch)
        reader = GrpcWatch(stub, app_pb, token, resourceVersion=str(api.revision()))
        names = []
        slowest = 0.0
        for i in range(300):
            name = uniq("load")
            begun = time.monotonic()
            api.must_create(app_body(name, annotations={"pad": "x" * 2000}))
            slowest = max(slowest, time.monotonic() - begun)
            names.append(name)
            if i % 25 == 0:
                peak = max(peak, rss_mb(server.proc.pid))
        # Another client's watch got every event, in order.
        seen = [reader.event(timeout=20)[1] for _ in names]
        assert seen == names
        reader.call.cancel()
    peak = max(peak, rss_mb(server.proc.pid))
    print(f"1000 unread watches: idle {idle_rss} MB, peak {peak} MB, slowest create {slowest:.2f} s")
    assert peak < 300, f"RSS {peak} MB with 1000 unread watches (idle: {idle_rss} MB)"
    assert slowest < 5, f"a create took {slowest:.1f} s beside the unread watches"
    sock.close()


def test_a_watcher_that_fell_behind_is_told_to_list_again(module_servers, module_config):
    server = module_servers.start("--insecure", config=module_config())
    token = login_token(server, "admin", ADMIN_PW)
    api = Api(server, token)
    sock, conn = open_raw_watches(server, token, 1)
    # Fill the client's window: the server then stops reading events for this watch.
    body = app_body(uniq("big"), annotations={"pad": "x" * 70000})
    api.must_create(body)
    for _ in range(BACKLOG + 50):
        api.must_create(app_body(uniq("lag")))
    # Now read: what was sent, then the end of the stream.
    sock.settimeout(20)
    status = message = None
    deadline = time.monotonic() + 60
    while status is None and time.monotonic() < deadline:
        data = sock.recv(1 << 20)
        if not data:
            break
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.DataReceived):
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.TrailersReceived):
                trailers = dict(ev.headers)
                status, message = trailers.get("grpc-status"), trailers.get("grpc-message")
        sock.sendall(conn.data_to_send())
    sock.close()
    assert (status, unquote(message or "")) == ("10", LAGGED)
