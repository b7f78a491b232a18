"""The InferenceService controller's edges (issue 12 §2): CRD <-> the core's spec and carried state, the
load sources (the annotation; Prometheus over real HTTP), the replica pods, and the plan that moves the
replicas to a decision without a gap in serving. The live behaviour is tests/integration/test_inference.py."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlparse

import pytest
from qosmos.extender.core import inference as core
from qosmos.extender.core import inference_profiles
from qosmos.extender.core.inference import InferenceState, Mode, decide, resolve_spec
from qosmos.extender.core.modeldb import ModelDB
from qosmos.operator.crds import InferenceServiceSpec, InferenceServiceStatus
from qosmos.operator.inference import (
    LoadError,
    Replica,
    annotation_load,
    idle_gpus,
    parse_prometheus,
    pending_replica,
    plan,
    prometheus_qps,
    quantize,
    replica_of,
    replica_pod,
    soda_prefers_gpu,
    spec_of,
    stamp,
    state_of,
    state_status,
)

DB = ModelDB.builtin()
SVC = {"metadata": {"name": "resnet", "namespace": "team", "uid": "u-1"}}


# --------------------------------------------------------------------------- CRD <-> core


def test_crd_defaults_are_the_cores() -> None:
    s = InferenceServiceSpec.model_validate({"modelType": "ResNet50"})
    assert s.qos_target_ms == core.SODA_QOS_TARGET_S * 1000
    assert s.cpu.cores_per_replica == core.SODA_CPU_CORES
    assert s.scale_out_threshold == core.DEFAULT_SCALE_OUT_THRESHOLD == 0.8  # seed 002 §V-D1
    assert (s.hysteresis, s.switch_cooldown_seconds) == (core.DEFAULT_HYSTERESIS, core.DEFAULT_SWITCH_COOLDOWN_S)
    assert (s.scale_in_after_seconds, s.scale_out_after_seconds) == (
        core.DEFAULT_SCALE_IN_AFTER_S,
        core.DEFAULT_SCALE_OUT_AFTER_S,
    )
    assert spec_of(s, DB) == resolve_spec("ResNet50", 200, db=DB)


def test_spec_of_passes_every_field() -> None:
    s = InferenceServiceSpec.model_validate(
        {
            "modelType": "ResNet50",
            "qosTargetMs": 150,
            "gpuSwitchBatch": 20,
            "cpu": {"coresPerReplica": 8, "maxBatch": 4, "maxReplicas": 6},
            "minReplicas": 2,
            "maxReplicas": 5,
            "scaleOutThreshold": 0.7,
            "hysteresis": 0.1,
            "switchCooldownSeconds": 5,
            "scaleInAfterSeconds": 7,
            "scaleOutAfterSeconds": 1,
        }
    )
    want = resolve_spec(
        "ResNet50",
        150,
        db=DB,
        gpu_switch_batch=20,
        cpu_cores_per_replica=8,
        cpu_max_batch=4,
        min_replicas=2,
        max_replicas=5,
        cpu_max_replicas=6,
        scale_out_threshold=0.7,
        hysteresis=0.1,
        switch_cooldown_s=5,
        scale_in_after_s=7,
        scale_out_after_s=1,
    )
    assert spec_of(s, DB) == want
    assert want.cpu is not None and want.cpu.cores == 8 and want.cpu.batch == 4 and want.gpu.batch == 20
    never = InferenceServiceSpec.model_validate({"modelType": "ResNet50", "cpu": {"maxBatch": 0}})
    assert spec_of(never, DB).cpu is None  # below 1: never on CPU (issue 12 §1)


def test_state_round_trips_through_the_status() -> None:
    t = quantize(1_700_000_000.123456)
    st = InferenceState(Mode.CPU, 3, last_switch_s=t - 5.5, switches=4, up_since=None, down_since=t)
    status = state_status(st)
    assert status["loadUpSince"] is None and status["loadDownSince"] == stamp(t)
    InferenceServiceStatus.model_validate({k: v for k, v in status.items() if v is not None})  # the CRD's types
    assert state_of(json.loads(json.dumps(status))) == st  # microseconds survive: a wait of 5 s stays 5 s
    assert (
        state_of({}) is None and state_of({"mode": "GPU"}) is None and state_of({"mode": "TPU", "replicas": 1}) is None
    )


def test_the_carried_state_continues_a_decision_chain() -> None:
    """A restarted operator reads the state back and decides exactly as the running one would have."""
    spec = resolve_spec("ResNet50", 200, db=DB, gpu_switch_batch=20, cpu_max_batch=2, switch_cooldown_s=5)
    loads = [30, 30, 400, 400, 20, 20, 20, 20, 5, 600, 10]
    straight, via_status = None, None
    for i, q in enumerate(loads):
        now = quantize(1000.0 + 3.3 * i)
        a = decide(spec, straight, q, now)
        b = decide(spec, via_status, q, now)
        assert (a.mode, a.replicas, a.reason) == (b.mode, b.replicas, b.reason)
        straight, via_status = a.state, state_of(json.loads(json.dumps(state_status(b.state))))
        assert via_status == straight


# --------------------------------------------------------------------------- the load


def test_annotation_load() -> None:
    def obj(v: str | None) -> dict[str, Any]:
        return {"metadata": {"name": "x", "annotations": {} if v is None else {"qosmos.io/qps": v}}}

    assert annotation_load(obj("12.5")).qps == 12.5
    assert annotation_load(obj("0")).qps == 0.0
    for bad in (None, "fast", "-3", "nan", "inf"):
        load = annotation_load(obj(bad))
        assert load.qps is None and "qosmos.io/qps" in load.error


class _Prometheus(BaseHTTPRequestHandler):
    """A tiny Prometheus HTTP API: /api/v1/query answers what the test put under the query."""

    answers: ClassVar[dict[str, tuple[int, str]]] = {}
    seen: ClassVar[list[tuple[str, str]]] = []

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = parse_qs(url.query).get("query", [""])[0]
        self.seen.append((url.path, query))
        code, body = self.answers.get(query, (400, json.dumps({"status": "error", "error": "parse error"})))
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def prometheus() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Prometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _vector(*values: str) -> str:
    result = [{"metric": {"pod": f"p{i}"}, "value": [1700000000.5, v]} for i, v in enumerate(values)]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


def test_prometheus_instant_query_over_http(prometheus: str) -> None:
    q = 'sum by (pod) (rate(requests_total{service="resnet"}[1m]))'
    _Prometheus.answers = {
        q: (200, _vector("12.5", "7.25")),
        "none": (200, _vector()),
        "scalar(x)": (200, json.dumps({"status": "success", "data": {"resultType": "scalar", "result": [1.0, "3"]}})),
        "range": (200, json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}})),
        "nan": (200, _vector("NaN")),
        "negative": (200, _vector("-1")),
        "down": (503, json.dumps({"status": "error", "errorType": "unavailable", "error": "TSDB not ready"})),
        "garbage": (200, "<html>"),
    }
    _Prometheus.seen = []
    assert prometheus_qps(prometheus, q) == pytest.approx(19.75)  # several series are summed
    assert _Prometheus.seen == [("/api/v1/query", q)]  # the expression URL-encoded, the trailing / folded
    assert prometheus_qps(prometheus, "none") == 0.0  # no series: no queries
    assert prometheus_qps(prometheus, "scalar(x)") == 3.0
    for query, words in (
        ("range", "a matrix result"),
        ("nan", "not a rate"),
        ("negative", "not a rate"),
        ("down", "Prometheus 503: TSDB not ready"),
        ("garbage", "no JSON"),
        ("unknown", "Prometheus 400: parse error"),
    ):
        with pytest.raises(LoadError, match=words):
            prometheus_qps(prometheus, query)
    with pytest.raises(LoadError, match="unreachable"):
        prometheus_qps("http://127.0.0.1:9", "x", timeout=2)


def test_parse_prometheus_malformed() -> None:
    for body in (b'{"status": "success", "data": {"resultType": "vector", "result": [{"value": []}]}}', b"[]"):
        with pytest.raises(LoadError):
            parse_prometheus(body)


# --------------------------------------------------------------------------- replica pods


def test_replica_pods() -> None:
    spec = InferenceServiceSpec.model_validate(
        {
            "modelType": "ResNet50",
            "cpu": {"coresPerReplica": 12},
            "template": {
                "metadata": {"labels": {"app": "resnet"}, "annotations": {"a": "b"}},
                "spec": {
                    "containers": [
                        {"name": "srv", "image": "srv:1", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
                        {"name": "side", "image": "side:1", "resources": {"requests": {"nvidia.com/gpu": "1"}}},
                    ]
                },
            },
        }
    )
    gpu = replica_pod(SVC, spec, Mode.GPU, 3)
    assert gpu["metadata"]["name"] == "resnet-gpu-3" and gpu["metadata"]["namespace"] == "team"
    assert gpu["metadata"]["labels"] == {
        "app": "resnet",
        "qosmos.io/inference": "resnet",
        "qosmos.io/inference-mode": "gpu",
    }
    assert gpu["metadata"]["annotations"] == {"a": "b"}
    owner = gpu["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "InferenceService",
        "resnet",
        "u-1",
        True,
    )
    assert gpu["spec"]["schedulerName"] == "qosmos-scheduler"
    res = gpu["spec"]["containers"][0]["resources"]
    assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"] == "1"  # one GPU a replica
    assert "affinity" not in gpu["spec"]
    cpu = replica_pod(SVC, spec, Mode.CPU, 0)
    assert cpu["metadata"]["name"] == "resnet-cpu-0" and cpu["metadata"]["labels"]["qosmos.io/inference-mode"] == "cpu"
    for c in cpu["spec"]["containers"]:  # no GPU anywhere in a CPU replica
        for part in (c.get("resources") or {}).values():
            assert "nvidia.com/gpu" not in part
    assert cpu["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "12"
    terms = cpu["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert [t["matchExpressions"][0]["key"] for t in terms] == ["nvidia.com/gpu.product", "qosmos.io/gpu-model"]
    assert spec.template["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}  # not mutated
    plain = replica_pod(SVC, InferenceServiceSpec.model_validate({"modelType": "x"}), Mode.CPU, 1)
    assert plain["spec"]["containers"][0]["image"] == "registry.k8s.io/pause:3.10"


def test_pending_replicas_as_the_core_places_them() -> None:
    """A replica pod as ``place_services`` sees it: its requests, its service, its age, and a CPU replica
    confined to GPU nodes (the rest of SODA's rule is the core's, tests/unit/core/test_services.py)."""
    spec = InferenceServiceSpec.model_validate({"modelType": "ResNet50", "cpu": {"coresPerReplica": 12}})
    for mode, gpus, cpu, only in ((Mode.GPU, 1, 0, False), (Mode.CPU, 0, 12_000, True)):
        pod = replica_pod(SVC, spec, mode, 2)
        pod["metadata"]["creationTimestamp"] = "2026-01-01T00:00:05Z"
        r = pending_replica(pod)
        assert (r.id, r.service, r.since) == (f"team/resnet-{mode.value.lower()}-2", "team/resnet", 1_767_225_605.0)
        assert (r.gpus, r.cpu_milli, r.gpu_nodes_only) == (gpus, cpu, only)


def _pod(name: str, mode: str, ready: bool, phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name, "labels": {"qosmos.io/inference": "resnet", "qosmos.io/inference-mode": mode}}
    if deleting:
        m["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    conds = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"metadata": m, "status": {"phase": phase, "conditions": conds}}


def test_replica_of() -> None:
    r = replica_of(_pod("resnet-gpu-2", "gpu", True))
    assert (r.mode, r.index, r.ready, r.terminating, r.finished) == (Mode.GPU, 2, True, False, False)
    assert not replica_of(_pod("resnet-cpu-0", "cpu", True, deleting=True)).ready  # going: serves no more
    assert replica_of(_pod("resnet-cpu-0", "cpu", True, phase="Failed")).finished
    assert not replica_of(_pod("resnet-cpu-0", "cpu", True, phase="Pending")).ready
    assert replica_of(_pod("resnet-tpu-0", "tpu", True)).mode is None


def test_a_replica_on_a_node_that_is_not_ready_is_lost() -> None:
    on_a = {**_pod("resnet-gpu-1", "gpu", True), "spec": {"nodeName": "a"}}
    r = replica_of(on_a, {"a"})
    assert r.lost and not r.ready  # its Ready condition is stale: the node stopped reporting
    assert not replica_of(on_a, {"b"}).lost and replica_of(on_a, {"b"}).ready
    assert not replica_of(on_a).lost
    done = {**_pod("resnet-gpu-1", "gpu", False, phase="Succeeded"), "spec": {"nodeName": "a"}}
    assert not replica_of(done, {"a"}).lost  # finished: replaced as finished
    assert not replica_of(_pod("resnet-gpu-2", "gpu", False, phase="Pending"), {"a"}).lost  # not bound


# --------------------------------------------------------------------------- the plan


def R(name: str, ready: bool = True, **kw: Any) -> Replica:
    mode, index = name.split("-")
    return Replica(name, Mode(mode.upper()), int(index), ready, **kw)


def test_plan_creates_the_missing_replicas() -> None:
    p = plan(Mode.CPU, 2, [])
    assert (p.create, p.delete, p.ready_after, p.complete) == ([(Mode.CPU, 0), (Mode.CPU, 1)], [], 0, False)
    p = plan(Mode.CPU, 3, [R("cpu-0"), R("cpu-2", terminating=True)])  # a terminating pod keeps its name
    assert p.create == [(Mode.CPU, 1), (Mode.CPU, 3)]
    assert plan(Mode.GPU, 1, [R("gpu-0")]).complete


def test_a_switch_keeps_the_old_replicas_until_the_new_ones_are_ready() -> None:
    old = [R("gpu-0"), R("gpu-1")]
    p = plan(Mode.CPU, 2, old)
    assert p.create == [(Mode.CPU, 0), (Mode.CPU, 1)] and p.delete == [] and p.ready_after == 2
    p = plan(Mode.CPU, 2, [*old, R("cpu-0"), R("cpu-1", ready=False)])  # one new replica not Ready yet
    assert p.create == [] and p.delete == [] and p.ready_after == 3 and not p.complete
    p = plan(Mode.CPU, 2, [*old, R("cpu-0"), R("cpu-1")])  # all Ready: the old ones go
    assert sorted(p.delete) == ["gpu-0", "gpu-1"] and p.retired == p.delete and p.ready_after == 2
    # switched back before the new set was Ready: the new pods serve nothing and go at once
    p = plan(Mode.GPU, 2, [*old, R("cpu-0", ready=False), R("cpu-1", ready=False)])
    assert sorted(p.delete) == ["cpu-0", "cpu-1"] and p.retired == [] and p.complete is False


def test_a_scale_in_keeps_the_ready_replicas() -> None:
    p = plan(Mode.GPU, 2, [R("gpu-0", ready=False), R("gpu-1"), R("gpu-2"), R("gpu-3", ready=False)])
    assert sorted(p.delete) == ["gpu-0", "gpu-3"] and p.ready_after == 2
    p = plan(Mode.GPU, 1, [R("gpu-0"), R("gpu-1"), R("gpu-2")])
    assert p.delete == ["gpu-1", "gpu-2"] and p.ready_after == 1


def test_finished_and_foreign_pods_are_replaced() -> None:
    foreign = Replica("resnet-tpu-0", None, 0, True)
    p = plan(Mode.GPU, 2, [R("gpu-0"), R("gpu-1", finished=True), foreign])
    assert sorted(p.delete) == ["gpu-1", "resnet-tpu-0"] and p.create == [(Mode.GPU, 2)]


def test_lost_replicas_are_replaced_at_once_under_new_indexes() -> None:
    """As the simulator asks for a down node's replicas again: a lost replica goes and another is created
    (its index is free only once the pod is gone); the Ready ones elsewhere stay. In a switch, the old
    mode's lost replicas go too, and they count for no Ready replica the switch would wait on."""
    p = plan(Mode.GPU, 3, [R("gpu-0"), R("gpu-1", ready=False, lost=True), R("gpu-2")])
    assert p.delete == ["gpu-1"] and p.create == [(Mode.GPU, 3)] and p.ready_after == 2 and not p.complete
    p = plan(Mode.GPU, 3, [R("gpu-0"), R("gpu-1", ready=False, lost=True, terminating=True), R("gpu-2"), R("gpu-3")])
    assert p.delete == [] and p.create == [] and p.complete  # the lost one is going: not asked for twice
    p = plan(Mode.CPU, 1, [R("gpu-0", ready=False, lost=True), R("gpu-1"), R("cpu-0", ready=False, lost=True)])
    assert sorted(p.delete) == ["cpu-0", "gpu-0"] and p.create == [(Mode.CPU, 1)] and p.ready_after == 1


