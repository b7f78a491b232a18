"""Fixtures for integration tests against a real (kubelet-less) Kubernetes control plane."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from qosmos.dev.binaries import DEV_BINARIES, cache_bin_dir, missing_binaries
from qosmos.testing.controlplane import ControlPlane, binaries_present
from qosmos.testing.fakenodes import create_nodes, fake_node_manifests, openb_nodes, spread_sample
from qosmos.testing.skips import skip_or_fail

FAKE_NODE_COUNT = 16


def need_dev_binaries() -> None:
    """Skip (fail in CI) when the binaries `qosmos dev up` starts are not built."""
    missing = missing_binaries(cache_bin_dir(), DEV_BINARIES)
    if missing:
        skip_or_fail(f"Kubernetes binaries missing ({', '.join(missing)}): run hack/k8s/build.sh")


@contextlib.contextmanager
def dev_cluster(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[tuple[str, Path]]:
    """``qosmos dev up --no-operator`` with 4 nodes x 8 GPUs, attached (a killed test run takes the
    cluster with it): (kubeconfig, folder); ``down`` afterwards."""
    need_dev_binaries()
    from qosmos.dev.cluster import DevOptions, down, up

    directory = tmp_path_factory.mktemp(name) / "cluster"
    state, _ = up(DevOptions(dir=directory, nodes=4, gpus_per_node=8, operator=False, detached=False))
    try:
        yield state.kubeconfig, directory
    finally:
        down(directory, grace=5)
        if os.environ.get("QOSMOS_K8S_KEEP") != "1":
            shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """A running control plane (etcd, apiserver, controller-manager, default scheduler)."""
    if not binaries_present() and shutil.which("go") is None and not os.path.exists("/usr/local/go/bin/go"):
        skip_or_fail("Go toolchain absent: cannot build the Kubernetes control plane (hack/k8s/build.sh)")
    with ControlPlane() as cp:
        yield cp


@pytest.fixture(scope="session")
def crds_applied(control_plane: ControlPlane) -> str:
    """The qosmos.io CRDs server-side applied (field manager ``qosmos-crds``) and Established."""
    repo = Path(__file__).resolve().parents[2]
    res = control_plane.kubectl(
        "apply", "--server-side", "--field-manager=qosmos-crds", "--force-conflicts", "-f", str(repo / "crds")
    )
    control_plane.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/dljobs.qosmos.io",
        "crd/virtualclusters.qosmos.io",
        "crd/inferenceservices.qosmos.io",
    )
    return str(res.stdout)


@pytest.fixture(scope="session")
def k8s_api(control_plane: ControlPlane) -> Any:
    """A cluster-admin ``kubernetes.client.ApiClient`` shared by the session."""
    return control_plane.api_client()


@pytest.fixture(scope="session")
def fake_gpu_nodes(k8s_api: Any) -> list[dict[str, Any]]:
    """``FAKE_NODE_COUNT`` openb GPU nodes (spread over the list: mixed models/GPU counts)."""
    rows = spread_sample(openb_nodes(), FAKE_NODE_COUNT)
    manifests = fake_node_manifests(rows)
    create_nodes(k8s_api, manifests)
    return manifests


@pytest.fixture
def k8s_namespace(k8s_api: Any) -> Iterator[str]:
    """A fresh namespace, force-deleted with its pods afterwards (no kubelet ever confirms)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    v1 = client.CoreV1Api(k8s_api)
    name = f"t-{uuid.uuid4().hex[:10]}"
    v1.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the ServiceAccount admission plugin needs "default"
        try:
            v1.read_namespaced_service_account("default", name)
            break
        except ApiException:
            time.sleep(0.2)
    yield name
    try:
        v1.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        v1.delete_namespace(name)
    except ApiException:
        pass


class Recorder:
    """Every watch event of a list (resumed from its last resourceVersion), kept in order."""

    def __init__(self, list_fn: Any, *args: Any, **kw: Any) -> None:
        self.list_fn, self.args, self.kw = list_fn, args, kw
        self.events: list[tuple[str, Any]] = []
        self.error: BaseException | None = None
        self.stop = threading.Event()
        first = list_fn(*args, **kw)
        self.rv = first["metadata"]["resourceVersion"] if isinstance(first, dict) else first.metadata.resource_version
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from kubernetes import watch

        try:
            while not self.stop.is_set():
                w = watch.Watch()
                for ev in w.stream(self.list_fn, *self.args, resource_version=self.rv, timeout_seconds=5, **self.kw):
                    obj = ev["object"]
                    rv = obj["metadata"]["resourceVersion"] if isinstance(obj, dict) else obj.metadata.resource_version
                    self.rv = rv
                    self.events.append((ev["type"], obj))
                    if self.stop.is_set():
                        w.stop()
        except BaseException as exc:  # an expired watch would lose events: the test must say so
            self.error = exc

    def close(self) -> None:
        self.stop.set()
        self.thread.join(15)
        assert self.error is None, f"watch failed: {self.error!r}"
