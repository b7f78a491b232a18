"""Bad options and arguments of any ``qosmos`` command are one ``error:`` line and exit 2, as every
other bad input is (issue 10, "Clean errors everywhere"); typer drew a five-line box with the usage."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from qosmos.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["simulate", "--trace", "builtin:genie", "--out", "o", "--tick", "-1"], "Invalid value for '--tick'"),
        (["simulate", "--trace", "builtin:genie"], "Missing option '--out'"),
        (["simulate", "--trace", "builtin:genie", "--out", "o", "--bogus"], "No such option: --bogus"),
        (["simulate", "--trace", "builtin:genie", "--out", "o", "--nodes", "0"], "Invalid value for '--nodes'"),
        (["predict", "qssf", "--rounds", "0"], "Invalid value for '--rounds'"),
        (["extender", "serve", "--grpc-port", "x"], "Invalid value for '--grpc-port'"),
        (["profile", "builtin", "--lucid", "empty.csv"], "Missing option '--out'"),
        (["bogus"], "No such command 'bogus'"),
    ],
)
def test_usage_errors_are_one_line(args: list[str], needle: str) -> None:
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], res.output
    assert "--help)" in lines[0]  # where to look next


def test_a_group_alone_still_shows_its_help() -> None:
    res = runner.invoke(app, ["extender"])
    assert res.exit_code == 2 and "Usage:" in res.output and "serve" in res.output
    assert runner.invoke(app, ["--version"]).exit_code == 0


def test_the_installed_command_too() -> None:
    script = Path(sys.executable).with_name("qosmos")
    exe = str(script) if script.exists() else shutil.which("qosmos")
    assert exe, "the qosmos console script is not installed"
    proc = subprocess.run(
        [exe, "simulate", "--trace", "builtin:genie", "--out", "o", "--tick", "-1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "error: Invalid value for '--tick': Input should be greater than or equal to 0 (see qosmos simulate --help)"
    ]