def test_never_a_moment_without_a_ready_replica() -> None:
    """Random decisions and random readiness: once a replica is Ready, applying the plan never leaves none."""
    rng = random.Random(12)
    for _ in range(300):
        pods: dict[str, Replica] = {}
        seen_ready = False
        for _ in range(40):
            mode, n = rng.choice(list(Mode)), rng.randint(1, 4)
            p = plan(mode, n, list(pods.values()))
            for name in p.delete:
                del pods[name]
            ready = sum(r.ready for r in pods.values())
            if seen_ready:
                assert ready >= 1, (mode, n, pods)
            assert ready == p.ready_after
            for m, i in p.create:
                name = f"{m.value.lower()}-{i}"
                assert name not in pods
                pods[name] = Replica(name, m, i, False)
            for name, r in list(pods.items()):  # some pods become Ready (KWOK's pod-ready stage)
                if not r.ready and rng.random() < 0.5:
                    pods[name] = Replica(name, r.mode, r.index, True)
            seen_ready |= any(r.ready for r in pods.values())


# --------------------------------------------------------------------------- SODA with training jobs


def _node(name: str, gpus: int, unschedulable: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"unschedulable": unschedulable},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "96"}},
    }


def _bound(name: str, node: str, gpus: int, phase: str = "Running") -> dict[str, Any]:
    res = {"requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "metadata": {"name": name, "namespace": "d", "uid": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": res}]},
        "status": {"phase": phase},
    }


