"""``qosmos operator run`` refuses bad input in one line, exit 2, before touching any cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

QOSMOS = [sys.executable, "-P", "-m", "qosmos", "operator", "run"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--kubeconfig", "/no/such/kubeconfig"], "kubeconfig"),
        (["--metrics-port", "70000"], "metrics_port"),
        (["--interval", "0"], "interval"),
        (["--log-level", "LOUD"], "log_level"),
        (["--db", "/no/such/models.json"], "db"),
        (["--peering", "Not_A_Name"], "peering"),
    ],
)
def test_bad_options_are_one_line_exit_2(args: list[str], field: str, tmp_path: Path) -> None:
    proc = subprocess.run([*QOSMOS, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and field in lines[0], proc.stderr
