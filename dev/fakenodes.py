"""Fake GPU nodes for a kubelet-less cluster: synthetic ones (``node-0`` ... ``node-(N-1)``) or rows of
the Alibaba openb (2023) node list, with the labels the extender reads (GPU model, VC, rack, switch).

KWOK keeps them alive and runs their pods when it manages nodes annotated ``kwok.x-k8s.io/node: fake``
(``qosmos.dev.kwok``); without KWOK they stay Ready (the node-lifecycle controller is off) and
bound pods stay Pending.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
# KWOK's convention for the nodes it manages (its in-cluster manifests select on it too).
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
# A synthetic node is sized like the openb V100M32 nodes (96 cores, 768 GiB, 8 GPUs).
SYNTHETIC_CPU_MILLI = 96_000
SYNTHETIC_MEMORY_MIB = 786_432
MERGE_PATCH = "application/merge-patch+json"
OPENB_DIR = Path("data") / "alibaba-openb-2023"
GPU_NODE_CSV = "openb_node_list_gpu_node.csv"
ALL_NODE_CSV = "openb_node_list_all_node.csv"


def shared_dir() -> Path:
    """The shared data checkout: env ``QOSMOS_SHARED`` or ``<repo>/../shared``."""
    if os.environ.get("QOSMOS_SHARED"):
        return Path(os.environ["QOSMOS_SHARED"])
    for parent in Path(__file__).resolve().parents:
        cand = parent.parent / "shared"
        if (parent / "hack").is_dir() and cand.is_dir():
            return cand
    return Path.cwd().parent / "shared"


def openb_nodes(
    path: str | Path | None = None, limit: int | None = None, all_nodes: bool = False
) -> list[dict[str, Any]]:
    """Rows of the openb node list as dicts ``{sn, cpu_milli, memory_mib, gpu, model}``.

    Defaults to the GPU-node list (1,213 nodes); ``all_nodes=True`` reads the full list
    (1,523 nodes, CPU-only ones have ``gpu == 0`` and ``model == ""``).
    """
    p = Path(path) if path else shared_dir() / OPENB_DIR / (ALL_NODE_CSV if all_nodes else GPU_NODE_CSV)
    rows: list[dict[str, Any]] = []
    with open(p, newline="") as f:
        for r in csv.DictReader(f):
            rows.append(
                {
                    "sn": r["sn"].strip(),
                    "cpu_milli": int(r["cpu_milli"]),
                    "memory_mib": int(r["memory_mib"]),
                    "gpu": int(r["gpu"] or 0),
                    "model": (r.get("model") or "").strip(),
                }
            )
            if limit is not None and len(rows) >= limit:
                break
    return rows


def synthetic_nodes(
    n: int,
    gpus_per_node: int,
    gpu_model: str,
    cpu_milli: int = SYNTHETIC_CPU_MILLI,
    memory_mib: int = SYNTHETIC_MEMORY_MIB,
) -> list[dict[str, Any]]:
    """``n`` identical rows named ``node-0`` ... ``node-(n-1)`` in the shape of :func:`openb_nodes`."""
    return [
        {
            "sn": f"node-{i}",
            "cpu_milli": cpu_milli,
            "memory_mib": memory_mib,
            "gpu": gpus_per_node,
            "model": gpu_model if gpus_per_node else "",
        }
        for i in range(n)
    ]


def spread_sample(rows: Sequence[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``n`` rows evenly spread over ``rows`` (deterministic; mixes models and GPU counts)."""
    if n >= len(rows):
        return list(rows)
    step = len(rows) / n
    return [rows[int(i * step)] for i in range(n)]


