"""`qosmos simulate` end to end through the real CLI app, and the Chrome trace schema."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from typer.testing import CliRunner

from qosmos.cli import app

runner = CliRunner()
REQUIRED = (
    "jobs",
    "avg_jct_s",
    "avg_queue_s",
    "queued_jobs",
    "qos_guarantee",
    "makespan_s",
    "gpu_utilization",
    "wall_s",
)


def check_chrome_trace(path: Path) -> None:
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    meta = [e for e in events if e["ph"] == "M"]
    assert slices and meta
    for e in slices:
        assert isinstance(e["name"], str) and isinstance(e["ts"], int) and isinstance(e["dur"], int) and e["dur"] > 0
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
    named = {(e["pid"]) for e in meta if e["name"] == "process_name"}
    assert {e["pid"] for e in slices} <= named
    threads = {(e["pid"], e["tid"]) for e in meta if e["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in slices} <= threads
    # no two slices overlap on one track (Perfetto nests or drops overlapping slices)
    by_track: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for e in slices:
        by_track.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


def test_simulate_openb_sample_writes_everything(tmp_path: Path) -> None:
    out = tmp_path / "o"
    r = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            "builtin:openb-sample",
            "--policy",
            "fifo",
            "--placement",
            "best-fit",
            "--scale",
            "0.25",
            "--out",
            str(out),
            "--quiet",
        ],
    )
    assert r.exit_code == 0, r.output
    for f in ("summary.json", "jobs.csv", "trace.json", "jct_cdf.png", "timeseries.png", "gpu_timeline.png"):
        assert (out / f).stat().st_size > 0, f
    s = json.loads((out / "summary.json").read_text())
    assert all(k in s for k in REQUIRED) and s["jobs"] > 0
    assert {"by_vc", "by_size", "by_length", "fragmentation", "p99_jct_s"} <= set(s)
    header = (out / "jobs.csv").read_text().splitlines()[0].split(",")
    assert header[:12] == [
        "id",
        "vc",
        "user",
        "gpus",
        "gpu_milli",
        "model",
        "qos",
        "submit",
        "start",
        "end",
        "queue_s",
        "jct_s",
    ]
    check_chrome_trace(out / "trace.json")


def test_simulate_genie_compare(tmp_path: Path) -> None:
    out = tmp_path / "c"
    r = runner.invoke(
        app,
        [
            "simulate",
            "--format",
            "genie",
            "--trace",
            "builtin:genie",
            "--density",
            "5",
            "--nodes",
            "4",
            "--gpus-per-node",
            "4",
            "--seed",
            "1",
            "--compare",
            "fifo,swaf",
            "--placement",
            "cer",
            "--out",
            str(out),
            "--quiet",
        ],
    )
    assert r.exit_code == 0, r.output
    comp = json.loads((out / "compare.json").read_text())
    assert set(comp["policies"]) == {"fifo", "swaf"}
    assert all(comp["policies"][p]["qos_guarantee"] is not None for p in comp["policies"])
    assert (out / "compare.png").stat().st_size > 0 and (out / "summary.json").exists()
    assert (out / "swaf" / "trace.json").exists()


def test_simulate_recorded_and_helios_synth(tmp_path: Path) -> None:
    r = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            "builtin:helios-synth",
            "--jobs",
            "2000",
            "--policy",
            "sjf",
            "--backfill",
            "easy",
            "--out",
            str(tmp_path / "h"),
            "--quiet",
            "--no-plots",
        ],
    )
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "h" / "summary.json").read_text())
    assert s["jobs"] == 2000 and len(s["by_vc"]) == 10


def test_bad_input_exits_2_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "jobs.csv"
    bad.write_text("id,submit,gpus,duration\na,0,1,10\nb,zero,1,5\n")
    (tmp_path / "nodes.csv").write_text("name,gpus\nn0,1\n")
    r = runner.invoke(app, ["simulate", "--trace", str(bad), "--out", str(tmp_path / "x"), "--quiet"])
    assert r.exit_code == 2
    assert "jobs.csv:3: field submit" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["simulate", "--trace", "builtin:genie", "--policy", "nope", "--out", str(tmp_path / "y")])
    assert r.exit_code == 2 and "policy" in r.output
    r = runner.invoke(app, ["simulate", "--trace", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "z")])
    assert r.exit_code == 2 and "not found" in r.output
