"""Elapsed-time runtime prediction (seed 004 §VI-A).

A job that has already run for ``e`` seconds will run at least ``e``: the elapsed time is
a feature. We compare each baseline with and without it, fairly: every method predicts
only for the jobs that ran past ``e`` (e = 1/8, 1/4, 1/2 of the mean run time).

- Last2 [004 ref 41]: mean of the two previous jobs' run times (trace order);
  with elapsed time: the mean of the two most recent previous jobs that ran longer than e.
- LightGBM: history features (last 1 / last 2 / mean and median of the last 10, log) plus
  the job's own attributes where the trace has them (openb: CPU, memory, GPUs, GPU share,
  QoS, hour, weekday); with elapsed time: ``elapsed`` is a feature and the training set holds
  every training job once per elapsed grid point it survived; predictions are clipped to ≥ e.
Metrics (§VI-A): accuracy = mean of min(pred, actual)/max(pred, actual) of the total run
time, underestimation rate = share of jobs with pred < actual; ``accuracy_remaining`` is
the same ratio on the remaining run time (pred − e vs actual − e).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

import numpy as np
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Job
from qosmos.predictors.base import CompletionQueue, GBDTModel
from qosmos.predictors.readers import OPENB_QOS_LABELS

FRACTIONS = (1 / 8, 1 / 4, 1 / 2)
HISTORY_FEATURES = ("last1", "last2", "mean10", "median10")
JOB_FEATURES = ("cpu_milli", "memory_mib", "gpus", "gpu_milli", "qos", "hour", "weekday")


def accuracy(pred: np.ndarray, actual: np.ndarray) -> float:
    """mean min(pred, actual) / max(pred, actual), 1 where both are 0 (seed 004 §VI-A)."""
    p = np.maximum(np.asarray(pred, float), 0)
    a = np.maximum(np.asarray(actual, float), 0)
    hi = np.maximum(p, a)
    ratio = np.divide(np.minimum(p, a), hi, out=np.ones_like(hi), where=hi > 0)
    return float(ratio.mean()) if ratio.size else math.nan


def underestimation_rate(pred: np.ndarray, actual: np.ndarray) -> float:
    p = np.asarray(pred, float)
    return float(np.mean(p < np.asarray(actual, float))) if p.size else math.nan


def last2(runtimes: np.ndarray, elapsed: float | None = None, default: float | None = None) -> np.ndarray:
    """Last2 prediction for every job from the jobs before it (trace order).

    With ``elapsed`` only previous jobs that ran longer than it count (the job itself has
    survived ``elapsed``). Jobs with no usable history get ``default`` (the mean of all
    earlier ones, else 0).
    """
    d = np.asarray(runtimes, float)
    out = np.empty(d.size)
    a = b = math.nan  # the two most recent qualifying run times
    total = 0.0
    for i, x in enumerate(d):
        if not math.isnan(a):
            out[i] = a if math.isnan(b) else (a + b) / 2
        else:
            out[i] = default if default is not None else (total / i if i else 0.0)
        total += x
        if elapsed is None or x > elapsed:
            a, b = x, a
    if elapsed is not None:
        out = np.maximum(out, elapsed)
    return out


def history_features(runtimes: np.ndarray) -> np.ndarray:
    """log1p of last1, mean(last2), mean(last10), median(last10) of previous jobs; NaN when absent."""
    lg = np.log1p(np.maximum(np.asarray(runtimes, float), 0))
    n = lg.size
    pad = np.concatenate([np.full(10, np.nan), lg])
    win = np.lib.stride_tricks.sliding_window_view(pad, 10)[:n]  # win[i] = lg[i-10 .. i-1]
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            last1 = win[:, -1]
            last2v = np.nanmean(win[:, -2:], axis=1)
            mean10 = np.nanmean(win, axis=1)
            median10 = np.nanmedian(win, axis=1)
    return np.column_stack([last1, last2v, mean10, median10])


_QOS_CODE = {label: i for i, label in enumerate(OPENB_QOS_LABELS)}  # openb qos label as a feature


def job_features(jobs: Sequence[Job]) -> np.ndarray:
    rows = []
    for j in jobs:
        t = j.submit_time
        rows.append(
            (
                j.cpu_milli,
                j.memory_mib,
                j.gpus,
                j.gpu_milli,
                _QOS_CODE.get(j.category, -1),
                (t // 3600) % 24,
                (t // 86400 + 3) % 7,
            )
        )
    return np.asarray(rows, float)


class ElapsedRuntimePredictor:
    """LightGBM total-run-time model, optionally conditioned on elapsed time."""

    def __init__(self, use_elapsed: bool, feature_names: Sequence[str], num_rounds: int = 100) -> None:
        self.use_elapsed = use_elapsed
        names = [*feature_names, "elapsed"] if use_elapsed else list(feature_names)
        self.model = GBDTModel(names, (), {"num_leaves": 31, "min_data_in_leaf": 20}, num_rounds)

    def fit(
        self, x: np.ndarray, runtimes: np.ndarray, elapsed_grid: Sequence[float] = (0.0,)
    ) -> ElapsedRuntimePredictor:
        y = np.log1p(np.maximum(runtimes, 0))
        if not self.use_elapsed:
            self.model.fit(x, y)
            return self
        xs, ys = [], []
        for e in elapsed_grid:
            keep = runtimes > e
            xs.append(np.column_stack([x[keep], np.full(int(keep.sum()), e)]))
            ys.append(y[keep])
        self.model.fit(np.vstack(xs), np.concatenate(ys))
        return self

    def predict(self, x: np.ndarray, elapsed: float = 0.0) -> np.ndarray:
        if self.use_elapsed:
            x = np.column_stack([x, np.full(x.shape[0], elapsed)])
        p = np.expm1(self.model.predict(x))
        out: np.ndarray = np.maximum(p, elapsed) if self.use_elapsed else np.maximum(p, 0)
        return out


class Last2Elapsed:
    """Last2 with elapsed time (seed 004 §VI-A) behind the core's DurationPredictor protocol.

    ``predict(job, now)`` returns the mean of the two most recent completed jobs (global
    history, as :func:`last2`) that ran longer than the job's elapsed time ``job.executed``
    (0 at submission), never less than that elapsed time; with fewer than one such job, the
    mean of all completed jobs; None before any completion. ``observe`` holds a job back until
    ``now >= end`` (:class:`CompletionQueue`), so predictions stay causal whoever calls.
    ``keep`` bounds the history searched (the most recent completions).
    """

    name = "runtime"

    def __init__(self, keep: int = 10_000) -> None:
        if keep < 2:
            raise InvalidInput("keep", keep, "must be >= 2 (Last2 needs two jobs)")
        self._pending: CompletionQueue[float] = CompletionQueue()
        self._recent: deque[float] = deque(maxlen=keep)
        self._total = 0.0
        self._count = 0

    def observe(self, job: Job, duration: float, end: float) -> None:
        if not (isinstance(duration, int | float) and math.isfinite(duration) and duration >= 0):
            raise InvalidInput("duration", duration, f"job {job.id}: must be a finite number >= 0")
        self._pending.push(end, float(duration), f"job {job.id}")

    def predict(self, job: Job, now: float) -> float | None:
        for d in self._pending.release(now):
            self._recent.append(d)
            self._total += d
            self._count += 1
        if not self._count:
            return None
        e = job.executed
        found: list[float] = []
        for d in reversed(self._recent):
            if d > e:
                found.append(d)
                if len(found) == 2:
                    break
        guess = sum(found) / len(found) if found else self._total / self._count
        return max(guess, e)


SIMILAR_KEEP = 200  # completions kept per similarity group (its most recent)


class SimilarElapsed:
    """Run time of a job given the time it has already run, from its similar jobs' completed run
    times: the estimate of the ETA forecast (``qosmos.operator.durations``, ``core.forecast``).

    - Similar jobs are QSSF's (seed 000 Alg. 1, P_R): the same user and name bucket, else the same
      user and GPU count, else the same user, else the same GPU count, else every job; each group
      holds its ``keep`` most recent completions.
    - Elapsed time (seed 004 §VI-A): a job that has run e seconds runs longer than e, so only the
      similar jobs that ran longer than e count — Last2's rule with elapsed time ("the previous jobs
      that ran longer than e", :func:`last2`) over the group's recent jobs rather than two: the most
      specific group with at least two such survivors gives their mean, the empirical E[D | D > e].
      Two run times would make one noisy number that every job of a forecast shares, so an ETA far
      down a queue would carry its error once per job ahead.
    - Spread (thin history): the prediction is mean + s/√n over those n survivors (s their standard
      deviation; n = 1: the one run time), the upper one-standard-error bound of that mean. With few
      similar jobs the mean is least certain, and a run time predicted short makes every ETA behind
      it early (issue 21 §5: 37.5 s predicted for 60 s jobs, ETAs 23–105 s early); the margin
      shrinks as 1/√n and so fades as the history grows (n = 50: 0.14 s).
    - Beyond the history (no completed job ran longer than e): e plus the mean run time of all jobs
      (a memoryless tail: an exponential run time's expected remainder is its mean whatever has
      run), so a running job is never expected to end now.

    ``predict(job, now, elapsed)`` (``elapsed`` defaults to ``job.executed``) returns the whole run
    time, > ``elapsed``; None before any completion. ``observe`` holds a job back until
    ``now >= end`` (:class:`CompletionQueue`), so predictions stay causal whoever calls.
    """

    name = "similar-elapsed"

    def __init__(self, keep: int = SIMILAR_KEEP, name_threshold: float = 0.8) -> None:
        from qosmos.predictors.qssf import NameBucketer

        if keep < 2:
            raise InvalidInput("keep", keep, "must be >= 2 (two survivors make a group speak)")
        self.keep = keep
        self._bucketer = NameBucketer(name_threshold)
        self._pending: CompletionQueue[tuple[Job, float]] = CompletionQueue()
        self._groups: dict[tuple[object, ...], deque[float]] = {}
        self._memo: dict[tuple[tuple[object, ...], float], tuple[int, float, float]] = {}

    def _keys(self, job: Job) -> list[tuple[object, ...]]:
        """The job's similarity groups, most specific first (QSSF's P_R branches)."""
        keys: list[tuple[object, ...]] = []
        if job.user:
            bucket = self._bucketer.bucket(job.name)
            if bucket >= 0:
                keys.append(("name", job.user, bucket))
            keys += [("user-gpus", job.user, job.gpus), ("user", job.user)]
        return [*keys, ("gpus", job.gpus), ("all",)]

    def observe(self, job: Job, duration: float, end: float) -> None:
        if not (isinstance(duration, int | float) and math.isfinite(duration) and duration >= 0):
            raise InvalidInput("duration", duration, f"job {job.id}: must be a finite number >= 0")
        self._pending.push(end, (job, float(duration)), f"job {job.id}")

    def _survivors(self, key: tuple[object, ...], e: float) -> tuple[int, float, float]:
        """(n, mean, std) of the group's run times longer than ``e``."""
        hit = self._memo.get((key, e))
        if hit is None:
            d = np.fromiter(self._groups.get(key, ()), float)
            d = d[d > e]
            hit = (d.size, float(d.mean()) if d.size else math.nan, float(d.std(ddof=1)) if d.size > 1 else 0.0)
            if len(self._memo) > 10_000:
                self._memo.clear()
            self._memo[(key, e)] = hit
        return hit

    def predict(self, job: Job, now: float, elapsed: float | None = None) -> float | None:
        released = self._pending.release(now)
        for done, d in released:
            for key in self._keys(done):
                self._groups.setdefault(key, deque(maxlen=self.keep)).append(d)
        if released:
            self._memo.clear()
        every = self._groups.get(("all",))
        if not every:
            return None
        e = max(float(job.executed if elapsed is None else elapsed), 0.0)
        keys = self._keys(job)
        for i, key in enumerate(keys):
            n, mean, std = self._survivors(key, e)
            if n >= 2 or (n == 1 and i == len(keys) - 1):
                # seed 004 §VI-A: E[D | D > e] over similar jobs; + s/√n where the history is thin
                return mean + std / math.sqrt(n)
        # seed 004 §VI-A's job has outlived every completed job: a memoryless tail beyond e
        return e + max(sum(every) / len(every), 1.0)


