"""``qosmos explain`` end to end through the CLI."""

from __future__ import annotations

import json

import pytest
import typer
from qosmos.extender.cli import register
from qosmos.extender.core import genie
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.types import Platform
from typer.testing import CliRunner

# The extender's commands alone, as `qosmos` registers them (independent of other components' CLIs).
app = typer.Typer()
register(app)
runner = CliRunner()


def test_explain_json_contract_matches_the_core() -> None:
    result = runner.invoke(
        app,
        [
            "explain",
            "--model",
            "ResNet50",
            "--batch",
            "256",
            "--iters",
            "2000",
            "--kind",
            "training",
            "--qos",
            "prior",
            "--nodes",
            "4",
            "--gpus-per-node",
            "4",
            "--theta",
            "0.4",
            "--submit",
            "0",
            "--now",
            "100",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out) == {
        "placements",
        "chosen",
        "ect",
        "deadline",
        "waiting_allowance",
        "max_placement_gpus",
        "notes",
        "profile",
        "throughput",
    }
    assert out["throughput"] == {
        "form": "quadratic",  # the built-ins are Eq. 7 (the seed's reference)
        "heldout_error": None,
        "measured_range": [32.0, 128.0],
        "batch_outside_range": True,  # b = 256 on one GPU
        "measured_on": {},
    }
    assert len(out["placements"]) == 16
    assert set(out["placements"][0]) == {"d_node", "d_gpn", "pr", "lat", "cost", "cer", "feasible", "extrapolated"}
    assert out["profile"]["origin"] == "builtin" and out["profile"]["match"] == "exact"
    expected = genie.evaluate_placements(
        genie.Task("ResNet50", 256, 2000, qos="prior"), ModelDB.builtin().get("ResNet50"), Platform(4, 4), now=100
    )
    assert out["chosen"] == {"d_node": expected.chosen.shape.d_node, "d_gpn": expected.chosen.shape.d_gpn}
    assert out["waiting_allowance"] == pytest.approx(expected.waiting_allowance)
    assert out["deadline"] == pytest.approx(out["ect"])  # submitted at 0


def test_explain_with_explicit_coefficients_and_table_output() -> None:
    result = runner.invoke(
        app,
        [
            "explain",
            "--coeffs",
            "10,2,0",
            "--gamma",
            "0.5",
            "--lam",
            "0.2",
            "--nu",
            "5",
            "--batch",
            "32",
            "--iters",
            "100",
            "--qos",
            "urgent",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    one = next(p for p in out["placements"] if (p["d_node"], p["d_gpn"]) == (1, 1))
    assert one["pr"] == pytest.approx(74.0) and one["lat"] == pytest.approx(3200 / 74 + 5)
    assert out["ect"] == 0.0 and out["waiting_allowance"] < 0
    table = runner.invoke(app, ["explain", "--model", "LSTM", "--batch", "128", "--iters", "10"])
    assert table.exit_code == 0 and "waiting allowance" in table.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model", "ResNet50", "--batch", "0", "--iters", "10"], "batch"),
        (["--model", "ResNet50", "--batch", "8", "--iters", "10", "--qos", "vip"], "qos"),
        (["--batch", "8", "--iters", "10"], "model/coeffs"),
        (["--coeffs", "1,2", "--batch", "8", "--iters", "10"], "coeffs"),
        (["--model", "ResNet50", "--batch", "8", "--iters", "10", "--nodes", "0"], "nodes"),
    ],
)
def test_explain_bad_input_exits_2_with_the_field(args: list[str], needle: str) -> None:
    result = runner.invoke(app, ["explain", *args])
    assert result.exit_code == 2
    assert needle in result.output


def _json(*args: str) -> dict:
    result = runner.invoke(app, ["explain", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_explicit_coefficients_are_eq7_as_given() -> None:
    # sPR(b') = 100 + 2 b' - 0.01 b'^2; b = 150 on one GPU: 175 samples/s (not held at the vertex's 200)
    out = _json("--coeffs", "100,2,-0.01", "--batch", "150", "--iters", "10", "--nodes", "1", "--gpus-per-node", "1")
    (row,) = out["placements"]
    assert row["pr"] == pytest.approx(175.0) and row["lat"] == pytest.approx(1500 / 175 + genie.DEFAULT_NU)
    assert row["extrapolated"] is False
    assert out["profile"] == {
        "origin": "coefficients",
        "match": None,
        "requested": None,
        "matched": None,
        "source": "explicit coefficients",
        "file": None,
        "overrides": [],
        "gpu_model": None,
        "gpu_match": None,
        "gpu_note": None,
    }
    # b' = 300 on one GPU: Eq. 7 is negative there, PR 0, latency unreachable; 2 GPUs (b' = 150) run
    out = _json("--coeffs", "100,2,-0.01", "--batch", "300", "--iters", "10", "--nodes", "1", "--gpus-per-node", "2")
    rows = {(r["d_node"], r["d_gpn"]): r for r in out["placements"]}
    assert rows[1, 1]["pr"] == 0 and rows[1, 1]["lat"] is None and not rows[1, 1]["feasible"]
    assert rows[1, 2]["pr"] > 0 and out["chosen"] == {"d_node": 1, "d_gpn": 2}
    assert any("PR 0" in n for n in out["notes"])


def test_database_profiles_mark_extrapolated_rows() -> None:
    # ResNet50's built-in profile was measured at local batches 32..128
    out = _json("--model", "ResNet50", "--batch", "1024", "--iters", "10", "--nodes", "2", "--gpus-per-node", "8")
    marks = {(r["d_node"], r["d_gpn"]): r["extrapolated"] for r in out["placements"]}
    assert marks[1, 1] and marks[1, 4]  # b' = 1024, 256 > 128
    assert not marks[1, 8] and not marks[2, 8]  # b' = 128, 64
    assert any("extrapolated" in n and "[32, 128]" in n for n in out["notes"])
    p = ModelDB.builtin().get("ResNet50")
    one = next(r for r in out["placements"] if (r["d_node"], r["d_gpn"]) == (1, 1))
    assert one["pr"] == pytest.approx(p.k0 + p.k1 * 128 + p.k2 * 128**2)  # held at sPR(b_max)
    table = runner.invoke(app, ["explain", "--model", "ResNet50", "--batch", "1024", "--iters", "10"])
    assert table.exit_code == 0 and "extrapolated" in table.stdout


def test_provenance_builtin_alias_similar_and_file(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from qosmos.predictors.profiler import write_db

    base = ("--batch", "64", "--iters", "10")
    assert _json("--model", "AlexNet", *base)["profile"]["match"] == "alias"
    similar = _json("--model", "resnet-5O", *base)["profile"]
    assert similar["match"] == "similar" and similar["matched"] == "ResNet50" and similar["origin"] == "builtin"
    # a fitted database (e.g. `qosmos profile fit`) overlays the built-ins; explain reads it
    db = tmp_path / "models.json"
    write_db(db, [genie.ThroughputProfile("mynet", 50.0, 1.0, 0.0, b_min=8, b_max=64, source="fit of my runs")])
    mine = _json("--model", "mynet", "--db", str(db), *base)
    assert mine["profile"]["origin"] == "file" and mine["profile"]["file"] == str(db)
    assert mine["placements"][0]["pr"] == pytest.approx(50 + 64)
    monkeypatch.setenv("QOSMOS_MODELDB", str(db))
    assert _json("--model", "mynet", *base)["profile"]["source"] == "fit of my runs"
    assert _json("--model", "ResNet50", *base)["profile"]["origin"] == "builtin"
    missing = runner.invoke(app, ["explain", "--model", "mynet", "--db", str(tmp_path / "nope.json"), *base])
    assert missing.exit_code == 2 and "nope.json" in missing.output


def test_explain_names_the_form_its_heldout_error_and_the_measured_range(tmp_path) -> None:
    """A `qosmos profile fit` profile in the affine-time form: explain says so, and its PR is that form's."""
    from qosmos.predictors.profiler import write_db

    db = tmp_path / "models.json"
    env = (("device", "NVIDIA H200"), ("precision", "bf16"))
    p = genie.ThroughputProfile(
        "mynet", 0.0, 0.0, 0.0, b_min=8, b_max=64, form="affine-time", time_a=0.01, time_c=0.001, heldout_error=1.25,
        measured_on=env,
    )  # fmt: skip
    write_db(db, [p])
    inside = _json("--model", "mynet", "--db", str(db), "--batch", "32", "--iters", "10", "--nodes", "1")
    assert inside["throughput"] == {
        "form": "affine-time",
        "heldout_error": 1.25,
        "measured_range": [8.0, 64.0],
        "batch_outside_range": False,
        "measured_on": {"device": "NVIDIA H200", "precision": "bf16"},
    }
    single = next(r for r in inside["placements"] if (r["d_node"], r["d_gpn"]) == (1, 1))
    assert single["pr"] == pytest.approx(32 / (0.01 + 0.001 * 32))  # sPR = b'/t(b'), not Eq. 7's k's (all 0)
    outside = _json("--model", "mynet", "--db", str(db), "--batch", "256", "--iters", "10", "--nodes", "1")
    assert outside["throughput"]["batch_outside_range"] is True
    assert any("slope" in n for n in outside["notes"])  # the note says how this form extrapolates
    table = runner.invoke(app, ["explain", "--model", "mynet", "--db", str(db), "--batch", "256", "--iters", "10"])
    assert table.exit_code == 0
    text = " ".join(table.stdout.split())
    assert "form affine-time" in text and "held-out error 1.25 %" in text and "outside" in text
    coeffs = _json("--coeffs", "10,2,0", "--batch", "32", "--iters", "10")["throughput"]
    assert coeffs["form"] == "quadratic" and coeffs["measured_range"] is None and not coeffs["batch_outside_range"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--batch", str(2**62), "--iters", str(2**62)], "batch"),
        (["--batch", "1000000", "--iters", str(10**10)], "iters"),
        (["--batch", "1000000", "--iters", "100", "--nodes", "100000", "--gpus-per-node", "1024"], "gpus_per_node"),
        (["--batch", "8", "--iters", "10", "--nodes", str(2**31 - 1)], "nodes"),
        (["--batch", "8", "--iters", "10", "--now", "1e300"], "now"),
        # 16M samples x 1e9 iterations: ~1e13 s on the whole platform, not "feasible"
        (["--batch", str(2**24), "--iters", str(10**9)], "more than a year"),
    ],
)
def test_absurd_inputs_exit_2(args: list[str], needle: str) -> None:
    result = runner.invoke(app, ["explain", "--model", "ResNet50", *args])
    assert result.exit_code == 2, result.output
    assert needle in result.output and "Traceback" not in result.output


def test_big_platform_is_bounded_and_says_so() -> None:
    import re
    import subprocess
    import sys
    import time

    # The child reports its own peak (VmHWM): getrusage's maxrss of a child keeps the parent's resident
    # size at the fork (Linux carries the old mm's high-water mark across exec), so it would measure pytest.
    code = (
        "import typer; from qosmos.extender.cli import register; app = typer.Typer(); register(app); "
        "app(['explain', '--model', 'ResNet50', '--batch', '1000000', '--iters', '100', '--nodes', '100000', "
        "'--gpus-per-node', '32', '--json'], standalone_mode=False); import sys; "
        "sys.stderr.write(next(line for line in open('/proc/self/status') if line.startswith('VmHWM')))"
    )
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["max_placement_gpus"] == genie.MAX_PLACEMENT_GPUS
    assert max(r["d_node"] * r["d_gpn"] for r in out["placements"]) == genie.MAX_PLACEMENT_GPUS
    assert any("limited to 2,048 GPUs" in n for n in out["notes"])
    assert len(out["placements"]) == genie.count_shapes(Platform(100_000, 32), 1_000_000)
    peak = re.search(r"VmHWM:\s+(\d+) kB", proc.stderr)
    assert peak, proc.stderr
    peak_mb = int(peak[1]) / 1024
    assert peak_mb < 600, peak_mb
    assert wall < 60
    # the table shows the best rows and says how many there were
    table = runner.invoke(
        app, ["explain", "--model", "ResNet50", "--batch", "100000", "--iters", "1", "--nodes", "1000", "--rows", "5"]
    )
    assert table.exit_code == 0, table.output
    assert "showing 5 of" in table.stdout or "showing 6 of" in table.stdout


def test_the_gpu_model_picks_the_measured_profile_and_says_so() -> None:
    """Issue 23 §4: --gpu-model H200 uses the H200 measurement; none, or a V100, the Lucid reference."""
    args = ("--model", "ResNet50", "--batch", "256", "--iters", "100", "--nodes", "1", "--gpus-per-node", "1")
    h200 = _json(*args, "--gpu-model", "H200")
    assert h200["profile"]["gpu_match"] == "own" and h200["profile"]["gpu_model"] == "NVIDIA H200"
    assert "hack/gpu" in h200["profile"]["source"]
    plain, v100 = _json(*args), _json(*args, "--gpu-model", "V100")
    assert plain["profile"]["gpu_match"] == v100["profile"]["gpu_match"] == "reference"
    assert "Lucid" in plain["profile"]["source"] and "no V100 profile" in v100["profile"]["gpu_note"]
    # the H200 measured ~1065 samples/s at batch 256; Lucid's reference is a slower, older GPU
    assert h200["placements"][0]["pr"] > 1.5 * plain["placements"][0]["pr"]
