"""GENIE formulas (seed 001 §5) on hand-computed cases, plus property tests."""

from __future__ import annotations

import itertools
import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from qosmos.extender.core import genie
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import JobKind, Platform, QoSClass, Shape

# sPR(b') = 10 + 2 b' on [1, inf): easy to compute by hand.
LINEAR = genie.ThroughputProfile("toy", 10.0, 2.0, 0.0, gamma=0.5, lam=0.2, nu=5.0, b_min=1.0)
P44 = Platform(4, 4)


def test_comm_cases_eq8() -> None:
    assert genie.comm(Shape(1, 1), 0.5, 0.2) == 0.0
    # ((2-1)*2 + 0.2*(2-1)) * 0.5 / (4-1)
    assert genie.comm(Shape(2, 2), 0.5, 0.2) == pytest.approx(2.2 * 0.5 / 3)
    # d_node = 1 < d_gpn: λ(d_gpn-1)γ/(d_gpn-1) = λγ
    assert genie.comm(Shape(1, 4), 0.5, 0.2) == pytest.approx(0.1)
    # d_gpn = 1 < d_node: (d_node-1)γ/(d_node-1) = γ
    assert genie.comm(Shape(3, 1), 0.5, 0.2) == pytest.approx(0.5)
    assert genie.comm(Shape(4, 4), 0.5, 0.2, JobKind.INFERENCE) == 0.0


def test_spr_pr_lat_cost_cer_by_hand() -> None:
    task = genie.Task("toy", batch=32, iters=100)
    assert LINEAR.spr(8) == 26.0
    pr = genie.processing_rate(task, Shape(2, 2), LINEAR)
    assert pr == pytest.approx((4 - 2.2 * 0.5 / 3) * 26.0)  # Eq. 5 with b' = 32/4 = 8
    assert genie.latency(task, Shape(2, 2), LINEAR) == pytest.approx(32 * 100 / pr + 5.0)  # Eq. 4
    assert genie.cost(Shape(2, 2), P44) == pytest.approx(4 / 16 + 0.4 * 2 / 4)  # Eq. 10
    assert genie.cer(task, Shape(2, 2), LINEAR, P44) == pytest.approx(pr / 0.45)  # Eq. 11
    # single GPU: PR = sPR(32) = 74, Lat = 3200/74 + 5
    assert genie.latency(task, Shape(1, 1), LINEAR) == pytest.approx(3200 / 74 + 5)


def test_spr_outside_fitted_range() -> None:
    p = genie.ThroughputProfile("m", 100.0, 1.0, 0.0, b_min=32, b_max=128)
    assert p.spr(16) == pytest.approx(p.spr(32) / 2)  # linear below b_min
    assert p.spr(512) == p.spr(128)  # held above b_max
    concave = genie.ThroughputProfile("c", 0.0, 10.0, -0.05, b_min=1, b_max=100)  # measured up to the peak
    assert concave.spr(1000) == pytest.approx(concave.spr(100))
    with pytest.raises(InvalidInput, match="local_batch"):
        p.spr(0)


def test_ect_eq9_and_deadline() -> None:
    base = genie.latency(genie.Task("toy", 32, 100), Shape(1, 1), LINEAR)
    for qos, factor in ((QoSClass.URGENT, 0.0), (QoSClass.PRIOR, 1.0), (QoSClass.NORMAL, 2.0)):
        task = genie.Task("toy", 32, 100, qos=qos, submit=50.0)
        assert genie.ect(task, LINEAR) == pytest.approx(factor * base)
        assert genie.deadline(task, LINEAR) == pytest.approx(50.0 + factor * base)


