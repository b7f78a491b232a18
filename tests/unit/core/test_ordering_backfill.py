"""Ordering policies and backfilling."""

from __future__ import annotations

import math

import pytest
from qosmos.extender.core import genie
from qosmos.extender.core.backfill import expected_run, relax_factor
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.ordering import POLICIES, OrderContext, get_policy, mlfq_level, mlfq_next_demotion
from qosmos.extender.core.types import Allocation, Job, JobKind, Node, NodeGrant, Platform, Shape

DB = ModelDB.builtin()


def ids(decisions: list) -> list[str]:
    return [d.job.id for d in decisions]


def test_key_policies() -> None:
    jobs = [
        Job("a", 0, gpus=4, duration=100, predicted_duration=10),
        Job("b", 1, gpus=1, duration=50, predicted_duration=30),
        Job("c", 2, gpus=2, duration=10, predicted_duration=None, executed=0),
    ]
    ctx = OrderContext()
    assert ids(get_policy("fifo").order(jobs, ctx)) == ["a", "b", "c"]
    assert ids(get_policy("sjf").order(jobs, ctx)) == ["c", "b", "a"]
    # QSSF ranks by predicted GPU time: a = 4 x 10 = 40, b = 30; c has no prediction: last
    assert ids(get_policy("qssf").order(jobs, ctx)) == ["b", "a", "c"]
    jobs[0].executed = 95  # 5 s remaining
    assert ids(get_policy("srtf").order(jobs, ctx)) == ["a", "c", "b"]
    assert get_policy("srtf").preemptive and not get_policy("sjf").preemptive


def test_las_and_mlfq() -> None:
    a = Job("a", 0, gpus=4, attained=4000)  # past the first 3250 GPU-s quantum
    b = Job("b", 1, gpus=1, attained=100)
    c = Job("c", 2, gpus=1, attained=20000)
    assert ids(get_policy("las").order([a, b, c], OrderContext())) == ["b", "a", "c"]
    assert [mlfq_level(j) for j in (a, b, c)] == [1, 0, 2]
    assert ids(get_policy("mlfq").order([c, a, b], OrderContext())) == ["b", "a", "c"]
    # b demotes after (3250 - 100) GPU-s on 1 GPU; a after (3250 + 7200 - 4000) / 4 s
    assert mlfq_next_demotion(b) == pytest.approx(3150)
    assert mlfq_next_demotion(a) == pytest.approx((10450 - 4000) / 4)
    assert mlfq_next_demotion(c) is None
    # a quantum used up to float rounding is used (else the next demotion is 4.5e-13 s away, forever)
    edge = Job("e", 0, gpus=1, attained=3249.9999999999964)
    assert mlfq_level(edge) == 1 and mlfq_next_demotion(edge) == pytest.approx(7200)


def genie_job(
    jid: str,
    submit: float,
    qos: str,
    model: str = "ResNet50",
    batch: int = 256,
    iters: int = 2000,
    kind: str = "training",
) -> Job:
    return Job(jid, submit, gpus=1, model=model, batch=batch, iters=iters, qos=qos, kind=kind)


def test_swaf_orders_by_waiting_allowance_and_places_by_cer() -> None:
    jobs = [genie_job("normal", 0, "normal"), genie_job("urgent", 5, "urgent"), genie_job("prior", 10, "prior")]
    ctx = OrderContext(now=20, platform=Platform(4, 4), modeldb=DB)
    out = get_policy("swaf").order(jobs, ctx)
    assert ids(out) == ["urgent", "prior", "normal"]
    allowances = [d.waiting_allowance for d in out]
    assert allowances == sorted(allowances)
    for d in out:
        expected = genie.evaluate_placements(genie.Task.from_job(d.job), DB.get("ResNet50"), ctx.platform, 20)
        assert d.shape == expected.chosen.shape
        assert d.waiting_allowance == pytest.approx(expected.waiting_allowance)
        # a task within its allowance is decided anew when it runs out (an urgent one's has: never again)
        spent = expected.waiting_allowance < 0
        assert d.choice_until == (math.inf if spent else genie.feasible_until(expected.chosen.lat, expected.deadline))
    assert out[-1].choice_until < math.inf