def _cpu_job(reason: str, phase: str = "Queued") -> dict[str, Any]:
    cond = [{"type": "Admitted", "status": "False", "reason": reason}]
    return {"spec": {"kind": "cpu"}, "status": {"phase": phase, "conditions": cond}}


def test_idle_gpus() -> None:
    nodes = [_node("a", 8), _node("b", 8), _node("c", 8, unschedulable=True)]
    pods = [_bound("p1", "a", 8), _bound("p2", "b", 3), _bound("p3", "b", 4, phase="Succeeded"), _bound("p4", "c", 1)]
    assert idle_gpus(nodes, pods) == 5


def test_soda_serves_on_gpu_while_cpu_jobs_queue_and_gpus_idle() -> None:
    nodes = [_node("a", 8)]
    queued = [_cpu_job("NoFit"), _cpu_job("BehindHead")]
    assert soda_prefers_gpu(queued, lambda: nodes, lambda: [])
    assert not soda_prefers_gpu(queued, lambda: nodes, lambda: [_bound("p", "a", 8)])  # no GPU idles
    assert not soda_prefers_gpu(queued[:1], lambda: nodes, lambda: [])  # one is not many
    # waiting for other reasons (no VirtualCluster, quota) or not queued: no CPU shortage
    other = [_cpu_job("VirtualClusterMissing"), _cpu_job("Quota"), _cpu_job("NoFit", phase="Running")]
    assert not soda_prefers_gpu(other, lambda: nodes, lambda: [])
    training = [
        {"spec": {"kind": "training"}, "status": {"phase": "Queued", "conditions": queued[0]["status"]["conditions"]}}
    ]
    assert not soda_prefers_gpu(training * 3, lambda: nodes, lambda: [])

    def never() -> list[Any]:
        raise AssertionError("nodes and pods are read only when CPU jobs queue")

    assert not soda_prefers_gpu([], never, never)


