"""``qosmos bench extender`` runs end to end on a small cache (numbers are reported, not asserted)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from .conftest import extender_cli


@pytest.mark.slow
def test_bench_extender_smoke() -> None:
    res = CliRunner().invoke(extender_cli(), ["bench", "extender", "--nodes", "40", "--requests", "5", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert {"p50_ms", "p99_ms", "floor_p99_ms"} <= set(out)
    assert out["nodes"] == 40 and out["p99_ms"] > 0
    # "requests" counts pods as --requests does; each pod sends a /filter and a /prioritize
    assert out["requests"] == 5 and out["http_requests"] == 10
