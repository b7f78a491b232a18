"""`qosmos sweep`: the grid in local processes, resumable; and the same grid on a real Ray
instance started by the test on loopback (no usage stats, no dashboard)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from qosmos.simulator.engine import SimConfig, simulate
from qosmos.simulator.failures import GpuFailures, RandomOutages
from qosmos.simulator.metrics import summarize
from qosmos.simulator.sweep import Cell, grid
from qosmos.simulator.traces import load_trace
from qosmos.testing.skips import skip_or_fail
from typer.testing import CliRunner

from qosmos.cli import app

runner = CliRunner()
GRID = [
    "sweep",
    "--trace",
    "builtin:helios-synth,builtin:genie",
    "--policy",
    "fifo,sjf",
    "--placement",
    "consolidate",
    "--seed",
    "0,1",
    "--synth-jobs",
    "300",
]


def rows(out: Path) -> list[dict[str, str]]:
    return list(csv.DictReader((out / "sweep.csv").open()))


def test_local_grid_then_resume(tmp_path: Path) -> None:
    out = tmp_path / "sw"
    r = runner.invoke(app, [*GRID, "--jobs", "2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "8 cells: 0 already finished, 8 to run" in r.output
    got = rows(out)
    assert len(got) == 8
    assert {(g["trace"], g["policy"], g["seed"]) for g in got} == {
        (t, p, s) for t in ("builtin:helios-synth", "builtin:genie") for p in ("fifo", "sjf") for s in ("0", "1")
    }
    assert (out / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    where = [json.loads(p.read_text())["ran_on"] for p in out.glob("*/summary.json")]
    assert {w["runner"] for w in where} == {"local"} and os.getpid() not in {w["pid"] for w in where}
    # each cell's numbers are those of the same run done directly
    cell = Cell("builtin:helios-synth", "sjf", "consolidate", 1)
    direct = summarize(simulate(load_trace("builtin:helios-synth", jobs=300, seed=1), SimConfig(policy="sjf", seed=1)))
    row = next(g for g in got if g["cell"] == cell.name)
    assert float(row["avg_jct_s"]) == pytest.approx(direct["avg_jct_s"])
    assert int(row["jobs"]) == direct["jobs"] == 300

    # resume: finished cells are skipped (their summary.json untouched), a missing one is rerun
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*/summary.json")}
    (out / cell.name / "summary.json").unlink()
    r = runner.invoke(app, [*GRID, "--jobs", "2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "8 cells: 7 already finished, 1 to run" in r.output
    for p, t in stamps.items():
        if p.parent.name != cell.name:
            assert p.stat().st_mtime_ns == t, p
    assert (out / cell.name / "summary.json").exists() and len(rows(out)) == 8
    # a wider grid keeps the finished cells and runs only the new ones
    r = runner.invoke(app, [*GRID[:-6], "--placement", "consolidate,best-fit", *GRID[-4:], "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "16 cells: 8 already finished, 8 to run" in r.output and len(rows(out)) == 16


def test_a_sweep_resumed_with_other_options_refuses_and_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "sw"
    args = ["sweep", "--trace", "builtin:helios-synth", "--seed", "0,1", "--synth-jobs", "200", "--no-plot"]
    r = runner.invoke(app, [*args, "--out", str(out)])
    assert r.exit_code == 0, r.output
    before = (out / "sweep.csv").read_bytes()
    stamps = {p: p.read_bytes() for p in out.glob("*/summary.json")}
    for other in (["--mtbf-gpu-hours", "50"], ["--backfill", "easy"], ["--synth-jobs", "300"]):
        r = runner.invoke(app, [*args, *other, "--out", str(out)])
        assert r.exit_code == 2, r.output
        assert "2 finished cell(s) there ran with other options or inputs" in r.output, r.output
        assert other[0].removeprefix("--").replace("-", "_") in r.output, r.output
    assert {p: p.read_bytes() for p in out.glob("*/summary.json")} == stamps
    assert (out / "sweep.csv").read_bytes() == before
    r = runner.invoke(app, [*args, "--out", str(out)])  # the same options: resumed, nothing to run
    assert r.exit_code == 0 and "2 cells: 2 already finished, 0 to run" in r.output, r.output
    # a summary from before the options were kept says nothing: still finished
    old = next(iter(stamps))
    summary = json.loads(old.read_text())
    del summary["sweep_options"]
    old.write_text(json.dumps(summary))
    r = runner.invoke(app, [*args, "--mtbf-gpu-hours", "50", "--out", str(out)])
    assert r.exit_code == 2 and "1 finished cell(s)" in r.output, r.output


def test_a_sweep_resumed_by_another_qosmos_refuses(tmp_path: Path) -> None:
    """Each cell says which qosmos computed it (as a replay's summary.json does); a sweep.csv never mixes
    two versions' numbers: resuming over another version's cells refuses and rewrites nothing."""
    from qosmos import __version__

    out = tmp_path / "sw"
    args = ["sweep", "--trace", "builtin:helios-synth", "--synth-jobs", "100", "--no-plot", "--out", str(out)]
    assert runner.invoke(app, args).exit_code == 0
    (cell,) = out.glob("*/summary.json")
    summary = json.loads(cell.read_text())
    assert summary["qosmos_version"] == __version__
    summary["qosmos_version"] = "0.0.1"
    cell.write_text(json.dumps(summary))
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and f"qosmos 0.0.1 (now {__version__})" in r.output, r.output
    assert json.loads(cell.read_text())["qosmos_version"] == "0.0.1"
    replay = tmp_path / "replay"
    sim = ["simulate", "--trace", "builtin:helios-synth", "--jobs", "100", "--no-plots", "--out", str(replay)]
    assert runner.invoke(app, sim).exit_code == 0
    assert json.loads((replay / "summary.json").read_text())["qosmos_version"] == __version__


def test_a_sweep_resumed_over_an_edited_trace_or_database_refuses(tmp_path: Path) -> None:
    from qosmos.extender.core.genie import ThroughputProfile
    from qosmos.predictors.profiler import write_db

    trace, db, out = tmp_path / "jobs.csv", tmp_path / "models.json", tmp_path / "sw"
    trace.write_text("id,submit,gpus,duration\na,0,1,10\nb,5,2,20\n")
    write_db(db, [ThroughputProfile("ResNet50", 4.0, 0.0, 0.0, b_min=32, b_max=128, source="a slow cluster")])
    args = ["sweep", "--trace", f"{trace},builtin:genie", "--db", str(db), "--out", str(out), "--no-plot"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    trace.write_text("id,submit,gpus,duration\na,0,1,10\nb,5,2,40\n")  # one job longer
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "1 finished cell(s)" in r.output and "has changed since" in r.output, r.output
    trace.write_text("id,submit,gpus,duration\na,0,1,10\nb,5,2,20\n")  # as it was: resumed
    assert "2 already finished, 0 to run" in runner.invoke(app, args).output
    write_db(db, [ThroughputProfile("ResNet50", 8.0, 0.0, 0.0, b_min=32, b_max=128, source="a faster cluster")])
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "2 finished cell(s)" in r.output and "db_sha256" in r.output, r.output


def test_each_seed_of_a_sweep_draws_its_own_failures_for_every_policy(tmp_path: Path) -> None:
    out = tmp_path / "sw"
    args = ["sweep", "--trace", "builtin:helios-synth", "--policy", "fifo,sjf", "--seed", "0,1", "--synth-jobs", "300"]
    failing = ["--mtbf-gpu-hours", "20", "--checkpoint-interval", "600", "--backoff-limit", "2"]
    r = runner.invoke(app, [*args, *failing, "--jobs", "1", "--out", str(out), "--no-plot"])
    assert r.exit_code == 0, r.output
    got = {(g["policy"], g["seed"]): g for g in rows(out)}
    fifo0 = got[("fifo", "0")]
    trace = load_trace("builtin:helios-synth", jobs=300, seed=0)
    cfg = SimConfig(seed=0, failures=GpuFailures(20.0, 0), checkpoint_interval=600, backoff_limit=2)
    direct = summarize(simulate(trace, cfg))
    assert int(fifo0["restarts"]) == direct["restarts"] > 0 and int(fifo0["failed_jobs"]) == direct["failed_jobs"]
    assert float(fifo0["lost_gpu_hours"]) == pytest.approx(direct["lost_gpu_hours"])
    assert fifo0["restarts"] != got[("fifo", "1")]["restarts"]  # another seed, other failures
    bad = runner.invoke(app, [*args, "--mtbf-gpu-hours", "-1", "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "mtbf_gpu_hours" in bad.output and not (tmp_path / "bad").exists()


def test_each_seed_of_a_sweep_draws_its_own_node_outages_and_an_edited_outage_file_refuses(tmp_path: Path) -> None:
    out = tmp_path / "sw"
    args = ["sweep", "--trace", "builtin:helios-synth", "--seed", "0,1", "--synth-jobs", "300", "--no-plot"]
    outages = ["--node-mtbf-hours", "24", "--node-mttr-hours", "2", "--checkpoint-interval", "600"]
    r = runner.invoke(app, [*args, *outages, "--jobs", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    got = {g["seed"]: g for g in rows(out)}
    trace = load_trace("builtin:helios-synth", jobs=300, seed=0)
    direct = summarize(simulate(trace, SimConfig(seed=0, outages=RandomOutages(24.0, 2.0, 0), checkpoint_interval=600)))
    assert int(got["0"]["node_lost_requeues"]) == direct["node_lost_requeues"] > 0
    assert float(got["0"]["lost_gpu_hours"]) == pytest.approx(direct["lost_gpu_hours"])
    assert got["0"]["node_lost_requeues"] != got["1"]["node_lost_requeues"]  # another seed, other outages
    # outages from a file: an edited file is another input, refused on resume
    spans = tmp_path / "outages.csv"
    spans.write_text("node,down,up\nvc0-n000,3600,7200\n")
    fixed = ["--node-outages", str(spans), "--out", str(tmp_path / "f")]
    r = runner.invoke(app, [*args, *fixed])
    assert r.exit_code == 0, r.output
    spans.write_text("node,down,up\nvc0-n000,3600,9000\n")
    r = runner.invoke(app, [*args, *fixed])
    assert r.exit_code == 2 and "node_outages_sha256" in r.output, r.output


def test_sweep_rejects_bad_grids_before_running(tmp_path: Path) -> None:
    for bad, needle in (
        (["--policy", "fifo,nope"], "nope"),
        (["--seed", "0,x"], "integer"),
        (["--placement", ","], "names nothing"),
    ):
        out = tmp_path / "bad"
        r = runner.invoke(app, ["sweep", "--trace", "builtin:genie", "--out", str(out), *bad])
        assert r.exit_code == 2 and needle in r.output, r.output
        assert not out.exists()


def test_sweep_rejects_a_bad_trace_of_the_grid_before_any_worker_starts(tmp_path: Path) -> None:
    # issue 22 §3: builtin:nope used to reach the workers and end as "a process in the process pool was
    # terminated abruptly", exit 1
    for traces, needle, reason in (
        ("builtin:genie,builtin:nope", "builtin:nope", "unknown builtin"),
        (f"builtin:genie,{tmp_path / 'missing.csv'}", "missing.csv", "file not found"),
    ):
        out = tmp_path / "bad"
        r = runner.invoke(app, ["sweep", "--trace", traces, "--jobs", "2", "--out", str(out)])
        assert r.exit_code == 2 and needle in r.output and reason in r.output, r.output
        assert not out.exists()


def test_a_cell_that_fails_in_a_worker_is_reported_with_its_own_error(tmp_path: Path) -> None:
    # A worker's InvalidInput crosses the process boundary intact (it used to break the pool on unpickling).
    from qosmos.simulator.sweep import run_sweep

    cells = grid(["builtin:nope"], ["fifo"], ["consolidate"], [0])
    _, failed, ran = run_sweep(cells, {}, tmp_path / "sw", workers=2, plot=False)
    (err,) = failed.values()
    assert ran == 1 and "unknown builtin" in str(err) and getattr(err, "field", None) == "trace"


def test_sweep_on_an_address_with_no_ray_cluster_fails_at_once(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        t0 = time.monotonic()
        r = runner.invoke(
            app, ["sweep", "--trace", "builtin:genie", "--ray", f"127.0.0.1:{port}", "--out", str(tmp_path / "o")]
        )
    assert r.exit_code == 2 and f"no Ray cluster at 127.0.0.1:{port}" in r.output, r.output
    assert time.monotonic() - t0 < 15


def test_grid_is_the_full_product() -> None:
    cells = grid(["a", "b"], ["fifo"], ["consolidate", "cer"], [0, 1, 2])
    assert len(cells) == 12 and len({c.name for c in cells}) == 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def ray_head(monkeypatch: pytest.MonkeyPatch, private_network: None) -> Iterator[str]:
    """A Ray head owned by this test (own process group, stopped on teardown), with the test's driver
    in a network namespace of their own: Ray binds its servers to every address or to the address it
    detects (probing a public resolver), whatever ``--node-ip-address`` says."""
    try:  # hack/test.sh installs the ray extra: under CI a missing Ray fails the run
        import ray  # noqa: F401
    except ImportError:
        skip_or_fail("Ray is not installed (pip install 'qosmos[ray]')")
    exe = shutil.which("ray")
    if exe is None:
        skip_or_fail("the ray command is not installed")
    port = _free_port()
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")  # nothing phones home, here or in the head
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    temp = Path("/tmp") / f"qr{os.getpid()}"  # Ray's socket paths must stay short
    proc = subprocess.Popen(
        [
            exe,
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            "--include-dashboard=false",
            f"--port={port}",
            "--num-cpus=2",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.skip(f"ray start exited with {proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.skip("Ray head did not come up in 120 s")
        yield address
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # our own process group only
            proc.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow
def test_sweep_on_a_real_ray_cluster(tmp_path: Path, ray_head: str) -> None:
    out = tmp_path / "ray"
    args = ["sweep", "--trace", "builtin:genie", "--policy", "fifo,swaf", "--placement", "cer", "--seed", "0,1"]
    r = runner.invoke(app, [*args, "--ray", ray_head, "--out", str(out)])
    assert r.exit_code == 0, r.output
    got = rows(out)
    assert len(got) == 4 and {g["policy"] for g in got} == {"fifo", "swaf"}
    for g in got:  # the cells ran as Ray tasks, in Ray's worker processes
        where = json.loads((out / g["cell"] / "summary.json").read_text())["ran_on"]
        assert where["runner"] == "ray" and where["node_id"] and where["pid"] != os.getpid()
    # and agree with a local run of the same cells
    local = tmp_path / "local"
    r = runner.invoke(app, [*args, "--jobs", "1", "--out", str(local), "--no-plot"])
    assert r.exit_code == 0, r.output
    by_cell = {g["cell"]: g for g in rows(local)}
    for g in got:
        assert float(g["avg_jct_s"]) == pytest.approx(float(by_cell[g["cell"]]["avg_jct_s"]))
        assert json.loads((out / g["cell"] / "summary.json").read_text())["cell"]["policy"] == g["policy"]
    # resume on Ray too
    r = runner.invoke(app, [*args, "--ray", ray_head, "--out", str(out)])
    assert r.exit_code == 0 and "4 already finished, 0 to run" in r.output


def test_cells_read_the_model_database_the_sweep_resolved(tmp_path: Path) -> None:
    from qosmos.extender.core.genie import ThroughputProfile
    from qosmos.predictors.profiler import write_db
    from qosmos.simulator.sweep import run_cell

    db = tmp_path / "models.json"
    write_db(db, [ThroughputProfile("ResNet50", 4.0, 0.0, 0.0, b_min=32, b_max=128, source="a slow cluster")])
    cell = Cell("builtin:genie", "fifo", "consolidate", 0)
    base = run_cell(cell, {})["avg_jct_s"]
    assert run_cell(cell, {"db": str(db)})["avg_jct_s"] > 10 * base  # type: ignore[operator]
    r = runner.invoke(app, ["sweep", "--trace", "builtin:genie", "--out", str(tmp_path / "sw"), "--db", "nope.json"])
    assert r.exit_code == 2 and "nope.json" in r.output and not (tmp_path / "sw").exists()
