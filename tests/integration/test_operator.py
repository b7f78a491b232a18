"""The operator on a real control plane (``qosmos dev`` without its own operator: etcd, apiserver,
controller-manager with the garbage collector, the qosmos-scheduler calling the extender over TLS, KWOK
running 4 fake 8-GPU nodes). The operator runs as ``qosmos operator run`` in a subprocess, so the
restart test can kill -9 it."""

from __future__ import annotations

import calendar
import contextlib
import dataclasses
import json
import os
import subprocess
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from qosmos.testing.node import UNREACHABLE_TAINT, unreachable_marks, wait_for
from qosmos.testing.processes import OperatorProcess as Operator

from .conftest import Recorder, dev_cluster

pytestmark = pytest.mark.integration

GROUP, VERSION = "qosmos.io", "v1alpha1"
NODES = [f"node-{i}" for i in range(4)]


class Api:
    def __init__(self, kubeconfig: str) -> None:
        from kubernetes import client, config

        self.client = config.new_client_from_config(config_file=kubeconfig)
        self.core = client.CoreV1Api(self.client)
        self.custom = client.CustomObjectsApi(self.client)
        self.namespaces: list[str] = []

    def cleanup(self) -> None:
        """Every DLJob of the test's namespaces deleted (their gangs stop holding GPUs), then the rest."""
        for ns in self.namespaces:
            with contextlib.suppress(Exception):
                self.custom.delete_collection_namespaced_custom_object(GROUP, VERSION, ns, "dljobs")
        for ns in self.namespaces:
            wait_for(lambda ns=ns: not self.pods(ns), 60, f"pods of {ns} gone")
            with contextlib.suppress(Exception):
                self.core.delete_namespace(ns)
        self.delete_vcs()
        self.label_pools({})

    def namespace(self) -> str:
        name = f"op-{uuid.uuid4().hex[:8]}"
        self.namespaces.append(name)
        self.core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        wait_for(lambda: self._sa(name), 30, "the default ServiceAccount")
        return name

    def _sa(self, ns: str) -> bool:
        try:
            self.core.read_namespaced_service_account("default", ns)
            return True
        except Exception:
            return False

    def label_pools(self, pools: dict[str, str | None]) -> None:
        for n in NODES:
            self.core.patch_node(n, {"metadata": {"labels": {"qosmos.io/pool": pools.get(n)}}})

    def vc(self, name: str, pool: str | None, **spec: Any) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "VirtualCluster",
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"qosmos.io/pool": pool} if pool else {}, **spec},
        }
        self.custom.create_cluster_custom_object(GROUP, VERSION, "virtualclusters", body)

    def delete_vcs(self) -> None:
        for v in self.custom.list_cluster_custom_object(GROUP, VERSION, "virtualclusters")["items"]:
            self.custom.delete_cluster_custom_object(GROUP, VERSION, "virtualclusters", v["metadata"]["name"])

    def dljob(self, ns: str, name: str, vc: str, gpus: int, run: str | None = "3s", **spec: Any) -> None:
        ann = {"qosmos.io/run-duration": run} if run else {}
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "DLJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "virtualCluster": vc,
                "gpus": gpus,
                "template": {
                    "metadata": {"annotations": ann},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                    },
                },
                **spec,
            },
        }
        self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "dljobs", body)

    def get(self, ns: str, name: str) -> dict[str, Any]:
        return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, "dljobs", name))

    def jobs(self, ns: str) -> dict[str, dict[str, Any]]:
        items = self.custom.list_namespaced_custom_object(GROUP, VERSION, ns, "dljobs")["items"]
        return {j["metadata"]["name"]: j for j in items}

    def phase(self, ns: str, name: str) -> str | None:
        return (self.get(ns, name).get("status") or {}).get("phase")

    def pods(self, ns: str, job: str | None = None) -> list[Any]:
        sel = f"qosmos.io/job={job}" if job else "qosmos.io/job"
        return list(self.core.list_namespaced_pod(ns, label_selector=sel).items)

    def events(self, ns: str, reason: str) -> dict[str, str]:
        """The message of each object's ``reason`` Event in ``ns``, by the object's name."""
        items = self.core.list_namespaced_event(ns).items
        return {e.involved_object.name: e.message for e in items if e.reason == reason}

    def vc_status(self, name: str) -> dict[str, Any]:
        return dict(self.custom.get_cluster_custom_object(GROUP, VERSION, "virtualclusters", name).get("status") or {})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    with dev_cluster(tmp_path_factory, "opdev") as c:
        yield c


@pytest.fixture(scope="module")
def operator(cluster: tuple[str, Path]) -> Iterator[Operator]:
    kubeconfig, directory = cluster
    op = Operator(kubeconfig, directory / "operator.log")
    op.start()
    try:
        yield op
    finally:
        op.stop()


@pytest.fixture
def api(cluster: tuple[str, Path], operator: Operator) -> Iterator[Api]:
    a = Api(cluster[0])
    yield a
    a.cleanup()


def _status(job: dict[str, Any]) -> dict[str, Any]:
    return dict(job.get("status") or {})


def _condition(job: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in _status(job).get("conditions") or [] if c["type"] == "Admitted"), {})


# --------------------------------------------------------------------------- lifecycle


def test_lifecycle_to_succeeded(api: Api, operator: Operator) -> None:
    ns = api.namespace()
    api.vc("life", None, policy="fifo", placement="consolidate")
    api.dljob(ns, "two", "life", 4, run="3s", gpusPerNode=2, cpus="1", memory="1Gi")
    wait_for(lambda: api.phase(ns, "two") == "Running", 60, "Running")
    labels = {n.metadata.name: n.metadata.labels.get("qosmos.io/vc") for n in api.core.list_node().items}
    assert labels == dict.fromkeys(NODES, "life")  # the label the extender reads, kept by the operator
    ready = api.vc_status("life")["conditions"][0]
    assert (ready["status"], ready["reason"], ready["message"]) == ("True", "NodesSelected", "4 node(s), 32 GPUs")
    st = _status(api.get(ns, "two"))
    assert st["placement"]["nodes"] == 2 and st["placement"]["gpusPerNode"] == 2 and st["placement"]["shape"] == "2x2"
    pods = api.pods(ns, "two")
    assert sorted(p.metadata.name for p in pods) == ["two-0-0", "two-0-1"]
    assert {p.spec.node_name for p in pods} == set(st["placement"]["nodeNames"])  # the core's nodes
    for p in pods:
        assert not p.spec.scheduling_gates and p.spec.scheduler_name == "qosmos-scheduler"
        assert p.metadata.annotations["qosmos.io/placement"] == "2x2"
        assert p.metadata.owner_references[0].kind == "DLJob"
    wait_for(lambda: api.phase(ns, "two") == "Succeeded", 60, "Succeeded")
    st = _status(api.get(ns, "two"))
    assert st["completionTime"] >= st["startTime"] >= st["admittedAt"]
    assert _condition(api.get(ns, "two"))["status"] == "True"

    def reasons() -> set[str]:  # Events are written off the pass's path: moments after the status
        return {e.reason for e in api.core.list_namespaced_event(ns).items if e.involved_object.name == "two"}

    wait_for(lambda: {"Admitted", "Running", "Succeeded"} <= reasons(), 10, "the Events of each transition")
    text = operator.metrics()
    assert 'qosmos_operator_admissions_total{vc="life"}' in text
    assert "qosmos_operator_apply_to_running_seconds_count" in text


