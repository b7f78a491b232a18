"""QSSF duration predictor (seed 000 §4.2.2, Alg. 1 PRIORITY).

P_R — rolling estimate from completed history (Alg. 1 lines 13-18):
  1. new user (or no user)             → mean duration of history jobs with the same GPU demand;
  2. known user, no similar-named job   → mean of that user's jobs with the same GPU demand
                                          (that user's overall mean when none has that demand);
  3. otherwise                          → exponentially weighted decay over that user's
                                          similar-named jobs, newest weight 1, each older
                                          one ×(1−α).
  Names are "similar" when they fall in the same Levenshtein bucket (:class:`NameBucketer`).
P_M — LightGBM on categorical + time features (user, VC, name bucket, category, demands,
  hour, weekday, day), trained on log1p(duration).
Merged duration λ P_R + (1−λ) P_M (``blend="linear"``, the paper's; ``blend="log"`` averages
log1p durations instead); the core's QSSF ordering multiplies by ``gpus`` (priority =
N (λ P_R + (1−λ) P_M), Alg. 1 line 20).

:class:`OnlineQSSF` is the predictor the simulator and the operator use (the core's
``DurationPredictor`` protocol, via ``qosmos.predictors.make_duration_predictor("qssf")``):
a job joins the history only once a prediction is asked at or after its end. The batch
:class:`QSSFPredictor` (fit / annotate / save / load) is its building block and stays for
offline use; its ``annotate_online`` replay counts a job as finished at submit + recorded
duration, which is only a lower bound of its end under queueing.
"""

from __future__ import annotations

import heapq
import json
import math
import re
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import DurationPredictor, Job
from qosmos.predictors.base import (
    CompletionQueue,
    GBDTModel,
    ModelUpdateEngine,
    SingleRowPredictor,
    median_abs_log_error,
    spearman,
)
from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

RAW = (
    "user",
    "vc",
    "name_bucket",
    "category",
    "gpus",
    "gpu_milli",
    "cpu_milli",
    "memory_mib",
    "hour",
    "weekday",
    "day",
)
# user and name bucket have thousands of values: LightGBM's categorical splits on them cost
# ~30x the training time, so they enter as ordered target statistics (mean log duration of
# the earlier jobs of that user / bucket, smoothed towards the prior) plus their counts.
FEATURES = ("user_te", "user_n", "bucket_te", "bucket_n", *RAW[1:2], *RAW[3:])
CATEGORICAL = ("vc", "category")
TE_SMOOTHING = 5.0
_DIGITS = re.compile(r"\d+")
BLENDS = ("linear", "log")


def blend_values(lam: float, blend: str, p_r: float | None, p_m: float) -> float | None:
    """Merge P_R and P_M (seed 000 Alg. 1 line 20: λ P_R + (1−λ) P_M).

    ``blend="log"`` averages in log1p space instead: expm1(λ log1p P_R + (1−λ) log1p P_M).
    A missing estimate (P_R None, P_M NaN) leaves the other; both missing → None.
    """
    if p_r is None:
        return None if math.isnan(p_m) else float(p_m)
    if math.isnan(p_m):
        return float(p_r)
    if blend == "log":
        return math.expm1(lam * math.log1p(p_r) + (1 - lam) * math.log1p(p_m))
    return lam * p_r + (1 - lam) * p_m


