"""Issue 22 §1: a watch on the node's pods with request timeouts; /healthz, /readyz and /metrics on one port."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from qosmos.sidecar.actuators import CgroupV1Cpu
from qosmos.sidecar.agent import AgentOptions, Metrics, NodeAgent
from qosmos.sidecar.cgroups import CgroupLayout
from qosmos.sidecar.fakes import make_kubelet_tree
from qosmos.sidecar.fs import FakeKernelFS
from qosmos.sidecar.health import serve
from qosmos.sidecar.podwatch import NotSynced, PodCache
from typer.testing import CliRunner


def _pod(uid: str, rv: str, phase: str = "Running") -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(uid=uid, name=uid, namespace="ns", resource_version=rv),
        status=client.V1PodStatus(phase=phase),
    )


class FakeApi:
    """list_pod_for_all_namespaces answering lists; the watch is the test's ``stream``."""

    def __init__(self) -> None:
        self.lists: list[dict[str, Any]] = []
        self.items = [_pod("a", "10"), _pod("b", "11", "Pending")]

    def list_pod_for_all_namespaces(self, **kw: Any) -> Any:
        self.lists.append(kw)
        return SimpleNamespace(items=list(self.items), metadata=SimpleNamespace(resource_version="11"))


def test_list_then_watch_with_timeouts_and_a_relist_on_410() -> None:
    api = FakeApi()
    watches: list[dict[str, Any]] = []
    script: list[list[dict[str, Any]] | Exception] = [
        [{"type": "ADDED", "object": _pod("c", "12")}, {"type": "MODIFIED", "object": _pod("b", "13")},
         {"type": "DELETED", "object": _pod("a", "14")}],
        ApiException(status=410, reason="Gone"),
        [{"type": "ERROR", "object": SimpleNamespace(message="too old resource version")}],
    ]  # fmt: skip

    def stream(func: Any, **kw: Any) -> Iterator[dict[str, Any]]:
        assert func == api.list_pod_for_all_namespaces
        watches.append(kw)
        step = script.pop(0)
        if isinstance(step, Exception):
            raise step
        yield from step

    cache = PodCache(api, "n1", request_timeout_s=7, watch_timeout_s=120, stream=stream)
    with pytest.raises(NotSynced):
        cache.pods()  # not "no pods": a pass must not release everything before the first list
    cache.step()
    assert len(api.lists) == 1 and cache.synced
    first = api.lists[0]
    assert first["field_selector"] == "spec.nodeName=n1" and first["_request_timeout"] == 7
    assert first["label_selector"] == "qosmos.io/node-agent=managed"
    w = watches[0]
    assert w["resource_version"] == "11" and w["timeout_seconds"] == 120 and w["_request_timeout"] == (7, 127)
    assert w["field_selector"] == "spec.nodeName=n1" and w["watch"] is True
    assert sorted(p.metadata.uid for p in cache.pods()) == ["b", "c"]  # a deleted; b now Running
    assert cache.resource_version == "14"
    cache.step()  # 410 Gone: list again
    assert len(api.lists) == 2 and sorted(p.metadata.uid for p in cache.pods()) == ["a"]
    cache.step()  # an ERROR event: list again
    assert len(api.lists) == 3


def test_the_watch_loop_survives_the_api_being_away() -> None:
    api = FakeApi()
    calls = {"n": 0}
    slept: list[float] = []

    def stream(func: Any, **kw: Any) -> Iterator[dict[str, Any]]:
        calls["n"] += 1
        if calls["n"] >= 3:
            cache.stop()
        raise ConnectionError("refused")

    cache = PodCache(api, "n1", stream=stream, sleep=slept.append)
    cache._loop()
    assert slept == [1.0, 2.0, 4.0] and cache.synced and [p.metadata.uid for p in cache.pods()] == ["a"]


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_healthz_readyz_and_metrics(tmp_path: Path) -> None:
    root = make_kubelet_tree(tmp_path / "cg", {"p": ("besteffort", 1)}, "0-3", 1, "cgroupfs")
    now = [0.0]
    metrics = Metrics()
    agent = NodeAgent("n1", None, CgroupLayout(root, 1, "cgroupfs"), CgroupV1Cpu(FakeKernelFS()),
                      options=AgentOptions(interval=5), metrics=metrics, clock=lambda: now[0])  # fmt: skip
    srv = serve("127.0.0.1", 0, metrics.registry, agent.healthy, agent.ready)
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        assert _get(f"{url}/healthz")[0] == 200  # starting: alive
        assert _get(f"{url}/readyz")[0] == 503  # no pass yet
        agent.reconcile([])
        assert _get(f"{url}/readyz")[0] == 200
        code, body = _get(f"{url}/metrics")
        assert code == 200 and "qosmos_sidecar_passes_total 1.0" in body
        now[0] += 61  # no pass for longer than max(3 intervals, 60 s): the loop is stuck
        assert _get(f"{url}/healthz")[0] == 503
        assert _get(f"{url}/nope")[0] == 404
    finally:
        srv.shutdown()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--net-shaping"], "--net-shaping"),
        (["--stale-seconds", "0"], "--stale-seconds"),
    ],
)
def test_cli_refuses_contradictory_flags(args: list[str], needle: str) -> None:
    from qosmos.cli import app

    r = CliRunner().invoke(app, ["sidecar", "run", "--node", "n", *args])
    assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output


def test_cleanup_with_nothing_to_do_exits_0(tmp_path: Path) -> None:
    from qosmos.cli import app

    r = CliRunner().invoke(app, ["sidecar", "cleanup", "--state-dir", str(tmp_path / "none")])
    assert r.exit_code == 0 and "nothing to restore" in r.output
