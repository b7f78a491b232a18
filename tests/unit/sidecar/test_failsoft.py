"""Issue 22 §1: one failing source or one bad pod costs that measurement or that pod, never the pass.

Each test engages the §V-E throttle (no MBA: the CPU job's cores halved), then injects one failure in
the pass where bandwidth drops below the release point, and shows the throttle released in that pass.
"""

from __future__ import annotations

import json
import socket
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.sidecar.actuators import CgroupV1Cpu
from qosmos.sidecar.agent import AgentOptions, NodeAgent, parse_cpu_quantity, pod_info
from qosmos.sidecar.cgroups import CgroupLayout, container_children, parse_cpuset
from qosmos.sidecar.fakes import make_v1_tree, v1_pod
from qosmos.sidecar.fs import FakeKernelFS
from qosmos.sidecar.sources import DeclaredBandwidthSource, DeclaredGpuSource, GpuSource, NvmlGpuSource

T_UID, C_UID, B_UID = "aaaa-train", "bbbb-cpujob", "cccc-badpod"


def _cpus(layout: CgroupLayout, uid: str) -> set[int]:
    d = layout.pod_dir("cpuset", uid)
    assert d is not None
    (s,) = {frozenset(parse_cpuset((c / "cpuset.cpus").read_text())) for c in container_children(d)}
    return set(s)


class Node:
    """A fake v1 node with a training pod and a CPU job (limit 4, request 1), throttled by halving."""

    def __init__(self, tmp: Path, gpu: GpuSource | None, bw_spec: str | None = None, **opt: Any) -> None:
        root = make_v1_tree(
            tmp / "cgroup", {T_UID: ("besteffort", 1), C_UID: ("burstable", 1), B_UID: ("burstable", 1)}
        )
        self.layout = CgroupLayout(root, 1, "cgroupfs")
        self.bw = tmp / "bw.json"
        self.now = [0.0]
        self.pods = [
            v1_pod(T_UID, {"qosmos.io/job-kind": "training", "qosmos.io/model-category": "CV"}, "BestEffort"),
            v1_pod(C_UID, {"qosmos.io/job-kind": "cpu"}, "Burstable", "4", "1"),
        ]
        options = AgentOptions(step_seconds=1000, warmup_seconds=0, **opt)
        self.agent = NodeAgent("n1", None, self.layout, CgroupV1Cpu(FakeKernelFS()), gpu,
                               DeclaredBandwidthSource(bw_spec or str(self.bw)), options=options,
                               clock=lambda: self.now[0])  # fmt: skip

    def bandwidth(self, ratio: float) -> None:
        self.bw.write_text(json.dumps({"bytes_per_second": ratio * 1e10, "peak_bytes_per_second": 1e10}))

    def engage(self) -> None:
        self.bandwidth(0.8)
        self.agent.reconcile(self.pods)
        assert _cpus(self.layout, C_UID) == {2, 3}  # halved (§V-E, no MBA)
        self.now[0] += 1

    def errors(self, source: str, reason: str) -> float:
        return self.agent.metrics.source_errors.labels(source, reason)._value.get()


class Boom:
    """A GPU source raising ``exc`` (after ``ok`` good answers)."""

    def __init__(self, exc: Exception, ok: int = 1) -> None:
        self.exc, self.ok = exc, ok

    def utilisation(self, pod_key: str, pids: Any = ()) -> float | None:
        if self.ok > 0:
            self.ok -= 1
            return 50.0
        raise self.exc


