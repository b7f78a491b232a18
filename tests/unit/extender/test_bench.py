"""``qosmos bench extender`` runs end to end on a small cache (numbers are reported, not asserted)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner


@pytest.mark.slow
def test_bench_extender_smoke() -> None:
    from qosmos.cli import app

    res = CliRunner().invoke(app, ["bench", "extender", "--nodes", "40", "--requests", "5", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert {"p50_ms", "p99_ms", "floor_p99_ms"} <= set(out)
    assert out["nodes"] == 40 and out["p99_ms"] > 0
