"""The online predictors behind the core's DurationPredictor protocol (hand-computed cases)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import DurationPredictor, Job
from qosmos.predictors import make_duration_predictor
from qosmos.predictors.qssf import OnlineQSSF, blend_values, replay_online
from qosmos.predictors.runtime import Last2Elapsed


def job(i: int, user: str = "x", gpus: int = 1, name: str | None = None, t: float = 0.0) -> Job:
    return Job(id=f"j{i}", submit_time=t, gpus=gpus, user=user, name=name)


def test_factory_builds_protocol_predictors_and_refuses_unknowns() -> None:
    q = make_duration_predictor("qssf", lam=0.25, blend="log", train_after=10)
    assert isinstance(q, OnlineQSSF) and isinstance(q, DurationPredictor)
    assert (q.lam, q.blend, q.train_after) == (0.25, "log", 10)
    assert isinstance(make_duration_predictor("runtime", keep=5), Last2Elapsed)
    log = make_duration_predictor("qssf-log", lam=0.25)
    assert isinstance(log, OnlineQSSF) and (log.lam, log.blend) == (0.25, "log")
    assert make_duration_predictor("qssf").blend == "linear"  # the paper's blend is the default
    with pytest.raises(InvalidInput, match="qssf-log fixes"):
        make_duration_predictor("qssf-log", blend="linear")
    with pytest.raises(InvalidInput, match="expected one of qssf, qssf-log, runtime"):
        make_duration_predictor("oracle")
    with pytest.raises(InvalidInput, match="train_afer"):
        make_duration_predictor("qssf", train_afer=5)
    with pytest.raises(InvalidInput, match="blend"):
        make_duration_predictor("qssf", blend="geometric")


def test_observation_is_invisible_to_predictions_before_its_end() -> None:
    q = OnlineQSSF(train_after=100)
    a = job(1, t=0.0)
    q.observe(a, 100.0, end=100.0)  # reported early: must still wait for its end
    assert q.predict(job(2, t=50.0), now=50.0) is None  # nothing has ended by 50
    assert q.pending == 1
    assert q.predict(job(3, t=99.9), now=99.9) is None
    # at its end it counts: user x, 1 GPU → P_R = that user's mean 100 (Alg. 1 line 16); no P_M yet
    assert q.predict(job(4, t=100.0), now=100.0) == pytest.approx(100.0)
    with pytest.raises(InvalidInput, match="time order"):
        q.predict(job(5, t=60.0), now=60.0)  # going back would let the job leak into the past


def test_replay_never_sees_a_job_before_it_finished() -> None:
    """Replay puts a job into history at submit + duration, never earlier (the old bug)."""
    jobs = [
        Job(id="long", submit_time=0.0, user="u", duration=1000.0),
        Job(id="short", submit_time=10.0, user="u", duration=5.0),
        Job(id="probe1", submit_time=14.0, user="u", duration=2.0),  # nothing ended yet
        Job(id="probe2", submit_time=15.0, user="u", duration=1.0),  # "short" ended at 15
        Job(id="probe3", submit_time=1000.0, user="u", duration=1.0),  # "long" ended at 1000
    ]
    preds, parts = replay_online(OnlineQSSF(train_after=100), jobs)
    assert preds[:3] == [None, None, None]
    assert preds[3] == pytest.approx(5.0)
    # by 1000: short (5), probe1 (2, ended 16), probe2 (1, ended 16), long (1000) → mean 1008 / 4
    assert preds[4] == pytest.approx(1008.0 / 4)
    assert [p[1] for p in parts] and all(math.isnan(pm) for _, pm in parts)  # P_M never trained


def test_linear_blend_is_the_default_and_log_is_an_option() -> None:
    assert blend_values(0.25, "linear", 100.0, 200.0) == pytest.approx(0.25 * 100 + 0.75 * 200)
    assert blend_values(0.25, "log", 100.0, 200.0) == pytest.approx(
        math.expm1(0.25 * math.log1p(100) + 0.75 * math.log1p(200))
    )
    assert blend_values(0.5, "linear", None, 80.0) == 80.0
    assert blend_values(0.5, "linear", 30.0, math.nan) == 30.0
    assert blend_values(0.5, "linear", None, math.nan) is None
    assert OnlineQSSF().blend == "linear"


def _synthetic(n: int) -> list[Job]:
    jobs = []
    for i in range(n):
        kind = i % 3
        dur = [100.0, 1000.0, 10000.0][kind] * (1 + (i % 7) / 10)
        name = ["resnet_train_", "bert_ft_", "gan_"][kind] + str(i)
        jobs.append(Job(id=f"s{i}", submit_time=600.0 * i, gpus=1 + kind, user=f"u{i % 5}", name=name, duration=dur))
    return jobs


def test_online_prediction_is_the_linear_blend_of_hand_checked_parts() -> None:
    q = OnlineQSSF(lam=0.25, train_after=60, retrain_every=10_000, num_rounds=20)
    jobs = _synthetic(120)
    for j in jobs[:100]:
        q.observe(j, j.duration or 0.0, j.submit_time + (j.duration or 0.0))
    probe = Job(id="p", submit_time=600.0 * 100 + 20_000, gpus=1, user="u0", name="resnet_train_999")
    p_r, p_m = q.predict_parts(probe, probe.submit_time)
    # P_R by hand: u0's resnet jobs are i ≡ 0 mod 15; all ended by now; decay α = 0.5, newest weight 1
    done = [j for j in jobs[:100] if j.user == "u0" and j.name.startswith("resnet")]  # type: ignore[union-attr]
    num = den = 0.0
    for j in done:
        num, den = 0.5 * num + (j.duration or 0.0), 0.5 * den + 1.0
    assert p_r == pytest.approx(num / den)
    # P_M from the one-row fast path equals LightGBM's batch prediction
    batch = q.q.model.predict(np.array([q.q.feature_row(probe, q.q.bucketer.bucket(probe.name))]))  # type: ignore[union-attr]
    assert p_m == pytest.approx(max(math.expm1(float(batch[0])), 0.0), rel=1e-12)
    assert q.predict(probe, probe.submit_time) == pytest.approx(0.25 * p_r + 0.75 * p_m)


def test_retraining_schedule_counts_completed_jobs() -> None:
    q = OnlineQSSF(train_after=30, retrain_every=20, max_train_jobs=40, num_rounds=5)
    jobs = _synthetic(90)
    probe = job(0, t=0.0)
    for j in jobs:
        q.observe(j, j.duration or 0.0, j.submit_time)  # ends in submit order
    assert math.isnan(q.predict_parts(probe, 600.0 * 28)[1])  # 29 joined: no P_M yet
    assert q.fits == []
    q.predict(probe, 600.0 * 29)  # the 30th joins → first fit
    assert q.fits == [30] and q.q.model is not None and q.q.model.meta["training_rows"] == 30
    q.predict(probe, 600.0 * 89)  # 90 joined: refits at 50, 70, 90, each on the latest 40 at most
    assert q.fits == [30, 50, 70, 90]
    assert q.q.model.meta["training_rows"] == 40
    # deterministic given the call sequence: the same calls give the same fits and predictions
    r = OnlineQSSF(train_after=30, retrain_every=20, max_train_jobs=40, num_rounds=5)
    for j in jobs:
        r.observe(j, j.duration or 0.0, j.submit_time)
    r.predict(probe, 600.0 * 89)
    assert r.fits == [30, 50, 70, 90]
    assert r.predict(probe, 600.0 * 90) == q.predict(probe, 600.0 * 90)


def test_online_qssf_refuses_bad_observations_and_options() -> None:
    q = OnlineQSSF()
    with pytest.raises(InvalidInput, match="duration"):
        q.observe(job(1), -1.0, 5.0)
    with pytest.raises(InvalidInput, match="end"):
        q.observe(job(1), 1.0, math.inf)
    with pytest.raises(InvalidInput, match="now"):
        q.predict(job(2), math.nan)
    with pytest.raises(InvalidInput, match="train_after"):
        OnlineQSSF(train_after=0)
    with pytest.raises(InvalidInput, match="max_train_jobs"):
        OnlineQSSF(train_after=100, max_train_jobs=10)
    with pytest.raises(InvalidInput, match="num_rounds"):
        OnlineQSSF(num_rounds=0)


def test_last2_elapsed_hand_computed() -> None:
    r = Last2Elapsed()
    for i, (d, end) in enumerate([(10.0, 10.0), (50.0, 20.0), (30.0, 30.0), (100.0, 40.0)]):
        r.observe(job(i), d, end)
    assert r.predict(job(9), now=5.0) is None  # nothing ended yet
    assert r.predict(job(9), now=35.0) == pytest.approx((30 + 50) / 2)  # the 100 s job ends at 40
    assert r.predict(job(9), now=40.0) == pytest.approx((100 + 30) / 2)
    running = job(9)
    running.executed = 40.0  # ran 40 s: only jobs longer than 40 s count (seed 004 §VI-A)
    assert r.predict(running, now=40.0) == pytest.approx((100 + 50) / 2)
    running.executed = 200.0  # longer than every job seen: mean of all, floored at the elapsed time
    assert r.predict(running, now=40.0) == 200.0
    running.executed = 60.0  # one qualifying job (100)
    assert r.predict(running, now=40.0) == 100.0
