"""``qosmos dev up`` / ``down`` through the real CLI: detached processes, KWOK GPU nodes, a pod bound
by the qosmos-scheduler through the extender (over TLS), KWOK's run-duration, and nothing left behind."""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from qosmos.dev.binaries import DEV_BINARIES, cache_bin_dir
from qosmos.dev.cluster import operator_command
from qosmos.dev.process import ProcessRef, start_ticks
from qosmos.testing.node import wait_for
from qosmos.testing.processes import QOSMOS

from .conftest import need_dev_binaries

pytestmark = pytest.mark.integration


def _qosmos(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*QOSMOS, *args], capture_output=True, text=True, timeout=timeout)


def _wait(pred: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    return wait_for(pred, timeout, what, every=0.3)


class Kubectl:
    def __init__(self, kubeconfig: str) -> None:
        self.argv = [str(cache_bin_dir() / "kubectl"), "--kubeconfig", kubeconfig]

    def __call__(self, *args: str, stdin: str | None = None) -> str:
        proc = subprocess.run([*self.argv, *args], input=stdin, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json"))


@pytest.fixture(scope="module")
def dev_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any]]]:
    """``qosmos dev up --json`` with 2 nodes x 8 GPUs in a fresh folder; ``down`` afterwards whatever happens."""
    need_dev_binaries()
    directory = tmp_path_factory.mktemp("qdev") / "cluster"
    t0 = time.monotonic()
    proc = _qosmos("dev", "up", "--dir", str(directory), "--nodes", "2", "--gpus-per-node", "8", "--json")
    try:
        assert proc.returncode == 0, proc.stderr
        info = json.loads(proc.stdout)
        info["up_s"] = time.monotonic() - t0
        yield directory, info
    finally:
        _qosmos("dev", "down", "--dir", str(directory), "--grace", "5")
        if os.environ.get("QOSMOS_K8S_KEEP") != "1":
            shutil.rmtree(directory, ignore_errors=True)


def test_up_runs_every_component_detached(dev_cluster: tuple[Path, dict[str, Any]]) -> None:
    directory, info = dev_cluster
    assert info["kubeconfig"] == str(directory / "kubeconfig")
    expected = {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "qosmos-scheduler",
        "qosmos-extender",
        "kwok",
    }
    has_operator, reason = operator_command()
    if has_operator:
        expected.add("qosmos-operator")
        assert info["operator"]["started"] is True
    else:
        assert info["operator"] == {"started": False, "reason": reason}
    assert set(info["pids"]) == expected
    # The CLI has exited; the processes it started run on, each in its own process group.
    for name, pid in info["pids"].items():
        assert start_ticks(pid) is not None, f"{name} ({pid}) is not running"
        assert os.getpgid(pid) == pid
    assert (directory / "logs" / "kube-apiserver.log").is_file()
    assert info["up_s"] < 90


def test_nodes_have_gpus_and_are_kept_by_kwok(dev_cluster: tuple[Path, dict[str, Any]]) -> None:
    _, info = dev_cluster
    kubectl = Kubectl(info["kubeconfig"])
    nodes = {n["metadata"]["name"]: n for n in kubectl.json("get", "nodes")["items"]}
    assert set(nodes) == {"node-0", "node-1"}
    for n in nodes.values():
        assert n["status"]["capacity"]["nvidia.com/gpu"] == "8"
        assert n["metadata"]["labels"]["qosmos.io/gpu-model"] == "V100M32"
        assert {c["type"]: c["status"] for c in n["status"]["conditions"]}["Ready"] == "True"
    # The pools the examples/ VirtualClusters select (vc-a: a, vc-b: b).
    assert {name: n["metadata"]["labels"]["qosmos.io/pool"] for name, n in nodes.items()} == {
        "node-0": "a",
        "node-1": "b",
    }
    leases = {item["metadata"]["name"] for item in kubectl.json("get", "leases", "-n", "kube-node-lease")["items"]}
    assert leases >= set(nodes)
    table = kubectl("get", "nodes")
    assert "node-0" in table and "Ready" in table


def _extender_metrics(info: dict[str, Any]) -> dict[str, float]:
    ext = info["extender"]
    ctx = ssl.create_default_context(cafile=ext["ca"])
    ctx.load_cert_chain(ext["client_cert"], ext["client_key"])
    with urllib.request.urlopen(f"{ext['url']}/metrics", context=ctx, timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("qosmos_extender_decisions_total{"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def _filters(metrics: dict[str, float]) -> float:
    return sum(v for k, v in metrics.items() if 'verb="filter"' in k)


def _pod(name: str, gpus: int, annotations: dict[str, str]) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations},
            "spec": {
                "schedulerName": "qosmos-scheduler",
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ],
            },
        }
    )


