"""Each metric on tiny traces with hand-computed answers."""

from __future__ import annotations

import pytest
from qosmos.extender.core import genie
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.types import Shape
from qosmos.simulator.engine import SimConfig, simulate
from qosmos.simulator.metrics import length_group, summarize
from qosmos.simulator.traces import load_native


def run(path, **kw):  # type: ignore[no-untyped-def]
    res = simulate(load_native(path), SimConfig(**kw))
    return res, summarize(res)


def test_fifo_two_jobs_one_gpu(tiny) -> None:  # type: ignore[no-untyped-def]
    # A: 0-10, B waits 10 s then runs 10-15
    _res, s = run(tiny("id,submit,gpus,duration\nA,0,1,10\nB,0,1,5"))
    assert s["jobs"] == 2
    assert s["avg_jct_s"] == pytest.approx(12.5)
    assert s["median_jct_s"] == pytest.approx(12.5)
    assert s["avg_queue_s"] == pytest.approx(5.0)
    assert s["queued_jobs"] == 1
    assert s["makespan_s"] == pytest.approx(15.0)
    assert s["gpu_utilization"] == pytest.approx(1.0)
    assert s["fragmentation"] == pytest.approx(1.0)
    # bounded slowdown: A max(1, 10/10) = 1; B 15/max(5, 10) = 1.5
    assert s["avg_bounded_slowdown"] == pytest.approx(1.25)
    assert s["qos_guarantee"] is None and s["normalized_latency"] is None
    assert s["by_length"]["short"]["jobs"] == 2
    assert s["by_vc"]["default"]["avg_queue_s"] == pytest.approx(5.0)
    assert s["by_size"]["1"]["queued_jobs"] == 1


def test_percentiles_and_util(tiny) -> None:  # type: ignore[no-untyped-def]
    # 2 GPUs; A (1 GPU, 0-100), B (1 GPU, 0-20), C (2 GPUs) waits for both: 100-110
    _res, s = run(tiny("id,submit,gpus,duration\nA,0,1,100\nB,0,1,20\nC,0,2,10", "name,gpus\nn0,2"))
    assert s["avg_jct_s"] == pytest.approx((100 + 20 + 110) / 3)
    assert s["p99_jct_s"] == pytest.approx(110 - 0.02 * (110 - 100))
    assert s["makespan_s"] == pytest.approx(110)
    # GPU-seconds: 100 + 20 + 20 = 140 over 2 GPUs x 110 s
    assert s["gpu_utilization"] == pytest.approx(140 / 220)
    # used GPUs / used nodes over time: 2 (0-20), 1 (20-100), 2 (100-110) -> (40 + 80 + 20) / 110
    assert s["fragmentation"] == pytest.approx(140 / 110)


def test_fragmentation_two_nodes(tiny) -> None:  # type: ignore[no-untyped-def]
    # two 4-GPU nodes, two 1-GPU jobs spread by first-fit? consolidate packs them on one node
    _, s = run(tiny("id,submit,gpus,duration\nA,0,1,10\nB,0,1,10", "name,gpus\nn0,4\nn1,4"))
    assert s["fragmentation"] == pytest.approx(2.0)
    _, s = run(tiny("id,submit,gpus,duration\nA,0,4,10\nB,0,1,10", "name,gpus\nn0,4\nn1,4"))
    assert s["fragmentation"] == pytest.approx(2.5)


def test_qos_and_normalized_latency(tiny) -> None:  # type: ignore[no-untyped-def]
    # one GPU; U is urgent (deadline = submit) -> missed; N is normal, alone after U -> check by hand
    jobs = "id,submit,gpus,model,batch,iters,qos\nU,0,1,ResNet50,64,100,urgent\nN,0,1,ResNet50,64,100,normal"
    res, s = run(tiny(jobs), policy="fifo")
    db = ModelDB.builtin()
    task = genie.Task("ResNet50", 64, 100)
    lat = genie.latency(task, Shape(1, 1), db.get("ResNet50"))
    assert res.end[0] == pytest.approx(lat) and res.end[1] == pytest.approx(2 * lat)
    # U misses (deadline 0), N finishes at 2*lat <= 0 + 2*lat -> guaranteed: 50 %
    assert s["qos_guarantee"] == pytest.approx(50.0)
    assert s["normalized_latency"] == pytest.approx((1.0 + 2.0) / 2)
    assert s["genie_jobs"] == 2


def test_length_groups() -> None:
    assert length_group(60) == "short" and length_group(3600) == "middle" and length_group(7 * 3600) == "long"


def test_backfill_violation_counted(tiny) -> None:  # type: ignore[no-untyped-def]
    # predicted durations lie: X predicted 10 s but runs 100 s, so backfilling it delays the head
    jobs = "id,submit,gpus,duration,predicted_duration\nA,0,1,50,50\nH,1,2,10,10\nX,2,1,100,10"
    res, s = run(tiny(jobs, "name,gpus\nn0,2"), backfill="easy")
    assert res.backfilled[2] and s["backfill_violations"] == 1
    assert res.start[1] == pytest.approx(102)
