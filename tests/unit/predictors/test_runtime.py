from __future__ import annotations

import numpy as np
import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Job
from qosmos.predictors.runtime import (
    ElapsedRuntimePredictor,
    SimilarElapsed,
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


def _job(i: int, gpus: int = 8, user: str = "bench", name: str | None = None) -> Job:
    return Job(f"j{i}", float(i), gpus, user=user, name=name or f"train-{i}")


def test_similar_elapsed_conditions_on_the_time_already_run() -> None:
    """Seed 004 §VI-A: only the similar jobs that ran longer than the elapsed time count."""
    p = SimilarElapsed()
    assert p.predict(_job(0), 0.0) is None  # no history
    for i, d in enumerate([10.0, 10.0, 10.0, 60.0, 60.0, 60.0]):
        p.observe(_job(i), d, 100.0 + i)
    p.predict(_job(9), 200.0)  # everything ended by 200
    s = float(np.std([10.0] * 3 + [60.0] * 3, ddof=1))
    assert p.predict(_job(9), 200.0, 0.0) == pytest.approx(35.0 + s / np.sqrt(6))
    # a job that has run 20 s is one of the 60 s kind: E[D | D > 20] = 60 (no spread among them)
    assert p.predict(_job(9), 200.0, 20.0) == pytest.approx(60.0)
    assert p.predict(_job(9, gpus=1), 200.0, 20.0) == pytest.approx(60.0)  # elapsed defaults to job.executed
    running = Job("r", 0.0, 8, user="bench", name="train-r", executed=20.0)
    assert p.predict(running, 200.0) == pytest.approx(60.0)
    # past every completed job: never "ends now" but a memoryless remainder (the mean run time) beyond it
    assert p.predict(_job(9), 200.0, 90.0) == pytest.approx(90.0 + 35.0)


def test_similar_elapsed_thin_history_takes_the_spread_not_the_mean() -> None:
    """The issue's case: two 15 s jobs and two 60 s jobs seen, a mean of 37.5 s; with n = 4 the
    prediction is the mean plus one standard error, and the margin fades as the history grows."""
    p = SimilarElapsed()
    for i, d in enumerate([15.0, 60.0, 15.0, 60.0]):
        p.observe(_job(i), d, float(i))
    thin = p.predict(_job(9), 10.0, 0.0)
    s = float(np.std([15.0, 60.0, 15.0, 60.0], ddof=1))
    assert thin == pytest.approx(37.5 + s / 2) and thin > 37.5 + 10
    for i, d in enumerate([15.0, 60.0] * 48):
        p.observe(_job(10 + i), d, 20.0 + i)
    thick = p.predict(_job(200), 500.0, 0.0)
    assert thick is not None and 37.5 < thick < 37.5 + 3  # n = 100: s / 10 ~ 2.3 s


def test_similar_elapsed_uses_the_most_specific_group_that_has_survivors() -> None:
    p = SimilarElapsed()
    for i in range(3):
        p.observe(_job(i, gpus=1, user="a", name="resnet-lr0.1"), 100.0, float(i))
        p.observe(_job(10 + i, gpus=1, user="b", name="bert-large"), 1000.0, float(i))
    p.observe(_job(20, gpus=1, user="a", name="resnet-lr0.2"), 100.0, 5.0)
    assert p.predict(_job(30, gpus=1, user="a", name="resnet-lr0.3"), 10.0, 0.0) == pytest.approx(100.0)
    assert p.predict(_job(31, gpus=1, user="b", name="bert-large"), 10.0, 0.0) == pytest.approx(1000.0)
    # user a's jobs never ran 500 s: the broader group (every 1-GPU job) speaks
    assert p.predict(_job(32, gpus=1, user="a", name="resnet-lr0.3"), 10.0, 500.0) == pytest.approx(1000.0)
    assert p.predict(_job(33, gpus=4, user="c", name="x"), 10.0, 0.0) == pytest.approx(
        float(np.mean([100.0] * 4 + [1000.0] * 3) + np.std([100.0] * 4 + [1000.0] * 3, ddof=1) / np.sqrt(7))
    )


def test_similar_elapsed_is_causal_and_validates() -> None:
    p = SimilarElapsed()
    p.observe(_job(0), 50.0, 100.0)
    assert p.predict(_job(1), 99.0) is None  # ends at 100: not yet history
    assert p.predict(_job(1), 100.0) == pytest.approx(50.0)
    with pytest.raises(InvalidInput):
        p.observe(_job(2), float("nan"), 1.0)
    with pytest.raises(InvalidInput):
        SimilarElapsed(keep=1)