def test_failed_pod_restarts_the_gang_then_fails(api: Api) -> None:
    ns = api.namespace()
    api.vc("fail", None)
    api.dljob(ns, "flaky", "fail", 2, run=None, gpusPerNode=1, backoffLimit=1)
    wait_for(lambda: api.phase(ns, "flaky") == "Running", 60, "Running")
    api.core.patch_namespaced_pod_status("flaky-0-0", ns, {"status": {"phase": "Failed"}})
    # gang 1 after the 10 s back-off; attempt 0's failed pod is kept for kubectl logs, its peer stopped
    want = ["flaky-0-0", "flaky-1-0", "flaky-1-1"]
    wait_for(lambda: sorted(p.metadata.name for p in api.pods(ns, "flaky")) == want, 60, "gang 1")
    assert _status(api.get(ns, "flaky"))["restarts"] == 1
    wait_for(lambda: api.phase(ns, "flaky") == "Running", 60, "Running again")
    api.core.patch_namespaced_pod_status("flaky-1-1", ns, {"status": {"phase": "Failed"}})
    wait_for(lambda: api.phase(ns, "flaky") == "Failed", 60, "Failed")
    st = _status(api.get(ns, "flaky"))
    assert st["restarts"] == 1 and st["completionTime"]
    # the healthy pod was stopped: nothing of the failed gang holds GPUs; the failed pods stay for their logs
    want = ["flaky-0-0", "flaky-1-1"]
    wait_for(lambda: sorted(p.metadata.name for p in api.pods(ns, "flaky")) == want, 30, "pods stopped")


def test_a_gang_whose_node_is_deleted_goes_back_to_the_queue(api: Api) -> None:
    """A node deleted under an admitted gang: the DLJob is requeued (NodeLost, no restart counted),
    inadmissible while its VirtualCluster has no node, and admitted again, on another node, once one
    is there."""
    from qosmos.dev.fakenodes import create_nodes, fake_node_manifest

    row = {"sn": "extra-0", "cpu_milli": 96000, "memory_mib": 786432, "gpu": 8, "model": "V100M32"}
    manifest = fake_node_manifest(row, 0, extra_labels={"qosmos.io/pool": "lost"})
    create_nodes(api.client, [manifest])
    ns = api.namespace()
    try:
        api.vc("lost", "lost")
        api.dljob(ns, "orphan", "lost", 8, run=None)
        wait_for(lambda: api.phase(ns, "orphan") == "Running", 60, "Running on extra-0")
        assert _status(api.get(ns, "orphan"))["placement"]["nodeNames"] == ["extra-0"]
        api.core.delete_node("extra-0")
        wait_for(lambda: api.phase(ns, "orphan") == "Queued", 60, "requeued")
        st = _status(api.get(ns, "orphan"))
        assert not st.get("restarts") and st["preemptions"] == 1 and "placement" not in st
        # its VirtualCluster has no node left: it waits for one, as inadmissible (blocking nobody)
        wait_for(lambda: _condition(api.get(ns, "orphan"))["reason"] == "Inadmissible", 30, "Inadmissible")
        assert "can never fit in lost: no node in vc='lost'" in _condition(api.get(ns, "orphan"))["message"]
        reasons = {e.reason for e in api.core.list_namespaced_event(ns).items if e.involved_object.name == "orphan"}
        assert "NodeLost" in reasons or wait_for(
            lambda: "NodeLost" in {e.reason for e in api.core.list_namespaced_event(ns).items}, 10, "NodeLost Event"
        )
        row2 = {**row, "sn": "extra-1"}
        create_nodes(api.client, [fake_node_manifest(row2, 0, extra_labels={"qosmos.io/pool": "lost"})])
        wait_for(lambda: api.phase(ns, "orphan") == "Running", 60, "Running again on extra-1")
        assert _status(api.get(ns, "orphan"))["placement"]["nodeNames"] == ["extra-1"]
    finally:
        for name in ("extra-0", "extra-1"):
            with contextlib.suppress(Exception):
                api.core.delete_node(name)


