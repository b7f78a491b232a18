from __future__ import annotations

import numpy as np
import pytest
from qosmos.predictors.runtime import (
    ElapsedRuntimePredictor,
    accuracy,
    evaluate_runtime,
    history_features,
    last2,
    underestimation_rate,
)


def test_accuracy_and_underestimation() -> None:
    assert accuracy(np.array([50.0, 200.0, 0.0]), np.array([100.0, 100.0, 0.0])) == pytest.approx((0.5 + 0.5 + 1) / 3)
    assert underestimation_rate(np.array([50.0, 200.0, 100.0]), np.array([100.0, 100.0, 100.0])) == pytest.approx(1 / 3)


def test_last2_with_and_without_elapsed() -> None:
    d = np.array([10.0, 100.0, 20.0, 30.0, 500.0])
    assert list(last2(d)) == [0.0, 10.0, 55.0, 60.0, 25.0]
    # elapsed 50: only previous jobs longer than 50 count; predictions never below 50
    assert list(last2(d, elapsed=50.0, default=80.0)) == [80.0, 80.0, 100.0, 100.0, 100.0]


def test_history_features_are_causal() -> None:
    d = np.array([np.e - 1, np.e**2 - 1, np.e**3 - 1])
    h = history_features(d)
    assert np.isnan(h[0]).all()
    assert h[1, 0] == pytest.approx(1.0) and h[2, 0] == pytest.approx(2.0) and h[2, 1] == pytest.approx(1.5)


def test_elapsed_helps_on_heavy_tailed_runtimes() -> None:
    rng = np.random.default_rng(1)
    d = rng.lognormal(mean=6, sigma=1.5, size=3000)
    r = evaluate_runtime(d, num_rounds=30)
    for row in r["thresholds"]:
        assert row["jobs"] > 0
        assert row["lgbm_elapsed"]["underestimation_rate"] < row["lgbm"]["underestimation_rate"]
        assert row["last2_elapsed"]["underestimation_rate"] < row["last2"]["underestimation_rate"]


def test_runtime_model_roundtrip(tmp_path) -> None:
    from qosmos.predictors.base import GBDTModel

    d = np.random.default_rng(2).lognormal(5, 1, 500)
    x = history_features(d)
    m = ElapsedRuntimePredictor(True, ["last1", "last2", "mean10", "median10"], num_rounds=10).fit(x, d, (0.0, 100.0))
    m.model.save(tmp_path / "rt.txt")
    back = GBDTModel.load(tmp_path / "rt.txt", expected_features=["last1", "last2", "mean10", "median10", "elapsed"])
    xe = np.column_stack([x, np.full(len(x), 100.0)])
    assert np.allclose(back.predict(xe), m.model.predict(xe))
    assert (m.predict(x, 100.0) >= 100.0).all()
