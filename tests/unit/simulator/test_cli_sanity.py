"""`qosmos simulate` refuses nonsense or states the default it applies (issue 10, "No silent nonsense"),
lists choices from the engine, passes the new SimConfig options, shows progress only on a terminal,
and `qosmos --version`."""

from __future__ import annotations

import csv
import io
import json
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from qosmos.simulator import engine
from qosmos.simulator.cli import run_simulation
from rich.console import Console
from typer.testing import CliRunner

from qosmos.cli import app

runner = CliRunner()
OPENB = ["simulate", "--trace", "builtin:openb-sample", "--no-plots"]


def sim(tmp_path: Path, *args: str) -> tuple[int, str, Path]:
    out = tmp_path / "out"
    r = runner.invoke(app, [*OPENB, "--out", str(out), *args])
    return r.exit_code, r.output, out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--nodes", "0"], "--nodes"),
        (["--gpus-per-node", "0", "--nodes", "2"], "--gpus-per-node"),
        (["--gpus-per-node", "4"], "give --nodes N too"),
        (["--partition-policy", "novc=sjf"], "novc"),
        (["--compare", ","], "names nothing"),
        (["--compare", "fifo,nope"], "nope"),
        (["--truth-noise", "-1"], "--truth-noise"),
        (["--backfill-estimates", "psychic"], "--backfill-estimates"),
        (["--scale", "0"], "scale"),
        (["--tick", "-1"], "--tick"),
        (["--db", "no-such-models.json"], "no-such-models.json"),
    ],
)
def test_nonsense_is_an_error_and_writes_nothing(tmp_path: Path, args: list[str], needle: str) -> None:
    code, output, out = sim(tmp_path, *args)
    assert code == 2, output
    assert needle in output and "Traceback" not in output
    assert not out.exists(), "an invalid run must write nothing"


def test_nodes_without_gpus_per_node_states_the_default(tmp_path: Path) -> None:
    code, output, out = sim(tmp_path, "--nodes", "2")
    assert code == 0, output
    assert "8 GPUs per node (the default)" in output
    s = json.loads((out / "summary.json").read_text())
    assert s["total_gpus"] == 16 and s["nodes"] == 2
    assert any("8 GPUs per node" in n for n in s["notes"])


def test_gpus_per_node_applies_with_nodes(tmp_path: Path) -> None:
    code, output, out = sim(tmp_path, "--nodes", "3", "--gpus-per-node", "4", "--quiet")
    assert code == 0, output
    assert json.loads((out / "summary.json").read_text())["total_gpus"] == 12


def test_partition_policy_for_an_existing_vc_runs(tmp_path: Path) -> None:
    code, output, out = sim(tmp_path, "--partition-policy", "default=sjf", "--quiet")
    assert code == 0, output
    assert json.loads((out / "summary.json").read_text())["config"]["partition_policy"] == {"default": "sjf"}


def test_jobs_csv_gpu_milli_is_zero_for_cpu_only_pods(tmp_path: Path) -> None:
    code, output, out = sim(tmp_path, "--quiet")
    assert code == 0, output
    rows = list(csv.DictReader((out / "jobs.csv").open()))
    cpu = [r for r in rows if r["gpus"] == "0"]
    gpu = [r for r in rows if r["gpus"] != "0"]
    assert cpu and gpu
    assert {r["gpu_milli"] for r in cpu} == {"0"}
    assert all(0 < int(r["gpu_milli"]) <= 1000 for r in gpu)


def test_new_engine_options_reach_the_config(tmp_path: Path) -> None:
    code, output, out = sim(
        tmp_path,
        "--backfill",
        "easy",
        "--backfill-estimates",
        "requested",
        "--truth-noise",
        "0.2",
        "--predictor-fallback",
        "--quiet",
    )
    assert code == 0, output
    cfg = json.loads((out / "summary.json").read_text())["config"]
    assert cfg["backfill"] == "easy"
    assert cfg["backfill_estimates"] == "requested"
    assert cfg["truth_noise"] == 0.2
    assert cfg["predictor_fallback"] is True


def test_help_lists_the_engines_choices_and_defaults() -> None:
    r = runner.invoke(app, ["simulate", "--help"], env={"COLUMNS": "400"}, terminal_width=400)
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    for p in engine.POLICIES:
        assert p in text, p
    for p in engine.PLACEMENTS:
        assert p in text, p
    for p in engine.BACKFILL_ESTIMATES:
        assert p in text, p
    assert "[default: fifo]" in text and "[default: consolidate]" in text
    assert "Eq." not in text