@contextlib.contextmanager
def _unreachable(api: Api, node: str) -> Iterator[None]:
    """``node`` unreachable, as a real cluster shows it when a kubelet stops posting: KWOK stops managing
    it (no heartbeat), and what the node-lifecycle controller (off in the dev cluster) then writes is
    written here: Ready Unknown since now, and the unreachable NoSchedule and NoExecute taints. On exit
    it is back: the taints go, KWOK manages it again and marks it Ready."""
    from qosmos.dev.fakenodes import KWOK_NODE_ANNOTATION, KWOK_NODE_VALUE

    cond, taints = unreachable_marks(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    keep = [t for t in api.core.read_node(node).spec.taints or [] if t.key != UNREACHABLE_TAINT]
    api.core.patch_node(node, {"metadata": {"annotations": {KWOK_NODE_ANNOTATION: None}}})
    try:
        api.core.patch_node_status(node, {"status": {"conditions": [cond]}})
        api.core.patch_node(
            node, {"spec": {"taints": [api.client.sanitize_for_serialization(t) for t in keep] + taints}}
        )
        yield
    finally:
        api.core.patch_node(
            node, {"spec": {"taints": [api.client.sanitize_for_serialization(t) for t in keep] or None}}
        )
        api.core.patch_node(node, {"metadata": {"annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE}}})

        def ready_again() -> bool:
            conds = api.core.read_node(node).status.conditions or []
            return any(c.type == "Ready" and c.status == "True" for c in conds)

        wait_for(ready_again, 60, f"{node} Ready again")


def test_a_gang_on_an_unreachable_node_stalls_then_goes_back_to_the_queue(api: Api) -> None:
    """A node that stops being Ready under a running gang (Ready Unknown and the unreachable taints, as the
    node-lifecycle controller writes them): the gang's status says since when it stalled, the GPUs left
    free on that node take no new gang, and after its nodeLostSeconds the gang is requeued (NodeLost, no
    restart counted). The node back, the requeued gang and the one that waited run there."""
    ns = api.namespace()
    api.label_pools({"node-2": "nl", "node-3": "nl"})
    api.vc("nl", "nl")
    api.dljob(ns, "full", "nl", 8, run=None, gpusPerNode=8)
    wait_for(lambda: api.phase(ns, "full") == "Running", 60, "the 8-GPU job Running")
    api.dljob(ns, "half", "nl", 4, run=None, gpusPerNode=4, nodeLostSeconds=8)
    wait_for(lambda: api.phase(ns, "half") == "Running", 60, "the 4-GPU job Running")
    (node,) = _status(api.get(ns, "half"))["placement"]["nodeNames"]
    assert _status(api.get(ns, "full"))["placement"]["nodeNames"] != [node]
    with _unreachable(api, node):
        stalled = wait_for(lambda: _status(api.get(ns, "half")).get("stalledSince"), 30, "stalledSince")
        assert 0 <= time.time() - calendar.timegm(time.strptime(stalled, "%Y-%m-%dT%H:%M:%SZ")) < 30
        # 4 GPUs are free on the unreachable node: a newcomer that would fit there is not placed there
        api.dljob(ns, "new", "nl", 4, run=None, gpusPerNode=4)
        wait_for(lambda: api.phase(ns, "half") == "Queued", 60, "requeued NodeLost")
        st = _status(api.get(ns, "half"))
        assert not st.get("restarts") and st["preemptions"] == 1 and "placement" not in st
        assert "stalledSince" not in st
        wait_for(lambda: "half" in api.events(ns, "NodeLost"), 10, "the NodeLost Event")
        assert "nodeLostSeconds 8" in api.events(ns, "NodeLost")["half"]
        # a pass after the requeue ordered both: neither went to the unreachable node (nor elsewhere: full)
        for name in ("half", "new"):
            wait_for(
                lambda n=name: _condition(api.get(ns, n)).get("reason") in ("Head", "BehindHead", "NoFit"), 30, name
            )
            assert api.phase(ns, name) == "Queued" and "placement" not in _status(api.get(ns, name))
    for name in ("half", "new"):
        wait_for(lambda n=name: api.phase(ns, n) == "Running", 90, f"{name} Running once the node is back")
        assert _status(api.get(ns, name))["placement"]["nodeNames"] == [node]
    assert api.phase(ns, "full") == "Running" and not _status(api.get(ns, "full")).get("restarts")


def test_a_gang_whose_node_is_back_within_its_grace_runs_on(api: Api) -> None:
    """A node unreachable for less than the gang's nodeLostSeconds: the gang stalls (stalledSince) and,
    the node back with its pods still running, runs on as it was: same attempt, no restart, no requeue,
    its stall cleared."""
    ns = api.namespace()
    api.label_pools({"node-2": "bl"})
    api.vc("bl", "bl")
    api.dljob(ns, "steady", "bl", 8, run=None, gpusPerNode=8, nodeLostSeconds=600)
    wait_for(lambda: api.phase(ns, "steady") == "Running", 60, "Running")
    before = _status(api.get(ns, "steady"))
    pods = sorted(p.metadata.name for p in api.pods(ns, "steady"))
    with _unreachable(api, "node-2"):
        wait_for(lambda: _status(api.get(ns, "steady")).get("stalledSince"), 30, "stalledSince")
    wait_for(lambda: not _status(api.get(ns, "steady")).get("stalledSince"), 30, "the stall cleared")
    st = _status(api.get(ns, "steady"))
    assert st["phase"] == "Running" and st["placement"] == before["placement"]
    assert not st.get("restarts") and not st.get("preemptions") and st.get("startTime") == before.get("startTime")
    assert sorted(p.metadata.name for p in api.pods(ns, "steady")) == pods
    assert "steady" not in api.events(ns, "NodeLost")


def test_inference_replicas_on_an_unreachable_node_are_replaced_elsewhere(api: Api) -> None:
    """An InferenceService's replicas on a node that stops being Ready serve nothing to count on: each is
    deleted and replaced at once on a Ready node (as the simulator asks for a down node's replicas again),
    said in a ReplicaLost Event."""
    ns = api.namespace()
    spec = {
        "modelType": "ResNet50",
        "qosTargetMs": 200,
        "gpuSwitchBatch": 20,
        "cpu": {"maxBatch": 0},  # never on CPU: two GPU replicas whatever the rate
        "minReplicas": 2,
        "maxReplicas": 2,
        "template": {
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "serve", "image": "registry.k8s.io/pause:3.10"}],
            }
        },
    }
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        "metadata": {"name": "serve", "namespace": ns, "annotations": {"qosmos.io/qps": "10"}},
        "spec": spec,
    }
    api.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", body)

    def replicas() -> dict[str, Any]:
        return {
            p.metadata.name: p for p in api.core.list_namespaced_pod(ns, label_selector="qosmos.io/inference").items
        }

    def serving() -> dict[str, str] | None:
        ready = {
            n: p.spec.node_name
            for n, p in replicas().items()
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp
        }
        return ready if len(ready) == 2 else None

    try:
        before = wait_for(serving, 60, "two GPU replicas Running")
        node = before["serve-gpu-0"]
        lost = sorted(n for n, where in before.items() if where == node)
        with _unreachable(api, node):
            after = wait_for(
                lambda: (s := serving()) and not set(s) & set(lost) and s, 60, "the lost replicas replaced"
            )
            assert node not in after.values() and len(after) == 2
            gone = replicas()  # (deleted: KWOK, still running the node's pods, confirms at once; a kubelet would not)
            assert all(n not in gone or gone[n].metadata.deletion_timestamp for n in lost)
            msg = wait_for(lambda: api.events(ns, "ReplicaLost").get("serve"), 10, "the ReplicaLost Event")
            assert all(f"{n} on {node}" in msg for n in lost), msg
        wait_for(lambda: not set(replicas()) & set(lost), 60, "the old pods gone once their node is back")
        assert serving() == after  # nothing else moved
    finally:
        api.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "serve")
        wait_for(lambda: not replicas(), 60, "the replicas garbage-collected")


