"""The shared validation layer (predictors/readers.py): file checks, converters, readers.

Property tests write random valid tables, check that the row and the block (vectorised)
converters read exactly what Python reads, then spoil one cell and check that the error
names that file, line and field and shows the cell as written.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Job, JobEnd, JobKind, QoSClass
from qosmos.predictors.data import load_node_series, load_openb_pods, load_runtimes
from qosmos.predictors.readers import (
    OPENB_QOS,
    PROGRESS_CALLS,
    CsvRows,
    TraceFormatError,
    check_file,
    parse_time,
    read_openb_pods,
    trusted_job,
)

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
)


def _write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, str):
        path.write_text(text, encoding="utf-8")
    else:
        path.write_bytes(text)
    return path


# ---- files --------------------------------------------------------------------------------


def test_check_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="file not found") as e:
        check_file(tmp_path / "nope.csv")
    assert "nope.csv" in str(e.value)
    with pytest.raises(InvalidInput, match="is a directory") as e:
        check_file(tmp_path)
    assert str(tmp_path) in str(e.value)
    binary = _write(tmp_path / "b.csv", b"id,submit\n\x00\x01\x02garbage")
    with pytest.raises(InvalidInput, match="binary file") as e:
        check_file(binary)
    assert "b.csv" in str(e.value)
    latin = _write(tmp_path / "l.csv", "id,submit\nré,1\n".encode("latin-1"))
    with pytest.raises(InvalidInput, match=r"not UTF-8 text \(line 2") as e:
        check_file(latin)
    assert "l.csv" in str(e.value)


def test_non_utf8_past_the_sniffed_head_names_file_and_line(tmp_path: Path) -> None:
    body = "".join(f"{i},{i}\n" for i in range(20000))  # > 64 KiB of clean text first
    p = _write(tmp_path / "late.csv", b"a,b\n" + body.encode() + b"\xff\xfe,1\n")
    for read in (lambda: list(CsvRows(p, ("a", "b"))), lambda: list(CsvRows(p, ("a", "b")).chunks())):
        with pytest.raises(InvalidInput, match=r"not UTF-8 text \(line 20002\)") as e:
            read()
        assert "late.csv" in str(e.value) and not isinstance(e.value, UnicodeDecodeError)


def test_bom_is_accepted(tmp_path: Path) -> None:
    p = _write(tmp_path / "bom.csv", "\ufefftime,active,total\n2017-10-03 00:00:00,1,2\n")
    _, active, total = load_node_series(p)
    assert active.tolist() == [1.0] and total.tolist() == [2.0]


def test_truncated_and_long_rows(tmp_path: Path) -> None:
    p = _write(tmp_path / "t.csv", "a,b,c\n1,2,3\n\n4,5\n")
    with pytest.raises(TraceFormatError, match=r"^t\.csv:4: field c: truncated row: 2 of 3 fields$"):
        list(CsvRows(p, ("a",)))
    with pytest.raises(TraceFormatError, match=r"^t\.csv:4: field c: truncated row"):
        list(CsvRows(p, ("a",)).chunks())
    # a quoted cell that spans lines: the rows after it keep their true line numbers
    p = _write(tmp_path / "q.csv", 'a,b,c\n1,"two\nlines",3\n\n4,5,6\n7,8\n')
    with pytest.raises(TraceFormatError, match=r"^q\.csv:6: field c: truncated row"):
        list(CsvRows(p).chunks())
    with pytest.raises(TraceFormatError, match=r"^q\.csv:6: field c: truncated row"):
        list(CsvRows(p))
    p = _write(tmp_path / "l.csv", "a,b\n1,2,3\n")
    with pytest.raises(TraceFormatError, match=r"^l\.csv:2: field row: 3 fields, the header has 2$"):
        list(CsvRows(p).chunks())


def test_missing_column_lists_the_header_and_hints_the_format(tmp_path: Path) -> None:
    p = _write(tmp_path / "pods.csv", POD_HEADER + "\n")
    with pytest.raises(TraceFormatError) as e:
        CsvRows(p, ("id", "submit", "gpus"), hint=lambda h: "the columns look like openb (--format openb)")
    msg = str(e.value)
    assert msg.startswith("pods.csv:1: field id: missing column; the columns look like openb")
    assert "{" not in msg and "[" not in msg  # the header as a list of names, never a Python literal


# ---- converters: row and block agree, errors point at the cell ------------------------------

cell_values = st.one_of(
    st.integers(0, 10**9).map(str),
    st.floats(0, 1e9, allow_nan=False).map(repr),
)
dates = st.datetimes(datetime(1990, 1, 1), datetime(2030, 1, 1)).map(lambda d: d.replace(microsecond=0))


@SETTINGS
@given(
    nums=st.lists(cell_values, min_size=1, max_size=60),
    stamps=st.lists(dates, min_size=1, max_size=60),
    bad_at=st.integers(0, 10**6),
    garbage=st.sampled_from(["x", "1..2", "-5", "inf", "--", "2020-02-30 00:00:00"]),
    chunk=st.integers(1, 7),
)
def test_row_and_block_converters_agree_and_blame_the_right_cell(
    tmp_path: Path,
    nums: list[str],
    stamps: list[datetime],
    bad_at: int,
    garbage: str,
    chunk: int,
) -> None:
    n = min(len(nums), len(stamps))
    texts = [d.strftime("%Y-%m-%d %H:%M:%S") for d in stamps[:n]]
    lines = ["v,t"] + [f"{nums[i]},{texts[i]}" for i in range(n)]
    p = _write(tmp_path / "x.csv", "\n".join(lines) + "\n")
    rows = CsvRows(p, ("v", "t"))
    by_row = [(rows.num(line, r, "v"), rows.time(line, r, "t")) for line, r in rows]
    blocks = list(CsvRows(p, ("v", "t")).chunks(chunk))
    v = np.concatenate([b.floats("v") for b in blocks])
    t = np.concatenate([b.times("t") for b in blocks])
    expect_t = [d.replace(tzinfo=UTC).timestamp() for d in stamps[:n]]
    assert [x for x, _ in by_row] == v.tolist() == [float(x) for x in nums[:n]]
    assert [y for _, y in by_row] == t.tolist() == expect_t
    # spoil one cell: both paths name the same file:line:field and show the cell as written
    k = bad_at % n
    col = bad_at % 2
    if col == 1 and garbage == "-5":
        garbage = "5 May"  # a negative number is a valid epoch time: spoil the date with text instead
    cells = lines[k + 1].split(",")
    cells[col] = garbage
    spoiled = [*lines[: k + 1], ",".join(cells), *lines[k + 2 :]]
    _write(p, "\n".join(spoiled) + "\n")
    fld = "vt"[col]
    want = rf"^x\.csv:{k + 2}: field {fld}: .*\(got '{garbage}'\)$"
    rows = CsvRows(p, ("v", "t"))
    with pytest.raises(TraceFormatError, match=want.replace("..", r"\.\.").replace("--", r"\-\-")):
        for line, r in rows:
            rows.num(line, r, "v") if fld == "v" else rows.time(line, r, "t")
    with pytest.raises(TraceFormatError, match=want.replace("..", r"\.\.").replace("--", r"\-\-")):
        for b in CsvRows(p, ("v", "t")).chunks(chunk):
            b.floats("v") if fld == "v" else b.times("t")


@SETTINGS
@given(d=dates, frac=st.sampled_from(["", ".5", ".25"]), sep=st.sampled_from([" ", "T"]))
def test_parse_time_is_utc_and_takes_the_iso_forms(d: datetime, frac: str, sep: str) -> None:
    text = d.strftime(f"%Y-%m-%d{sep}%H:%M:%S") + frac
    assert parse_time(text) == d.replace(tzinfo=UTC).timestamp() + (float(frac) if frac else 0.0)
    assert parse_time("1600000000.5") == 1600000000.5
    assert parse_time("yesterday") is None


@SETTINGS
@given(
    gpus=st.integers(0, 64),
    submit=st.floats(0, 1e9, allow_nan=False),
    dur=st.one_of(st.none(), st.floats(0, 1e7, allow_nan=False)),
    qos=st.sampled_from(list(QoSClass)),
    state=st.sampled_from(list(JobEnd)),
    user=st.text(max_size=5),
    cpu=st.integers(0, 10**6),
)
def test_trusted_job_equals_job(
    gpus: int, submit: float, dur: float | None, qos: QoSClass, state: JobEnd, user: str, cpu: int
) -> None:
    kind = JobKind.CPU if gpus == 0 else JobKind.TRAINING
    kw = dict(gpus=gpus, kind=kind, user=user, qos=qos, duration=dur, end_state=state, cpu_milli=cpu)
    a, b = trusted_job("j", submit, **kw), Job("j", submit, **kw)
    assert a == b and type(a) is Job


# ---- readers ---------------------------------------------------------------------------------


def test_node_series_rejects_impossible_counts_and_keeps_dates_as_written(tmp_path: Path) -> None:
    good = "time,active,total\n2017-10-03 00:00:00,312,420\n2017-10-03 00:01:00,309,420\n"
    minutes, _, _ = load_node_series(_write(tmp_path / "s.csv", good))
    assert minutes.tolist() == [int(datetime(2017, 10, 3, tzinfo=UTC).timestamp() // 60) + i for i in (0, 1)]
    for bad, msg in (
        ("-40", r"s\.csv:3: field active: must be >= 0 \(got '-40'\)"),
        ("99999", r"s\.csv:3: field active: more than the 420 nodes in total \(got '99999'\)"),
    ):
        _write(tmp_path / "s.csv", good.replace("309", bad))
        with pytest.raises(TraceFormatError, match=msg):
            load_node_series(tmp_path / "s.csv")
    _write(tmp_path / "s.csv", good.replace("00:01:00", "00:00:00"))
    with pytest.raises(TraceFormatError, match=r"s\.csv:3: field time: not after .*'2017-10-03 00:00:00'"):
        load_node_series(tmp_path / "s.csv")
    _write(tmp_path / "s.csv", good.replace("2017-10-03 00:01:00", "3 Oct 2017"))
    with pytest.raises(TraceFormatError, match=r"s\.csv:3: field time: .*\(got '3 Oct 2017'\)"):
        load_node_series(tmp_path / "s.csv")


def test_runtimes(tmp_path: Path) -> None:
    assert load_runtimes(_write(tmp_path / "r.csv", "runtime\n1\n2.5\n")).tolist() == [1.0, 2.5]
    assert load_runtimes(_write(tmp_path / "r.csv", "3\n1\n")).tolist() == [3.0, 1.0]
    with pytest.raises(TraceFormatError, match=r"r\.csv:3: field runtime: must be >= 0 \(got '-1'\)"):
        load_runtimes(_write(tmp_path / "r.csv", "runtime\n1\n-1\n"))
    with pytest.raises(InvalidInput, match="is a directory"):
        load_runtimes(tmp_path)


def _pods(tmp_path: Path, *rows: str) -> Path:
    return _write(tmp_path / "pods.csv", "\n".join([POD_HEADER, *rows]) + "\n")


def test_openb_pods_one_reader_one_qos_map(tmp_path: Path) -> None:
    p = _pods(
        tmp_path,
        "p0,1000,1024,1,500,T4|V100,LS,Running,10,110,20",
        "p1,1000,1024,2,1000,,Guaranteed,Failed,10,50,30",
        "p2,1000,1024,0,0,,BE,Pending,15,40,",
    )
    pods = read_openb_pods(p)
    assert [j.qos for j in pods.jobs] == [QoSClass.PRIOR, QoSClass.URGENT, QoSClass.NORMAL]
    assert [j.qos for j in pods.jobs] == [OPENB_QOS[j.category] for j in pods.jobs]
    assert pods.jobs[1].end_state is JobEnd.FAILED and pods.jobs[2].end_state is JobEnd.CANCELLED
    ran = load_openb_pods(p)  # the predictors' view: pods that ran, same jobs
    assert [j.id for j in ran] == ["p0", "p1"] and ran[0] == pods.jobs[0] and ran[0].qos is QoSClass.PRIOR


@pytest.mark.parametrize(
    ("row", "msg"),
    [
        ("p1,1000,1024,1,1000,,LS,Running,10", r"pods\.csv:3: field deletion_time: truncated row: 9 of 11 fields$"),
        ("p1,1000,1024,1,1000,,LS,Running,10,110,200", r"pods\.csv:3: field scheduled_time: .*negative run.*'200'"),
        (
            "p1,1000,1024,1,1000,,LS,Running,10,5,",
            r"pods\.csv:3: field deletion_time: before creation_time \(got '5'\)",
        ),
        ("p1,1000,1024,1,1000,,Platinum,Running,10,110,20", r"pods\.csv:3: field qos: expected one of"),
    ],
)
def test_openb_pods_rejected_for_qssf_as_for_simulate(tmp_path: Path, row: str, msg: str) -> None:
    p = _pods(tmp_path, "p0,1000,1024,1,1000,,LS,Running,10,110,20", row)
    with pytest.raises(TraceFormatError, match=msg):
        load_openb_pods(p)  # predict qssf / runtime
    from qosmos.simulator.traces import load_openb

    _write(tmp_path / "openb_node_list_gpu_node.csv", "sn,cpu_milli,memory_mib,gpu\nn0,64000,262144,8\n")
    with pytest.raises(TraceFormatError, match=msg):
        load_openb(p)  # simulate


def test_progress_is_bounded_monotone_and_complete(tmp_path: Path) -> None:
    lines = ["time,active,total"]
    t0 = datetime(2017, 10, 3)
    lines += [f"{(t0 + timedelta(minutes=i)):%Y-%m-%d %H:%M:%S},1,2" for i in range(150_000)]
    p = _write(tmp_path / "big.csv", "\n".join(lines) + "\n")
    calls: list[tuple[int, int]] = []
    load_node_series(p, progress=lambda d, t: calls.append((d, t)))
    size = p.stat().st_size
    assert 2 <= len(calls) <= PROGRESS_CALLS + 1
    assert calls[-1] == (size, size) and all(t == size for _, t in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert not math.isnan(calls[0][0])


@pytest.mark.parametrize(("rows", "block"), [(3000, 1), (3000, 64), (150_000, 1000)])
def test_progress_ends_at_the_file_size_for_any_block_size(tmp_path: Path, rows: int, block: int) -> None:
    # 150,000 rows: the last block ends less than a reporting step after the previous report
    p = _write(tmp_path / "r.csv", "runtime\n" + "".join(f"{i % 1000:08d}\n" for i in range(rows)))
    calls: list[tuple[int, int]] = []
    reader = CsvRows(p, progress=lambda d, t: calls.append((d, t)))
    assert sum(len(c) for c in reader.chunks(block)) == rows
    size = p.stat().st_size
    assert calls[-1] == (size, size) and len(calls) <= PROGRESS_CALLS + 1


def test_gc_is_paused_while_reading_and_restored_after_errors(tmp_path: Path) -> None:
    import gc

    seen: list[bool] = []
    p = _write(tmp_path / "s.csv", "time,active,total\n2017-10-03 00:00:00,1,2\n2017-10-03 00:01:00,9,2\n")
    assert gc.isenabled()
    with pytest.raises(TraceFormatError):
        load_node_series(p, progress=lambda d, t: seen.append(gc.isenabled()))
    assert gc.isenabled()
    load_node_series(
        _write(p, "time,active,total\n2017-10-03 00:00:00,1,2\n"), lambda d, t: seen.append(gc.isenabled())
    )
    assert seen and not any(seen) and gc.isenabled()
