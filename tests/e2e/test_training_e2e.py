"""DLJobs that really train (issue 20 §3): a real framework in pods on the real kubelet.

The image is JAX on CPU (``hack/image/jax``: jax + jaxlib wheels from PyPI on the debootstrap python
base, cached by content hash) running ``hack/image/jax/train.py``: ``jax.distributed`` over the
DLJob's rendezvous variables (rank 0's name ``<dljob>-0.<dljob>.<ns>.svc.cluster.local`` through its
headless Service and the tier's DNS), gradients averaged by a gloo all-reduce every step. The node
advertises 8 ``nvidia.com/gpu`` (a status patch, as one advertises any extended resource; no device
plugin, so the pods compute on the CPU) and the pods are split one or more per node
(``spec.gpusPerPod``): every gang of this module runs on the one real node. The operator runs as a
subprocess (``qosmos operator run``) so a test can SIGKILL it; the gang pods are bound by a plain
kube-scheduler with the profile ``qosmos-scheduler`` (the operator pins every pod to its node).
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import shutil
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from qosmos.operator.translate import parse_time
from qosmos.testing.controlplane import ControlPlane, scheduler_config
from qosmos.testing.node import APISERVER_ARGS, Node, unreachable_marks, wait_for
from qosmos.testing.processes import OperatorProcess
from qosmos.testing.services import ServiceNetwork

from .conftest import ROOT, build_images, image_cache, need_node_host

pytestmark = pytest.mark.e2e

NODE = "qosmos-train-0"
VC = "train"
FAKE_GPUS = 8
READY_FILE = "/tmp/rendezvous-ok"  # train.py writes it once jax.distributed is up: the readiness probe
FINAL = re.compile(r"^final loss=(\S+) first_loss=(\S+) checksum=([0-9a-f]{16})$", re.M)


@dataclass
class Training:
    cp: ControlPlane
    node: Node
    image: str
    workdir: Path
    ckpt_root: Path
    operator: OperatorProcess
    timings: dict[str, float] = field(default_factory=dict)

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        p = self.cp.kubectl(*args, check=False, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed (rc={p.returncode}):\n{p.stderr}")
        return p

    def apply(self, *docs: dict[str, Any]) -> None:
        """``kubectl apply -f`` of a YAML file, as a user applies a DLJob."""
        path = self.workdir / f"apply-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(yaml.safe_dump_all(docs))
        self.kubectl("apply", "-f", str(path))

    def namespace(self) -> str:
        ns = f"train-{uuid.uuid4().hex[:6]}"
        self.kubectl("create", "namespace", ns)
        wait_for(lambda: self.kubectl("get", "sa", "default", "-n", ns, check=False).returncode == 0, 30, "the SA")
        return ns

    def dljob(self, ns: str, name: str) -> dict[str, Any]:
        return dict(json.loads(self.kubectl("get", "dljob", name, "-n", ns, "-o", "json").stdout))

    def status(self, ns: str, name: str) -> dict[str, Any]:
        return dict(self.dljob(ns, name).get("status") or {})

    def wait_phase(self, ns: str, name: str, phases: tuple[str, ...], timeout: float) -> dict[str, Any]:
        got: dict[str, Any] = {}

        def reached() -> bool:
            got.update(self.status(ns, name))
            return got.get("phase") in phases

        try:
            wait_for(reached, timeout, f"DLJob {ns}/{name} in {phases}", every=1.0)
        except Exception as exc:
            raise AssertionError(f"{exc}\nstatus: {json.dumps(got, indent=1)}\n{self.debug(ns)}") from exc
        return got

    def pods(self, ns: str, job: str) -> list[dict[str, Any]]:
        out = self.kubectl("get", "pods", "-n", ns, "-l", f"qosmos.io/job={job}", "-o", "json").stdout
        return list(json.loads(out)["items"])

    def events(self, ns: str, selector: str) -> list[dict[str, Any]]:
        """The namespace's Events matching the field selector (``involvedObject.name=x,reason=Y``)."""
        out = self.kubectl("get", "events", "-n", ns, "--field-selector", selector, "-o", "json").stdout
        return list(json.loads(out)["items"])

    def logs(self, ns: str, pod: str) -> str:
        return self.kubectl("logs", pod, "-n", ns, "-c", "jax", check=False).stdout

    def debug(self, ns: str) -> str:
        """What a failing assertion shows: pods, events and the operator's log tail."""
        pods = self.kubectl("get", "pods", "-n", ns, "-o", "wide", check=False).stdout
        events = self.kubectl("get", "events", "-n", ns, "--sort-by=.lastTimestamp", check=False).stdout
        log = self.operator.log.read_text(errors="replace")[-4000:] if self.operator.log.is_file() else ""
        return f"pods:\n{pods}\nevents:\n{events[-4000:]}\noperator log:\n{log}"

    def train_job(
        self,
        ns: str,
        name: str,
        pods: int,
        gpus_per_pod: int = 1,
        env: dict[str, str] | None = None,
        grace: int = 30,
        image: str | None = None,
        **spec: Any,
    ) -> dict[str, Any]:
        """A DLJob of ``pods`` JAX processes on the real node, checkpointing under a hostPath the test
        owns (``ckpt_root/<ns>/<name>``, a directory that outlives the pods)."""
        gpus = pods * gpus_per_pod
        container: dict[str, Any] = {
            "name": "jax",
            "image": image or self.image,
            "imagePullPolicy": "Never",
            "env": [
                {"name": "TRAIN_CHECKPOINT_DIR", "value": f"/ckpt/{name}"},
                {"name": "TRAIN_READY_FILE", "value": READY_FILE},
                *({"name": k, "value": v} for k, v in (env or {}).items()),
            ],
            "readinessProbe": {"exec": {"command": ["test", "-f", READY_FILE]}, "periodSeconds": 1},
            "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
        }
        host = self.ckpt_root / ns
        return {
            "apiVersion": "qosmos.io/v1alpha1",
            "kind": "DLJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "virtualCluster": VC,
                "kind": "training",
                "gpus": gpus,
                "gpusPerNode": gpus,
                "gpusPerPod": gpus_per_pod,
                "backoffLimit": 0,
                "startTimeoutSeconds": 180,
                "template": {
                    "spec": {
                        "terminationGracePeriodSeconds": grace,
                        "containers": [container],
                        "volumes": [{"name": "ckpt", "hostPath": {"path": str(host), "type": "DirectoryOrCreate"}}],
                    }
                },
                **spec,
            },
        }

    def checkpoint_step(self, ns: str, name: str) -> int | None:
        path = self.ckpt_root / ns / name / "ckpt.npz"
        if not path.is_file():
            return None
        with np.load(path) as z:
            return int(z["step"])


