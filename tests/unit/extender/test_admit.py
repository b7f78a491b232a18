"""gRPC Admit / ExplainQueue and `qosmos explain queue`: one admission pass of the core, answered over a
real in-process gRPC server on 127.0.0.1, compared with calling ``admit()`` on hand-built core types."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from qosmos.extender.admission_api import MAX_JOBS, order_context, response_json
from qosmos.extender.cache import pod_info
from qosmos.extender.core.admission import (
    AdmissionResult,
    Carry,
    Partition,
    PartitionRuntime,
    RunningJob,
    admit,
)
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.ordering import OrderContext, get_policy
from qosmos.extender.core.types import Allocation, Job, Node, NodeGrant, Platform
from qosmos.extender.grpc_service import GRPCServer
from qosmos.extender.proto import qosmos_pb2 as pb
from qosmos.extender.proto import qosmos_pb2_grpc as pb_grpc
from qosmos.extender.service import ExtenderService
from typer.testing import CliRunner

from .conftest import extender_cli, make_pod


def _serve(service: ExtenderService | None, **kw: Any) -> Iterator[pb_grpc.ExtenderStub]:
    server = GRPCServer(service, host="127.0.0.1", port=0, **kw).start()
    ch = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    yield pb_grpc.ExtenderStub(ch)
    ch.close()
    server.stop(0)


@pytest.fixture
def stub() -> Iterator[pb_grpc.ExtenderStub]:
    """A server without a node cache: every request names its nodes."""
    yield from _serve(None)


# ---- the relaxed-backfilling case (seed 004 §VI-B) ------------------------------------------
# One node of 4 GPUs; (submit s, GPUs, run s): J0 (0, 2, 100) running since 0, H (1, 4, 10), B1 (2, 2, b1)
# at now = 2, FIFO, relaxed backfilling with factor 0.1. H is reserved at J0's end, 100 s; its latest
# start is fixed at 100 + 0.1 x (100 - 1) = 109.9 s. B1 fits on the 2 free GPUs and ends at 2 + b1:
# 107 s ends at 109 (H starts by 109 <= 109.9: B1 backfills), 108 s at 110 (past 109.9: B1 waits).


def _relaxed_request(b1: float, now: float = 2.0) -> pb.AdmitRequest:
    return pb.AdmitRequest(
        partition=pb.PartitionSpec(policy="fifo", backfill="relaxed", relax_factor=0.1),
        nodes=[pb.NodeSpec(name="n0", gpus=4)],
        running=[
            pb.RunningJobSpec(
                job=pb.JobSpec(id="J0", submit_time=0, gpus=2, predicted_duration=100),
                start=0,
                allocation=pb.AllocationSpec(grants=[pb.GrantSpec(node="n0", gpu_ids=[0, 1])]),
            )
        ],
        waiting=[
            pb.JobSpec(id="H", submit_time=1, gpus=4, predicted_duration=10),
            pb.JobSpec(id="B1", submit_time=2, gpus=2, predicted_duration=b1),
        ],
        now=now,
    )


def _relaxed_direct(b1: float) -> tuple[AdmissionResult, ClusterState]:
    """The same pass on core types built by hand (no translation layer)."""
    cluster = ClusterState([Node("n0", 4)])
    j0 = Allocation((NodeGrant(0, (0, 1)),))
    cluster.allocate(j0)
    rt = PartitionRuntime(Partition("default", policy="fifo", backfill="relaxed", relax_factor=0.1))
    waiting = [Job("H", 1, 4, predicted_duration=10), Job("B1", 2, 2, predicted_duration=b1)]
    running = [RunningJob(Job("J0", 0, 2, predicted_duration=100), 0, 100, j0)]
    res = admit(rt, waiting, running, cluster, 2.0, carry=Carry(), estimate=lambda j, a: j.predicted_duration or 0)
    return res, cluster


def _grants(alloc: Allocation | None, cluster: ClusterState) -> list[tuple[str, list[int]]]:
    return [] if alloc is None else [(cluster.nodes[g.node].name, list(g.gpu_ids)) for g in alloc.grants]


def _spec_grants(spec: pb.AllocationSpec) -> list[tuple[str, list[int]]]:
    return [(g.node, list(g.gpu_ids)) for g in spec.grants]


def _result_facts(res: AdmissionResult, cluster: ClusterState) -> dict[str, Any]:
    r = res.carry.reservation
    return {
        "starts": [(s.job.id, _grants(s.allocation, cluster), s.backfilled) for s in res.starts],
        "preemptions": [(p.job.id, p.reason) for p in res.preemptions],
        "waiting": [(w.job.id, w.code, w.message, w.position, w.needs, w.blocking) for w in res.waiting],
        "reservation": None
        if r is None
        else (r.job_id, r.start, r.latest, _grants(r.allocation, cluster), list(r.backfilled)),
        "order": list(res.order),
    }


def _response_facts(resp: pb.AdmitResponse) -> dict[str, Any]:
    r = resp.carry.reservation if resp.carry.HasField("reservation") else None
    return {
        "starts": [(s.job_id, _spec_grants(s.allocation), s.backfilled) for s in resp.starts],
        "preemptions": [(p.job_id, p.reason) for p in resp.preemptions],
        "waiting": [(w.job_id, w.code, w.message, w.position, w.needs, w.blocking) for w in resp.waiting],
        "reservation": None
        if r is None
        else (r.job_id, r.start, r.latest, _spec_grants(r.allocation), list(r.backfilled)),
        "order": list(resp.order),
    }


@pytest.mark.parametrize(("b1", "backfilled"), [(107.0, True), (108.0, False)])
def test_relaxed_backfilling_over_grpc_equals_admit(stub: pb_grpc.ExtenderStub, b1: float, backfilled: bool) -> None:
    resp = stub.Admit(_relaxed_request(b1))
    direct, cluster = _relaxed_direct(b1)
    assert _response_facts(resp) == _result_facts(direct, cluster)
    # hand-computed: the head's latest start is 109.9 s and B1 starts only when it ends by then
    assert resp.carry.reservation.job_id == "H"
    assert resp.carry.reservation.latest == pytest.approx(109.9)
    assert resp.order == ["H", "B1"] and resp.policy == "fifo"
    if backfilled:
        assert [(s.job_id, s.backfilled) for s in resp.starts] == [("B1", True)]
        assert _spec_grants(resp.starts[0].allocation) == [("n0", [2, 3])]
        assert list(resp.carry.reservation.backfilled) == ["B1"]
    else:
        assert not resp.starts
        b = next(w for w in resp.waiting if w.job_id == "B1")
        assert b.code == "reserved" and b.blocking == "H" and "109.9" in b.message
    assert next(w for w in resp.waiting if w.job_id == "H").code == "head"


def test_carry_passed_back_keeps_the_latest_start(stub: pb_grpc.ExtenderStub) -> None:
    """The latest start is fixed when the head first blocks: a later pass given the carry keeps 109.9;
    without it the head would be judged afresh (B1 now holds GPUs until 109: latest 109 + 0.1 x 108)."""
    first = stub.Admit(_relaxed_request(107.0))
    later = _relaxed_request(107.0, now=50.0)
    del later.waiting[1]  # B1 runs now, since 2, on GPUs 2-3
    later.running.add(
        job=pb.JobSpec(id="B1", submit_time=2, gpus=2, predicted_duration=107),
        start=2,
        allocation=pb.AllocationSpec(grants=[pb.GrantSpec(node="n0", gpu_ids=[2, 3])]),
    )
    fresh = stub.Admit(later)
    assert fresh.carry.reservation.latest == pytest.approx(109 + 0.1 * 108)
    later.carry.CopyFrom(first.carry)
    kept = stub.Admit(later)
    assert kept.carry.reservation.latest == pytest.approx(109.9)
    assert kept.carry.reservation.start == pytest.approx(109)
    assert list(kept.carry.reservation.backfilled) == ["B1"] and kept.carry.max_queue_len == 2


def test_no_reasons_decides_the_same(stub: pb_grpc.ExtenderStub) -> None:
    req = _relaxed_request(107.0)
    req.no_reasons = True
    quick = stub.Admit(req)
    full = stub.Admit(_relaxed_request(107.0))
    assert list(quick.starts) == list(full.starts) and quick.carry == full.carry
    assert not quick.waiting and not quick.order and full.waiting


# ---- ExplainQueue --------------------------------------------------------------------------------------


def _swaf_jobs() -> list[pb.JobSpec]:
    return [
        pb.JobSpec(id="n-resnet", submit_time=0, gpus=2, model="ResNet50", batch=256, iters=3000, qos="normal"),
        pb.JobSpec(id="u-resnet", submit_time=5, gpus=2, model="ResNet50", batch=256, iters=3000, qos="urgent"),
        pb.JobSpec(id="p-bert", submit_time=1, gpus=4, model="BERT", batch=64, iters=2000, qos="prior"),
        pb.JobSpec(id="n-lstm", submit_time=2, gpus=1, model="LSTM", batch=128, iters=500, qos="normal"),
        pb.JobSpec(id="cpu", submit_time=3, gpus=0, kind="cpu", cpu_milli=2000),
    ]


def test_swaf_order_over_grpc_equals_the_policy(stub: pb_grpc.ExtenderStub) -> None:
    nodes = [pb.NodeSpec(name=f"n{i}", gpus=4, cpu_milli=32000, memory_mib=65536) for i in range(2)]
    # the cluster is full: the order is the policy's alone, and every job waits with its reason
    nodes[0].used_gpu_ids.extend([0, 1, 2, 3])
    nodes[1].used_gpu_ids.extend([0, 1, 2, 3])
    req = pb.AdmitRequest(partition=pb.PartitionSpec(policy="swaf"), nodes=nodes, waiting=_swaf_jobs(), now=10)
    resp = stub.ExplainQueue(req)
    jobs = [
        Job(
            s.id,
            s.submit_time,
            s.gpus,
            kind=s.kind or "training",
            model=s.model,
            batch=s.batch,
            iters=s.iters,
            qos=s.qos or "normal",
            cpu_milli=s.cpu_milli,
        )
        for s in _swaf_jobs()
    ]
    ctx = OrderContext(now=10, platform=Platform(2, 4), modeldb=ModelDB.builtin(), total_gpus=8)
    expected = get_policy("swaf").order(jobs, ctx)
    assert [e.job_id for e in resp.jobs] == [d.job.id for d in expected]
    assert [e.job_id for e in resp.jobs] != [s.id for s in _swaf_jobs()]  # SWAF reorders this queue
    assert resp.policy == "swaf" and [e.position for e in resp.jobs] == list(range(len(expected)))
    for e, d in zip(resp.jobs, expected, strict=True):
        assert e.decision == "wait" and e.message, e
        if d.shape is not None:  # the GENIE shape the policy chose is what the job waits for
            assert e.needs == f"{d.shape.d_node} node(s) × {d.shape.d_gpn} GPUs", e
        if d.waiting_allowance is not None and math.isfinite(d.waiting_allowance):
            assert e.waiting_allowance == pytest.approx(d.waiting_allowance)
    admitted = stub.Admit(req)
    assert list(admitted.order) == [e.job_id for e in resp.jobs]


def test_a_running_jobs_grants_default_to_its_exact_share(stub: pb_grpc.ExtenderStub) -> None:
    """Grants without CPU hold the job's share by GPUs, as the core grants it: 9 of 11 GPUs with 77 cores
    hold 63000 milli-CPU, all of n0's (in floats 63000.00000000001, rounded up: the books refused it)."""
    req = pb.AdmitRequest(
        nodes=[pb.NodeSpec(name="n0", gpus=9, cpu_milli=63000), pb.NodeSpec(name="n1", gpus=2, cpu_milli=14000)],
        running=[
            pb.RunningJobSpec(
                job=pb.JobSpec(id="R", submit_time=0, gpus=11, cpu_milli=77000, predicted_duration=100),
                start=0,
                allocation=pb.AllocationSpec(
                    grants=[pb.GrantSpec(node="n0", gpu_ids=list(range(9))), pb.GrantSpec(node="n1", gpu_ids=[0, 1])]
                ),
            )
        ],
        waiting=[pb.JobSpec(id="cpu", submit_time=1, gpus=0, kind="cpu", cpu_milli=1)],
        now=2,
    )
    resp = stub.Admit(req)
    assert list(resp.starts) == [] and [w.job_id for w in resp.waiting] == ["cpu"]


