"""Graceful deletion (issue 20 §2): pods are deleted with their own grace period, and devices held by
pods no current gang owns (terminating, or of a deleted or orphaned DLJob) stay booked in the core
until the pod objects are gone, so no gang is placed on them before."""

from __future__ import annotations

from typing import Any

from qosmos.operator.durations import Durations
from qosmos.operator.reconcile import Reconciler
from qosmos.operator.translate import parse_time
from qosmos.testing.fakekube import FakeKube
from qosmos.testing.fakekube import gpu_node as node

T0 = parse_time("2026-01-02T03:04:05Z") or 0.0


def dljob(name: str, created: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "qosmos.io/v1alpha1",
        "kind": "DLJob",
        "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}", "generation": 1,
                     "creationTimestamp": created},
        "spec": {"virtualCluster": "vc-a", "gpus": gpus, "gpusPerNode": gpus},
    }  # fmt: skip


class Pass:
    def __init__(self, kube: FakeKube) -> None:
        self.kube, self.now = kube, T0
        self.rec = Reconciler(kube, durations=Durations(None), clock=lambda: self.now)  # type: ignore[arg-type]

    def __call__(self) -> Any:
        self.now += 10
        return self.rec.run_pass()

    def run(self, job: str) -> None:
        """The scheduler binds the job's pods where the gang was placed, the kubelet runs them."""
        nodes = self.kube.jobs[job]["status"]["placement"]["nodeNames"]
        for i, (name, p) in enumerate(sorted((n, p) for n, p in self.kube.pods.items() if n.startswith(job))):
            p["spec"].pop("schedulingGates", None)
            self.kube.bind(name, nodes[min(i, len(nodes) - 1)])


def test_pods_of_a_deleted_dljob_hold_their_gpus_until_they_are_gone() -> None:
    kube = FakeKube([node("n0")], [dljob("a", "2026-01-02T03:00:00Z")])
    step = Pass(kube)
    assert step().admitted == ["team/a"]
    step.run("a")
    step()
    assert kube.jobs["a"]["status"]["phase"] == "Running"
    # the DLJob is deleted: the garbage collector deletes its pods, which terminate for their grace period
    del kube.jobs["a"]
    for name in list(kube.pods):
        kube.delete_pod("team", name)
    kube.add(dljob("b", "2026-01-02T03:05:00Z"))
    rep = step()
    assert rep.admitted == [] and rep.terminating == 1  # a's pod still holds n0's 8 GPUs
    assert kube.jobs["b"]["status"]["phase"] == "Queued"
    kube.terminate()  # the kubelet is done: the pod object is gone
    assert step().admitted == ["team/b"]


def test_orphaned_pods_stay_booked_while_they_exist() -> None:
    kube = FakeKube([node("n0")], [dljob("a", "2026-01-02T03:00:00Z")])
    step = Pass(kube)
    step()
    step.run("a")
    step()
    del kube.jobs["a"]  # kubectl delete --cascade=orphan: the pods keep running
    kube.add(dljob("b", "2026-01-02T03:05:00Z"))
    for _ in range(3):
        assert step().admitted == [] and kube.pods  # the operator neither places on them nor deletes them
    kube.pods.clear()
    assert step().admitted == ["team/b"]


def test_a_requeue_deletes_with_the_pods_own_grace_period() -> None:
    kube = FakeKube([node("n0"), node("n1")], [dljob("a", "2026-01-02T03:00:00Z")])
    step = Pass(kube)
    step()
    step.run("a")
    step()
    (placed,) = kube.jobs["a"]["status"]["placement"]["nodeNames"]
    kube._nodes = [n for n in kube._nodes if n["metadata"]["name"] != placed]  # its node is gone
    rep = step()
    assert rep.preempted == ["team/a"]  # NodeLost: requeued (and placed again on the other node)
    assert kube.deletions and all(grace is None for _, grace in kube.deletions)  # never a force delete


def test_a_refused_template_holds_the_job_out_of_its_queue_until_edited() -> None:
    """Issue 20 §2: the pod template is dry-run when the DLJob is first seen, once per generation."""
    kube = FakeKube([node("n0")], [dljob("a", "2026-01-02T03:00:00Z")])
    kube.refuse_template = 'Pod "a-0-0" is invalid: spec.containers[0].image: Required value'
    step = Pass(kube)
    rep = step()
    assert rep.admitted == [] and kube.dry_runs == ["a-0-0"]
    cond = kube.jobs["a"]["status"]["conditions"][0]
    assert cond["reason"] == "InvalidTemplate" and "image: Required value" in cond["message"]
    assert [r for _, r, _ in kube.events] == ["InvalidTemplate"]
    step()
    assert kube.dry_runs == ["a-0-0"] and len(kube.events) == 1  # one verdict per generation, one Event
    kube.refuse_template = None
    kube.jobs["a"]["metadata"]["generation"] = 2  # kubectl edit: a new spec
    kube.edit("a", template={"spec": {"containers": [{"name": "main", "image": "train:1"}]}})
    assert step().admitted == ["team/a"] and kube.dry_runs == ["a-0-0", "a-0-0"]