def test_gpu_pod_is_bound_through_the_extender_and_run_by_kwok(dev_cluster: tuple[Path, dict[str, Any]]) -> None:
    _, info = dev_cluster
    kubectl = Kubectl(info["kubeconfig"])
    before = _filters(_extender_metrics(info))
    kubectl("apply", "-f", "-", stdin=_pod("short", 4, {"qosmos.io/run-duration": "3s"}))
    kubectl("apply", "-f", "-", stdin=_pod("long", 8, {}))
    pod = _wait(
        lambda: (p := kubectl.json("get", "pod", "short"))["spec"].get("nodeName") and p, 60, "the pod's binding"
    )
    assert pod["spec"]["nodeName"] in {"node-0", "node-1"}
    events = kubectl.json("get", "events", "--field-selector", "involvedObject.name=short")["items"]
    assert any(e["reason"] == "Scheduled" and e.get("reportingComponent") == "qosmos-scheduler" for e in events), events
    assert _filters(_extender_metrics(info)) >= before + 1, "the extender never saw the pod"
    # KWOK: Running at once, Succeeded 3 s after its start; the pod without run-duration keeps running.
    _wait(lambda: kubectl.json("get", "pod", "short")["status"].get("phase") == "Succeeded", 60, "short to succeed")
    done = kubectl.json("get", "pod", "short")["status"]
    started = done["startTime"]
    finished = done["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
    took = _seconds(finished) - _seconds(started)
    assert 2 <= took <= 15, (started, finished)
    long = kubectl.json("get", "pod", "long")
    assert long["status"]["phase"] == "Running" and long["spec"]["nodeName"] != pod["spec"]["nodeName"]


def _seconds(rfc3339: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def test_dev_nodes_adds_openb_nodes_that_kwok_keeps(dev_cluster: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """`qosmos dev nodes` (what hack/kind/up.sh runs): nodes from an openb CSV, managed by KWOK."""
    _, info = dev_cluster
    csv = tmp_path / "nodes.csv"
    csv.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0007,64000,262144,2,P100\nopenb-node-0008,96000,786432,8,V100M32\n"
    )
    proc = _qosmos("dev", "nodes", "--kubeconfig", info["kubeconfig"], "--node-list", str(csv), "--pools", "b")
    assert proc.returncode == 0, proc.stderr
    kubectl = Kubectl(info["kubeconfig"])
    node = kubectl.json("get", "node", "openb-node-0007")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    assert node["metadata"]["labels"]["qosmos.io/gpu-model"] == "P100"
    assert node["metadata"]["labels"]["qosmos.io/pool"] == "b"
    _wait(
        lambda: (
            {"openb-node-0007", "openb-node-0008"}
            <= {i["metadata"]["name"] for i in kubectl.json("get", "leases", "-n", "kube-node-lease")["items"]}
        ),
        30,
        "KWOK to lease the added nodes",
    )


def test_up_again_says_already_up(dev_cluster: tuple[Path, dict[str, Any]]) -> None:
    directory, info = dev_cluster
    proc = _qosmos("dev", "up", "--dir", str(directory), "--json")
    assert proc.returncode == 0, proc.stderr
    again = json.loads(proc.stdout)
    assert again["already_up"] is True and again["pids"] == info["pids"]
    assert "already up" in proc.stderr


def test_down_leaves_no_process_behind(dev_cluster: tuple[Path, dict[str, Any]]) -> None:
    """Last in this module: stops the cluster (the fixture's own down then finds nothing)."""
    directory, info = dev_cluster
    state = json.loads((directory / "state.json").read_text())
    refs = [ProcessRef(c["name"], c["pid"], c["ticks"]) for c in state["components"]]
    assert {r.name: r.pid for r in refs} == info["pids"]
    proc = _qosmos("dev", "down", "--dir", str(directory), "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert sorted(result["stopped"]) == sorted(info["pids"])
    assert not [r.name for r in refs if r.alive()]
    assert not (directory / "state.json").exists()
    proc = _qosmos("dev", "down", "--dir", str(directory), "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["was_running"] is False


def test_a_failing_component_stops_everything_started(tmp_path: Path) -> None:
    """KWOK (started after the control plane, the extender and the qosmos-scheduler) cannot start:
    exit 1 with one line naming its log, every process started before it stopped, no state left."""
    need_dev_binaries()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for b in DEV_BINARIES:
        (bin_dir / b).symlink_to(cache_bin_dir() / b)
    (bin_dir / "kwok").unlink()
    (bin_dir / "kwok").write_text("#!/bin/sh\necho 'kwok: cannot start' >&2\nexit 7\n")
    (bin_dir / "kwok").chmod(0o755)
    directory = tmp_path / "c"
    proc = _qosmos("dev", "up", "--dir", str(directory), "--bin-dir", str(bin_dir), "--nodes", "1", "--no-operator")
    assert proc.returncode == 1, proc.stderr
    error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "kwok exited with code 7" in error[0] and "kwok.log" in error[0], proc.stderr
    assert "cannot start" in (directory / "logs" / "kwok.log").read_text()
    assert {"etcd.log", "qosmos-extender.log", "qosmos-scheduler.log"} <= {
        p.name for p in (directory / "logs").iterdir()
    }
    assert not (directory / "state.json").exists()
    _wait(lambda: not _processes_naming(str(tmp_path)), 15, "every process of the failed up to be gone")


def _processes_naming(text: str) -> list[str]:
    """Command lines of live processes that mention ``text`` (a zombie has none)."""
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != os.getpid() and text in (cmd := _cmdline(int(p))):
            out.append(cmd)
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
