"""``qosmos explain`` end to end through the CLI."""

from __future__ import annotations

import json

import pytest
from qosmos.extender.core import genie
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.types import Platform
from typer.testing import CliRunner

from qosmos.cli import app

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
    assert set(out) >= {"placements", "chosen", "ect", "deadline", "waiting_allowance"}
    assert len(out["placements"]) == 16
    assert set(out["placements"][0]) == {"d_node", "d_gpn", "pr", "lat", "cost", "cer", "feasible"}
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