def test_dljobs_of_one_spec_in_one_namespace_share_their_template_verdict() -> None:
    """A dry run per distinct (namespace, spec), not per DLJob: 100 jobs applied from one manifest cost one
    dry run (at Kueue's scale it was one apiserver request of each job's 21), a job of another spec or
    another namespace its own; the verdict is kept while a job with that spec waits."""
    jobs = [dljob(f"j{i}", "2026-01-02T03:00:00Z", gpus=80) for i in range(3)]  # too large: they wait
    other_ns = dljob("k", "2026-01-02T03:00:00Z", gpus=80)
    other_ns["metadata"]["namespace"] = "lab"
    other_spec = dljob("m", "2026-01-02T03:00:00Z", gpus=72)
    kube = FakeKube([node("n0")], [*jobs, other_ns, other_spec])
    step = Pass(kube)
    step()
    assert sorted(kube.dry_runs) == ["j0-0-0", "k-0-0", "m-0-0"]
    kube.jobs["j3"] = dljob("j3", "2026-01-02T03:01:00Z", gpus=80)  # one more of the same manifest
    step()
    assert kube.jobs["j3"]["status"]["phase"] == "Queued"  # seen, and queued on the verdict it shares
    assert len(kube.dry_runs) == 3


def test_a_dry_run_that_cannot_reach_the_apiserver_decides_nothing() -> None:
    kube = FakeKube([node("n0")], [dljob("a", "2026-01-02T03:00:00Z")])

    def unreachable(pod: dict[str, Any]) -> str | None:
        raise ConnectionError("apiserver unavailable")

    kube.dry_run_pod = unreachable  # type: ignore[method-assign]
    assert Pass(kube)().admitted == ["team/a"]  # not held: the template was not judged


def test_a_preemptors_gang_is_created_only_once_the_preempted_pods_are_gone() -> None:
    """Issue 20 §2: the gang admitted in the pass that preempted a running job gets its status (the
    placement is decided), but no pod of it is pinned onto the node while the preempted job's pods are
    terminating there (checkpointing in their grace period); once they are gone, the next pass creates
    it."""
    vcs = [{"metadata": {"name": "vc-a"}, "spec": {"policy": "fifo", "placement": "consolidate",
                                                   "preemption": {"withinVirtualCluster": "LowerPriority"}}}]  # fmt: skip
    kube = FakeKube([node("n0")], [dljob("low", "2026-01-02T03:00:00Z")], vcs)
    step = Pass(kube)
    assert step().admitted == ["team/low"]
    step.run("low")
    step()
    high = dljob("high", "2026-01-02T03:05:00Z")
    high["spec"]["priority"] = 10
    kube.add(high)
    rep = step()
    assert rep.preempted == ["team/low"] and rep.admitted == ["team/high"]
    assert kube.jobs["high"]["status"]["placement"]["nodeNames"] == ["n0"]
    assert [n for n in kube.pods if n.startswith("high")] == []  # low-0-0 still terminates on n0
    assert "deletionTimestamp" in kube.pods["low-0-0"]["metadata"]
    step()
    assert [n for n in kube.pods if n.startswith("high")] == []
    kube.terminate()  # low's pod is gone: the kubelet freed the devices
    step()
    assert sorted(n for n in kube.pods if n.startswith("high")) == ["high-0-0"]


def test_a_gang_requeued_for_a_lost_node_leaves_its_other_gpus_to_the_same_pass() -> None:
    """As a preemption's victims and a gang failed in the pass: its stopped pod on the node still up does
    not hold that node's GPUs from the pass's admissions (the simulator frees them at once); the new
    gang's pods are created there once the old one is gone."""
    a = dljob("a", "2026-01-02T03:00:00Z", gpus=16)
    a["spec"] |= {"gpusPerNode": 8, "nodeLostSeconds": 0}
    vcs = [{"metadata": {"name": "vc-a"}, "spec": {"policy": "fifo", "backfill": "easy"}}]  # (a can never fit now)
    kube = FakeKube([node("n0"), node("n1")], [a, dljob("b", "2026-01-02T03:01:00Z")], vcs=vcs)
    step = Pass(kube)
    assert step().admitted == ["team/a"]
    step.run("a")
    step()
    kube._nodes[0]["status"]["conditions"] = [{"type": "Ready", "status": "False"}]  # n0 is lost
    rep = step()
    assert rep.preempted == ["team/a"] and rep.admitted == ["team/b"] and rep.terminating == 0
    assert kube.jobs["b"]["status"]["placement"]["nodeNames"] == ["n1"]
