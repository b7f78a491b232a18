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

import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Job, JobEnd, JobKind, Node, QoSClass
from qosmos.predictors.readers import (
    OPENB_NODE_COLUMNS,
    OPENB_QOS,
    CsvRows,
    Progress,
    TraceFormatError,
    check_file,
    format_hint,
    parse_time,
    paused_gc,
    read_cells,
    read_header,
    read_openb_pods,
    shared_data_dir,
    sniff_format,
    trusted_job,
)

__all__ = ["OPENB_QOS", "TraceFormatError"]  # re-exported: the shared layer's names

DATA_DIR = Path(__file__).parent / "data"
FORMATS = ("openb", "helios", "philly", "native", "genie", "helios-synth")
BUILTINS = {"openb-sample": "openb", "genie": "genie", "helios-synth": "helios-synth"}
NODES_PER_SWITCH = 16  # default physical topology when a trace has none (AnalySIM §3.1)


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
    """Per VC, the most GPUs its recorded jobs held at once (Helios' Philly assumption (1)).

    At equal times releases count before starts (a job ending as another starts shares nothing).
    """
    vc_code: dict[str, int] = {}
    codes = np.array([vc_code.setdefault(j.vc, len(vc_code)) for j in trace.jobs], np.int64)
    start = np.array([np.nan if s is None else s for s in trace.recorded_start], float)
    end = np.array([np.nan if e is None else e for e in trace.recorded_end], float)
    gpus = np.array([j.gpus for j in trace.jobs], np.int64)
    return _peak(vc_code, codes, start, end, gpus)


def _peak(
    vc_code: dict[str, int], codes: np.ndarray, start: np.ndarray, end: np.ndarray, gpus: np.ndarray
) -> dict[str, int]:
    """peak_concurrent_gpus on columns: VC codes, recorded start/end (NaN: none), GPUs."""
    ran = ~(np.isnan(start) | np.isnan(end))
    c, g, s = codes[ran], gpus[ran], start[ran]
    e = np.maximum(end[ran], s)
    peak: dict[str, int] = {}
    names_of = {code: vc for vc, code in vc_code.items()}
    if c.size:
        t = np.concatenate([s, e])
        d = np.concatenate([g, -g])
        cc = np.concatenate([c, c])
        order = np.lexsort((d, t, cc))  # by VC, then time, releases first
        cc, d = cc[order], d[order]
        run = np.cumsum(d)
        bounds = np.flatnonzero(np.diff(cc)) + 1
        base = np.concatenate([[0], run[bounds - 1]])  # cumulative total before each VC's block
        for code, lo, hi, b0 in zip(cc[np.r_[0, bounds]], np.r_[0, bounds], np.r_[bounds, len(cc)], base, strict=True):
            peak[names_of[int(code)]] = int((run[lo:hi] - b0).max())
    most = np.zeros(len(vc_code), np.int64)
    np.maximum.at(most, codes, np.maximum(gpus, 1))  # a VC holds at least its largest job
    for code, m in enumerate(most.tolist()):
        peak[names_of[code]] = max(peak.get(names_of[code], 0), m)
    return peak


# ---- openb (Alibaba cluster-trace-gpu-v2023) -----------------------------------------------

OPENB_NODE_LIST = "openb_node_list_gpu_node.csv"


def load_openb_nodes(path: Path) -> list[Node]:
    """openb node list: sn,cpu_milli,memory_mib,gpu[,model]."""
    rows = CsvRows(path, OPENB_NODE_COLUMNS, what="node_list")
    nodes: list[Node] = []
    seen: set[str] = set()
    for line, r in rows:
        name = rows.text(r, "sn")
        if not name or name in seen:
            raise rows.err(line, "sn", name, "node names must be non-empty and unique")
        seen.add(name)
        nodes.append(
            Node(
                name,
                rows.int_(line, r, "gpu"),
                gpu_model=rows.text(r, "model"),
                cpu_milli=rows.int_(line, r, "cpu_milli"),
                memory_mib=rows.int_(line, r, "memory_mib"),
            )
        )
    if not nodes:
        raise InvalidInput("node_list", str(path), "no nodes")
    return nodes


