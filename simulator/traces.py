"""Trace loaders and generators behind one interface: ``load_trace(spec, fmt, **options) -> Trace``.

Each file format is translated into the core's domain types (Job, Node) at this edge
(AnalySIM §3.2: job id, partition, requested nodes/GPUs, final state, submit/start/end).
Loaders read the whole file, validate every row and only then return: a malformed row
raises :class:`TraceFormatError` (an ``InvalidInput``) naming file, line and field, so
nothing half-loaded is ever simulated.

Formats: ``openb`` (Alibaba cluster-trace-gpu-v2023), ``helios`` (Helios cluster_log.csv),
``philly`` (Philly cluster_job_log JSON), ``native`` (documented CSV, see README),
``genie`` (GENIE Table 3 generator) and ``helios-synth`` (Helios-shaped generator).
"""

from __future__ import annotations

import csv
import json
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Job, JobEnd, JobKind, Node, QoSClass

DATA_DIR = Path(__file__).parent / "data"
FORMATS = ("openb", "helios", "philly", "native", "genie", "helios-synth")
BUILTINS = {"openb-sample": "openb", "genie": "genie", "helios-synth": "helios-synth"}
NODES_PER_SWITCH = 16  # default physical topology when a trace has none (AnalySIM §3.1)


class TraceFormatError(InvalidInput):
    """A malformed trace: ``file:line: field F: reason (got value)``."""

    def __init__(self, file: str, line: int, field_name: str, value: object, reason: str) -> None:
        super().__init__(field_name, value, reason)
        self.file = file
        self.line = line
        self.args = (f"{file}:{line}: field {field_name}: {reason} (got {value!r})",)


@dataclass(slots=True)
class Trace:
    """Jobs and the cluster they ran on, plus what the trace recorded (for fidelity mode).

    ``recorded_start``/``recorded_end`` are absolute seconds (None when never started);
    ``withdraw_at`` is set for jobs deleted while still pending: the engine removes them
    from the queue then, or stops them then when it did start them.
    """

    name: str
    jobs: list[Job]
    nodes: list[Node]
    recorded_start: list[float | None] = field(default_factory=list)
    recorded_end: list[float | None] = field(default_factory=list)
    recorded_nodes: list[tuple[str, ...]] = field(default_factory=list)
    withdraw_at: list[float | None] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.jobs)
        for attr in ("recorded_start", "recorded_end", "withdraw_at"):
            if not getattr(self, attr):
                setattr(self, attr, [None] * n)
        if not self.recorded_nodes:
            self.recorded_nodes = [()] * n

    @property
    def has_recorded(self) -> bool:
        return any(s is not None for s in self.recorded_start)


# ---- helpers ---------------------------------------------------------------------------------


class _Rows:
    """CSV rows with their 1-based file line numbers and field-checked converters."""

    def __init__(self, path: Path, required: tuple[str, ...]) -> None:
        self.path = path
        self.name = path.name
        if not path.is_file():
            raise InvalidInput("trace", str(path), "file not found")
        self._fh = path.open(newline="", encoding="utf-8")
        self.reader = csv.DictReader(self._fh)
        header = self.reader.fieldnames or []
        header = [h.strip() for h in header]
        self.reader.fieldnames = header
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceFormatError(self.name, 1, missing[0], header, "missing column")

    def __iter__(self) -> Iterator[tuple[int, dict[str, str]]]:
        try:
            for row in self.reader:
                yield self.reader.line_num, row
        finally:
            self._fh.close()

    def err(self, line: int, fld: str, value: object, reason: str) -> TraceFormatError:
        return TraceFormatError(self.name, line, fld, value, reason)

    def num(self, line: int, row: dict[str, str], fld: str, *, optional: bool = False, minimum: float = 0.0) -> float:
        raw = (row.get(fld) or "").strip()
        if raw == "" or raw.lower() in ("none", "nan", "null"):
            if optional:
                return math.nan
            raise self.err(line, fld, raw, "missing value")
        try:
            v = float(raw)
        except ValueError:
            raise self.err(line, fld, raw, "not a number") from None
        if not math.isfinite(v) or v < minimum:
            raise self.err(line, fld, raw, f"must be a finite number >= {minimum:g}")
        return v

    def int_(self, line: int, row: dict[str, str], fld: str, *, default: int | None = None) -> int:
        raw = (row.get(fld) or "").strip()
        if raw == "" and default is not None:
            return default
        v = self.num(line, row, fld)
        if v != int(v):
            raise self.err(line, fld, raw, "must be an integer")
        return int(v)


