"""The extender on a real control plane: a second kube-scheduler (qosmos-scheduler) calls it over HTTP."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from qosmos.extender.core import scoring
from qosmos.extender.core.placement import get_placer
from qosmos.testing.node import wait_for

from . import extender_fixtures as fx
from .extender_fixtures import ExtenderProcess, gpu_pod, snapshot_cache

extender = fx.extender  # fixtures
qosmos_scheduler = fx.qosmos_scheduler
tls_extender = fx.tls_extender
tls_scheduler = fx.tls_scheduler

pytestmark = pytest.mark.integration


def _node_of(v1: client.CoreV1Api, ns: str, name: str) -> str:
    return v1.read_namespaced_pod(name, ns).spec.node_name or ""


def _expected_nodes(api: Any, pod: dict[str, Any], ns: str) -> tuple[set[str], dict[str, int]]:
    """The core's planned nodes for ``pod`` on the cluster as the API server shows it now."""
    from qosmos.extender.cache import pod_info

    cache = snapshot_cache(api)
    st = cache.state()
    assert st is not None
    info = pod_info({**pod, "metadata": {**pod["metadata"], "namespace": ns, "uid": "probe"}})
    ask = cache.ask_for(info)
    planned = scoring.plan_nodes(st, ask, scoring.plan(st, ask, get_placer(scoring.DEFAULT_PLACER)))
    free = {n.name: int(st.free_gpus[i]) for i, n in enumerate(st.nodes)}
    return {st.nodes[i].name for i in planned}, free


def test_pods_land_where_the_core_decides(
    k8s_api: Any, k8s_namespace: str, qosmos_scheduler: Any, extender: ExtenderProcess
) -> None:
    v1 = client.CoreV1Api(k8s_api)
    for k, gpus in enumerate([1, 2, 1, 4, 2, 8, 1]):
        name = f"placed-{k}"
        pod = gpu_pod(name, gpus)
        # the extender's cache must have caught up with the previous binding before we compare
        expected, free = _expected_nodes(k8s_api, pod, k8s_namespace)
        assert expected, f"the core found no node for {gpus} GPUs; free: {free}"
        v1.create_namespaced_pod(k8s_namespace, pod)
        node = wait_for(lambda name=name: _node_of(v1, k8s_namespace, name), 60, what=f"{name} bound")
        assert node in expected, (
            f"{name} ({gpus} GPUs) went to {node} ({free.get(node)} free); the core planned {sorted(expected)}\n"
            f"{extender.log_tail()}"
        )
    import urllib.request

    with urllib.request.urlopen(f"{extender.url}/metrics", timeout=5) as r:
        metrics = r.read().decode()
    # one node passed on: kube-scheduler binds it without /prioritize
    assert 'qosmos_extender_decisions_total{outcome="planned",verb="filter"}' in metrics


def test_gpu_model_mismatch_stays_pending_with_reason(k8s_api: Any, k8s_namespace: str, qosmos_scheduler: Any) -> None:
    v1 = client.CoreV1Api(k8s_api)
    v1.create_namespaced_pod(k8s_namespace, gpu_pod("no-h100", 1, {"qosmos.io/gpu-models": "H100|B200"}))

    def failed_event() -> str:
        events = v1.list_namespaced_event(k8s_namespace, field_selector="involvedObject.name=no-h100").items
        return next((e.message for e in events if e.reason == "FailedScheduling"), "")

    message = wait_for(failed_event, 60, what="FailedScheduling event")
    assert "is not one of B200|H100" in message, message
    assert _node_of(v1, k8s_namespace, "no-h100") == ""
    assert v1.read_namespaced_pod("no-h100", k8s_namespace).status.phase == "Pending"


def test_dead_extender_does_not_stop_scheduling_and_restart_rebuilds_cache(
    k8s_api: Any, k8s_namespace: str, qosmos_scheduler: Any, extender: ExtenderProcess
) -> None:
    v1 = client.CoreV1Api(k8s_api)
    extender.kill()
    try:
        v1.create_namespaced_pod(k8s_namespace, gpu_pod("while-dead", 1))
        wait_for(lambda: _node_of(v1, k8s_namespace, "while-dead"), 60, what="scheduling without the extender")
        # hold every GPU of one 8-GPU node with a pod bound directly, while the extender is down
        cache = snapshot_cache(k8s_api)
        st = cache.state()
        assert st is not None
        full = [n.name for i, n in enumerate(st.nodes) if int(st.free_gpus[i]) == n.gpus == 8]
        assert full, "need an idle 8-GPU node"
        target = full[0]
        v1.create_namespaced_pod(k8s_namespace, gpu_pod("holder", 8, node=target))
    finally:
        extender.start()
    # the restarted extender lists the bound pods: the held node is not offered again
    probe = gpu_pod("probe", 1)
    probe["metadata"].update(namespace=k8s_namespace, uid="probe-uid")
    names = [n.name for n in snapshot_cache(k8s_api).state().nodes]  # type: ignore[union-attr]
    status, res = extender.post("filter", {"Pod": probe, "NodeNames": names})
    assert status == 200
    assert target not in res["NodeNames"]
    assert res["FailedNodes"][target].startswith("0 of 8 GPUs free")
    status, scores = extender.post("prioritize", {"Pod": probe, "NodeNames": names})
    assert next(s["Score"] for s in scores if s["Host"] == target) == 0
    # and scheduling through the restarted extender still follows the core
    pod = gpu_pod("after-restart", 8)
    v1.create_namespaced_pod(k8s_namespace, pod)
    node = wait_for(lambda: _node_of(v1, k8s_namespace, "after-restart"), 60, what="after-restart bound")
    assert node != target