def test_choice_prefers_feasible_max_cer_then_overall_max_cer() -> None:
    task = genie.Task("toy", 32, 100, qos=QoSClass.PRIOR, submit=0.0)
    d = genie.evaluate_placements(task, LINEAR, P44, now=0.0)
    feasible = [r for r, ok in zip(d.table, d.feasible, strict=True) if ok]
    assert d.chosen == max(feasible, key=lambda r: r.cer)
    assert d.waiting_allowance == pytest.approx(d.deadline - d.chosen.lat)
    # Urgent: nothing is feasible (e = 0), so the overall max-CER placement is chosen, w < 0.
    urgent = genie.evaluate_placements(genie.Task("toy", 32, 100, qos="urgent"), LINEAR, P44, now=0.0)
    assert not any(urgent.feasible)
    assert urgent.chosen == max(urgent.table, key=lambda r: r.cer)
    assert urgent.waiting_allowance < 0


def test_enumeration_respects_platform_and_batch() -> None:
    shapes = genie.enumerate_shapes(P44)
    assert len(shapes) == 16 and Shape(4, 4) in shapes
    assert all(s.gpus <= 6 for s in genie.enumerate_shapes(P44, batch=6))  # b' >= 1


def test_invalid_inputs_name_the_field() -> None:
    with pytest.raises(InvalidInput) as exc:
        genie.Task("toy", batch=0, iters=10)
    assert exc.value.field == "batch"
    with pytest.raises(InvalidInput) as exc:
        genie.Task("toy", batch=8, iters=10, qos="extreme")
    assert exc.value.field == "qos"
    with pytest.raises(InvalidInput) as exc:
        genie.evaluate_placements(genie.Task("toy", 8, 10), LINEAR, P44, 0.0, shapes=[Shape(5, 1)])
    assert exc.value.field == "shape"
    with pytest.raises(InvalidInput) as exc:
        genie.cost(Shape(1, 1), P44, theta=-1)
    assert exc.value.field == "theta"
    with pytest.raises(InvalidInput):
        genie.ThroughputProfile("bad", -10.0, 0.0, 0.0)


def test_fit_spr_recovers_quadratic_and_degrades() -> None:
    b = [16, 32, 64, 128]
    r = [100 + 3 * x - 0.01 * x * x for x in b]
    k0, k1, k2 = genie.fit_spr(b, r)
    assert (k0, k1, k2) == pytest.approx((100, 3, -0.01), rel=1e-9)
    assert genie.fit_spr([64, 128], [10.0, 20.0]) == pytest.approx((0.0, 10 / 64, 0.0))
    with pytest.raises(InvalidInput):
        genie.fit_spr([32], [-1.0])


def test_fit_comm_recovers_gamma_lambda() -> None:
    truth = genie.ThroughputProfile("t", 50.0, 4.0, 0.0, gamma=0.6, lam=0.25)
    shapes = [Shape(1, 2), Shape(1, 4), Shape(2, 1), Shape(4, 1), Shape(2, 2)]
    rates = [genie.processing_rate(genie.Task("t", 256, 1), s, truth) for s in shapes]
    gamma, lam = genie.fit_comm(shapes, 256, rates, truth)
    assert gamma == pytest.approx(0.6) and lam == pytest.approx(0.25)


def test_metrics_eq14_eq16() -> None:
    assert genie.qos_guaranteed(10.0, 10.0) and not genie.qos_guaranteed(10.1, 10.0)
    assert genie.normalized_latency(300.0, 100.0) == 3.0


# ---- properties -------------------------------------------------------------------------

shapes_st = st.builds(Shape, st.integers(1, 16), st.integers(1, 8))
coef = st.floats(0.0, 5.0, allow_nan=False)


@given(coef, coef)
def test_comm_is_zero_on_one_gpu(gamma: float, lam: float) -> None:
    assert genie.comm(Shape(1, 1), gamma, lam) == 0.0


@given(shapes_st, st.floats(0.0, 5.0), st.floats(0.01, 5.0))
def test_cer_falls_when_theta_rises(shape: Shape, theta: float, delta: float) -> None:
    platform = Platform(16, 8)
    task = genie.Task("toy", 4096, 10)
    assert genie.cer(task, shape, LINEAR, platform, theta + delta) < genie.cer(task, shape, LINEAR, platform, theta)


