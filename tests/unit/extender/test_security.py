"""Who may call the extender: TLS with client certificates (HTTP and gRPC), plaintext only on
loopback, a cap on what one caller can hold in the assumed ledger, and bounded gRPC work."""

from __future__ import annotations

import http.client
import logging
import ssl
from collections.abc import Iterator
from pathlib import Path

import grpc
import orjson
import pytest
from qosmos.extender.cache import ClusterCache
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.grpc_service import GRPCServer
from qosmos.extender.http_server import ExtenderHTTP, HTTPServer
from qosmos.extender.proto import qosmos_pb2 as pb
from qosmos.extender.proto import qosmos_pb2_grpc as pb_grpc
from qosmos.extender.service import ExtenderService
from qosmos.extender.tls import ClientPolicy, TLSFiles

from .conftest import make_pod
from .pki import PKIFiles, write_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKIFiles:
    return write_pki(tmp_path_factory.mktemp("pki"))


def _tls(pki: PKIFiles) -> TLSFiles:
    return TLSFiles(str(pki.server_cert), str(pki.server_key), str(pki.ca))


def _client_ctx(pki: PKIFiles, cert: Path | None, key: Path | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


def _post(port: int, ctx: ssl.SSLContext | None, verb: str, body: dict) -> tuple[int, object]:
    conn = (
        http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
        if ctx is not None
        else http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    )
    try:
        conn.request("POST", f"/{verb}", orjson.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, orjson.loads(resp.read())
    finally:
        conn.close()


@pytest.fixture
def https(service: ExtenderService, pki: PKIFiles) -> Iterator[HTTPServer]:
    server = HTTPServer(ExtenderHTTP(service), "127.0.0.1", 0, ssl_context=_tls(pki).server_context())
    server.start_in_thread()
    yield server
    server.stop()


def test_https_refuses_callers_without_a_trusted_client_certificate(
    https: HTTPServer, pki: PKIFiles, service: ExtenderService, names: list[str]
) -> None:
    body = {"Pod": make_pod("p", gpus=2, uid="u1"), "NodeNames": names}
    assert https.url.startswith("https://")
    for ctx in (_client_ctx(pki, None, None), _client_ctx(pki, pki.rogue_cert, pki.rogue_key), None):
        with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException, OSError)):
            status, _ = _post(https.port, ctx, "filter", body)
            # TLS 1.3 reports a refused client certificate on the first read; a plaintext client gets no HTTP
            assert status != 200
    assert service.cache.stats()["assumed"] == 0
    status, out = _post(https.port, _client_ctx(pki, pki.client_cert, pki.client_key), "prioritize", body)
    assert status == 200 and len(out) == len(names)
    # the caller is known by its certificate: the assumed GPUs are held in its name
    assert service.cache.assumed_gpus("cn:kube-scheduler") == 2


