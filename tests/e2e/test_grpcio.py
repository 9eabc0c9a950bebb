"""Python grpcio (no generated tiphys code) against a real server: TLS and h2c calls, health,
reflection v1alpha and v1, unknown methods, plaintext gRPC on the TLS port, message size limit."""

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from conftest import VERSION_RE, decode_fields, rest_version

VERSION = "/version.VersionService/Version"
SETTINGS = "/cluster.SettingsService/Get"
WANTED_SERVICES = {"version.VersionService", "cluster.SettingsService", "grpc.health.v1.Health"}


def tls_channel(server, host="127.0.0.1"):
    creds = grpc.ssl_channel_credentials(root_certificates=server.ca.read_bytes())
    return grpc.secure_channel(f"{host}:{server.port}", creds)


def h2c_channel(server):
    return grpc.insecure_channel(server.addr)


def call_version(channel, request=b""):
    """Raw unary call: bytes in, bytes out; returns the Version string (field 1)."""
    raw = channel.unary_unary(VERSION)(request, timeout=10)
    return decode_fields(raw)[1][0].decode()


def test_version_over_tls_trusting_generated_cert(tls_server):
    with tls_channel(tls_server) as ch:
        version = call_version(ch)
    assert VERSION_RE.match(version), version
    assert version == rest_version(tls_server)


def test_version_over_tls_by_hostname(tls_server):
    with tls_channel(tls_server, host="localhost") as ch:
        assert VERSION_RE.match(call_version(ch))


def test_version_over_h2c(insecure_server):
    with h2c_channel(insecure_server) as ch:
        assert call_version(ch) == rest_version(insecure_server)


def test_settings_url_over_h2c(tiphys):
    server = tiphys("--insecure", "--url", "https://cd.example.test")
    with h2c_channel(server) as ch:
        raw = ch.unary_unary(SETTINGS)(b"", timeout=10)  # Settings{string url = 1; ...}
    assert decode_fields(raw)[1][0] == b"https://cd.example.test"


@pytest.mark.parametrize("mode", ["tls", "h2c"])
def test_health_serving_without_token(mode, tls_server, insecure_server):
    ch = tls_channel(tls_server) if mode == "tls" else h2c_channel(insecure_server)
    with ch:
        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def _list_services(channel, method):
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    call = channel.stream_stream(
        method,
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    responses = list(call(iter([request]), timeout=10))
    assert len(responses) == 1
    return {s.name for s in responses[0].list_services_response.service}


def test_reflection_v1alpha_lists_services(insecure_server):
    with h2c_channel(insecure_server) as ch:
        # The packaged v1alpha stub, as grpcurl-like tools use it.
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        responses = list(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                                   timeout=10))
    names = {s.name for s in responses[0].list_services_response.service}
    assert WANTED_SERVICES <= names, names


def test_reflection_v1_lists_services(tls_server):
    # v1 is wire-identical to v1alpha; only the service name differs.
    with tls_channel(tls_server) as ch:
        names = _list_services(ch, "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo")
    assert WANTED_SERVICES <= names, names


@pytest.mark.parametrize("method", ["/version.VersionService/Nope", "/nope.Missing/Call"])
def test_unknown_method_is_unimplemented(method, insecure_server):
    with h2c_channel(insecure_server) as ch, pytest.raises(grpc.RpcError) as err:
        ch.unary_unary(method)(b"", timeout=10)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_plaintext_grpc_refused_on_tls_port(tls_server):
    with h2c_channel(tls_server) as ch, pytest.raises(grpc.RpcError) as err:
        call_version(ch)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "--plaintext-grpc" in err.value.details()


def test_plaintext_grpc_accepted_with_flag(tiphys):
    server = tiphys("--plaintext-grpc")
    with h2c_channel(server) as ch:
        assert VERSION_RE.match(call_version(ch))
    with tls_channel(server) as ch:  # TLS still works on the same port
        assert VERSION_RE.match(call_version(ch))


@pytest.mark.parametrize("mode", ["tls", "h2c"])
def test_oversized_message_is_resource_exhausted(mode, tiphys):
    server = tiphys("--grpc-max-message-bytes", "1024", *(["--insecure"] if mode == "h2c" else []))
    channel = h2c_channel if mode == "h2c" else tls_channel
    with channel(server) as ch:
        with pytest.raises(grpc.RpcError) as err:
            ch.unary_unary(VERSION)(b"\x00" * 4096, timeout=10)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.value.details()
        # The server is still up and serves the next call on the same channel.
        assert VERSION_RE.match(call_version(ch))
    assert server.proc.poll() is None
