"""The e2e tier: the test control plane (with its default scheduler, which places qosmos' own pods),
one real kubelet node (the node tier's :class:`~qosmos.testing.node.Node`, with the pod network of
``cluster_network=True`` and :class:`~qosmos.testing.services.ServiceNetwork` for Service VIPs and
DNS), the locally built images (``hack/image/build.sh``) imported into the node's containerd, and
KWOK fake GPU nodes for the workloads.

Module-scoped: the node holds the host-wide node lock, which the node tier needs after this module.
Skips where the host cannot run a node (not root, no cgroups, no overlayfs) or Go is absent to build
the binaries, and says so; in CI those fail instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from qosmos.dev.binaries import cache_bin_dir
from qosmos.dev.fakenodes import create_nodes, fake_node_manifest, synthetic_nodes
from qosmos.dev.kwok import start_kwok
from qosmos.testing.controlplane import ControlPlane, binaries_present
from qosmos.testing.node import APISERVER_ARGS, Node, host_unsupported
from qosmos.testing.services import ServiceNetwork
from qosmos.testing.skips import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "qosmos"
RELEASE, NAMESPACE = "qs", "qosmos-system"
NODE = "qosmos-node-0"
POOL_LABEL = "qosmos.io/pool"
FAKE_POOLS = ("a", "b", "a", "b", "c")  # examples/ use pools a and b; the upgrade test's queue uses c
GPU_MODEL = "V100M32"


def image_cache() -> Path:
    return Path(os.environ.get("QOSMOS_IMAGE_CACHE", Path.home() / ".cache" / "qosmos" / "image"))


def build_images() -> dict[str, dict[str, Any]]:
    """``hack/image/build.sh`` (a no-op in about a second when its keys match), then images.json."""
    t = time.monotonic()
    p = subprocess.run(["bash", str(ROOT / "hack" / "image" / "build.sh")], capture_output=True, text=True)
    if p.returncode != 0:
        tail = "\n".join((p.stdout + p.stderr).splitlines()[-40:])
        raise RuntimeError(f"hack/image/build.sh failed (rc={p.returncode}):\n{tail}")
    doc: dict[str, dict[str, Any]] = json.loads((image_cache() / "images.json").read_text())
    doc["build_s"] = {"value": time.monotonic() - t}
    return doc


def split_ref(ref: str) -> dict[str, str]:
    """``registry/repository:tag`` as the chart's image values."""
    registry, rest = ref.split("/", 1)
    repository, tag = rest.rsplit(":", 1)
    return {"registry": registry, "repository": repository, "tag": tag, "pullPolicy": "Never"}


@dataclass
class E2E:
    cp: ControlPlane
    node: Node
    services: ServiceNetwork
    images: dict[str, dict[str, Any]]
    workdir: Path
    fake_nodes: list[str]
    timings: dict[str, float] = field(default_factory=dict)

    def helm(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.cp.kubeconfig_path),
            "HELM_CACHE_HOME": str(self.workdir / "helm" / "cache"),
            "HELM_CONFIG_HOME": str(self.workdir / "helm" / "config"),
            "HELM_DATA_HOME": str(self.workdir / "helm" / "data"),
        }
        p = subprocess.run([str(cache_bin_dir() / "helm"), *args], capture_output=True, text=True,
                           timeout=timeout, env=env)  # fmt: skip
        if check and p.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed (rc={p.returncode}):\n{p.stdout}\n{p.stderr}")
        return p

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        p = self.cp.kubectl(*args, check=False, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed (rc={p.returncode}):\n{p.stderr}")
        return p

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def values(self) -> dict[str, Any]:
        """The chart's values for this node: the local images (never pulled), qosmos' own pods on the
        real node (the KWOK nodes only pretend to run pods), CRDs deleted on uninstall."""
        pin = {"kubernetes.io/hostname": NODE}
        return {
            "image": split_ref(self.images["qosmos"]["ref"]),
            "crds": {"keep": False},
            "operator": {"nodeSelector": pin},
            "extender": {"nodeSelector": pin},
            "scheduler": {"image": split_ref(self.images["kube-scheduler"]["ref"]), "nodeSelector": pin},
            "nodeAgent": {"nodeSelector": pin},
        }


def need_node_host() -> None:
    """Skip (fail in CI) where the host cannot run a kubelet node or build the binaries."""
    why = host_unsupported()
    if why:
        skip_or_fail(f"host cannot run a kubelet node: {why}")
    have_go = shutil.which("go") is not None or os.path.exists("/usr/local/go/bin/go")
    if not have_go and not binaries_present():
        skip_or_fail("Go toolchain absent: cannot build the kubelet/control plane (hack/node/build.sh)")


@pytest.fixture(scope="module")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2E]:
    need_node_host()
    t0 = time.monotonic()
    images = build_images()
    workdir = tmp_path_factory.mktemp("e2e")
    timings = {"images_build_check_s": images.pop("build_s")["value"]}
    t = time.monotonic()
    with (
        ControlPlane(extra_apiserver_args=APISERVER_ARGS) as cp,
        Node(cp, NODE, cluster_network=True) as node,
        ServiceNetwork(node) as services,
    ):
        timings["cluster_s"] = time.monotonic() - t
        t = time.monotonic()
        for img in images.values():
            node.ctr("images", "import", str(img["archive"]), timeout=600)
        timings["image_import_s"] = time.monotonic() - t
        api = cp.api_client()
        manifests = []
        for i, pool in enumerate(FAKE_POOLS):
            m = fake_node_manifest(
                synthetic_nodes(len(FAKE_POOLS), 8, GPU_MODEL)[i], i, extra_labels={POOL_LABEL: pool}
            )
            del m["metadata"]["labels"]["qosmos.io/vc"]  # the operator's label: set only by VirtualClusters
            manifests.append(m)
        fake = create_nodes(api, manifests)
        start_kwok(cp)
        api.close()
        env = E2E(cp, node, services, images, workdir, fake, timings)
        yield env
        # the chart's pods are gone (uninstalled, or the node's stop deletes them): restore the host
    assert node.leftovers == [], f"the node left the host changed: {node.leftovers}"
    timings["total_s"] = time.monotonic() - t0
    print(f"\ne2e timings: {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
