"""The single-GPU throughput forms and their choice by leave-one-out error (issue 23 §2)."""

from __future__ import annotations

import math

import pytest
from qosmos.extender.core import genie, throughput
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Shape

BATCHES = [8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]


def affine_rates(a: float = 0.01, c: float = 0.001) -> list[float]:
    """A saturating curve: iteration time a + c b', rate b' / t -> 1/c."""
    return [b / (a + c * b) for b in BATCHES]


def test_affine_time_is_chosen_on_a_saturating_curve_and_quadratic_is_not() -> None:
    choice = genie.select_single_gpu_profile("m", BATCHES, affine_rates())
    errs = choice.candidates
    assert errs["affine-time"] == pytest.approx(0.0, abs=1e-9)
    assert errs["quadratic"] is not None and errs["quadratic"] > 5.0  # the quadratic bends; the guard is not enough
    # interpolation of a straight time line is exact too: the tie goes to the simpler form
    assert errs["interpolated"] == pytest.approx(0.0, abs=1e-9)
    p = choice.profile
    assert p.form == "affine-time" and p.heldout_error == errs["affine-time"]
    assert (p.time_a, p.time_c) == pytest.approx((0.01, 0.001))
    assert p.spr(1000) == pytest.approx(1000 / (0.01 + 1.0))  # beyond b_max: the line continues


def test_launch_floor_wins_on_a_launch_bound_head_and_is_recovered() -> None:
    # iteration time flat (launch-bound: the host issuing kernels) up to 64, then compute-bound
    t = [0.02 if b <= 64 else 0.02 + 0.0004 * (b - 64) for b in BATCHES]
    rates = [b / ti for b, ti in zip(BATCHES, t, strict=True)]
    choice = genie.select_single_gpu_profile("m", BATCHES, rates)
    errs = choice.candidates
    assert choice.profile.form == "launch-floor"
    assert errs["launch-floor"] == pytest.approx(0.0, abs=1e-9)
    assert errs["interpolated"] is not None and 0.0 < errs["interpolated"] < 2.0  # misses the bend between sizes
    assert min(errs["affine-time"], errs["quadratic"]) > 2.0  # no line or parabola follows a kink
    (b0, f0), (bend, f1), (b1, t1) = choice.profile.knots
    assert (b0, b1) == (8.0, 512.0) and f0 == f1 == pytest.approx(0.02) and bend == pytest.approx(64.0)
    assert t1 == pytest.approx(0.02 + 0.0004 * 448)
    assert choice.profile.spr(40) == pytest.approx(40 / 0.02)  # on the floor
    assert choice.profile.spr(1000) == pytest.approx(1000 / (0.02 + 0.0004 * 936))  # the line continues


def test_one_floor_averages_the_launch_bound_noise_out() -> None:
    # the floor's sizes measured with the host's noise (±8 %): the floor is their (relative) mean,
    # so a held-out launch-bound size is predicted within the noise, not at one neighbour's error
    noise = [1.08, 0.93, 1.05, 0.95, 1.07, 0.92]
    t = [0.01 * noise[i] if b <= 64 else 0.01 + 0.0001 * (b - 64) for i, b in enumerate(BATCHES)]
    knots = throughput.fit_launch_floor(BATCHES, [b / ti for b, ti in zip(BATCHES, t, strict=True)])
    floor = knots[0][1]
    assert knots[1][1] == floor and floor == pytest.approx(0.01, rel=0.02)
    assert knots[-1] == (512.0, pytest.approx(0.01 + 0.0001 * 448, rel=1e-3))


