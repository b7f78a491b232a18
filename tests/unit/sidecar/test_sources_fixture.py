"""GPU utilisation over HTTP and NVML (a stand-in module: no GPU here), and the node fixture's skip reasons."""

from __future__ import annotations

import http.server
import json
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from qosmos.sidecar.sources import DeclaredGpuSource, NvmlGpuSource, describe_gpu_source, make_gpu_source
from qosmos.testing import node as testnode


@pytest.fixture
def endpoint() -> Iterator[tuple[str, dict[str, float]]]:
    doc: dict[str, float] = {}

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            return None

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/gpu", doc
    srv.shutdown()


def test_gpu_utilisation_from_an_endpoint(endpoint: tuple[str, dict[str, float]]) -> None:
    url, doc = endpoint
    src = make_gpu_source(url)
    assert isinstance(src, DeclaredGpuSource)
    assert src.utilisation("ns/p", ()) is None
    doc["ns/p"] = 63.0
    assert src.utilisation("ns/p", ()) == 63.0
    assert make_gpu_source("none") is None


def test_nvml_source_averages_the_pods_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    class Err(Exception):
        pass

    gpus = [(90, [11, 12]), (10, []), (50, [13])]  # (utilisation, PIDs running on the GPU)
    fake = types.SimpleNamespace(
        NVMLError=Err,
        nvmlInit=lambda: None,
        nvmlDeviceGetCount=lambda: len(gpus),
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=gpus[h][0]),
        nvmlDeviceGetComputeRunningProcesses=lambda h: [types.SimpleNamespace(pid=p) for p in gpus[h][1]],
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    src = NvmlGpuSource()
    assert src.utilisation("ns/p", [12, 13]) == 70.0  # GPUs 0 and 2 run the pod's processes
    assert src.utilisation("ns/q", [99]) is None  # only other pods' GPUs are busy: no measurement
    gpus[:] = [(90, []), (10, [])]  # no process visible anywhere (no host PID namespace)
    assert src.utilisation("ns/q", [99]) == 50.0  # the node's mean is the best there is
    assert NvmlGpuSource.available()


def test_auto_is_nvml_only_when_a_gpu_answers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def no_driver() -> None:
        raise RuntimeError("NVML Shared Library Not Found")  # what pynvml raises on a host without a GPU

    monkeypatch.setitem(sys.modules, "pynvml", types.SimpleNamespace(nvmlInit=no_driver))
    assert make_gpu_source("auto") is None
    assert "no GPU answers NVML" in describe_gpu_source(None, "auto")
    declared = make_gpu_source(str(tmp_path / "gpu.json"))
    assert describe_gpu_source(declared, str(tmp_path / "gpu.json")) == f"from {tmp_path / 'gpu.json'}"
    one_gpu = types.SimpleNamespace(nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 1)
    monkeypatch.setitem(sys.modules, "pynvml", one_gpu)
    src = make_gpu_source("auto")
    assert isinstance(src, NvmlGpuSource) and describe_gpu_source(src, "auto") == "from NVML"


def test_real_nvml_without_a_gpu_means_no_source() -> None:
    """nvidia-ml-py itself (qosmos[gpu]) on a host without the NVIDIA driver: auto picks no source."""
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py not installed (pip install 'qosmos[gpu]')")
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this host has an NVIDIA driver: the no-GPU path cannot be shown here")
    with pytest.raises(pynvml.NVMLError):
        pynvml.nvmlInit()
    assert not NvmlGpuSource.available() and make_gpu_source("auto") is None


def test_node_fixture_says_why_a_host_cannot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(testnode.os, "geteuid", lambda: 1000)
    assert testnode.host_unsupported() == "needs root (containerd, runc, cgroups, network interfaces)"
    monkeypatch.setattr(testnode.os, "geteuid", lambda: 0)
    monkeypatch.setattr(testnode, "CGROUP_ROOT", tmp_path)
    assert "no cgroup cpuset controller" in (testnode.host_unsupported() or "")
    monkeypatch.setenv("QOSMOS_NODE_CACHE", str(tmp_path / "cache"))
    missing = testnode.artefacts_missing()
    assert any(m.endswith("/bin/kubelet") for m in missing) and any(m.endswith("debian.oci.tar") for m in missing)


def test_node_kubelet_is_the_control_planes_version() -> None:
    """hack/node builds the kubelet at the version hack/k8s pins (and testing/node looks for it there)."""
    import re

    root = Path(__file__).resolve().parents[3] / "hack"

    def pin(path: Path, pattern: str) -> str:
        m = re.search(pattern, path.read_text(), re.M)
        assert m, f"{path}: no {pattern}"
        return m.group(1)

    version = pin(root / "k8s" / "build.sh", r"^K8S_VERSION=(\S+)")
    assert pin(root / "node" / "build.sh", r"^K8S_VERSION=(\S+)") == version
    assert pin(root / "node" / "kubelet" / "go.mod", r"^require k8s.io/kubernetes (\S+)") == version
    assert pin(root / "k8s" / "k8s" / "go.mod", r"^require k8s.io/kubernetes (\S+)") == version
    assert testnode.node_cache().name == version