def test_kubectl_drain_requeues_a_gang_without_counting_a_failure(api: Api, cluster: tuple[str, Path]) -> None:
    """``kubectl drain`` of a running gang's node (cordon, then the Eviction API: each pod's DisruptionTarget
    condition, then its deletion) is the node's maintenance, not the job's failure: the DLJob is requeued
    (reason Disrupted, no restart counted; with backoffLimit 0 a counted failure would fail it) and runs
    again on another node of its VirtualCluster."""
    from qosmos.dev.binaries import cache_bin_dir

    ns = api.namespace()
    api.label_pools({"node-2": "dr", "node-3": "dr"})
    api.vc("dr", "dr")
    api.dljob(ns, "drained", "dr", 8, run=None, gpusPerNode=8, backoffLimit=0)
    wait_for(lambda: api.phase(ns, "drained") == "Running", 60, "Running")
    (node,) = _status(api.get(ns, "drained"))["placement"]["nodeNames"]
    kubectl = [str(cache_bin_dir() / "kubectl"), "--kubeconfig", cluster[0]]
    try:
        res = subprocess.run([*kubectl, "drain", node, "--timeout=60s"], capture_output=True, text=True, timeout=90)
        assert res.returncode == 0, res.stderr
        moved = wait_for(
            lambda: (
                (st := _status(api.get(ns, "drained"))).get("phase") == "Running"
                and st["placement"]["nodeNames"] != [node]
                and st
            ),
            60,
            "Running again on another node",
        )
        assert not moved.get("restarts") and moved["preemptions"] == 1
        msg = api.events(ns, "Disrupted")["drained"]
        assert "was evicted (kubectl drain, or the Eviction API) (EvictionByEvictionAPI)" in msg, msg
    finally:
        subprocess.run([*kubectl, "uncordon", node], capture_output=True, timeout=60)


def test_deleting_a_dljob_removes_its_pods(api: Api) -> None:
    ns = api.namespace()
    api.vc("del", None)
    api.dljob(ns, "gone", "del", 2, run=None)
    wait_for(lambda: api.phase(ns, "gone") == "Running", 60, "Running")
    assert api.pods(ns, "gone")
    api.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "dljobs", "gone")
    wait_for(lambda: not api.pods(ns, "gone"), 60, "pods garbage-collected")


def test_las_preempts_the_most_served_job_for_a_newcomer_once(api: Api) -> None:
    """LAS on the live cluster: v (32 GPUs, the four nodes) has run a few seconds when n (32 GPUs, no
    service yet) arrives and outranks it. v goes back to Queued, its pods deleted, the service it
    attained kept on its status; once n succeeds, v is admitted again (a new gang attempt) and succeeds.
    No thrashing: v is preempted once and admitted twice, n admitted once (passes run every 2 s)."""
    ns = api.namespace()
    api.vc("las", None, policy="las", placement="consolidate")
    ready = wait_for(lambda: (api.vc_status("las").get("conditions") or [None])[0], 30, "VC condition")
    assert (ready["status"], ready["reason"]) == ("True", "NodesSelected")  # a preemptive policy runs
    api.dljob(ns, "v", "las", 32, run="20s", gpusPerNode=8)
    wait_for(lambda: api.phase(ns, "v") == "Running", 60, "v Running")
    time.sleep(3)  # v attains service (startTime is in whole seconds)
    # n runs longer than v did: a pass that counted n's service up to itself would swap them back
    # within seconds (n's service passes v's), and again, instead of waiting for an event (n's end)
    api.dljob(ns, "n", "las", 32, run="12s", gpusPerNode=8)
    wait_for(lambda: api.phase(ns, "n") in ("Admitted", "Running"), 60, "n admitted")
    st = _status(api.get(ns, "v"))
    assert st["phase"] == "Queued" and st["preemptions"] == 1 and "startTime" not in st and "placement" not in st
    served = st["attainedServiceGpuSeconds"]
    assert served >= 2 * 32 and st["executedSeconds"] * 32 == pytest.approx(served, abs=0.1)
    # back in its queue as of the event its preemption was decided for: n's arrival
    assert st["queuedSince"] == api.get(ns, "n")["metadata"]["creationTimestamp"]
    wait_for(lambda: not api.pods(ns, "v"), 30, "v's pods deleted")
    wait_for(lambda: api.phase(ns, "n") == "Succeeded", 60, "n Succeeded")
    wait_for(lambda: api.phase(ns, "v") == "Succeeded", 90, "v Succeeded after its second run")
    st = _status(api.get(ns, "v"))
    assert st["preemptions"] == 1 and st["attainedServiceGpuSeconds"] == served  # kept across the second run
    assert sorted(p.metadata.name for p in api.pods(ns, "v")) == [f"v-1-{i}" for i in range(4)]  # attempt 1

    def events() -> Counter[tuple[str, str]]:
        return Counter(
            (e.involved_object.name, e.reason)
            for e in api.core.list_namespaced_event(ns).items
            if e.reason in ("Admitted", "Preempted")
        )

    want = {("v", "Admitted"): 2, ("v", "Preempted"): 1, ("n", "Admitted"): 1}
    wait_for(lambda: events() == want, 10, f"the Events {want}")
    api.vc("empty", "no-such-pool")
    ready = wait_for(lambda: (api.vc_status("empty").get("conditions") or [None])[0], 30, "VC condition")
    assert (ready["status"], ready["reason"]) == ("False", "NoNodes") and "no-such-pool" in ready["message"]


