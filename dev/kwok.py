"""KWOK on a loopback cluster: it keeps the fake nodes alive (node leases) and plays their pods'
lifecycle from the Stages in ``kwok-stages.yaml`` (bound -> Running; ``qosmos.io/run-duration``
-> Succeeded after that long; deleted -> gone).

Its options (worker counts) are ``kwok-config.yaml``'s, every one set: KWOK defaults none of a
KwokConfiguration it reads from a file. ``hack/kind/up.sh`` gives the same two files to its KWOK
container. An in-cluster KWOK with its Stage CRD enabled (KWOK's release ``kwok.yaml``) takes the same
Stages through ``kubectl apply``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from qosmos.dev.controlplane import ControlPlane
from qosmos.dev.fakenodes import KWOK_NODE_ANNOTATION, KWOK_NODE_VALUE
from qosmos.dev.process import LOOPBACK, Component, free_port

STAGES_FILE = Path(__file__).with_name("kwok-stages.yaml")
CONFIG_FILE = Path(__file__).with_name("kwok-config.yaml")  # KWOK's options, every one set
RUN_DURATION_ANNOTATION = "qosmos.io/run-duration"
POD_CIDR = "10.244.0.0/16"  # pod IPs KWOK hands out; apart from the service range
# kwokctl uses 40 s (a renewal every 10 s). The dev cluster runs no node-lifecycle controller, so a
# lease only shows the node is KWOK's: 120 s (a renewal every 30 s) took an idle 1,523-node cluster's
# apiserver from 24.5 to 8.5 CPU-s a minute on the 2-core machine (KWOK 6.1 -> 1.8, etcd 5.5 -> 2.0).
NODE_LEASE_SECONDS = 120


def stages() -> list[dict[str, Any]]:
    """The KWOK Stage objects (dicts) of ``kwok-stages.yaml``."""
    return [d for d in yaml.safe_load_all(STAGES_FILE.read_text()) if d]


def start_kwok(cp: ControlPlane, timeout: float | None = None, name: str = "kwok") -> Component:
    """Start kwok against ``cp`` (cluster-admin kubeconfig) with ``kwok-stages.yaml``, serving /healthz
    on a loopback port.

    Its HOME is a folder of the cluster's own, so a user's ``~/.kwok/kwok.yaml`` (which kwok
    would load first) cannot add Stages or change options.
    """
    home = cp.workdir / "kwok-home"
    home.mkdir(exist_ok=True)
    port = free_port()
    comp = cp.spawn(
        name,
        [
            cp.bin("kwok"),
            f"--kubeconfig={cp.kubeconfig_path}",
            # KWOK's options, then the Stages (as hack/kind mounts them): KWOK runs no Stage it is not
            # given; the flags below override the file's options.
            f"--config={CONFIG_FILE}",
            f"--config={STAGES_FILE}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}",
            f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
            f"--cidr={POD_CIDR}",
            f"--server-address={LOOPBACK}:{port}",
        ],
        f"http://{LOOPBACK}:{port}/healthz",
        env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
    )
    cp.wait_ready(comp, None, timeout)
    return comp
