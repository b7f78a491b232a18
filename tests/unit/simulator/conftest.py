"""Helpers for the simulator tests: tiny traces written to tmp files."""

from __future__ import annotations

from pathlib import Path

import pytest


def write(path: Path, text: str) -> Path:
    path.write_text(text.strip() + "\n")
    return path


@pytest.fixture
def tiny(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Factory: native jobs CSV + nodes CSV -> path of the jobs file."""

    def make(jobs: str, nodes: str = "name,gpus\nn0,1") -> Path:
        write(tmp_path / "nodes.csv", nodes)
        return write(tmp_path / "jobs.csv", jobs)

    return make
