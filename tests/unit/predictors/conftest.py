"""Shared fixtures: the real data folder ($QOSMOS_SHARED or <repo>/../shared)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer
from qosmos.predictors.cli import register


def _shared_data() -> Path | None:
    env = os.environ.get("QOSMOS_SHARED")
    repo = Path(__file__).resolve().parents[3]
    for c in ([Path(env) / "data", Path(env)] if env else []) + [repo.parent / "shared" / "data"]:
        if (c / "philly").is_dir() and (c / "alibaba-openb-2023").is_dir():
            return c
    return None


@pytest.fixture(scope="session")
def shared_data() -> Path:
    d = _shared_data()
    if d is None:
        pytest.skip("real data not found: set QOSMOS_SHARED or place it at <repo>/../shared/data")
    return d


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    """The predictor commands alone, under a test root (as `qosmos` registers them)."""
    a = typer.Typer()

    @a.callback()
    def _root() -> None:
        """test root"""

    register(a)
    return a