def test_a_bend_before_the_last_size_alone_is_recovered() -> None:
    # launch-bound up to 384, GPU-bound at 512 only (time proportional to the batch there, as EfficientNet's
    # and MobileNetV2's steps on an H200): one size above the bend still places it, at f / c = 400
    t = [max(0.02, 0.00005 * b) for b in BATCHES]
    rates = [b / ti for b, ti in zip(BATCHES, t, strict=True)]
    knots = throughput.fit_launch_floor(BATCHES, rates)
    assert knots == (
        (8.0, pytest.approx(0.02)),
        (pytest.approx(400.0), pytest.approx(0.02)),
        (512.0, pytest.approx(0.0256)),
    )
    p = genie.fit_single_gpu_profile("m", BATCHES, rates, form="launch-floor")
    assert p.spr(448) == pytest.approx(1 / 0.00005)  # past the bend: the rate of the GPU-bound size
    assert p.spr(1024) == pytest.approx(1 / 0.00005)  # beyond b_max the time keeps growing with the batch


def test_launch_floor_degenerates_to_a_line_or_a_flat_time() -> None:
    line = throughput.fit_launch_floor(BATCHES, affine_rates())  # no launch-bound head
    assert line == ((8.0, pytest.approx(0.018)), (512.0, pytest.approx(0.522)))
    flat = throughput.fit_launch_floor(BATCHES, [b / 0.005 for b in BATCHES])  # launch-bound throughout
    assert flat == ((8.0, pytest.approx(0.005)), (512.0, pytest.approx(0.005)))
    p = genie.fit_single_gpu_profile("m", BATCHES, [b / 0.005 for b in BATCHES], form="launch-floor")
    assert p.spr(1024) == pytest.approx(512 / 0.005)  # a flat last segment: the rate is held beyond b_max
    with pytest.raises(InvalidInput, match="three distinct"):
        throughput.fit_launch_floor([8, 16, 16], [100.0, 150.0, 160.0])


def test_interpolation_wins_on_a_curve_of_two_bends() -> None:
    # launch-bound, then one slope, then a steeper one (a kernel switch): only the knots follow both bends
    t = [0.02 if b <= 32 else 0.02 + 0.0002 * (b - 32) if b <= 192 else 0.052 + 0.001 * (b - 192) for b in BATCHES]
    rates = [b / ti for b, ti in zip(BATCHES, t, strict=True)]
    choice = genie.select_single_gpu_profile("m", BATCHES, rates)
    errs = choice.candidates
    assert choice.profile.form == "interpolated"
    assert (
        errs["interpolated"]
        < 5.0
        < 4 * errs["interpolated"]
        < min(errs["affine-time"], errs["quadratic"], errs["launch-floor"])
    )
    assert choice.profile.spr(40) == pytest.approx(40 / (0.02 + 0.0002 * 8))  # between knots: read off the line


def test_quadratic_wins_on_a_true_quadratic() -> None:
    rates = [10.0 * b - 0.01 * b * b for b in BATCHES]  # Eq. 7 with its vertex at 500
    choice = genie.select_single_gpu_profile("m", BATCHES, rates)
    assert choice.profile.form == "quadratic"
    p = choice.profile
    assert (p.k0, p.k1, p.k2) == pytest.approx((0.0, 10.0, -0.01), abs=1e-6)
    assert choice.candidates["quadratic"] < min(choice.candidates["affine-time"], choice.candidates["interpolated"])


def test_leave_one_out_by_hand() -> None:
    """Three samples, affine-time: each fold is the line through the other two points."""
    b = [1.0, 2.0, 4.0]
    t = [1.0, 2.0, 2.0]  # times; rates b/t = 1, 1, 2
    rates = [bi / ti for bi, ti in zip(b, t, strict=True)]
    # leave out b=1: line through (2,2),(4,2) -> t(1) = 2; but below the first knot the rate is capped at
    #   sPR(2) = 1, i.e. t >= 1 * 2/2 = 1, so t(1) = 2: rate 0.5 vs 1 -> 50 %
    # leave out b=2: line through (1,1),(4,2): t(2) = 4/3, rate 1.5 vs 1 -> 50 %
    # leave out b=4: line through (1,1),(2,2): t(4) = 4, rate 1 vs 2 -> 50 %
    errs = genie.heldout_errors(b, rates)
    assert errs["affine-time"] == pytest.approx(50.0)
    # interpolated: knots are the same two points per fold, so the same predictions
    assert errs["interpolated"] == pytest.approx(50.0)
    assert errs["quadratic"] is None  # a fold keeps 2 batch sizes: not fitted, not 0