@given(
    st.sampled_from(list(QoSClass)), st.floats(0, 1e6), st.floats(0, 1e5), st.integers(1, 4096), st.integers(1, 10_000)
)
def test_allowance_plus_latency_plus_now_is_deadline(
    qos: QoSClass, submit: float, wait: float, batch: int, iters: int
) -> None:
    task = genie.Task("toy", batch, iters, qos=qos, submit=submit)
    now = submit + wait
    d = genie.evaluate_placements(task, LINEAR, P44, now)
    assert math.isclose(d.waiting_allowance + d.chosen.lat + now, d.deadline, rel_tol=1e-9, abs_tol=1e-6)


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), max_size=50))
def test_swaf_is_a_stable_ascending_sort(allowances: list[float]) -> None:
    order = genie.swaf_order(allowances)
    assert sorted(order) == list(range(len(allowances)))
    for a, b in itertools.pairwise(order):
        assert allowances[a] < allowances[b] or (allowances[a] == allowances[b] and a < b)


# ---- Eq. 7 literally for explicit coefficients; the saturation guard only beyond a measured range ----


def test_explicit_coefficients_evaluate_eq7_literally() -> None:
    # sPR(b') = 100 + 2 b' - 0.01 b'^2 (no measured range: b_max = inf)
    p = genie.ThroughputProfile("c", 100.0, 2.0, -0.01)
    assert p.spr(150) == pytest.approx(175.0)  # past the vertex (b' = 100): not held at sPR(100) = 200
    assert p.spr(0.5) == pytest.approx(100.0 + 1.0 - 0.0025)  # below 1 sample: still Eq. 7
    assert p.spr(300) == 0.0  # 100 + 600 - 900 < 0: no rate
    assert not p.extrapolated(150) and not p.extrapolated(300)
    # batch 600 on <1,2>: b' = 300, sPR <= 0 -> PR 0, latency infinite, never feasible
    task = genie.Task("c", 600, 10, qos="normal")
    row = genie.placement_table(task, p, P44, shapes=[Shape(1, 2)])[0]
    assert row.pr == 0.0 and math.isinf(row.lat)
    # Eq. 7 positive somewhere is enough; nowhere positive is bad input
    genie.ThroughputProfile("late", -30.0, 20.0, 0.0)  # sPR(1) < 0 but sPR(2) = 10
    with pytest.raises(InvalidInput):
        genie.ThroughputProfile("never", -1.0, 0.0, -1.0)


def test_saturation_guard_only_beyond_the_measured_range() -> None:
    # a database profile measured on b' in [32, 128]
    p = genie.ThroughputProfile("db", 100.0, 2.0, -0.01, b_min=32, b_max=128)
    assert p.spr(100) == pytest.approx(200.0)  # inside: Eq. 7
    assert p.spr(120) == pytest.approx(100 + 240 - 144)  # inside, past the vertex: still Eq. 7
    assert p.spr(512) == pytest.approx(100 + 256 - 163.84)  # beyond: held at sPR(128)
    assert p.spr(16) == pytest.approx((100 + 64 - 10.24) / 2)  # below: scaled linearly
    assert [p.extrapolated(b) for b in (16, 32, 100, 128, 129)] == [True, False, False, False, True]


