from __future__ import annotations

import json

import numpy as np
import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.predictors.base import (
    GBDTModel,
    ModelUpdateEngine,
    get_predictor,
    median_abs_log_error,
    rankdata,
    sidecar_path,
    smape,
    spearman,
)


def _data(n: int = 500) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.integers(0, 5, n), rng.normal(size=n), rng.uniform(size=n)])
    y = 3 * x[:, 0] + 2 * x[:, 1] + rng.normal(scale=0.1, size=n)
    return x, y


def test_metrics_known_values() -> None:
    assert smape(np.array([100.0, 0.0]), np.array([50.0, 0.0])) == pytest.approx(100 * (2 * 50 / 150) / 2)
    assert list(rankdata(np.array([10.0, 20.0, 10.0, 5.0]))) == [2.5, 4.0, 2.5, 1.0]
    assert spearman(np.array([1.0, 2, 3, 4]), np.array([10.0, 20, 30, 40])) == pytest.approx(1.0)
    assert spearman(np.array([1.0, 2, 3, 4]), np.array([4.0, 3, 2, 1])) == pytest.approx(-1.0)
    assert median_abs_log_error(np.array([0.0, np.e - 1]), np.array([0.0, 0.0])) == pytest.approx(0.5)


def test_gbdt_save_load_roundtrip_and_sidecar(tmp_path) -> None:
    x, y = _data()
    m = GBDTModel(["vc", "a", "b"], ["vc"], num_rounds=30).fit(x, y, window=(0.0, 100.0))
    path = tmp_path / "m.txt"
    m.save(path)
    meta = json.loads(sidecar_path(path).read_text())
    assert meta["feature_names"] == ["vc", "a", "b"] and meta["categorical"] == ["vc"]
    assert meta["training_window"] == [0.0, 100.0] and meta["training_rows"] == 500
    assert {"lightgbm", "numpy", "python"} <= set(meta["versions"])
    back = GBDTModel.load(path, expected_features=["vc", "a", "b"])
    assert np.allclose(back.predict(x), m.predict(x))
    assert m.evaluate(x, y)["spearman"] > 0.95
    assert get_predictor("gbdt") is GBDTModel


def test_load_with_other_features_names_the_mismatch(tmp_path) -> None:
    x, y = _data()
    GBDTModel(["vc", "a", "b"], num_rounds=5).fit(x, y).save(tmp_path / "m.txt")
    with pytest.raises(InvalidInput) as err:
        GBDTModel.load(tmp_path / "m.txt", expected_features=["vc", "a", "c"])
    assert "missing ['c']" in str(err.value) and "unexpected ['b']" in str(err.value)
    with pytest.raises(InvalidInput, match="different order"):
        GBDTModel.load(tmp_path / "m.txt", expected_features=["a", "vc", "b"])
    with pytest.raises(InvalidInput):
        GBDTModel.load(tmp_path / "missing.txt")
    with pytest.raises(InvalidInput):
        GBDTModel(["a", "a"])
    with pytest.raises(InvalidInput):
        GBDTModel(["a"]).predict(np.zeros((1, 1)))
    with pytest.raises(InvalidInput):
        GBDTModel(["a", "b"], num_rounds=2).fit(np.zeros((3, 3)), np.zeros(3))


def test_model_update_engine_schedule() -> None:
    fits: list[int] = []
    eng: ModelUpdateEngine[int] = ModelUpdateEngine(
        refit=lambda s: fits.append(len(s)) or len(s), interval_s=100, window_s=250, min_samples=3
    )
    for t in range(0, 10):
        eng.observe(t * 50.0, t)
    assert not eng.maybe_refit(40.0)  # only 1 sample completed by t=40
    assert eng.maybe_refit(120.0) and fits == [3]  # samples at 0, 50, 100
    assert not eng.maybe_refit(150.0)  # interval not elapsed
    assert eng.maybe_refit(400.0) and fits == [3, 6]  # window 150..400 → 150, 200, ..., 400
    assert eng.fits == 2 and eng.model == 6
    with pytest.raises(InvalidInput):
        eng.observe(10.0, 99)
