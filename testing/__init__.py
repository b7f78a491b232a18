"""Test helpers (import name ``qosmos.testing``): a real kubelet-less Kubernetes control plane
and fake openb GPU nodes for integration tests."""

from qosmos.testing.controlplane import (
    ControlPlane,
    ControlPlaneError,
    binaries_present,
    k8s_bin_dir,
    qosmos_scheduler_config,
    scheduler_config,
)
from qosmos.testing.fakenodes import create_nodes, fake_node_manifest, fake_node_manifests, openb_nodes

__all__ = [
    "ControlPlane",
    "ControlPlaneError",
    "binaries_present",
    "create_nodes",
    "fake_node_manifest",
    "fake_node_manifests",
    "k8s_bin_dir",
    "openb_nodes",
    "qosmos_scheduler_config",
    "scheduler_config",
]