def _time(rows: _Rows, line: int, row: dict[str, str], fld: str, optional: bool = False) -> float | None:
    """'YYYY-MM-DD HH:MM:SS' (or epoch seconds) as epoch seconds; None when optional and empty."""
    raw = (row.get(fld) or "").strip()
    if raw == "" or raw.lower() in ("none", "nan", "null"):
        if optional:
            return None
        raise rows.err(line, fld, raw, "missing time")
    try:
        return float(raw)
    except ValueError:
        pass
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S.%f"):
        try:
            return datetime.strptime(raw, fmt).timestamp()
        except ValueError:
            continue
    raise rows.err(line, fld, raw, "expected 'YYYY-MM-DD HH:MM:SS'")


def with_switches(nodes: list[Node], nodes_per_switch: int = NODES_PER_SWITCH) -> list[Node]:
    """Give nodes without a switch one: consecutive groups of ``nodes_per_switch`` per VC."""
    count: dict[str, int] = {}
    for nd in nodes:
        if not nd.switch:
            i = count.get(nd.vc, 0)
            nd.switch = f"{nd.vc}/sw{i // max(nodes_per_switch, 1)}"
            count[nd.vc] = i + 1
    return nodes


def homogeneous_nodes(n: int, gpus: int, vc: str = "default", prefix: str = "node") -> list[Node]:
    if n < 1 or gpus < 1:
        raise InvalidInput("nodes", (n, gpus), "need at least one node with at least one GPU")
    return [Node(f"{prefix}-{i:04d}", gpus, vc=vc) for i in range(n)]


