"""Fake GPU nodes for the tests: ``qosmos.dev.fakenodes`` (what ``qosmos dev up`` creates), re-exported."""

from __future__ import annotations

from qosmos.dev.fakenodes import (
    ALL_NODE_CSV,
    GPU_NODE_CSV,
    GPU_RESOURCE,
    KWOK_NODE_ANNOTATION,
    KWOK_NODE_VALUE,
    MERGE_PATCH,
    OPENB_DIR,
    create_nodes,
    delete_nodes,
    fake_node_manifest,
    fake_node_manifests,
    gpu_pod_manifest,
    openb_nodes,
    shared_dir,
    spread_sample,
    synthetic_nodes,
)

__all__ = [
    "ALL_NODE_CSV",
    "GPU_NODE_CSV",
    "GPU_RESOURCE",
    "KWOK_NODE_ANNOTATION",
    "KWOK_NODE_VALUE",
    "MERGE_PATCH",
    "OPENB_DIR",
    "create_nodes",
    "delete_nodes",
    "fake_node_manifest",
    "fake_node_manifests",
    "gpu_pod_manifest",
    "openb_nodes",
    "shared_dir",
    "spread_sample",
    "synthetic_nodes",
]