def fake_node_manifest(
    row: Mapping[str, Any],
    index: int,
    num_vcs: int = 1,
    vc_names: Sequence[str] | None = None,
    nodes_per_rack: int = 32,
    racks_per_switch: int = 4,
    extra_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Node object (dict) for one openb row; ``index`` drives VC and topology placement.

    VCs are assigned round-robin (``vc_names`` or ``vc-0..`` / ``default`` for one VC);
    rack = index // nodes_per_rack, switch = rack // racks_per_switch, and the zone equals the switch.
    """
    name = row["sn"].lower()
    vc = vc_names[index % len(vc_names)] if vc_names else "default" if num_vcs <= 1 else f"vc-{index % num_vcs}"
    rack = index // nodes_per_rack
    switch = rack // racks_per_switch
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "fake-gpu-node",
        "qosmos.io/vc": vc,
        "qosmos.io/rack": f"rack-{rack:03d}",
        "qosmos.io/switch": f"switch-{switch:03d}",
        "topology.kubernetes.io/zone": f"switch-{switch:03d}",
    }
    if row["model"]:
        labels["nvidia.com/gpu.product"] = row["model"]
        labels["qosmos.io/gpu-model"] = row["model"]
    labels.update(extra_labels or {})
    resources = {
        "cpu": f"{row['cpu_milli']}m",
        "memory": f"{row['memory_mib']}Mi",
        "pods": "110",
        GPU_RESOURCE: str(row["gpu"]),
    }
    conds = [
        ("Ready", "True", "KubeletReady", "fake kubelet is posting ready status"),
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "fake"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "fake"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "fake"),
        ("NetworkUnavailable", "False", "RouteCreated", "fake"),
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"qosmos.io/fake": "true", KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE},
        },
        "spec": {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conds],
            "addresses": [{"type": "Hostname", "address": name}],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "v0.0.0-fake",
                "kubeProxyVersion": "",
                "containerRuntimeVersion": "fake://0",
                "kernelVersion": "",
                "osImage": "fake",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    }


def fake_node_manifests(rows: Iterable[Mapping[str, Any]], **kw: Any) -> list[dict[str, Any]]:
    """``fake_node_manifest`` over ``rows`` with consecutive indexes."""
    return [fake_node_manifest(r, i, **kw) for i, r in enumerate(rows)]


def _now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def create_nodes(api_client: Any, manifests: Sequence[dict[str, Any]], workers: int = 8) -> list[str]:
    """Create the nodes (existing ones are updated) and patch their status to Ready.

    Status is ignored on create, hence the second call on the ``status`` subresource.
    Returns the node names.
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    v1 = client.CoreV1Api(api_client)
    now = _now()

    def one(m: dict[str, Any]) -> str:
        name: str = m["metadata"]["name"]
        body = {k: v for k, v in m.items() if k != "status"}
        try:
            v1.create_node(body, _preload_content=False)  # type: ignore[arg-type]  # validate_call turns the dict into a V1Node
        except ApiException as e:
            if e.status != 409:
                raise
            v1.patch_node(
                name,
                {"metadata": {"labels": m["metadata"]["labels"]}},
                _content_type=MERGE_PATCH,
                _preload_content=False,
            )
        status = json.loads(json.dumps(m["status"]))
        for c in status.get("conditions", []):
            c.setdefault("lastHeartbeatTime", now)
            c.setdefault("lastTransitionTime", now)
        v1.patch_node_status(name, {"status": status}, _content_type=MERGE_PATCH, _preload_content=False)
        return name

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, manifests))


def delete_nodes(api_client: Any, names: Iterable[str], workers: int = 8) -> None:
    """Delete nodes by name, ignoring ones already gone."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    v1 = client.CoreV1Api(api_client)

    def one(name: str) -> None:
        try:
            v1.delete_node(name, _preload_content=False)
        except ApiException as e:
            if e.status != 404:
                raise

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, names))


def gpu_pod_manifest(
    name: str,
    gpus: int,
    scheduler: str,
    *,
    cpu_milli: int = 1000,
    memory_mib: int = 1024,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    node: str | None = None,
    namespace: str | None = None,
) -> dict[str, Any]:
    """A pause-container Pod requesting ``gpus`` whole ``nvidia.com/gpu`` (no kubelet ever runs it)."""
    meta: dict[str, Any] = {"name": name, "annotations": annotations or {}, "labels": labels or {}}
    if namespace:
        meta["namespace"] = namespace
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {
                    "requests": {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi", GPU_RESOURCE: str(gpus)},
                    "limits": {GPU_RESOURCE: str(gpus)},
                },
            }
        ],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
