"""Cluster Energy Saving live (issue 12 §4) on a qosmos dev cluster (KWOK, 4 fake 8-GPU nodes), time
compressed: a CES minute is 1 s, so Alg. 2's 10-minute PeriodicCheck runs every 10 s over a past
"hour" of 60 s. ``qosmos operator run --ces`` runs as a subprocess; watches on nodes and gang pods
record every transition, and an invariant checker confirms from the API that no pod is ever bound
and running on a node that is asleep or still waking."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from qosmos.testing.node import wait_for
from qosmos.testing.processes import OperatorProcess as Operator

from .conftest import dev_cluster

pytestmark = pytest.mark.integration

GROUP, VERSION = "qosmos.io", "v1alpha1"
NODES = [f"node-{i}" for i in range(4)]
LATENCY_S = 4.0  # --ces-wake-latency
POWER = "qosmos.io/power"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    with dev_cluster(tmp_path_factory, "cesdev") as c:
        yield c


@dataclass
class Watched:
    """What the watches saw, with the test's monotonic clock."""

    power: dict[str, str] = field(default_factory=dict)  # node -> asleep | waking | awake
    transitions: list[tuple[float, str, str]] = field(default_factory=list)  # (t, node, state)
    pods: dict[str, tuple[str, str]] = field(default_factory=dict)  # pod -> (node, phase)
    pod_phases: list[tuple[float, str, str]] = field(default_factory=list)  # (t, pod, phase)
    suspects: list[tuple[str, str]] = field(default_factory=list)  # (pod, node) the watches suggested
    violations: list[str] = field(default_factory=list)  # suspects the API confirmed
    lock: threading.Lock = field(default_factory=threading.Lock)


def _power(node: Any) -> str:
    return ((node.metadata.labels or {}).get(POWER)) or "awake"


def watch(kubeconfig: str, ns: str, seen: Watched, stop: threading.Event) -> list[threading.Thread]:
    from kubernetes import client, config
    from kubernetes import watch as kwatch

    api = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))

    def check(pod: str, found: list[tuple[str, str]]) -> None:  # under the lock
        node, phase = seen.pods.get(pod, ("", ""))
        if node and phase in ("Pending", "Running") and seen.power.get(node, "awake") != "awake":
            found.append((pod, node))

    def confirm(found: list[tuple[str, str]]) -> None:
        """Two streams have no common order: a suspect is a violation only when the API, read now,
        shows both at once (the pod bound there and unfinished, the node asleep or waking)."""
        for pod, node in found:
            with contextlib.suppress(Exception):
                p = api.read_namespaced_pod(pod, ns)
                n = api.read_node(node)
                if p.spec.node_name == node and p.status.phase in ("Pending", "Running") and _power(n) != "awake":
                    with seen.lock:
                        seen.violations.append(f"{pod} {p.status.phase} on {node} ({_power(n)})")
        with seen.lock:
            seen.suspects += found

    def nodes() -> None:
        while not stop.is_set():
            for ev in kwatch.Watch().stream(api.list_node, timeout_seconds=5):
                n = ev["object"]
                state = _power(n)
                found: list[tuple[str, str]] = []
                with seen.lock:
                    if seen.power.get(n.metadata.name) != state:
                        seen.power[n.metadata.name] = state
                        seen.transitions.append((time.monotonic(), n.metadata.name, state))
                        for pod, (on, _) in seen.pods.items():
                            if on == n.metadata.name:
                                check(pod, found)
                confirm(found)
                if stop.is_set():
                    break

    def pods() -> None:
        while not stop.is_set():
            for ev in kwatch.Watch().stream(
                api.list_namespaced_pod, ns, label_selector="qosmos.io/job", timeout_seconds=5
            ):
                p = ev["object"]
                phase = "Deleted" if ev["type"] == "DELETED" else (p.status.phase or "")
                found = []
                with seen.lock:
                    before = seen.pods.get(p.metadata.name)
                    seen.pods[p.metadata.name] = (p.spec.node_name or "", phase)
                    if before is None or before[1] != phase:
                        seen.pod_phases.append((time.monotonic(), p.metadata.name, phase))
                    check(p.metadata.name, found)
                confirm(found)
                if stop.is_set():
                    break

    threads = [threading.Thread(target=f, daemon=True) for f in (nodes, pods)]
    for t in threads:
        t.start()
    return threads


