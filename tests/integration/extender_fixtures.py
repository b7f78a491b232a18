"""Fixtures and helpers for the extender's integration tests (imported by test_extender*.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from qosmos.extender.bench import start_extender_process, wait_http_ok
from qosmos.extender.cache import ClusterCache, node_from_object, pod_info
from qosmos.testing.controlplane import ControlPlane, free_port, qosmos_scheduler_config
from qosmos.testing.fakenodes import gpu_pod_manifest

SCHEDULER = "qosmos-scheduler"


class ExtenderProcess:
    """``qosmos extender serve`` against the control plane, restartable on the same port."""

    def __init__(self, cp: ControlPlane, log_dir: Path) -> None:
        self.cp = cp
        self.port = free_port()
        self.log = log_dir / "extender.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = start_extender_process(self.cp.kubeconfig_path, self.log, self.port, grpc_port=-1)
        try:
            wait_http_ok(f"{self.url}/readyz", 60)
        except TimeoutError:
            raise AssertionError(f"extender not ready; log:\n{self.log_tail()}") from None

    def kill(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None

    def terminate(self, timeout: float = 20) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout)
        self.proc = None
        return rc

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "<no log>"

    def post(self, verb: str, body: Any) -> tuple[int, Any]:
        import urllib.error
        import urllib.request

        req = urllib.request.Request(f"{self.url}/{verb}", data=orjson.dumps(body), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, orjson.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, orjson.loads(e.read())


@pytest.fixture(scope="module")
def extender(
    control_plane: ControlPlane, fake_gpu_nodes: list[dict], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ExtenderProcess]:
    ext = ExtenderProcess(control_plane, tmp_path_factory.mktemp("extender"))
    ext.start()
    yield ext
    ext.kill()


@pytest.fixture(scope="module")
def qosmos_scheduler(control_plane: ControlPlane, extender: ExtenderProcess) -> Iterator[Any]:
    comp = control_plane.start_scheduler(SCHEDULER, qosmos_scheduler_config(extender.url))
    yield comp
    comp.stop()
    control_plane.schedulers.pop(SCHEDULER, None)


def gpu_pod(
    name: str,
    gpus: int,
    annotations: dict[str, str] | None = None,
    node: str | None = None,
    scheduler: str = SCHEDULER,
    cpu: str = "1",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return gpu_pod_manifest(
        name, gpus, scheduler, cpu_milli=int(float(cpu) * 1000), annotations=annotations, labels=labels, node=node
    )


def wait_for(cond: Callable[[], Any], timeout: float = 60, interval: float = 0.2, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def snapshot_cache(api: Any) -> ClusterCache:
    """A ClusterCache built from a fresh list of nodes and bound pods (what the extender should hold)."""
    from kubernetes import client

    v1 = client.CoreV1Api(api)
    nodes = orjson.loads(v1.list_node(_preload_content=False).data)["items"]
    pods = orjson.loads(
        v1.list_pod_for_all_namespaces(
            field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed", _preload_content=False
        ).data
    )["items"]
    cache = ClusterCache()
    cache.replace_nodes(node_from_object(n) for n in nodes)
    cache.replace_pods(pod_info(p) for p in pods)
    return cache
