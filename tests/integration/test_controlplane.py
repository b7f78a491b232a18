"""The test control plane itself: version, kubectl, fake GPU nodes, default and second scheduler."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from qosmos.extender.schedconfig import qosmos_scheduler_config, scheduler_config
from qosmos.testing.controlplane import ControlPlane
from qosmos.testing.fakenodes import gpu_pod_manifest
from qosmos.testing.node import wait_for

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"


def _pod(name: str, gpus: int, scheduler: str | None = None) -> dict[str, Any]:
    return gpu_pod_manifest(name, gpus, scheduler or "default-scheduler")


def _wait(pred: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    return wait_for(pred, timeout, what)


def _core(api: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api)


def _node_gpus(api: Any, name: str) -> int:
    return int(_core(api).read_node(name).status.allocatable.get(GPU, "0"))


def test_version_is_1_34(k8s_api: Any) -> None:
    from kubernetes import client

    info = client.VersionApi(k8s_api).get_code()
    assert info.git_version.startswith("v1.34."), info.git_version
    assert (info.major, info.minor) == ("1", "34")


def test_kubectl_works(control_plane: ControlPlane, fake_gpu_nodes: list[dict[str, Any]]) -> None:
    out = control_plane.kubectl("get", "nodes", "-o", "json").stdout
    names = {n["metadata"]["name"] for n in json.loads(out)["items"]}
    assert {m["metadata"]["name"] for m in fake_gpu_nodes} <= names


def test_fake_nodes_have_gpus(k8s_api: Any, fake_gpu_nodes: list[dict[str, Any]]) -> None:
    nodes = {n.metadata.name: n for n in _core(k8s_api).list_node(label_selector="type=fake-gpu-node").items}
    assert len(nodes) >= len(fake_gpu_nodes)
    for m in fake_gpu_nodes:
        n = nodes[m["metadata"]["name"]]
        assert n.status.allocatable[GPU] == m["status"]["allocatable"][GPU]
        assert int(n.status.allocatable[GPU]) > 0
        assert n.metadata.labels["nvidia.com/gpu.product"] == m["metadata"]["labels"]["qosmos.io/gpu-model"]
        ready = [c for c in n.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True"
        assert not n.spec.taints


def test_default_scheduler_binds_gpu_pod(
    k8s_api: Any, fake_gpu_nodes: list[dict[str, Any]], k8s_namespace: str
) -> None:
    v1 = _core(k8s_api)
    v1.create_namespaced_pod(k8s_namespace, _pod("two-gpus", 2))
    node = _wait(lambda: v1.read_namespaced_pod("two-gpus", k8s_namespace).spec.node_name, what="pod binding")
    assert _node_gpus(k8s_api, node) >= 2


def test_unsatisfiable_gpu_pod_stays_pending(
    k8s_api: Any, fake_gpu_nodes: list[dict[str, Any]], k8s_namespace: str
) -> None:
    v1 = _core(k8s_api)
    v1.create_namespaced_pod(k8s_namespace, _pod("too-many", 1000))

    def failed_event() -> Any:
        evs = v1.list_namespaced_event(k8s_namespace, field_selector="involvedObject.name=too-many").items
        return [e for e in evs if e.reason == "FailedScheduling"]

    evs = _wait(failed_event, what="FailedScheduling event")
    assert any(GPU in (e.message or "") for e in evs), [e.message for e in evs]

    def unschedulable() -> Any:
        # kube-scheduler records the event and patches the pod status separately: wait for both
        pod = v1.read_namespaced_pod("too-many", k8s_namespace)
        cond = [c for c in pod.status.conditions or [] if c.type == "PodScheduled"]
        return pod if cond and cond[0].status == "False" and cond[0].reason == "Unschedulable" else None

    pod = _wait(unschedulable, what="PodScheduled=False/Unschedulable")
    assert not pod.spec.node_name


def test_second_scheduler_profile(
    control_plane: ControlPlane, k8s_api: Any, fake_gpu_nodes: list[dict[str, Any]], k8s_namespace: str
) -> None:
    sched = control_plane.start_scheduler("qosmos", scheduler_config("qosmos-scheduler"))
    try:
        v1 = _core(k8s_api)
        v1.create_namespaced_pod(k8s_namespace, _pod("via-qosmos", 1, scheduler="qosmos-scheduler"))
        node = _wait(lambda: v1.read_namespaced_pod("via-qosmos", k8s_namespace).spec.node_name, what="pod binding")
        assert _node_gpus(k8s_api, node) >= 1
        evs = v1.list_namespaced_event(k8s_namespace, field_selector="involvedObject.name=via-qosmos").items
        scheduled = [e for e in evs if e.reason == "Scheduled"]
        sources = {(e.reporting_component or (e.source.component if e.source else "")) for e in scheduled}
        assert "qosmos-scheduler" in sources or not scheduled, sources
    finally:
        sched.stop()
    assert not sched.running


def test_qosmos_scheduler_config_is_accepted(
    control_plane: ControlPlane, k8s_api: Any, fake_gpu_nodes: list[dict[str, Any]], k8s_namespace: str
) -> None:
    """kube-scheduler loads the extender config; an unreachable ignorable extender is skipped."""
    sched = control_plane.start_scheduler("qosmos-ext", qosmos_scheduler_config("http://127.0.0.1:9/none"))
    try:
        v1 = _core(k8s_api)
        v1.create_namespaced_pod(k8s_namespace, _pod("ext-ignored", 1, scheduler="qosmos-scheduler"))
        _wait(lambda: v1.read_namespaced_pod("ext-ignored", k8s_namespace).spec.node_name, what="pod binding")
    finally:
        sched.stop()
