"""Issue 22: each pod's GPUs from the kubelet's PodResources API (a real gRPC server speaking its List
proto on a unix socket), NVML reading only those GPUs by UUID, and the fallback where it is not served."""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes import client
from qosmos.sidecar.actuators import make_actuator
from qosmos.sidecar.agent import NodeAgent
from qosmos.sidecar.cgroups import detect_layout
from qosmos.sidecar.fakes import make_kubelet_tree
from qosmos.sidecar.fs import FakeKernelFS
from qosmos.sidecar.podresources import PodGpus, list_pod_resources
from qosmos.sidecar.proto import podresources_pb2 as pb
from qosmos.sidecar.proto import podresources_pb2_grpc as pb_grpc
from qosmos.sidecar.sources import NvmlGpuSource

GPU = "nvidia.com/gpu"
# namespace/name -> container -> [(resource, device IDs)]
KUBELET: dict[str, dict[str, list[tuple[str, list[str]]]]] = {
    "ml/train": {"main": [(GPU, ["GPU-aaaa", "GPU-bbbb"]), ("example.com/nic", ["nic0"])], "sidecar": []},
    "ml/sliced": {"a": [(GPU, ["GPU-cccc::1"])], "b": [(GPU, ["GPU-cccc::2"])]},  # time-sliced shares
    "ml/indexed": {"main": [(GPU, ["3"])]},  # the device plugin's index strategy
    "default/web": {"main": []},
}


class Kubelet(pb_grpc.PodResourcesListerServicer):
    def __init__(self) -> None:
        self.calls = 0

    def List(self, request: pb.ListPodResourcesRequest, context: grpc.ServicerContext) -> pb.ListPodResourcesResponse:
        self.calls += 1
        pods = []
        for key, containers in KUBELET.items():
            ns, name = key.split("/")
            cs = [
                pb.ContainerResources(
                    name=c, devices=[pb.ContainerDevices(resource_name=r, device_ids=ids) for r, ids in devs]
                )
                for c, devs in containers.items()
            ]
            pods.append(pb.PodResources(name=name, namespace=ns, containers=cs))
        return pb.ListPodResourcesResponse(pod_resources=pods)


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[tuple[Path, Kubelet]]:
    """The kubelet's PodResources service on ``<tmp>/pod-resources/kubelet.sock``."""
    sock = tmp_path / "pod-resources" / "kubelet.sock"
    sock.parent.mkdir()
    servicer = Kubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    assert server.add_insecure_port(f"unix://{sock}") == 1
    server.start()
    yield sock, servicer
    server.stop(None)