def test_progress_is_shown_on_a_terminal_and_silent_otherwise(tmp_path: Path) -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    run_simulation(
        "builtin:openb-sample", None, ["fifo"], "consolidate", tmp_path / "a", plots=False, quiet=False, console=console
    )
    shown = buf.getvalue()
    assert "loading trace" in shown and "simulating fifo" in shown and "writing" in shown
    buf = io.StringIO()
    run_simulation(
        "builtin:openb-sample",
        None,
        ["fifo"],
        "consolidate",
        tmp_path / "b",
        plots=False,
        quiet=True,
        console=Console(file=buf, force_terminal=True),
    )
    assert buf.getvalue() == ""
    # through the CLI (not a terminal): the table, no bars
    code, output, _ = sim(tmp_path)
    assert code == 0 and "jobs=" in output and "simulating fifo" not in output


def test_version() -> None:
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0
    assert r.output.strip() == f"qosmos {version('qosmos')}"


def test_native_trace_without_nodes_prints_its_default_cluster(tmp_path: Path) -> None:
    (tmp_path / "jobs.csv").write_text("id,submit,gpus,duration\na,0,1,10\nb,5,2,20\n")
    r = runner.invoke(
        app, ["simulate", "--trace", str(tmp_path / "jobs.csv"), "--out", str(tmp_path / "o"), "--no-plots"]
    )
    assert r.exit_code == 0, r.output
    assert "note: no node list for jobs.csv: default cluster of 4 nodes x 8 GPUs" in r.output


def test_simulate_reads_the_one_model_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `qosmos profile fit` writes is what simulate runs GENIE jobs with: --db, else $QOSMOS_MODELDB."""
    from qosmos.extender.core.genie import ThroughputProfile
    from qosmos.predictors.profiler import write_db

    db = tmp_path / "models.json"  # ResNet50 measured at 4 samples/s on this (imaginary) cluster
    write_db(db, [ThroughputProfile("ResNet50", 4.0, 0.0, 0.0, b_min=32, b_max=128, source="a slow cluster")])
    genie = ["simulate", "--trace", "builtin:genie", "--no-plots"]

    def avg_jct(out: Path, *args: str) -> tuple[float, list[str], str]:
        r = runner.invoke(app, [*genie, "--out", str(out), *args])
        assert r.exit_code == 0, r.output
        s = json.loads((out / "summary.json").read_text())
        return s["avg_jct_s"], s["notes"], r.output

    base, base_notes, _ = avg_jct(tmp_path / "builtin")
    slow, notes, output = avg_jct(tmp_path / "db", "--db", str(db))
    assert slow > 10 * base
    assert f"model database {db} over the built-in profiles" in notes and "model database" in output
    assert not any("model database" in n for n in base_notes)
    monkeypatch.setenv("QOSMOS_MODELDB", str(db))
    assert avg_jct(tmp_path / "env")[0] == slow


def test_a_refused_run_prints_its_error_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Notes (the model database, --nodes defaults) come once the trace is known good, never before an error."""
    from qosmos.extender.core.genie import ThroughputProfile
    from qosmos.predictors.profiler import write_db

    db = tmp_path / "models.json"
    write_db(db, [ThroughputProfile("mynet", 50.0, 1.0, 0.0, b_min=8, b_max=64)])
    monkeypatch.setenv("QOSMOS_MODELDB", str(db))
    code, output, _ = sim(tmp_path, "--nodes", "2", "--partition-policy", "novc=sjf")
    assert code == 2 and output.strip().splitlines() == [
        "error: invalid partition_policy='novc': no such VC in openb_sample_pods.csv; its VCs: default"
    ]
    code, output, _ = sim(tmp_path, "--nodes", "2")
    assert code == 0 and "note: --nodes 2 without --gpus-per-node" in output and f"model database {db}" in output


# what a sweep's cell and a replay may mean differently: a sweep takes lists (comma-separated) where a replay
# takes one value, writes its own outputs, and its --jobs is a worker count (--synth-jobs is the replay's --jobs)
SWEEP_OWN = {"trace", "out", "policy", "placement", "seed", "format", "backfill", "backfill_estimates", "jobs", "quiet"}


def test_every_option_simulate_and_sweep_share_is_declared_once() -> None:
    """A sweep's cell is a replay: an option both commands take has one type, bound, default and help in
    both (simulator/options.py), so the two cannot drift apart."""
    import typer

    root: Any = typer.main.get_command(app)
    ctx = root.context_class(root)
    simulate, sweep = root.get_command(ctx, "simulate"), root.get_command(ctx, "sweep")

    def options(cmd: Any) -> dict[str, Any]:
        return {p.opts[0]: p for p in cmd.params if p.param_type_name == "option"}

    sim, swp = options(simulate), options(sweep)
    shared = [o for o in sim.keys() & swp.keys() if sim[o].name not in SWEEP_OWN]
    assert len(shared) >= 15, sorted(shared)  # the failure, outage, cluster and genie options at least
    for o in shared:
        a, b = sim[o], swp[o]
        for attr in ("help", "default", "min", "max", "multiple", "is_flag"):  # (click's and typer's own)
            assert getattr(a, attr, None) == getattr(b, attr, None), (o, attr)
    assert "--synth-jobs" in swp and swp["--synth-jobs"].help == sim["--jobs"].help