def openb_node_list(pods: Path) -> Path | None:
    """The node list that goes with an openb pod list: beside it, or ``<pods>_nodes.csv``."""
    for cand in (pods.parent / OPENB_NODE_LIST, pods.with_name(pods.stem + "_nodes.csv")):
        if cand.is_file():
            return cand
    return None


@paused_gc()
def load_openb(pods: Path, nodes_file: Path | None = None, progress: Progress | None = None) -> Trace:
    """Pods: run time = deletion − scheduled; recorded queue = scheduled − creation.

    Pods never scheduled (pod_phase Pending, empty scheduled_time) were deleted while
    waiting: they are withdrawn at their deletion time. ``gpu_spec`` lists the allowed GPU
    models (``|``-separated); ``gpu_milli`` < 1000 is a GPU-sharing pod on one GPU. Rows are
    read and checked by the shared reader (``predictors.readers.read_openb_pods``).
    """
    if pods.is_dir():
        pods, nodes_file = pods / "openb_pod_list_default.csv", nodes_file or pods / OPENB_NODE_LIST
    pod_list = read_openb_pods(pods, progress)  # the pods first: a wrong file is named as such
    nodes_file = nodes_file or openb_node_list(pods)
    if nodes_file is None:
        raise InvalidInput(
            "node_list",
            str(pods.parent / OPENB_NODE_LIST),
            f"the openb pods in {pods.name} need their node list: none beside them; pass --node-list FILE",
        )
    nodes = load_openb_nodes(nodes_file)
    rs = pod_list.scheduled
    re_: list[float | None] = [None if s is None else d for s, d in zip(rs, pod_list.deleted, strict=True)]
    wd: list[float | None] = [d if s is None else None for s, d in zip(rs, pod_list.deleted, strict=True)]
    return Trace(
        pods.name, pod_list.jobs, with_switches(nodes), rs, re_, [], wd, [f"openb pods {pods}, nodes {nodes_file}"]
    )


# ---- Helios (cluster_log.csv + cluster_gpu_number.csv) -------------------------------------

HELIOS_STATES = {"COMPLETED": JobEnd.COMPLETED, "CANCELLED": JobEnd.CANCELLED}


def load_helios_gpu_numbers(path: Path) -> dict[str, int]:
    """Daily VC GPU counts: a date column then one column per VC (max over days is used).

    Also accepts the long shape ``vc,gpu_num`` (one row per VC). Non-numeric cells in the
    first column are taken as dates and skipped.
    """
    rows = read_cells(path, "gpu_numbers")
    if len(rows) < 2:
        raise TraceFormatError(path.name, 1, "header", rows[0] if rows else [], "need a header and at least one row")
    header = [h.strip() for h in rows[0]]
    out: dict[str, int] = {}
    lower = [h.lower() for h in header]

    def count(i: int, fld: str, cell: str) -> int:
        v = cell.strip()
        if not _is_number(v) or float(v) < 0 or float(v) != int(float(v)):
            raise TraceFormatError(path.name, i, fld, v, "expected a whole GPU count >= 0")
        return int(float(v))

    if len(header) == 2 and lower[0] in ("vc", "name", "id") and lower[1] in ("gpu_num", "gpus", "gpu"):
        for i, r in enumerate(rows[1:], start=2):
            if len(r) != 2:
                raise TraceFormatError(path.name, i, "row", f"{len(r)} fields", "expected vc,gpu_num")
            out[r[0].strip()] = count(i, header[1], r[1])
        return out
    first_is_date = lower[0] in ("date", "time", "day", "") or not _is_number(rows[1][0])
    vcs = header[1:] if first_is_date else header
    for i, r in enumerate(rows[1:], start=2):
        cells = r[1:] if first_is_date else r
        if len(cells) != len(vcs):
            raise TraceFormatError(path.name, i, "row", f"{len(cells)} VC columns", f"expected {len(vcs)} VC columns")
        for vc, cell in zip(vcs, cells, strict=True):
            if cell.strip() == "":
                continue
            out[vc] = max(out.get(vc, 0), count(i, vc, cell))
    return out


def _is_number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


