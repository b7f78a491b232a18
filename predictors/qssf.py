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
Merged duration λ P_R + (1−λ) P_M goes into ``Job.predicted_duration``; the core's QSSF
ordering multiplies by ``gpus`` (priority = N (λ P_R + (1−λ) P_M), Alg. 1 line 20).
"""

from __future__ import annotations

import heapq
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Job
from qosmos.predictors.base import GBDTModel, ModelUpdateEngine, median_abs_log_error, spearman
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
    def from_json(cls, data: dict[str, object]) -> RollingEstimator:
        r = cls(float(data["alpha"]), bool(data.get("log_space", False)))  # type: ignore[arg-type]
        r.all = _Mean(*data["all"])  # type: ignore[misc]
        r.by_gpus = {int(g): _Mean(t, c) for g, t, c in data["by_gpus"]}  # type: ignore[union-attr]
        r.by_user = {u: _Mean(t, c) for u, t, c in data["by_user"]}  # type: ignore[union-attr]
        r.by_user_gpus = {(u, int(g)): _Mean(t, c) for u, g, t, c in data["by_user_gpus"]}  # type: ignore[union-attr]
        r.decay = {(u, int(b)): (n, d) for u, b, n, d in data["decay"]}  # type: ignore[union-attr]
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
        log_space: bool = True,
    ) -> None:
        if not 0 <= lam <= 1:
            raise InvalidInput("lam", lam, "must be in [0, 1]")
        self.lam = lam
        self.log_space = log_space
        self.bucketer = NameBucketer(name_threshold)
        self.rolling = RollingEstimator(alpha, log_space)
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
            b = self.bucketer.bucket(j.name, grow=grow)
            x[i] = (
                self._code("user", j.user, grow),
                self._code("vc", j.vc, grow),
                math.nan if b < 0 else float(b),
                self._code("category", j.category, grow),
                j.gpus,
                j.gpu_milli,
                j.cpu_milli,
                j.memory_mib,
                *_time_features(j.submit_time),
            )
        return x

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
        return np.maximum(np.expm1(self.model.predict(self.features(jobs))), 0.0)

    def merge(self, p_r: float | None, p_m: float) -> float | None:
        if p_r is None and math.isnan(p_m):
            return None
        if p_r is None:
            return float(p_m)
        if math.isnan(p_m):
            return float(p_r)
        if self.log_space:
            return math.expm1(self.lam * math.log1p(p_r) + (1 - self.lam) * math.log1p(p_m))
        return self.lam * p_r + (1 - self.lam) * float(p_m)

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
            "log_space": self.log_space,
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
        p = cls(
            state["lam"],
            state["rolling"]["alpha"],
            state["name_threshold"],
            state["num_rounds"],
            state["params"],
            state["log_space"],
        )
        p.bucketer = NameBucketer(state["name_threshold"], state["bucket_reps"])
        p.vocab = {k: dict(v) for k, v in state["vocab"].items()}
        p.rolling = RollingEstimator.from_json(state["rolling"])
        p.prior = float(state["prior"])
        p.te = {k: {int(c): (float(t), int(n)) for c, t, n in v} for k, v in state["te"].items()}
        p.model = GBDTModel.load(directory / "qssf_pm.txt", expected_features=FEATURES)
        return p


def evaluate_qssf(
    jobs: Sequence[Job],
    train_frac: float = 0.7,
    lams: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 1.0),
    lam: float = 0.5,
    log_space: bool = True,
) -> dict[str, object]:
    """Train on the first ``train_frac`` of jobs by submission, replay the rest causally.

    Reports, per λ, Spearman rank correlation of predicted vs actual duration and of the
    GPU-time priority vs actual GPU time, and the median |log error| of the duration.
    """
    import time

    if not 0 < train_frac < 1:
        raise InvalidInput("train_frac", train_frac, "must be in (0, 1)")
    jobs = sorted(jobs, key=lambda j: j.submit_time)
    cut = int(len(jobs) * train_frac)
    train, test = jobs[:cut], jobs[cut:]
    if not train or not test:
        raise InvalidInput("jobs", len(jobs), "too few jobs to split")
    t0 = time.perf_counter()
    q = QSSFPredictor(lam=lam, log_space=log_space).fit(train)
    fit_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    pairs = q.annotate_online(test)
    replay_s = time.perf_counter() - t1
    actual = np.array([j.duration for j in test], float)
    gpus = np.array([max(j.gpus, 0) for j in test], float)
    p_m = np.array([pm for _, pm in pairs])
    fallback = float(np.nanmean(p_m))
    p_r = np.array([fallback if pr is None else pr for pr, _ in pairs])
    by_lambda = {}
    for lm in lams:
        pred = np.expm1(lm * np.log1p(p_r) + (1 - lm) * np.log1p(p_m)) if q.log_space else lm * p_r + (1 - lm) * p_m
        by_lambda[f"{lm:g}"] = {
            "spearman": spearman(actual, pred),
            "spearman_gpu_time": spearman(actual * gpus, pred * gpus),
            "median_abs_log_error": median_abs_log_error(actual, pred),
        }
    head = by_lambda.get(f"{lam:g}") or next(iter(by_lambda.values()))
    return {
        "n_train": len(train),
        "n_test": len(test),
        "lam": lam,
        "spearman": head["spearman"],
        "spearman_gpu_time": head["spearman_gpu_time"],
        "median_abs_log_error": head["median_abs_log_error"],
        "by_lambda": by_lambda,
        "log_space": log_space,
        "baseline_train_median": {
            "median_abs_log_error": median_abs_log_error(
                actual, np.full_like(actual, np.median([j.duration for j in train]))
            )
        },
        "fit_seconds": round(fit_s, 3),
        "replay_ms_per_job": round(1000 * replay_s / len(test), 4),
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
