"""The layers (issue 9 §6): the import-linter contracts hold, so a forbidden import fails pytest too.

hack/test.sh runs the same check before pytest; this keeps a plain `pytest` honest as well.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "layers.py"), "imports"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    # every contract in pyproject.toml was checked on the real graph, none skipped or misconfigured
    assert f"Contracts: {len(contracts)} kept, 0 broken." in report, report
    assert len(contracts) >= 3