# --------------------------------------------------------------------------- one service's pass, decided


def _settle(status: dict[str, Any]) -> dict[str, Any]:
    """The status as the apiserver hands it back: JSON, None fields removed by the merge patch."""
    return {k: v for k, v in json.loads(json.dumps(status)).items() if v is not None}


def test_step_writes_what_the_crd_holds_and_nothing_twice() -> None:
    from qosmos.operator.crds import INFERENCE_SERVICE, crd
    from qosmos.operator.inference import Load, step

    spec = resolve_spec("ResNet50", 200, db=DB, gpu_switch_batch=20, cpu_max_batch=2, switch_cooldown_s=5)
    schema = crd(INFERENCE_SERVICE)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    now = quantize(1_700_000_000.5)
    first = step(spec, {}, Load(30.0, "Annotation"), now, [], generation=3)
    assert first.changed and first.decision is not None and first.decision.reason.value == "initial"
    assert (first.state.mode, first.state.replicas) == (Mode.CPU, 2) and first.plan.create == [
        (Mode.CPU, 0),
        (Mode.CPU, 1),
    ]
    have = _settle(first.status)
    # every field the operator writes is in the schema (the apiserver would prune an unknown one, and
    # the next pass would find it missing and write again, forever)
    assert set(have) <= set(schema["properties"])
    assert set(have["serving"]) == set(schema["properties"]["serving"]["properties"])
    back = InferenceServiceStatus.model_validate(have).model_dump(by_alias=True, exclude_none=True, mode="json")
    assert set(back) == set(have)
    assert have["serving"] == {"gpuSwitchBatch": 20, "gpuReplicaQPS": 200.0, "cpuMaxBatch": 2, "cpuReplicaQPS": 20.0}
    # the next pass, same load, replicas now up and Ready: one write (readiness), then nothing
    pods = [Replica("resnet-cpu-0", Mode.CPU, 0, True), Replica("resnet-cpu-1", Mode.CPU, 1, True)]
    second = step(spec, have, Load(30.0, "Annotation"), quantize(now + 1), pods, generation=3)
    assert second.changed and second.plan.create == [] and second.status["readyReplicas"] == 2
    third = step(spec, _settle(second.status), Load(30.0, "Annotation"), quantize(now + 2), pods, generation=3)
    assert not third.changed and third.decision is not None and third.decision.reason.value == "hold"


