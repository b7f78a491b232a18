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
import math
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
    duration, end = float(row["duration"]), float(row["end"])
    if not (math.isfinite(duration) and duration >= 0 and math.isfinite(end)):
        raise ValueError(f"row of {job.id}: duration {duration} and end {end} must be finite, the duration >= 0")
    return job, duration, end


class Durations:
    """The history this replica holds (``rows``, every one observed by its predictors) and the
    ConfigMap it shares with its peers. kopf's peering is not leader election: two replicas may both
    run passes for a while (one paused past its keep-alive), and a replica may stand by and be active
    again. So a write first takes in the rows a peer wrote that this replica lacks, as a compare-and-swap
    (``Kube.update_config_map``: a peer's write between the read and the write makes it read again),
    and a replica that stands by forgets its copy and replays the ConfigMap when it is active again:
    no replica writes its older copy over a peer's observations."""

    def __init__(
        self,
        kube: Kube | None,
        namespace: str = "default",
        predictor: str = "qssf",
        save_interval_s: float = SAVE_INTERVAL_S,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.predictor_name = predictor
        self.unsaved: list[dict[str, Any]] = []  # observed here since the last write that went through
        self.loaded = False
        self.dirty = False
        self.save_interval_s = save_interval_s
        self._saved_at: float | None = None  # when the last write was tried (the pass's clock)
        self._forget()

    @property
    def name(self) -> str:  # (the core's DurationPredictor protocol)
        return self.predictor_name

    def _forget(self) -> None:
        from qosmos.predictors import make_duration_predictor
        from qosmos.predictors.runtime import SimilarElapsed

        self.predictor: DurationPredictor = make_duration_predictor(self.predictor_name)
        self.elapsed = SimilarElapsed()  # the ETA forecast's run times (predict_run)
        self.rows: list[dict[str, Any]] = []
        self._horizon = float("-inf")  # the latest end among rows dropped as too old: not taken in again
        self._now = float("-inf")

    def load(self) -> None:
        """Replay the persisted observations (the first pass after a start, or after standing by),
        with those of this replica that no write has carried yet."""
        if self.loaded or self.kube is None:
            self.loaded = True
            return
        self._forget()
        for row in self.unsaved:
            self._observe_row(row)
        stored = self._take_in(self.kube.read_config_map(self.namespace, CONFIG_MAP))
        self.unsaved = [r for r in self.unsaved if _key(r) not in stored]
        self.dirty = bool(self.unsaved)  # written with the next save
        self.loaded = True

    def _take_in(self, data: dict[str, str] | None) -> set[tuple[str, float]]:
        """Observe the ConfigMap's rows this replica lacks (all of them after a start); the keys it holds."""
        try:
            stored = json.loads((data or {}).get(KEY) or "[]")
            keys = {_key(r) for r in stored}
            for row in stored:
                _job(row)  # every row readable before any is observed
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning(
                "duration history in ConfigMap %s/%s unreadable, not replayed: %s", self.namespace, CONFIG_MAP, exc
            )
            return set()
        held = {_key(r) for r in self.rows}
        new = [r for r in stored if _key(r) not in held and float(r["end"]) > self._horizon]
        for row in new:
            self._observe_row(row)
        if new:  # (the predictors release observations by their end, not in this order)
            self.rows.sort(key=lambda r: float(r["end"]))
            self._trim(MAX_OBSERVATIONS)
        return keys

    def _observe_row(self, row: dict[str, Any]) -> None:
        job, duration, end = _job(row)
        self.predictor.observe(job, duration, end)
        self.elapsed.observe(job, duration, end)
        self.rows.append(row)

    def _trim(self, keep: int) -> None:
        """Keep the newest ``keep`` rows (``rows`` is in the order they ended, as observed)."""
        dropped = self.rows[: max(len(self.rows) - keep, 0)]
        if dropped:
            self._horizon = max(self._horizon, *(float(r["end"]) for r in dropped))
            del self.rows[: len(dropped)]

    def stand_by(self, now: float, *, force: bool = False) -> None:
        """This replica stops running passes (called on each pass it stands by): write what it held
        back, then forget the history. Rows whose write failed are kept: written, with what the
        ConfigMap holds then, once per interval while standing by (``force``: now, at a stop), and
        replayed when it is active again."""
        if self.kube is None:
            return
        if not self.loaded:
            if not self.unsaved or not (force or self._due(now)):
                return
            try:
                self.load()
            except Exception as exc:  # the apiserver is away: tried again after the interval
                self._saved_at = now
                log.warning("duration history not read from ConfigMap %s/%s: %s", self.namespace, CONFIG_MAP, exc)
                return
        self.save(now, force=True)
        self._forget()
        self.loaded = False

    def _due(self, now: float) -> bool:
        # (a wall clock stepped back does not hold the history back until it catches up)
        return self._saved_at is None or not 0.0 <= now - self._saved_at < self.save_interval_s

    def observe(self, job: Job, duration: float, end: float) -> None:
        row = _row(job, duration, end)
        self._observe_row(row)
        self._trim(MAX_OBSERVATIONS)
        self.unsaved.append(row)
        del self.unsaved[:-MAX_OBSERVATIONS]
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
        """Persist the newest observations that fit a ConfigMap, with those a peer wrote meanwhile, at
        most once per ``save_interval_s`` (``now``: the pass's clock; ``force``: at a stop). Best
        effort: a failed write is logged and tried again after the interval; the pass's decisions,
        made and written, stand. True when written."""
        if not self.dirty or not self.loaded or self.kube is None:
            return False  # (not loaded: standing by, this replica does not hold the history to write)
        if not force and not self._due(now):
            return False  # stays dirty: a later pass writes these observations with the next ones
        self._saved_at = now

        def merged(stored: dict[str, str] | None) -> dict[str, str]:
            self._take_in(stored)  # (called again after a peer's write in between: its rows too)
            text, kept = newest_that_fit(self.rows, MAX_BYTES)
            self._trim(kept)  # a restart replays exactly these
            return {KEY: text}

        try:
            text = self.kube.update_config_map(self.namespace, CONFIG_MAP, merged)[KEY]
        except Exception as exc:  # the apiserver refused or is away: the pass stands
            log.warning("duration history not saved to ConfigMap %s/%s: %s", self.namespace, CONFIG_MAP, exc)
            return False
        self.dirty = False
        self.unsaved = []
        metrics.HISTORY_WRITES.inc()
        metrics.HISTORY_BYTES.set(len(text))
        return True


def _key(row: dict[str, Any]) -> tuple[str, float]:
    """One finished run: a DLJob's id and when it ended (a job restarted under its name ends later)."""
    return str(row["id"]), float(row["end"])


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
