"""QSSF durations for the operator: ``qosmos.predictors.make_duration_predictor("qssf")`` trained on the
cluster's own finished DLJobs. The observations are kept in a ConfigMap, so a restarted operator
replays them into a fresh predictor and predicts as before (the predictor retrains itself as the
history grows, its documented schedule; before any history it predicts nothing and QSSF orders such
jobs last, in arrival order).

The ETA forecast reads :meth:`Durations.predict_run`, fed the same observations: a job's run time
given the time it has already run, from its QSSF-similar jobs, with their spread where they are few
(``qosmos.predictors.runtime.SimilarElapsed``, seed 004 §VI-A)."""

from __future__ import annotations

import json
import logging
from typing import Any

from qosmos.extender.core.types import DurationPredictor, Job
from qosmos.operator import metrics
from qosmos.operator.kube import Kube

log = logging.getLogger("qosmos.operator")

CONFIG_MAP = "qosmos-operator-durations"
KEY = "observations.json"
MAX_OBSERVATIONS = 5000  # the newest observations kept ...
MAX_BYTES = 960_000  # ... as far as they fit a ConfigMap (1 MiB of data at most; rows are 250-400 bytes)
# One write of the history (up to MAX_BYTES, the whole ConfigMap) at most this often: while jobs finish,
# every pass would rewrite it, and etcd keeps each revision until compaction (5 min) while the apiserver's
# watch cache and every ConfigMap watcher get it whole. A crash loses the observations of this window at
# most; a graceful stop saves them (``save(force=True)``).
SAVE_INTERVAL_S = 30.0
_FIELDS = ("id", "submit_time", "gpus", "kind", "user", "vc", "model", "batch", "iters", "cpu_milli", "memory_mib")


def _row(job: Job, duration: float, end: float) -> dict[str, Any]:
    row: dict[str, Any] = {f: getattr(job, f) for f in _FIELDS}
    row.update(kind=str(job.kind), qos=int(job.qos), name=job.name, category=job.category)
    row.update(gpu_models=list(job.gpu_models), duration=duration, end=end)
    return row


def _job(row: dict[str, Any]) -> tuple[Job, float, float]:
    kw = {f: row[f] for f in _FIELDS}
    job = Job(**kw, qos=row["qos"], name=row["name"], category=row["category"], gpu_models=tuple(row["gpu_models"]))
    return job, float(row["duration"]), float(row["end"])


class Durations:
    def __init__(
        self,
        kube: Kube | None,
        namespace: str = "default",
        predictor: str = "qssf",
        save_interval_s: float = SAVE_INTERVAL_S,
    ) -> None:
        from qosmos.predictors import make_duration_predictor
        from qosmos.predictors.runtime import SimilarElapsed

        self.kube = kube
        self.namespace = namespace
        self.predictor: DurationPredictor = make_duration_predictor(predictor)
        self.elapsed = SimilarElapsed()  # the ETA forecast's run times (predict_run)
        self.rows: list[dict[str, Any]] = []
        self.loaded = False
        self.dirty = False
        self.save_interval_s = save_interval_s
        self._saved_at: float | None = None  # when the last write was tried (the pass's clock)
        self._now = float("-inf")

    def load(self) -> None:
        """Replay the persisted observations once (the first pass after a start)."""
        if self.loaded or self.kube is None:
            self.loaded = True
            return
        data = self.kube.read_config_map(self.namespace, CONFIG_MAP) or {}
        try:
            rows = json.loads(data.get(KEY) or "[]")
            for row in rows:
                job, duration, end = _job(row)
                self.predictor.observe(job, duration, end)
                self.elapsed.observe(job, duration, end)
            self.rows = list(rows)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning(
                "duration history in ConfigMap %s/%s unreadable, starting afresh: %s", self.namespace, CONFIG_MAP, exc
            )
            self.rows = []
        self.loaded = True

    def observe(self, job: Job, duration: float, end: float) -> None:
        self.predictor.observe(job, duration, end)
        self.elapsed.observe(job, duration, end)
        self.rows.append(_row(job, duration, end))
        self.rows = self.rows[-MAX_OBSERVATIONS:]
        self.dirty = True

    def predict(self, job: Job, now: float) -> float | None:
        # the predictor wants its clock in order; a wall clock stepped back (NTP) must not stop QSSF
        self._now = max(self._now, now)
        return self.predictor.predict(job, self._now)

    def predict_run(self, job: Job, now: float, elapsed: float) -> float | None:
        """The ETA forecast's run time of ``job`` given that it has run ``elapsed`` seconds (0: not
        started): > ``elapsed``, or None before any history."""
        self._now = max(self._now, now)
        return self.elapsed.predict(job, self._now, elapsed)

    def save(self, now: float, *, force: bool = False) -> bool:
        """Persist the newest observations that fit a ConfigMap, at most once per ``save_interval_s``
        (``now``: the pass's clock; ``force``: at a stop). Best effort: a failed write is logged and
        tried again after the interval; the pass's decisions, made and written, stand. True when written."""
        if not self.dirty or self.kube is None:
            return False
        # (a wall clock stepped back does not hold the history back until it catches up)
        if not force and self._saved_at is not None and 0.0 <= now - self._saved_at < self.save_interval_s:
            return False  # stays dirty: a later pass writes these observations with the next ones
        self._saved_at = now
        text, kept = newest_that_fit(self.rows, MAX_BYTES)
        self.rows = self.rows[len(self.rows) - kept :]  # a restart replays exactly these
        try:
            self.kube.write_config_map(self.namespace, CONFIG_MAP, {KEY: text})
        except Exception as exc:  # the apiserver refused or is away: the pass stands
            log.warning("duration history not saved to ConfigMap %s/%s: %s", self.namespace, CONFIG_MAP, exc)
            return False
        self.dirty = False
        metrics.HISTORY_WRITES.inc()
        metrics.HISTORY_BYTES.set(len(text))
        return True


def newest_that_fit(rows: list[dict[str, Any]], max_bytes: int) -> tuple[str, int]:
    """The JSON list of the newest ``rows`` that fits ``max_bytes``, and how many it holds."""
    encoded = [json.dumps(r, separators=(",", ":")) for r in rows]
    size, kept = 2, 0  # the brackets
    for text in reversed(encoded):
        size += len(text) + (1 if kept else 0)  # a comma before all but the first
        if size > max_bytes:
            break
        kept += 1
    return "[" + ",".join(encoded[len(encoded) - kept :]) + "]", kept
