"""The one validation layer under every trace and series reader (simulator and predictors).

Every reader opens its file through :func:`check_file` / :class:`CsvRows`, so all of them
agree on what bad input looks like and how it is reported:

- a missing file, a directory, a binary or non-UTF-8 file -> :class:`InvalidInput` naming it;
- a UTF-8 byte-order mark is accepted; header cells are stripped;
- a row with too few or too many fields, a missing, non-numeric, negative or non-finite
  value, an unreadable date -> :class:`TraceFormatError` ``FILE:LINE: field F: reason (got V)``
  where V is the text as it stands in the file (dates as written, never as minute counts,
  never a whole row);
- dates ``YYYY-MM-DD HH:MM:SS`` (``T`` separator, fractions and epoch seconds accepted) are
  parsed with the C ``datetime.fromisoformat`` behind a per-distinct-string cache, as UTC
  (no daylight-saving jumps).

It also holds the readers both components use: openb pods (Alibaba cluster-trace-gpu-v2023,
one QoS map), the per-minute node series (Helios CES) and the run-time list (seed 004).
The simulator may import this module; it imports nothing from the simulator.
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import gc
import io
import math
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import Any, cast

import numpy as np
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Job, JobEnd, JobKind, QoSClass

Progress = Callable[[int, int], None]
"""``progress(done, total)``: bytes read of the file's size (or rows of a known total)."""

PROGRESS_CALLS = 200  # at most about this many progress calls per file
_SNIFF_BYTES = 64 * 1024
_EMPTY = ("", "none", "nan", "null")
_NO_VALUE = object()


class TraceFormatError(InvalidInput):
    """A malformed trace or series: ``file:line: field F: reason (got value)``."""

    def __init__(self, file: str, line: int, field_name: str, value: object, reason: str) -> None:
        super().__init__(field_name, value, reason)
        self.file = file
        self.line = line
        got = "" if value is _NO_VALUE else f" (got {show(value)})"
        self.args = (f"{file}:{line}: field {field_name}: {reason}{got}",)


def show(value: object) -> str:
    """A value as the user wrote it: text quoted, a list of columns comma-separated."""
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


# ---- files -----------------------------------------------------------------------------------


def check_file(path: Path, what: str = "trace") -> Path:
    """``path`` if it is a readable UTF-8 text file, else InvalidInput naming it.

    The first 64 KiB are sniffed: a NUL byte means binary, bytes that do not decode mean
    another encoding (later bytes are checked while reading, see :class:`CsvRows`).
    """
    if not path.exists():
        raise InvalidInput(what, str(path), "file not found")
    if path.is_dir():
        raise InvalidInput(what, str(path), "is a directory, expected a file")
    try:
        with path.open("rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except OSError as exc:
        raise InvalidInput(what, str(path), f"cannot be read ({exc.strerror or exc})") from None
    if b"\x00" in head:
        raise InvalidInput(what, str(path), "binary file, expected UTF-8 text")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=len(head) < _SNIFF_BYTES)
    except UnicodeDecodeError as exc:
        line = head[: exc.start].count(b"\n") + 1
        raise InvalidInput(what, str(path), f"not UTF-8 text (line {line}, byte {exc.start})") from None
    return path