def test_enumeration_is_bounded_whatever_the_platform() -> None:
    shapes = genie.enumerate_shapes(Platform(64, 128), batch=100_000)
    assert max(s.gpus for s in shapes) == genie.MAX_PLACEMENT_GPUS
    assert genie.count_shapes(Platform(64, 128), batch=100_000) == len(shapes)
    start = time.perf_counter()
    huge = genie.count_shapes(Platform(2**31 - 1, 2**31 - 1), batch=2**62)
    assert time.perf_counter() - start < 1.0
    # sum over d_gpn of floor(MAX / d_gpn): the harmonic bound, not N x G
    assert huge == sum(genie.MAX_PLACEMENT_GPUS // g for g in range(1, genie.MAX_PLACEMENT_GPUS + 1))


def test_placement_table_calls_the_cancel_hook() -> None:
    class Stop(Exception):
        pass

    calls = []

    def cancel() -> None:
        calls.append(1)
        if len(calls) > 1:
            raise Stop

    with pytest.raises(Stop):
        genie.placement_table(genie.Task("c", 4096, 10), LINEAR, Platform(64, 64), cancel=cancel)
    assert len(calls) == 2


def test_a_placement_that_never_finishes_is_never_feasible() -> None:
    assert not genie.is_feasible(math.inf, 0.0, math.inf)
    assert genie.is_feasible(1e6, 0.0, math.inf)


def test_a_platform_of_unlike_nodes_offers_only_the_shapes_they_hold() -> None:
    # nodes of 1, 1 and 2 GPUs: ⟨3 × 2⟩ (6 GPUs) was a candidate, and tetris-perf chose it for a BERT
    # task that then never started (a simulator property run found it stuck in the queue)
    p = Platform.of([1, 1, 2], "V100M32")
    assert (p.nodes, p.gpus_per_node, p.nodes_with) == (3, 2, (3, 1))
    shapes = genie.enumerate_shapes(p)
    assert shapes == [Shape(1, 1), Shape(1, 2), Shape(2, 1), Shape(3, 1)]
    assert Platform.of([8, 8]) == Platform(2, 8)  # alike nodes: the seed's platform, as before
    assert not Platform.of([0, 4]).holds(Shape(2, 1)) and Platform.of([0, 4]).holds(Shape(1, 4))
    with pytest.raises(InvalidInput, match="nodes_with"):
        Platform(2, 2, nodes_with=(1, 2))


def test_feasible_until_is_the_first_instant_past_the_deadline_minus_the_latency() -> None:
    """Eq. 12 holds up to e - l inclusive; the waiting allowance (Eq. 13) is spent within a float of it
    (also where l is nearly e, and never for a deadline at infinity)."""
    for lat, dl in [(17.39, 1000.0), (0.1, 0.3), (88.07, 1548.13926), (1e-3, 1.767e9), (1000 - 1e-10, 1000.0)]:
        t = genie.feasible_until(lat, dl)
        assert not genie.is_feasible(lat, t, dl)
        assert genie.is_feasible(lat, dl - lat - 4 * math.ulp(dl), dl) or dl - lat < 4 * math.ulp(dl)
        assert t - (dl - lat) <= 4 * math.ulp(max(dl, lat))
    assert genie.feasible_until(10.0, math.inf) == math.inf


@given(
    st.lists(st.tuples(st.floats(0.0, 1e4) | st.just(math.inf), st.floats(0.01, 100.0)), min_size=1, max_size=12),
    st.floats(-1e4, 1e5),
    st.floats(-1e4, 1e5),
)
def test_choosing_among_the_candidates_is_choosing_among_every_row(
    lat_cer: list[tuple[float, float]], now: float, deadline: float
) -> None:
    """Alg. 1 lines 8-13 by binary search over a table's choice candidates picks the very row the scan of
    the whole CER-ranked table picks, whatever the clock and the deadline (latencies in any order, ties,
    placements that never finish)."""
    rows = [genie.PlacementRow(Shape(1, i + 1), 1.0, lat, 1.0, cer) for i, (lat, cer) in enumerate(lat_cer)]
    ranked = sorted(rows, key=lambda r: -r.cer)
    candidates = genie.choice_candidates(ranked)
    assert genie.choose(ranked, now, deadline, candidates) is genie.choose(ranked, now, deadline)
    assert all(ranked[a].lat > ranked[b].lat for a, b in itertools.pairwise(candidates))