class NameBucketer:
    """Levenshtein name clustering (seed 000 §4.2.2: "cluster the names and bucketize similar ones").

    A name is reduced to a template (lower case, digit runs → ``#``); a template joins the
    first bucket whose representative has normalised Levenshtein similarity ≥ ``threshold``,
    else opens a new bucket. Buckets are assigned in arrival order, so replay is causal.
    """

    def __init__(self, threshold: float = 0.8, reps: Sequence[str] = ()) -> None:
        if not 0 < threshold <= 1:
            raise InvalidInput("threshold", threshold, "must be in (0, 1]")
        self.threshold = threshold
        self.reps: list[str] = list(reps)
        self._cache: dict[str, int] = {r: i for i, r in enumerate(self.reps)}

    @staticmethod
    def template(name: str) -> str:
        return _DIGITS.sub("#", name.strip().lower())

    def bucket(self, name: str | None, *, grow: bool = True) -> int:
        """Bucket id, −1 for no name; ``grow=False`` returns −1 for names matching no bucket."""
        if not name:
            return -1
        t = self.template(name)
        hit = self._cache.get(t)
        if hit is not None:
            return hit
        best = process.extractOne(t, self.reps, scorer=Levenshtein.normalized_similarity, score_cutoff=self.threshold)
        if best is not None:
            b = int(best[2])
        elif grow:
            self.reps.append(t)
            b = len(self.reps) - 1
        else:
            return -1
        self._cache[t] = b
        return b


@dataclass
class _Mean:
    total: float = 0.0
    count: int = 0

    def add(self, x: float) -> None:
        self.total += x
        self.count += 1

    @property
    def value(self) -> float:
        return self.total / self.count


