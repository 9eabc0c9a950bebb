"""A shutdown that drains, seen by clients written by others (Python grpcio, http.client,
requests): on SIGTERM the server keeps serving for --shutdown-delay while /healthz answers 503
on new connections, then ends every open watch at once with UNAVAILABLE "server shutting down,
reconnect" (native gRPC, gRPC health, gRPC-Web, SSE), lets a request in flight finish, and
exits 0."""

import os
import signal
import socket
import threading
import time
import urllib.parse

import grpc
import pytest
import requests
from grpc_health.v1 import health_pb2, health_pb2_grpc

from appkit import Api, GrpcWatch, RestWatch, app_body, grpc_web
from authkit import ADMIN_PW, login_token
from conftest import EXIT_TIMEOUT, start_server

DELAY = 3.0
WITHIN = 1.0  # every watch ends this soon after the delay
MESSAGE = "server shutting down, reconnect"


class Background:
    """Runs `fn` on a thread; `.result` and `.at` (monotonic time it returned) once done."""

    def __init__(self, fn):
        self.result, self.error, self.at = None, None, None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn):
        try:
            self.result = fn()
        except Exception as err:  # noqa: BLE001 (reported by the test)
            self.error = err
        self.at = time.monotonic()

    def wait(self, timeout):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"still running after {timeout} s"
        assert self.error is None, self.error
        return self.result


def health_watch(channel):
    """Statuses of a grpc.health.v1 Watch, then how it ended: (statuses, RpcError or None)."""
    statuses = []
    call = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""), timeout=60)
    try:
        for reply in call:
            statuses.append(reply.status)
    except grpc.RpcError as err:
        return statuses, err
    return statuses, None


def fresh_healthz(server):
    """GET /healthz on a new connection, as a load balancer's check makes it."""
    r = requests.get(server.url("/healthz"), headers={"Connection": "close"}, timeout=5)
    return r.status_code, r.text


def test_sigterm_drains_every_watch_and_finishes_a_request_in_flight(tmp_path, config_dir, app_pb):
    server = start_server(tmp_path, "--insecure", f"--shutdown-delay={DELAY:g}s",
                          "--config-dir", str(config_dir().path))
    try:
        token = login_token(server, "admin", ADMIN_PW)
        Api(server, token).must_create(app_body("drained"))
        channel = grpc.insecure_channel(server.addr)
        stub = app_pb.grpc.ApplicationServiceStub(channel)

        grpc_watch = GrpcWatch(stub, app_pb, token)
        sse = RestWatch(server, token)
        assert sse.status == 200, sse.body
        for w in (grpc_watch, sse):
            assert w.event()[:2] == ("ADDED", "drained"), "the watch is live"
        health = Background(lambda: health_watch(channel))
        web = Background(lambda: grpc_web(server, "Watch", app_pb.app.ApplicationQuery(), token, timeout=60))
        # A unary gRPC-Web call whose body is half sent: in flight across the whole shutdown.
        slow = socket.create_connection((server.address, server.port), timeout=30)
        slow.sendall(b"POST /version.VersionService/Version HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/grpc-web+proto\r\nContent-Length: 5\r\n\r\n\x00\x00")
        time.sleep(0.5)
        assert health.at is None and web.at is None, "the watches are open"

        signalled = time.monotonic()
        os.kill(server.proc.pid, signal.SIGTERM)
        time.sleep(0.5)
        assert fresh_healthz(server) == (503, "shutting down\n")
        assert requests.get(server.url("/api/version"), timeout=5).status_code == 200, "still serving"
        assert time.monotonic() - signalled < DELAY, "the checks above ran within the delay"
        assert health.at is None and web.at is None, "the watches stay open during the delay"

        # After the delay, each watch ends with UNAVAILABLE and the message.
        frames = grpc_watch.until_end(DELAY + 10)
        kind, err = frames[-1]
        grpc_ended = time.monotonic()
        assert kind == "error", frames
        assert (err.code(), err.details()) == (grpc.StatusCode.UNAVAILABLE, MESSAGE)

        frames = sse.until_end(DELAY + 10)
        assert frames == [("error", {"grpc_code": 14, "http_code": 503, "message": MESSAGE,
                                     "http_status": "Service Unavailable"})], frames
        assert sse.next(2, "the end of the SSE body") == ("end", "eof"), "the body then ends cleanly"
        sse_ended = time.monotonic()
        assert not sse.violations, sse.violations

        statuses, err = health.wait(DELAY + 10)
        assert statuses[:1] == [health_pb2.HealthCheckResponse.SERVING], statuses
        assert health_pb2.HealthCheckResponse.NOT_SERVING in statuses, statuses
        assert err is not None and (err.code(), err.details()) == (grpc.StatusCode.UNAVAILABLE, MESSAGE)

        reply = web.wait(DELAY + 10)
        assert reply.status == 200, reply
        assert reply.trailers.get("grpc-status") == "14", reply.trailers
        assert urllib.parse.unquote(reply.trailers.get("grpc-message", "")) == MESSAGE, reply.trailers

        for name, at in (("gRPC", grpc_ended), ("SSE", sse_ended), ("health", health.at), ("gRPC-Web", web.at)):
            after = at - signalled
            # The readers' threads report a little late, never early: the upper bound has slack
            # for them, the lower bound none.
            assert DELAY <= after <= DELAY + WITHIN + 0.5, f"the {name} watch ended {after:.2f} s after SIGTERM"

        with pytest.raises(OSError):
            socket.create_connection((server.address, server.port), timeout=2).close()
        slow.sendall(b"\x00\x00\x00")
        answer = b""
        while chunk := slow.recv(65536):
            answer += chunk
        slow.close()
        assert answer.startswith(b"HTTP/1.1 200"), answer
        assert b"grpc-status:0" in answer, answer

        assert server.proc.wait(timeout=EXIT_TIMEOUT) == 0, server.logs()
        channel.close()
        grpc_watch.close()
        sse.close()
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(timeout=10)