def test_an_inference_replica_preempts_the_last_submitted_job_and_is_booked_until_bound(api: Api) -> None:
    """SODA §V-D2 live: j1..j4 (8 GPUs each, created a second apart) fill the four nodes; w (8 GPUs)
    waits. An InferenceService asks for one GPU replica: the operator preempts j4, the last submitted
    (not w, which does not run, nor j1..j3), and j4 waits at the head of its queue (``queueHead``). The
    replica pod is booked while it waits for its node: w, whose 8 GPUs j4's node now has for a
    moment, is never admitted there, and the replica becomes Ready on j4's old node. Once the service is
    deleted, j4 is admitted again (head flag cleared) and w still waits behind it."""
    ns = api.namespace()
    api.vc("soda", None, policy="fifo", placement="consolidate")
    for name in ("j1", "j2", "j3", "j4"):
        api.dljob(ns, name, "soda", 8, run="600s")
        wait_for(lambda name=name: api.phase(ns, name) == "Running", 60, f"{name} Running")
        time.sleep(1.1)  # creation times are whole seconds: the order must be unambiguous
    j4_node = api.pods(ns, "j4")[0].spec.node_name
    api.dljob(ns, "w", "soda", 8, run="600s")
    wait_for(lambda: (_status(api.get(ns, "w")).get("conditions") or [{}])[0].get("status") == "False", 30, "w waits")
    before = {p.metadata.name for p in api.pods(ns)}
    binds = Recorder(api.core.list_namespaced_pod, ns, label_selector="qosmos.io/job")  # every gang pod event
    service = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceService",
        # 400 queries/s: beyond a 16-core CPU replica's measured ~77/s (ResNet-50, predictors/measured), so the
        # one replica allowed is a GPU replica
        "metadata": {"name": "serve", "namespace": ns, "annotations": {"qosmos.io/qps": "400"}},
        "spec": {
            "modelType": "ResNet50",
            "qosTargetMs": 200,
            "gpuSwitchBatch": 20,
            "minReplicas": 1,
            "maxReplicas": 1,
            "template": {
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "serve", "image": "registry.k8s.io/pause:3.10"}],
                }
            },
        },
    }
    api.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", service)

    def replica() -> Any:
        pods = api.core.list_namespaced_pod(ns, label_selector="qosmos.io/inference=serve").items
        return next((p for p in pods if not p.metadata.deletion_timestamp), None)

    def ready() -> Any:
        p = replica()
        ok = p is not None and p.status.phase == "Running"
        return p if ok and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or []) else None

    pod = wait_for(ready, 90, "the replica Ready")
    assert pod.spec.node_name == j4_node  # the room j4 left
    st = _status(api.get(ns, "j4"))
    assert st["phase"] == "Queued" and st["queueHead"] is True and st["preemptions"] == 1
    # Events go out through the operator's buffered recorder, after the status it follows: wait for it
    why = wait_for(
        lambda: [e.message for e in api.core.list_namespaced_event(ns).items if e.reason == "PreemptedForInference"],
        10,
        "the PreemptedForInference Event",
    )
    assert len(why) == 1 and f"replica {ns}/serve-gpu-0 of {ns}/serve" in why[0] and "last-submitted" in why[0]
    assert {n: api.phase(ns, n) for n in ("j1", "j2", "j3", "w")} == dict.fromkeys(("j1", "j2", "j3"), "Running") | {
        "w": "Queued"
    }
    time.sleep(4)  # two more passes: the replica's GPU stays its own
    assert api.phase(ns, "w") == "Queued" and api.phase(ns, "j4") == "Queued"
    binds.close()
    late = {
        (o.metadata.labels["qosmos.io/job"], o.spec.node_name)
        for _, o in binds.events
        if o.spec.node_name and o.metadata.name not in before
    }
    assert not late, f"a gang pod bound while the replica waited or served: {late}"

    api.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "serve")
    wait_for(lambda: replica() is None, 60, "the replica gone")
    wait_for(lambda: api.phase(ns, "j4") == "Running", 60, "j4 admitted again")
    st = _status(api.get(ns, "j4"))
    assert "queueHead" not in st and st["preemptions"] == 1
    assert api.phase(ns, "w") == "Queued"


# --------------------------------------------------------------------------- gangs


def test_a_4x8_gang_is_never_half_bound(api: Api) -> None:
    """Watch every pod event of the gang: no pod is bound before all four exist (they are created
    gated), and every gate goes. Kubernetes has no multi-object write, so a pod may bind while a peer's
    gate is still being removed. That the four requests are in flight together (the window is one round
    trip, not four) is proven without a clock in tests/unit/operator/test_plan.py; here the window is
    printed as a measurement, not held to a time that a loaded machine could outrun."""
    from kubernetes import watch

    ns = api.namespace()
    api.vc("gang", None, placement="consolidate")
    seen: dict[str, Any] = {}
    created: dict[str, float] = {}
    ungated: dict[str, float] = {}
    bound_at: dict[str, float] = {}
    w = watch.Watch()
    started = threading.Event()

    def run() -> None:
        started.set()
        for ev in w.stream(api.core.list_namespaced_pod, ns, timeout_seconds=90):
            t = time.monotonic()
            p = ev["object"]
            name = p.metadata.name
            seen[name] = p
            created.setdefault(name, t)
            if not p.spec.scheduling_gates:
                ungated.setdefault(name, t)
            if p.spec.node_name:
                bound_at.setdefault(name, t)
            if len(bound_at) == 4:
                w.stop()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    started.wait(5)
    time.sleep(0.5)
    api.dljob(ns, "big", "gang", 32, run=None, gpusPerNode=8)
    t.join(90)
    assert len(bound_at) == 4, (created, ungated, bound_at)
    assert max(created.values()) <= min(bound_at.values()), "a pod was bound before its whole gang existed"
    window = max(ungated.values()) - min(bound_at.values())
    pods = api.pods(ns, "big")
    assert len(pods) == 4 and len({p.spec.node_name for p in pods}) == 4
    assert all(p.spec.node_name and not p.spec.scheduling_gates for p in pods)
    api.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "dljobs", "big")
    wait_for(lambda: not api.pods(ns, "big"), 60, "pods garbage-collected")
    print(f"gang: first bind to last ungate {window * 1e3:.0f} ms")


# --------------------------------------------------------------------------- quotas


