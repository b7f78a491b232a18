"""Two ``qosmos operator run --peering`` replicas on a real control plane, each with the Helm chart's
operator ServiceAccount and roles (so its RBAC is enough, not only derived): one runs the passes,
the other stands by and takes over when the first exits; then ``kubectl qosmos`` reads what the
running one wrote (queue, why, explain) through a kubeconfig, as a user runs it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from qosmos.dev.process import free_port
from qosmos.testing.controlplane import ControlPlane
from qosmos.testing.node import wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SA_NAMESPACE = "qosmos-it"
PEERING = "it-qosmos-operator"  # release "it": the chart names the peering object (and its RBAC) so
GROUP, VERSION = "qosmos.io", "v1alpha1"


class Replica:
    def __init__(self, kubeconfig: Path, log: Path, name: str, history_namespace: str) -> None:
        self.port = free_port()
        self.log = log
        env = {**os.environ, "POD_ID": name}
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-P", "-m", "qosmos", "operator", "run", "--kubeconfig", str(kubeconfig)),
                *("--metrics-port", str(self.port), "--interval", "1", "--peering", PEERING),
                *("--history-namespace", history_namespace),
            ],
            stdout=open(log, "ab"),  # noqa: SIM115 - the child keeps it
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )

    def active(self) -> float | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("qosmos_operator_active "):
                return float(line.split()[1])
        return None

    def errors(self) -> list[str]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
            text = r.read().decode()
        return [ln for ln in text.splitlines() if ln.startswith("qosmos_operator_errors_total{")]

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


@pytest.fixture(scope="module")
def peering_crds(control_plane: ControlPlane) -> Iterator[None]:
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    control_plane.kubectl("apply", "-f", str(ROOT / "helm" / "qosmos" / "files" / "kopf-peering-crd.yaml"))
    control_plane.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/clusterkopfpeerings.kopf.dev",
        "crd/dljobs.qosmos.io",
    )
    yield
    control_plane.kubectl("delete", "clusterkopfpeering", PEERING, "--ignore-not-found", check=False)


def _helm() -> str:
    from qosmos.testing.skips import helm_binary

    return helm_binary()


@pytest.fixture(scope="module")
def operator_kubeconfig(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A kubeconfig with the token of the chart's operator ServiceAccount, its roles applied for real."""
    tmp = tmp_path_factory.mktemp("operator-sa")
    rendered = subprocess.run(
        [
            _helm(),
            "template",
            "it",
            str(ROOT / "helm" / "qosmos"),
            "--namespace",
            SA_NAMESPACE,
            "--kube-version",
            "1.34.4",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    sa = "it-qosmos-operator"
    rbac = [
        d
        for d in docs
        if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
        and d["metadata"]["name"] == sa
    ]
    assert {d["kind"] for d in rbac} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == sa)
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--peering") + 1] == PEERING
    (tmp / "rbac.yaml").write_text(yaml.safe_dump_all(rbac))
    control_plane.kubectl("create", "namespace", SA_NAMESPACE, check=False)
    control_plane.kubectl("apply", "-f", str(tmp / "rbac.yaml"))
    try:
        token = control_plane.kubectl("create", "token", sa, "-n", SA_NAMESPACE, "--duration", "2h").stdout.strip()
        cfg = yaml.safe_load(control_plane.kubectl("config", "view", "--raw", "--minify").stdout)
        cfg["users"] = [{"name": sa, "user": {"token": token}}]
        cfg["contexts"][0]["context"]["user"] = sa
        path = tmp / "operator.kubeconfig"
        path.write_text(yaml.safe_dump(cfg))
        yield path
    finally:
        control_plane.kubectl("delete", "-f", str(tmp / "rbac.yaml"), "--ignore-not-found", check=False)
        control_plane.kubectl("delete", "namespace", SA_NAMESPACE, "--wait=false", check=False)


@pytest.fixture(scope="module")
def replicas(
    operator_kubeconfig: Path, peering_crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Replica]]:
    logs = tmp_path_factory.mktemp("peering")
    reps = [Replica(operator_kubeconfig, logs / "a.log", "replica-a", SA_NAMESPACE)]
    try:  # every replica started is stopped, also when the first never becomes active
        wait_for(lambda: reps[0].active() == 1.0, 90, "the first replica active")
        reps.append(Replica(operator_kubeconfig, logs / "b.log", "replica-b", SA_NAMESPACE))
        yield reps
    finally:
        for r in reps:
            r.stop()


