"""Fixtures for the extender's unit tests: hand-built caches and pods."""

from __future__ import annotations

from typing import Any

import pytest
from qosmos.extender.cache import ClusterCache
from qosmos.extender.core.types import Node
from qosmos.extender.service import ExtenderService


def make_pod(
    name: str = "p",
    gpus: int = 1,
    uid: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    node: str = "",
    cpu: str = "1",
    memory: str = "1Gi",
) -> dict[str, Any]:
    """A Pod object as kube-scheduler sends it."""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "resources": {
                    "requests": {"cpu": cpu, "memory": memory, "nvidia.com/gpu": str(gpus)},
                    "limits": {"nvidia.com/gpu": str(gpus)},
                },
            }
        ]
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid or f"uid-{name}",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": spec,
    }


def small_nodes() -> list[Node]:
    """Eight nodes: two switches, two VCs, three GPU models, 2-8 GPUs."""
    return [
        Node("a1", 8, "V100M32", 96000, 512000, "vc-a", "sw-0", "r0"),
        Node("a2", 8, "V100M32", 96000, 512000, "vc-a", "sw-0", "r0"),
        Node("a3", 4, "V100M16", 64000, 262144, "vc-a", "sw-1", "r1"),
        Node("a4", 2, "T4", 32000, 131072, "vc-a", "sw-1", "r1"),
        Node("b1", 8, "V100M32", 96000, 512000, "vc-b", "sw-0", "r2"),
        Node("b2", 8, "V100M32", 96000, 512000, "vc-b", "sw-1", "r2"),
        Node("b3", 4, "T4", 64000, 262144, "vc-b", "sw-1", "r3"),
        Node("c1", 0, "", 32000, 131072, "vc-a", "sw-1", "r3"),
    ]


@pytest.fixture
def cache() -> ClusterCache:
    c = ClusterCache(assume_ttl=30.0)
    c.replace_nodes(small_nodes())
    c.replace_pods([])
    return c


@pytest.fixture
def service(cache: ClusterCache) -> ExtenderService:
    return ExtenderService(cache)


@pytest.fixture
def names() -> list[str]:
    return [n.name for n in small_nodes()]


def extender_cli() -> Any:
    """The extender's commands alone, registered as `qosmos` registers them (independent of other CLIs)."""
    import typer
    from qosmos.extender.cli import register

    app = typer.Typer()
    register(app)
    return app