HELIOS_REQUIRED = ("job_id", "vc", "gpu_num", "submit_time", "state")


@paused_gc()
def load_helios(
    path: Path, include_cpu: bool = False, gpus_per_node: int = 8, progress: Progress | None = None
) -> Trace:
    """Helios cluster_log.csv (§2.2 schema). GPU jobs only by default (Helios §4.2.3).

    Run time = end − start as recorded (cancelled/failed jobs run what they ran); jobs with
    no start were cancelled while queued and are withdrawn at their end time.
    VCs get nodes of 8 GPUs from cluster_gpu_number.csv next to the log, or, without it,
    from each VC's peak concurrent recorded demand. Read in blocks of rows, each checked
    column by column (dates parsed by numpy in one call per block).
    """
    log = path / "cluster_log.csv" if path.is_dir() else path
    rows = CsvRows(log, HELIOS_REQUIRED, progress=progress, hint=format_hint)
    ids: list[str] = []
    users: list[str] = []
    vcs: list[str] = []
    states: list[JobEnd] = []
    intern: dict[str, str] = {"": "default"}  # an empty VC is the default partition
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("gpus", "cpu", "submit", "start", "end")}
    for ch in rows.chunks():
        gpus = ch.ints("gpu_num")
        if not include_cpu:
            keep = gpus > 0
            if not keep.all():
                ch, gpus = ch.take(keep), gpus[keep]
            if not len(ch):
                continue
        submit = ch.times("submit_time")
        start = ch.times("start_time", optional=True)
        end = ch.times("end_time", optional=True)
        with np.errstate(invalid="ignore"):
            early = np.flatnonzero(start < submit)
            if early.size:
                raise ch.err(int(early[0]), "start_time", "before submit_time")
            back = np.flatnonzero(end < start)
            if back.size:
                raise ch.err(int(back[0]), "end_time", "before start_time")
        open_end = np.flatnonzero(~np.isnan(start) & np.isnan(end))
        if open_end.size:  # started, no end recorded: end = start + duration
            dur = ch.floats("duration", optional=True)
            missing = open_end[np.isnan(dur[open_end])]
            if missing.size:
                raise ch.err(int(missing[0]), "duration", "missing value (the row has a start_time but no end_time)")
            end[open_end] = start[open_end] + dur[open_end]
        state = ch.text("state")
        jid = ch.text("job_id")
        for fld, col in (("state", state), ("job_id", jid)):
            if "" in col:
                raise ch.err(col.index(""), fld, "missing")
        cpu = ch.floats("cpu_num", optional=True)
        ids += jid
        users += [intern.setdefault(u, u) for u in ch.text("user")]  # one string per user, not per row
        vcs += [intern.setdefault(v, v) for v in ch.text("vc")]
        states += [HELIOS_STATES.get(x.upper(), JobEnd.FAILED) for x in state]
        for k, a in (("gpus", gpus), ("cpu", cpu), ("submit", submit), ("start", start), ("end", end)):
            cols[k].append(a)
    if not ids:
        raise InvalidInput("trace", str(log), "no GPU jobs" if not include_cpu else "no jobs")
    gpus, cpu, submit, start, end = (np.concatenate(cols[k]) for k in ("gpus", "cpu", "submit", "start", "end"))
    t0 = float(submit.min())  # rebase to the first submission
    submit, start, end = submit - t0, start - t0, end - t0
    run = np.where(np.isnan(start) | np.isnan(end), 0.0, end - start)
    cpu_milli = np.where(np.isnan(cpu), 0.0, cpu * 1000).astype(np.int64)
    jobs = [
        trusted_job(
            i,
            t,
            gpus=g,
            kind=JobKind.TRAINING if g else JobKind.CPU,
            user=u,
            vc=v,
            cpu_milli=c,
            duration=d,
            end_state=st,
        )
        for i, t, g, u, v, c, d, st in zip(
            ids, submit.tolist(), gpus.tolist(), users, vcs, cpu_milli.tolist(), run.tolist(), states, strict=True
        )
    ]
    rs = _optional(start)
    re_ = _optional(end)
    wd: list[float | None] = [e if s is None else None for s, e in zip(rs, re_, strict=True)]
    trace = Trace(log.name, jobs, [], rs, re_, [()] * len(jobs), wd)
    gpu_file = log.parent / "cluster_gpu_number.csv"
    peak: dict[str, int] | None = None
    if gpu_file.is_file():
        counts = load_helios_gpu_numbers(gpu_file)
        trace.notes.append(f"VC sizes from {gpu_file.name}")
    vc_code: dict[str, int] = {}
    codes = np.array([vc_code.setdefault(v, len(vc_code)) for v in vcs], np.int64)
    if not gpu_file.is_file():
        counts = peak = _peak(vc_code, codes, start, end, gpus)
        trace.notes.append("VC sizes from each VC's peak concurrent recorded demand (no cluster_gpu_number.csv)")
    missing_vcs = set(vc_code) - set(counts)
    if missing_vcs:
        peak = peak or _peak(vc_code, codes, start, end, gpus)
        for vc in missing_vcs:
            counts[vc] = peak.get(vc, 8)
    trace.nodes = with_switches(vc_nodes_from_gpus(counts, gpus_per_node))
    return unconstrained(trace)