def test_nodes_sleep_when_demand_falls_and_wake_for_a_gang(cluster: tuple[str, Path]) -> None:
    from kubernetes import client, config

    kubeconfig, directory = cluster
    api_client = config.new_client_from_config(config_file=kubeconfig)
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    ns = f"ces-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    wait_for(lambda: _has_sa(core, ns), 30, "the default ServiceAccount")
    custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "virtualclusters",
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "VirtualCluster", "metadata": {"name": "ces"}, "spec": {}},
    )

    def dljob(name: str, gpus: int, run: str, **spec: Any) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "DLJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "virtualCluster": "ces",
                "gpus": gpus,
                "template": {
                    "metadata": {"annotations": {"qosmos.io/run-duration": run}},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                    },
                },
                **spec,
            },
        }
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "dljobs", body)

    def phase(name: str) -> str | None:
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "dljobs", name)
        return (obj.get("status") or {}).get("phase")

    seen = Watched()
    stop = threading.Event()
    threads = watch(kubeconfig, ns, seen, stop)
    ces = ["--ces", "--ces-minute", "1", "--ces-interval", "10", "--ces-sigma", "1"]
    ces += ["--ces-wake-latency", str(LATENCY_S), "--history-namespace", "default"]
    op = Operator(kubeconfig, directory / "operator-ces.log", ces)
    op.start()
    try:
        # demand: three one-node jobs for 70 s (a CES "hour" and more), then nothing
        for i in range(3):
            dljob(f"busy-{i}", 8, "70s")
        wait_for(lambda: all(phase(f"busy-{i}") == "Running" for i in range(3)), 60, "three busy nodes")
        wait_for(lambda: all(phase(f"busy-{i}") == "Succeeded" for i in range(3)), 120, "the busy jobs done")
        # demand fell to 0: PeriodicCheck sleeps down to C_R + σ = 0 + 1 (the past hour fell, no forecast rise)
        wait_for(lambda: sorted(s for s in seen.power.values()) == ["asleep"] * 3 + ["awake"], 90, "3 nodes asleep")
        asleep = sorted(n for n, s in seen.power.items() if s == "asleep")
        for name in asleep:
            n = core.read_node(name)
            assert n.spec.unschedulable
            assert any(t.key == POWER and t.value == "asleep" and t.effect == "NoSchedule" for t in n.spec.taints)
        with seen.lock:
            ended = [t for t, pod, ph in seen.pod_phases if pod.startswith("busy-") and ph == "Succeeded"]
            first_sleep = min(t for t, _, s in seen.transitions if s == "asleep")
        assert len(ended) == 3 and first_sleep > max(ended)  # nothing slept while demand was there
        # the gauge is set once the step that sleeps them ends (the watch sees each node's patch before)
        wait_for(lambda: op.metric("qosmos_operator_ces_sleeping_nodes") == 3, 10, "the sleeping-nodes gauge")
        assert op.metric("qosmos_operator_ces_wakeups_total") == 0

        # a two-node gang arrives: one node is awake; it lacks nodes -> R − C_A + σ wake, then it runs
        dljob("gang", 16, "10s", gpusPerNode=8)
        wait_for(lambda: phase("gang") == "Running", 90, "the gang running on woken nodes")
        wait_for(lambda: op.metric("qosmos_operator_ces_delayed_jobs_total") == 1, 30, "the delay counted")
        assert op.metric("qosmos_operator_ces_wakeups_total") >= 1
        assert op.metric("qosmos_operator_ces_woken_nodes_total") >= 1
        placement = custom.get_namespaced_custom_object(GROUP, VERSION, ns, "dljobs", "gang")["status"]["placement"]
        with seen.lock:
            woken = {n for _, n, s in seen.transitions if s == "waking"}
            for name in woken:  # each stayed unschedulable for the wake latency
                t_wake = min(t for t, n, s in seen.transitions if n == name and s == "waking")
                t_awake = min(
                    (t for t, n, s in seen.transitions if n == name and s == "awake" and t > t_wake), default=None
                )
                assert t_awake is not None, f"{name} never woke"
                assert t_awake - t_wake >= LATENCY_S - 0.5
        assert woken and set(placement["nodeNames"]) <= {n for n, s in seen.power.items() if s == "awake"}
        for name in woken:  # taint, cordon and label are gone
            n = core.read_node(name)
            assert not n.spec.unschedulable
            assert not any(t.key == POWER for t in n.spec.taints or [])
            assert POWER not in (n.metadata.labels or {})
        wait_for(lambda: phase("gang") == "Succeeded", 60, "the gang done")
        cm = core.read_namespaced_config_map("qosmos-operator-ces", "default")
        assert len(json.loads(cm.data["history.json"])["running"]) >= 60  # the recorded minutes
    finally:
        op.stop()
        stop.set()
        for t in threads:
            t.join(10)
        with contextlib.suppress(Exception):
            custom.delete_cluster_custom_object(GROUP, VERSION, "virtualclusters", "ces")
        with contextlib.suppress(Exception):
            core.delete_namespace(ns)
    assert not seen.violations, seen.violations  # no pod ever bound and running on a node asleep or waking


def _has_sa(core: Any, ns: str) -> bool:
    try:
        core.read_namespaced_service_account("default", ns)
        return True
    except Exception:
        return False