def test_quotas_borrowing_and_reclaim(api: Api) -> None:
    """A cohort (issue 21 §3): qa borrows qb's idle nodes; qb's job reclaims them, the borrowed job with
    the least lost work (submitted last) is preempted and qb's job starts on the node it freed."""
    ns = api.namespace()
    api.label_pools({"node-0": "a", "node-1": "a", "node-2": "b", "node-3": "b"})
    cohort = {"policy": "fifo", "placement": "consolidate", "cohort": "team"}
    api.vc("qa", "a", **cohort, quota={"gpus": 16, "borrowingLimit": 16})
    api.vc("qb", "b", **cohort, quota={"gpus": 16})
    for i in range(5):  # 5 whole nodes: 2 by quota on qa's nodes + 2 borrowed on qb's; the 5th waits
        api.dljob(ns, f"a{i}", "qa", 8, run=None, gpusPerNode=8)
        time.sleep(1.1)  # distinct creation seconds: "submitted last" is unambiguous
    wait_for(lambda: sum(api.phase(ns, f"a{i}") == "Running" for i in range(5)) == 4, 60, "4 of qa running")
    a4 = api.get(ns, "a4")
    assert _status(a4)["phase"] == "Queued" and _condition(a4)["reason"] == "Quota"
    labels = {n.metadata.name: n.metadata.labels.get("qosmos.io/vc") for n in api.core.list_node().items}
    assert labels == {"node-0": "qa", "node-1": "qa", "node-2": "qb", "node-3": "qb"}
    node_of = {f"a{i}": api.pods(ns, f"a{i}")[0].spec.node_name for i in range(4)}
    assert sorted(node_of.values()) == NODES  # qa's jobs on every node of the cohort
    for i in range(4):  # a pod on qb's node carries qb's label: the extender lets it bind there
        pod = api.pods(ns, f"a{i}")[0]
        assert pod.metadata.labels["qosmos.io/vc"] == labels[pod.spec.node_name]
    wait_for(lambda: api.vc_status("qa").get("gpus", {}).get("borrowed") == 16, 30, "qa borrows 16")
    assert api.vc_status("qb")["gpus"]["lent"] == 16
    # qb wants its quota back: a3 (least lost work, submitted last) is preempted, b0 starts on its node
    api.dljob(ns, "b0", "qb", 8, run=None, gpusPerNode=8)
    wait_for(lambda: api.phase(ns, "b0") == "Running", 60, "qb's job running")
    phases = {f"a{i}": api.phase(ns, f"a{i}") for i in range(5)}
    assert phases == {"a0": "Running", "a1": "Running", "a2": "Running", "a3": "Queued", "a4": "Queued"}
    (b0,) = api.pods(ns, "b0")
    assert b0.spec.node_name == node_of["a3"]  # the lender's job on the node the reclaim freed
    assert _status(api.get(ns, "a3"))["preemptions"] == 1
    # back in qa's queue, waiting on its cap (16 + what qb still lends)
    wait_for(lambda: _condition(api.get(ns, "a3")).get("reason") == "Quota", 30, "a3 waits on qa's quota")

    wait_for(lambda: set(api.events(ns, "Preempted")) == {"a3"}, 10, "the Preempted Event of a3")
    assert "reclaimed by VC qb" in api.events(ns, "Preempted")["a3"]
    assert not api.pods(ns, "a3")
    wait_for(lambda: api.vc_status("qa").get("gpus", {}).get("borrowed") == 8, 30, "qa borrows 8")
    assert api.vc_status("qb")["gpus"]["lent"] == 8
    api.delete_vcs()  # no VirtualCluster selects the nodes any more: the operator's label goes

    def unlabelled() -> bool:
        return all("qosmos.io/vc" not in (n.metadata.labels or {}) for n in api.core.list_node().items)

    wait_for(unlabelled, 30, "qosmos.io/vc removed from the nodes")
    for name in [*(f"a{i}" for i in range(5)), "b0"]:
        api.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "dljobs", name)
    wait_for(lambda: not api.pods(ns), 60, "pods garbage-collected")


def test_soda_arrays_lend_and_reclaim(api: Api) -> None:
    """SODA's job arrays (seed 002 §V-C) live: over node-0 and node-1 with ``arraySplit: 0.5``, node-0 is
    the 4-GPU array and node-1 the 1-GPU array. 1-3-GPU jobs fill node-1, the next borrows node-0; an
    8-GPU job then takes its array back: the borrower is preempted (its Event says why) and requeued."""
    ns = api.namespace()
    api.label_pools({"node-0": "s", "node-1": "s"})
    api.vc("arrays", "s", policy="soda", placement="best-fit", arraySplit=0.5)
    for name, gpus in (("s1", 2), ("s2", 3), ("s3", 3), ("s4", 2)):
        api.dljob(ns, name, "arrays", gpus, run=None)
        wait_for(lambda name=name: api.phase(ns, name) == "Running", 60, f"{name} Running")
        time.sleep(1.1)  # distinct creation seconds
    node_of = {n: api.pods(ns, n)[0].spec.node_name for n in ("s1", "s2", "s3", "s4")}
    assert node_of == {"s1": "node-1", "s2": "node-1", "s3": "node-1", "s4": "node-0"}, node_of
    api.dljob(ns, "g", "arrays", 8, run=None)
    wait_for(lambda: api.phase(ns, "g") == "Running", 60, "the 4-GPU array's job running")
    (g,) = api.pods(ns, "g")
    assert g.spec.node_name == "node-0"
    assert {n: api.phase(ns, n) for n in ("s1", "s2", "s3")} == dict.fromkeys(("s1", "s2", "s3"), "Running")
    assert api.phase(ns, "s4") == "Queued" and _status(api.get(ns, "s4"))["preemptions"] == 1

    wait_for(lambda: set(api.events(ns, "Preempted")) == {"s4"}, 10, "the Preempted Event of s4")
    assert "gpu-4 array reclaims what it lent to gpu-1 for" in api.events(ns, "Preempted")["s4"]
    assert not api.pods(ns, "s4")


# --------------------------------------------------------------------------- order and why pending