def test_explain_queue_preemptive_lists_running_jobs(stub: pb_grpc.ExtenderStub) -> None:
    """LAS orders waiting and running jobs together: the newcomer displaces the job with most service."""
    req = pb.AdmitRequest(
        partition=pb.PartitionSpec(policy="las"),
        nodes=[pb.NodeSpec(name="n0", gpus=4)],
        running=[
            pb.RunningJobSpec(
                job=pb.JobSpec(id="old", submit_time=0, gpus=4, attained=40000),
                start=0,
                allocation=pb.AllocationSpec(grants=[pb.GrantSpec(node="n0", gpu_ids=[0, 1, 2, 3])]),
            )
        ],
        waiting=[pb.JobSpec(id="new", submit_time=5, gpus=4)],
        now=10,
    )
    resp = stub.ExplainQueue(req)
    assert [(e.job_id, e.decision) for e in resp.jobs] == [("new", "start"), ("old", "preempt")]
    assert "las" in resp.jobs[1].message
    admitted = stub.Admit(req)
    assert [p.job_id for p in admitted.preemptions] == ["old"] and [s.job_id for s in admitted.starts] == ["new"]


# ---- the server's node cache ------------------------------------------------------------------------


@pytest.fixture
def cached_stub(service: ExtenderService) -> Iterator[pb_grpc.ExtenderStub]:
    yield from _serve(service)


