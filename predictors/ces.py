"""Cluster Energy Saving (seed 000 §4.3, Alg. 2): node forecaster + pure DRS controller.

Forecaster (§4.3.2): LightGBM on the series of running nodes at 10-minute granularity:
calendar features of the target slot (hour, slot of day, weekday, day, weekend, holiday),
node trends (rolling means / medians / standard deviations over 30 min … 1 day), lags at
several time scales (10 min … 3 h, and the target slot yesterday and last week), and the
horizon. One direct model serves every horizon 1…18 slots (3 h); its target is the change
from the last observed slot.

Controller (Alg. 2), pure functions of node counts — minutes are integers the caller passes,
no clocks; the replay here (``simulate_ces``) and the live operator (``qosmos.operator.ces``)
call the same ones:
- ``nodes_to_wake`` (JobArrivalCheck, l.1-3): when the demand R exceeds the active nodes C_A
  (awake + booting), wake R − C_A + σ nodes; they serve after ``boot_delay`` minutes;
- ``nodes_to_sleep`` (PeriodicCheck, l.4-9, every ``period`` minutes):
  T_H = ``recent_nodes_trend(H)``, the fall of running nodes over the past hour (first − last
  of H), T_P = ``future_nodes_trend(P)``, the fall the forecast expects over the next 3 h
  (first − last of P); when T_H ≥ ξ_H and T_P ≥ ξ_P, DynamicResourceSleep brings C_A down to
  C_R + σ (only idle awake nodes sleep).
Both trends are read from their own series, as Alg. 2 passes them (H and P only): a forecast
is compared with itself, never with the minute's node count, whose level it does not share.

Running nodes of a trace: ``busy_nodes``, the nodes busy at any minute of the last 10 (the
check period). The Philly series counts a node running in a minute when Ganglia saw its GPUs
busy, and flickers by ±4 nodes a minute (1st-99th percentile ±10, single minutes ±40); a node
that ran a job a minute ago is not idle. Helios' own CES evaluation resamples the series to
10-minute maxima for the same reason (HeliosArtifact ``CES_Philly.py``:
``set_interval(df, "10min", "max")``); ``busy_nodes`` is the causal form of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, date, datetime
from pathlib import Path

import numpy as np
from qosmos.extender.core.errors import InvalidInput
from qosmos.predictors.base import GBDTModel, smape

SLOT_MIN = 10
Series = Sequence[float] | np.ndarray  # node counts, oldest first
HORIZON = 18  # slots: 3 hours
# US federal holidays (+ the day after Thanksgiving) around the Philly trace (Microsoft, US).
HOLIDAYS: frozenset[date] = frozenset(
    date.fromisoformat(d)
    for d in (
        "2017-09-04",
        "2017-10-09",
        "2017-11-10",
        "2017-11-23",
        "2017-11-24",
        "2017-12-25",
        "2018-01-01",
    )
)
LAGS = (0, 1, 2, 3, 6, 12, 18)
WINDOWS = (3, 6, 18, 36, 144)
FEATURES = (
    "horizon",
    "hour",
    "slot",
    "weekday",
    "day",
    "weekend",
    "holiday",
    *(f"lag_{k}" for k in LAGS),
    "same_slot_yesterday",
    "same_slot_last_week",
    *(f"mean_{w}" for w in WINDOWS),
    *(f"median_{w}" for w in WINDOWS),
    *(f"std_{w}" for w in WINDOWS),
    "diff_1",
    "diff_6",
    "diff_18",
)


# ---- series helpers -----------------------------------------------------------------------------


def to_slots(minutes: np.ndarray, values: np.ndarray, slot: int = SLOT_MIN) -> tuple[np.ndarray, np.ndarray]:
    """Mean per ``slot``-minute bin over a regular grid; empty bins carry the last value forward."""
    if minutes.size == 0:
        raise InvalidInput("series", 0, "empty")
    start = (int(minutes[0]) // slot) * slot
    idx = (minutes - start) // slot
    n = int(idx[-1]) + 1
    sums = np.bincount(idx, weights=values, minlength=n)
    counts = np.bincount(idx, minlength=n)
    out = np.full(n, np.nan)
    ok = counts > 0
    out[ok] = sums[ok] / counts[ok]
    for i in range(1, n):
        if not ok[i]:
            out[i] = out[i - 1]
    return start + slot * np.arange(n, dtype=np.int64), out


def per_minute(minutes: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Regular one-minute grid, gaps filled with the last value."""
    start = int(minutes[0])
    n = int(minutes[-1]) - start + 1
    out = np.full(n, np.nan)
    out[minutes - start] = values
    for i in range(1, n):
        if math.isnan(out[i]):
            out[i] = out[i - 1]
    return start + np.arange(n, dtype=np.int64), out


