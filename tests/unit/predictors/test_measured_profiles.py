"""The GPU-measured built-ins (issue 23 §4): samples committed under predictors/measured, the module
generated from them, and the measuring script's plan."""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import typer
from qosmos.extender.core.inference_profiles import Device, InferenceProfiles
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.profiles_builtin import BUILTIN_PROFILES
from qosmos.extender.core.profiles_measured import MEASURED_INFERENCE_CURVES, MEASURED_PROFILES
from qosmos.extender.core.throughput import FORMS
from qosmos.extender.core.types import Shape
from qosmos.predictors.genie_profiles import MEASURED_ROOT, fit_measured, render_measured_module
from qosmos.predictors.profiler import Sample, fit_file, fit_profile, read_samples, write_samples
from qosmos.predictors.timing import window_steps
from qosmos.testing.generated import generated_apart
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[3]
MODULE = REPO / "extender" / "core" / "profiles_measured.py"
runner = CliRunner()


def test_the_committed_module_is_what_the_committed_samples_give() -> None:
    """Edit neither by hand: `qosmos profile builtin --measured predictors/measured --out <MODULE>`."""
    assert generated_apart(MODULE.read_text(), render_measured_module(*fit_measured(MEASURED_ROOT))) == []


@pytest.mark.parametrize("gpu", ["NVIDIA H200", "NVIDIA H100 80GB HBM3"])
def test_every_measurable_builtin_model_has_a_profile_of_each_measured_gpu(gpu: str) -> None:
    mine = [p for p in MEASURED_PROFILES if dict(p.measured_on)["device"] == gpu]
    measured = {p.model for p in mine}
    assert measured == {p.model for p in BUILTIN_PROFILES} - {"PPO", "TD3"}  # RL: the step is the environment
    for p in mine:
        on = dict(p.measured_on)
        assert on["precision"] == "fp32" and on["torch"].startswith("2.11")
        assert p.heldout_error is not None and p.form in FORMS
    db = ModelDB.builtin()
    own = db.lookup("ResNet50", gpu.split()[1])  # a node's label names the model: "H200", "H100"
    assert own.gpu == "own" and own.profile.gpu_model == gpu and own.profile.heldout_error < 5
    assert db.lookup("ResNet50").profile in BUILTIN_PROFILES  # no GPU asked: the Lucid reference
    assert db.lookup("ResNet50", "V100").profile in BUILTIN_PROFILES


def test_the_measured_inference_curves() -> None:
    gpu = {c.model for c in MEASURED_INFERENCE_CURVES if c.device is Device.GPU}
    cpu = {(c.model, c.cores) for c in MEASURED_INFERENCE_CURVES if c.device is Device.CPU}
    assert {"ResNet50", "MobileNetV3", "ResNet18", "BERT"} <= gpu
    assert {("ResNet50", n) for n in (2, 4, 8, 16)} <= cpu
    found = InferenceProfiles.builtin().gpu("ResNet50", "H200")
    assert found is not None and found.curve.batches[-1] == 256 and 0.03 < found.curve.seconds[-1] < 0.04


def test_the_gpu_script_measures_the_whole_builtin_list() -> None:
    spec = importlib.util.spec_from_file_location("gpu_profile", REPO / "hack" / "gpu" / "profile.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)  # no torch needed to read the plan
    planned = {m for m, _ in script.TRAINING}
    assert planned | {"PPO", "TD3"} == {p.model for p in BUILTIN_PROFILES}
    assert all(len(set(b)) >= 12 for _, b in script.TRAINING)  # six to fit, six held out


def test_repeated_sessions_count_once_at_their_median() -> None:
    env = (("device", "NVIDIA H200"), ("precision", "fp32"))
    first = [Sample("Net", b, Shape(1, 1), b / (0.01 + 0.001 * b), None, None, env) for b in (8, 16, 32, 64, 128)]
    slow = [
        Sample("Net", 32, Shape(1, 1), 100.0, None, None, env),
        Sample("Net", 32, Shape(1, 1), 90.0, None, None, env),
    ]
    report = fit_profile([*first, *slow])
    assert report.single_gpu_runs == 7
    knots = dict(report.profile.knots)
    # three runs at batch 32: the median rate is the slow sessions' 100 samples/s (not the mean, not all three)
    assert report.profile.form == "interpolated" or knots == {}
    if knots:
        assert len(knots) == 5 and knots[32.0] == pytest.approx(32 / 100.0)


def test_window_steps_lengthen_short_windows() -> None:
    assert window_steps(5, 0.005, 0.25) == 250  # 1 ms steps: 250 of them fill 0.25 s
    assert window_steps(5, 2.0, 0.25) == 5  # long steps: never fewer than asked
    assert window_steps(5, 0.0, 0.25) == 5


def test_a_newer_run_of_a_gpu_supersedes_the_older_one_model_by_model(tmp_path: Path) -> None:
    root = tmp_path / "measured"
    for run in ("h200-2026-11-26", "h200-2026-11-29"):
        shutil.copytree(MEASURED_ROOT / run, root / run)
    profiles, curves = fit_measured(root)
    assert len(profiles) == 12 and {p.source.split(":")[0] for p in profiles} == {"predictors/measured/h200-2026-11-29"}
    assert {c.meta["source"].split(":")[0] for c in curves} == {"predictors/measured/h200-2026-11-29"}
    # a later run of one model (named so that it sorts first: the samples' date decides, not the name)
    old = [s for s in read_samples(MEASURED_ROOT / "h200-2026-11-26" / "training.csv") if s.model == "VGG"]
    later = [
        replace(s, env=tuple((k, "2026-12-01T00:00:00Z" if k == "measured_at" else v) for k, v in s.env)) for s in old
    ]
    (root / "a-rerun").mkdir()
    write_samples(root / "a-rerun" / "training.csv", later)
    by_model = {p.model: p for p in fit_measured(root)[0]}
    assert len(by_model) == 12 and by_model["VGG"].source.startswith("predictors/measured/a-rerun:")
    assert by_model["ResNet18"].source.startswith("predictors/measured/h200-2026-11-29:")


def test_profile_builtin_measured_and_fit_of_several_files(app: typer.Typer, tmp_path: Path) -> None:
    root = tmp_path / "measured"
    shutil.copytree(MEASURED_ROOT / "h200-2026-11-29", root / "h200-2026-11-29")
    out = tmp_path / "mod.py"
    res = runner.invoke(app, ["profile", "builtin", "--measured", str(root), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "12 throughput profiles" in res.output
    kept = [ln for ln in MODULE.read_text().splitlines() if "measured/h100-" not in ln]  # the H200's alone
    assert generated_apart("\n".join(kept), out.read_text()) == []
    res = runner.invoke(app, ["profile", "builtin", "--measured", str(root), "--lucid", str(out), "--out", str(out)])
    assert res.exit_code == 2 and "exactly one" in res.output
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    env = (("device", "NVIDIA H200"), ("precision", "fp32"))
    write_samples(a, [Sample("Net", x, Shape(1, 1), x / (0.01 + 0.001 * x), None, None, env) for x in (8, 16, 32, 64)])
    write_samples(b, [Sample("Net", 32, Shape(1, 1), 1000.0, None, None, env)])
    db = tmp_path / "db.json"
    res = runner.invoke(app, ["profile", "fit", str(a), str(b), "--db", str(db), "--json"])
    assert res.exit_code == 0, res.output
    assert fit_file([a, b])[0].single_gpu_runs == 5
