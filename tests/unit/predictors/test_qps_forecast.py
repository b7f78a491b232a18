"""The query-rate forecaster of issue 23 §3: trailing features only, trained on the past only."""

from __future__ import annotations

import numpy as np
import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.predictors.qps_forecast import QpsForecaster, features, forecast_series, last_row, peak_ahead


def series(n: int = 400, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return np.maximum(0.0, 200 + 150 * np.sin(t / 40) + rng.normal(0, 30, n))


def test_the_target_is_the_peak_ahead() -> None:
    y = np.array([1.0, 5.0, 2.0, 7.0, 3.0])
    got = peak_ahead(y, 2)
    assert got[:3].tolist() == [5.0, 7.0, 7.0] and np.isnan(got[3:]).all()


def test_the_online_row_is_the_training_row() -> None:
    y = series(200)
    for n in (1, 2, 6, 30, 200):
        assert np.allclose(last_row(y[:n]), features(y[:n])[-1], equal_nan=True), n


def test_no_peeking() -> None:
    """The band made after slot i-1 is the same whatever follows it: the future is replaced by garbage."""
    y = series()
    fc = QpsForecaster(min_history=100, retrain_every=50, num_rounds=30)
    base = forecast_series(y, fc)
    for i in (120, 250, 399):
        fake = y.copy()
        fake[i:] = 1e6
        again = forecast_series(fake, QpsForecaster(min_history=100, retrain_every=50, num_rounds=30))
        assert np.array_equal(again[: i + 1], base[: i + 1]), i


def test_fit_uses_only_targets_before_until() -> None:
    y = series()
    fc = QpsForecaster(horizon=3, num_rounds=10).fit(y, 150)
    assert fc.model is not None and fc.model.meta["training_rows"] == 150 - 3  # origins 0 … 146
    changed = y.copy()
    changed[150:] = 0.0
    other = QpsForecaster(horizon=3, num_rounds=10).fit(changed, 150)
    row = last_row(y[:150])
    assert fc.model.predict(row[None, :])[0] == other.model.predict(row[None, :])[0]  # type: ignore[union-attr]


def test_the_band_is_an_upper_band_and_the_rule_comes_first() -> None:
    y = series(600)
    fc = QpsForecaster(min_history=150, fallback_window=10, fallback_margin=1.5)
    assert fc.upper(y[:20]) == pytest.approx(1.5 * y[10:20].max()) and "largest rate" in fc.how
    band = forecast_series(y, QpsForecaster(min_history=150))
    peak = peak_ahead(y, 2)
    late = slice(200, 590)
    cover = np.mean(band[late][1:] >= peak[late][:-1] - 1e-9)  # band[i] covers y[i], y[i+1] = peak[i-1]
    assert cover > 0.8  # a q0.95 band: most peaks under it (a mean forecast covers about half)


def test_bad_settings_and_histories() -> None:
    with pytest.raises(InvalidInput, match="quantile"):
        QpsForecaster(quantile=1.0)
    with pytest.raises(InvalidInput, match="horizon"):
        QpsForecaster(horizon=0)
    with pytest.raises(InvalidInput, match="history"):
        QpsForecaster().upper([1.0, float("nan")])
    assert QpsForecaster().upper([]) == 0.0
