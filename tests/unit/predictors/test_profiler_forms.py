"""Samples with measurement metadata, the chosen form in the model database, old files still loading."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Shape
from qosmos.predictors.profiler import (
    Sample,
    fit_file,
    fit_profile,
    read_db,
    read_samples,
    upsert_profiles,
    write_samples,
)
from qosmos.testing.scripts import BENCHMARKS, benchmark

BATCHES = (8, 16, 32, 64, 128, 256)
ENV = (("device", "NVIDIA H200"), ("driver", "570.1"), ("cuda", "12.8"), ("torch", "2.11.0"), ("precision", "bf16"))


def saturating(model: str = "Net", env: tuple[tuple[str, str], ...] = ENV) -> list[Sample]:
    return [Sample(model, b, Shape(1, 1), b / (0.01 + 0.001 * b), 1.5, 5, env) for b in BATCHES]


def test_samples_with_metadata_roundtrip(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    write_samples(path, saturating())
    header = path.read_text().splitlines()[0].split(",")
    assert header[:5] == ["model", "batch", "d_node", "d_gpn", "rate"]
    assert {"rate_spread_pct", "windows", "device", "driver", "cuda", "torch", "precision"} <= set(header)
    back = read_samples(path)
    assert back == saturating()


def test_old_samples_files_load(tmp_path: Path) -> None:
    path = tmp_path / "old.csv"
    path.write_text("model,batch,d_node,d_gpn,rate\nNet,32,1,1,100.5\n")
    (s,) = read_samples(path)
    assert (s.rate, s.spread_pct, s.windows, s.env) == (100.5, None, None, ())
    write_samples(tmp_path / "again.csv", [s])  # no metadata: the old five columns only
    assert (tmp_path / "again.csv").read_text().splitlines()[0] == "model,batch,d_node,d_gpn,rate"
    path.write_text("model,batch,d_node,d_gpn,rate,rate_spread_pct\nNet,32,1,1,100.5,wide\n")
    with pytest.raises(InvalidInput, match=r"old.csv:2: field rate_spread_pct: not a number"):
        read_samples(path)


def test_fit_stores_the_chosen_form_its_error_and_environment(tmp_path: Path) -> None:
    rep = fit_profile(saturating())
    p = rep.profile
    assert p.form == "affine-time" and p.heldout_error == pytest.approx(0.0, abs=1e-9)
    assert rep.candidates["quadratic"] is not None and rep.candidates["quadratic"] > 1.0
    assert dict(p.measured_on)["device"] == "NVIDIA H200" and dict(p.measured_on)["precision"] == "bf16"
    db = tmp_path / "models.json"
    upsert_profiles(db, [p])
    stored = json.loads(db.read_text())["profiles"][0]
    assert stored["form"] == "affine-time" and stored["heldout_error"] == p.heldout_error
    assert stored["measured_on"]["driver"] == "570.1"
    assert read_db(db) == [p]  # knots, measured_on and the form survive the file


def test_interpolated_profile_roundtrips_through_the_db(tmp_path: Path) -> None:
    t = {8: 0.02, 16: 0.02, 32: 0.021, 64: 0.03, 128: 0.045, 256: 0.1}  # bends at 16, 32, 64 and 128
    samples = [Sample("Kink", b, Shape(1, 1), b / t[b]) for b in BATCHES]
    rep = fit_profile(samples)
    assert rep.profile.form == "interpolated" and len(rep.profile.knots) == 6
    db = tmp_path / "models.json"
    upsert_profiles(db, [rep.profile])
    assert json.loads(db.read_text())["profiles"][0]["knots"][0] == [8.0, 0.02]
    (back,) = read_db(db)
    assert back == rep.profile and back.spr(100) == rep.profile.spr(100)


def test_old_db_files_load_as_quadratics(tmp_path: Path) -> None:
    db = tmp_path / "old.json"
    old = {"model": "Old", "k0": 50.0, "k1": 2.0, "k2": 0.0, "gamma": 0.3, "lam": 0.3, "nu": 10.0}
    db.write_text(json.dumps({"format": 1, "profiles": [{**old, "b_min": 8.0, "b_max": 64.0, "source": "x"}]}))
    (p,) = read_db(db)
    assert p.form == "quadratic" and p.heldout_error is None and p.spr(32) == pytest.approx(114.0)
    db.write_text(json.dumps({"profiles": [{**old, "b_max": 64.0, "form": "affine-time"}]}))
    with pytest.raises(InvalidInput, match=r"old.json.*bad profile.*time_a"):
        read_db(db)  # an affine profile without a time line


def test_mixed_precisions_are_refused(tmp_path: Path) -> None:
    fp32 = tuple((k, "fp32" if k == "precision" else v) for k, v in ENV)
    with pytest.raises(InvalidInput, match="precision"):
        fit_profile(saturating()[:3] + saturating(env=fp32)[3:])
    path = tmp_path / "s.csv"
    write_samples(path, saturating("A") + saturating("B", fp32))  # one precision per model is fine
    assert {r.profile.model: dict(r.profile.measured_on)["precision"] for r in fit_file(path)} == {
        "A": "bf16",
        "B": "fp32",
    }


GENIE_FORMS = BENCHMARKS / "genie_forms.py"


def genie_forms(name: str = "genie_forms") -> Any:
    """benchmarks/<name>.py as a module (a script, not a package)."""
    return benchmark(name)


def test_genie_forms_benchmark_on_samples(tmp_path: Path) -> None:
    """benchmarks/genie_forms.py on a samples CSV: the form chosen on every other batch size predicts the rest."""
    import os
    import subprocess
    import sys

    script = GENIE_FORMS
    bench = genie_forms()
    t = {8: 0.02, 16: 0.02, 32: 0.02, 64: 0.02, 128: 0.045, 256: 0.1, 512: 0.2, 1024: 0.4}
    samples = saturating("Line") + [Sample("Kink", b, Shape(1, 1), b / tb) for b, tb in t.items()]
    path = tmp_path / "s.csv"
    write_samples(path, samples)
    result = bench.evaluate(bench.read_samples_csv(path))
    line = result["models"]["Line"]
    assert line["fit_batches"] == [8.0, 32.0, 128.0] and line["heldout_batches"] == [16.0, 64.0, 256.0]
    assert line["selected"]["form"] == "affine-time" and line["selected"]["max_pct"] == pytest.approx(0.0, abs=1e-9)
    assert line["forms"]["quadratic"]["mean_pct"] > 1.0 and line["loo_pct"]["affine-time"] < 1e-9
    kink = result["models"]["Kink"]
    assert kink["forms"]["interpolated"]["max_pct"] < kink["forms"]["quadratic"]["max_pct"]
    assert result["summary"]["selected"]["models"] == 2
    out = subprocess.run(
        [sys.executable, str(script), "--samples", str(path)], capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
    )  # fmt: skip
    assert "Line" in out.stdout and "affine-time" in out.stdout and "target" in out.stdout and "worst at" in out.stdout


def test_genie_forms_scores_only_steady_sizes_when_asked(tmp_path: Path) -> None:
    """--steady: a held-out size whose windows disagree is not ground truth; one that agree is."""
    bench = genie_forms()
    t = {8: 0.02, 16: 0.02, 32: 0.02, 64: 0.02, 128: 0.045, 256: 0.1, 512: 0.2, 1024: 0.4}
    noisy = {16: 0.03}  # a launch-bound size measured slow, with windows 60 % apart
    samples = [
        Sample("Kink", b, Shape(1, 1), b / noisy.get(b, tb), spread_pct=60.0 if b in noisy else 1.0)
        for b, tb in t.items()
    ]
    path = tmp_path / "s.csv"
    write_samples(path, samples)
    data = bench.read_samples_csv(path)
    every = bench.evaluate(data)["models"]["Kink"]
    steady = bench.evaluate(data, steady=bench.window_spreads([path]), max_spread=5.0)["models"]["Kink"]
    assert every["scored_batches"] == [16.0, 64.0, 256.0, 1024.0] and every["selected"]["max_pct"] > 30.0
    # the worst held-out size named, with its signed error (+: predicted faster than measured)
    assert every["selected"]["worst_batch"] == 16.0 and every["selected"]["errors_pct"][16.0] > 30.0
    assert steady["scored_batches"] == [64.0, 256.0, 1024.0]
    assert steady["selected"]["max_pct"] < every["selected"]["max_pct"]


def test_launch_noise_estimates_per_stretch_and_the_committed_study() -> None:
    bench = genie_forms("launch_noise")
    # 6 s of 5 ms steps, the host slow (7.5 ms) for the first second of each 2 s stretch but one
    host, step, t = [], [], 0.0
    while t + 0.0075 < 6.0:
        slow = int(t // 2.0) != 1 and t % 2.0 < 1.0
        t += 0.0075 if slow else 0.005
        host.append(t)
        step.append(0.0075 if slow else 0.005)
    est = bench.estimates(np.array(host), np.array(step))
    assert len(est["lower_quartile"]) == 2  # the last (short) stretch is dropped
    assert est["lower_quartile"] == pytest.approx([0.005, 0.005])  # never fooled by the slow half
    assert est["median_of_windows"][1] == pytest.approx(0.005)
    assert est["median_of_windows"][0] > 0.006  # half its windows slow: the old estimate moved 25 %
    # the committed H200 study: pinned and rated by the lower quartile reproduces best
    result = bench.study(bench.DATA)
    assert len(result["cases"]) == 16 and all(c["steps"] > 400 for c in result["cases"].values())
    spread = result["mean_stretch_spread_pct"]
    assert (
        spread["pinned"]["lower_quartile"] < spread["pinned"]["median_of_windows"] < spread["free"]["median_of_windows"]
    )
    assert spread["pinned"]["lower_quartile"] < 8.0
    assert (
        result["cases"]["pinned ResNet18 64"]["median_step_ms"]
        < 0.7 * result["cases"]["free ResNet18 64"]["median_step_ms"]
    )
    assert set(result["sessions"]) == {"free-interleaved-1", "free-interleaved-2", "pinned-interleaved-1",
                                       "pinned-interleaved-2", "pinned-sequential-1", "pinned-interleaved-others"}  # fmt: skip