class RollingEstimator:
    """P_R of Alg. 1 over completed jobs; ``add`` a job when it completes."""

    def __init__(self, alpha: float = 0.5, log_space: bool = False) -> None:
        if not 0 < alpha <= 1:
            raise InvalidInput("alpha", alpha, "must be in (0, 1]")
        self.alpha = alpha
        self.log_space = log_space
        self.all = _Mean()
        self.by_gpus: dict[int, _Mean] = {}
        self.by_user: dict[str, _Mean] = {}
        self.by_user_gpus: dict[tuple[str, int], _Mean] = {}
        self.decay: dict[tuple[str, int], tuple[float, float]] = {}

    def add(self, job: Job, bucket: int, duration: float | None = None) -> None:
        d = job.duration if duration is None else duration
        if d is None:
            raise InvalidInput("duration", None, f"job {job.id} has no recorded duration")
        if self.log_space:
            d = math.log1p(d)
        self.all.add(d)
        self.by_gpus.setdefault(job.gpus, _Mean()).add(d)
        if job.user:
            self.by_user.setdefault(job.user, _Mean()).add(d)
            self.by_user_gpus.setdefault((job.user, job.gpus), _Mean()).add(d)
            if bucket >= 0:
                num, den = self.decay.get((job.user, bucket), (0.0, 0.0))
                keep = 1.0 - self.alpha
                self.decay[(job.user, bucket)] = (keep * num + d, keep * den + 1.0)

    def _out(self, v: float) -> float:
        return math.expm1(v) if self.log_space else v

    def estimate(self, job: Job, bucket: int) -> tuple[float | None, str]:
        """(P_R, branch) with branch in new_user / user_mean / similar_name."""
        if not job.user or job.user not in self.by_user:
            m = self.by_gpus.get(job.gpus) or (self.all if self.all.count else None)
            return (self._out(m.value) if m else None), "new_user"
        key = (job.user, bucket)
        if bucket < 0 or key not in self.decay:
            m = self.by_user_gpus.get((job.user, job.gpus)) or self.by_user[job.user]
            return self._out(m.value), "user_mean"
        num, den = self.decay[key]
        return self._out(num / den), "similar_name"

    def to_json(self) -> dict[str, object]:
        return {
            "alpha": self.alpha,
            "log_space": self.log_space,
            "all": [self.all.total, self.all.count],
            "by_gpus": [[g, m.total, m.count] for g, m in self.by_gpus.items()],
            "by_user": [[u, m.total, m.count] for u, m in self.by_user.items()],
            "by_user_gpus": [[u, g, m.total, m.count] for (u, g), m in self.by_user_gpus.items()],
            "decay": [[u, b, n, d] for (u, b), (n, d) in self.decay.items()],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RollingEstimator:  # data: to_json's dict as json.loads reads it
        r = cls(float(data["alpha"]), bool(data.get("log_space", False)))
        r.all = _Mean(*data["all"])
        r.by_gpus = {int(g): _Mean(t, c) for g, t, c in data["by_gpus"]}
        r.by_user = {u: _Mean(t, c) for u, t, c in data["by_user"]}
        r.by_user_gpus = {(u, int(g)): _Mean(t, c) for u, g, t, c in data["by_user_gpus"]}
        r.decay = {(u, int(b)): (n, d) for u, b, n, d in data["decay"]}
        return r


def _ordered_stats(codes: np.ndarray, y: np.ndarray, prior: float, m: float) -> tuple[np.ndarray, np.ndarray]:
    """For each row: smoothed mean of y over the *earlier* rows with the same code, and their count."""
    te = np.full(codes.size, prior)
    n = np.zeros(codes.size)
    idx = np.flatnonzero(~np.isnan(codes))
    if idx.size:
        order = idx[np.argsort(codes[idx], kind="stable")]
        s = codes[order]
        ys = y[order]
        start = np.r_[0, np.flatnonzero(s[1:] != s[:-1]) + 1]
        group_start = np.repeat(start, np.diff(np.r_[start, s.size]))
        cs = np.cumsum(ys)
        before = cs - ys - (cs[group_start] - ys[group_start])
        count = np.arange(s.size) - group_start
        te[order] = (before + prior * m) / (count + m)
        n[order] = count
    return te, n


def _table(codes: np.ndarray, y: np.ndarray) -> dict[int, tuple[float, int]]:
    ok = ~np.isnan(codes)
    uniq, inv = np.unique(codes[ok].astype(np.int64), return_inverse=True)
    sums = np.bincount(inv, weights=y[ok])
    counts = np.bincount(inv)
    return {int(c): (float(t), int(k)) for c, t, k in zip(uniq, sums, counts, strict=True)}


def _time_features(t: float) -> tuple[float, float, float]:
    """hour, weekday, day of month from seconds (epoch or trace-relative; both work as seasonality)."""
    hour = (t // 3600) % 24
    day_index = t // 86400
    weekday = (day_index + 3) % 7  # 1970-01-01 was a Thursday → Monday = 0
    return float(hour), float(weekday), float(day_index % 31)


class QSSFPredictor:
    """P_R ⊕ P_M of seed 000 Alg. 1; see the module docstring."""

    def __init__(
        self,
        lam: float = 0.5,
        alpha: float = 0.5,
        name_threshold: float = 0.8,
        num_rounds: int = 150,
        params: dict[str, object] | None = None,
        blend: str = "linear",
    ) -> None:
        if not 0 <= lam <= 1:
            raise InvalidInput("lam", lam, "must be in [0, 1]")
        if blend not in BLENDS:
            raise InvalidInput("blend", blend, f"expected one of {', '.join(BLENDS)}")
        if num_rounds < 1:
            raise InvalidInput("num_rounds", num_rounds, "must be >= 1 (LightGBM boosting rounds)")
        self.lam = lam
        self.blend = blend
        self.bucketer = NameBucketer(name_threshold)
        self.rolling = RollingEstimator(alpha, self.log_space)
        self.model: GBDTModel | None = None
        self.num_rounds = num_rounds
        self.params = {
            "min_data_in_leaf": 10,
            "num_leaves": 31,
            "max_bin": 63,
            "objective": "huber",
            "alpha": 1.0,
            "learning_rate": 0.1,
            **(params or {}),
        }
        self.vocab: dict[str, dict[str, int]] = {c: {} for c in ("user", "vc", "category")}
        self.prior = 0.0
        self.te: dict[str, dict[int, tuple[float, int]]] = {}

    @property
    def log_space(self) -> bool:
        """P_R's means and the blend in log1p space (``blend="log"``)."""
        return self.blend == "log"

    # -- features -----------------------------------------------------------------------------

    def _code(self, field: str, value: str, grow: bool) -> float:
        v = self.vocab[field]
        if value not in v:
            if not grow:
                return math.nan
            v[value] = len(v)
        return float(v[value])

    def raw_features(self, jobs: Sequence[Job], *, grow: bool = False) -> np.ndarray:
        """One row of :data:`RAW` per job; unseen categories are NaN (LightGBM's missing)."""
        x = np.empty((len(jobs), len(RAW)))
        for i, j in enumerate(jobs):
            x[i] = self.raw_row(j, self.bucketer.bucket(j.name, grow=grow), grow=grow)
        return x

    def raw_row(self, j: Job, bucket: int, *, grow: bool = False) -> tuple[float, ...]:
        """One :data:`RAW` row; ``bucket`` from :attr:`bucketer` (−1: none)."""
        return (
            self._code("user", j.user, grow),
            self._code("vc", j.vc, grow),
            math.nan if bucket < 0 else float(bucket),
            self._code("category", j.category, grow),
            j.gpus,
            j.gpu_milli,
            j.cpu_milli,
            j.memory_mib,
            *_time_features(j.submit_time),
        )

    def feature_row(self, j: Job, bucket: int) -> list[float]:
        """One :data:`FEATURES` row from the training tables (the one-job path of :meth:`encode`)."""
        raw = self.raw_row(j, bucket)
        row: list[float] = []
        for k, name in ((0, "user"), (2, "name_bucket")):
            code = raw[k]
            hit = None if math.isnan(code) else self.te.get(name, {}).get(int(code))
            if hit is None:
                row += [self.prior, 0.0]
            else:
                row += [(hit[0] + self.prior * TE_SMOOTHING) / (hit[1] + TE_SMOOTHING), float(hit[1])]
        row.append(raw[1])
        row += raw[3:]
        return row

    def encode(self, raw: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
        """RAW → FEATURES. With ``y`` (training, rows in submission order) the target statistics
        are ordered: row i sees only rows before it; without, the full training tables."""
        cols = []
        for k, name in ((0, "user"), (2, "name_bucket")):
            c = raw[:, k]
            if y is not None:
                te, n = _ordered_stats(c, y, self.prior, TE_SMOOTHING)
            else:
                table = self.te.get(name, {})
                te = np.full(c.size, self.prior)
                n = np.zeros(c.size)
                for i, code in enumerate(c):
                    if not math.isnan(code) and (hit := table.get(int(code))) is not None:
                        te[i] = (hit[0] + self.prior * TE_SMOOTHING) / (hit[1] + TE_SMOOTHING)
                        n[i] = hit[1]
            cols += [te, n]
        return np.column_stack([*cols, raw[:, 1], raw[:, 3:]])

    def features(self, jobs: Sequence[Job]) -> np.ndarray:
        """:data:`FEATURES` rows for prediction."""
        return self.encode(self.raw_features(jobs))

    # -- training ------------------------------------------------------------------------------

    def fit(self, jobs: Sequence[Job], *, seed_history: bool = True) -> QSSFPredictor:
        """Train P_M on completed jobs and (unless ``seed_history`` is off) seed P_R's history with them.

        A replay that later feeds the same jobs to :meth:`annotate_online` as ``history``
        turns seeding off, so each job enters P_R's history only once it has completed.
        """
        done = [j for j in jobs if j.duration is not None]
        if not done:
            raise InvalidInput("jobs", len(jobs), "need completed jobs (with duration) to fit")
        done = sorted(done, key=lambda j: j.submit_time)
        raw = self.raw_features(done, grow=True)
        y = np.log1p(np.array([j.duration for j in done], float))
        self.fit_arrays(raw, y, window=(done[0].submit_time, done[-1].submit_time))
        if seed_history:
            for j in done:
                self.rolling.add(j, self.bucketer.bucket(j.name))
        return self

    def fit_arrays(self, raw: np.ndarray, y: np.ndarray, window: tuple[float, float] | None = None) -> GBDTModel:
        """Train P_M on RAW rows (submission order) and log1p durations; builds the target tables."""
        self.prior = float(np.mean(y))
        self.te = {name: _table(raw[:, k], y) for k, name in ((0, "user"), (2, "name_bucket"))}
        self.model = GBDTModel(FEATURES, CATEGORICAL, self.params, self.num_rounds)
        self.model.fit(self.encode(raw, y), y, window=window)
        return self.model

    # -- prediction ----------------------------------------------------------------------------

    def predict_ml(self, jobs: Sequence[Job]) -> np.ndarray:
        """P_M in seconds (NaN when no model is fitted)."""
        if self.model is None or not jobs:
            return np.full(len(jobs), math.nan)
        p_m: np.ndarray = np.maximum(np.expm1(self.model.predict(self.features(jobs))), 0.0)
        return p_m

    def merge(self, p_r: float | None, p_m: float) -> float | None:
        """λ P_R + (1−λ) P_M (Alg. 1 line 20), or in log1p space with ``blend="log"``; the
        available one when the other is missing (None / NaN), None when both are."""
        return blend_values(self.lam, self.blend, p_r, p_m)

    def annotate(self, jobs: Sequence[Job]) -> list[tuple[float | None, float]]:
        """Set ``predicted_duration`` from the current history (no update); returns (P_R, P_M) per job."""
        p_m = self.predict_ml(jobs)
        out = []
        for j, pm in zip(jobs, p_m, strict=True):
            pr, _ = self.rolling.estimate(j, self.bucketer.bucket(j.name))
            j.predicted_duration = self.merge(pr, float(pm))
            out.append((pr, float(pm)))
        return out

    def annotate_online(self, jobs: Sequence[Job], history: Iterable[Job] = ()) -> list[tuple[float | None, float]]:
        """Causal replay: each job sees only jobs completed before its submission.

        ``jobs`` must be sorted by submit time. A job counts as completed at
        ``submit_time + duration`` (its recorded run time; queueing is unknown in a replay,
        so this is the earliest it could have finished). ``history`` jobs not yet added by
        :meth:`fit` (e.g. from a later window) join the same completion queue.
        """
        p_m = self.predict_ml(jobs)
        pending: list[tuple[float, int, Job]] = []
        for k, h in enumerate(history):
            if h.duration is not None:
                heapq.heappush(pending, (h.submit_time + h.duration, -k - 1, h))
        out: list[tuple[float | None, float]] = []
        last = -math.inf
        for i, (j, pm) in enumerate(zip(jobs, p_m, strict=True)):
            if j.submit_time < last:
                raise InvalidInput("jobs", j.id, "must be sorted by submit_time")
            last = j.submit_time
            while pending and pending[0][0] <= j.submit_time:
                _, _, done = heapq.heappop(pending)
                self.rolling.add(done, self.bucketer.bucket(done.name))
            pr, _ = self.rolling.estimate(j, self.bucketer.bucket(j.name))
            j.predicted_duration = self.merge(pr, float(pm))
            out.append((pr, float(pm)))
            if j.duration is not None:
                heapq.heappush(pending, (j.submit_time + j.duration, i, j))
        return out

    @staticmethod
    def priority(job: Job) -> float:
        """GPU time N·(λP_R + (1−λ)P_M) as the core orders by it; +inf when unknown."""
        return job.gpus * job.predicted_duration if job.predicted_duration is not None else math.inf

    # -- persistence ---------------------------------------------------------------------------

    def save(self, directory: Path) -> None:
        """``dir/qssf_pm.txt`` (+ .json sidecar) and ``dir/qssf_state.json`` (λ, vocab, buckets, history)."""
        if self.model is None:
            raise InvalidInput("model", None, "QSSF predictor not fitted")
        directory = Path(directory)
        self.model.save(directory / "qssf_pm.txt")
        state = {
            "lam": self.lam,
            "blend": self.blend,
            "name_threshold": self.bucketer.threshold,
            "bucket_reps": self.bucketer.reps,
            "vocab": self.vocab,
            "prior": self.prior,
            "te": {k: [[c, t, n] for c, (t, n) in v.items()] for k, v in self.te.items()},
            "rolling": self.rolling.to_json(),
            "num_rounds": self.num_rounds,
            "params": self.params,
        }
        (directory / "qssf_state.json").write_text(json.dumps(state))

    @classmethod
    def load(cls, directory: Path) -> QSSFPredictor:
        directory = Path(directory)
        state = json.loads((directory / "qssf_state.json").read_text())
        blend = state.get("blend") or ("log" if state.get("log_space") else "linear")
        p = cls(
            state["lam"],
            state["rolling"]["alpha"],
            state["name_threshold"],
            state["num_rounds"],
            state["params"],
            blend=blend,
        )
        p.bucketer = NameBucketer(state["name_threshold"], state["bucket_reps"])
        p.vocab = {k: dict(v) for k, v in state["vocab"].items()}
        p.rolling = RollingEstimator.from_json(state["rolling"])
        p.prior = float(state["prior"])
        p.te = {k: {int(c): (float(t), int(n)) for c, t, n in v} for k, v in state["te"].items()}
        p.model = GBDTModel.load(directory / "qssf_pm.txt", expected_features=FEATURES)
        return p


class OnlineQSSF:
    """QSSF behind the core's :class:`DurationPredictor` protocol, trained online.

    ``predict(job, now)`` at submission and ``observe(job, duration, end)`` at the job's end
    (simulated time in the simulator, wall time in the operator). Causal by construction:
    an observation waits in a queue ordered by ``end`` and joins the history (P_R and P_M's
    training rows) only when a prediction is asked at ``now >= end``; ``now`` may not go
    backwards. So a job never informs a prediction made before it finished, whoever calls.

    P_M (LightGBM, seed 000 Alg. 1 line 19) is first trained once ``train_after`` jobs have
    joined the history, then retrained on the latest ``max_train_jobs`` each time
    ``retrain_every`` more jobs have joined (seed 000 Fig. 10: the Model Update Engine
    fine-tunes periodically). Training happens while folding observations in, at fixed
    counts, so the result depends only on the call sequence. Before the first fit P_M is
    missing and the prediction is P_R alone.
    """

    name = "qssf"

    def __init__(
        self,
        lam: float = 0.5,
        blend: str = "linear",
        *,
        alpha: float = 0.5,
        name_threshold: float = 0.8,
        train_after: int = 1000,
        retrain_every: int = 20_000,
        max_train_jobs: int = 50_000,
        num_rounds: int = 150,
        params: dict[str, object] | None = None,
    ) -> None:
        if train_after < 1:
            raise InvalidInput("train_after", train_after, "must be >= 1 (completed jobs before P_M is trained)")
        if retrain_every < 1:
            raise InvalidInput("retrain_every", retrain_every, "must be >= 1 (completed jobs between retrainings)")
        if max_train_jobs < train_after:
            raise InvalidInput("max_train_jobs", max_train_jobs, f"must be >= train_after ({train_after})")
        self.q = QSSFPredictor(lam, alpha, name_threshold, num_rounds, params, blend=blend)
        self.train_after = train_after
        self.retrain_every = retrain_every
        self.max_train_jobs = max_train_jobs
        self.observed = 0  # jobs that joined the history
        self.fits: list[int] = []  # history size at each P_M fit
        self.fit_seconds = 0.0  # wall time spent training P_M
        self._next_fit = train_after
        self._pending: CompletionQueue[tuple[Job, float]] = CompletionQueue()
        self._rows: deque[tuple[float, tuple[float, ...], float]] = deque(maxlen=max_train_jobs)
        self._row_fn: SingleRowPredictor | None = None

    @property
    def lam(self) -> float:
        return self.q.lam

    @property
    def blend(self) -> str:
        return self.q.blend

    @property
    def pending(self) -> int:
        """Observed jobs whose end lies after the latest ``now``."""
        return len(self._pending)

    def observe(self, job: Job, duration: float, end: float) -> None:
        """``job`` ran ``duration`` seconds and ended at ``end``; it counts from ``now >= end``."""
        if not (isinstance(duration, int | float) and math.isfinite(duration) and duration >= 0):
            raise InvalidInput("duration", duration, f"job {job.id}: must be a finite number >= 0")
        self._pending.push(end, (job, float(duration)), f"job {job.id}")

    def predict(self, job: Job, now: float) -> float | None:
        """Expected run seconds: the blend of P_R and P_M (None before any history)."""
        p_r, p_m = self.predict_parts(job, now)
        return blend_values(self.q.lam, self.q.blend, p_r, p_m)

    def predict_parts(self, job: Job, now: float) -> tuple[float | None, float]:
        """(P_R, P_M) for ``job`` at ``now``; P_R None / P_M NaN when not available yet."""
        for done, duration in self._pending.release(now):
            self._fold(done, duration)
        q = self.q
        bucket = q.bucketer.bucket(job.name)
        p_r, _ = q.rolling.estimate(job, bucket)
        if self._row_fn is None:
            return p_r, math.nan
        return p_r, max(math.expm1(self._row_fn(q.feature_row(job, bucket))), 0.0)

    def _fold(self, job: Job, duration: float) -> None:
        q = self.q
        bucket = q.bucketer.bucket(job.name)
        q.rolling.add(job, bucket, duration)
        self._rows.append((job.submit_time, q.raw_row(job, bucket, grow=True), math.log1p(duration)))
        self.observed += 1
        if self.observed >= self._next_fit:
            self._fit()

    def _fit(self) -> None:
        t0 = time.perf_counter()
        rows = sorted(self._rows, key=lambda r: r[0])  # ordered target statistics need submission order
        raw = np.array([r[1] for r in rows], float)
        y = np.array([r[2] for r in rows], float)
        self._row_fn = self.q.fit_arrays(raw, y, window=(rows[0][0], rows[-1][0])).row_predictor()
        self.fits.append(self.observed)
        self._next_fit = self.observed + self.retrain_every
        self.fit_seconds += time.perf_counter() - t0


def replay_online(
    predictor: DurationPredictor, jobs: Sequence[Job]
) -> tuple[list[float | None], list[tuple[float | None, float]]]:
    """Replay a trace through a duration predictor without a scheduler.

    Jobs in submission order; each is predicted at its submission and observed as ending at
    submit + duration (no queueing: the earliest it could end). Returns the predictions and,
    for :class:`OnlineQSSF`, the (P_R, P_M) parts (else an empty list).
    """
    preds: list[float | None] = []
    parts: list[tuple[float | None, float]] = []
    online = predictor if isinstance(predictor, OnlineQSSF) else None
    last = -math.inf
    for j in jobs:
        if j.submit_time < last:
            raise InvalidInput("jobs", j.id, "must be sorted by submit_time")
        last = j.submit_time
        if online is not None:
            p_r, p_m = online.predict_parts(j, j.submit_time)
            parts.append((p_r, p_m))
            preds.append(blend_values(online.lam, online.blend, p_r, p_m))
        else:
            preds.append(predictor.predict(j, j.submit_time))
        if j.duration is not None:
            predictor.observe(j, j.duration, j.submit_time + j.duration)
    return preds, parts


def evaluate_qssf(
    jobs: Sequence[Job],
    train_frac: float = 0.7,
    lams: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0),
    lam: float = 0.5,
    blend: str = "linear",
    predictor: OnlineQSSF | None = None,
    **options: Any,
) -> dict[str, object]:
    """Online replay of every job through :class:`OnlineQSSF`; metrics on the jobs after the
    first ``train_frac`` (by submission), which only warm the history up.

    Reports, per λ, Spearman rank correlation of predicted vs actual duration and of the
    GPU-time priority vs actual GPU time, and the median |log error| of the duration.
    ``options`` go to :class:`OnlineQSSF` (train_after, retrain_every, ...) unless a fresh
    ``predictor`` is passed (the caller keeps it, e.g. to save it).
    """
    if not 0 < train_frac < 1:
        raise InvalidInput("train_frac", train_frac, "must be between 0 and 1 (exclusive)")
    jobs = sorted((j for j in jobs if j.duration is not None), key=lambda j: j.submit_time)
    cut = int(len(jobs) * train_frac)
    train, test = jobs[:cut], jobs[cut:]
    if not train or not test:
        raise InvalidInput("jobs", len(jobs), "too few jobs with a duration to split")
    q = predictor if predictor is not None else OnlineQSSF(lam=lam, blend=blend, **options)
    if (q.lam, q.blend) != (lam, blend) or q.observed or len(q._pending):
        raise InvalidInput("predictor", f"λ {q.lam}, {q.blend}", f"need a fresh predictor with λ {lam}, {blend}")
    t0 = time.perf_counter()
    _, parts = replay_online(q, jobs)
    replay_s = time.perf_counter() - t0
    actual = np.array([j.duration for j in test], float)
    gpus = np.array([max(j.gpus, 0) for j in test], float)
    tail = parts[cut:]
    by_lambda = {}
    for lm in lams:
        pred = np.array([blend_values(lm, blend, pr, pm) for pr, pm in tail], dtype=float)  # None → NaN
        ok = ~np.isnan(pred)
        by_lambda[f"{lm:g}"] = {
            "spearman": spearman(actual[ok], pred[ok]),
            "spearman_gpu_time": spearman(actual[ok] * gpus[ok], pred[ok] * gpus[ok]),
            "median_abs_log_error": median_abs_log_error(actual[ok], pred[ok]),
            "unpredicted": int((~ok).sum()),
        }
    head = by_lambda.get(f"{lam:g}") or next(iter(by_lambda.values()))
    return {
        "n_train": len(train),
        "n_test": len(test),
        "lam": lam,
        "blend": blend,
        "spearman": head["spearman"],
        "spearman_gpu_time": head["spearman_gpu_time"],
        "median_abs_log_error": head["median_abs_log_error"],
        "by_lambda": by_lambda,
        "baseline_train_median": {
            "median_abs_log_error": median_abs_log_error(
                actual, np.full_like(actual, np.median([j.duration for j in train]))
            )
        },
        "train_after": q.train_after,
        "retrain_every": q.retrain_every,
        "pm_fits_at": q.fits,
        "pm_fit_seconds": round(q.fit_seconds, 3),
        "replay_seconds": round(replay_s, 3),
        # predict + observe per job, training excluded (it is reported above)
        "us_per_job": round(1e6 * (replay_s - q.fit_seconds) / len(jobs), 1),
    }


def qssf_update_engine(
    lam: float = 0.5, interval_s: float = 86_400.0, window_s: float = 90 * 86_400.0, min_samples: int = 50
) -> ModelUpdateEngine[Job]:
    """Model Update Engine for QSSF (seed 000 Fig. 10): ``observe(end_time, job)`` as jobs
    complete, ``maybe_refit(now)`` refits a fresh predictor on the window once per interval."""
    return ModelUpdateEngine(
        refit=lambda jobs: QSSFPredictor(lam=lam).fit(jobs),
        interval_s=interval_s,
        window_s=window_s,
        min_samples=min_samples,
    )