def vc_nodes_from_gpus(gpus_by_vc: dict[str, int], gpus_per_node: int = 8) -> list[Node]:
    """Nodes of ``gpus_per_node`` GPUs per VC (the Helios clusters' 8-GPU servers)."""
    out: list[Node] = []
    for vc in sorted(gpus_by_vc):
        n = max(1, -(-int(gpus_by_vc[vc]) // gpus_per_node))
        out += [Node(f"{vc}-n{i:03d}", gpus_per_node, vc=vc) for i in range(n)]
    return out


def peak_concurrent_gpus(trace: Trace) -> dict[str, int]:
    """Per VC, the most GPUs its recorded jobs held at once (Helios' Philly assumption (1))."""
    events: dict[str, list[tuple[float, int]]] = {}
    for j, s, e in zip(trace.jobs, trace.recorded_start, trace.recorded_end, strict=True):
        if s is None or e is None:
            continue
        ev = events.setdefault(j.vc, [])
        ev.append((s, j.gpus))
        ev.append((max(e, s), -j.gpus))
    peak: dict[str, int] = {}
    for vc, ev in events.items():
        ev.sort(key=lambda x: (x[0], x[1]))
        cur = best = 0
        for _, d in ev:
            cur += d
            best = max(best, cur)
        peak[vc] = best
    for j in trace.jobs:
        peak[j.vc] = max(peak.get(j.vc, 0), j.gpus, 1)
    return peak


# ---- openb (Alibaba cluster-trace-gpu-v2023) -----------------------------------------------

OPENB_QOS = {"LS": QoSClass.PRIOR, "Guaranteed": QoSClass.URGENT, "Burstable": QoSClass.NORMAL, "BE": QoSClass.NORMAL}


def load_openb_nodes(path: Path) -> list[Node]:
    rows = _Rows(path, ("sn", "cpu_milli", "memory_mib", "gpu"))
    nodes: list[Node] = []
    seen: set[str] = set()
    for line, r in rows:
        name = (r.get("sn") or "").strip()
        if not name or name in seen:
            raise rows.err(line, "sn", name, "node names must be non-empty and unique")
        seen.add(name)
        nodes.append(
            Node(
                name,
                rows.int_(line, r, "gpu"),
                gpu_model=(r.get("model") or "").strip(),
                cpu_milli=rows.int_(line, r, "cpu_milli"),
                memory_mib=rows.int_(line, r, "memory_mib"),
            )
        )
    if not nodes:
        raise InvalidInput("trace", str(path), "no nodes")
    return nodes


def load_openb(pods: Path, nodes_file: Path | None = None) -> Trace:
    """Pods: run time = deletion − scheduled; recorded queue = scheduled − creation.

    Pods never scheduled (pod_phase Pending, empty scheduled_time) were deleted while
    waiting: they are withdrawn at their deletion time. ``gpu_spec`` lists the allowed GPU
    models (``|``-separated); ``gpu_milli`` < 1000 is a GPU-sharing pod on one GPU.
    """
    if pods.is_dir():
        pods, nodes_file = pods / "openb_pod_list_default.csv", nodes_file or pods / "openb_node_list_gpu_node.csv"
    if nodes_file is None:
        for cand in (pods.parent / "openb_node_list_gpu_node.csv", pods.with_name(pods.stem + "_nodes.csv")):
            if cand.is_file():
                nodes_file = cand
                break
    if nodes_file is None:
        raise InvalidInput("node_list", str(pods.parent), "openb needs a node list (openb_node_list_gpu_node.csv)")
    nodes = load_openb_nodes(nodes_file)
    rows = _Rows(pods, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "creation_time", "deletion_time"))
    jobs: list[Job] = []
    rs: list[float | None] = []
    re_: list[float | None] = []
    wd: list[float | None] = []
    for line, r in rows:
        name = (r.get("name") or "").strip()
        if not name:
            raise rows.err(line, "name", name, "missing pod name")
        gpus = rows.int_(line, r, "num_gpu")
        milli = rows.int_(line, r, "gpu_milli", default=1000)
        created = rows.num(line, r, "creation_time")
        deleted = rows.num(line, r, "deletion_time")
        sched = rows.num(line, r, "scheduled_time", optional=True)
        if deleted < created:
            raise rows.err(line, "deletion_time", r.get("deletion_time"), "before creation_time")
        if not math.isnan(sched) and not created <= sched <= deleted:
            raise rows.err(line, "scheduled_time", r.get("scheduled_time"), "outside [creation_time, deletion_time]")
        if gpus == 0:
            kind, milli = JobKind.CPU, 1000
        else:
            kind = JobKind.TRAINING
            if milli <= 0 or milli > 1000:
                raise rows.err(line, "gpu_milli", milli, "must be in (0, 1000] for a GPU pod")
            if milli < 1000 and gpus != 1:
                raise rows.err(line, "gpu_milli", milli, "GPU sharing needs num_gpu == 1")
        spec = tuple(s.strip() for s in (r.get("gpu_spec") or "").split("|") if s.strip())
        qos_label = (r.get("qos") or "").strip()
        try:
            job = Job(
                name,
                created,
                gpus=gpus,
                kind=kind,
                cpu_milli=rows.int_(line, r, "cpu_milli"),
                memory_mib=rows.int_(line, r, "memory_mib"),
                gpu_milli=milli,
                gpu_models=spec,
                qos=OPENB_QOS.get(qos_label, QoSClass.NORMAL),
                category=qos_label,
                duration=0.0 if math.isnan(sched) else deleted - sched,
                end_state=JobEnd.FAILED if (r.get("pod_phase") or "").strip() == "Failed" else JobEnd.COMPLETED,
            )
        except InvalidInput as exc:
            raise rows.err(line, exc.field, exc.value, exc.reason) from None
        jobs.append(job)
        if math.isnan(sched):
            rs.append(None)
            re_.append(None)
            wd.append(deleted)
            job.end_state = JobEnd.CANCELLED
        else:
            rs.append(sched)
            re_.append(deleted)
            wd.append(None)
    if not jobs:
        raise InvalidInput("trace", str(pods), "no pods")
    return Trace(pods.name, jobs, with_switches(nodes), rs, re_, [], wd, [f"openb pods {pods}, nodes {nodes_file}"])


# ---- Helios (cluster_log.csv + cluster_gpu_number.csv) -------------------------------------

HELIOS_STATES = {"COMPLETED": JobEnd.COMPLETED, "CANCELLED": JobEnd.CANCELLED}


def load_helios_gpu_numbers(path: Path) -> dict[str, int]:
    """Daily VC GPU counts: a date column then one column per VC (max over days is used).

    Also accepts the long shape ``vc,gpu_num`` (one row per VC). Non-numeric cells in the
    first column are taken as dates and skipped.
    """
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    if len(rows) < 2:
        raise TraceFormatError(path.name, 1, "header", rows[:1], "need a header and at least one row")
    header = [h.strip() for h in rows[0]]
    out: dict[str, int] = {}
    lower = [h.lower() for h in header]
    if len(header) == 2 and lower[0] in ("vc", "name", "id") and lower[1] in ("gpu_num", "gpus", "gpu"):
        for i, r in enumerate(rows[1:], start=2):
            try:
                out[r[0].strip()] = int(float(r[1]))
            except (ValueError, IndexError):
                raise TraceFormatError(path.name, i, header[1], r, "expected an integer GPU count") from None
        return out
    first_is_date = lower[0] in ("date", "time", "day", "") or not _is_number(rows[1][0])
    vcs = header[1:] if first_is_date else header
    for i, r in enumerate(rows[1:], start=2):
        cells = r[1:] if first_is_date else r
        if len(cells) != len(vcs):
            raise TraceFormatError(path.name, i, "row", r, f"expected {len(vcs)} VC columns")
        for vc, cell in zip(vcs, cells, strict=True):
            if cell.strip() == "":
                continue
            if not _is_number(cell):
                raise TraceFormatError(path.name, i, vc, cell, "expected a GPU count")
            out[vc] = max(out.get(vc, 0), int(float(cell)))
    return out


def _is_number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def load_helios(path: Path, include_cpu: bool = False, gpus_per_node: int = 8) -> Trace:
    """Helios cluster_log.csv (§2.2 schema). GPU jobs only by default (Helios §4.2.3).

    Run time = end − start as recorded (cancelled/failed jobs run what they ran); jobs with
    no start were cancelled while queued and are withdrawn at their end time.
    VCs get nodes of 8 GPUs from cluster_gpu_number.csv next to the log, or, without it,
    from each VC's peak concurrent recorded demand.
    """
    log = path / "cluster_log.csv" if path.is_dir() else path
    rows = _Rows(log, ("job_id", "vc", "gpu_num", "submit_time", "state"))
    jobs: list[Job] = []
    rs: list[float | None] = []
    re_: list[float | None] = []
    wd: list[float | None] = []
    nn: list[tuple[str, ...]] = []
    for line, r in rows:
        gpus = rows.int_(line, r, "gpu_num")
        if gpus == 0 and not include_cpu:
            continue
        submit = _time(rows, line, r, "submit_time")
        start = _time(rows, line, r, "start_time", optional=True)
        end = _time(rows, line, r, "end_time", optional=True)
        assert submit is not None
        state = (r.get("state") or "").strip().upper()
        if not state:
            raise rows.err(line, "state", state, "missing state")
        if start is not None and start < submit:
            raise rows.err(line, "start_time", r.get("start_time"), "before submit_time")
        if start is not None and end is not None and end < start:
            raise rows.err(line, "end_time", r.get("end_time"), "before start_time")
        if start is not None and end is None:
            dur = rows.num(line, r, "duration")
            end = start + dur
        jid = (r.get("job_id") or "").strip()
        if not jid:
            raise rows.err(line, "job_id", jid, "missing")
        try:
            job = Job(
                jid,
                submit,
                gpus=gpus,
                kind=JobKind.CPU if gpus == 0 else JobKind.TRAINING,
                user=(r.get("user") or "").strip(),
                vc=(r.get("vc") or "").strip() or "default",
                cpu_milli=int(rows.num(line, r, "cpu_num", optional=True) * 1000)
                if (r.get("cpu_num") or "").strip()
                else 0,
                nodes=0,
                duration=(end - start) if start is not None and end is not None else 0.0,
                end_state=HELIOS_STATES.get(state, JobEnd.FAILED),
            )
        except InvalidInput as exc:
            raise rows.err(line, exc.field, exc.value, exc.reason) from None
        jobs.append(job)
        rs.append(start)
        re_.append(end)
        wd.append(end if start is None else None)
        nn.append(())
    if not jobs:
        raise InvalidInput("trace", str(log), "no GPU jobs")
    t0 = min(j.submit_time for j in jobs)
    for i, j in enumerate(jobs):  # rebase to the first submission
        j.submit_time -= t0
        rs[i] = None if rs[i] is None else rs[i] - t0  # type: ignore[operator]
        re_[i] = None if re_[i] is None else re_[i] - t0  # type: ignore[operator]
        wd[i] = None if wd[i] is None else wd[i] - t0  # type: ignore[operator]
    trace = Trace(log.name, jobs, [], rs, re_, nn, wd)
    gpu_file = log.parent / "cluster_gpu_number.csv"
    if gpu_file.is_file():
        counts = load_helios_gpu_numbers(gpu_file)
        trace.notes.append(f"VC sizes from {gpu_file.name}")
    else:
        counts = peak_concurrent_gpus(trace)
        trace.notes.append("VC sizes from each VC's peak concurrent recorded demand (no cluster_gpu_number.csv)")
    for vc in {j.vc for j in jobs} - set(counts):
        counts[vc] = peak_concurrent_gpus(trace).get(vc, 8)
    trace.nodes = with_switches(vc_nodes_from_gpus(counts, gpus_per_node))
    return unconstrained(trace)


# ---- Philly (cluster_job_log JSON) ---------------------------------------------------------

PHILLY_STATES = {"pass": JobEnd.COMPLETED, "killed": JobEnd.CANCELLED, "failed": JobEnd.FAILED}


def load_philly(path: Path, gpus_per_node: int = 8) -> Trace:
    """Philly cluster_job_log: run time from the first attempt's start to the last attempt's end
    (retries included, as Philly recorded them, Helios §2.3.2); GPUs from the first attempt.
    VCs are sized by their peak concurrent demand (Helios §4.2.3 assumption (1)).
    """
    name = path.name
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInput("trace", str(path), "file not found") from None
    except json.JSONDecodeError as exc:
        raise TraceFormatError(name, exc.lineno, "json", exc.msg, "not valid JSON") from None
    if not isinstance(data, list):
        raise TraceFormatError(name, 1, "root", type(data).__name__, "expected a JSON list of jobs")
    jobs: list[Job] = []
    rs: list[float | None] = []
    re_: list[float | None] = []
    wd: list[float | None] = []
    nn: list[tuple[str, ...]] = []

    def ts(v: object, i: int, fld: str, optional: bool = True) -> float | None:
        if v is None or v == "None" or v == "":
            if optional:
                return None
            raise TraceFormatError(name, i, fld, v, "missing time")
        try:
            return datetime.strptime(str(v), "%Y-%m-%d %H:%M:%S").timestamp()
        except ValueError:
            raise TraceFormatError(name, i, fld, v, "expected 'YYYY-MM-DD HH:MM:SS'") from None

    for i, rec in enumerate(data, start=1):  # "line" = job record number
        if not isinstance(rec, dict):
            raise TraceFormatError(name, i, "job", rec, "expected an object")
        jid = str(rec.get("jobid") or "")
        if not jid:
            raise TraceFormatError(name, i, "jobid", rec.get("jobid"), "missing")
        submit = ts(rec.get("submitted_time"), i, "submitted_time", optional=False)
        attempts = rec.get("attempts") or []
        if not isinstance(attempts, list):
            raise TraceFormatError(name, i, "attempts", attempts, "expected a list")
        starts, ends, gpus, hosts = [], [], 0, []
        for k, a in enumerate(attempts):
            s, e = (
                ts(a.get("start_time"), i, f"attempts[{k}].start_time"),
                ts(a.get("end_time"), i, f"attempts[{k}].end_time"),
            )
            if s is not None and e is not None and e < s:
                raise TraceFormatError(name, i, f"attempts[{k}].end_time", a.get("end_time"), "before start_time")
            if s is not None:
                starts.append(s)
            if e is not None:
                ends.append(e)
            if k == 0:
                for d in a.get("detail") or []:
                    g = d.get("gpus") or []
                    if not isinstance(g, list):
                        raise TraceFormatError(name, i, "detail.gpus", g, "expected a list")
                    gpus += len(g)
                    hosts.append(str(d.get("ip", "")))
        start = min(starts) if starts else None
        end = max(ends) if ends else None
        if start is not None and end is None:
            continue  # still running at the end of the log: no run time recorded
        assert submit is not None
        if start is not None and start < submit:
            start = submit  # Philly's clocks occasionally disagree by seconds
        status = str(rec.get("status", "")).lower()
        job = Job(
            jid,
            submit,
            gpus=max(gpus, 1) if start is not None else 1,
            user=str(rec.get("user") or ""),
            vc=str(rec.get("vc") or "default"),
            duration=(end - start) if start is not None and end is not None else 0.0,
            end_state=PHILLY_STATES.get(status, JobEnd.FAILED),
        )
        jobs.append(job)
        rs.append(start)
        re_.append(end)
        wd.append(end if start is None else None)
        nn.append(tuple(hosts))
    if not jobs:
        raise InvalidInput("trace", str(path), "no jobs with a run time")
    t0 = min(j.submit_time for j in jobs)
    for i, j in enumerate(jobs):
        j.submit_time -= t0
        rs[i] = None if rs[i] is None else rs[i] - t0  # type: ignore[operator]
        re_[i] = None if re_[i] is None else re_[i] - t0  # type: ignore[operator]
        wd[i] = None if wd[i] is None else wd[i] - t0  # type: ignore[operator]
    trace = Trace(name, jobs, [], rs, re_, nn, wd, ["VC sizes from each VC's peak concurrent recorded demand"])
    trace.nodes = with_switches(vc_nodes_from_gpus(peak_concurrent_gpus(trace), gpus_per_node))
    return trace


# ---- native CSV ---------------------------------------------------------------------------

NATIVE_REQUIRED = ("id", "submit", "gpus")
NATIVE_COLUMNS = [
    "id",
    "submit",
    "gpus",
    "duration",
    "vc",
    "user",
    "kind",
    "model",
    "batch",
    "iters",
    "qos",
    "nodes",
    "cpu_milli",
    "memory_mib",
    "gpu_milli",
    "gpu_models",
    "end_state",
    "start",
    "end",
    "predicted_duration",
    "name",
]


def load_native_nodes(path: Path) -> list[Node]:
    """nodes CSV: name,gpus[,vc,switch,gpu_model,cpu_milli,memory_mib]."""
    rows = _Rows(path, ("name", "gpus"))
    out = []
    for line, r in rows:
        try:
            out.append(
                Node(
                    (r.get("name") or "").strip(),
                    rows.int_(line, r, "gpus"),
                    gpu_model=(r.get("gpu_model") or "").strip(),
                    cpu_milli=rows.int_(line, r, "cpu_milli", default=0),
                    memory_mib=rows.int_(line, r, "memory_mib", default=0),
                    vc=(r.get("vc") or "").strip() or "default",
                    switch=(r.get("switch") or "").strip(),
                )
            )
        except InvalidInput as exc:
            if isinstance(exc, TraceFormatError):
                raise
            raise rows.err(line, exc.field, exc.value, exc.reason) from None
    return out


def load_native(path: Path, nodes: list[Node] | None = None) -> Trace:
    """The native job CSV (documented in simulator/README.md).

    Required: id, submit (s), gpus; plus duration (s) unless the row is a GENIE task
    (model, batch, iters). Optional: every other Job field, and recorded start/end.
    Nodes come from ``<trace>.nodes.csv`` or ``nodes.csv`` beside it, else from the caller.
    """
    rows = _Rows(path, NATIVE_REQUIRED)
    jobs: list[Job] = []
    rs: list[float | None] = []
    re_: list[float | None] = []
    seen: set[str] = set()
    for line, r in rows:
        opt = {k: (r.get(k) or "").strip() for k in NATIVE_COLUMNS}
        if opt["id"] in seen:
            raise rows.err(line, "id", opt["id"], "duplicate job id")
        seen.add(opt["id"])
        dur = rows.num(line, r, "duration", optional=True) if "duration" in r else math.nan
        pd_ = rows.num(line, r, "predicted_duration", optional=True) if opt["predicted_duration"] else math.nan
        try:
            job = Job(
                opt["id"],
                rows.num(line, r, "submit"),
                gpus=rows.int_(line, r, "gpus"),
                kind=opt["kind"] or JobKind.TRAINING,
                user=opt["user"],
                vc=opt["vc"] or "default",
                model=opt["model"],
                batch=rows.int_(line, r, "batch", default=0),
                iters=rows.int_(line, r, "iters", default=0),
                qos=opt["qos"] or QoSClass.NORMAL,
                nodes=rows.int_(line, r, "nodes", default=0),
                cpu_milli=rows.int_(line, r, "cpu_milli", default=0),
                memory_mib=rows.int_(line, r, "memory_mib", default=0),
                gpu_milli=rows.int_(line, r, "gpu_milli", default=1000),
                gpu_models=tuple(s for s in opt["gpu_models"].split("|") if s),
                end_state=JobEnd(opt["end_state"].lower()) if opt["end_state"] else JobEnd.COMPLETED,
                duration=None if math.isnan(dur) else dur,
                predicted_duration=None if math.isnan(pd_) else pd_,
                name=opt["name"] or None,
            )
        except InvalidInput as exc:
            raise rows.err(line, exc.field, exc.value, exc.reason) from None
        except ValueError:
            raise rows.err(line, "end_state", opt["end_state"], "expected completed, cancelled or failed") from None
        if job.duration is None and not job.has_genie_task:
            raise rows.err(line, "duration", r.get("duration"), "needed unless model, batch and iters are given")
        s = rows.num(line, r, "start", optional=True) if opt["start"] else math.nan
        e = rows.num(line, r, "end", optional=True) if opt["end"] else math.nan
        if not math.isnan(s) and s < job.submit_time:
            raise rows.err(line, "start", s, "before submit")
        jobs.append(job)
        rs.append(None if math.isnan(s) else s)
        re_.append(None if math.isnan(e) else e)
    if not jobs:
        raise InvalidInput("trace", str(path), "no jobs")
    if nodes is None:
        for cand in (path.with_suffix(".nodes.csv"), path.parent / "nodes.csv"):
            if cand.is_file():
                nodes = load_native_nodes(cand)
                break
    return (
        unconstrained(Trace(path.name, jobs, with_switches(nodes or []), rs, re_))
        if nodes
        else Trace(path.name, jobs, [], rs, re_)
    )


# ---- GENIE Table 3 generator -------------------------------------------------------------

GENIE_MODELS = ("AlexNet", "GoogleNet", "ResNet50", "Inception-v3", "LSTM", "Seq2seq")
GENIE_BATCHES = (16, 32, 64, 128, 256)
GENIE_TRAIN_ITERS = (1000, 20000)
GENIE_INFER_ITERS = (1000, 10000)
GENIE_GPU_REQUEST = ((1, 0.4), (2, 0.3), (4, 0.2), (8, 0.1))


def generate_genie(
    density: float = 10.0,
    hours: float = 24.0,
    seed: int = 0,
    qos_mix: tuple[float, float, float] = (0.05, 0.35, 0.60),
    max_gpus: int = 16,
    iters_scale: float = 1.0,
) -> list[Job]:
    """GENIE §7.1 / Table 3 task queue: Poisson arrivals at ``density`` per hour over ``hours``.

    Uniform model (six Table 3 models), 50% training / 50% inference, QoS Urgent 5% /
    Prior 35% / Normal 60%. Table 3 gives no batch or iteration ranges, so ours are
    documented choices: global batch uniform on {16, 32, 64, 128, 256}; iterations uniform
    integers in [1000, 20000] (training) and [1000, 10000] (inference). The GPU request the
    black-box baselines use (FIFO, Capacity, Min-Min, WFair) is 1/2/4/8 GPUs with
    probability 0.4/0.3/0.2/0.1, capped at the platform size and at the batch.
    ``iters_scale`` multiplies the iteration ranges (a heavier load at the same density).
    """
    if density <= 0 or hours <= 0:
        raise InvalidInput("density", density, "must be > 0 jobs per hour")
    rng = random.Random(seed)
    jobs: list[Job] = []
    t = 0.0
    horizon = hours * 3600.0
    gpu_vals = [g for g, _ in GENIE_GPU_REQUEST]
    gpu_w = [w for _, w in GENIE_GPU_REQUEST]
    while True:
        t += rng.expovariate(density / 3600.0)
        if t >= horizon:
            break
        model = rng.choice(GENIE_MODELS)
        training = rng.random() < 0.5
        u = rng.random()
        qos = QoSClass.URGENT if u < qos_mix[0] else QoSClass.PRIOR if u < qos_mix[0] + qos_mix[1] else QoSClass.NORMAL
        batch = rng.choice(GENIE_BATCHES)
        lo, hi = GENIE_TRAIN_ITERS if training else GENIE_INFER_ITERS
        iters = rng.randint(round(lo * iters_scale), round(hi * iters_scale))
        gpus = min(rng.choices(gpu_vals, gpu_w)[0], max_gpus, batch)
        jobs.append(
            Job(
                f"genie-{len(jobs):05d}",
                round(t, 3),
                gpus=gpus,
                kind=JobKind.TRAINING if training else JobKind.INFERENCE,
                user=f"user{rng.randint(0, 9)}",
                model=model,
                batch=batch,
                iters=iters,
                qos=qos,
            )
        )
    if not jobs:
        raise InvalidInput("density", density, "generated no jobs; raise --density")
    return jobs


# ---- Helios-shaped generator -----------------------------------------------------------------

HELIOS_SUMMARY = Path("/work/shared/data/helios/helios_cluster_summary.csv")
# Helios all-cluster GPU-job figures (helios_cluster_summary.csv, row "total"), used when the file is absent.
HELIOS_MEDIAN_S, HELIOS_MEAN_S = 206.0, 6651.681


def helios_duration_stats(path: Path = HELIOS_SUMMARY) -> tuple[float, float]:
    """(median, mean) GPU-job run time of the Helios clusters, row ``total``."""
    try:
        with path.open(newline="") as fh:
            for r in csv.DictReader(fh):
                if r.get("id") == "total":
                    return float(r["med_run_time_gpu"]), float(r["avg_run_time_gpu"])
    except OSError:
        pass
    return HELIOS_MEDIAN_S, HELIOS_MEAN_S


def generate_helios_synth(
    n_jobs: int = 10000, seed: int = 0, gpus: int = 1000, vcs: int = 10, load: float = 0.6
) -> Trace:
    """A Helios-shaped trace: ``gpus`` GPUs in ``vcs`` VCs of 8-GPU nodes.

    Run times are log-normal with Helios' median and mean (mu = ln median,
    sigma = sqrt(2 ln(mean/median))); ~50% single-GPU jobs, the rest powers of two up to 32
    (mean ~4 GPUs, Helios' 3.7); run times capped at 7 days; Poisson arrivals with a diurnal modulation (rate x (1 + 0.5 sin)),
    scaled so the offered load is ``load`` x capacity. Vectorised: 1M jobs in seconds.
    """
    if n_jobs < 1:
        raise InvalidInput("jobs", n_jobs, "must be >= 1")
    rng = np.random.default_rng(seed)
    median, mean = helios_duration_stats()
    sigma = math.sqrt(2 * math.log(mean / median))
    dur = np.maximum(np.round(rng.lognormal(math.log(median), sigma, n_jobs)), 1.0)
    dur = np.minimum(dur, 7 * 86400.0)
    sizes = np.array([1, 2, 4, 8, 16, 32])
    probs = np.array([0.5, 0.15, 0.13, 0.16, 0.04, 0.02])
    g = rng.choice(sizes, n_jobs, p=probs / probs.sum())
    n_nodes = max(gpus // 8, vcs)
    nodes_per_vc = [n_nodes // vcs + (1 if v < n_nodes % vcs else 0) for v in range(vcs)]
    g = np.minimum(g, min(nodes_per_vc) * 8)
    vc = rng.integers(0, vcs, n_jobs)
    # offered GPU-seconds per second = load * gpus -> mean inter-arrival
    mean_gap = float((g * dur).mean()) / (load * gpus)
    u = rng.exponential(mean_gap, n_jobs)
    # diurnal modulation: stretch gaps at night (thinning-free: time-warp by the rate)
    t = np.cumsum(u)
    t = t - 0.5 * 86400 / (2 * math.pi) * np.cos(2 * math.pi * t / 86400) + 0.5 * 86400 / (2 * math.pi)
    t = np.maximum.accumulate(t)
    users = rng.integers(0, 200, n_jobs)
    jobs = [
        Job(f"h{i}", float(t[i]), gpus=int(g[i]), vc=f"vc{vc[i]}", user=f"u{users[i]}", duration=float(dur[i]))
        for i in range(n_jobs)
    ]
    nodes = vc_nodes_from_gpus({f"vc{i}": nodes_per_vc[i] * 8 for i in range(vcs)}, 8)
    return Trace(
        f"helios-synth-{n_jobs}-s{seed}",
        jobs,
        with_switches(nodes),
        notes=[f"log-normal run times median {median:g} s mean {mean:g} s (sigma {sigma:.3f})"],
    )


# ---- the one entry point -------------------------------------------------------------------


def infer_format(spec: str) -> str | None:
    if spec.startswith("builtin:"):
        return BUILTINS.get(spec.split(":", 1)[1])
    p = Path(spec)
    if p.suffix == ".json":
        return "philly"
    if p.is_dir() and (p / "cluster_log.csv").is_file():
        return "helios"
    if p.name == "cluster_log.csv":
        return "helios"
    if p.is_dir() or p.name.startswith("openb_pod"):
        return "openb"
    return "native" if p.suffix == ".csv" else None


def load_trace(
    spec: str,
    fmt: str | None = None,
    *,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    seed: int = 0,
    density: float = 10.0,
    hours: float = 24.0,
    jobs: int = 10000,
    iters_scale: float = 1.0,
    node_list: str | None = None,
    include_cpu: bool = False,
    nodes_per_switch: int = NODES_PER_SWITCH,
) -> Trace:
    """Load (or generate) a trace. ``--nodes/--gpus-per-node`` replace the trace's cluster
    with one homogeneous partition (all jobs moved to VC ``default``)."""
    fmt = fmt or infer_format(spec)
    if fmt not in FORMATS:
        raise InvalidInput("format", fmt, f"expected one of {', '.join(FORMATS)} (could not infer it from {spec!r})")
    builtin = spec.split(":", 1)[1] if spec.startswith("builtin:") else None
    if builtin is not None and builtin not in BUILTINS:
        raise InvalidInput(
            "trace", spec, f"unknown builtin; expected one of {', '.join('builtin:' + b for b in BUILTINS)}"
        )
    loaders: dict[str, Callable[[], Trace]] = {
        "openb": lambda: load_openb(
            DATA_DIR / "openb_sample_pods.csv" if builtin else Path(spec),
            Path(node_list) if node_list else (DATA_DIR / "openb_sample_nodes.csv" if builtin else None),
        ),
        "helios": lambda: load_helios(Path(spec), include_cpu, gpus_per_node or 8),
        "philly": lambda: load_philly(Path(spec), gpus_per_node or 8),
        "native": lambda: load_native(Path(spec), load_native_nodes(Path(node_list)) if node_list else None),
        "genie": lambda: Trace(
            f"genie-d{density:g}-s{seed}",
            generate_genie(density, hours, seed, max_gpus=(nodes or 4) * (gpus_per_node or 4), iters_scale=iters_scale),
            homogeneous_nodes(nodes or 4, gpus_per_node or 4),
            notes=["GENIE Table 3 generator (simulator/traces.py generate_genie)"],
        ),
        "helios-synth": lambda: generate_helios_synth(jobs, seed),
    }
    trace = loaders[fmt]()
    if fmt != "genie" and nodes is not None:
        trace.nodes = homogeneous_nodes(nodes or 4, gpus_per_node or 8)
        for j in trace.jobs:
            j.vc = "default"
    if not trace.nodes:
        trace.nodes = homogeneous_nodes(nodes or 4, gpus_per_node or 8)
        for j in trace.jobs:
            j.vc = "default"
    with_switches(trace.nodes, nodes_per_switch)
    unconstrained(trace)
    return trace


def unconstrained(trace: Trace) -> Trace:
    """Nodes with no CPU (memory) capacity recorded do not constrain: drop jobs' CPU (memory) demands."""
    if all(n.cpu_milli == 0 for n in trace.nodes):
        for j in trace.jobs:
            j.cpu_milli = 0
    if all(n.memory_mib == 0 for n in trace.nodes):
        for j in trace.jobs:
            j.memory_mib = 0
    return trace


def scale_nodes(trace: Trace, factor: float) -> Trace:
    """Keep every k-th node of each VC (k = round(1/factor), at least one node per VC)."""
    if not 0 < factor <= 1:
        raise InvalidInput("scale", factor, "must be in (0, 1]")
    k = max(1, round(1 / factor))
    by_vc: dict[str, list[Node]] = {}
    for nd in trace.nodes:
        by_vc.setdefault(nd.vc, []).append(nd)
    kept = [nd for group in by_vc.values() for i, nd in enumerate(group) if i % k == 0]
    trace.nodes = kept
    trace.notes.append(f"scaled: kept every {k}-th node ({len(kept)} nodes)")
    return trace