def _undecodable_line(path: Path) -> int:
    """1-based number of the first line that is not UTF-8 (for the error message)."""
    with path.open("rb") as fh:
        for i, raw in enumerate(fh, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return i
    return 1


class CsvRows:
    """Rows of a CSV file as ``(line, {column: text})``, streamed, with field converters.

    ``required`` columns must be in the header. Blank lines are skipped; a row with another
    number of fields than the header is an error (a truncated row) naming the first missing
    field. ``progress(bytes_read, file_size)`` is called at most ~``PROGRESS_CALLS`` times.
    """

    def __init__(
        self,
        path: Path,
        required: tuple[str, ...] = (),
        *,
        what: str = "trace",
        progress: Progress | None = None,
        hint: Callable[[list[str]], str] | None = None,
    ) -> None:
        self.path = check_file(path, what)
        self.name = path.name
        self.what = what
        self._progress = progress
        self._size = max(path.stat().st_size, 1)
        # text mode with the default buffering wraps a BufferedReader (its tell() is the progress)
        self._fh = cast("io.TextIOWrapper[io.BufferedReader]", path.open(newline="", encoding="utf-8-sig"))
        self._reader = csv.reader(self._fh)
        try:
            first = self._next_cells()
        except BaseException:
            self._fh.close()
            raise
        if first is None:
            self._fh.close()
            raise InvalidInput(what, str(path), "empty file, expected a CSV header")
        self.header = [h.strip() for h in first]
        for i, h in enumerate(self.header):
            if not h:
                self._fh.close()
                raise TraceFormatError(self.name, 1, f"column {i + 1}", self.header, "empty column name")
        missing = [c for c in required if c not in self.header]
        if missing:
            self._fh.close()
            extra = hint(self.header) if hint else ""
            raise TraceFormatError(
                self.name, 1, missing[0], self.header, "missing column" + (f"; {extra}" if extra else "")
            )
        self.line = 1

    def _next_cells(self) -> list[str] | None:
        while True:
            try:
                cells = next(self._reader)
            except StopIteration:
                return None
            except UnicodeDecodeError:
                raise InvalidInput(
                    self.what, str(self.path), f"not UTF-8 text (line {_undecodable_line(self.path)})"
                ) from None
            except csv.Error as exc:
                raise TraceFormatError(self.name, self._reader.line_num, "row", _NO_VALUE, f"not CSV ({exc})") from None
            if cells and any(c.strip() for c in cells):
                return cells

    def __iter__(self) -> Iterator[tuple[int, dict[str, str]]]:
        header, n = self.header, len(self.header)
        every = 4096
        step = self._size / PROGRESS_CALLS
        next_report = step
        count = 0
        try:
            while (cells := self._next_cells()) is not None:
                line = self._reader.line_num
                self.line = line
                if len(cells) != n:
                    if len(cells) < n:
                        raise self.err(
                            line, header[len(cells)], _NO_VALUE, f"truncated row: {len(cells)} of {n} fields"
                        )
                    raise self.err(line, "row", _NO_VALUE, f"{len(cells)} fields, the header has {n}")
                yield line, dict(zip(header, cells, strict=True))
                count += 1
                if self._progress is not None and count % every == 0:
                    done = self._fh.buffer.tell()
                    if done >= next_report:
                        self._progress(min(done, self._size), self._size)
                        next_report = done + step
            if self._progress is not None:
                self._progress(self._size, self._size)
        finally:
            self._fh.close()

    def close(self) -> None:
        self._fh.close()

    def chunks(self, size: int = 65536) -> Iterator[Chunk]:
        """The rows in blocks of ``size`` as columns (:class:`Chunk`), for vectorised checks."""
        step = self._size / PROGRESS_CALLS
        next_report = step
        fh = self._fh
        try:
            while True:
                got = self._block(size)
                if got is None:
                    break
                cells, lines, raw_count = got
                if cells:
                    self.line = lines[-1]
                    yield Chunk(self, cells, lines)
                if self._progress is not None:
                    done = fh.buffer.tell()
                    if done >= next_report:
                        self._progress(min(done, self._size), self._size)
                        next_report = done + step
                if raw_count < size:
                    break
            if self._progress is not None:
                self._progress(self._size, self._size)
        finally:
            fh.close()

    def _block(self, size: int) -> tuple[list[list[str]], Sequence[int], int] | None:
        """Up to ``size`` records read in one C call, blank lines dropped, lengths checked.

        Line numbers are consecutive unless a quoted cell spans lines (then counted per row).
        """
        reader, header, n = self._reader, self.header, len(self.header)
        before = reader.line_num
        try:
            block = list(islice(reader, size))
        except UnicodeDecodeError:
            raise InvalidInput(
                self.what, str(self.path), f"not UTF-8 text (line {_undecodable_line(self.path)})"
            ) from None
        except csv.Error as exc:
            raise self.err(reader.line_num, "row", _NO_VALUE, f"not CSV ({exc})") from None
        if not block:
            return None
        raw_count = len(block)
        lines: Sequence[int]
        if reader.line_num - before == raw_count:
            lines = range(before + 1, reader.line_num + 1)
        else:  # a quoted cell holds line breaks: count them
            counted, line = [], before
            for row in block:
                line += 1 + sum(c.count("\n") for c in row)
                counted.append(line)
            lines = counted
        if min(map(len, block)) != n or max(map(len, block)) != n:  # blank lines or bad rows
            kept, kept_lines = [], []
            for row, line in zip(block, lines, strict=True):
                if len(row) != n:
                    if not row or not any(c.strip() for c in row):
                        continue  # blank line
                    if len(row) < n:
                        raise self.err(line, header[len(row)], _NO_VALUE, f"truncated row: {len(row)} of {n} fields")
                    raise self.err(line, "row", _NO_VALUE, f"{len(row)} fields, the header has {n}")
                kept.append(row)
                kept_lines.append(line)
            block, lines = kept, kept_lines
        return block, lines, raw_count

    # ---- field converters: every message names file, line, field and the text as written ----

    def err(self, line: int, fld: str, value: object, reason: str) -> TraceFormatError:
        return TraceFormatError(self.name, line, fld, value, reason)

    def text(self, row: dict[str, str], fld: str) -> str:
        return (row.get(fld) or "").strip()

    def num(self, line: int, row: dict[str, str], fld: str, *, optional: bool = False, minimum: float = 0.0) -> float:
        """A finite number >= ``minimum``; NaN when ``optional`` and empty."""
        raw = (row.get(fld) or "").strip()
        try:
            v = float(raw)
        except ValueError:
            if raw.lower() in _EMPTY:
                if optional:
                    return math.nan
                raise self.err(line, fld, raw, "missing value") from None
            raise self.err(line, fld, raw, "not a number") from None
        if not math.isfinite(v):
            if optional and math.isnan(v):
                return math.nan
            raise self.err(line, fld, raw, f"must be a finite number >= {minimum:g}")
        if v < minimum:
            raise self.err(line, fld, raw, f"must be >= {minimum:g}")
        return v

    def int_(self, line: int, row: dict[str, str], fld: str, *, default: int | None = None) -> int:
        """A whole number >= 0 (``1``, ``1.0``); ``default`` when empty and given."""
        raw = (row.get(fld) or "").strip()
        if raw == "" and default is not None:
            return default
        if raw.isascii() and raw.isdigit():
            return int(raw)
        v = self.num(line, row, fld)
        if v != int(v):
            raise self.err(line, fld, raw, "must be an integer")
        return int(v)

    def time(self, line: int, row: dict[str, str], fld: str, *, optional: bool = False) -> float | None:
        """Epoch seconds (UTC) of 'YYYY-MM-DD HH:MM:SS' or of a number; None when optional and empty."""
        raw = (row.get(fld) or "").strip()
        t = parse_time(raw)
        if t is None:
            if raw.lower() in _EMPTY:
                if optional:
                    return None
                raise self.err(line, fld, raw, "missing time")
            raise self.err(line, fld, raw, "expected 'YYYY-MM-DD HH:MM:SS'")
        return t


def read_cells(path: Path, what: str = "trace") -> list[list[str]]:
    """A small CSV file of any shape as rows of cells (checked as UTF-8 text; BOM accepted)."""
    check_file(path, what)
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            return [r for r in csv.reader(fh) if r and any(c.strip() for c in r)]
    except UnicodeDecodeError:
        raise InvalidInput(what, str(path), f"not UTF-8 text (line {_undecodable_line(path)})") from None
    except csv.Error as exc:
        raise InvalidInput(what, str(path), f"not CSV ({exc})") from None


class Chunk:
    """A block of CSV rows as columns of raw text, with vectorised field converters.

    Each converter checks every value of its column and raises the error of the first bad
    row (file, line, field and the text as written), exactly as the row converters do.
    """

    def __init__(self, rows: CsvRows, cells: list[list[str]], lines: Sequence[int]) -> None:
        self.rows = rows
        self.lines = lines
        self.cols: dict[str, list[str]] = dict(
            zip(rows.header, (list(c) for c in zip(*cells, strict=True)), strict=True)
        )

    def __len__(self) -> int:
        return len(self.lines)

    def take(self, keep: np.ndarray) -> Chunk:
        """The rows where the boolean mask ``keep`` is true (the same file lines)."""
        idx = np.flatnonzero(keep).tolist()
        out = Chunk.__new__(Chunk)
        out.rows = self.rows
        out.lines = [self.lines[i] for i in idx]
        out.cols = {k: [col[i] for i in idx] for k, col in self.cols.items()}
        return out

    def err(self, i: int, fld: str, reason: str, value: object = None) -> TraceFormatError:
        raw = self.cols[fld][i].strip() if value is None and fld in self.cols else value
        return self.rows.err(self.lines[i], fld, raw, reason)

    def has(self, fld: str) -> bool:
        return fld in self.cols

    def text(self, fld: str) -> list[str]:
        """The column's cells, stripped ('' for every row when the column is absent)."""
        col = self.cols.get(fld)
        return [c.strip() for c in col] if col is not None else [""] * len(self.lines)

    def floats(self, fld: str, *, optional: bool = False, minimum: float = 0.0) -> np.ndarray:
        """Finite numbers >= ``minimum``; NaN where ``optional`` and empty (or column absent)."""
        col = self.cols.get(fld)
        if col is None:
            if optional:
                return np.full(len(self.lines), np.nan)
            raise self.rows.err(1, fld, self.rows.header, "missing column")
        try:
            a = np.array(col, dtype=np.float64)
        except ValueError:  # empty cells or text: convert one by one for the exact message
            a = np.array([self._one(i, fld, optional) for i in range(len(col))], dtype=np.float64)
        bad = ~np.isfinite(a)
        if bad.any():
            for i in np.flatnonzero(bad):
                if not (optional and math.isnan(a[i]) and col[i].strip().lower() in _EMPTY):
                    if col[i].strip().lower() in _EMPTY:
                        raise self.err(int(i), fld, "missing value")
                    raise self.err(int(i), fld, f"must be a finite number >= {minimum:g}")
        low = a < minimum
        if low.any():
            raise self.err(int(np.flatnonzero(low)[0]), fld, f"must be >= {minimum:g}")
        return a

    def _one(self, i: int, fld: str, optional: bool) -> float:
        raw = self.cols[fld][i].strip()
        try:
            return float(raw)
        except ValueError:
            if raw.lower() in _EMPTY:
                if optional:
                    return math.nan
                raise self.err(i, fld, "missing value") from None
            raise self.err(i, fld, "not a number") from None

    def ints(self, fld: str, *, default: int | None = None) -> np.ndarray:
        """Whole numbers >= 0 (int64); ``default`` where empty (or column absent) when given."""
        if default is not None:
            if fld not in self.cols:
                return np.full(len(self.lines), default, np.int64)
            a = self.floats(fld, optional=True)
            a[np.isnan(a)] = default
        else:
            a = self.floats(fld)
        frac = a != np.floor(a)
        if frac.any():
            raise self.err(int(np.flatnonzero(frac)[0]), fld, "must be an integer")
        return a.astype(np.int64)

    def times(self, fld: str, *, optional: bool = False) -> np.ndarray:
        """Epoch seconds (UTC) of 'YYYY-MM-DD HH:MM:SS' (or epoch numbers); NaN where optional and empty."""
        col = self.cols.get(fld)
        if col is None:
            if optional:
                return np.full(len(self.lines), np.nan)
            raise self.rows.err(1, fld, self.rows.header, "missing column")
        a: np.ndarray | None = None
        first = next((c.strip() for c in col if c.strip()), "")
        if "-" in first[1:]:  # dates (numpy would read a bare number as a year): one C call for the block
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    stamp = np.array(col, dtype="datetime64[us]")
            except (ValueError, Warning):
                pass
            else:
                a = stamp.astype(np.int64) / 1e6
                a[np.isnat(stamp)] = np.nan
        if a is None:  # epoch numbers, mixed or bad cells: one by one (cached)
            a = np.array([parse_time(c.strip()) for c in col], dtype=np.float64)
        bad = np.isnan(a)
        if bad.any():
            for i in np.flatnonzero(bad):
                raw = col[i].strip()
                if raw.lower() in _EMPTY or raw == "NaT":
                    if optional:
                        continue
                    raise self.err(int(i), fld, "missing time")
                raise self.err(int(i), fld, "expected 'YYYY-MM-DD HH:MM:SS'")
        return a


_EPOCH = datetime(1970, 1, 1)
_time_cache: dict[str, float | None] = {}


def parse_time(raw: str) -> float | None:
    """'YYYY-MM-DD HH:MM:SS' (ISO 8601, naive = UTC) or epoch seconds -> seconds; None if neither.

    Cached per distinct string: trace logs repeat timestamps (a job's submit and start).
    """
    try:
        return _time_cache[raw]
    except KeyError:
        pass
    t: float | None
    try:
        t = float(raw)
        if not math.isfinite(t):
            t = None
    except ValueError:
        try:
            dt = datetime.fromisoformat(raw)
        except ValueError:
            t = None
        else:
            t = dt.timestamp() if dt.tzinfo is not None else (dt - _EPOCH).total_seconds()
    if len(_time_cache) > 1 << 20:
        _time_cache.clear()
    _time_cache[raw] = t
    return t


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while a reader builds millions of acyclic objects.

    Every few hundred allocations CPython would otherwise walk all live objects again: for a
    1M-job trace that is about half the loading time. Reference counting still frees memory;
    the collector's previous state is restored on exit.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# ---- validated jobs without a second validation -------------------------------------------


def _trusted_job_factory() -> Callable[..., Job]:
    """``trusted_job``, generated from ``dataclasses.fields(Job)`` so it follows the core's Job.

    Built like the dataclass's own ``__init__`` (plain slot stores), minus ``__post_init__``.
    """
    fields = dataclasses.fields(Job)
    env: dict[str, Any] = {"_new": object.__new__, "_Job": Job}
    params, body = [], ["    job = _new(_Job)"]
    env["_MISSING"] = dataclasses.MISSING
    for f in fields:
        if f.default is not dataclasses.MISSING:
            env[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
            body.append(f"    job.{f.name} = {f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"_f_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_MISSING")
            body.append(f"    job.{f.name} = _f_{f.name}() if {f.name} is _MISSING else {f.name}")
        else:
            params.append(f.name)
            body.append(f"    job.{f.name} = {f.name}")
    src = f"def trusted_job({', '.join(params)}):\n" + "\n".join(body) + "\n    return job\n"
    exec(src, env)  # the dataclasses module builds __init__ the same way
    return env["trusted_job"]  # type: ignore[no-any-return]


trusted_job: Callable[..., Job] = _trusted_job_factory()
"""A :class:`Job` from values a reader (or generator) has already checked field by field.

Equal to ``Job(...)`` with the same arguments for valid values (tested), at a fraction of
its cost: the core's ``__post_init__`` is not run again. ``kind``, ``qos`` and ``end_state``
must be enum members already. Use ``Job(...)`` wherever a value has not been checked.
"""


# ---- openb pods (Alibaba cluster-trace-gpu-v2023) -------------------------------------------

# openb's qos label -> GENIE's user priority class (seed 001 §5.2.1): latency-sensitive pods
# are Prior, Guaranteed pods Urgent, best-effort and burstable pods Normal.
OPENB_QOS: dict[str, QoSClass] = {
    "LS": QoSClass.PRIOR,
    "Guaranteed": QoSClass.URGENT,
    "Burstable": QoSClass.NORMAL,
    "BE": QoSClass.NORMAL,
}
OPENB_QOS_LABELS = ("LS", "Guaranteed", "Burstable", "BE")
OPENB_POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "creation_time", "deletion_time")
OPENB_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu")


@dataclass(slots=True)
class OpenbPods:
    """Pods in file order: the jobs, when each was scheduled (None: never) and deleted."""

    jobs: list[Job]
    scheduled: list[float | None]
    deleted: list[float]
    path: Path


@paused_gc()
def read_openb_pods(path: Path, progress: Progress | None = None, what: str = "trace") -> OpenbPods:
    """openb pods, every row validated: run time = deletion − scheduled (s), submit = creation.

    Pods never scheduled (empty ``scheduled_time``, pod_phase Pending) are CANCELLED with
    duration 0. ``gpu_spec`` lists the allowed GPU models (``|``-separated); ``gpu_milli``
    < 1000 is a GPU-sharing pod on one GPU; ``qos`` maps through :data:`OPENB_QOS` and is
    kept as the job's ``category``.
    """
    rows = CsvRows(path, OPENB_POD_COLUMNS, what=what, progress=progress, hint=format_hint)
    jobs: list[Job] = []
    sched_at: list[float | None] = []
    deleted_at: list[float] = []
    seen: set[str] = set()
    for line, r in rows:
        name = rows.text(r, "name")
        if not name:
            raise rows.err(line, "name", name, "missing pod name")
        if name in seen:
            raise rows.err(line, "name", name, "duplicate pod name")
        seen.add(name)
        gpus = rows.int_(line, r, "num_gpu")
        milli = rows.int_(line, r, "gpu_milli", default=1000)
        created = rows.num(line, r, "creation_time")
        deleted = rows.num(line, r, "deletion_time")
        sched = rows.num(line, r, "scheduled_time", optional=True)
        if deleted < created:
            raise rows.err(line, "deletion_time", r["deletion_time"].strip(), "before creation_time")
        if not math.isnan(sched) and not created <= sched <= deleted:
            raise rows.err(
                line,
                "scheduled_time",
                r["scheduled_time"].strip(),
                "outside [creation_time, deletion_time]: a negative run or queue time",
            )
        if gpus == 0:
            kind, milli = JobKind.CPU, 1000
        else:
            kind = JobKind.TRAINING
            if milli <= 0 or milli > 1000:
                raise rows.err(line, "gpu_milli", r["gpu_milli"].strip(), "must be in (0, 1000] for a GPU pod")
            if milli < 1000 and gpus != 1:
                raise rows.err(line, "gpu_milli", r["gpu_milli"].strip(), "GPU sharing needs num_gpu == 1")
        qos_label = rows.text(r, "qos")
        if qos_label and qos_label not in OPENB_QOS:
            raise rows.err(line, "qos", qos_label, f"expected one of {', '.join(OPENB_QOS_LABELS)}")
        never = math.isnan(sched)
        phase = rows.text(r, "pod_phase")
        jobs.append(
            trusted_job(
                name,
                created,
                gpus=gpus,
                kind=kind,
                cpu_milli=rows.int_(line, r, "cpu_milli"),
                memory_mib=rows.int_(line, r, "memory_mib"),
                gpu_milli=milli,
                gpu_models=tuple(s.strip() for s in rows.text(r, "gpu_spec").split("|") if s.strip()),
                qos=OPENB_QOS.get(qos_label, QoSClass.NORMAL),
                category=qos_label,
                duration=0.0 if never else deleted - sched,
                end_state=JobEnd.CANCELLED if never else JobEnd.FAILED if phase == "Failed" else JobEnd.COMPLETED,
            )
        )
        sched_at.append(None if never else sched)
        deleted_at.append(deleted)
    if not jobs:
        raise InvalidInput(what, str(path), "no pods")
    return OpenbPods(jobs, sched_at, deleted_at, path)


def format_hint(header: list[str]) -> str:
    """'the columns look like F (--format F)' when the header fits another format, else ''."""
    fmt = sniff_format(header)
    return f"the columns look like {fmt} (--format {fmt})" if fmt else ""


# Columns that identify each CSV trace format (for inference and for hints in messages).
FORMAT_COLUMNS: dict[str, tuple[str, ...]] = {
    "openb": OPENB_POD_COLUMNS,
    "helios": ("job_id", "vc", "gpu_num", "submit_time", "state"),
    "native": ("id", "submit", "gpus"),
    "node-series": ("time", "active", "total"),
}


def sniff_format(header: list[str]) -> str | None:
    """The trace format whose required columns the header has, else None."""
    cols = set(header)
    for fmt, required in FORMAT_COLUMNS.items():
        if cols.issuperset(required):
            return fmt
    return None


def read_header(path: Path, what: str = "trace") -> list[str]:
    """The stripped header cells of a CSV file (checked as text first)."""
    rows = CsvRows(path, what=what)
    rows.close()
    return rows.header


# ---- node series (Helios CES) and run-time lists (seed 004) ------------------------------------


@paused_gc()
def read_node_series(path: Path, progress: Progress | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-minute ``time,active,total`` -> (epoch minute int64, active, total) as floats.

    ``time`` strictly increasing (UTC), ``total`` >= 1 and 0 <= ``active`` <= ``total``.
    """
    rows = CsvRows(path, ("time", "active", "total"), what="series", progress=progress, hint=format_hint)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    prev: tuple[int, str] | None = None  # last minute of the previous block and its text
    for ch in rows.chunks():
        minute = (ch.times("time") // 60).astype(np.int64)
        total = ch.floats("total", minimum=1)
        active = ch.floats("active")
        over = np.flatnonzero(active > total)
        if over.size:
            i = int(over[0])
            raise ch.err(i, "active", f"more than the {total[i]:g} nodes in total")
        back = np.flatnonzero(np.diff(minute) <= 0)
        if prev is not None and minute[0] <= prev[0]:
            raise ch.err(0, "time", f"not after the previous row's {prev[1]!r}")
        if back.size:
            i = int(back[0]) + 1
            raise ch.err(i, "time", f"not after the previous row's {ch.cols['time'][i - 1].strip()!r}")
        prev = (int(minute[-1]), ch.cols["time"][-1].strip())
        parts.append((minute, active, total))
    if not parts:
        raise InvalidInput("series", str(path), "no rows")
    t, a, n = (np.concatenate(x) for x in zip(*parts, strict=True))
    return t, a, n


def read_runtimes(path: Path, progress: Progress | None = None) -> np.ndarray:
    """One run time (s, finite, >= 0) a line, after an optional header line; order kept."""
    rows = CsvRows(path, what="runtimes", progress=progress)
    if len(rows.header) != 1:
        rows.close()
        raise TraceFormatError(rows.name, 1, "header", rows.header, "expected one run time a line")
    head = rows.header[0]
    values: list[np.ndarray] = []
    try:
        first = float(head)
    except ValueError:
        pass
    else:  # no header line: the first line is a value
        if not math.isfinite(first) or first < 0:
            rows.close()
            raise TraceFormatError(rows.name, 1, "runtime", head, "must be a finite number >= 0")
        values.append(np.array([first]))
    for ch in rows.chunks():
        values.append(ch.floats(head))
    if not values:
        raise InvalidInput("runtimes", str(path), "no run times")
    return np.concatenate(values)


# ---- where the real data lives ------------------------------------------------------------


def shared_data_dir() -> Path | None:
    """$QOSMOS_SHARED/data (or $QOSMOS_SHARED), else <repo>/../shared/data; None when absent."""
    env = os.environ.get("QOSMOS_SHARED")
    candidates = [Path(env) / "data", Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parent.parent.parent / "shared" / "data")
    for c in candidates:
        if (c / "SOURCES.md").exists() or (c / "philly").is_dir():
            return c
    return None


__all__ = [
    "OPENB_QOS",
    "OPENB_QOS_LABELS",
    "PROGRESS_CALLS",
    "CsvRows",
    "OpenbPods",
    "Progress",
    "TraceFormatError",
    "check_file",
    "format_hint",
    "parse_time",
    "paused_gc",
    "read_cells",
    "read_header",
    "read_node_series",
    "read_openb_pods",
    "read_runtimes",
    "shared_data_dir",
    "show",
    "sniff_format",
    "trusted_job",
]