def _optional(a: np.ndarray) -> list[float | None]:
    """NaN -> None, as the Trace's recorded_* lists hold them."""
    return [None if x != x else x for x in a.tolist()]


# ---- Philly (cluster_job_log JSON) ---------------------------------------------------------

PHILLY_STATES = {"pass": JobEnd.COMPLETED, "killed": JobEnd.CANCELLED, "failed": JobEnd.FAILED}


@paused_gc()
def load_philly(path: Path, gpus_per_node: int = 8, progress: Progress | None = None) -> Trace:
    """Philly cluster_job_log: run time from the first attempt's start to the last attempt's end
    (retries included, as Philly recorded them, Helios §2.3.2); GPUs from the first attempt.
    VCs are sized by their peak concurrent demand (Helios §4.2.3 assumption (1)).
    """
    name = path.name
    check_file(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InvalidInput("trace", str(path), f"not UTF-8 text (line {line})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(name, exc.lineno, "json", exc.msg, "not valid JSON") from None
    if progress is not None:
        progress(len(raw), len(raw))
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
        t = parse_time(str(v).strip())
        if t is None:
            raise TraceFormatError(name, i, fld, v, "expected 'YYYY-MM-DD HH:MM:SS'")
        return t

    for i, rec in enumerate(data, start=1):  # "line" = job record number
        if not isinstance(rec, dict):
            raise TraceFormatError(name, i, "job", type(rec).__name__, "expected an object")
        jid = str(rec.get("jobid") or "")
        if not jid:
            raise TraceFormatError(name, i, "jobid", rec.get("jobid"), "missing")
        submit = ts(rec.get("submitted_time"), i, "submitted_time", optional=False)
        attempts = rec.get("attempts") or []
        if not isinstance(attempts, list):
            raise TraceFormatError(name, i, "attempts", type(attempts).__name__, "expected a list")
        starts, ends, gpus, hosts = [], [], 0, []
        for k, a in enumerate(attempts):
            if not isinstance(a, dict):
                raise TraceFormatError(name, i, f"attempts[{k}]", type(a).__name__, "expected an object")
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
                    g = d.get("gpus") or [] if isinstance(d, dict) else None
                    if not isinstance(g, list):
                        raise TraceFormatError(name, i, "detail.gpus", type(g).__name__, "expected a list")
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
    "requested_duration",
    "name",
    "checkpoint_interval",
]


def load_native_nodes(path: Path) -> list[Node]:
    """nodes CSV: name,gpus[,vc,switch,gpu_model,cpu_milli,memory_mib]."""
    rows = CsvRows(path, ("name", "gpus"), what="node_list")
    out: list[Node] = []
    seen: set[str] = set()
    for line, r in rows:
        name = rows.text(r, "name")
        if name in seen:
            raise rows.err(line, "name", name, "duplicate node name")
        seen.add(name)
        try:
            out.append(
                Node(
                    name,
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
    if not out:
        raise InvalidInput("node_list", str(path), "no nodes")
    return out


@paused_gc()
def load_native(path: Path, nodes: list[Node] | None = None, progress: Progress | None = None) -> Trace:
    """The native job CSV (documented in simulator/README.md).

    Required: id, submit (s), gpus; plus duration (s) unless the row is a GENIE task
    (model, batch, iters). Optional: every other Job field, and recorded start/end.
    Nodes come from ``<trace>.nodes.csv`` or ``nodes.csv`` beside it, else from the caller.
    """
    rows = CsvRows(path, NATIVE_REQUIRED, progress=progress, hint=format_hint)
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
        rd = rows.num(line, r, "requested_duration", optional=True) if opt["requested_duration"] else math.nan
        ci = rows.num(line, r, "checkpoint_interval", optional=True) if opt["checkpoint_interval"] else math.nan
        try:
            job = Job(
                opt["id"],
                rows.num(line, r, "submit"),
                gpus=rows.int_(line, r, "gpus"),
                kind=opt["kind"] or JobKind.TRAINING,  # type: ignore[arg-type]  # by name: Job.__post_init__ parses it
                user=opt["user"],
                vc=opt["vc"] or "default",
                model=opt["model"],
                batch=rows.int_(line, r, "batch", default=0),
                iters=rows.int_(line, r, "iters", default=0),
                qos=opt["qos"] or QoSClass.NORMAL,  # type: ignore[arg-type]  # likewise
                nodes=rows.int_(line, r, "nodes", default=0),
                cpu_milli=rows.int_(line, r, "cpu_milli", default=0),
                memory_mib=rows.int_(line, r, "memory_mib", default=0),
                gpu_milli=rows.int_(line, r, "gpu_milli", default=1000),
                gpu_models=tuple(s for s in opt["gpu_models"].split("|") if s),
                end_state=JobEnd(opt["end_state"].lower()) if opt["end_state"] else JobEnd.COMPLETED,
                duration=None if math.isnan(dur) else dur,
                predicted_duration=None if math.isnan(pd_) else pd_,
                requested_duration=None if math.isnan(rd) else rd,
                name=opt["name"] or None,
                checkpoint_interval=None if math.isnan(ci) else ci,
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
            raise rows.err(line, "start", opt["start"], "before submit")
        if not math.isnan(e) and not math.isnan(s) and e < s:
            raise rows.err(line, "end", opt["end"], "before start")
        jobs.append(job)
        rs.append(None if math.isnan(s) else s)
        re_.append(None if math.isnan(e) else e)
    if not jobs:
        raise InvalidInput("trace", str(path), "no jobs")
    notes = []
    if nodes is None:
        for cand in (path.with_suffix(".nodes.csv"), path.parent / "nodes.csv"):
            if cand.is_file():
                nodes = load_native_nodes(cand)
                notes.append(f"nodes from {cand}")
                break
    if not nodes:  # the caller (load_trace) decides: --nodes, or a stated default
        return Trace(path.name, jobs, [], rs, re_)
    return unconstrained(Trace(path.name, jobs, with_switches(nodes), rs, re_, notes=notes))


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
    if not (math.isfinite(density) and density > 0):
        raise InvalidInput("density", density, "must be > 0 jobs per hour")
    if not (math.isfinite(hours) and hours > 0):
        raise InvalidInput("hours", hours, "must be > 0 (the arrival window in hours)")
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

HELIOS_SUMMARY = Path("helios") / "helios_cluster_summary.csv"  # under the shared data folder
# Helios all-cluster GPU-job figures (helios_cluster_summary.csv, row "total"), used when the file is absent.
HELIOS_MEDIAN_S, HELIOS_MEAN_S = 206.0, 6651.681


def helios_duration_stats(path: Path | None = None) -> tuple[float, float]:
    """(median, mean) GPU-job run time of the Helios clusters, row ``total``.

    From ``path``, else from the shared data folder ($QOSMOS_SHARED or ../shared, see
    ``predictors.readers.shared_data_dir``), else the figures above (the same file's values).
    """
    if path is None:
        base = shared_data_dir()
        if base is None:
            return HELIOS_MEDIAN_S, HELIOS_MEAN_S
        path = base / HELIOS_SUMMARY
    if not path.is_file():
        return HELIOS_MEDIAN_S, HELIOS_MEAN_S
    rows = CsvRows(path, ("id", "med_run_time_gpu", "avg_run_time_gpu"), what="helios_summary")
    for line, r in rows:
        if rows.text(r, "id") == "total":
            rows.close()
            median = rows.num(line, r, "med_run_time_gpu", minimum=1e-9)
            mean = rows.num(line, r, "avg_run_time_gpu", minimum=median)
            return median, mean
    return HELIOS_MEDIAN_S, HELIOS_MEAN_S


@paused_gc()
def generate_helios_synth(
    n_jobs: int = 10000,
    seed: int = 0,
    gpus: int = 1000,
    vcs: int = 10,
    load: float = 0.6,
    progress: Progress | None = None,
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
    vc_names = [f"vc{v}" for v in range(vcs)]  # shared strings, not one per job
    user_names = [f"u{u}" for u in range(200)]
    # every value is valid by construction: trusted_job skips Job's re-validation (tested equal)
    jobs = [
        trusted_job(f"h{i}", ti, gpus=gi, vc=vc_names[vi], user=user_names[ui], duration=di)
        for i, (ti, gi, vi, ui, di) in enumerate(
            zip(t.tolist(), g.tolist(), vc.tolist(), users.tolist(), dur.tolist(), strict=True)
        )
    ]
    if progress is not None:
        progress(n_jobs, n_jobs)
    nodes = vc_nodes_from_gpus({f"vc{i}": nodes_per_vc[i] * 8 for i in range(vcs)}, 8)
    return Trace(
        f"helios-synth-{n_jobs}-s{seed}",
        jobs,
        with_switches(nodes),
        notes=[f"log-normal run times median {median:g} s mean {mean:g} s (sigma {sigma:.3f})"],
    )


# ---- the one entry point -------------------------------------------------------------------


GENERATED = ("genie", "helios-synth")
DEFAULT_NODES, DEFAULT_GPUS_PER_NODE = 4, 8  # a stated default cluster (notes say when it is used)
GENIE_NODES, GENIE_GPUS_PER_NODE = 4, 4  # GENIE §7.1's platform default


def infer_format(spec: str) -> str | None:
    """The format of a trace: builtins by name, folders by their files, CSV files by their columns.

    A file's header is read (and checked as text: a binary file is an InvalidInput naming it).
    None when nothing fits.
    """
    if spec.startswith("builtin:"):
        return BUILTINS.get(spec.split(":", 1)[1])
    p = Path(spec)
    if p.is_dir():
        if (p / "cluster_log.csv").is_file():
            return "helios"
        if (p / "openb_pod_list_default.csv").is_file():
            return "openb"
        return None
    if p.suffix == ".json" or p.name == "cluster_job_log":
        return "philly"
    if not p.is_file():
        return None
    fmt = sniff_format(read_header(p))
    if fmt in ("openb", "helios", "native"):
        return fmt
    return None


def _builtin_format(spec: str, fmt: str | None) -> tuple[str, str]:
    """(builtin name, its format) for ``builtin:NAME``, refusing an unknown name or another format."""
    name = spec.split(":", 1)[1]
    choices = ", ".join("builtin:" + b for b in BUILTINS)
    if name not in BUILTINS:
        raise InvalidInput("trace", spec, f"unknown builtin; expected one of {choices}")
    own = BUILTINS[name]
    if fmt is not None and fmt != own:
        raise InvalidInput("format", fmt, f"{spec} is in {own} format; drop --format or use --format {own}")
    return name, own


def check_trace(spec: str, fmt: str | None = None) -> str:
    """The format ``spec`` will load as, or InvalidInput naming what is wrong (an unknown builtin,
    a missing file, a format that cannot be told): checked before any work starts (sweep's grid)."""
    if fmt is not None and fmt not in FORMATS:
        raise InvalidInput("format", fmt, f"expected one of {', '.join(FORMATS)}")
    if spec.startswith("builtin:"):
        return _builtin_format(spec, fmt)[1]
    if not Path(spec).exists():
        raise InvalidInput("trace", spec, "file not found")
    if fmt in GENERATED:
        raise InvalidInput("format", fmt, f"{fmt} traces are generated: use --trace builtin:{fmt}, not a file")
    found = fmt or infer_format(spec)
    if found is None:
        raise InvalidInput(
            "format",
            None,
            f"cannot tell the format of {spec} from its name or columns; pass --format "
            f"({', '.join(f for f in FORMATS if f not in GENERATED)})",
        )
    return found


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
    progress: Progress | None = None,
) -> Trace:
    """Load (or generate) a trace, every row validated. ``--nodes/--gpus-per-node`` replace the
    trace's cluster with one homogeneous partition (all jobs moved to VC ``default``).

    ``progress(done, total)`` (bytes of the file, or jobs generated) is called at most a few
    hundred times while loading, for a progress bar. A trace without a cluster (a native CSV
    with no node list) gets a stated default, recorded in ``trace.notes``.
    """
    fmt = check_trace(spec, fmt)
    for opt, v in (("nodes", nodes), ("gpus_per_node", gpus_per_node)):
        if v is not None and v < 1:
            raise InvalidInput(opt, v, "must be >= 1")
    builtin = _builtin_format(spec, fmt)[0] if spec.startswith("builtin:") else None
    node_file = Path(node_list) if node_list else None
    if node_file is not None and fmt not in ("openb", "native"):
        raise InvalidInput("node_list", node_list, f"only openb and native traces take a node list, not {fmt}")
    if gpus_per_node is not None and nodes is None and fmt in ("openb", "helios-synth"):
        raise InvalidInput(
            "gpus_per_node", gpus_per_node, f"the {fmt} trace fixes its nodes; add --nodes N to replace its cluster"
        )
    loaders: dict[str, Callable[[], Trace]] = {
        "openb": lambda: load_openb(
            DATA_DIR / "openb_sample_pods.csv" if builtin else Path(spec),
            node_file or (DATA_DIR / "openb_sample_nodes.csv" if builtin else None),
            progress,
        ),
        "helios": lambda: load_helios(Path(spec), include_cpu, gpus_per_node or 8, progress),
        "philly": lambda: load_philly(Path(spec), gpus_per_node or 8, progress),
        "native": lambda: load_native(Path(spec), load_native_nodes(node_file) if node_file else None, progress),
        "genie": lambda: _genie_trace(density, hours, seed, nodes, gpus_per_node, iters_scale, progress),
        "helios-synth": lambda: generate_helios_synth(jobs, seed, progress=progress),
    }
    with paused_gc():  # bulk construction of acyclic objects: see paused_gc
        trace = loaders[fmt]()
    if fmt != "genie" and (nodes is not None or not trace.nodes):
        n = nodes if nodes is not None else DEFAULT_NODES
        g = gpus_per_node if gpus_per_node is not None else DEFAULT_GPUS_PER_NODE
        if nodes is not None:
            trace.notes.append(f"cluster replaced by --nodes: {n} nodes x {g} GPUs, one partition")
        else:
            trace.notes.append(
                f"no node list for {trace.name}: default cluster of {n} nodes x {g} GPUs "
                "(pass --node-list FILE or --nodes N --gpus-per-node G)"
            )
        trace.nodes = homogeneous_nodes(n, g)
        for j in trace.jobs:
            j.vc = "default"
    with_switches(trace.nodes, nodes_per_switch)
    unconstrained(trace)
    return trace


def _genie_trace(
    density: float,
    hours: float,
    seed: int,
    nodes: int | None,
    gpus_per_node: int | None,
    iters_scale: float,
    progress: Progress | None,
) -> Trace:
    n = nodes if nodes is not None else GENIE_NODES
    g = gpus_per_node if gpus_per_node is not None else GENIE_GPUS_PER_NODE
    jobs = generate_genie(density, hours, seed, max_gpus=n * g, iters_scale=iters_scale)
    if progress is not None:
        progress(len(jobs), len(jobs))
    return Trace(
        f"genie-d{density:g}-s{seed}",
        jobs,
        homogeneous_nodes(n, g),
        notes=[f"GENIE Table 3 generator (simulator/traces.py generate_genie), {n} nodes x {g} GPUs"],
    )


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