def _rolling(y: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Trailing mean, median, std over w values ending at each index (NaN before w values)."""
    n = y.size
    mean = np.full(n, np.nan)
    med = np.full(n, np.nan)
    std = np.full(n, np.nan)
    if n >= w:
        view = np.lib.stride_tricks.sliding_window_view(y, w)
        mean[w - 1 :] = view.mean(axis=1)
        med[w - 1 :] = np.median(view, axis=1)
        std[w - 1 :] = view.std(axis=1)
    return mean, med, std


def _shift(y: np.ndarray, k: int) -> np.ndarray:
    out = np.full(y.size, np.nan)
    if k < y.size:
        out[k:] = y[: y.size - k] if k > 0 else y
    return out


def _calendar(slot_minutes: np.ndarray) -> np.ndarray:
    cols = np.empty((slot_minutes.size, 6))
    for i, m in enumerate(slot_minutes):
        dt = datetime.fromtimestamp(int(m) * 60, UTC)
        cols[i] = (
            dt.hour,
            (dt.hour * 60 + dt.minute) // SLOT_MIN,
            dt.weekday(),
            dt.day,
            float(dt.weekday() >= 5),
            float(dt.date() in HOLIDAYS),
        )
    return cols


@dataclass
class CESForecaster:
    """Direct multi-horizon LightGBM forecaster of running nodes per 10-minute slot."""

    horizon: int = HORIZON
    num_rounds: int = 150
    # Huber loss: the Philly series has a few outage jumps of 100-300 nodes that an L2 fit chases.
    params: dict[str, object] = field(
        default_factory=lambda: {
            "learning_rate": 0.1,
            "num_leaves": 15,
            "min_data_in_leaf": 100,
            "max_bin": 63,
            "objective": "huber",
        }
    )
    model: GBDTModel | None = None

    def origin_features(self, slot_minutes: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Features that depend only on the origin slot (shared by all horizons)."""
        cols = [_shift(y, k) for k in LAGS]
        rolled = [_rolling(y, w) for w in WINDOWS]
        cols += [r[0] for r in rolled] + [r[1] for r in rolled] + [r[2] for r in rolled]
        cols += [y - _shift(y, 1), y - _shift(y, 6), y - _shift(y, 18)]
        return np.column_stack(cols)

    def design(
        self, slot_minutes: np.ndarray, y: np.ndarray, origins: np.ndarray, cal: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows (origin, h) for h = 1..horizon: X, target index, origin index."""
        if cal is None:
            cal = _calendar(
                np.concatenate([slot_minutes, slot_minutes[-1] + SLOT_MIN * np.arange(1, self.horizon + 1)])
            )
        base = self.origin_features(slot_minutes, y)
        n_lag = len(LAGS)
        rows = []
        tgt = []
        org = []
        for h in range(1, self.horizon + 1):
            t = origins + h
            yday = np.where(t - 144 >= 0, y[np.clip(t - 144, 0, y.size - 1)], np.nan)
            week = np.where(t - 1008 >= 0, y[np.clip(t - 1008, 0, y.size - 1)], np.nan)
            block = np.column_stack(
                [np.full(origins.size, h), cal[t], base[origins, :n_lag], yday, week, base[origins, n_lag:]]
            )
            rows.append(block)
            tgt.append(t)
            org.append(origins)
        return np.vstack(rows), np.concatenate(tgt), np.concatenate(org)

    def fit(self, slot_minutes: np.ndarray, y: np.ndarray, until_slot: int) -> CESForecaster:
        """Train on every (origin, h) whose target slot index is < ``until_slot``."""
        origins = np.arange(0, max(0, until_slot - 1))
        x, t, o = self.design(slot_minutes, y, origins)
        keep = t < until_slot
        self.model = GBDTModel(FEATURES, (), self.params, self.num_rounds)
        self.model.fit(
            x[keep], y[t[keep]] - y[o[keep]], window=(float(slot_minutes[0]), float(slot_minutes[until_slot - 1]))
        )
        return self

    def forecast(self, slot_minutes: np.ndarray, y: np.ndarray, origins: np.ndarray) -> np.ndarray:
        """(len(origins), horizon) forecasts; uses only y[: origin + 1] (lags are trailing)."""
        if self.model is None:
            raise InvalidInput("model", None, "CES forecaster not fitted")
        if origins.size and origins.max() + self.horizon >= y.size:
            # pad the future so the calendar exists; the padded values are never read as lags
            pad = origins.max() + self.horizon - y.size + 1
            slot_minutes = np.concatenate([slot_minutes, slot_minutes[-1] + SLOT_MIN * np.arange(1, pad + 1)])
            y = np.concatenate([y, np.full(pad, np.nan)])
        x, _, o = self.design(slot_minutes, y, origins)
        pred = self.model.predict(x) + y[o]
        out: np.ndarray = np.maximum(pred, 0).reshape(self.horizon, origins.size).T
        return out


# ---- the controller (Alg. 2) ---------------------------------------------------------------------


@dataclass(frozen=True)
class CESConfig:
    sigma: int = 20  # buffer nodes σ (≈5% of Philly's 420 nodes)
    xi_h: float = 0.0  # ξ_H: minimum fall of running nodes over the past hour
    xi_p: float = 0.0  # ξ_P: minimum predicted fall over the next 3 hours
    boot_delay: int = 5  # minutes until a woken node serves
    period: int = 10  # PeriodicCheck every 10 minutes
    history: int = 60  # RecentNodesTrend window (minutes)

    def __post_init__(self) -> None:
        if self.sigma < 0 or self.boot_delay < 0 or self.period < 1 or self.history < 1:
            raise InvalidInput("ces_config", asdict(self), "sigma, boot_delay >= 0; period, history >= 1")


def busy_nodes(running: np.ndarray, window: int = SLOT_MIN) -> np.ndarray:
    """Nodes busy at any minute of the trailing ``window`` minutes (fewer at the start)."""
    running = np.asarray(running, float)
    if running.size == 0 or window <= 1:
        return running.copy()
    head = np.maximum.accumulate(running[: window - 1])
    if running.size < window:
        return head
    return np.concatenate([head, np.lib.stride_tricks.sliding_window_view(running, window).max(axis=1)])


def recent_nodes_trend(history: Series) -> float:
    """Alg. 2 RecentNodesTrend(H): how far running nodes fell over the past period (first − last of H)."""
    if not len(history):
        return 0.0
    return float(history[0]) - float(history[-1])


def future_nodes_trend(prediction: Series) -> float:
    """Alg. 2 FutureNodesTrend(P): how far the forecast falls over the next period (first − last of P)."""
    if not len(prediction):
        return 0.0
    return float(prediction[0]) - float(prediction[-1])


def nodes_to_wake(active: int, request: int, sigma: int, asleep: int) -> int:
    """Alg. 2 JobArrivalCheck (l.1-3): NodesWakeUp(R − C_A + σ) when C_A < R, at most the ``asleep``
    nodes there are; 0 when the active nodes (awake + booting) cover the request."""
    if active >= request:
        return 0
    return max(0, min(request - active + sigma, asleep))


def nodes_to_sleep(history: Series, prediction: Series, active: int, running: int, idle: int, config: CESConfig) -> int:
    """Alg. 2 PeriodicCheck (l.4-9): when T_H ≥ ξ_H and T_P ≥ ξ_P, DynamicResourceSleep(C_R + σ) —
    the number of nodes to put to sleep so that C_A = C_R + σ, taken only from the ``idle`` awake
    nodes. ``history`` is H (running nodes over the past hour, oldest first), ``prediction`` P
    (forecast running nodes over the next 3 h)."""
    if not len(history) or not len(prediction):
        return 0
    if recent_nodes_trend(history) < config.xi_h or future_nodes_trend(prediction) < config.xi_p:
        return 0
    return max(0, min(idle, active - (running + config.sigma)))


@dataclass
class CESController:
    """Node power state of Alg. 2. ``awake`` serve now; ``booting`` are (ready_minute, count)."""

    total: int
    config: CESConfig = field(default_factory=CESConfig)
    awake: int = -1
    booting: list[tuple[int, int]] = field(default_factory=list)
    wakeups: int = 0
    woken_nodes: int = 0

    def __post_init__(self) -> None:
        if self.total < 0:
            raise InvalidInput("total", self.total, "must be >= 0")
        if self.awake < 0:
            self.awake = self.total

    @property
    def active(self) -> int:
        """C_A: nodes powered on (awake or booting)."""
        return self.awake + sum(n for _, n in self.booting)

    def tick(self, now: int) -> None:
        """Finish the boots that are due at ``now``."""
        ready = [b for b in self.booting if b[0] <= now]
        if ready:
            self.awake += sum(n for _, n in ready)
            self.booting = [b for b in self.booting if b[0] > now]

    def job_arrival_check(self, now: int, request: int) -> int:
        """Alg. 2 l.1-3 (``nodes_to_wake``); returns the number woken, booting until ``now + boot_delay``."""
        c_a = self.active
        n = nodes_to_wake(c_a, request, self.config.sigma, self.total - c_a)
        if n <= 0:
            return 0
        self.booting.append((now + self.config.boot_delay, n))
        self.wakeups += 1
        self.woken_nodes += n
        return n

    def periodic_check(self, history: Series, running: int, forecast: Series) -> int:
        """Alg. 2 l.4-9 (``nodes_to_sleep``); ``history`` = H, running nodes over the past hour (oldest
        first), ``forecast`` = P, predicted running nodes over the next 3 h. Returns nodes put to sleep."""
        n = nodes_to_sleep(history, forecast, self.active, running, max(0, self.awake - running), self.config)
        self.awake -= n
        return n


@dataclass
class CESResult:
    minutes: int
    days: float
    avg_sleep_nodes: float
    daily_wakeups: float
    nodes_per_wakeup: float
    node_util_before: float
    node_util_after: float
    node_util_before_per_minute: float
    node_util_after_per_minute: float
    delayed_minutes: int
    delayed_node_minutes: float
    sleeps: int
    active_series: np.ndarray = field(repr=False)


def simulate_ces(
    running: np.ndarray,
    total: np.ndarray,
    checks: dict[int, tuple[Series, Series]],
    config: CESConfig | None = None,
    history_before: np.ndarray | None = None,
) -> CESResult:
    """Replay Alg. 2 minute by minute on a demand series (running nodes per minute). Pure.

    Demand is ``busy_nodes`` of the series (``history_before``, the minutes before the window,
    fills the first trailing window). Every minute, JobArrivalCheck with R = the busy nodes;
    at each minute ``m`` of ``checks`` (multiples of ``period``), PeriodicCheck with
    ``checks[m] = (H, P)`` (the past hour and the forecast next 3 h, as the forecaster sees them)
    and C_R = the busy nodes at ``m``. Utilisation is reported on the busy series (what the
    controller serves) and on the raw per-minute series.
    """
    config = config or CESConfig()
    total = np.asarray(total, float)
    raw = np.minimum(np.asarray(running, float), total)
    n = raw.size
    before = np.asarray(history_before if history_before is not None else [], float)
    before = before[max(0, before.size - (config.period - 1)) :]  # what the first trailing window reads
    busy = np.minimum(busy_nodes(np.concatenate([before, raw]), config.period)[before.size :], total)
    ctl = CESController(int(total.max()) if n else 0, config)
    powered = np.empty(n)
    delayed = 0
    delayed_nm = 0.0
    sleeps = 0
    for m in range(n):
        ctl.tick(m)
        r = math.ceil(busy[m])
        ctl.job_arrival_check(m, r)
        short = r - ctl.awake
        if short > 0:
            delayed += 1
            delayed_nm += short
        if m % config.period == 0 and m in checks:
            h, p = checks[m]
            sleeps += ctl.periodic_check(h, r, p) > 0
        powered[m] = min(ctl.active, total[m])
    days = n / 1440
    return CESResult(
        minutes=n,
        days=days,
        avg_sleep_nodes=float(np.mean(np.maximum(total - powered, 0))),
        daily_wakeups=ctl.wakeups / days if days else 0.0,
        nodes_per_wakeup=ctl.woken_nodes / ctl.wakeups if ctl.wakeups else 0.0,
        node_util_before=float(busy.sum() / total.sum()),
        node_util_after=float(busy.sum() / powered.sum()),
        node_util_before_per_minute=float(raw.sum() / total.sum()),
        node_util_after_per_minute=float(raw.sum() / powered.sum()),
        delayed_minutes=delayed,
        delayed_node_minutes=delayed_nm,
        sleeps=sleeps,
        active_series=powered,
    )


# ---- the end-to-end evaluation used by `qosmos predict ces` ----------------------------------------


def parse_when(text: str, end_of_day: bool = False) -> int:
    """'YYYY-MM-DD[ HH:MM[:SS]]' (UTC) → epoch minute; a bare date with ``end_of_day`` means its last minute + 1."""
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput("date", text, "expected YYYY-MM-DD or YYYY-MM-DD HH:MM[:SS]") from None
    dt = dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt
    minute = int(dt.timestamp() // 60)
    if end_of_day and len(text.strip()) == 10:
        minute += 1440
    return minute


def format_minute(minute: int) -> str:
    """Epoch minute → 'YYYY-MM-DD HH:MM' (UTC), for messages."""
    return datetime.fromtimestamp(int(minute) * 60, UTC).strftime("%Y-%m-%d %H:%M")


@dataclass
class ForecastWindow:
    """A forecaster trained before ``train_until`` and its forecasts over [eval_from, eval_to)."""

    grid: np.ndarray
    act: np.ndarray
    tot: np.ndarray
    slots: np.ndarray
    y: np.ndarray
    forecaster: CESForecaster
    origins: np.ndarray
    pred: np.ndarray
    eval_from: int
    eval_to: int
    fit_seconds: float
    predict_seconds: float

    @property
    def lo(self) -> int:
        return int(self.eval_from - self.grid[0])

    @property
    def hi(self) -> int:
        return int(self.eval_to - self.grid[0])

    def replay(self, config: CESConfig) -> CESResult:
        """Alg. 2 minute by minute over the window; a PeriodicCheck at each slot start with H = the
        slots of the past hour (the slot an hour before the last complete one … the last complete
        one) and P = the forecast made then for the next 3 hours."""
        back = max(1, config.history // SLOT_MIN)
        checks: dict[int, tuple[Series, Series]] = {}
        for k, o in enumerate(self.origins):
            m = int((o + 1) * SLOT_MIN + self.slots[0] - self.eval_from)  # minute index of slot o+1's start
            if 0 <= m < self.hi - self.lo and m % config.period == 0 and o >= back:
                checks[m] = (self.y[o - back : o + 1], self.pred[k])
        lo, hi = self.lo, self.hi
        return simulate_ces(
            self.act[lo:hi],
            self.tot[lo:hi],
            checks,
            config,
            history_before=self.act[max(0, lo - config.period) : lo],
        )


def forecast_window(
    minutes: np.ndarray,
    active: np.ndarray,
    total: np.ndarray,
    train_until: int,
    eval_from: int,
    eval_to: int,
    num_rounds: int = 150,
) -> ForecastWindow:
    """Train the forecaster on slots before ``train_until`` and forecast every slot of the window."""
    import time

    if num_rounds < 1:
        raise InvalidInput("rounds", num_rounds, "must be >= 1 (LightGBM boosting rounds)")
    if not train_until <= eval_from < eval_to:
        raise InvalidInput(
            "dates",
            f"train until {format_minute(train_until)}, evaluate {format_minute(eval_from)} … {format_minute(eval_to)}",
            "need train_until <= eval_from < eval_to",
        )
    grid, act = per_minute(minutes, active)
    _, tot = per_minute(minutes, total)
    if eval_from < grid[0] or eval_to > grid[-1] + 1 or train_until <= grid[0] + 1440:
        raise InvalidInput(
            "dates",
            f"train until {format_minute(train_until)}, evaluate {format_minute(eval_from)} … {format_minute(eval_to)}",
            f"the series covers {format_minute(grid[0])} … {format_minute(grid[-1] + 1)}; the windows must lie "
            "inside it with at least a day of training data",
        )
    slots, y = to_slots(grid, act)
    until_slot = int((train_until - slots[0]) // SLOT_MIN)
    t0 = time.perf_counter()
    fc = CESForecaster(num_rounds=num_rounds).fit(slots, y, until_slot)
    fit_s = time.perf_counter() - t0
    first = int((eval_from - slots[0]) // SLOT_MIN)
    last = int((eval_to - slots[0]) // SLOT_MIN)  # exclusive
    origins = np.arange(first - 1, last - 1)
    t1 = time.perf_counter()
    pred = fc.forecast(slots, y, origins)  # (origins, horizon), row k forecasts slots origin+1 ..
    return ForecastWindow(
        grid, act, tot, slots, y, fc, origins, pred, eval_from, eval_to, fit_s, time.perf_counter() - t1
    )


def sigma_tradeoff(
    minutes: np.ndarray,
    active: np.ndarray,
    total: np.ndarray,
    val_from: int,
    val_to: int,
    sigmas: Sequence[int],
    config: CESConfig | None = None,
    num_rounds: int = 150,
    xis_h: Sequence[float] | None = None,
    xis_p: Sequence[float] | None = None,
) -> list[dict[str, float]]:
    """One row per candidate (σ, ξ_H, ξ_P) on the validation window [val_from, val_to): the forecaster
    is trained only on data before ``val_from``, so the evaluation window is never looked at.
    ``xis_h`` / ``xis_p`` default to the config's one threshold each."""
    if not sigmas:
        raise InvalidInput("sigmas", "", "need at least one candidate σ")
    base = config or CESConfig()
    hs = list(xis_h) if xis_h else [base.xi_h]
    ps = list(xis_p) if xis_p else [base.xi_p]
    w = forecast_window(minutes, active, total, val_from, val_from, val_to, num_rounds)
    rows = []
    for sg in sigmas:
        for xh in hs:
            for xp in ps:
                res = w.replay(replace(base, sigma=int(sg), xi_h=float(xh), xi_p=float(xp)))
                rows.append(
                    {
                        "sigma": int(sg),
                        "xi_h": float(xh),
                        "xi_p": float(xp),
                        "node_util": res.node_util_after,
                        "node_util_per_minute": res.node_util_after_per_minute,
                        "daily_wakeups": res.daily_wakeups,
                        "avg_sleep_nodes": res.avg_sleep_nodes,
                        "nodes_per_wakeup": res.nodes_per_wakeup,
                        "delayed_node_minutes": res.delayed_node_minutes,
                    }
                )
    return rows


def choose_knobs(rows: Sequence[dict[str, float]], max_wakeups: float) -> tuple[dict[str, float], str]:
    """The row with the highest node utilisation among those with ≤ ``max_wakeups`` wake-ups per day
    (ties: the smaller σ, then the smaller thresholds); when none qualifies, the one with the fewest
    wake-ups (ties: higher utilisation)."""
    ok = [r for r in rows if r["daily_wakeups"] <= max_wakeups]
    if ok:
        best = max(ok, key=lambda r: (r["node_util"], -r["sigma"], -r.get("xi_h", 0.0), -r.get("xi_p", 0.0)))
        return best, f"highest node utilisation with <= {max_wakeups:g} wake-ups/day"
    best = min(rows, key=lambda r: (r["daily_wakeups"], -r["node_util"]))
    return best, f"no candidate has <= {max_wakeups:g} wake-ups/day: fewest wake-ups"


def choose_sigma(rows: Sequence[dict[str, float]], max_wakeups: float) -> tuple[int, str]:
    """``choose_knobs``' σ."""
    best, why = choose_knobs(rows, max_wakeups)
    return int(best["sigma"]), why


def run_ces(
    minutes: np.ndarray,
    active: np.ndarray,
    total: np.ndarray,
    train_until: int,
    eval_from: int,
    eval_to: int,
    config: CESConfig | None = None,
    num_rounds: int = 150,
) -> tuple[dict[str, object], dict[str, np.ndarray]]:
    """Train the forecaster before ``train_until``, forecast and simulate on [eval_from, eval_to).

    Returns the ces.json dict and the arrays behind the plot.
    """
    w = forecast_window(minutes, active, total, train_until, eval_from, eval_to, num_rounds)
    fc, y, origins, pred, slots = w.forecaster, w.y, w.origins, w.pred, w.slots
    last = int((eval_to - slots[0]) // SLOT_MIN)
    # accuracy: every (origin, h) whose target lies inside the evaluation window
    tgt = origins[:, None] + np.arange(1, fc.horizon + 1)[None, :]
    inside = tgt < last
    actual = np.where(inside, y[np.clip(tgt, 0, y.size - 1)], np.nan)
    persist = np.repeat(y[origins][:, None], fc.horizon, axis=1)
    by_h = [smape(actual[inside[:, h], h], pred[inside[:, h], h]) for h in range(fc.horizon)]
    config = config or CESConfig()
    res = w.replay(config)
    summary = {
        "smape": smape(actual[inside], pred[inside]),
        "smape_10min": by_h[0],
        "smape_1h": by_h[min(5, fc.horizon - 1)],
        "smape_3h": by_h[-1],
        "smape_persistence": smape(actual[inside], persist[inside]),
        "smape_by_horizon": by_h,
        "avg_sleep_nodes": res.avg_sleep_nodes,
        "daily_wakeups": res.daily_wakeups,
        "nodes_per_wakeup": res.nodes_per_wakeup,
        "node_util_before": res.node_util_before,
        "node_util_after": res.node_util_after,
        "node_util_before_per_minute": res.node_util_before_per_minute,
        "node_util_after_per_minute": res.node_util_after_per_minute,
        "running_nodes": f"busy at any minute of the last {config.period} (busy_nodes); *_per_minute: the raw series",
        "sleeps": res.sleeps,
        "delayed_minutes": res.delayed_minutes,
        "delayed_node_minutes": res.delayed_node_minutes,
        "eval_days": res.days,
        "config": asdict(config),
        "granularity_min": SLOT_MIN,
        "horizon_slots": fc.horizon,
        "train_rows": fc.model.meta["training_rows"] if fc.model else 0,
        "fit_seconds": round(w.fit_seconds, 3),
        "forecast_ms_per_origin": round(1000 * w.predict_seconds / max(1, origins.size), 4),
    }
    lo, hi = w.lo, w.hi
    arrays = {
        "minute": w.grid[lo:hi],
        "running": w.act[lo:hi],
        "total": w.tot[lo:hi],
        "ces_active": res.active_series,
        "pred_slot_minute": slots[origins + 1],
        "pred_next": pred[:, 0],
        "pred_3h_minute": slots[np.clip(origins + fc.horizon, 0, slots.size - 1)],
        "pred_3h": pred[:, -1],
    }
    return summary, arrays


def plot_ces(arrays: dict[str, np.ndarray], path: Path, title: str = "Cluster Energy Saving") -> None:
    """Helios Fig. 14/15: total, running (actual), predicted and CES-active nodes over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    def dt(m: np.ndarray) -> np.ndarray:
        return np.array([datetime.fromtimestamp(int(x) * 60, UTC) for x in m])

    fig, ax = plt.subplots(figsize=(12, 4.2))
    ax.plot(dt(arrays["minute"]), arrays["total"], color="tab:red", lw=1.5, label="Total nodes")
    ax.plot(dt(arrays["minute"]), arrays["ces_active"], color="tab:green", lw=1.2, label="Active nodes with CES")
    ax.plot(dt(arrays["minute"]), arrays["running"], "--", color="tab:blue", lw=0.8, label="Running nodes (actual)")
    ax.plot(
        dt(arrays["pred_slot_minute"]),
        arrays["pred_next"],
        "--",
        color="tab:orange",
        lw=0.8,
        label="Prediction (10 min ahead)",
    )
    ax.set_ylabel("# of nodes")
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d"))
    ax.legend(loc="lower left", ncol=4, fontsize=8)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