def _fake_nvml(monkeypatch: pytest.MonkeyPatch, fail: str) -> None:
    """pynvml as it answers on a MIG-enabled GPU (utilisation NotSupported) or a lost GPU (GpuIsLost)."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    class NVMLError_GpuIsLost(NVMLError):
        pass

    def handle(i: int) -> int:
        if fail == "lost":
            raise NVMLError_GpuIsLost("GPU is lost")
        return i

    def rates(h: int) -> Any:
        raise NVMLError_NotSupported("Not Supported")  # MIG mode: no device-level utilisation

    fake = types.SimpleNamespace(
        NVMLError=NVMLError, nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=handle, nvmlDeviceGetUtilizationRates=rates,
        nvmlDeviceGetComputeRunningProcesses=lambda h: [],
    )  # fmt: skip
    monkeypatch.setitem(sys.modules, "pynvml", fake)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("failure", ["nvml-mig", "nvml-lost", "malformed-file", "unreachable-endpoint", "raises"])
def test_a_failing_gpu_source_is_no_measurement_and_the_throttle_is_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    gpu: GpuSource
    if failure.startswith("nvml"):
        _fake_nvml(monkeypatch, failure.removeprefix("nvml-"))
        gpu, want = NvmlGpuSource(), ("gpu", "nvml")
    elif failure == "malformed-file":
        f = tmp_path / "gpu.json"
        f.write_text(json.dumps({"*": 50}))
        gpu, want = DeclaredGpuSource(str(f)), ("gpu", "malformed")
    elif failure == "unreachable-endpoint":
        gpu, want = DeclaredGpuSource(f"http://127.0.0.1:{_closed_port()}/gpu"), ("gpu", "unreachable")
    else:
        gpu, want = Boom(RuntimeError("driver exploded"), ok=10**6), ("gpu", "error")
    node = Node(tmp_path, gpu)
    node.engage()
    if failure == "malformed-file":
        (tmp_path / "gpu.json").write_text("{not json")
    if isinstance(gpu, Boom):
        gpu.ok = 0
    node.bandwidth(0.5)  # below the release point (60 % of peak)
    node.agent.reconcile(node.pods)
    assert _cpus(node.layout, C_UID) == {0, 1, 2, 3}  # released in this very pass
    assert node.errors(*want) >= 1
    assert node.agent.passes == 2 and not node.agent.eliminator.engaged


@pytest.mark.parametrize("bad", ["1Kq", "many", "-2"])
def test_a_pod_with_a_bad_quantity_is_skipped_with_an_event(tmp_path: Path, bad: str) -> None:
    node = Node(tmp_path, None)
    node.engage()
    broken = v1_pod(B_UID, {"qosmos.io/job-kind": "cpu"}, "Burstable", bad)
    node.bandwidth(0.5)
    node.agent.reconcile([broken, *node.pods])
    assert _cpus(node.layout, C_UID) == {0, 1, 2, 3}  # the pass went on and released
    assert _cpus(node.layout, B_UID) == {0, 1, 2, 3}  # the bad pod: not touched
    assert node.agent.metrics.skipped.labels("invalid-spec")._value.get() == 1
    assert node.agent.events.count((B_UID, "NodeAgentSkipped", "Warning")) == 1
    node.agent.reconcile([broken, *node.pods])  # still broken: counted again, no second Event
    assert node.agent.metrics.skipped.labels("invalid-spec")._value.get() == 2
    assert node.agent.events.count((B_UID, "NodeAgentSkipped", "Warning")) == 1


def test_quantities_are_the_apis() -> None:
    assert parse_cpu_quantity("1Ki") == 1024.0 and parse_cpu_quantity("2e3m") == 2.0
    assert parse_cpu_quantity("500m") == 0.5 and parse_cpu_quantity(3) == 3.0
    with pytest.raises(InvalidInput, match="cpu quantity"):
        parse_cpu_quantity("1Kq")
    # limits.cpu: 1Ki (1024 cores) is a valid pod: its job gets the node, no pass aborts
    info = pod_info(v1_pod(C_UID, {"qosmos.io/job-kind": "cpu"}, "Burstable", "1Ki", "1500m"))
    assert info is not None and info.limit_cores == 1024.0 and info.request_cores == 1.5 and info.min_cores == 2


def test_a_1ki_limit_does_not_stop_the_pass(tmp_path: Path) -> None:
    node = Node(tmp_path, None)
    node.engage()
    huge = v1_pod(B_UID, {"qosmos.io/job-kind": "cpu"}, "Burstable", "1Ki")
    node.bandwidth(0.5)
    node.agent.reconcile([huge, *node.pods])
    assert _cpus(node.layout, C_UID) == {0, 1, 2, 3}


@pytest.mark.parametrize("failure", ["malformed", "not-a-number", "unreachable"])
def test_a_failing_bandwidth_source_keeps_the_pass_and_lifts_a_stale_throttle(tmp_path: Path, failure: str) -> None:
    spec = f"http://127.0.0.1:{_closed_port()}/bw" if failure == "unreachable" else None
    node = Node(tmp_path, None, stale_seconds=30)
    node.engage()
    if spec:
        node.agent.bandwidth = DeclaredBandwidthSource(spec)
    elif failure == "malformed":
        node.bw.write_text("{oops")
    else:
        node.bw.write_text(json.dumps({"bytes_per_second": "lots", "peak_bytes_per_second": 1e10}))
    train_before = _cpus(node.layout, T_UID)
    node.agent.reconcile(node.pods)
    reason = "unreachable" if failure == "unreachable" else "malformed"
    assert node.errors("memory-bandwidth", reason) == 1
    assert _cpus(node.layout, C_UID) == {2, 3}  # no measurement: the decision stands for now
    assert train_before == {0, 1, 2} == _cpus(node.layout, T_UID)  # the rest of the pass ran (CV: 3 cores)
    node.now[0] += 30  # no measurement for stale_seconds: the throttle is lifted
    node.agent.reconcile(node.pods)
    assert _cpus(node.layout, C_UID) == {0, 1, 2, 3} and not node.agent.eliminator.engaged


def test_an_actuator_failing_for_one_pod_does_not_stop_the_others(tmp_path: Path) -> None:
    node = Node(tmp_path, None)
    node.engage()
    d = node.layout.pod_dir("cpuset", T_UID)
    assert d is not None
    for c in container_children(d):
        (c / "cpuset.cpus").write_text("garbage\n")  # unreadable: the CPU actuator raises for this pod
    node.bandwidth(0.5)
    node.agent.reconcile(node.pods)
    assert _cpus(node.layout, C_UID) == {0, 1, 2, 3}
    assert node.agent.metrics.errors.labels("cpu")._value.get() == 1


def test_the_watch_is_not_needed_for_a_pass(tmp_path: Path) -> None:
    """The pod source failing (the API away) fails that pass only; the loop goes on."""
    node = Node(tmp_path, None)
    calls = {"n": 0}

    def pods() -> list[Any]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("apiserver away")
        return node.pods

    node.agent.pod_source = pods
    node.bandwidth(0.8)
    node.agent.run(lambda: False, max_passes=2, restore_on_exit=False, wait=lambda s: None)
    assert calls["n"] == 2 and _cpus(node.layout, C_UID) == {2, 3}