def test_sigterm_shuts_down_gracefully(extender: ExtenderProcess) -> None:
    assert extender.terminate() == 0
    assert "extender stopped" in extender.log_tail()
    extender.start()


def test_gang_members_follow_the_genie_placement(
    k8s_api: Any, k8s_namespace: str, qosmos_scheduler: Any, extender: ExtenderProcess
) -> None:
    """Two members of a job placed <2 nodes x 2 GPUs> by the operator land on two planned nodes."""
    v1 = client.CoreV1Api(k8s_api)
    ann = {"qosmos.io/placement": "2x2"}
    labels = {"qosmos.io/job": "gang"}
    nodes = []
    for k in range(2):
        name = f"gang-{k}"
        pod = gpu_pod(name, 2, ann, labels=labels)
        expected, free = _expected_nodes(k8s_api, pod, k8s_namespace)
        v1.create_namespaced_pod(k8s_namespace, pod)
        node = wait_for(lambda name=name: _node_of(v1, k8s_namespace, name), 60, what=f"{name} bound")
        assert node in expected, f"{name} went to {node}; the core planned {sorted(expected)} (free {free})"
        nodes.append(node)
        wait_for(lambda node=node: _extender_sees(extender, k8s_namespace, node), 30, what="extender cache caught up")
    assert nodes[0] != nodes[1]


def _extender_sees(extender: ExtenderProcess, ns: str, node: str) -> bool:
    """The extender now offers nothing from a node to a pod of the gang whose peer holds it."""
    probe = gpu_pod("gang-probe", 2, {"qosmos.io/placement": "2x2"}, labels={"qosmos.io/job": "gang"})
    probe["metadata"].update(namespace=ns, uid="gang-probe")
    status, res = extender.post("filter", {"Pod": probe, "NodeNames": [node]})
    return status == 200 and "member of the pod's job" in res["FailedNodes"].get(node, "")


def test_unknown_virtual_cluster_stays_pending(k8s_api: Any, k8s_namespace: str, qosmos_scheduler: Any) -> None:
    v1 = client.CoreV1Api(k8s_api)
    v1.create_namespaced_pod(k8s_namespace, gpu_pod("lost-vc", 1, labels={"qosmos.io/vc": "vc-nowhere"}))

    def failed_event() -> str:
        events = v1.list_namespaced_event(k8s_namespace, field_selector="involvedObject.name=lost-vc").items
        return next((e.message for e in events if e.reason == "FailedScheduling"), "")

    assert "not in the pod's virtual cluster 'vc-nowhere'" in wait_for(failed_event, 60, what="FailedScheduling")


def test_kube_scheduler_schedules_through_the_extender_over_tls(
    k8s_api: Any, k8s_namespace: str, tls_scheduler: Any, tls_extender: ExtenderProcess
) -> None:
    """kube-scheduler (enableHTTPS, tlsConfig with its client certificate) schedules through an
    extender that refuses every caller without a certificate its CA signed."""
    import http.client
    import ssl
    import urllib.error
    import urllib.request

    import orjson

    assert tls_extender.pki is not None
    v1 = client.CoreV1Api(k8s_api)
    for k, gpus in enumerate([1, 2, 4]):
        name = f"tls-{k}"
        pod = gpu_pod(name, gpus, scheduler=fx.TLS_SCHEDULER)
        expected, _ = _expected_nodes(k8s_api, pod, k8s_namespace)
        v1.create_namespaced_pod(k8s_namespace, pod)
        node = wait_for(lambda name=name: _node_of(v1, k8s_namespace, name), 60, what=f"{name} bound over TLS")
        assert node in expected, (
            f"{name} ({gpus} GPUs) went to {node}; the core planned {sorted(expected)}\n{tls_extender.log_tail()}"
        )
    status, metrics = tls_extender.get("metrics")
    assert status == 200
    # the extender was really asked (the extender is not ignorable in this profile, and it decided)
    assert b'qosmos_extender_decisions_total{outcome="planned",verb="filter"}' in metrics
    # a caller without a client certificate (e.g. another pod) is refused at the handshake
    probe = orjson.dumps({"Pod": gpu_pod("probe", 1), "NodeNames": []})
    refused = (ssl.SSLError, urllib.error.URLError, ConnectionError, http.client.HTTPException)
    req = urllib.request.Request(f"{tls_extender.url}/filter", data=probe, method="POST")
    ctx = tls_extender.pki.client_context(with_cert=False)
    with pytest.raises(refused), urllib.request.urlopen(req, timeout=10, context=ctx) as r:
        r.read()
    plain = urllib.request.Request(f"http://127.0.0.1:{tls_extender.port}/filter", data=probe, method="POST")
    with pytest.raises(refused), urllib.request.urlopen(plain, timeout=10) as r:
        r.read()
