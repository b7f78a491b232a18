"""What a reconcile pass reads and writes, in memory: the operator's ``Kube`` for unit tests that drive
:meth:`qosmos.operator.reconcile.Reconciler.run_pass` without an apiserver.

Pods deleted while bound and not finished are, as on a real kubelet, only marked terminating
(``metadata.deletionTimestamp``) with the grace period asked for; :meth:`FakeKube.terminate` ends
them (the kubelet done), so a test sees what the pass does while old pods still hold their devices.
Pods not yet on a node, or finished, go at once.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from typing import Any

from qosmos.operator.crds import LABEL_JOB
from qosmos.operator.kube import Stale
from qosmos.operator.lifecycle import Disruption, disruption

DEFAULT_VCS: tuple[dict[str, Any], ...] = (
    {"metadata": {"name": "vc-a"}, "spec": {"policy": "fifo", "placement": "consolidate"}},
)


NODE_CORES, NODE_MEMORY_GI = 96, 768  # every gpu_node's allocatable CPU and memory


def gpu_node(name: str, gpus: int = 8, taints: list[dict[str, str]] | None = None, **labels: str) -> dict[str, Any]:
    """A Ready V100M32 node with ``gpus`` GPUs, 96 cores and 768 Gi, as the operator reads Node objects."""
    obj: dict[str, Any] = {
        "metadata": {"name": name, "labels": {"qosmos.io/gpu-model": "V100M32", **labels}},
        "spec": {},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": str(NODE_CORES), "memory": f"{NODE_MEMORY_GI}Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    if taints:
        obj["spec"]["taints"] = taints
    return obj


def dljob_object(
    name: str, created: float, ns: str = "team", vc: str = "vc-a", gpus: int = 8, **spec: Any
) -> dict[str, Any]:
    """A DLJob as the apiserver holds it before the operator wrote anything (created at Unix ``created``)."""
    from qosmos.operator.translate import rfc3339

    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "generation": 1,
                     "creationTimestamp": rfc3339(created)},
        "spec": {"virtualCluster": vc, "gpus": gpus, "gpusPerNode": 8, **spec},
    }  # fmt: skip


def pinned(pod: dict[str, Any]) -> str:
    """The node the operator pinned a gang pod to (its required node affinity on the hostname)."""
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    for term in terms["nodeSelectorTerms"]:
        for e in term.get("matchFields") or term.get("matchExpressions") or []:
            if e["key"] in ("metadata.name", "kubernetes.io/hostname"):
                return str(e["values"][0])
    raise AssertionError(f"pod {pod['metadata']['name']} is not pinned")


class FakeKube:
    def __init__(
        self,
        nodes: list[dict[str, Any]],
        jobs: Sequence[dict[str, Any]] = (),
        vcs: list[dict[str, Any]] | None = None,
        retire_in_status: bool = True,
    ) -> None:
        self._nodes = nodes
        # an apiserver that selects DLJobs by status.retired (Kubernetes >= 1.31 and the CRD's
        # selectableFields); False: as 1.30, DLJobs are retired with the label qosmos.io/finished
        self.retire_in_status = retire_in_status
        self._vcs: list[dict[str, Any]] = copy.deepcopy(list(DEFAULT_VCS)) if vcs is None else vcs
        self._versions = itertools.count(1)
        self.jobs: dict[str, dict[str, Any]] = {}
        self.add(*jobs)
        self.pods: dict[str, dict[str, Any]] = {}
        self.services: dict[str, dict[str, Any]] = {}
        self.status_patches: list[tuple[str, dict[str, Any]]] = []
        self.vc_status: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str, str]] = []  # (object name, reason, message)
        self.deletions: list[tuple[str, int | None]] = []  # (pod, grace period asked; None: the pod's own)
        self.service_creates, self.fail_services = 0, 0
        self.refuse_template: str | None = None  # what the apiserver says to a dry run of any pod
        self.dry_runs: list[str] = []
        self.disrupted: dict[str, Disruption] = {}  # ns/pod -> how it went (``evict``), as the watch caches keep it

    # -- test helpers ---------------------------------------------------------------------------
    def add(self, *jobs: dict[str, Any]) -> None:
        for j in jobs:
            j["metadata"]["resourceVersion"] = str(next(self._versions))
            self.jobs[j["metadata"]["name"]] = j

    def edit(self, name: str, **spec: Any) -> None:
        """Another writer (``kubectl edit``) changes the DLJob's spec: a new generation and version."""
        md = self.jobs[name]["metadata"]
        self.jobs[name]["spec"].update(spec)
        md["generation"] = int(md.get("generation") or 1) + 1
        md["resourceVersion"] = str(next(self._versions))

    def _touch(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A write stored: the object's next resourceVersion (one counter, as etcd's revision)."""
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        return obj

    def bind(self, name: str, node: str, phase: str = "Running") -> None:
        """The scheduler and kubelet: the pod on ``node`` in ``phase``."""
        p = self.pods[name]
        p["spec"]["nodeName"] = node
        p.setdefault("status", {})["phase"] = phase
        self._touch(p)

    def run_new_pods(self, phase: str = "Running") -> None:
        """kube-scheduler binds the pods not yet run where the operator pinned them; the kubelet runs
        them (``Pending``: cannot start them; ``Succeeded``: they ran to completion already)."""
        for name, p in self.pods.items():
            if (p.get("status") or {}).get("phase") is None:
                p["spec"].pop("schedulingGates", None)
                self.bind(name, pinned(p), phase)

    def evict(self, name: str, at: str, reason: str = "EvictionByEvictionAPI", gone: bool = True) -> None:
        """A disruption (``kubectl drain``'s eviction by default): the pod's DisruptionTarget condition,
        then its deletion; ``gone``: the kubelet is done with it already (the watch caches keep why)."""
        p = self.pods[name]
        cond = {"type": "DisruptionTarget", "status": "True", "reason": reason, "lastTransitionTime": at}
        p.setdefault("status", {})["conditions"] = [*(p["status"].get("conditions") or []), cond]
        p["metadata"].setdefault("deletionTimestamp", "2026-01-02T03:04:05Z")
        self._touch(p)
        if gone:
            self.pods.pop(name)
            if (d := disruption(p)) is not None:
                self.disrupted[f"{p['metadata'].get('namespace', '')}/{name}"] = d

    def terminate(self, *names: str) -> None:
        """The kubelet finished terminating these pods (all terminating ones when none named)."""
        for n in names or [n for n, p in self.pods.items() if p["metadata"].get("deletionTimestamp")]:
            self.pods.pop(n, None)

    # -- reads ----------------------------------------------------------------------------------
    def virtual_clusters(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self._vcs)

    def nodes(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self._nodes)

    def dljobs(self) -> list[dict[str, Any]]:
        """The working set, as the apiserver's selectors ``!qosmos.io/finished`` (labels) and, where it
        can, ``status.retired!=true`` (fields) return it: by name, as etcd lists keys (not by creation)."""
        return copy.deepcopy(
            [
                j
                for _, j in sorted(self.jobs.items())
                if "qosmos.io/finished" not in (j["metadata"].get("labels") or {})
                and not (self.retire_in_status and (j.get("status") or {}).get("retired"))
            ]
        )

    def label_dljob(self, namespace: str, name: str, labels: dict[str, str | None]) -> None:
        md = self.jobs[name]["metadata"]
        md["labels"] = {k: v for k, v in {**(md.get("labels") or {}), **labels}.items() if v is not None}
        self._touch(self.jobs[name])

    def gang_pods(self) -> list[dict[str, Any]]:
        """As the selector ``qosmos.io/job,!qosmos.io/finished`` returns them, finished ones included."""
        return copy.deepcopy(
            [p for p in self.pods.values() if "qosmos.io/finished" not in (p["metadata"].get("labels") or {})]
        )

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        p = self.pods.get(name)
        return copy.deepcopy(p) if p is not None else None

    def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return copy.deepcopy(
            [p for p in self.pods.values() if (p["metadata"].get("labels") or {}).get(LABEL_JOB) == job]
        )

    def recover_pods(self, jobs: list[tuple[str, str]]) -> None:
        """Nothing to recover: :meth:`gang_pods` returns finished pods too (as ``Kube``'s listing does)."""

    def disrupted_pods(self) -> dict[str, Disruption]:
        return dict(self.disrupted)

    def pending_replica_pods(self) -> list[dict[str, Any]]:
        return []

    def other_bound_pods(self) -> list[dict[str, Any]]:
        return []

    def service(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.services.get(name)

    # -- writes ---------------------------------------------------------------------------------
    def patch_dljob_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None
    ) -> str | None:
        md = self.jobs[name]["metadata"]
        if resource_version is not None and resource_version != md["resourceVersion"]:
            raise Stale(f"DLJob {namespace}/{name} changed since resourceVersion {resource_version}")
        self.status_patches.append((name, status))
        merged = {**(self.jobs[name].get("status") or {}), **status}
        self.jobs[name]["status"] = {k: v for k, v in merged.items() if v is not None}
        md["resourceVersion"] = str(next(self._versions))
        return str(md["resourceVersion"])

    def delete_dljob(self, namespace: str, name: str) -> None:
        self.jobs.pop(name, None)
        for n in [n for n, p in self.pods.items() if (p["metadata"].get("labels") or {}).get("qosmos.io/job") == name]:
            self.delete_pod(namespace, n)  # the garbage collector, through ownerReferences

    def patch_vc_status(self, name: str, status: dict[str, Any]) -> None:
        self.vc_status[name] = status
        for v in self._vcs:
            if v["metadata"]["name"] == name:
                v["status"] = {**(v.get("status") or {}), **copy.deepcopy(status)}
                self._touch(v)

    def annotate_vc(self, name: str, annotations: dict[str, str | None]) -> None:
        for v in self._vcs:
            if v["metadata"]["name"] == name:
                have = v["metadata"].setdefault("annotations", {})
                for k, val in annotations.items():  # a merge patch: None removes the key
                    if val is None:
                        have.pop(k, None)
                    else:
                        have[k] = val
                self._touch(v)

    def label_node(self, name: str, labels: dict[str, str | None], annotations: dict[str, str | None]) -> None:
        node = next(n for n in self._nodes if n["metadata"]["name"] == name)
        md = node["metadata"]
        for field, new in (("labels", labels), ("annotations", annotations)):
            md[field] = {k: v for k, v in {**(md.get(field) or {}), **new}.items() if v is not None}
        self._touch(node)

    def create_pod(self, pod: dict[str, Any]) -> bool:
        assert pod["metadata"]["name"] not in self.pods, f"pod {pod['metadata']['name']} created twice"
        self.pods[pod["metadata"]["name"]] = self._touch(copy.deepcopy(pod))
        return True

    def dry_run_pod(self, pod: dict[str, Any]) -> str | None:
        self.dry_runs.append(pod["metadata"]["name"])
        return self.refuse_template

    def ungate(self, namespace: str, name: str, gates: list[dict[str, Any]]) -> None:
        self.pods[name]["spec"]["schedulingGates"] = gates
        self._touch(self.pods[name])

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> None:
        self.deletions.append((name, grace_seconds))
        p = self.pods.get(name)
        if p is None:
            return
        running = p["spec"].get("nodeName") and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        if running and grace_seconds != 0:
            p["metadata"].setdefault("deletionTimestamp", "2026-01-02T03:04:05Z")
            self._touch(p)
        else:
            self.pods.pop(name)

    def create_service(self, service: dict[str, Any]) -> bool:
        self.service_creates += 1
        if self.fail_services:
            self.fail_services -= 1
            raise RuntimeError("apiserver unavailable")
        if service["metadata"]["name"] in self.services:
            return False
        self.services[service["metadata"]["name"]] = copy.deepcopy(service)
        return True

    def event(self, obj: dict[str, Any], reason: str, message: str, kind: str = "DLJob", type_: str = "Normal") -> None:
        self.events.append((obj["metadata"]["name"], reason, message))


__all__ = ["FakeKube", "dljob_object", "gpu_node", "pinned"]