def test_minmin_wfair_tetris() -> None:
    jobs = [genie_job("late-deadline", 0, "normal"), genie_job("early-deadline", 100, "urgent")]
    ctx = OrderContext(now=200, platform=Platform(4, 4), modeldb=DB)
    assert ids(get_policy("minmin").order(jobs, ctx)) == ["early-deadline", "late-deadline"]
    assert ids(get_policy("wfair").order(jobs, ctx)) == ["early-deadline", "late-deadline"]
    perf = get_policy("tetris-perf").order(jobs, ctx)
    cer = get_policy("tetris-cer").order(jobs, ctx)
    assert ids(perf) == ["late-deadline", "early-deadline"]  # arrival order
    table = genie.placement_table(genie.Task.from_job(jobs[0]), DB.get("ResNet50"), Platform(4, 4))
    assert perf[0].shape == max(table, key=lambda r: (r.pr, -r.shape.gpus)).shape
    assert cer[0].shape == max(table, key=lambda r: (r.cer, -r.shape.gpus)).shape


def test_capacity_blocks_a_model_type_over_its_share() -> None:
    jobs = [Job("r1", 0, gpus=4, model="ResNet50"), Job("l1", 1, gpus=2, model="LSTM")]
    ctx = OrderContext(total_gpus=16, usage_by_model={"ResNet50": 6, "LSTM": 0})
    out = get_policy("capacity").order(jobs, ctx)  # equal shares: 8 GPUs each
    assert out[0].blocked and "ResNet50" in out[0].blocked
    assert out[1].blocked is None


def test_capacity_shares_go_to_the_model_types_waiting_or_running() -> None:
    # DCGAN's jobs are all done (the simulator's tally keeps it at 0): BERT alone shares the 2 GPUs.
    # Counted as a type, it left BERT a share of 1, and a fixed 2-GPU BERT job never started
    jobs = [Job("b", 0, gpus=2, nodes=1, model="BERT")]
    for usage in ({"DCGAN": 0}, {}):
        out = get_policy("capacity").order(jobs, OrderContext(total_gpus=2, usage_by_model=usage))
        assert out[0].blocked is None
    out = get_policy("capacity").order(jobs, OrderContext(total_gpus=2, usage_by_model={"DCGAN": 1}))
    assert out[0].blocked and "share of 1" in out[0].blocked


def test_capacity_runs_a_task_over_its_share_on_what_its_batch_can_use() -> None:
    # BERT's share is 4 of 8 GPUs; a 5-GPU task of batch 1 can use one GPU (one sample per GPU at
    # least, Eq. 6): it runs on 1 (the share's 4 would leave 3 idle, and it was blocked for ever)
    jobs = [Job("b", 0, gpus=5, model="BERT", batch=1, iters=10), Job("d", 1, gpus=1, model="DCGAN", batch=8, iters=1)]
    ctx = OrderContext(total_gpus=8, platform=Platform(1, 8), usage_by_model={})
    out = get_policy("capacity").order(jobs, ctx)
    assert out[0].blocked is None and out[0].shape == Shape(1, 1)
    wide = [Job("b", 0, gpus=5, model="BERT", batch=64, iters=10), jobs[1]]
    assert get_policy("capacity").order(wide, ctx)[0].shape == Shape(1, 4)  # the share, as before
    # nodes of 4, 2 and 2 GPUs, BERT alone shares all 8: 9 GPUs asked, 2 whole nodes of 4 do not exist
    uneven = OrderContext(total_gpus=8, platform=Platform.of([4, 2, 2]), usage_by_model={})
    big = [Job("b", 0, gpus=9, model="BERT", batch=64, iters=10)]
    assert get_policy("capacity").order(big, uneven)[0].shape == Shape(1, 4)


def test_soda_multi_array_with_drf() -> None:
    jobs = [
        Job("big-u1", 0, gpus=8, user="u1"),
        Job("one-u1", 1, gpus=1, user="u1"),
        Job("one-u2", 2, gpus=1, user="u2"),
        Job("cpu", 3, gpus=0, kind=JobKind.CPU, user="u1", cpu_milli=1000),
    ]
    ctx = OrderContext(total_gpus=100, total_cpu_milli=100_000, usage_by_user={"u1": (40, 0), "u2": (5, 0)})
    out = get_policy("soda").order(jobs, ctx)
    assert [(d.queue, d.job.id) for d in out] == [
        ("cpu", "cpu"),
        ("gpu-1", "one-u2"),
        ("gpu-1", "one-u1"),
        ("gpu-4", "big-u1"),
    ]


