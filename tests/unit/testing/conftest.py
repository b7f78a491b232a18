"""Fixtures of the suite's own checks' tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def inner_suite(tmp_path: Path) -> Callable[[str], tuple[int, str]]:
    """Run ``tests/conftest.py`` (the checks every test gets) on a test file of the given source, in
    a pytest of its own: its exit status and output."""

    def run(source: str) -> tuple[int, str]:
        (tmp_path / "conftest.py").write_text((Path(__file__).parents[2] / "conftest.py").read_text())
        (tmp_path / "test_inner.py").write_text(source)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env={**os.environ, "PYTHONSAFEPATH": "1"},
        )
        return done.returncode, done.stdout + done.stderr

    return run