def test_one_replica_runs_the_other_takes_over(control_plane: ControlPlane, replicas: list[Replica]) -> None:
    first, second = replicas

    def peers() -> dict[str, Any]:
        obj = json.loads(control_plane.kubectl("get", "clusterkopfpeering", PEERING, "-o", "json").stdout)
        return dict(obj.get("status") or {})

    wait_for(lambda: {"replica-a", "replica-b"} <= set(peers()), 90, "both keep-alives in the peering object")
    wait_for(lambda: second.active() == 0.0, 60, "the second replica standing by")
    recs = peers()
    assert recs["replica-a"]["priority"] > recs["replica-b"]["priority"]  # the older one
    assert first.active() == 1.0  # the newcomer did not take over
    first.stop()  # a clean exit removes its record: the standby runs
    wait_for(lambda: second.active() == 1.0, 60, "the second replica active after the first exits")
    assert "replica-a" not in peers()


def _plugin(control_plane: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl-qosmos", *args, "--kubeconfig", str(control_plane.kubeconfig_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_kubectl_plugin_reads_what_the_operator_wrote(
    control_plane: ControlPlane, replicas: list[Replica], fake_gpu_nodes: list[dict[str, Any]], k8s_namespace: str
) -> None:
    """A job larger than its VirtualCluster waits with the operator's reason; the plugin shows it."""
    from kubernetes import client

    api = client.CustomObjectsApi(control_plane.api_client())
    node = fake_gpu_nodes[0]["metadata"]["name"]
    pool = f"it-{k8s_namespace}"
    control_plane.kubectl("label", "node", node, f"qosmos.io/pool={pool}", "--overwrite")
    vc = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "VirtualCluster", "metadata": {"name": pool}}
    # FIFO keeps the GPUs asked for (GENIE policies may choose fewer)
    vc["spec"] = {"nodeSelector": {"qosmos.io/pool": pool}, "policy": "fifo", "placement": "consolidate"}
    api.create_cluster_custom_object(GROUP, VERSION, "virtualclusters", vc)
    try:
        job = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "DLJob",
            "metadata": {"name": "huge", "namespace": k8s_namespace},
        }
        job["spec"] = {
            "virtualCluster": pool,
            "gpus": 512,
            "modelType": "ResNet50",
            "globalBatchSize": 1024,
            "iterations": 100,
            "template": {"spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}},
        }
        api.create_namespaced_custom_object(GROUP, VERSION, k8s_namespace, "dljobs", job)

        def reason() -> str | None:
            st = api.get_namespaced_custom_object(GROUP, VERSION, k8s_namespace, "dljobs", "huge").get("status") or {}
            got = next((c["reason"] for c in st.get("conditions") or [] if c["type"] == "Admitted"), None)
            # a pass that saw the DLJob before the VirtualCluster created just above says so; the next one
            # (the VC's own event) gives the reason that stays, which the plugin then shows
            return None if got == "VirtualClusterMissing" else got

        why_reason = wait_for(reason, 60, "the operator's Admitted condition")
        queue = _plugin(control_plane, "queue", pool)
        assert queue.returncode == 0, queue.stderr
        assert f"{k8s_namespace}/huge" in queue.stdout and why_reason in queue.stdout
        why = _plugin(control_plane, "why", "huge", "-n", k8s_namespace)
        assert why.returncode == 0, why.stderr
        assert f"reason: {why_reason}" in why.stdout and "what would unblock it:" in why.stdout
        explain = _plugin(control_plane, "explain", f"{k8s_namespace}/huge", "--json")
        assert explain.returncode == 0, explain.stderr
        table = json.loads(explain.stdout)
        gpus = int(fake_gpu_nodes[0]["status"]["allocatable"]["nvidia.com/gpu"])
        assert table["platform"] == {"nodes": 1, "gpus_per_node": gpus}
        # the operator did all this with the chart's roles, without a refused call
        assert all(ln.endswith(" 0.0") for ln in replicas[1].errors()), replicas[1].errors()
        missing = _plugin(control_plane, "why", "absent", "-n", k8s_namespace)
        assert missing.returncode == 2 and missing.stderr.startswith("error:") and "not found" in missing.stderr
    finally:
        with contextlib.suppress(Exception):
            api.delete_cluster_custom_object(GROUP, VERSION, "virtualclusters", pool)
        control_plane.kubectl("label", "node", node, "qosmos.io/pool-", check=False)
