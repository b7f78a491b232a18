"""Workflows across components as a user runs them through ``qosmos`` (issue 10, "Workflows that must work")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qosmos.cli import app

runner = CliRunner()


def _ok(*args: str) -> str:
    res = runner.invoke(app, list(args))
    assert res.exit_code == 0, res.output + repr(res.exception)
    return res.stdout


def test_profile_fit_then_explain_and_simulate_read_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`qosmos profile fit samples.csv`, then `qosmos explain --model mynet`: no --db anywhere, the one location."""
    db = tmp_path / "config" / "models.json"
    monkeypatch.setenv("QOSMOS_MODELDB", str(db))
    samples = tmp_path / "samples.csv"
    rows = [f"mynet,{b},1,1,{50 + 4 * b - 0.01 * b * b}" for b in (16, 32, 64, 128)]
    samples.write_text("model,batch,d_node,d_gpn,rate\n" + "\n".join(rows) + "\n")
    missing = runner.invoke(app, ["explain", "--model", "mynet", "--batch", "64", "--iters", "100", "--json"])
    assert missing.exit_code == 2 and "no profile" in missing.output  # not profiled yet
    _ok("profile", "fit", str(samples))
    assert db.is_file()
    out = json.loads(_ok("explain", "--model", "mynet", "--batch", "64", "--iters", "100", "--json"))
    assert out["profile"]["origin"] == "file" and out["profile"]["file"] == str(db)
    assert out["profile"]["match"] == "exact" and "samples.csv" in out["profile"]["source"]
    one = next(r for r in out["placements"] if (r["d_node"], r["d_gpn"]) == (1, 1))
    assert one["pr"] == pytest.approx(50 + 4 * 64 - 0.01 * 64**2, rel=1e-6)
    # simulate names the same database it read
    _ok("simulate", "--trace", "builtin:genie", "--out", str(tmp_path / "sim"), "--no-plots", "--quiet")
    notes = json.loads((tmp_path / "sim" / "summary.json").read_text())["notes"]
    assert f"model database {db} over the built-in profiles" in notes
    # the operator reads it too (its GENIE deadlines and SWAF orders use the fitted profile)
    import qosmos.operator.runner as runner_mod

    seen: list[object] = []
    monkeypatch.setattr(runner_mod, "run", seen.append)  # stop before any cluster is contacted
    _ok("operator", "run")
    (opts,) = seen
    assert opts.modeldb.get("mynet").k1 == pytest.approx(4, rel=1e-6)  # type: ignore[attr-defined]
