from __future__ import annotations

import numpy as np
import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.predictors.base import GBDTModel
from qosmos.predictors.ces import (
    FEATURES,
    CESConfig,
    CESController,
    CESForecaster,
    parse_when,
    simulate_ces,
    to_slots,
)


def crafted() -> tuple[np.ndarray, np.ndarray, dict[int, np.ndarray]]:
    """80 nodes for 2 h, 40 for 1 h, then 70 for 1 h on a 100-node cluster; flat forecasts."""
    running = np.array([80.0] * 120 + [40.0] * 60 + [70.0] * 60)
    total = np.full(running.size, 100.0)
    forecasts = {m: np.full(18, running[m]) for m in range(0, running.size, 10)}
    return running, total, forecasts


def test_controller_on_crafted_series_exact() -> None:
    running, total, forecasts = crafted()
    res = simulate_ces(running, total, forecasts, CESConfig(sigma=5, boot_delay=5))
    # m=0 sleeps 100→85; m=120 sleeps 85→45; m=180 wakes 70−45+5 = 30 (one wake-up)
    assert res.daily_wakeups == pytest.approx(6.0)  # 1 wake-up in 1/6 day
    assert res.nodes_per_wakeup == 30
    assert res.avg_sleep_nodes == pytest.approx((120 * 15 + 60 * 55 + 60 * 25) / 240)
    assert res.node_util_before == pytest.approx(16200 / 24000)
    assert res.node_util_after == pytest.approx(16200 / (120 * 85 + 60 * 45 + 60 * 75))
    assert res.delayed_minutes == 5 and res.delayed_node_minutes == 125
    assert list(res.active_series[[0, 119, 120, 179, 180, 184, 185, 239]]) == [85, 85, 45, 45, 75, 75, 75, 75]


def test_no_sleep_when_forecast_rises_or_history_rises() -> None:
    running, total, _ = crafted()
    rising = {m: np.full(18, 95.0) for m in range(0, running.size, 10)}
    res = simulate_ces(running, total, rising, CESConfig(sigma=5))
    assert res.avg_sleep_nodes == 0 and res.daily_wakeups == 0
    ctl = CESController(100, CESConfig(sigma=5))
    assert ctl.periodic_check([40.0, 50.0, 60.0], 60, [60.0]) == 0  # past hour rose: T_H = −20
    assert ctl.periodic_check([70.0, 60.0], 60, [60.0, 61.0]) == 0  # predicted rise: T_P = −1
    assert ctl.periodic_check([70.0, 60.0], 60, [60.0, 55.0]) == 35  # 100 → 65
    assert ctl.awake == 65


def test_job_arrival_check_and_boot_delay() -> None:
    ctl = CESController(100, CESConfig(sigma=3, boot_delay=5), awake=50)
    assert ctl.job_arrival_check(0, 40) == 0
    assert ctl.job_arrival_check(0, 60) == 13  # R − C_A + σ
    assert ctl.active == 63 and ctl.awake == 50
    assert ctl.job_arrival_check(1, 62) == 0  # booting nodes count as active
    ctl.tick(4)
    assert ctl.awake == 50
    ctl.tick(5)
    assert ctl.awake == 63 and ctl.wakeups == 1
    assert ctl.job_arrival_check(6, 200) == 37  # capped at the cluster size
    with pytest.raises(InvalidInput):
        CESConfig(period=0)


def test_to_slots_and_parse_when() -> None:
    minutes = np.array([0, 1, 2, 10, 11, 30])
    slots, y = to_slots(minutes, np.array([1.0, 2, 3, 10, 20, 7]))
    assert list(slots) == [0, 10, 20, 30]
    assert list(y) == [2.0, 15.0, 15.0, 7.0]  # empty slot 20 carries 15 forward
    assert parse_when("2017-11-30", end_of_day=True) - parse_when("2017-11-30") == 1440
    with pytest.raises(InvalidInput):
        parse_when("30/11/2017")


def test_forecaster_learns_daily_pattern_and_roundtrips(tmp_path) -> None:
    n = 144 * 12
    t = np.arange(n)
    y = 200 + 50 * np.sin(2 * np.pi * t / 144)
    slots = 25_000_000 + 10 * t
    fc = CESForecaster(num_rounds=80, params={"objective": "regression", "num_leaves": 15}).fit(slots, y, 144 * 10)
    origins = np.arange(144 * 10, n - 18)
    pred = fc.forecast(slots, y, origins)
    actual = y[origins[:, None] + np.arange(1, 19)]
    assert np.mean(np.abs(pred - actual)) < 5.0
    assert fc.model is not None
    fc.model.save(tmp_path / "ces.txt")
    back = GBDTModel.load(tmp_path / "ces.txt", expected_features=FEATURES)
    x, _, _ = fc.design(slots, y, origins[:50])
    assert np.allclose(back.predict(x), fc.model.predict(x))


def test_choose_sigma_hand_computed() -> None:
    from qosmos.predictors.ces import choose_sigma

    rows = [
        {"sigma": 10, "node_util": 0.95, "daily_wakeups": 4.0},
        {"sigma": 30, "node_util": 0.92, "daily_wakeups": 0.9},
        {"sigma": 50, "node_util": 0.89, "daily_wakeups": 0.4},
    ]
    assert choose_sigma(rows, 1.0)[0] == 30  # the best utilisation within the wake-up budget
    assert choose_sigma(rows, 0.5)[0] == 50
    sigma, why = choose_sigma(rows, 0.1)  # none qualifies: fewest wake-ups, and it says so
    assert sigma == 50 and "no candidate" in why


def test_sigma_tradeoff_never_reads_the_evaluation_window() -> None:
    from qosmos.predictors.ces import sigma_tradeoff

    rng = np.random.default_rng(3)
    minutes = np.arange(27_000_000, 27_000_000 + 5 * 1440, dtype=np.int64)  # five days, per minute
    day = np.sin(2 * np.pi * (minutes % 1440) / 1440)
    active = np.round(300 + 80 * day + rng.normal(0, 5, minutes.size))
    total = np.full(minutes.size, 420.0)
    val_from, val_to = int(minutes[0]) + 2 * 1440, int(minutes[0]) + 4 * 1440
    rows = sigma_tradeoff(minutes, active, total, val_from, val_to, [0, 20], num_rounds=10)
    changed = active.copy()
    changed[minutes >= val_to] = 5.0  # the evaluation window: anything at all
    assert sigma_tradeoff(minutes, changed, total, val_from, val_to, [0, 20], num_rounds=10) == rows
    changed = active.copy()
    changed[(minutes >= val_from) & (minutes < val_to)] += 60  # the validation window itself matters
    assert sigma_tradeoff(minutes, changed, total, val_from, val_to, [0, 20], num_rounds=10) != rows
    assert [r["sigma"] for r in rows] == [0, 20] and rows[0]["daily_wakeups"] >= rows[1]["daily_wakeups"]
