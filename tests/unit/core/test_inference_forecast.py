"""Switching ahead of the load (issue 23 §3): decide() plans for the forecast band, on the toy service of
test_inference (GPU replica 100 queries/s, bs_gpu 10; CPU replica 20 queries/s, at most 4)."""

from __future__ import annotations

import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.inference import InferenceState, Mode, Reason, decide, forecast_horizon_s

from tests.unit.core.test_inference import toy


def test_a_ramp_starts_the_gpu_before_the_crossing() -> None:
    """A ramp of 10 queries/s a minute: 4 CPU replicas carry 64/s under the threshold. The forecast
    (the ramp itself, one start-up ahead) asks for the GPU a minute before the observed rate does."""
    spec = toy(switch_cooldown_s=0.0)
    ramp = [20.0 + 10.0 * k for k in range(8)]  # 20 … 90 queries/s, one a minute
    ahead = lambda k: ramp[min(k + 1, len(ramp) - 1)]  # noqa: E731 - the band: next minute's rate
    plain, fore = None, None
    switch_plain = switch_fore = None
    for k, q in enumerate(ramp):
        d = decide(spec, plain, q, 60.0 * k)
        f = decide(spec, fore, q, 60.0 * k, forecast_qps=ahead(k))
        if d.mode is Mode.GPU and switch_plain is None:
            switch_plain = k
        if f.mode is Mode.GPU and switch_fore is None:
            switch_fore = k
        plain, fore = d.state, f.state
    assert switch_plain is not None and switch_fore is not None
    assert switch_fore == switch_plain - 1  # one minute earlier: Ready when the load arrives


def test_the_band_sizes_the_replicas_and_skips_the_cooldown() -> None:
    spec = toy()
    st = InferenceState(Mode.CPU, 2, last_switch_s=0.0)  # 2 CPU replicas: 40/s; the last switch just now
    held = decide(spec, st, 20.0, 10.0)
    assert (held.mode, held.replicas, held.reason) == (Mode.CPU, 2, Reason.HOLD)
    # the band says 95/s within the start-up: a predicted overload, so no cooldown and no wait
    d = decide(spec, st, 20.0, 10.0, forecast_qps=95.0)
    assert (d.mode, d.reason, d.switched) == (Mode.GPU, Reason.SWITCH_TO_GPU, True)
    assert d.planned_qps == 95.0 and "forecast" in d.message and "20 queries/s observed" in d.message
    out = decide(spec, InferenceState(Mode.CPU, 1), 10.0, 0.0, forecast_qps=40.0)  # 40 / (0.8 × 20) -> 3
    assert (out.mode, out.replicas, out.reason) == (Mode.CPU, 3, Reason.SCALE_OUT)


def test_a_step_down_needs_the_band_below_the_point() -> None:
    spec = toy(scale_in_after_s=0.0, switch_cooldown_s=0.0)
    st = InferenceState(Mode.GPU, 1, last_switch_s=0.0)
    assert decide(spec, st, 10.0, 1000.0).mode is Mode.CPU  # the observed rate alone: to CPU
    stay = decide(spec, st, 10.0, 1000.0, forecast_qps=70.0)  # the band: 70/s is too much for 4 CPU replicas
    assert stay.mode is Mode.GPU and stay.reason is Reason.HOLD
    low = decide(spec, st, 10.0, 1000.0, forecast_qps=5.0)  # a band below the rate changes nothing
    assert (low.mode, low.replicas, low.planned_qps) == (Mode.CPU, 1, 10.0)


def test_horizon_and_bad_bands() -> None:
    assert forecast_horizon_s(30.0, 57.0) == 87.0
    with pytest.raises(InvalidInput, match="ready_s"):
        forecast_horizon_s(-1.0, 57.0)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidInput, match="forecast_qps"):
            decide(toy(), None, 1.0, 0.0, forecast_qps=bad)
