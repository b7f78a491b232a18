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
    busy_nodes,
    future_nodes_trend,
    nodes_to_sleep,
    nodes_to_wake,
    parse_when,
    recent_nodes_trend,
    simulate_ces,
    to_slots,
)


def crafted() -> tuple[np.ndarray, np.ndarray, dict[int, tuple[list[float], list[float]]]]:
    """80 nodes for 2 h, 40 for 1 h, then 70 for 1 h on a 100-node cluster. A PeriodicCheck every
    10 min with H = (running an hour ago, running now) and a flat forecast P."""
    running = np.array([80.0] * 120 + [40.0] * 60 + [70.0] * 60)
    total = np.full(running.size, 100.0)
    checks = {
        m: ([float(running[max(0, m - 60)]), float(running[m])], [float(running[m])] * 18)
        for m in range(0, running.size, 10)
    }
    return running, total, checks


def test_controller_on_crafted_series_exact() -> None:
    running, total, checks = crafted()
    res = simulate_ces(running, total, checks, CESConfig(sigma=5, boot_delay=5))
    # m=0: T_H = T_P = 0 (>= ξ = 0), C_R = 80 -> sleep 100 -> 85.
    # m=120: the drop to 40 is one minute old: the nodes busy in the last 10 minutes are still 80,
    #        so C_R + σ = 85 and nothing sleeps. m=130: C_R = 40 -> sleep 85 -> 45 (40 nodes).
    # m=180: R = 70 > C_A = 45 -> JobArrivalCheck wakes 70 - 45 + 5 = 30 (one wake-up), booting
    #        5 minutes; the check at 180 sees H = (40, 70), T_H = -30: no sleep.
    assert res.sleeps == 2
    assert res.daily_wakeups == pytest.approx(6.0)  # 1 wake-up in 1/6 day
    assert res.nodes_per_wakeup == 30
    assert list(res.active_series[[0, 129, 130, 179, 180, 184, 185, 239]]) == [85, 85, 45, 45, 75, 75, 75, 75]
    assert res.avg_sleep_nodes == pytest.approx((130 * 15 + 50 * 55 + 60 * 25) / 240)
    powered = 130 * 85 + 50 * 45 + 60 * 75
    busy = 129 * 80 + 51 * 40 + 60 * 70  # busy_nodes: 80 until minute 128 (the trailing 10 minutes)
    assert res.node_util_after == pytest.approx(busy / powered)
    assert res.node_util_before == pytest.approx(busy / 24000)
    assert res.node_util_after_per_minute == pytest.approx(16200 / powered)
    assert res.node_util_before_per_minute == pytest.approx(16200 / 24000)
    assert res.delayed_minutes == 5 and res.delayed_node_minutes == 5 * 25  # 70 wanted, 45 awake


def test_alg2_trends_read_their_own_series() -> None:
    # RecentNodesTrend(H) and FutureNodesTrend(P): first minus last of each series
    assert recent_nodes_trend([70.0, 90.0, 60.0]) == 10
    assert future_nodes_trend([60.0, 99.0, 55.0]) == 5
    assert recent_nodes_trend([]) == 0 and future_nodes_trend([]) == 0
    cfg = CESConfig(sigma=5)
    # T_H = 10, T_P = 5: sleep down to C_R + σ = 65, from the 40 idle nodes
    assert nodes_to_sleep([70.0, 60.0], [60.0, 55.0], active=100, running=60, idle=40, config=cfg) == 35
    # the forecast's level is not compared with the minute's count: a forecast above C_R that falls
    # still says "falling" (T_P = 90 - 85 = 5)
    assert nodes_to_sleep([70.0, 60.0], [90.0, 85.0], active=100, running=60, idle=40, config=cfg) == 35
    assert nodes_to_sleep([70.0, 60.0], [60.0, 61.0], 100, 60, 40, cfg) == 0  # predicted rise: T_P = -1
    assert nodes_to_sleep([50.0, 60.0], [60.0, 55.0], 100, 60, 40, cfg) == 0  # past hour rose: T_H = -10
    assert nodes_to_sleep([70.0, 60.0], [60.0, 55.0], 100, 60, 10, cfg) == 10  # only idle nodes sleep
    assert nodes_to_sleep([70.0, 60.0], [60.0, 55.0], 62, 60, 2, cfg) == 0  # C_A already below C_R + σ
    # thresholds: T >= ξ sleeps, T < ξ does not
    assert nodes_to_sleep([70.0, 60.0], [60.0, 55.0], 100, 60, 40, CESConfig(sigma=5, xi_h=10, xi_p=5)) == 35
    assert nodes_to_sleep([70.0, 60.0], [60.0, 55.0], 100, 60, 40, CESConfig(sigma=5, xi_h=10.5)) == 0
    assert nodes_to_sleep([70.0, 60.0], [60.0, 55.0], 100, 60, 40, CESConfig(sigma=5, xi_p=5.5)) == 0
    assert nodes_to_sleep([], [60.0], 100, 60, 40, cfg) == 0 and nodes_to_sleep([60.0], [], 100, 60, 40, cfg) == 0


