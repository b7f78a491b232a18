"""The operator's watch caches on a real apiserver (issue 21 §1): one list each, then the watch; the
selectors the apiserver applies (retired DLJobs never enter, other pods only while bound and
unfinished); the operator's own writes in the cache as soon as the apiserver answered them, before
the watch delivers; a watch from a compacted-away version listed again; a restart rebuilt from one
list each."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from qosmos.operator.crds import GROUP, VERSION
from qosmos.operator.informers import CachedKube, Informers, Store
from qosmos.operator.kube import NOT_RETIRED
from qosmos.testing.node import wait_for

pytestmark = pytest.mark.integration


def dljob(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DLJob",
        "metadata": {"name": name, "labels": labels},
        "spec": {"virtualCluster": "vc-informers", "gpus": 1},
    }


def pod(name: str, node: str | None = None, **labels: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}
    if node:
        spec["nodeName"] = node  # bound: no kubelet will ever run it
    else:
        spec["schedulerName"] = "qosmos-test-no-scheduler"  # stays unbound beside the session's scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


@pytest.fixture
def cached(
    k8s_api: Any, crds_applied: str, k8s_namespace: str, fake_gpu_nodes: list[dict[str, Any]]
) -> Iterator[tuple[CachedKube, list[tuple[str, str]]]]:
    # with the session's nodes present, as in the whole suite (its scheduler binds what it can)
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()

    def record(store: str, type_: str, obj: dict[str, Any]) -> None:
        with lock:
            seen.append((store, type_))

    custom = client.CustomObjectsApi(k8s_api)
    custom.create_namespaced_custom_object(GROUP, VERSION, k8s_namespace, "dljobs", dljob("before"))
    custom.create_namespaced_custom_object(
        GROUP, VERSION, k8s_namespace, "dljobs", dljob("old", **{"qosmos.io/finished": "true"})
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, k8s_namespace, "dljobs", dljob("retired"))
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, k8s_namespace, "dljobs", "retired", {"status": {"phase": "Succeeded", "retired": True}}
    )
    kube = CachedKube(k8s_api, k8s_namespace, on_event=record)
    kube.informers.start()
    try:
        assert kube.informers.wait_synced(30)
        yield kube, seen
    finally:
        kube.informers.stop()


def names(objs: list[dict[str, Any]]) -> set[str]:
    return {o["metadata"]["name"] for o in objs}


def test_the_caches_follow_the_apiserver_through_its_selectors(
    k8s_api: Any, k8s_namespace: str, cached: tuple[CachedKube, list[tuple[str, str]]]
) -> None:
    kube, seen = cached
    ns = k8s_namespace
    custom, v1 = client.CustomObjectsApi(k8s_api), client.CoreV1Api(k8s_api)
    # this apiserver (1.34) selects DLJobs by the CRD's selectable field status.retired
    assert kube.retire_in_status is True
    assert names(kube.dljobs()) == {"before"}  # listed; the retired ones (status, or label) never enter
    assert all(s.lists == 1 for s in kube.informers.stores)
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "dljobs", dljob("after"))
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "dljobs", dljob("third"))
    wait_for(lambda: names(kube.dljobs()) == {"before", "after", "third"})
    assert ("dljobs", "ADDED") in seen
    # retired by another writer, by label (an operator on an apiserver without the selectable field) or
    # by status: each leaves the working set
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, "dljobs", "before", {"metadata": {"labels": {"qosmos.io/finished": "true"}}}
    )
    custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, "dljobs", "third", {"status": {"retired": True}})
    wait_for(lambda: names(kube.dljobs()) == {"after"})
    # what the label fallback rests on: a custom resource without the selectable field refuses the
    # selector with 400 (as a 1.30 apiserver, or an older DLJob CRD, does)
    with pytest.raises(client.ApiException) as refused:
        custom.list_cluster_custom_object(GROUP, VERSION, "virtualclusters", field_selector=NOT_RETIRED)
    assert refused.value.status == 400

    v1.create_namespaced_pod(ns, pod("gang-0", **{"qosmos.io/job": "after"}))
    v1.create_namespaced_pod(ns, pod("replica-0", **{"qosmos.io/inference": "svc"}))
    v1.create_namespaced_pod(ns, pod("other-pending"))  # not bound: holds nothing, not watched
    v1.create_namespaced_pod(ns, pod("other-bound", node="qosmos-no-kubelet-informers"))
    wait_for(lambda: "gang-0" in names(kube.gang_pods()))
    wait_for(lambda: "replica-0" in names(kube.pending_replica_pods()))
    wait_for(lambda: "other-bound" in names(kube.other_bound_pods()))
    assert "other-pending" not in names(kube.other_bound_pods())
    # the replica bound: no longer pending, now among the pods holding node resources
    v1.create_namespaced_pod_binding(
        "replica-0", ns, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "replica-0"},
                          "target": {"apiVersion": "v1", "kind": "Node", "name": "qosmos-no-kubelet-informers"}},
        _preload_content=False,
    )  # fmt: skip
    wait_for(lambda: "replica-0" in names(kube.other_bound_pods()))
    assert "replica-0" not in names(kube.pending_replica_pods())
    # finished: it leaves the bound-unfinished selection (the apiserver sends DELETED for it)
    v1.patch_namespaced_pod_status("other-bound", ns, {"status": {"phase": "Succeeded"}})
    wait_for(lambda: "other-bound" not in names(kube.other_bound_pods()))


def test_a_gang_pod_that_finishes_is_kept_finished_and_goes_with_its_dljob(
    k8s_api: Any, k8s_namespace: str, cached: tuple[CachedKube, list[tuple[str, str]]]
) -> None:
    """The gang pods' watch selects unfinished pods (no write retires a pod): the apiserver reports a
    finish as DELETED with the pod's last running state, and the cache reads the pod and keeps it
    Succeeded while its DLJob is in the working set. A restarted operator's list holds no finished
    pod; its per-job list after the first list finds it."""
    kube, seen = cached
    ns = k8s_namespace
    v1, custom = client.CoreV1Api(k8s_api), client.CustomObjectsApi(k8s_api)
    v1.create_namespaced_pod(ns, pod("before-0-0", node="qosmos-no-kubelet-informers", **{"qosmos.io/job": "before"}))
    v1.patch_namespaced_pod_status("before-0-0", ns, {"status": {"phase": "Running"}})
    wait_for(lambda: "before-0-0" in names(kube.gang_pods()))
    v1.patch_namespaced_pod_status("before-0-0", ns, {"status": {"phase": "Succeeded"}})
    phase = lambda k: {p["metadata"]["name"]: p["status"].get("phase") for p in k.gang_pods()}.get("before-0-0")  # noqa: E731
    wait_for(lambda: phase(kube) == "Succeeded")
    assert ("pods", "DELETED") in seen  # the finish was a pass's news

    again = CachedKube(kube.api, kube.namespace)  # a restart: the pods' list selects unfinished ones
    again.informers.start()
    try:
        assert again.informers.wait_synced(30)
        assert phase(again) is None
        again.recover_pods([(ns, "before")])
        assert phase(again) == "Succeeded"
    finally:
        again.informers.stop()

    custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, "dljobs", "before", {"metadata": {"labels": {"qosmos.io/finished": "true"}}}
    )
    wait_for(lambda: "before-0-0" not in names(kube.gang_pods()))  # retired with its DLJob
    assert v1.read_namespaced_pod("before-0-0", ns).metadata.labels == {"qosmos.io/job": "before"}  # never written


def test_the_operators_own_writes_are_in_the_cache_before_the_watch_delivers_them(
    k8s_api: Any, k8s_namespace: str, cached: tuple[CachedKube, list[tuple[str, str]]]
) -> None:
    kube, _ = cached
    ns = k8s_namespace
    inf = kube.informers
    for r in inf.reflectors:  # the streams stop taking events: only the write-through can update
        r.stopped.set()
    rv = kube.patch_dljob_status(ns, "before", {"phase": "Queued", "queuePosition": 7})
    got = inf.dljobs_.get(f"{ns}/before")
    assert got is not None and got["status"]["queuePosition"] == 7
    assert got["metadata"]["resourceVersion"] == rv and rv in kube.own  # its echo is not news

    assert kube.create_pod({**pod("gang-1", **{"qosmos.io/job": "before"}), "metadata": {
        "name": "gang-1", "namespace": ns, "labels": {"qosmos.io/job": "before"}}})  # fmt: skip
    assert "gang-1" in names(kube.gang_pods())
    created = next(p for p in kube.gang_pods() if p["metadata"]["name"] == "gang-1")
    assert created["metadata"]["resourceVersion"] in kube.own  # its ADDED event echoes the reply
    kube.delete_pod(ns, "gang-1")  # not on a node: gone at once (200)
    assert "gang-1" not in names(kube.gang_pods())
    bound = pod("gang-2", node="qosmos-no-kubelet-informers", **{"qosmos.io/job": "before"})
    bound["metadata"]["namespace"] = ns
    bound["spec"]["terminationGracePeriodSeconds"] = 60
    kube.create_pod(bound)
    kube.delete_pod(ns, "gang-2")  # bound: terminating (202) and still holding its devices
    held = {p["metadata"]["name"]: p for p in kube.gang_pods()}
    assert held["gang-2"]["metadata"].get("deletionTimestamp")

    kube.patch_dljob_status(ns, "before", {"retired": True})  # retired by the pass: out at once
    assert "before" not in names(kube.dljobs())


def test_a_watch_from_a_compacted_version_lists_again_and_a_restart_lists_once(
    k8s_api: Any, k8s_namespace: str, cached: tuple[CachedKube, list[tuple[str, str]]]
) -> None:
    kube, _ = cached
    fresh = Informers(kube)  # a restarted operator's caches, not started: one reflector by hand
    r = fresh.reflectors[[s.name for s in fresh.stores].index("dljobs")]
    store: Store = r.store
    store.rv, r.relist = 1, False  # as if it had watched since long ago: the apiserver answers 410
    t = threading.Thread(target=r.run, daemon=True)
    t.start()
    try:
        wait_for(lambda: store.lists == 1)
        assert names(store.items()) == {"before"}
        assert store.rv > 1
    finally:
        r.stopped.set()
    again = CachedKube(kube.api, kube.namespace)
    again.informers.start()
    try:
        assert again.informers.wait_synced(30)
        assert [s.lists for s in again.informers.stores] == [1] * 7
        assert names(again.dljobs()) == {"before"}
    finally:
        again.informers.stop()