def test_without_nodes_the_node_cache_is_used(cached_stub: pb_grpc.ExtenderStub, service: ExtenderService) -> None:
    """vc-a has a1, a2 (8 GPUs), a3 (4), a4 (2). A pod the request does not list holds a1: others hold it."""
    service.cache.upsert_pod(pod_info(make_pod("other", gpus=8, node="a1", labels={"qosmos.io/vc": "vc-a"})))
    req = pb.AdmitRequest(
        partition=pb.PartitionSpec(name="vc-a", placement="best-fit"),
        waiting=[pb.JobSpec(id="big", submit_time=0, gpus=8), pb.JobSpec(id="big2", submit_time=1, gpus=8)],
        now=1,
    )
    resp = cached_stub.ExplainQueue(req)
    assert [(e.job_id, e.decision) for e in resp.jobs] == [("big", "start"), ("big2", "wait")]
    assert _spec_grants(resp.jobs[0].allocation) == [("a2", list(range(8)))]
    # a running job of the request that holds a2 is the cache's pod there, not a second holder
    service.cache.upsert_pod(pod_info(make_pod("mine", gpus=8, node="a2", labels={"qosmos.io/vc": "vc-a"})))
    req.running.add(
        job=pb.JobSpec(id="mine", submit_time=0, gpus=8),
        start=0,
        allocation=pb.AllocationSpec(grants=[pb.GrantSpec(node="a2", gpu_ids=list(range(8)))]),
    )
    resp = cached_stub.ExplainQueue(req)
    assert [e.decision for e in resp.jobs] == ["wait", "wait"]
    assert "0 node(s) have 8 free" in resp.jobs[0].message


