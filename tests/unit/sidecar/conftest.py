"""Fake kubelet cgroup trees for the node agent's unit tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from qosmos.sidecar.fakes import make_v1_tree


@pytest.fixture
def v1_tree(tmp_path: Path) -> Callable[..., Path]:
    def build(pods: dict[str, tuple[str, int]], cpus: str = "0-3") -> Path:
        return make_v1_tree(tmp_path / "cgroup", pods, cpus)

    return build
