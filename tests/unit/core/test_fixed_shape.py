"""A job whose shape the user fixed (Job.nodes > 0, the DLJob's gpusPerNode) keeps that shape under every
policy and placer; GENIE policies still estimate it (seed 001 Eq. 4-13) and a wait says the shape is why.

The profile is made for arithmetic on paper: sPR = 100 samples/s at any local batch (Eq. 7 with k1 = k2 = 0),
γ = λ = 0.5 (Eq. 8), ν = 0 (Eq. 4); tasks of b = 8, iters = 100 (800 samples) on a 2 × 4-GPU platform, θ = 0.4.
  Comm(s) = ((d_node − 1) d_gpn + λ (d_gpn − 1)) γ / (n − 1);  Lat(s) = 800 / ((n − Comm(s)) 100)
  ⟨1,1⟩: Lat 8 s, so a Prior task's ECT is 8 s (Eq. 9)
  ⟨2,1⟩: Comm = 0.5,        PR = 150,            Lat = 16/3 s
  ⟨4,1⟩: Comm = 3 · 0.5 / 3 = 0.5, PR = 350,     Lat = 16/7 s   (larger than the platform)
  ⟨2,2⟩: Comm = 2.5 · 0.5 / 3 = 5/12, PR = 358.3, Lat = 96/43 s
  ⟨2,4⟩: Comm = 5.5 · 0.5 / 7 = 11/28, PR = 760.7, Lat = 800 / (100 (8 − 11/28)) s,
         Cost = 8/8 + 0.4 · 2/2 = 1.4, CER = 543.4 — the best CER (⟨1,4⟩: PR 375, Cost 0.7, CER 535.7;
         ⟨2,3⟩: 487.0; ⟨1,3⟩: 478.3; ⟨2,2⟩: 398.1; ⟨1,2⟩: 388.9; ⟨1,1⟩: 307.7; ⟨2,1⟩: 230.8),
         and feasible for a Prior task (Lat ≤ 8), so SWAF, Tetris+CER and Tetris+Perf (max PR) choose it freely.
"""

from __future__ import annotations

import pytest
from qosmos.extender.core import genie
from qosmos.extender.core.admission import (
    BLOCKED,
    HEAD,
    INADMISSIBLE,
    NO_FIT,
    Partition,
    PartitionRuntime,
    RunningJob,
    admit,
)
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.ordering import POLICIES, OrderContext, get_policy
from qosmos.extender.core.placement import PLACERS
from qosmos.extender.core.types import Allocation, Job, Node, NodeGrant, Platform, Shape

PROFILE = genie.ThroughputProfile("m", 100.0, 0.0, 0.0, gamma=0.5, lam=0.5, nu=0.0)
DB = ModelDB([PROFILE])
PLATFORM = Platform(2, 4)
GENIE_POLICIES = sorted(n for n in POLICIES if get_policy(n).uses_genie)
CHOOSING = ("swaf", "tetris-cer", "tetris-perf")  # the GENIE policies that pick a shape themselves


def task(jid: str, gpus: int, nodes: int = 0, submit: float = 0.0) -> Job:
    return Job(jid, submit, gpus, model="m", batch=8, iters=100, qos="prior", nodes=nodes)


def cluster() -> ClusterState:
    return ClusterState([Node("n0", 4), Node("n1", 4)])


def ctx(now: float = 0.0) -> OrderContext:
    return OrderContext(now=now, platform=PLATFORM, modeldb=DB, total_gpus=8)


def shape_of(alloc: Allocation | None) -> tuple[int, list[int]]:
    assert alloc is not None
    return len({g.node for g in alloc.grants}), [len(g.gpu_ids) for g in alloc.grants]


def test_the_fixed_shape_is_nodes_by_gpus_over_nodes() -> None:
    assert task("a", 8, nodes=2).fixed_shape == Shape(2, 4)
    assert task("a", 8).fixed_shape is None  # the placer (or GENIE) chooses
    assert Job("c", 0, 0, kind="cpu", nodes=1).fixed_shape is None  # no GPU gang
    with pytest.raises(InvalidInput, match="do not split evenly"):
        Job("u", 0, 6, nodes=4)


# ---- GENIE policies: the fixed shape is the only candidate, estimated as GENIE would ----------------


@pytest.mark.parametrize("name", CHOOSING)
def test_free_genie_choice_is_the_best_cer_or_pr_shape(name: str) -> None:
    # regression (nodes = 0): ⟨2,4⟩ as worked out above, even for a 2-GPU request
    (d,) = get_policy(name).order([task("free", 2)], ctx())
    assert d.shape == Shape(2, 4)


def test_swaf_estimates_the_fixed_shape() -> None:
    # a Prior task at now = 0: deadline 0 + 8; w = 8 − (Lat + 0) (Eq. 13). SWAF's order is ascending w:
    # 8 − 16/3 = 2.67 for the fixed ⟨2,1⟩ < 8 − 1.05 = 6.95 for the free ⟨2,4⟩, so the fixed task goes first
    fixed, free = get_policy("swaf").order([task("free", 2), task("fixed", 2, nodes=2)], ctx())
    assert fixed.job.id == "fixed" and free.job.id == "free"
    assert free.shape == Shape(2, 4) and free.waiting_allowance == pytest.approx(8 - 800 / (100 * (8 - 11 / 28)))
    assert fixed.shape == Shape(2, 1) and fixed.waiting_allowance == pytest.approx(8 - 16 / 3)


