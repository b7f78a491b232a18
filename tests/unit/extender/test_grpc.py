"""gRPC Score / Rank / Explain on an in-process server, plus health checking and reflection."""

from __future__ import annotations

import json
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from qosmos.extender.grpc_service import GRPCServer, response_to_dict
from qosmos.extender.proto import qosmos_pb2 as pb
from qosmos.extender.proto import qosmos_pb2_grpc as pb_grpc
from qosmos.extender.service import ExtenderService
from typer.testing import CliRunner

from .conftest import extender_cli, make_pod


@pytest.fixture
def channel(service: ExtenderService) -> Iterator[grpc.Channel]:
    server = GRPCServer(service, host="127.0.0.1", port=0).start()
    ch = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    yield ch
    ch.close()
    server.stop(0)


def test_score_matches_http_prioritize(channel: grpc.Channel, service: ExtenderService, names: list[str]) -> None:
    stub = pb_grpc.ExtenderStub(channel)
    spec = pb.PodSpec(name="g", uid="g", gpus=2, vc="vc-a", gpu_models=["V100M32"], cpu_milli=1000, memory_mib=1024)
    resp = stub.Score(pb.ScoreRequest(pod=spec, node_names=names))
    scores = {s.node: s.score for s in resp.scores}
    assert set(scores) == set(names)
    assert list(resp.planned_nodes) == [max(scores, key=scores.__getitem__)]
    assert scores["b1"] == 0 and "virtual cluster" in next(s.reason for s in resp.scores if s.node == "b1")
    # same pod through the HTTP verb (no assumption so both see the same state)
    service.assume = False
    pod = make_pod(
        "g", gpus=2, uid="g2", labels={"qosmos.io/vc": "vc-a"}, annotations={"qosmos.io/gpu-models": "V100M32"}
    )
    http = {h["Host"]: h["Score"] for h in service.prioritize({"Pod": pod, "NodeNames": names})}
    assert [n for n in names if scores[n] == 10] == [n for n in names if http[n] == 10]
    # the whole Pod object as JSON, and all cached nodes when none are named
    resp2 = stub.Score(pb.ScoreRequest(pod_json=json.dumps(pod)))
    assert len(resp2.scores) == len(names)


def test_score_invalid_argument(channel: grpc.Channel) -> None:
    stub = pb_grpc.ExtenderStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        stub.Score(pb.ScoreRequest(pod=pb.PodSpec(name="x", gpus=2, placement="nonsense")))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "placement" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stub.Score(pb.ScoreRequest(pod_json="{not json"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_rank_swaf_orders_by_waiting_allowance(channel: grpc.Channel) -> None:
    stub = pb_grpc.ExtenderStub(channel)
    jobs = [
        pb.JobSpec(id="normal", submit_time=0, gpus=1, model="ResNet50", batch=128, iters=2000, qos="normal"),
        pb.JobSpec(id="urgent", submit_time=0, gpus=1, model="ResNet50", batch=128, iters=2000, qos="urgent"),
        pb.JobSpec(id="cpu", submit_time=0, gpus=0, kind="cpu"),
        pb.JobSpec(id="prior", submit_time=0, gpus=1, model="BERT", batch=32, iters=1000, qos="prior"),
    ]
    resp = stub.Rank(pb.RankRequest(jobs=jobs, now=0, nodes=4, gpus_per_node=4))
    order = [j.id for j in resp.jobs]
    assert resp.policy == "swaf" and order[0] == "urgent" and order[-1] == "cpu"
    allowances = [j.waiting_allowance for j in resp.jobs]
    assert allowances == sorted(allowances)
    assert all(j.HasField("d_node") for j in resp.jobs if j.id != "cpu")
    fifo = stub.Rank(pb.RankRequest(jobs=jobs, policy="fifo"))
    assert [j.id for j in fifo.jobs] == ["normal", "urgent", "cpu", "prior"]
    with pytest.raises(grpc.RpcError) as err:
        stub.Rank(pb.RankRequest(jobs=jobs, policy="nope"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("args", "req"),
    [
        (
            ["--model", "ResNet50", "--batch", "256", "--iters", "1000"],
            pb.ExplainRequest(model="ResNet50", batch=256, iters=1000),
        ),
        (
            [
                "--coeffs",
                "50,2,-0.001",
                "--batch",
                "64",
                "--iters",
                "500",
                "--qos",
                "urgent",
                "--nodes",
                "8",
                "--gpus-per-node",
                "8",
                "--theta",
                "0",
                "--submit",
                "10",
                "--now",
                "100",
                "--kind",
                "inference",
            ],
            pb.ExplainRequest(
                coeffs=[50, 2, -0.001],
                batch=64,
                iters=500,
                qos="urgent",
                nodes=8,
                gpus_per_node=8,
                theta=0,
                submit=10,
                now=100,
                kind="inference",
            ),
        ),
        (
            ["--model", "BERT", "--batch", "32", "--iters", "300", "--gamma", "0.5", "--lam", "0.1", "--nu", "0"],
            pb.ExplainRequest(model="BERT", batch=32, iters=300, gamma=0.5, lam=0.1, nu=0),
        ),
    ],
)
def test_explain_equals_cli_json(channel: grpc.Channel, args: list[str], req: pb.ExplainRequest) -> None:
    out = CliRunner().invoke(extender_cli(), ["explain", *args, "--json"])
    assert out.exit_code == 0, out.output
    expected = json.loads(out.stdout)
    resp = pb_grpc.ExtenderStub(channel).Explain(req)
    assert json.loads(resp.json) == expected
    assert resp.json == out.stdout.rstrip("\n")
    assert response_to_dict(resp) == expected
    assert resp.profile


def test_explain_invalid(channel: grpc.Channel) -> None:
    with pytest.raises(grpc.RpcError) as err:
        pb_grpc.ExtenderStub(channel).Explain(pb.ExplainRequest(batch=0, iters=1, model="ResNet50"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as err:
        pb_grpc.ExtenderStub(channel).Explain(pb.ExplainRequest(batch=8, iters=1))
    assert "exactly one of --model or --coeffs" in err.value.details()


def test_health_and_reflection(channel: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "qosmos.v1alpha1.Extender"):
        assert (
            health.Check(health_pb2.HealthCheckRequest(service=service)).status
            == health_pb2.HealthCheckResponse.SERVING
        )
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    resp = next(iter(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))))
    names = {s.name for s in resp.list_services_response.service}
    assert {"qosmos.v1alpha1.Extender", "grpc.health.v1.Health"} <= names