def test_step_without_a_load() -> None:
    from qosmos.operator.inference import Load, step

    spec = resolve_spec("ResNet50", 200, db=DB, gpu_switch_batch=20, cpu_max_batch=2, min_replicas=2)
    unknown = Load(None, "Prometheus", "Prometheus at http://p unreachable")
    new = step(spec, {}, unknown, 10.0, [])  # a new service: the safe mode at its minimum
    assert (new.state.mode, new.state.replicas) == (Mode.GPU, 2) and "observedQPS" not in new.status
    cond = {c["type"]: c for c in new.status["conditions"]}["LoadObserved"]
    assert (cond["status"], cond["reason"]) == ("False", "PrometheusUnavailable") and "unreachable" in cond["message"]
    have = _settle(step(spec, {}, Load(30.0, "Annotation"), 10.0, []).status)
    kept = step(spec, have, unknown, 20.0, [])  # a carried state: kept as it is, no decision
    assert kept.decision is None and (kept.state.mode, kept.state.replicas) == (Mode.CPU, 2)
    assert kept.status["reason"] == "hold" and "load unknown" in kept.status["message"]
    assert kept.status.get("observedAt") is None and kept.changed


# ---- switching ahead of the load (issue 23 §3) ---------------------------------------------------------


def test_step_plans_for_the_forecast_and_records_it() -> None:
    from qosmos.operator.inference import Load, step

    spec = resolve_spec("ResNet50", 200, db=DB, gpu_switch_batch=20, cpu_max_batch=2, switch_cooldown_s=5)
    now = quantize(1_700_000_000.5)
    plain = step(spec, {}, Load(30.0, "Annotation"), now, [])
    ahead = step(spec, {}, Load(30.0, "Annotation"), now, [], forecast_qps=150.1234567)
    assert plain.status["forecastQPS"] is None and ahead.status["forecastQPS"] == 150.123457  # rounded like the rate
    assert ahead.decision == decide(spec, None, 30.0, now, forecast_qps=150.123457)
    assert (plain.state.mode, ahead.state.mode) == (Mode.CPU, Mode.GPU)  # 150/s is no load for 8 CPU replicas
    assert InferenceServiceStatus.model_validate(_settle(ahead.status)).forecast_qps == 150.123457