def test_a_fixed_shape_larger_than_the_platform_is_still_estimated() -> None:
    # ⟨4,1⟩ on 2 nodes: no placement table holds it (Alg. 1 enumerates the platform); w = 8 − 16/7
    (d,) = get_policy("swaf").order([task("big", 4, nodes=4)], ctx())
    assert d.shape == Shape(4, 1) and d.waiting_allowance == pytest.approx(8 - 16 / 7)
    for name in ("tetris-cer", "tetris-perf"):
        (d,) = get_policy(name).order([task("big", 4, nodes=4)], ctx())
        assert d.shape == Shape(4, 1)


@pytest.mark.parametrize("name", GENIE_POLICIES)
def test_genie_policies_start_the_fixed_shape(name: str) -> None:
    # A 2-GPU task fixed to 2 nodes × 1 GPU, where SWAF/Tetris alone would take ⟨2,4⟩ (8 GPUs).
    rt = PartitionRuntime(Partition("default", policy=name, placement="cer"), ctx())
    (s,) = admit(rt, [task("fixed", 2, nodes=2)], [], cluster(), 0.0).starts
    assert s.shape in (None, Shape(2, 1))  # Min-Min and Weighted Fair leave the shape to the placer
    assert shape_of(s.allocation) == (2, [1, 1])


@pytest.mark.parametrize("placement", sorted(PLACERS))
def test_every_placer_realises_the_fixed_shape(placement: str) -> None:
    # 2 GPUs would fit one node (consolidate, best-fit, free-gpu take one); fixed to 2 nodes, each gives 1
    rt = PartitionRuntime(Partition("default", policy="fifo", placement=placement))
    (s,) = admit(rt, [Job("fixed", 0, 2, nodes=2)], [], cluster(), 0.0).starts
    assert shape_of(s.allocation) == (2, [1, 1])


def test_swaf_nodes_zero_keeps_its_own_shape() -> None:
    rt = PartitionRuntime(Partition("default", policy="swaf", placement="cer"), ctx())
    (s,) = admit(rt, [task("free", 2)], [], cluster(), 0.0).starts
    assert s.shape == Shape(2, 4) and shape_of(s.allocation) == (2, [4, 4])


# ---- waiting because of the fixed shape -------------------------------------------------------------


def test_a_fixed_shape_larger_than_the_platform_waits_and_says_why() -> None:
    # SWAF alone would start ⟨2,4⟩ on the empty cluster; the user's ⟨4,1⟩ needs 4 nodes of the 2
    rt = PartitionRuntime(Partition("default", policy="swaf", placement="cer"), ctx())
    res = admit(rt, [task("big", 4, nodes=4)], [], cluster(), 0.0)
    assert res.starts == []
    (w,) = res.waiting
    assert w.code == INADMISSIBLE and w.needs == "4 node(s) × 1 GPUs (fixed)"  # never fits: no queue's head
    assert "its fixed shape can never fit in default: only 2 eligible nodes have 1 GPUs; placement needs 4" in (
        w.message
    )
    assert w.waiting_allowance == pytest.approx(8 - 16 / 7)


def test_a_fixed_shape_without_fitting_nodes_waits_and_says_why() -> None:
    # n0 has 1 GPU free (3 held), n1 4: 5 free GPUs, but ⟨2,2⟩ needs two nodes with 2 free each.
    c = cluster()
    held = Allocation((NodeGrant(0, (0, 1, 2)),))
    c.allocate(held)
    running = [RunningJob(Job("r", 0, 3, duration=100), 0, 100, held)]
    for policy, placement in (("swaf", "cer"), ("fifo", "consolidate"), ("fifo", "free-gpu")):
        rt = PartitionRuntime(Partition("default", policy=policy, placement=placement), ctx())
        (w,) = admit(rt, [task("fixed", 4, nodes=2)], running, c, 0.0).waiting
        assert w.code == HEAD, policy
        assert w.message.startswith(
            "needs 2 node(s) × 2 GPUs (fixed) in default; 5 GPUs free in default; 1 node(s) have 2 free; "
            "its fixed shape does not fit the free resources now"
        ), (policy, placement, w.message)
    # backfilling: the head's line keeps its reservation; a job behind it that does not fit says so too
    rt = PartitionRuntime(Partition("default", placement="consolidate", backfill="easy"))
    res = admit(
        rt,
        [Job("fixed", 0, 4, nodes=2, duration=10), Job("also", 1, 4, nodes=2, duration=10)],
        running,
        c,
        0.0,
        estimate=lambda j, a: j.duration or 0.0,
    )
    head, behind = res.waiting
    assert head.code == HEAD and "its fixed shape does not fit the free resources now; head of the queue; " in (
        head.message
    )
    assert behind.code == NO_FIT and behind.message.endswith("its fixed shape does not fit the free resources now")


def test_capacity_does_not_shrink_a_fixed_shape() -> None:
    # type m's share is 1/4 of 8 GPUs = 2: a free GENIE task of 4 GPUs runs on ⟨1,2⟩; a fixed one cannot shrink
    order_ctx = OrderContext(total_gpus=8, capacity_shares={"m": 0.25, "other": 0.75}, platform=PLATFORM)
    free, fixed = get_policy("capacity").order([task("free", 4), task("fixed", 4, nodes=2, submit=1)], order_ctx)
    assert free.shape == Shape(1, 2) and free.blocked is None
    assert fixed.blocked == "needs its fixed shape 2 node(s) × 2 GPUs, more than model type 'm''s share of 2"
    rt = PartitionRuntime(Partition("default", policy="capacity"), order_ctx)
    res = admit(rt, [task("fixed", 4, nodes=2)], [], cluster(), 0.0)
    assert res.starts == [] and [w.code for w in res.waiting] == [BLOCKED]
