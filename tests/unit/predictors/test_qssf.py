from __future__ import annotations

import math

import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Job
from qosmos.predictors.qssf import NameBucketer, QSSFPredictor, RollingEstimator


def job(
    i: int, user: str = "", gpus: int = 1, name: str | None = None, dur: float | None = None, t: float = 0.0
) -> Job:
    return Job(id=f"j{i}", submit_time=t or float(i), gpus=gpus, user=user, name=name, duration=dur)


@pytest.fixture
def est() -> RollingEstimator:
    r = RollingEstimator(alpha=0.5)  # linear space: the paper's means
    b = NameBucketer()
    history = [
        job(1, "alice", 1, "train_resnet_01", 100),
        job(2, "alice", 1, "train_resnet_02", 200),
        job(3, "alice", 1, "train_resnet_03", 400),
        job(4, "alice", 2, "eval_bert", 1000),
        job(5, "bob", 1, None, 50),
        job(6, "carol", 4, "sweep", 3000),
    ]
    for h in history:
        r.add(h, b.bucket(h.name))
    r.bucketer = b  # type: ignore[attr-defined]
    return r


def test_pr_new_user_is_mean_of_same_gpu_demand(est: RollingEstimator) -> None:
    b = est.bucketer  # type: ignore[attr-defined]
    # 1-GPU history: 100, 200, 400, 50 → 187.5
    assert est.estimate(job(9, "dave", 1, "x"), b.bucket("x")) == (187.5, "new_user")
    # no user at all (openb) → same branch
    assert est.estimate(job(9, "", 4), -1) == (3000.0, "new_user")
    # unseen demand falls back to the mean of everything: 4750 / 6
    value, branch = est.estimate(job(9, "dave", 8), -1)
    assert branch == "new_user" and value == pytest.approx(4750 / 6)


def test_pr_known_user_without_similar_name_is_user_mean_for_demand(est: RollingEstimator) -> None:
    b = est.bucketer  # type: ignore[attr-defined]
    # alice, 1 GPU, unrelated name → mean(100, 200, 400)
    v, branch = est.estimate(job(9, "alice", 1, "qqqqqqqqqqqqqq"), b.bucket("qqqqqqqqqqqqqq"))
    assert branch == "user_mean" and v == pytest.approx(700 / 3)
    # alice, 2 GPUs, no name → 1000; bob (no names ever) → 50
    assert est.estimate(job(9, "alice", 2), -1) == (1000.0, "user_mean")
    assert est.estimate(job(9, "bob", 1, "anything"), b.bucket("anything")) == (50.0, "user_mean")
    # a demand alice never used → alice's overall mean
    v, _ = est.estimate(job(9, "alice", 8), -1)
    assert v == pytest.approx(1700 / 4)


def test_pr_similar_name_is_exponential_decay(est: RollingEstimator) -> None:
    b = est.bucketer  # type: ignore[attr-defined]
    # durations 100, 200, 400 (oldest first), weights 0.25, 0.5, 1 → (25+100+400)/1.75 = 300
    v, branch = est.estimate(job(9, "alice", 1, "train_resnet_17"), b.bucket("train_resnet_17"))
    assert branch == "similar_name" and v == pytest.approx(300.0)


def test_bucketer_groups_similar_names() -> None:
    b = NameBucketer(threshold=0.8)
    assert b.bucket("train_resnet_01") == b.bucket("train_resnet_99") == b.bucket("Train_ResNet_7")
    assert b.bucket("train_resnet_01") != b.bucket("bert-finetune-squad")
    assert b.bucket(None) == -1 and b.bucket("") == -1
    assert b.bucket("never-seen-name-xyz", grow=False) == -1


def _synthetic(n: int = 400) -> list[Job]:
    jobs = []
    for i in range(n):
        user = f"u{i % 5}"
        kind = i % 3
        name = ["resnet_train_", "bert_ft_", "gan_"][kind] + str(i)
        dur = [100.0, 1000.0, 10000.0][kind] * (1 + (i % 7) / 10)
        jobs.append(Job(id=f"s{i}", submit_time=600.0 * i, gpus=1 + kind, user=user, name=name, duration=dur))
    return jobs


def test_annotate_sets_predicted_duration_and_is_causal() -> None:
    jobs = _synthetic()
    q = QSSFPredictor(lam=0.5, num_rounds=30).fit(jobs[:300])
    test = [
        Job(id=j.id, submit_time=j.submit_time, gpus=j.gpus, user=j.user, name=j.name, duration=j.duration)
        for j in jobs[300:]
    ]
    pairs = q.annotate_online(test)
    assert all(t.predicted_duration is not None and t.predicted_duration > 0 for t in test)
    # ordering by predicted GPU time follows the true classes
    pr_small = [t.predicted_duration for t in test if t.name and t.name.startswith("resnet")]
    pr_big = [t.predicted_duration for t in test if t.name and t.name.startswith("gan")]
    assert max(pr_small) < min(pr_big)  # type: ignore[type-var]
    assert len(pairs) == len(test)
    # causality: a job submitted before any history completed sees no rolling estimate
    fresh = QSSFPredictor(num_rounds=10)
    first = [
        Job(id="a", submit_time=0.0, user="x", duration=100.0),
        Job(id="b", submit_time=50.0, user="x", duration=5.0),
    ]
    out = fresh.annotate_online(first)
    assert out[1][0] is None  # "a" ends at 100 > 50
    later = [
        Job(id="a", submit_time=0.0, user="x", duration=100.0),
        Job(id="b", submit_time=150.0, user="x", duration=5.0),
    ]
    assert QSSFPredictor(num_rounds=10).annotate_online(later)[1][0] == pytest.approx(100.0)
    with pytest.raises(InvalidInput):
        QSSFPredictor().annotate_online(list(reversed(later)))


def test_merge_and_priority() -> None:
    q = QSSFPredictor(lam=0.25, blend="linear")
    assert q.merge(100.0, 200.0) == pytest.approx(175.0)
    assert q.merge(None, 200.0) == 200.0 and q.merge(100.0, math.nan) == 100.0 and q.merge(None, math.nan) is None
    j = Job(id="p", submit_time=0, gpus=4, predicted_duration=10.0)
    assert QSSFPredictor.priority(j) == 40.0
    with pytest.raises(InvalidInput):
        QSSFPredictor(lam=1.5)


def test_qssf_save_load_roundtrip(tmp_path) -> None:
    jobs = _synthetic(200)
    q = QSSFPredictor(num_rounds=20).fit(jobs[:150])
    q.save(tmp_path)
    r = QSSFPredictor.load(tmp_path)
    a = q.predict_ml(jobs[150:])
    b = r.predict_ml(jobs[150:])
    assert a == pytest.approx(b, rel=1e-9)
    j1, j2 = jobs[160], jobs[160]
    assert q.rolling.estimate(j1, q.bucketer.bucket(j1.name)) == r.rolling.estimate(j2, r.bucketer.bucket(j2.name))


def test_qssf_update_engine_refits_on_schedule() -> None:
    from qosmos.predictors.qssf import qssf_update_engine

    eng = qssf_update_engine(interval_s=3600 * 24, window_s=3600 * 24 * 30, min_samples=50)
    for j in sorted(_synthetic(120), key=lambda j: j.submit_time + (j.duration or 0)):
        eng.observe(j.submit_time + (j.duration or 0), j)
    assert not eng.maybe_refit(600.0 * 10)  # too few completed
    assert eng.maybe_refit(600.0 * 130) and isinstance(eng.model, QSSFPredictor)
    assert not eng.maybe_refit(600.0 * 131)