def test_rate_history_keeps_the_largest_rate_of_each_slot() -> None:
    from qosmos.operator.inference import RateHistory

    h = RateHistory(10.0, limit=4)
    h.observe(100.0, 5.0)
    h.observe(104.0, 9.0)  # same slot: the larger
    h.observe(106.0, 2.0)
    h.observe(131.0, 1.0)  # two slots later: the gap repeats the last slot
    assert h.slots == [9.0, 9.0, 9.0, 1.0]
    h.observe(142.0, 3.0)  # past the limit: the oldest slot goes, the start moves on
    assert h.slots == [9.0, 9.0, 1.0, 3.0] and h.start == 110.0
    h.observe(50.0, 7.0)  # a clock that went back: a new history
    assert (h.start, h.slots) == (50.0, [7.0])


def test_the_controller_forecasts_and_a_restart_keeps_the_planned_band() -> None:
    from qosmos.operator.inference import InferenceController, Load

    ctl = InferenceController(object(), inference_profiles=inference_profiles.InferenceProfiles())  # type: ignore[arg-type]
    spec = InferenceServiceSpec.model_validate({"modelType": "ResNet50", "forecast": {"periodSeconds": 1}})
    bands = [ctl._forecast("ns/a", spec, Load(q, "Annotation"), float(t), {}) for t, q in enumerate([10, 40, 20])]
    assert bands == pytest.approx([12.0, 48.0, 48.0])  # the rule before the model: 1.2 x the recent largest
    # a restarted operator (no history) reads the band the status held: a floor until the history fills
    fresh = InferenceController(object(), inference_profiles=inference_profiles.InferenceProfiles())  # type: ignore[arg-type]
    assert fresh._forecast("ns/a", spec, Load(20.0, "Annotation"), 3.0, {"forecastQPS": 48.0}) == 48.0
    off = InferenceServiceSpec.model_validate({"modelType": "ResNet50", "forecast": {"enabled": False}})
    assert fresh._forecast("ns/a", off, Load(20.0, "Annotation"), 4.0, {}) is None
    assert fresh._forecast("ns/b", spec, Load(None, "Annotation", "no load"), 4.0, {}) is None