def test_loo_helper_counts_each_fold_once() -> None:
    seen: list[list[float]] = []

    def fit(b: list[float], r: list[float]) -> throughput.Predictor:
        seen.append(list(b))
        return lambda x: 2.0 if x == 3.0 else 1.0

    err = throughput.leave_one_out([1.0, 2.0, 3.0], [1.0, 1.0, 1.0], fit, 2)
    assert seen == [[2.0, 3.0], [1.0, 3.0], [1.0, 2.0]]
    assert err == pytest.approx(100.0 / 3)  # only the third fold misses, by 100 %
    assert throughput.leave_one_out([1.0, 2.0], [1.0, 1.0], fit, 2) is None


def test_not_fitted_forms_are_none_and_fallback_is_eq7() -> None:
    errs = genie.heldout_errors([32, 64, 128], [1.0, 2.0, 3.0])
    assert errs["quadratic"] is None and errs["affine-time"] is not None
    two = genie.select_single_gpu_profile("m", [32, 64], [100.0, 150.0])
    assert all(v is None for v in two.candidates.values())
    assert two.profile.form == "quadratic" and two.profile.heldout_error is None
    assert (two.profile.k1, two.profile.k2) == pytest.approx((50 / 32, 0.0))  # fit_spr degraded to a line


def test_choose_form_ties_go_to_the_simpler() -> None:
    assert throughput.choose_form({"quadratic": 1.0, "affine-time": 1.0, "interpolated": 1.0}) == "quadratic"
    assert throughput.choose_form({"quadratic": 2.0, "affine-time": 1.0, "interpolated": 1.0}) == "affine-time"
    assert throughput.choose_form({"quadratic": None, "affine-time": 3.0, "interpolated": 1.0}) == "interpolated"
    assert throughput.choose_form({"quadratic": None, "affine-time": None, "interpolated": None}) is None


def test_monotone_knots_pool_a_falling_time() -> None:
    # times 1, 3, 2, 4 at b = 1..4: the 3,2 pair is pooled to 2.5
    knots = throughput.fit_monotone_knots([1, 2, 3, 4], [1 / 1, 2 / 3, 3 / 2, 4 / 4])
    assert [t for _, t in knots] == pytest.approx([1.0, 2.5, 2.5, 4.0])
    # repeated runs of one batch size are averaged first
    knots = throughput.fit_monotone_knots([1, 1, 2], [1 / 1, 1 / 3, 2 / 4])
    assert knots == ((1.0, 2.0), (2.0, 4.0))


def test_extrapolation_beyond_and_below_the_range() -> None:
    knots = ((32.0, 0.1), (64.0, 0.15), (128.0, 0.25))
    p = genie.ThroughputProfile("i", 0.0, 0.0, 0.0, b_min=32, b_max=128, form="interpolated", knots=knots)
    assert p.spr(256) == pytest.approx(256 / (0.25 + (0.1 / 64) * 128))  # the last segment's slope
    assert p.spr(16) == pytest.approx(16 / (0.1 - (0.05 / 32) * 16))  # the first segment's slope
    assert p.extrapolated(256) and p.extrapolated(16) and not p.extrapolated(100)
    # a steep first segment would make small batches faster per sample: capped at sPR(b_min)
    steep = genie.ThroughputProfile(
        "s", 0.0, 0.0, 0.0, b_min=32, b_max=64, form="interpolated", knots=((32.0, 0.1), (64.0, 0.5))
    )
    assert steep.spr(8) == pytest.approx(32 / 0.1) and steep.spr(1) > 0
    # a flat last segment would let the rate grow without bound: held at sPR(b_max)
    flat = genie.ThroughputProfile(
        "f", 0.0, 0.0, 0.0, b_min=32, b_max=64, form="interpolated", knots=((32.0, 0.1), (64.0, 0.1))
    )
    assert flat.spr(1024) == pytest.approx(64 / 0.1)
    affine = genie.ThroughputProfile(
        "a", 0.0, 0.0, 0.0, b_min=32, b_max=64, form="affine-time", time_a=-0.01, time_c=0.001
    )
    assert affine.spr(64) == pytest.approx(64 / 0.054)
    assert affine.spr(5) == pytest.approx(32 / 0.022)  # t(5) < 0 on the line: capped at sPR(32)
    assert all(math.isfinite(affine.spr(b)) and affine.spr(b) > 0 for b in (0.5, 1, 5, 500, 1e6))