def test_without_nodes_or_cache_is_refused(stub: pb_grpc.ExtenderStub) -> None:
    with pytest.raises(grpc.RpcError) as err:
        stub.Admit(pb.AdmitRequest(waiting=[pb.JobSpec(id="a", gpus=1)]))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "nodes" in err.value.details()


# ---- bad input ---------------------------------------------------------------------------------------


def _bad(req: pb.AdmitRequest, edit: str) -> pb.AdmitRequest:
    if edit == "policy":
        req.partition.policy = "lottery"
    elif edit == "negative gpus":
        req.waiting[0].gpus = -2
    elif edit == "unknown node":
        req.running[0].allocation.grants[0].node = "n9"
    elif edit == "gpu id":
        req.running[0].allocation.grants[0].gpu_ids.append(7)
    elif edit == "duplicate id":
        req.waiting[1].id = "J0"
    elif edit == "held twice":
        req.nodes[0].used_gpu_ids.append(1)
    elif edit == "node too big":
        req.nodes[0].gpus = 64
    elif edit == "too many jobs":
        req.waiting.extend(pb.JobSpec(id=f"x{i}", gpus=1) for i in range(MAX_JOBS))
    elif edit == "no estimate":
        req.waiting[1].ClearField("predicted_duration")
    elif edit == "no expected end":
        req.running[0].job.ClearField("predicted_duration")
    elif edit == "other vc":
        req.waiting[0].vc = "elsewhere"
    elif edit == "empty partition":
        req.nodes[0].vc = "elsewhere"
    elif edit == "backfill mode":
        req.partition.backfill = "greedy"
    elif edit == "now":
        req.now = math.inf
    return req


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ("policy", "partition.policy"),
        ("negative gpus", "waiting[H].gpus"),
        ("unknown node", "running[J0].allocation.grants[0].node"),
        ("gpu id", "running[J0].allocation.grants[0].gpu_ids"),
        ("duplicate id", "duplicate job id"),
        ("held twice", "running[J0].allocation"),
        ("node too big", "nodes[n0].gpus"),
        ("too many jobs", "at most 10,000 jobs"),
        ("no estimate", "waiting[B1].predicted_duration"),
        ("no expected end", "running[J0].expected_end"),
        ("other vc", "waiting[H].vc"),
        ("empty partition", "partition.name"),
        ("backfill mode", "partition.backfill"),
        ("now", "invalid now"),
    ],
)
@pytest.mark.parametrize("method", ["Admit", "ExplainQueue"])
def test_bad_input_is_invalid_argument_naming_the_field(
    stub: pb_grpc.ExtenderStub, edit: str, field: str, method: str
) -> None:
    with pytest.raises(grpc.RpcError) as err:
        getattr(stub, method)(_bad(_relaxed_request(107.0), edit), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert field in err.value.details()


def test_genie_rows_bound_only_genie_policies(stub: pb_grpc.ExtenderStub) -> None:
    """A queue of GENIE tasks too large for SWAF's placement tables is refused; FIFO never builds them."""
    req = pb.AdmitRequest(
        nodes=[pb.NodeSpec(name=f"n{i}", gpus=8) for i in range(64)],
        waiting=[
            pb.JobSpec(id=f"w{i}", submit_time=i, gpus=1, model="ResNet50", batch=512, iters=100) for i in range(1000)
        ],
    )
    assert len(stub.Admit(req).starts) == 512
    req.partition.policy = "swaf"
    with pytest.raises(grpc.RpcError) as err:
        stub.Admit(req)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "GENIE placements" in err.value.details()


def test_server_side_deadline(service: ExtenderService) -> None:
    """A queue GENIE needs long for runs past a 10 ms server deadline: DEADLINE_EXCEEDED, not an answer."""
    heavy = pb.AdmitRequest(
        partition=pb.PartitionSpec(policy="swaf"),
        nodes=[pb.NodeSpec(name=f"n{i}", gpus=8) for i in range(16)],
        waiting=[
            pb.JobSpec(id=str(i), submit_time=i, gpus=2, model="ResNet50", batch=256 + i, iters=1000)
            for i in range(1500)
        ],
        now=2000,
    )
    for stub in _serve(service, request_timeout_s=0.01):
        with pytest.raises(grpc.RpcError) as err:
            stub.Admit(heavy, timeout=60)  # the client would wait a minute
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert stub.Admit(_relaxed_request(107.0)).starts  # a small pass fits the same budget


# ---- qosmos explain queue ---------------------------------------------------------------------------


def test_cli_explain_queue_equals_grpc(stub: pb_grpc.ExtenderStub, tmp_path: Path) -> None:
    req = _relaxed_request(108.0)
    path = tmp_path / "queue.json"
    path.write_text(json.dumps(json_format.MessageToDict(req, preserving_proto_field_name=True)))
    runner = CliRunner()
    out = runner.invoke(extender_cli(), ["explain", "queue", "--file", str(path), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == response_json(stub.ExplainQueue(req))
    table = runner.invoke(extender_cli(), ["explain", "queue", "--file", str(path)])
    assert table.exit_code == 0, table.output
    for needle in ("H", "B1", "reserved", "head", "109.9", "reservation: H"):
        assert needle in table.stdout
    # the single-task form is unchanged beside the sub-command
    one = runner.invoke(extender_cli(), ["explain", "--model", "ResNet50", "--batch", "64", "--iters", "10", "--json"])
    assert one.exit_code == 0 and "placements" in json.loads(one.stdout)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "file"),
        ("{not json", "not JSON: Expecting property name enclosed in double quotes at line 1"),
        ('["a list"]', "expected a JSON object"),
        ('{"partition": {"policy": "fifo"}, "waiting": [{"id": "a", "gpus": 1}]}', "nodes"),
        ('{"nodes": [{"name": "n0", "gpus": 4}], "waitng": []}', "waitng"),
        ('{"nodes": [{"name": "n0", "gpus": "four"}]}', "gpus"),
        ('{"nodes": [{"name": "n0", "gpus": 4}], "partition": {"policy": "nope"}}', "partition.policy"),
    ],
)
def test_cli_explain_queue_bad_input_exits_2(tmp_path: Path, content: str | None, needle: str) -> None:
    path = tmp_path / "queue.json"
    if content is not None:
        path.write_text(content)
    out = CliRunner().invoke(extender_cli(), ["explain", "queue", "--file", str(path)])
    assert out.exit_code == 2, out.output
    assert needle in out.output and "Traceback" not in out.output
    assert len(out.output.strip().splitlines()) == 1


def test_the_order_context_counts_what_running_jobs_hold_on_the_partitions_nodes() -> None:
    """Capacity's usage is the GPUs a model type holds (a task Capacity shrank to its share of 4 holds 4,
    not the 5 it asked); the GENIE platform counts each node size (1, 1 and 2 GPUs: no 3 x 2 shape)."""
    cluster = ClusterState([Node("n0", 1), Node("n1", 1), Node("n2", 2), Node("n3", 4)])
    alloc = Allocation((NodeGrant(3, (0, 1, 2, 3)),))
    shrunk = RunningJob(Job("b", 0, 5, model="BERT", batch=64, iters=10), 0, 100, alloc)
    ctx = order_context(Partition("default", policy="capacity"), cluster, [shrunk], 1.0, ModelDB.builtin())
    assert ctx.usage_by_model == {"BERT": 4} and ctx.usage_by_user == {"": (5, 0)}
    assert ctx.platform is not None and ctx.platform.nodes_with == (4, 2, 1, 1)