def test_nodes_to_wake_only_when_a_job_lacks_nodes() -> None:
    assert nodes_to_wake(active=50, request=50, sigma=3, asleep=50) == 0  # C_A covers R
    assert nodes_to_wake(active=50, request=40, sigma=3, asleep=50) == 0
    assert nodes_to_wake(active=50, request=60, sigma=3, asleep=50) == 13  # R - C_A + σ
    assert nodes_to_wake(active=50, request=60, sigma=3, asleep=5) == 5  # no more than are asleep
    assert nodes_to_wake(active=0, request=1, sigma=0, asleep=4) == 1


def test_busy_nodes_is_the_trailing_max() -> None:
    assert list(busy_nodes(np.array([1.0, 5, 2, 3, 0, 0, 0]), 3)) == [1, 5, 5, 5, 3, 3, 0]
    assert list(busy_nodes(np.array([2.0, 1]), 3)) == [2, 2]
    assert list(busy_nodes(np.array([2.0, 1]), 1)) == [2, 1]


def test_no_sleep_when_forecast_rises_or_history_rises() -> None:
    running, total, checks = crafted()
    rising = {m: (h, [p[0], p[0] + 1.0]) for m, (h, p) in checks.items()}
    res = simulate_ces(running, total, rising, CESConfig(sigma=5))
    assert res.avg_sleep_nodes == 0 and res.daily_wakeups == 0 and res.sleeps == 0
    ctl = CESController(100, CESConfig(sigma=5))
    assert ctl.periodic_check([40.0, 50.0, 60.0], 60, [60.0]) == 0  # past hour rose: T_H = -20
    assert ctl.periodic_check([70.0, 60.0], 60, [60.0, 61.0]) == 0  # predicted rise: T_P = -1
    assert ctl.periodic_check([70.0, 60.0], 60, [60.0, 55.0]) == 35  # 100 -> 65
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


def test_choose_knobs_ties_prefer_smaller_sigma_then_thresholds() -> None:
    from qosmos.predictors.ces import choose_knobs

    rows = [
        {"sigma": 30, "xi_h": 2.0, "xi_p": 0.0, "node_util": 0.92, "daily_wakeups": 0.9},
        {"sigma": 30, "xi_h": 0.0, "xi_p": 0.0, "node_util": 0.92, "daily_wakeups": 0.9},
        {"sigma": 20, "xi_h": 5.0, "xi_p": 5.0, "node_util": 0.93, "daily_wakeups": 1.2},
        {"sigma": 40, "xi_h": 0.0, "xi_p": 0.0, "node_util": 0.92, "daily_wakeups": 0.5},
    ]
    best, _ = choose_knobs(rows, 1.0)
    assert (best["sigma"], best["xi_h"], best["xi_p"]) == (30, 0.0, 0.0)
    assert choose_knobs(rows, 1.5)[0]["sigma"] == 20


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
    grid = sigma_tradeoff(minutes, active, total, val_from, val_to, [0], num_rounds=10, xis_h=[0, 3], xis_p=[0, 1])
    assert [(r["xi_h"], r["xi_p"]) for r in grid] == [(0, 0), (0, 1), (3, 0), (3, 1)]