def test_grpc_with_tls_refuses_unauthenticated_callers(service: ExtenderService, pki: PKIFiles) -> None:
    server = GRPCServer(service, host="127.0.0.1", port=0, tls=_tls(pki)).start()
    target = f"127.0.0.1:{server.port}"
    req = pb.ExplainRequest(model="ResNet50", batch=64, iters=10)
    try:
        ca = pki.ca.read_bytes()
        for channel in (
            grpc.insecure_channel(target),
            grpc.secure_channel(target, grpc.ssl_channel_credentials(ca)),
            grpc.secure_channel(
                target, grpc.ssl_channel_credentials(ca, pki.rogue_key.read_bytes(), pki.rogue_cert.read_bytes())
            ),
        ):
            with channel, pytest.raises(grpc.RpcError) as err:
                pb_grpc.ExtenderStub(channel).Explain(req, timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        creds = grpc.ssl_channel_credentials(ca, pki.client_key.read_bytes(), pki.client_cert.read_bytes())
        with grpc.secure_channel(target, creds) as channel:
            assert pb_grpc.ExtenderStub(channel).Explain(req, timeout=5).placements
    finally:
        server.stop(0)


def _get(port: int, ctx: ssl.SSLContext, path: str) -> int:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def test_each_route_answers_only_the_identities_configured_for_it(
    service: ExtenderService, pki: PKIFiles, names: list[str]
) -> None:
    # issue 22 §2: mTLS authenticates; a trusted certificate of another identity (the metrics client's)
    # must not place pods, and the scheduler's must not read metrics
    clients = ClientPolicy.parse(scheduler="kube-scheduler", metrics="qosmos-metrics", api=None)
    server = HTTPServer(ExtenderHTTP(service, clients=clients), "127.0.0.1", 0, ssl_context=_tls(pki).server_context())
    server.start_in_thread()
    try:
        sched = _client_ctx(pki, pki.client_cert, pki.client_key)
        prom = _client_ctx(pki, pki.metrics_cert, pki.metrics_key)
        body = {"Pod": make_pod("p", gpus=2, uid="u1"), "NodeNames": names}
        for verb in ("filter", "prioritize", "bind"):
            status, out = _post(server.port, prom, verb, body)
            assert status == 403 and "cn:qosmos-metrics may not call" in out["Error"], out
        assert service.cache.stats()["assumed"] == 0  # nothing was held for the refused caller
        assert service.metrics.forbidden.labels("/filter")._value.get() == 1
        assert _post(server.port, sched, "prioritize", body)[0] == 200
        assert _get(server.port, prom, "/metrics") == 200
        assert _get(server.port, sched, "/metrics") == 403
        assert _get(server.port, prom, "/healthz") == 200 and _get(server.port, sched, "/readyz") in (200, 503)
    finally:
        server.stop()


def test_grpc_answers_only_the_api_identities(service: ExtenderService, pki: PKIFiles) -> None:
    clients = ClientPolicy.parse(api="kube-scheduler")
    server = GRPCServer(service, host="127.0.0.1", port=0, tls=_tls(pki), clients=clients).start()
    target = f"127.0.0.1:{server.port}"
    req = pb.ExplainRequest(model="ResNet50", batch=64, iters=10)
    ca = pki.ca.read_bytes()
    try:
        wrong = grpc.ssl_channel_credentials(ca, pki.metrics_key.read_bytes(), pki.metrics_cert.read_bytes())
        with grpc.secure_channel(target, wrong) as channel, pytest.raises(grpc.RpcError) as err:
            pb_grpc.ExtenderStub(channel).Explain(req, timeout=5)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED and "qosmos-metrics" in err.value.details()
        assert service.metrics.forbidden.labels("grpc:explain")._value.get() == 1
        right = grpc.ssl_channel_credentials(ca, pki.client_key.read_bytes(), pki.client_cert.read_bytes())
        with grpc.secure_channel(target, right) as channel:
            assert pb_grpc.ExtenderStub(channel).Explain(req, timeout=5).placements
    finally:
        server.stop(0)


def test_client_identities_are_checked_with_the_configuration() -> None:
    from qosmos.extender.config import ExtenderConfig

    tls = {"tls_cert_file": "c", "tls_key_file": "k", "tls_client_ca_file": "ca"}
    cfg = ExtenderConfig.load(env={}, scheduler_clients=" qosmos-scheduler, other ", **tls)
    assert cfg.clients.scheduler == frozenset({"qosmos-scheduler", "other"}) and cfg.clients.open_groups() == [
        "metrics",
        "api",
    ]
    with pytest.raises(InvalidInput) as exc:
        ExtenderConfig.load(env={}, api_clients=" , ", **tls)
    assert exc.value.field == "api_clients"
    with pytest.raises(InvalidInput) as exc:
        ExtenderConfig.load(env={}, insecure=True, metrics_clients="qosmos-metrics")
    assert exc.value.field == "metrics_clients"
    env = {"QOSMOS_EXTENDER_SCHEDULER_CLIENTS": "a,b"}
    assert ExtenderConfig.load(env=env, **tls).clients.scheduler == frozenset({"a", "b"})


def test_plaintext_is_for_loopback_only(service: ExtenderService, pki: PKIFiles, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as exc:
        GRPCServer(service, host="0.0.0.0", port=0)
    assert exc.value.field == "grpc_host"
    bad = TLSFiles(str(tmp_path / "missing.pem"), str(pki.server_key), str(pki.ca))
    with pytest.raises(InvalidInput, match=r"missing\.pem"):
        bad.server_context()
    (tmp_path / "junk.pem").write_text("not a certificate")
    with pytest.raises(InvalidInput, match="not a PEM file"):
        TLSFiles(str(tmp_path / "junk.pem"), str(pki.server_key), str(pki.ca)).grpc_credentials()


def test_one_caller_holds_at_most_its_cap_of_assumed_gpus(cache: ClusterCache, names: list[str]) -> None:
    service = ExtenderService(cache, max_assumed_gpus=4)
    for i in range(3):
        service.prioritize({"Pod": make_pod(f"p{i}", gpus=2, uid=f"a{i}"), "NodeNames": names}, caller="rogue")
    assert cache.assumed_gpus("rogue") == 4  # the third pod was not held
    assert service.metrics.decisions.labels("prioritize", "assume_capped")._value.get() == 1
    # another caller is not blocked by the first one's holdings
    service.prioritize({"Pod": make_pod("q", gpus=2, uid="b0"), "NodeNames": names}, caller="kube-scheduler")
    assert cache.assumed_gpus("kube-scheduler") == 2
    # a retry of a pod already held does not count twice
    service.prioritize({"Pod": make_pod("p0", gpus=2, uid="a0"), "NodeNames": names}, caller="rogue")
    assert cache.assumed_gpus("rogue") == 4
    uncapped = ExtenderService(cache, max_assumed_gpus=0)
    for i in range(3):
        uncapped.prioritize({"Pod": make_pod(f"r{i}", gpus=2, uid=f"c{i}"), "NodeNames": names}, caller="x")
    assert cache.assumed_gpus("x") == 6


# ---- bounded work ---------------------------------------------------------------------------

BIG = {"model": "ResNet50", "batch": 1_000_000, "iters": 100, "nodes": 100_000, "gpus_per_node": 32}


def test_grpc_enforces_a_server_side_deadline(service: ExtenderService) -> None:
    server = GRPCServer(service, host="127.0.0.1", port=0, request_timeout_s=0.01).start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
            stub = pb_grpc.ExtenderStub(ch)
            with pytest.raises(grpc.RpcError) as err:
                stub.Explain(pb.ExplainRequest(**BIG), timeout=60)  # the client would wait a minute
            assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert stub.Explain(pb.ExplainRequest(model="ResNet50", batch=64, iters=10)).placements
    finally:
        server.stop(0)


@pytest.fixture
def channel(service: ExtenderService) -> Iterator[tuple[grpc.Channel, GRPCServer]]:
    server = GRPCServer(service, host="127.0.0.1", port=0).start()
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        yield ch, server
    server.stop(0)


def test_grpc_refuses_absurd_inputs(channel: tuple[grpc.Channel, GRPCServer]) -> None:
    stub = pb_grpc.ExtenderStub(channel[0])
    for req, field in (
        (
            pb.ExplainRequest(model="ResNet50", batch=2**62, iters=2**62, nodes=2**31 - 1, gpus_per_node=2**31 - 1),
            "batch",
        ),
        (pb.ExplainRequest(model="ResNet50", batch=64, iters=10, nodes=2**31 - 1), "nodes"),
        (pb.ExplainRequest(model="ResNet50", batch=2**24, iters=10**9), "more than a year"),
    ):
        with pytest.raises(grpc.RpcError) as err:
            stub.Explain(req, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in err.value.details()
    big_queue = [pb.JobSpec(id=str(i), gpus=1, model="ResNet50", batch=4096 + i, iters=10) for i in range(64)]
    with pytest.raises(grpc.RpcError) as err:
        stub.Rank(pb.RankRequest(jobs=big_queue, nodes=1000, gpus_per_node=32), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "split the queue" in err.value.details()
    out = stub.Explain(pb.ExplainRequest(**BIG), timeout=30)
    assert out.max_placement_gpus == 2048 and any("limited to 2,048 GPUs" in n for n in out.notes)


def test_grpc_calls_stop_when_the_server_stops(channel: tuple[grpc.Channel, GRPCServer]) -> None:
    ch, server = channel
    server.stopping.set()
    with pytest.raises(grpc.RpcError) as err:
        pb_grpc.ExtenderStub(ch).Explain(pb.ExplainRequest(**BIG), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_refused_requests_are_logged(service: ExtenderService, caplog: pytest.LogCaptureFixture) -> None:
    http = ExtenderHTTP(service)
    with caplog.at_level(logging.WARNING, logger="qosmos.extender.http"):
        status, _, _ = http.handle("POST", "/filter", b"{not json", caller="ip:10.0.0.9")
        for _ in range(30):
            http.handle("POST", "/filter", b"[]", caller="ip:10.0.0.9")
    assert status == 400
    refused = [r for r in caplog.records if r.getMessage().startswith("refused filter request")]
    assert refused and refused[0].caller == "ip:10.0.0.9" and "not valid JSON" in refused[0].getMessage()
    assert len(refused) == 20  # at most 20 lines per 10 s
