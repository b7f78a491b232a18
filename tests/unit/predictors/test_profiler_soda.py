from __future__ import annotations

import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.genie import Task, ThroughputProfile, processing_rate
from qosmos.extender.core.types import Shape
from qosmos.predictors.profiler import (
    Sample,
    fit_file,
    fit_profile,
    load_modeldb,
    read_db,
    read_samples,
    upsert_profiles,
    write_samples,
)
from qosmos.predictors.soda_cpu import CoreSearch, plateau_curve, run_search, start_cores, table_i_report

TRUE = ThroughputProfile("ToyNet", k0=50.0, k1=3.0, k2=-0.004, gamma=0.8, lam=0.3, nu=10.0, b_min=8, b_max=256)


def synthetic_samples() -> list[Sample]:
    out = [
        Sample("ToyNet", b, Shape(1, 1), processing_rate(Task("ToyNet", b, 1), Shape(1, 1), TRUE))
        for b in (8, 16, 32, 64, 128, 256)  # every local batch of the multi-GPU runs below is measured
    ]
    for s in (Shape(1, 2), Shape(1, 4), Shape(2, 4), Shape(4, 4), Shape(2, 2)):
        out.append(Sample("ToyNet", 256, s, processing_rate(Task("ToyNet", 256, 1), s, TRUE)))
    return out


def test_profiler_recovers_known_coefficients() -> None:
    rep = fit_profile(synthetic_samples())
    p = rep.profile
    for name in ("k0", "k1", "k2", "gamma", "lam"):
        assert getattr(p, name) == pytest.approx(getattr(TRUE, name), abs=1e-6), name
    assert rep.mape < 1e-6 and rep.comm_fitted and rep.single_gpu_runs == 6 and rep.multi_gpu_runs == 5
    # every form was scored; the chosen one is the lowest held-out error and is what the profile evaluates
    assert set(rep.candidates) == {"quadratic", "affine-time", "interpolated", "launch-floor"}
    assert p.heldout_error == min(e for e in rep.candidates.values() if e is not None)


def test_profile_fit_db_roundtrip(tmp_path) -> None:
    csv_path = tmp_path / "samples.csv"
    write_samples(csv_path, synthetic_samples())
    assert len(read_samples(csv_path)) == 11
    db = tmp_path / "models.json"
    upsert_profiles(db, [r.profile for r in fit_file(csv_path)])
    upsert_profiles(db, [r.profile for r in fit_file(csv_path)])  # idempotent: replaces by name
    stored = read_db(db)
    assert len(stored) == 1 and stored[0].gamma == pytest.approx(0.8, abs=1e-6)
    mdb = load_modeldb(db)
    assert mdb.lookup("toynet").how == "exact" and mdb.get("ToyNet").k1 == pytest.approx(3.0, abs=1e-6)
    assert "ResNet50" in mdb  # built-ins stay


def test_profiler_bad_input(tmp_path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("model,batch,rate\nx,1,2\n")
    with pytest.raises(InvalidInput, match=r"bad\.csv:1: field d_node: missing column"):
        read_samples(bad)
    bad.write_text("model,batch,d_node,d_gpn,rate\nx,32,1,1,2\nx,0,1,1,2\n")
    with pytest.raises(InvalidInput, match=r"bad.csv:3: field batch: must be > 0 \(got '0'\)"):
        read_samples(bad)
    bad.write_text("model,batch,d_node,d_gpn,rate\nx,32,1,1,fast\n")
    with pytest.raises(InvalidInput, match=r"bad.csv:2: field rate: not a number \(got 'fast'\)"):
        read_samples(bad)
    with pytest.raises(InvalidInput):
        fit_profile([Sample("a", 64, Shape(2, 2), 10.0)])
    (tmp_path / "db.json").write_text("{}")
    with pytest.raises(InvalidInput):
        read_db(tmp_path / "db.json")


def test_torch_profile_run_optional(tmp_path) -> None:
    pytest.importorskip("torch")
    from qosmos.predictors.profiler import measure_torch

    samples = measure_torch("mlp", [4, 8], steps=2, warmup=1, windows=3, max_warmup=10)
    assert [s.batch for s in samples] == [4, 8] and all(s.rate > 0 for s in samples)
    assert all(s.windows == 3 and s.spread_pct is not None and s.spread_pct >= 0 for s in samples)
    env = dict(samples[0].env)
    assert env["precision"] == "fp32" and env["torch"] and env["device"]
    bf16 = measure_torch("mlp", [4], steps=1, warmup=1, windows=1, max_warmup=5, precision="bf16")
    assert dict(bf16[0].env)["precision"] == "bf16" and bf16[0].rate > 0
    one_by_one = measure_torch("mlp", [8, 4], steps=1, warmup=1, windows=2, max_warmup=5, interleave=False)
    assert [s.batch for s in one_by_one] == [8, 4] and all(s.windows == 2 and s.rate > 0 for s in one_by_one)


# ---- SODA ----------------------------------------------------------------------------------


def test_start_cores() -> None:
    assert start_cores("cv") == 3 and start_cores("NLP") == 5 and start_cores("speech") == 5
    assert start_cores("CV", [("CV", 2), ("CV", 6), ("NLP", 9)]) == 6  # owner's largest in the category
    assert start_cores("NLP", pipeline=True, large_weights=True) == 3
    assert start_cores("CV", complex_iterations=True) == 4
    assert start_cores("CV", [("CV", 1)], pipeline=True) == 1  # never below 1
    assert start_cores("other") == 4


@pytest.mark.parametrize(
    ("start", "best_fit", "tried", "found"),
    [
        (3, 3, [3, 2, 4], 3),  # start is the best fit: fewer hurts, more does not help
        (3, 4, [3, 2, 4, 5], 4),  # go up once
        (3, 2, [3, 2, 1], 2),  # go down while it holds
        (5, 3, [5, 4, 3, 2], 3),
        (3, 6, [3, 2, 4, 5, 6, 7], 6),  # far below: more steps
        (1, 1, [1, 2], 1),  # at the floor: only up is possible
    ],
)
def test_core_search_sequences(start: int, best_fit: int, tried: list[int], found: int) -> None:
    s = run_search(CoreSearch(start), plateau_curve(best_fit))
    assert [c for c, _ in s.trace] == tried and s.best == found and s.done
    assert s.next_cores(50.0) is None


def test_core_search_manual_feedback_and_bounds() -> None:
    s = CoreSearch(4, max_cores=5)
    assert s.next_cores(80.0) == 3
    assert s.next_cores(70.0) == 5  # fewer hurt → try more
    assert s.next_cores(90.0) is None  # improved but at max_cores
    assert s.best == 5 and s.steps == 3
    with pytest.raises(InvalidInput):
        CoreSearch(0)


def test_table_i_steps() -> None:
    rows = table_i_report()
    assert len(rows) == 8
    assert all(r["found"] == r["assumed_best_fit"] and r["steps"] <= 4 for r in rows)


def test_load_modeldb_refuses_a_named_file_that_is_missing_a_folder_or_binary(tmp_path) -> None:
    """A database the caller names must be there (read_db alone reads a missing file as empty)."""
    with pytest.raises(InvalidInput, match=r"nope\.json.*no such model database file"):
        load_modeldb(tmp_path / "nope.json")
    with pytest.raises(InvalidInput, match="is a directory"):
        load_modeldb(tmp_path)
    (tmp_path / "db.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    with pytest.raises(InvalidInput, match=r"db\.bin.*binary file"):
        load_modeldb(tmp_path / "db.bin")
    assert "ResNet50" in load_modeldb(None)  # nothing named: the built-ins