def test_generated_stubs_are_fresh(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    from qosmos.sidecar.proto import generate

    for path in generate.generate(tmp_path):
        assert path.read_bytes() == (generate.HERE / path.name).read_bytes(), (
            f"{path.name} is stale: run python -m qosmos.sidecar.proto.generate"
        )
    methods = [m.full_name for m in pb.DESCRIPTOR.services_by_name["PodResourcesLister"].methods]
    assert methods == ["v1.PodResourcesLister.List"]  # the kubelet's service and method names


def test_list_reads_every_pods_devices_from_the_socket(kubelet: tuple[Path, Kubelet]) -> None:
    sock, _ = kubelet
    got = list_pod_resources(sock)
    assert got["ml/train"] == {"main": {GPU: ("GPU-aaaa", "GPU-bbbb"), "example.com/nic": ("nic0",)}, "sidecar": {}}
    assert got["default/web"] == {"main": {}}
    gpus = PodGpus(sock)
    assert gpus.devices("ml/train") is None and gpus.served is None  # not read yet
    gpus.refresh()
    assert gpus.served is True
    assert gpus.devices("ml/train") == ("GPU-aaaa", "GPU-bbbb")  # only the GPU resource
    assert gpus.devices("ml/sliced") == ("GPU-cccc::1", "GPU-cccc::2")  # every container's
    assert gpus.devices("default/web") == ()  # the kubelet gave it none
    assert gpus.devices("ml/not-on-this-node") == ()


def test_not_served_means_unknown(tmp_path: Path, kubelet: tuple[Path, Kubelet]) -> None:
    sock, _ = kubelet
    gpus = PodGpus(tmp_path / "absent" / "kubelet.sock")
    with pytest.raises(FileNotFoundError):
        gpus.refresh()
    assert gpus.served is False and gpus.devices("ml/train") is None
    # a socket nobody answers on (the kubelet stopped): UNAVAILABLE, and the last answer is forgotten
    gpus = PodGpus(sock, timeout_s=1)
    gpus.refresh()
    dead = sock.parent / "dead.sock"
    gpus.socket = dead
    dead.touch()
    with pytest.raises(grpc.RpcError):
        gpus.refresh()
    assert gpus.served is False and gpus.devices("ml/train") is None


def _fake_nvml(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Four GPUs: aaaa 10 %, bbbb 30 %, cccc 90 %, index 3 (dddd) 70 %; pid 1000 (the fake tree's training
    pod's task) runs on cccc only."""

    class NVMLError(Exception):
        pass

    util = {"GPU-aaaa": 10.0, "GPU-bbbb": 30.0, "GPU-cccc": 90.0, "GPU-dddd": 70.0}
    order = list(util)
    opened: list[str] = []

    def by_uuid(uuid: str) -> str:
        if uuid not in util:
            raise NVMLError(f"NotFound {uuid}")
        opened.append(uuid)
        return uuid

    def by_index(i: int) -> str:
        opened.append(order[i])
        return order[i]

    fake = types.SimpleNamespace(
        NVMLError=NVMLError, nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: len(util),
        nvmlDeviceGetHandleByUUID=by_uuid, nvmlDeviceGetHandleByIndex=by_index,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=util[h]),
        nvmlDeviceGetComputeRunningProcesses=lambda h: [types.SimpleNamespace(pid=1000)] if h == "GPU-cccc" else [],
    )  # fmt: skip
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return {"opened": opened, "error": NVMLError}


def test_nvml_reads_only_the_pods_gpus_by_uuid(monkeypatch: pytest.MonkeyPatch, kubelet: tuple[Path, Kubelet]) -> None:
    nvml = _fake_nvml(monkeypatch)
    gpus = PodGpus(kubelet[0])
    gpus.refresh()
    src = NvmlGpuSource(devices_of=gpus.devices)
    # the pod's process (pid 1000) runs on cccc, but the kubelet gave it aaaa and bbbb: those are measured
    assert src.utilisation("ml/train", [1000]) == pytest.approx(20.0)
    assert nvml["opened"] == ["GPU-aaaa", "GPU-bbbb"]  # no other GPU opened
    assert src.utilisation("ml/sliced", []) == pytest.approx(90.0)  # two shares of one GPU: read once
    assert nvml["opened"][2:] == ["GPU-cccc"]
    assert src.utilisation("ml/indexed", []) == pytest.approx(70.0)  # an index, not a UUID
    assert src.utilisation("default/web", [1000]) is None  # no GPU of its own: nothing to measure
    # not served: the fallback, the GPUs running the pod's processes
    fallback = NvmlGpuSource(devices_of=PodGpus(kubelet[0].parent / "absent.sock").devices)
    assert fallback.utilisation("ml/train", [1000]) == pytest.approx(90.0)


def test_nvml_raises_when_none_of_the_pods_gpus_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = _fake_nvml(monkeypatch)
    src = NvmlGpuSource(devices_of=lambda key: ("GPU-gone",))  # e.g. not visible to the agent's container
    with pytest.raises(nvml["error"]):
        src.utilisation("ml/train", [])


def _train() -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(uid="aaaa-1111-train", name="train", namespace="ml",
                                     labels={"qosmos.io/node-agent": "managed"},
                                     annotations={"qosmos.io/job-kind": "training", "qosmos.io/model-category": "CV"}),
        spec=client.V1PodSpec(containers=[client.V1Container(name="main")]),
        status=client.V1PodStatus(phase="Running", qos_class="BestEffort", pod_ip="10.244.0.9"),
    )  # fmt: skip


def test_agent_maps_gpus_where_served_and_says_when_it_falls_back(
    monkeypatch: pytest.MonkeyPatch, kubelet: tuple[Path, Kubelet], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Once per pass with training pods: served -> the pod's GPUs (qosmos_sidecar_pod_resources 1); the
    socket gone -> one warning, the metric 0, the failure counted, NVML back on process matching."""
    _fake_nvml(monkeypatch)
    sock, servicer = kubelet
    root = make_kubelet_tree(tmp_path / "cgroup", {"aaaa-1111-train": ("besteffort", 1)}, "0-3", 1, "cgroupfs")
    gpus = PodGpus(sock)
    src = NvmlGpuSource(devices_of=gpus.devices)
    now = [0.0]
    agent = NodeAgent("n1", None, detect_layout(root), make_actuator("cpu", "cgroup-v1", fs=FakeKernelFS()), src,
                      clock=lambda: now[0], pod_gpus=gpus)  # fmt: skip
    caplog.set_level(logging.INFO, "qosmos.sidecar")
    pods = [_train()]
    for _ in range(3):
        agent.reconcile(pods)
        now[0] += 20
    assert servicer.calls == 3  # once per pass
    assert agent.metrics.pod_resources._value.get() == 1
    assert agent.metrics.gpu.labels("ml", "train")._value.get() == pytest.approx(20.0)  # aaaa and bbbb
    assert sum("PodResources served" in r.message for r in caplog.records) == 1

    gpus.socket = tmp_path / "gone.sock"
    for _ in range(3):
        agent.reconcile(pods)
        now[0] += 20
    assert agent.metrics.pod_resources._value.get() == 0
    assert agent.metrics.source_errors.labels("pod-resources", "missing")._value.get() == 3
    assert sum("PodResources not served" in r.message for r in caplog.records) == 1  # said once
    assert agent.metrics.gpu.labels("ml", "train")._value.get() == pytest.approx(90.0)  # the GPU running its task


def test_no_pod_resources_configured_changes_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_nvml(monkeypatch)
    root = make_kubelet_tree(tmp_path / "cgroup", {"aaaa-1111-train": ("besteffort", 1)}, "0-3", 1, "cgroupfs")
    agent = NodeAgent("n1", None, detect_layout(root), make_actuator("cpu", "cgroup-v1", fs=FakeKernelFS()),
                      NvmlGpuSource())  # fmt: skip
    assert agent.refresh_pod_gpus() is None
    agent.reconcile([_train()])
    assert agent.metrics.source_errors.labels("pod-resources", "missing")._value.get() == 0