def test_swaf_order_is_the_cores_and_every_queued_job_says_why(api: Api) -> None:
    from qosmos.extender.admission_api import order_context
    from qosmos.extender.core.admission import PartitionRuntime
    from qosmos.extender.core.cluster import ClusterState
    from qosmos.extender.core.modeldb import ModelDB
    from qosmos.operator.crds import VirtualClusterSpec
    from qosmos.operator.translate import core_nodes, job_from_dljob

    ns = api.namespace()
    api.label_pools({"node-0": "s"})
    api.vc("sw", "s", policy="swaf", placement="cer")
    api.dljob(ns, "blocker", "sw", 8, run=None, gpusPerNode=8)
    wait_for(lambda: api.phase(ns, "blocker") == "Running", 60, "blocker running")
    tasks = [
        ("q-normal-vgg", "Normal", "VGG", 256, 800),
        ("q-urgent-resnet", "Urgent", "ResNet50", 128, 400),
        ("q-prior-bert", "Prior", "BERT", 64, 300),
        ("q-normal-resnet", "Normal", "ResNet50", 128, 3000),
        ("q-prior-vgg", "Prior", "VGG", 256, 2000),
    ]
    for name, qos, model, batch, iters in tasks:
        api.dljob(ns, name, "sw", 4, qosClass=qos, modelType=model, globalBatchSize=batch, iterations=iters)
    api.dljob(ns, "lost", "no-such-vc", 1)
    names = [t[0] for t in tasks]

    def positions() -> dict[str, int] | None:
        jobs = api.jobs(ns)
        pos = {n: _status(jobs[n]).get("queuePosition") for n in names}
        return pos if all(p is not None for p in pos.values()) and len(set(pos.values())) == len(names) else None

    pos = wait_for(positions, 60, "queue positions")
    live = sorted(names, key=lambda n: pos[n])
    # the core's order for the same queue, from the same objects through the same translation
    objs = api.jobs(ns)
    nodes = [api.client.sanitize_for_serialization(api.core.read_node("node-0"))]
    cluster = ClusterState(core_nodes(nodes, {"node-0": "sw"}))
    spec = VirtualClusterSpec.model_validate({"nodeSelector": {"qosmos.io/pool": "s"}, "policy": "swaf"})
    rt = PartitionRuntime(spec.partition("sw"))
    now = time.time()
    jobs = [job_from_dljob(objs[n]) for n in names]
    jobs = [dataclasses.replace(j, submit_time=j.submit_time - now) for j in jobs]
    ctx = order_context(rt.partition, cluster, [], 0.0, ModelDB.builtin())
    core = [d.job.name for d in rt.policy.order(jobs, ctx)]
    assert live == core
    assert live[0] == "q-urgent-resnet"  # Urgent: no waiting allowance
    for n in names:  # why pending: the core's reason, as a condition
        c = _condition(objs[n])
        assert c["status"] == "False" and c["reason"] in ("Head", "BehindHead", "NoFit"), c
        assert c["message"].startswith("needs ") and " in sw; " in c["message"], c["message"]
    head = _condition(objs[live[0]])
    assert head["reason"] == "Head" and "does not fit the free resources now" in head["message"]
    assert "waiting allowance" in head["message"]
    assert f"behind {ns}/{live[0]} (the queue does not backfill)" in _condition(objs[live[1]])["message"]
    assert _status(objs[live[-1]]).get("waitingAllowanceSeconds") is not None
    assert all(_status(objs[n]).get("deadline") for n in names)  # GENIE Eq. 12, written once
    # created after the queue: the pass that wrote the positions may have started before it existed
    lost = wait_for(lambda: _condition(api.get(ns, "lost")) or None, 60, "the lost job's condition")
    assert lost["reason"] == "VirtualClusterMissing" and "no-such-vc" in lost["message"]
    text = api.vc_status("sw")
    assert (
        text["queued"] == 5
        and text["running"] == 1
        and text["gpus"]
        == {
            "total": 8,
            "used": 8,
            "borrowed": 0,
            "lent": 0,
        }
    )


# --------------------------------------------------------------------------- restart safety


def test_kill9_restarts_lose_nothing_and_duplicate_nothing(api: Api, operator: Operator) -> None:
    from kubernetes import watch

    ns = api.namespace()
    api.vc("rs", None, policy="fifo", placement="consolidate")
    added: Counter[str] = Counter()
    uids: dict[str, set[str]] = defaultdict(set)
    w = watch.Watch()
    started = threading.Event()
    stopping = threading.Event()

    def run() -> None:
        rv = api.core.list_namespaced_pod(ns).metadata.resource_version
        started.set()
        while not stopping.is_set():  # resumed from the last resourceVersion: no event seen twice
            try:
                for ev in w.stream(api.core.list_namespaced_pod, ns, resource_version=rv, timeout_seconds=60):
                    p = ev["object"]
                    rv = p.metadata.resource_version
                    uids[p.metadata.name].add(p.metadata.uid)
                    if ev["type"] == "ADDED":
                        added[p.metadata.name] += 1
            except Exception:
                if stopping.is_set():
                    return

    t = threading.Thread(target=run, daemon=True)
    t.start()
    started.wait(5)
    n = int(os.environ.get("QOSMOS_RESTART_JOBS", "200"))
    for i in range(n):  # gangs of 1 to 4 pods
        gpus = (1, 2, 4, 8)[i % 4]
        api.dljob(ns, f"r{i:03d}", "rs", gpus, run="2s", gpusPerNode=min(gpus, 2) if gpus > 2 else None)
    for _ in range(5):  # kill -9 in the middle of admitting, restart at once
        time.sleep(3)
        operator.kill9()
        operator.start()

    def done() -> bool:
        return all(_status(j).get("phase") == "Succeeded" for j in api.jobs(ns).values())

    wait_for(done, 240, "all Succeeded", every=1)
    time.sleep(1)  # the last events reach the watch
    stopping.set()
    w.stop()
    jobs = api.jobs(ns)
    assert len(jobs) == n
    pods = api.pods(ns)
    per_job: Counter[str] = Counter(p.metadata.labels["qosmos.io/job"] for p in pods)
    for name, j in jobs.items():
        assert per_job[name] == _status(j)["placement"]["nodes"], name
        assert _status(j).get("restarts", 0) == 0
    twice = {k: v for k, v in added.items() if v > 1}
    assert not twice, twice
    assert all(len(u) == 1 for u in uids.values())
    assert sum(added.values()) == len(pods)


# --------------------------------------------------------------------------- QSSF and the examples


