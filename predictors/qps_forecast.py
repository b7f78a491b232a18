"""Query-rate forecaster for SODA's placer: the upper band of the load over the next replica start-up
(issue 23 §3, switching ahead of the load).

The CES forecaster's machinery (``predictors.ces``: LightGBM on a series' own past — lags, trailing
means, medians, maxima and standard deviations, differences) applied to a query-rate series of
regular slots. The target is the peak rate over the next ``horizon`` slots (what the replicas asked
for now must carry until the next decision's are Ready, ``core.inference.forecast_horizon_s``); the
objective is LightGBM's quantile loss at ``quantile``, so the answer is an upper band, not a mean.

No peeking: the forecast made after slot o (for slots o+1 … o+horizon) comes from a model trained only
on (origin, target) pairs whose targets all lie at or before o, with features that are trailing
windows ending at their origin. The model is retrained every ``retrain_every`` slots on the whole
past (an expanding window). Until ``min_history`` slots are known the band is the largest rate of the
last ``fallback_window`` slots times ``fallback_margin``: a rule, said as such in :attr:`how`.

Pure apart from LightGBM: no clock, no files; the replay (``simulator.inference``) and the live
controller (``operator.inference``) call the same object with the rates they observed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from qosmos.extender.core.errors import InvalidInput
from qosmos.predictors.base import GBDTModel, SingleRowPredictor

LAGS = (0, 1, 2, 3, 5, 10)
WINDOWS = (3, 5, 10, 20, 60)
FEATURES = (
    *(f"lag_{k}" for k in LAGS),
    *(f"mean_{w}" for w in WINDOWS),
    *(f"median_{w}" for w in WINDOWS),
    *(f"max_{w}" for w in WINDOWS),
    *(f"std_{w}" for w in WINDOWS),
    "diff_1",
    "diff_5",
)


def _trailing(y: np.ndarray, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean, median, max, std over the last ``w`` values ending at each index (fewer at the start)."""
    n = y.size
    pad = np.concatenate([np.full(w - 1, np.nan), y])
    view = np.lib.stride_tricks.sliding_window_view(pad, w)[:n]
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows never occur: index 0 is real
            return np.nanmean(view, 1), np.nanmedian(view, 1), np.nanmax(view, 1), np.nanstd(view, 1)


def _lag(y: np.ndarray, k: int) -> np.ndarray:
    out = np.full(y.size, np.nan)
    if k < y.size:
        out[k:] = y[: y.size - k] if k else y
    return out


def features(y: np.ndarray) -> np.ndarray:
    """One row per origin (index of the last observed slot): trailing features only."""
    y = np.asarray(y, float)
    cols = [_lag(y, k) for k in LAGS]
    rolled = [_trailing(y, w) for w in WINDOWS]
    for part in range(4):
        cols += [r[part] for r in rolled]
    cols += [y - _lag(y, 1), y - _lag(y, 5)]
    return np.column_stack(cols)


def last_row(y: np.ndarray) -> np.ndarray:
    """``features(y)[-1]`` computed from the tail alone (the online path: one row per decision)."""
    y = np.asarray(y, float)
    n = y.size
    row = [y[n - 1 - k] if k < n else np.nan for k in LAGS]
    tails = [y[max(0, n - w) :] for w in WINDOWS]
    row += [float(t.mean()) for t in tails]
    row += [float(np.median(t)) for t in tails]
    row += [float(t.max()) for t in tails]
    row += [float(t.std()) for t in tails]
    row += [y[-1] - y[-2] if n > 1 else np.nan, y[-1] - y[-6] if n > 5 else np.nan]
    return np.asarray(row, float)


def peak_ahead(y: np.ndarray, horizon: int) -> np.ndarray:
    """Target per origin o: max(y[o+1 .. o+horizon]); NaN where the window runs past the series."""
    y = np.asarray(y, float)
    out = np.full(y.size, np.nan)
    if y.size > horizon:
        out[: y.size - horizon] = np.lib.stride_tricks.sliding_window_view(y[1:], horizon).max(axis=1)
    return out


@dataclass
class QpsForecaster:
    """Upper band of the peak query rate over the next ``horizon`` slots (module notes)."""

    horizon: int = 2
    quantile: float = 0.95
    retrain_every: int = 60
    min_history: int = 120
    fallback_window: int = 20
    fallback_margin: float = 1.2
    num_rounds: int = 100
    params: dict[str, object] = field(
        default_factory=lambda: {
            "objective": "quantile",
            "learning_rate": 0.08,
            "num_leaves": 15,
            "min_data_in_leaf": 20,
            "max_bin": 63,
            "num_threads": 1,
        }
    )
    model: GBDTModel | None = None
    _row: SingleRowPredictor | None = field(default=None, repr=False)
    trained_until: int = 0  # slots the model was trained on (its targets all lie before this index)
    how: str = ""  # how the last band was made

    def __post_init__(self) -> None:
        for name in ("horizon", "retrain_every", "min_history", "fallback_window", "num_rounds"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidInput(name, v, "must be an integer >= 1")
        if not 0 < self.quantile < 1:
            raise InvalidInput("quantile", self.quantile, "must be in (0, 1)")
        if not (math.isfinite(self.fallback_margin) and self.fallback_margin >= 1):
            raise InvalidInput("fallback_margin", self.fallback_margin, "must be a finite number >= 1")

    def fit(self, y: Sequence[float] | np.ndarray, until: int) -> QpsForecaster:
        """Train on the origins whose targets lie within y[:until] (nothing at or after ``until``)."""
        y = np.asarray(y, float)[:until]
        target = peak_ahead(y, self.horizon)
        keep = np.isfinite(target)
        if not keep.any():
            raise InvalidInput("history", until, f"too short to train: need more than {self.horizon} slots")
        params = {**self.params, "alpha": self.quantile}
        self.model = GBDTModel(FEATURES, (), params, self.num_rounds)
        self.model.fit(features(y)[keep], target[keep], window=(0.0, float(until)))
        self._row = self.model.row_predictor()
        self.trained_until = until
        return self

    def upper(self, history: Sequence[float] | np.ndarray) -> float:
        """The band for the ``horizon`` slots after ``history`` (oldest first, the last is the newest
        observed slot). Retrains when ``retrain_every`` slots were added since the last fit."""
        y = np.asarray(history, float)
        if y.size == 0:
            self.how = "no history"
            return 0.0
        if not np.isfinite(y).all() or (y < 0).any():
            raise InvalidInput("history", "a rate", "query rates must be finite numbers >= 0")
        if y.size < self.min_history:
            self.how = (
                f"{y.size} of {self.min_history} slots known: {self.fallback_margin:g} x the largest rate of "
                f"the last {self.fallback_window}"
            )
            return float(self.fallback_margin * y[-self.fallback_window :].max())
        if self.model is None or y.size - self.trained_until >= self.retrain_every:
            self.fit(y, y.size)
        assert self._row is not None
        band = self._row(last_row(y))
        self.how = f"LightGBM q{self.quantile:g} on {self.trained_until} slots"
        return max(band, 0.0)


def forecast_series(y: Sequence[float] | np.ndarray, forecaster: QpsForecaster) -> np.ndarray:
    """out[i]: the band made after slot i-1 (from y[:i] only) for slots i … i+horizon-1; out[0] = 0."""
    y = np.asarray(y, float)
    out = np.zeros(y.size)
    for i in range(1, y.size):
        out[i] = forecaster.upper(y[:i])
    return out


__all__ = ["FEATURES", "QpsForecaster", "features", "forecast_series", "last_row", "peak_ahead"]
