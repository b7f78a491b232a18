"""Inference samples on disk (issue 23 §1, §3-4): the CSV reader's errors, curves from samples, the model
database's ``inference_profiles`` key beside the throughput profiles, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.genie import ThroughputProfile
from qosmos.extender.core.inference_profiles import Device
from qosmos.predictors.inference_profiles import (
    curves_from_samples,
    load_inference_profiles,
    read_inference_db,
    read_inference_samples,
    upsert_inference_profiles,
    write_inference_samples,
)
from qosmos.predictors.profiler import read_db, upsert_profiles
from typer.testing import CliRunner

from qosmos.cli import app

GOOD = """model,device,gpu_model,cores,batch,compute_s,torch,measured,precision
Toy,gpu,A100,,10,0.010,2.11,2026-11,fp32
Toy,gpu,A100,,50,0.030,2.11,2026-11,fp32
Toy,gpu,A100,,50,0.034,2.11,2026-11,fp32
Toy,cpu,A100,8,4,0.040,2.11,2026-11,fp32
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "inf.csv"
    p.write_text(text)
    return p


def test_samples_to_curves(tmp_path: Path) -> None:
    samples = read_inference_samples(write(tmp_path, GOOD))
    assert len(samples) == 4 and samples[0].meta == {"torch": "2.11", "measured": "2026-11", "precision": "fp32"}
    gpu, cpu = sorted(curves_from_samples(samples, source="t"), key=lambda c: c.device.value, reverse=True)
    assert (gpu.device, gpu.batches, gpu.seconds) == (Device.GPU, (10, 50), (0.010, 0.032))  # median of two
    assert (cpu.device, cpu.cores, cpu.batches) == (Device.CPU, 8, (4,))
    assert gpu.meta["source"] == "t"
    again = tmp_path / "again.csv"
    write_inference_samples(again, samples)
    assert read_inference_samples(again) == samples


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ("Toy,tpu,A100,,10,0.01", "inf.csv:2: field device: expected gpu or cpu (got 'tpu')"),
        ("Toy,gpu,,,10,0.01", "inf.csv:2: field gpu_model: a GPU row needs the GPU model"),
        ("Toy,cpu,A100,0,10,0.01", "inf.csv:2: field cores: a CPU row needs the cores"),
        ("Toy,gpu,A100,,0,0.01", "inf.csv:2: field batch: must be >= 1"),
        ("Toy,gpu,A100,,10,fast", "inf.csv:2: field compute_s: not a number (got 'fast')"),
        ("Toy,gpu,A100,,10,0", "inf.csv:2: field compute_s: must be > 0 seconds"),
        (",gpu,A100,,10,0.01", "inf.csv:2: field model: missing model name"),
    ],
)
def test_loader_errors_name_line_and_field(tmp_path: Path, row: str, needle: str) -> None:
    p = write(tmp_path, "model,device,gpu_model,cores,batch,compute_s\n" + row + "\n")
    with pytest.raises(InvalidInput) as err:
        read_inference_samples(p)
    assert needle in str(err.value)


def test_a_missing_column_is_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"inf\.csv:1: field compute_s: missing column"):
        read_inference_samples(write(tmp_path, "model,device,gpu_model,cores,batch\nToy,gpu,A100,,1\n"))


def test_the_database_keeps_both_kinds(tmp_path: Path) -> None:
    db = tmp_path / "models.json"
    upsert_profiles(db, [ThroughputProfile(model="Toy", k0=100.0, k1=0.0, k2=0.0)])
    curves = curves_from_samples(read_inference_samples(write(tmp_path, GOOD)))
    upsert_inference_profiles(db, curves)
    assert [p.model for p in read_db(db)] == ["Toy"]  # the throughput profiles are untouched
    assert read_inference_db(db) == sorted(curves, key=lambda c: (c.model.lower(), c.device.value))
    # writing throughput profiles again keeps the inference ones (profiler.write_db)
    upsert_profiles(db, [ThroughputProfile(model="Other", k0=50.0, k1=0.0, k2=0.0)])
    assert len(read_inference_db(db)) == 2 and len(read_db(db)) == 2
    loaded = load_inference_profiles(db)
    assert loaded.gpu("Toy", "A100") is not None and loaded.gpu("ResNet50", "H200") is not None  # + built-ins
    data = json.loads(db.read_text())
    assert set(data) >= {"profiles", "inference_profiles"}
    assert data["inference_profiles"][0]["points"]


def test_an_inference_only_file_is_a_database(tmp_path: Path) -> None:
    db = tmp_path / "models.json"
    upsert_inference_profiles(db, curves_from_samples(read_inference_samples(write(tmp_path, GOOD))))
    assert read_db(db) == [] and len(read_inference_db(db)) == 2
    db.write_text(json.dumps({"profiles": [], "inference_profiles": [{"model": "Toy"}]}))
    with pytest.raises(InvalidInput, match="inference_profiles\\[0\\]"):
        read_inference_db(db)


def test_profile_inference_then_explain_inference(tmp_path: Path) -> None:
    runner = CliRunner()
    db = tmp_path / "models.json"
    res = runner.invoke(app, ["profile", "inference", str(write(tmp_path, GOOD)), "--db", str(db)])
    assert res.exit_code == 0, res.output
    args = ["explain", "inference", "--model", "Toy", "--gpu-model", "A100", "--cpu-cores", "8", "--db", str(db)]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert set(out) == {"model", "qos_target_ms", "gpu_model", "thresholds", "notes"}
    th = out["thresholds"]
    assert set(th) == {
        "gpu_switch_batch",
        "gpu_compute_ms",
        "gpu_replica_max_qps",
        "cpu_max_batch",
        "cpu_compute_ms",
        "cpu_replica_max_qps",
        "cpu_cores_per_replica",
    }
    # by hand: GPU 10 ms at 10, 32 ms at 50 -> C(B) <= 100 ms at B = 50 + 68 / 0.55 = 173; CPU 10 ms a query
    assert th["gpu_switch_batch"]["value"] == 173 and th["gpu_switch_batch"]["source"].startswith("profile A100")
    assert th["cpu_max_batch"]["value"] == 10 and th["cpu_max_batch"]["source"].startswith("profile 8 cores")
    res = runner.invoke(app, [*args, "--gpu-switch-batch", "20", "--json"])
    assert json.loads(res.output)["thresholds"]["gpu_switch_batch"] == {"value": 20, "source": "override"}
    res = runner.invoke(app, ["explain", "inference", "--model", "ResNet50", "--qos-target-ms", "-1"])
    assert res.exit_code == 2