def test_every_registered_policy_runs_on_a_mixed_queue() -> None:
    jobs = [
        genie_job(str(i), i, ["urgent", "prior", "normal"][i % 3], model=m)
        for i, m in enumerate(["ResNet50", "LSTM", "AlexNet", "Seq2seq", "GoogleNet", "Inception-v3"])
    ]
    jobs.append(Job("cpu", 9, gpus=0, kind="cpu", cpu_milli=100))
    ctx = OrderContext(now=50, platform=Platform(4, 4), modeldb=DB, total_gpus=16, total_cpu_milli=64000)
    for name in POLICIES:
        out = get_policy(name).order(jobs, ctx)
        assert sorted(ids(out)) == sorted(j.id for j in jobs), name
        for d in out:
            assert d.shape is None or isinstance(d.shape, Shape)
    with pytest.raises(InvalidInput):
        get_policy("lottery")


# ---- backfilling ------------------------------------------------------------------------


def test_relax_factor_modes() -> None:
    assert relax_factor("easy", 0.1, 50, 100) == 0
    assert relax_factor("relaxed", 0.1, 50, 100) == 0.1
    assert relax_factor("adaptive", 0.1, 50, 100) == pytest.approx(0.05)  # 004 §VI-B formula (1)
    with pytest.raises(InvalidInput):
        relax_factor("aggressive", 0.1, 1, 1)


def test_a_genie_tasks_estimate_is_its_latency_at_the_allocation_times_its_work_left() -> None:
    """Backfilling's estimate (the simulator's and the operator's): a GENIE task runs Eq. 4's latency at the
    shape it is given, on the GPU model of its node, for the work it has left; the predictor is not asked.
    A job GENIE cannot model (no model type, or one without a profile) gets its prediction less what it ran."""
    cl = ClusterState([Node("a", 4, gpu_model="V100M32"), Node("b", 4, gpu_model="A100")])
    task = Job("t", 0, gpus=2, model="ResNet50", batch=64, iters=1000, predicted_duration=5.0)
    on_a = Allocation((NodeGrant(0, (0, 1)),))
    on_b = Allocation((NodeGrant(1, (0, 1)),))
    two_nodes = Allocation((NodeGrant(0, (0,)), NodeGrant(1, (0,))))
    full_a = genie.latency(genie.Task.from_job(task), Shape(1, 2), DB.get("ResNet50", "V100M32"))
    assert expected_run(task, on_a, 5.0, cl, DB) == pytest.approx(full_a)
    assert expected_run(task, on_b, 5.0, cl, DB) == pytest.approx(
        genie.latency(genie.Task.from_job(task), Shape(1, 2), DB.get("ResNet50", "A100"))
    )
    assert expected_run(task, two_nodes, 5.0, cl, DB) != pytest.approx(full_a)  # 2 x 1 on V100: another shape
    task.work_left, task.executed = 0.25, 123.0
    assert expected_run(task, on_a, 5.0, cl, DB) == pytest.approx(full_a / 4)
    plain = Job("p", 0, gpus=2, predicted_duration=100.0, executed=30.0)
    assert expected_run(plain, on_a, 100.0, cl, DB) == 70.0
    assert expected_run(plain, on_a, None, cl, DB) == math.inf
    unknown = Job("u", 0, gpus=2, model="NoSuchNet", batch=64, iters=10, predicted_duration=9.0)
    assert expected_run(unknown, on_a, 9.0, cl, DB) == 9.0
    assert expected_run(task, None, 500.0, cl, DB) == 500.0 - 123.0  # no allocation to model: the prediction


def test_work_left_after_a_segment_counts_it_at_that_shapes_latency() -> None:
    """A task stopped after a quarter of its latency at one shape has three quarters of its work left,
    which it runs at whatever shape it resumes on; never below 0 or above what it had."""
    assert genie.work_left_after(1.0, 25.0, 100.0) == 0.75
    assert genie.work_left_after(0.75, 50.0, 200.0) == 0.5
    assert genie.work_left_after(0.1, 500.0, 100.0) == 0.0
    assert genie.work_left_after(0.5, 10.0, math.inf) == 0.5  # a shape that never ends it did no work
    assert genie.run_shape([2, 2]) == Shape(2, 2) and genie.run_shape([4, 1]) == Shape(2, 4)
    with pytest.raises(InvalidInput, match="work_left"):
        Job("x", 0, work_left=1.5)