def test_comm_composes_with_every_form() -> None:
    """Eq. 5/8: PR = (n - Comm) sPR(b/n) whatever sPR's form."""
    task = genie.Task("m", 256, 10)
    shape = Shape(2, 4)
    for form in throughput.FORMS:
        p = genie.fit_single_gpu_profile("m", BATCHES, affine_rates(), form=form)
        c = genie.comm(shape, p.gamma, p.lam)
        assert genie.processing_rate(task, shape, p) == pytest.approx((8 - c) * p.spr(32))
    # fit_comm recovers γ, λ through an iteration-time form's sPR
    p = genie.fit_single_gpu_profile("m", BATCHES, affine_rates(), form="affine-time")
    truth = genie.ThroughputProfile(
        "m",
        p.k0,
        p.k1,
        p.k2,
        gamma=0.5,
        lam=0.2,
        b_min=8,
        b_max=512,
        form="affine-time",
        time_a=p.time_a,
        time_c=p.time_c,
    )
    shapes = [Shape(1, 2), Shape(1, 4), Shape(2, 4), Shape(4, 4)]
    rates = [genie.processing_rate(genie.Task("m", 256, 1), s, truth) for s in shapes]
    assert genie.fit_comm(shapes, 256, rates, p) == pytest.approx((0.5, 0.2))


def test_profile_validation_per_form() -> None:
    # every existing quadratic constructor call is unchanged: form defaults to quadratic
    q = genie.ThroughputProfile("q", 10.0, 2.0, 0.0)
    assert q.form == "quadratic" and q.heldout_error is None and q.knots == ()
    with pytest.raises(InvalidInput, match="form"):
        genie.ThroughputProfile("x", 1.0, 0.0, 0.0, form="cubic")
    with pytest.raises(InvalidInput, match="measured range"):
        genie.ThroughputProfile("x", 1.0, 0.0, 0.0, form="affine-time", time_a=0.1, time_c=0.01)
    with pytest.raises(InvalidInput, match="time_c"):
        genie.ThroughputProfile("x", 1.0, 0.0, 0.0, b_min=1, b_max=2, form="affine-time", time_a=0.1, time_c=-0.01)
    with pytest.raises(InvalidInput, match="knots"):
        genie.ThroughputProfile(
            "x", 1.0, 0.0, 0.0, b_min=1, b_max=2, form="interpolated", knots=((1.0, 0.2), (2.0, 0.1))
        )
    with pytest.raises(InvalidInput, match="span"):
        genie.ThroughputProfile(
            "x", 1.0, 0.0, 0.0, b_min=1, b_max=4, form="interpolated", knots=((1.0, 0.1), (2.0, 0.2))
        )
    with pytest.raises(InvalidInput, match="heldout_error"):
        genie.ThroughputProfile("x", 1.0, 0.0, 0.0, heldout_error=-1.0)
    # a non-quadratic form does not need Eq. 7's coefficients to be positive on the range
    genie.ThroughputProfile("x", -100.0, 0.0, 0.0, b_min=1, b_max=2, form="affine-time", time_a=0.1, time_c=0.01)
    with pytest.raises(InvalidInput, match="iteration time"):
        q.iteration_time(4)