def test_qssf_orders_by_durations_learnt_from_finished_dljobs(api: Api, operator: Operator) -> None:
    ns = api.namespace()
    api.label_pools({"node-0": "q"})
    api.vc("qs", "q", policy="qssf", placement="consolidate")
    writes = operator.metric("qosmos_operator_history_writes_total")
    start = time.monotonic()
    for name, run in (("short-a", "1s"), ("long-a", "8s"), ("short-b", "1s")):  # the history, one at a time
        api.dljob(ns, name, "qs", 8, run=run)
        wait_for(lambda name=name: api.phase(ns, name) == "Succeeded", 60, f"{name} Succeeded")
    time.sleep(1)  # the pass that wrote the last Succeeded has observed it
    writes = operator.metric("qosmos_operator_history_writes_total") - writes
    span = time.monotonic() - start
    # three finishes, one history write per --history-save-interval (30 s) at most
    assert writes <= span // 30 + 1, (writes, span)

    def learnt() -> dict[str, float] | None:
        """The history as stored (the first observation at once, later ones at most every 30 s, and what
        is held back at a graceful stop)."""
        history = json.loads(
            api.core.read_namespaced_config_map("qosmos-operator-durations", "default").data["observations.json"]
        )
        mine = {row["name"]: row["duration"] for row in history if row["user"] == ns}
        return mine if set(mine) == {"short-a", "long-a", "short-b"} else None

    operator.stop()  # SIGTERM: the operator writes what it held back
    operator.start()
    mine = wait_for(learnt, 10, "the three durations in the history")
    assert mine["long-a"] > mine["short-a"]
    api.dljob(ns, "blocker", "qs", 8, run=None)
    wait_for(lambda: api.phase(ns, "blocker") == "Running", 60, "blocker running")
    api.dljob(ns, "long-b", "qs", 8, run="8s")
    time.sleep(1.1)
    api.dljob(ns, "short-c", "qs", 8, run="1s")  # later, but predicted shorter: first in QSSF's order

    def ordered() -> dict[str, Any] | None:
        jobs = api.jobs(ns)
        st = {n: _status(jobs[n]) for n in ("long-b", "short-c")}
        ok = all(s.get("queuePosition") is not None and s.get("predictedDurationSeconds") for s in st.values())
        return st if ok and st["short-c"]["queuePosition"] != st["long-b"]["queuePosition"] else None

    st = wait_for(ordered, 60, "QSSF positions")
    assert st["short-c"]["queuePosition"] == 0 and st["long-b"]["queuePosition"] == 1
    assert st["short-c"]["predictedDurationSeconds"] < st["long-b"]["predictedDurationSeconds"]
    # a restarted operator replays the history: the same predictions
    operator.kill9()
    operator.start()
    api.dljob(ns, "short-d", "qs", 8, run="1s")
    wait_for(lambda: _status(api.get(ns, "short-d")).get("predictedDurationSeconds"), 60, "prediction after restart")
    assert _status(api.get(ns, "short-d"))["predictedDurationSeconds"] < st["long-b"]["predictedDurationSeconds"]
    api.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "dljobs", "blocker")
    wait_for(lambda: api.phase(ns, "long-b") == "Succeeded", 90, "the queue drained")
    jobs = api.jobs(ns)
    admitted = {n: _status(jobs[n])["admittedAt"] for n in ("short-c", "short-d", "long-b")}
    assert admitted["short-c"] <= admitted["long-b"] and admitted["short-d"] <= admitted["long-b"]


def test_the_examples_run_to_succeeded(api: Api) -> None:
    """examples/ as a user applies them (`kubectl apply -f examples/`): both VirtualClusters, a DLJob
    of each QoS class and a CPU job, all to Succeeded (their run-durations are 30 to 90 s), and the
    InferenceService serving beside them."""
    import yaml

    api.label_pools({"node-0": "a", "node-1": "b", "node-2": "a", "node-3": "b"})
    ns = api.namespace()
    examples = Path(__file__).resolve().parents[2] / "examples"
    names: list[str] = []
    services: list[str] = []
    for path in sorted(examples.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] == "VirtualCluster":
                api.custom.create_cluster_custom_object(GROUP, VERSION, "virtualclusters", doc)
            elif doc["kind"] == "InferenceService":
                api.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", doc)
                services.append(doc["metadata"]["name"])
            else:
                api.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "dljobs", doc)
                names.append(doc["metadata"]["name"])
    assert len(names) == 6 and len(services) == 1

    def serving(name: str) -> bool:
        st = api.custom.get_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", name).get("status") or {}
        return int(st.get("readyReplicas") or 0) >= 1

    wait_for(lambda: all(serving(s) for s in services), 90, "the InferenceService serving", every=2)

    def phases() -> dict[str, str | None]:
        return {n: _status(j).get("phase") for n, j in api.jobs(ns).items()}

    wait_for(lambda: set(phases().values()) == {"Succeeded"}, 130, "every example Succeeded", every=2)


def test_a_gang_finds_rank_0_through_its_headless_service(api: Api) -> None:
    """Issue 20 §1: the torchrun example's pods are <dljob>-<i> under the DLJob's headless Service (published
    before they are Ready), each told the rendezvous; deleting the DLJob takes the Service with it."""
    import yaml

    api.label_pools({"node-0": "a", "node-1": "a"})
    api.vc("vc-a", "a")
    ns = api.namespace()
    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "examples" / "dljob-torchrun.yaml").read_text())
    doc["spec"]["template"]["metadata"]["annotations"]["qosmos.io/run-duration"] = "600s"  # stays Running
    api.custom.create_namespaced_custom_object(GROUP, VERSION, ns, "dljobs", doc)
    name = doc["metadata"]["name"]
    wait_for(lambda: api.phase(ns, name) == "Running", 60, "the torchrun example Running")
    svc = api.core.read_namespaced_service(name, ns)
    assert svc.spec.cluster_ip == "None" and svc.spec.publish_not_ready_addresses is True
    assert svc.spec.selector == {"qosmos.io/job": name} and [p.port for p in svc.spec.ports] == [29500]
    job = api.get(ns, name)
    (owner,) = svc.metadata.owner_references
    assert (owner.kind, owner.uid, owner.controller) == ("DLJob", job["metadata"]["uid"], True)
    assert _status(job).get("observedGeneration") == job["metadata"]["generation"]
    pods = sorted(api.pods(ns, name), key=lambda p: p.metadata.labels["qosmos.io/replica-index"])
    assert [(p.spec.hostname, p.spec.subdomain) for p in pods] == [(f"{name}-0", name), (f"{name}-1", name)]
    for i, p in enumerate(pods):
        env = {e.name: e.value for e in p.spec.containers[0].env}
        assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == f"{name}-0.{name}.{ns}.svc"
        assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"], env["PET_NODE_RANK"]) == ("2", "2", str(i))
        assert bool(p.spec.containers[0].ports) == (i == 0)  # the rendezvous port on rank 0

    from kubernetes import client

    discovery = client.DiscoveryV1Api(api.client)

    def hostnames() -> set[str] | None:  # what the cluster DNS serves as <hostname>.<service>
        slices = discovery.list_namespaced_endpoint_slice(ns, label_selector=f"kubernetes.io/service-name={name}")
        got = {e.hostname for s in slices.items for e in s.endpoints or []}
        return got if got == {f"{name}-0", f"{name}-1"} else None

    wait_for(hostnames, 30, "the Service's endpoints named by the pods' hostnames")
    api.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, "dljobs", name)

    def service_gone() -> bool:
        try:
            api.core.read_namespaced_service(name, ns)
            return False
        except Exception:
            return True

    wait_for(service_gone, 60, "the Service garbage-collected with its DLJob")
