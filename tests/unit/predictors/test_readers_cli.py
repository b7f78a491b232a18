"""The predictor commands meet bad files as `qosmos simulate` does: exit 2, one line naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

runner = CliRunner()


def _clean_fail(app: typer.Typer, args: list[str], *expected: str) -> str:
    res = runner.invoke(app, args)
    out = res.output
    assert res.exit_code == 2, out + repr(res.exception)
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1, out
    for e in expected:
        assert e in out, out
    return out


SERIES = "time,active,total\n2017-10-03 00:00:00,312,420\n2017-10-03 00:01:00,{},420\n"


@pytest.mark.parametrize(
    ("active", "expected"),
    [("-40", "s.csv:3: field active: must be >= 0 (got '-40')"), ("99999", "more than the 420 nodes in total")],
)
def test_predict_ces_rejects_impossible_node_counts(
    app: typer.Typer, tmp_path: Path, active: str, expected: str
) -> None:
    s = tmp_path / "s.csv"
    s.write_text(SERIES.format(active))
    args = ["predict", "ces", "--series", str(s), "--train-until", "2017-10-03", "--eval-from", "2017-10-03",
            "--eval-to", "2017-10-03", "--out", str(tmp_path / "o")]  # fmt: skip
    _clean_fail(app, args, expected)


def test_predictor_commands_on_a_directory_binary_or_non_utf8_file(app: typer.Typer, tmp_path: Path) -> None:
    binary = tmp_path / "pods.bin"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00")
    latin = tmp_path / "latin.csv"
    latin.write_bytes("runtime\n1\nd\xe9j\xe0\n".encode("latin-1", errors="ignore") + b"\xe9\n")
    for args, name, reason in (
        (["predict", "qssf", "--pods", str(tmp_path)], str(tmp_path), "is a directory"),
        (["predict", "qssf", "--pods", str(binary)], "pods.bin", "binary file"),
        (["predict", "runtime", "--data", "openb", "--path", str(tmp_path)], str(tmp_path), "is a directory"),
        (["predict", "runtime", "--data", "philly", "--path", str(latin)], "latin.csv", "not UTF-8 text"),
    ):
        _clean_fail(app, args, name, reason)


def test_predict_qssf_rejects_rows_simulate_rejects(app: typer.Typer, tmp_path: Path) -> None:
    pods = tmp_path / "pods.csv"
    header = (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
    )
    pods.write_text(
        f"\ufeff{header}\np0,1000,1024,1,1000,,LS,Running,10,110,20\np1,1000,1024,1,1000,,LS,Running,10,5,\n"
    )
    out = _clean_fail(
        app, ["predict", "qssf", "--pods", str(pods)], "pods.csv:3: field deletion_time: before creation_time (got '5')"
    )
    assert "{" not in out  # never a row printed as a dict
    pods.write_text(f"{header}\np0,1000,1024,1,1000,,LS,Running,10,110\n")
    _clean_fail(app, ["predict", "qssf", "--pods", str(pods)], "pods.csv:2: field scheduled_time: truncated row")