def evaluate_runtime(
    runtimes: np.ndarray,
    jobs: Sequence[Job] | None = None,
    train_frac: float = 0.7,
    fractions: Sequence[float] = FRACTIONS,
    num_rounds: int = 100,
    shuffle_seed: int | None = None,
) -> dict[str, object]:
    """Train on the first ``train_frac`` (trace order), evaluate the rest at each elapsed threshold.

    ``shuffle_seed`` permutes the jobs first: philly_runtime.csv is sorted by run time, so
    its file order is not an arrival order (history features then carry no signal and the
    comparison isolates what elapsed time alone adds).
    """
    d = np.asarray(runtimes, float)
    if d.size < 20:
        raise InvalidInput("runtimes", d.size, "need at least 20 jobs")
    if shuffle_seed is not None:
        perm = np.random.default_rng(shuffle_seed).permutation(d.size)
        d = d[perm]
        jobs = [jobs[i] for i in perm] if jobs is not None else None
    cut = int(d.size * train_frac)
    mean_rt = float(d[:cut].mean())
    x = history_features(d)
    names: list[str] = list(HISTORY_FEATURES)
    if jobs is not None:
        if len(jobs) != d.size:
            raise InvalidInput("jobs", len(jobs), f"need one job per run time ({d.size})")
        x = np.column_stack([x, job_features(jobs)])
        names += JOB_FEATURES
    grid = sorted({0.0, *(f * mean_rt for f in (*fractions, 1.0))})
    plain = ElapsedRuntimePredictor(False, names, num_rounds).fit(x[:cut], d[:cut])
    with_e = ElapsedRuntimePredictor(True, names, num_rounds).fit(x[:cut], d[:cut], grid)
    test_x, test_d = x[cut:], d[cut:]
    l2_plain = last2(d, default=mean_rt)[cut:]
    p_plain = plain.predict(test_x)
    results = []
    for f in fractions:
        e = f * mean_rt
        sel = test_d > e
        actual = test_d[sel]
        l2_e = last2(d, elapsed=e, default=max(mean_rt, e))[cut:][sel]
        p_e = with_e.predict(test_x[sel], e)
        row: dict[str, object] = {"fraction": f, "elapsed_s": e, "jobs": int(sel.sum())}
        for label, pred in (
            ("last2", l2_plain[sel]),
            ("last2_elapsed", l2_e),
            ("lgbm", p_plain[sel]),
            ("lgbm_elapsed", p_e),
        ):
            row[label] = {
                "accuracy": accuracy(pred, actual),
                "accuracy_remaining": accuracy(pred - e, actual - e),
                "underestimation_rate": underestimation_rate(pred, actual),
            }
        results.append(row)
    return {
        "n_train": cut,
        "n_test": int(d.size - cut),
        "mean_runtime_s": mean_rt,
        "shuffled": shuffle_seed is not None,
        "thresholds": results,
    }