def build_jax_image() -> dict[str, Any]:
    """``hack/image/jax/build.sh`` (after the base image of ``hack/image/build.sh``): a no-op in about a
    second when its key matches; returns its jax.json."""
    build_images()  # the python base it starts from (cached)
    t = time.monotonic()
    p = subprocess.run(["bash", str(ROOT / "hack" / "image" / "jax" / "build.sh")], capture_output=True, text=True)
    if p.returncode != 0:
        tail = "\n".join((p.stdout + p.stderr).splitlines()[-40:])
        raise RuntimeError(f"hack/image/jax/build.sh failed (rc={p.returncode}):\n{tail}")
    doc: dict[str, Any] = json.loads((image_cache() / "jax.json").read_text())
    doc["check_s"] = time.monotonic() - t
    return doc


@pytest.fixture(scope="module")
def training(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Training]:
    need_node_host()
    image = build_jax_image()
    workdir = tmp_path_factory.mktemp("training")
    ckpt_root = Path(f"/var/tmp/qosmos-train-{uuid.uuid4().hex[:8]}")  # hostPath: the kubelet's filesystem
    timings = {"jax_image_check_s": image["check_s"]}
    t = time.monotonic()
    try:
        with (
            ControlPlane(extra_apiserver_args=APISERVER_ARGS) as cp,
            Node(cp, NODE, cluster_network=True) as node,
            ServiceNetwork(node),
        ):
            node.ctr("images", "import", str(image["archive"]), timeout=600)
            cp.start_scheduler("qosmos", scheduler_config("qosmos-scheduler"))
            cp.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
            cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/dljobs.qosmos.io",
                       "crd/virtualclusters.qosmos.io")  # fmt: skip
            cp.kubectl("label", "node", NODE, "qosmos.io/gpu-model=V100M32", "qosmos.io/pool=train")
            gpu = "/status/{}/nvidia.com~1gpu"
            patch = [{"op": "add", "path": gpu.format(k), "value": str(FAKE_GPUS)} for k in ("capacity", "allocatable")]
            cp.kubectl("patch", "node", NODE, "--subresource=status", "--type=json", "-p", json.dumps(patch))
            vc = {
                "apiVersion": "qosmos.io/v1alpha1",
                "kind": "VirtualCluster",
                "metadata": {"name": VC},
                "spec": {"nodeSelector": {"qosmos.io/pool": "train"}, "policy": "fifo", "placement": "consolidate",
                         "preemption": {"withinVirtualCluster": "LowerPriority"}},
            }  # fmt: skip
            path = workdir / "vc.yaml"
            path.write_text(yaml.safe_dump(vc))
            cp.kubectl("apply", "-f", str(path))
            op = OperatorProcess(str(cp.kubeconfig_path), workdir / "operator.log")
            op.start()
            timings["cluster_s"] = time.monotonic() - t
            env = Training(cp, node, str(image["ref"]), workdir, ckpt_root, op, timings)
            try:
                yield env
            finally:
                op.stop()
                print(f"\ntraining tier timings: {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
        assert node.leftovers == [], f"the node left the host changed: {node.leftovers}"
    finally:
        shutil.rmtree(ckpt_root, ignore_errors=True)


def finals(env: Training, ns: str, job: str, pods: int) -> list[tuple[float, float, str]]:
    """(final loss, first loss, checksum) each rank logged, in rank order."""
    out = []
    for i in range(pods):
        pod = next(p for p in env.pods(ns, job) if p["metadata"]["labels"]["qosmos.io/replica-index"] == str(i)
                   and p["status"].get("phase") == "Succeeded")  # fmt: skip
        text = env.logs(ns, pod["metadata"]["name"])
        assert f"rendezvous ok process={i}/{pods}" in text, text[-2000:]
        m = FINAL.search(text)
        assert m, f"{pod['metadata']['name']} logged no final line:\n{text[-2000:]}"
        out.append((float(m.group(1)), float(m.group(2)), m.group(3)))
    return out


def test_two_and_three_pod_dljobs_train_to_identical_parameters(training: Training) -> None:
    """A 2-pod and a 3-pod DLJob (side by side, 5 of the node's 8 GPUs) rendezvous through the headless
    Service, train 300 steps with gradients averaged across processes, and succeed; every rank ends
    with the same parameters' checksum and a lower loss than the first step's."""
    env = training
    ns = env.namespace()
    t = time.monotonic()
    env.apply(env.train_job(ns, "jax-2", 2), env.train_job(ns, "jax-3", 3))
    for name, pods in (("jax-2", 2), ("jax-3", 3)):
        st = env.wait_phase(ns, name, ("Succeeded", "Failed"), 420)
        assert st["phase"] == "Succeeded", f"{name}: {st}\n{env.debug(ns)}"
        assert st["placement"]["nodeNames"] == [NODE] * pods and st["placement"]["shape"] == f"{pods}x1"
        ranks = finals(env, ns, name, pods)
        assert len({c for _, _, c in ranks}) == 1, f"{name}: ranks disagree: {ranks}"
        assert all(final < first for final, first, _ in ranks), ranks
    env.timings["train_2_and_3_pods_s"] = time.monotonic() - t


def test_a_wrong_rendezvous_override_fails_at_its_start_deadline_saying_why(training: Training) -> None:
    """The template overrides the coordinator address (a name copied from another job): no process can
    rendezvous, so no pod turns Ready; at its start deadline the job is Failed (backoffLimit 0) with
    reason StartTimeout and each pod's state, instead of hanging."""
    env = training
    ns = env.namespace()
    job = env.train_job(ns, "wrong", 2, env={"JAX_COORDINATOR_ADDRESS": "other-0.other:1234"}, startTimeoutSeconds=40)
    t = time.monotonic()
    env.apply(job)
    st = env.wait_phase(ns, "wrong", ("Succeeded", "Failed"), 180)
    took = time.monotonic() - t
    cond = st["conditions"][0]
    assert st["phase"] == "Failed" and cond["reason"] == "StartTimeout", st
    assert "not all 2 pods Running within startTimeoutSeconds 40" in cond["message"]
    assert "wrong-0-0: Running, not Ready" in cond["message"] and "wrong-0-1: Running, not Ready" in cond["message"]
    assert took < 40 + 60, f"failed only after {took:.0f} s"
    wait_for(lambda: not [p for p in env.pods(ns, "wrong") if p["status"].get("phase") == "Running"], 60,
             "its pods stopped")  # fmt: skip


def _bind_times(env: Training, ns: str, job: str) -> dict[str, float]:
    """Pod name -> when kube-scheduler bound it (its PodScheduled condition turning True)."""
    out = {}
    for p in env.pods(ns, job):
        for c in p["status"].get("conditions") or []:
            if c["type"] == "PodScheduled" and c["status"] == "True":
                out[p["metadata"]["name"]] = time.mktime(time.strptime(c["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ"))
    return out


class PodWatch:
    """Every pod event of a namespace with the wall time it was seen and the pod's phase (a watch thread)."""

    def __init__(self, env: Training, ns: str) -> None:
        from kubernetes import client, watch

        self.events: list[tuple[float, str, str, str]] = []  # (time, type, name, uid)
        self.phases: list[tuple[float, str, str]] = []  # (time, name, phase)
        self._api = env.cp.api_client()
        self._core = client.CoreV1Api(self._api)
        self._watch = watch.Watch()
        self._ns = ns
        self._stop = threading.Event()
        rv = self._core.list_namespaced_pod(ns).metadata.resource_version
        self._thread = threading.Thread(target=self._run, args=(rv,), daemon=True)
        self._thread.start()

    def _run(self, rv: str) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):
                for ev in self._watch.stream(self._core.list_namespaced_pod, self._ns, resource_version=rv,
                                             timeout_seconds=5):  # fmt: skip
                    obj = ev["object"]
                    rv = obj.metadata.resource_version
                    now = time.time()
                    self.events.append((now, ev["type"], obj.metadata.name, obj.metadata.uid))
                    self.phases.append((now, obj.metadata.name, str(obj.status.phase if obj.status else "")))
                    if self._stop.is_set():
                        break

    def close(self) -> None:
        self._stop.set()
        self._watch.stop()
        self._thread.join(10)
        self._api.close()

    def ended(self, name: str) -> float | None:
        """When the pod's containers were all done (a terminal phase), or its object gone if sooner."""
        done = [t for t, n, ph in self.phases if n == name and ph in ("Succeeded", "Failed")]
        done += [t for t, typ, n, _ in self.events if typ == "DELETED" and n == name]
        return min(done, default=None)


def _steps_logged(env: Training, ns: str, pod: str) -> int:
    steps = re.findall(r"^step=(\d+) ", env.logs(ns, pod), re.M)
    return int(steps[-1]) if steps else 0


def _training_past_step_100(env: Training, ns: str, name: str, steps: int) -> None:
    """A 2-pod job of 4 GPUs a pod, ``steps`` steps of 20 ms, applied and waited for: Running and its rank 0
    past step 100 (what a preemption, reclaim, drain or lost node then stops has a checkpoint to write)."""
    slow = {"TRAIN_STEPS": str(steps), "TRAIN_STEP_SLEEP": "0.02"}
    env.apply(env.train_job(ns, name, 2, gpus_per_pod=4, env=slow))
    env.wait_phase(ns, name, ("Running",), 240)
    wait_for(lambda: _steps_logged(env, ns, f"{name}-0-0") >= 100, 240, f"{name} past step 100", every=1.0)


def test_preempted_and_suspended_jobs_checkpoint_in_their_grace_period_and_resume(training: Training) -> None:
    """A running 2-pod job is preempted by a higher-priority job that needs the whole node, later
    suspended: each time its processes get SIGTERM, rank 0 writes a checkpoint (hostPath) within the
    grace period, and after re-admission the job resumes from that step (its log says so) and
    succeeds. The preemptor's pods bind only once the preempted pods are gone."""
    env = training
    ns = env.namespace()
    watch = PodWatch(env, ns)
    try:
        _training_past_step_100(env, ns, "victim", steps=3000)
        # the preemptor: all 8 GPUs, priority 10 (LowerPriority preemption within the VirtualCluster)
        env.apply(env.train_job(ns, "urgent", 1, gpus_per_pod=FAKE_GPUS, priority=10, env={"TRAIN_STEPS": "100"}))
        st = env.wait_phase(ns, "urgent", ("Succeeded", "Failed"), 300)
        assert st["phase"] == "Succeeded", st
        first = env.checkpoint_step(ns, "victim")
        assert first is not None and first >= 100, f"no checkpoint after the preemption: {first}\n{env.debug(ns)}"
        # no pod of the preemptor was created (pinned to the node), let alone bound, before the victim's
        # pods were done (their containers exited: a terminal phase, the devices free)
        gone = [watch.ended(f"victim-0-{i}") for i in range(2)]
        assert all(t is not None for t in gone), watch.events
        last_gone = max(t for t in gone if t is not None)
        created = min(t for t, typ, n, _ in watch.events if typ == "ADDED" and n.startswith("urgent-"))
        assert created >= last_gone, (created, gone)
        bound = _bind_times(env, ns, "urgent")
        assert bound and min(bound.values()) >= int(last_gone) - 1, (bound, gone)

        # re-admitted after the preemptor: it resumes from the checkpoint
        env.wait_phase(ns, "victim", ("Running",), 240)
        st = env.status(ns, "victim")
        attempt = int(st.get("preemptions") or 0)
        rank0 = f"victim-{attempt}-0"
        wait_for(lambda: f"resumed from step={first}" in env.logs(ns, rank0), 120, "resumed from the checkpoint")
        wait_for(lambda: _steps_logged(env, ns, rank0) >= first + 100, 240, "training on", every=1.0)

        # suspended: stopped with its grace period (a checkpoint), resumed from it when unsuspended
        env.kubectl("patch", "dljob", "victim", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":true}}')
        st = env.wait_phase(ns, "victim", ("Queued",), 60)
        assert st["conditions"][0]["reason"] == "Suspended"
        wait_for(lambda: not env.pods(ns, "victim") or all(
            p["metadata"]["labels"]["qosmos.io/attempt"] != str(attempt) for p in env.pods(ns, "victim")), 90,
            "the suspended gang's pods gone")  # fmt: skip
        second = env.checkpoint_step(ns, "victim")
        assert second is not None and second > first, (first, second)
        env.kubectl("patch", "dljob", "victim", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":false}}')
        st = env.wait_phase(ns, "victim", ("Succeeded", "Failed"), 600)
        assert st["phase"] == "Succeeded", f"{st}\n{env.debug(ns)}"
        last = int(st.get("preemptions") or 0)
        assert f"resumed from step={second}" in env.logs(ns, f"victim-{last}-0")
        ranks = finals(env, ns, "victim", 2)
        assert len({c for _, _, c in ranks}) == 1, ranks
    finally:
        watch.close()


def test_a_rank_killed_mid_run_resumes_from_its_last_periodic_checkpoint(training: Training) -> None:
    """SIGKILL of rank 0's process from the node (as the OOM killer would): no grace period, so no
    checkpoint of its last step. Its pod fails; the operator recreates the gang after the back-off, the new
    gang resumes from the last periodic checkpoint (every 100 steps) and trains to the very parameters of
    an uninterrupted run of the same job beside it. The status counts the run since the last checkpoint
    (spec.checkpointIntervalSeconds) as lost, not as progress, and the Restarted event says so."""
    env = training
    ns = env.namespace()
    slow = {"TRAIN_STEPS": "600", "TRAIN_STEP_SLEEP": "0.03", "TRAIN_CHECKPOINT_EVERY": "100"}
    env.apply(env.train_job(ns, "crash", 2, env=slow, backoffLimit=1, checkpointIntervalSeconds=3),
              env.train_job(ns, "steady", 2, env=slow))  # fmt: skip
    env.wait_phase(ns, "crash", ("Running",), 240)
    wait_for(lambda: _steps_logged(env, ns, "crash-0-0") >= 150, 240, "crash past step 150", every=0.2)
    (pod,) = [p for p in env.pods(ns, "crash") if p["metadata"]["name"] == "crash-0-0"]
    cid = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    env.node.ctr("tasks", "kill", "--signal", "SIGKILL", cid)
    saved = env.checkpoint_step(ns, "crash")  # rank 0 is gone: nobody writes another
    assert saved is not None and saved >= 100 and saved % 100 == 0, saved
    st = env.wait_phase(ns, "crash", ("Succeeded", "Failed"), 420)
    assert st["phase"] == "Succeeded" and st["restarts"] == 1, f"{st}\n{env.debug(ns)}"
    assert f"resumed from step={saved}" in env.logs(ns, "crash-1-0")
    steady = env.wait_phase(ns, "steady", ("Succeeded", "Failed"), 300)
    assert steady["phase"] == "Succeeded", steady
    ranks = finals(env, ns, "crash", 2) + finals(env, ns, "steady", 2)
    assert len({c for _, _, c in ranks}) == 1, f"the resumed run's parameters differ: {ranks}"
    # the first segment: its whole 3 s intervals kept, the rest lost; the service received is all of it
    lost, kept = st["lostRunSeconds"], st["executedSeconds"]
    assert 0 < lost < 3 and kept > 0 and kept % 3 == 0, st
    assert st["attainedServiceGpuSeconds"] == pytest.approx((kept + lost) * 2, abs=0.01), st
    # the failure is an event of its queue (the simulator's EV_FAIL): after the first start, before the second
    failed, started = parse_time(st["lastFailureTime"]), parse_time(st["startTime"])
    assert failed is not None and started is not None and started >= failed + 10 - 1, st
    events = env.events(ns, "involvedObject.name=crash,reason=Restarted")
    assert any("since its last checkpoint lost (checkpoints: every 3 s)" in e["message"] for e in events), events


def test_a_quota_reclaim_stops_a_borrower_with_its_grace_period_and_it_resumes(training: Training) -> None:
    """Cohorts (issue 21 §3) on the real node: VirtualCluster ``train`` (quota 4) borrows the idle quota
    of ``lender`` (quota 4, same cohort, no nodes of its own) for an 8-GPU job; a 4-GPU job of the
    lender reclaims it: the borrower's processes get SIGTERM and checkpoint in their grace period, the
    lender's job runs, and the borrower, re-admitted, resumes from its checkpoint and succeeds."""
    env = training
    ns = env.namespace()
    lender = {
        "apiVersion": "qosmos.io/v1alpha1",
        "kind": "VirtualCluster",
        "metadata": {"name": "lender"},
        "spec": {"nodeSelector": {"qosmos.io/pool": "none"}, "policy": "fifo", "cohort": "co", "quota": {"gpus": 4}},
    }
    env.kubectl("patch", "virtualcluster", VC, "--type=merge", "-p",
                json.dumps({"spec": {"cohort": "co", "quota": {"gpus": 4}}}))  # fmt: skip
    env.apply(lender)
    try:
        _training_past_step_100(env, ns, "borrower", steps=1200)
        claim = env.train_job(ns, "claim", 1, gpus_per_pod=4, env={"TRAIN_STEPS": "100"})
        claim["spec"]["virtualCluster"] = "lender"
        env.apply(claim)
        st = env.wait_phase(ns, "claim", ("Succeeded", "Failed"), 300)
        assert st["phase"] == "Succeeded", f"{st}\n{env.debug(ns)}"
        saved = env.checkpoint_step(ns, "borrower")
        assert saved is not None and saved >= 100, f"no checkpoint after the reclaim: {saved}\n{env.debug(ns)}"
        events = env.events(ns, "involvedObject.name=borrower")
        assert any(e["reason"] == "Preempted" and "reclaim" in e["message"].lower() for e in events), [
            (e["reason"], e["message"]) for e in events]  # fmt: skip
        st = env.wait_phase(ns, "borrower", ("Succeeded", "Failed"), 600)
        assert st["phase"] == "Succeeded", f"{st}\n{env.debug(ns)}"
        assert f"resumed from step={saved}" in env.logs(ns, f"borrower-{int(st.get('preemptions') or 0)}-0")
    finally:
        env.kubectl("delete", "dljobs", "--all", "-n", ns, "--wait=false", check=False)
        env.kubectl("delete", "virtualcluster", "lender", check=False)
        env.kubectl("patch", "virtualcluster", VC, "--type=merge", "-p",
                    json.dumps({"spec": {"cohort": None, "quota": None}}))  # fmt: skip
        wait_for(lambda: not env.pods(ns, "borrower") and not env.pods(ns, "claim"), 120, "the cohort test's pods gone")


def test_a_drained_node_evicts_a_job_that_checkpoints_waits_and_resumes_once_uncordoned(training: Training) -> None:
    """``kubectl drain`` of the real node while a 2-pod job trains (backoffLimit 0): the eviction API gives
    its pods DisruptionTarget and their grace period, so its processes get SIGTERM, rank 0 checkpoints
    and they exit 143. That is a disruption, not a failure: the DLJob goes back to its queue (Disrupted,
    no restart counted; with backoffLimit 0 a failure would have failed it) and waits while the node is
    cordoned, no pod of it created there. ``kubectl uncordon``: it is admitted again, resumes from the
    checkpoint and trains to one set of parameters on every rank."""
    env = training
    ns = env.namespace()
    _training_past_step_100(env, ns, "drained", steps=1200)
    try:
        # (pods of other tests' finished jobs on the node are evicted too; their DLJobs are done)
        env.kubectl("drain", NODE, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=150s", timeout=200)
        st = env.wait_phase(ns, "drained", ("Queued",), 60)
        assert not st.get("restarts") and st["preemptions"] == 1, f"{st}\n{env.debug(ns)}"
        events = env.events(ns, "involvedObject.name=drained,reason=Disrupted")
        assert any("(EvictionByEvictionAPI): not the job's failure" in e["message"] for e in events), events
        # its wait (a pass after the requeue) says why the node's GPUs are not free
        says = f"taking nothing new now: node {NODE} (cordoned)"
        wait_for(lambda: says in env.status(ns, "drained")["conditions"][0]["message"], 30, "the wait saying why")
        saved = env.checkpoint_step(ns, "drained")
        assert saved is not None and saved >= 100, f"no checkpoint after the eviction: {saved}\n{env.debug(ns)}"
        time.sleep(5)  # a few passes: nothing new goes to a cordoned node
        assert env.status(ns, "drained")["phase"] == "Queued"
        assert not env.pods(ns, "drained"), [p["metadata"]["name"] for p in env.pods(ns, "drained")]
    finally:
        env.kubectl("uncordon", NODE, check=False)
    st = env.wait_phase(ns, "drained", ("Succeeded", "Failed"), 600)
    assert st["phase"] == "Succeeded" and not st.get("restarts"), f"{st}\n{env.debug(ns)}"
    assert f"resumed from step={saved}" in env.logs(ns, "drained-1-0")
    ranks = finals(env, ns, "drained", 2)
    assert len({c for _, _, c in ranks}) == 1, ranks


@contextlib.contextmanager
def _kubelet_down(env: Training) -> Iterator[None]:
    """The real node's kubelet stopped (its containers run on under containerd), and what the
    node-lifecycle controller (off in the test cluster) then writes, written: Ready Unknown and the
    unreachable taints. On exit the kubelet is started again, the taints go, and it reports Ready."""
    env.node.stop_kubelet()
    cond, taints = unreachable_marks(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    try:
        env.kubectl("patch", "node", NODE, "--subresource=status", "-p", json.dumps({"status": {"conditions": [cond]}}))
        env.kubectl("patch", "node", NODE, "--type=merge", "-p", json.dumps({"spec": {"taints": taints}}))
        yield
    finally:
        env.kubectl("patch", "node", NODE, "--type=merge", "-p", '{"spec":{"taints":null}}', check=False)
        env.node.start_kubelet()


def test_a_kubelet_down_briefly_stalls_the_job_and_longer_requeues_it_to_resume_when_back(training: Training) -> None:
    """The real kubelet stops under a 2-pod JAX job. Back within the VirtualCluster's nodeLostSeconds (a
    blip): the gang stalled (status.stalledSince) and runs on, its pods never stopped. Then, with
    nodeLostSeconds 5, down again for longer: the gang is requeued (NodeLost, no restart counted: with
    backoffLimit 0 a failure would fail it) and waits, saying the node is not Ready; its pods' deletion
    waits for the kubelet. Back, the kubelet carries it out with the grace period (SIGTERM: rank 0
    checkpoints), the job is admitted again, resumes from that checkpoint and trains to one checksum."""
    env = training
    ns = env.namespace()
    _training_past_step_100(env, ns, "lost", steps=3000)
    started = env.status(ns, "lost")["startTime"]
    with _kubelet_down(env):
        wait_for(lambda: env.status(ns, "lost").get("stalledSince"), 30, "the stall written", every=0.5)
    wait_for(lambda: "stalledSince" not in env.status(ns, "lost"), 60, "the stall cleared", every=0.5)
    st = env.status(ns, "lost")
    assert st["phase"] == "Running" and st["startTime"] == started and not st.get("preemptions"), st
    before = _steps_logged(env, ns, "lost-0-0")
    wait_for(lambda: _steps_logged(env, ns, "lost-0-0") > before + 50, 60, "training on after the blip", every=1.0)

    env.kubectl("patch", "virtualcluster", VC, "--type=merge", "-p", '{"spec":{"nodeLostSeconds":5}}')
    try:
        with _kubelet_down(env):
            st = env.wait_phase(ns, "lost", ("Queued",), 60)
            assert not st.get("restarts") and st["preemptions"] == 1, f"{st}\n{env.debug(ns)}"
            events = env.events(ns, "involvedObject.name=lost,reason=NodeLost")
            assert events, env.debug(ns)
            says = f"taking nothing new now: node {NODE} (not Ready)"
            wait_for(lambda: says in env.status(ns, "lost")["conditions"][0]["message"], 30, "the wait saying why")
            # the requeue deleted the pods; without a kubelet they stay, terminating, and keep training
            assert all(p["metadata"].get("deletionTimestamp") for p in env.pods(ns, "lost")), env.debug(ns)
    finally:
        env.kubectl("patch", "virtualcluster", VC, "--type=merge", "-p", '{"spec":{"nodeLostSeconds":null}}')
    st = env.wait_phase(ns, "lost", ("Succeeded", "Failed"), 600)
    assert st["phase"] == "Succeeded" and not st.get("restarts"), f"{st}\n{env.debug(ns)}"
    saved = env.checkpoint_step(ns, "lost")  # written at the SIGTERM the kubelet, back, sent (none since)
    assert saved is not None and f"resumed from step={saved}" in env.logs(ns, "lost-1-0"), env.debug(ns)
    ranks = finals(env, ns, "lost", 2)
    assert len({c for _, _, c in ranks}) == 1, ranks


def test_a_stuck_gang_times_out_frees_its_gpus_and_fails_with_the_image_error(training: Training) -> None:
    """A DLJob whose image is not on the node (pull policy Never) never starts: at its start deadline
    it is requeued (StartTimeout), then Failed after its backoffLimit with the image error in its
    condition; the job queued behind it then gets the GPUs and trains to Succeeded."""
    env = training
    ns = env.namespace()
    stuck = env.train_job(ns, "stuck", 2, gpus_per_pod=4, image="qosmos.local/no-such-image:1",
                          startTimeoutSeconds=20, backoffLimit=1)  # fmt: skip
    env.apply(stuck)
    env.wait_phase(ns, "stuck", ("Admitted",), 60)
    env.apply(env.train_job(ns, "next", 2))
    st = env.wait_phase(ns, "stuck", ("Failed",), 240)
    cond = st["conditions"][0]
    assert cond["reason"] == "StartTimeout" and "ErrImageNeverPull" in cond["message"], cond
    assert st["startTimeouts"] == 2 and "backoffLimit 1" in cond["message"]
    assert len(env.events(ns, "reason=StartTimeout")) >= 1
    st = env.wait_phase(ns, "next", ("Succeeded", "Failed"), 300)
    assert st["phase"] == "Succeeded", f"{st}\n{env.debug(ns)}"


def test_an_operator_killed_mid_start_five_times_still_trains_and_creates_no_pod_twice(training: Training) -> None:
    """SIGKILL of the operator while it creates a 3-pod gang, 5 times (restarted each time): the job
    still trains to Succeeded in its first attempt, and every pod name was created exactly once."""
    env = training
    ns = env.namespace()
    watch = PodWatch(env, ns)
    try:
        env.apply(env.train_job(ns, "survivor", 3))
        rng = random.Random(20)
        kills = 0
        while kills < 5:
            # each life: wait until this operator has done something to the gang (the admission, a pod
            # created or ungated, a status), then kill it mid-way, a random moment later
            seen = (len(watch.events), env.dljob(ns, "survivor")["metadata"]["resourceVersion"])
            with contextlib.suppress(Exception):
                wait_for(lambda seen=seen: (len(watch.events), env.dljob(ns, "survivor")["metadata"]["resourceVersion"])
                         != seen, 30, "the operator's next write", every=0.05)  # fmt: skip
            time.sleep(rng.uniform(0.0, 0.3))
            env.operator.kill9()
            kills += 1
            env.operator.start()
        assert kills == 5
        st = env.wait_phase(ns, "survivor", ("Succeeded", "Failed"), 420)
        assert st["phase"] == "Succeeded", f"{st}\n{env.debug(ns)}"
        assert not st.get("restarts") and not st.get("preemptions"), st
        added = Counter(name for _, t, name, _ in watch.events if t == "ADDED")
        assert added == Counter({f"survivor-0-{i}": 1 for i in range(3)}), watch.events
        ranks = finals(env, ns, "survivor", 3)
        assert len({c for _, _, c in ranks}) == 1, ranks
    finally:
        watch.close()
