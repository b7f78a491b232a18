"""Restarts like batch/v1 Job's (issue 20 §2): back-off between gang restarts, exit-code rules, the
failed attempt's pods kept for kubectl logs, cleanPodPolicy. Pure rules, then passes over a FakeKube."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from prometheus_client import REGISTRY
from pydantic import ValidationError
from qosmos.extender.core.failures import consecutive_failures, restart_delay
from qosmos.operator.crds import DLJobSpec, FailureAction, PodFailurePolicy
from qosmos.operator.durations import Durations
from qosmos.operator.lifecycle import (
    exit_codes,
    failure_action,
    not_ready_since,
    start_deadline,
    started,
    unstarted_nodes,
    waiting_reasons,
)
from qosmos.operator.reconcile import Reconciler
from qosmos.operator.translate import parse_time
from qosmos.testing.fakekube import FakeKube, gpu_node, pinned

T0 = parse_time("2026-01-02T03:04:05Z") or 0.0


def test_back_off_doubles_from_10_s_to_6_min_and_resets_after_a_long_run() -> None:
    assert [restart_delay(k) for k in range(1, 9)] == [10, 20, 40, 80, 160, 320, 360, 360]
    assert consecutive_failures(3, 30.0) == 4 and consecutive_failures(3, None) == 4
    assert consecutive_failures(5, 601.0) == 1  # ran more than 10 min: not a crash loop


def _pod(*codes: tuple[str, int]) -> dict[str, Any]:
    return {"status": {"phase": "Failed", "containerStatuses": [
        {"name": c, "state": {"terminated": {"exitCode": code}}} for c, code in codes]}}  # fmt: skip


def test_exit_code_rules_first_match_decides() -> None:
    policy = PodFailurePolicy.model_validate({"rules": [
        {"action": "FailJob", "onExitCodes": {"containerName": "main", "values": [42]}},
        {"action": "Ignore", "onExitCodes": {"values": [137, 143]}},
        {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1]}},
    ]})  # fmt: skip
    assert exit_codes([_pod(("main", 42), ("side", 0))]) == [("main", 42)]
    assert failure_action(policy, [("main", 42)]) == (FailureAction.FAIL_JOB, ("main", 42))
    assert failure_action(policy, [("side", 42)])[0] is FailureAction.COUNT  # NotIn [1] matches 42
    assert failure_action(policy, [("side", 143)])[0] is FailureAction.IGNORE
    assert failure_action(policy, [("main", 1)]) == (FailureAction.COUNT, None)  # no rule: counted
    assert failure_action(None, [("main", 42)]) == (FailureAction.COUNT, None)
    with pytest.raises(ValidationError):
        DLJobSpec.model_validate({"virtualCluster": "v", "gpus": 1, "podFailurePolicy": {"rules": [
            {"action": "FailJob", "onExitCodes": {"values": [0]}}]}})  # fmt: skip


def dljob(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "qosmos.io/v1alpha1",
        "kind": "DLJob",
        "metadata": {"name": "j", "namespace": "team", "uid": "uid-j", "generation": 1,
                     "creationTimestamp": "2026-01-02T03:00:00Z"},
        "spec": {"virtualCluster": "vc-a", "gpus": 8, "gpusPerNode": 8, **spec},
    }  # fmt: skip


class Run:
    def __init__(
        self, nodes: tuple[str, ...] = ("n0",), kube: type[FakeKube] = FakeKube, node_gpus: int = 8, **spec: Any
    ) -> None:
        self.kube = kube([gpu_node(n, node_gpus) for n in nodes], [dljob(**spec)])
        self.now = T0
        self.rec = Reconciler(self.kube, durations=Durations(None), clock=lambda: self.now)  # type: ignore[arg-type]

    def step(self, dt: float = 1.0) -> Any:
        self.now += dt
        return self.rec.run_pass()

    @property
    def status(self) -> dict[str, Any]:
        return self.kube.jobs["j"]["status"]

    def live(self) -> list[str]:
        return sorted(n for n, p in self.kube.pods.items() if not p["metadata"].get("deletionTimestamp"))

    def run_current(self, phase: str = "Running") -> None:
        """kube-scheduler binds the new pods where the operator pinned them; the kubelet runs them (or,
        ``Pending``, cannot start them)."""
        self.kube.run_new_pods(phase)

    def run_to_exit(self, code: int) -> None:
        """Admitted, its pods running, then their containers exit with ``code`` (a pass after each)."""
        self.step()
        self.run_current()
        self.step()
        self.exit(code)
        self.step()

    def exit(self, code: int, container: str = "main") -> None:
        for p in self.kube.pods.values():
            if p["status"].get("phase") == "Running":
                p["status"] = {"phase": "Failed" if code else "Succeeded", "containerStatuses": [
                    {"name": container, "state": {"terminated": {"exitCode": code}}}]}  # fmt: skip


def test_a_failed_gang_is_recreated_after_a_doubling_back_off_keeping_the_failed_pod() -> None:
    r = Run()
    r.step()
    r.run_current()
    r.step()
    assert r.status["phase"] == "Running" and r.live() == ["j-0-0"]
    r.exit(1)
    rep = r.step()
    assert rep.restarted == ["team/j"] and r.status["restarts"] == 1 and r.status["consecutiveFailures"] == 1
    assert rep.wake_at == pytest.approx(r.now + 10)
    assert parse_time(r.status["lastFailureTime"]) == r.now  # an event of its queue (the simulator's EV_FAIL)
    assert r.live() == ["j-0-0"]  # no new gang during the back-off; the failed pod kept for its logs
    r.step(5)
    assert r.live() == ["j-0-0"]
    r.step(6)  # past restartAfter
    assert r.live() == ["j-0-0", "j-1-0"] and r.kube.pods["j-0-0"]["status"]["phase"] == "Failed"
    r.run_current()
    r.step()
    r.exit(1)
    rep = r.step()
    assert r.status["consecutiveFailures"] == 2 and rep.wake_at == pytest.approx(r.now + 20)
    r.step(21)
    assert r.live() == ["j-1-0", "j-2-0"]  # attempt 0's failed pod is gone, attempt 1's stays


def test_fail_job_exit_code_fails_at_once_and_ignore_is_not_counted() -> None:
    rules = {"rules": [{"action": "FailJob", "onExitCodes": {"values": [42]}},
                       {"action": "Ignore", "onExitCodes": {"values": [143]}}]}  # fmt: skip
    r = Run(podFailurePolicy=rules, backoffLimit=0)
    r.step()
    r.run_current()
    r.step()
    r.exit(143)  # e.g. SIGTERM from a node drain: recreated although backoffLimit is 0
    r.step()
    assert r.status["phase"] == "Admitted" and not r.status.get("restarts") and r.status["ignoredFailures"] == 1
    r.step(11)
    r.run_current()
    r.step()
    r.exit(42)
    r.step()
    assert r.status["phase"] == "Failed"
    cond = r.status["conditions"][0]
    assert cond["reason"] == "PodFailurePolicy" and "exited 42" in cond["message"]
    assert "j-1-0" in r.kube.pods  # cleanPodPolicy Running: the failed pod stays


@pytest.mark.parametrize(("policy", "kept"), [("Running", True), ("All", False), ("None", True)])
def test_clean_pod_policy_on_success(policy: str, kept: bool) -> None:
    r = Run(cleanPodPolicy=policy)
    r.run_to_exit(0)
    assert r.status["phase"] == "Succeeded" and ("j-0-0" in r.kube.pods) is kept


def test_suspend_holds_a_queued_job_stops_a_running_one_and_resume_queues_it() -> None:
    r = Run(suspend=True)
    r.step()
    assert r.status["phase"] == "Queued" and r.status["conditions"][0]["reason"] == "Suspended"
    assert r.kube.pods == {}
    r.kube.edit("j", suspend=False)
    r.step()
    r.run_current()
    r.step()
    assert r.status["phase"] == "Running"
    r.kube.edit("j", suspend=True)
    rep = r.step()
    assert rep.preempted == ["team/j"] and r.status["phase"] == "Queued"
    assert r.status["conditions"][0]["reason"] == "Suspended"
    assert r.kube.deletions == [("j-0-0", None)]  # stopped with its own grace period
    assert "deletionTimestamp" in r.kube.pods["j-0-0"]["metadata"]
    r.step()
    assert r.status["phase"] == "Queued"  # held, and its old pod still books n0
    r.kube.terminate()
    r.kube.edit("j", suspend=False)
    assert r.step().admitted == ["team/j"] and r.live() == ["j-1-0"]


def test_active_deadline_fails_the_job_and_stops_its_pods() -> None:
    r = Run(activeDeadlineSeconds=600)  # created at 03:00:00, T0 is 03:04:05: 355 s left
    r.step()
    r.run_current()
    rep = r.step()
    assert r.status["phase"] == "Running" and rep.wake_at == pytest.approx(T0 + 355)
    r.step(400)
    assert r.status["phase"] == "Failed" and r.status["conditions"][0]["reason"] == "DeadlineExceeded"
    assert r.kube.deletions == [("j-0-0", None)]


def test_ttl_after_finished_deletes_the_dljob() -> None:
    r = Run(ttlSecondsAfterFinished=100)
    r.run_to_exit(0)
    assert r.status["phase"] == "Succeeded"
    assert r.step(50).wake_at == pytest.approx(r.now + 49)
    r.step(60)
    assert "j" not in r.kube.jobs


# ---- start deadline, node loss, concurrent writers ---------------------------------------------
PULL = {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "nope:1"'}}


def test_waiting_reasons_are_the_pods_own_words() -> None:
    pods = [
        {"metadata": {"name": "a"}, "status": {"phase": "Pending", "containerStatuses": [{"name": "m", "state": PULL}]}},
        {"metadata": {"name": "b"}, "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes: taint"}]}},
        {"metadata": {"name": "c"}, "spec": {"schedulingGates": [{"name": "g"}]}, "status": {"phase": "Pending"}},
        {"metadata": {"name": "d"}, "status": {"phase": "Running"}},
    ]  # fmt: skip
    assert waiting_reasons(pods) == [
        'a: ImagePullBackOff: Back-off pulling image "nope:1"',
        "b: Unschedulable: 0/1 nodes: taint",
        "c: SchedulingGated",
    ]
    assert unstarted_nodes({"n0": pods[:1], "n1": pods[3:], "n2": []}) == ["n0", "n2"]
    assert start_deadline(100.0, None, 600) == 700.0
    assert start_deadline(100.0, 400.0, 600) == 1000.0  # a recreated gang's clock starts at its back-off's end
    assert start_deadline(None, None, 600) is None
    down = {
        "status": {"conditions": [{"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-01-02T03:04:05Z"}]}
    }
    assert not_ready_since(down, 5.0) == T0
    assert not_ready_since(gpu_node("n"), 5.0) is None
    assert not_ready_since({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, 5.0) == 5.0


def _pull_backoff(r: Run) -> None:
    for p in r.kube.pods.values():
        if p["status"].get("phase") == "Pending" and not p["metadata"].get("deletionTimestamp"):
            p["status"]["containerStatuses"] = [{"name": "main", "state": PULL}]


def test_a_gang_that_does_not_start_is_requeued_at_the_head_away_from_its_node_then_failed() -> None:
    # 16-GPU nodes: the old pod's node keeps room for the new gang, where consolidation would put it
    r = Run(nodes=("n0", "n1"), node_gpus=16, startTimeoutSeconds=120, backoffLimit=1)
    r.step()
    first = pinned(r.kube.pods["j-0-0"])
    r.run_current("Pending")
    _pull_backoff(r)
    rep = r.step(60)
    assert r.status["phase"] == "Admitted" and rep.wake_at == pytest.approx(T0 + 1 + 120)
    rep = r.step(61)  # 121 s after admission: requeued at the head, and placed again in the same pass
    assert rep.preempted == ["team/j"] and rep.admitted == ["team/j"]
    why = next(m for name, reason, m in r.kube.events if reason == "StartTimeout")
    assert 'j-0-0: ImagePullBackOff: Back-off pulling image "nope:1"' in why and "startTimeoutSeconds 120" in why
    requeue = next(st for name, st in r.kube.status_patches if st.get("phase") == "Queued")
    assert requeue["queueHead"] is True and requeue["conditions"][0]["reason"] == "StartTimeout"
    assert r.status["avoidNodes"] == [first] and r.status["startTimeouts"] == 1
    assert "deletionTimestamp" in r.kube.pods["j-0-0"]["metadata"]  # the old pod gets its grace period
    second = pinned(r.kube.pods["j-1-0"])
    assert second != first  # the node it did not start on is avoided
    r.run_current("Pending")
    _pull_backoff(r)
    r.step(121)
    assert r.status["phase"] == "Failed" and r.status["conditions"][0]["reason"] == "StartTimeout"
    assert "ImagePullBackOff" in r.status["conditions"][0]["message"] and "backoffLimit 1" in r.status[
        "conditions"][0]["message"]  # fmt: skip
    assert sorted(r.status["avoidNodes"]) == ["n0", "n1"]
    assert "deletionTimestamp" in r.kube.pods["j-1-0"]["metadata"]  # stopped with its grace period


def test_a_gang_that_starts_in_time_is_not_timed_out_and_one_node_is_tried_again() -> None:
    r = Run(startTimeoutSeconds=120, backoffLimit=2)
    r.step()
    r.run_current()
    r.step(100)
    assert r.status["phase"] == "Running"
    r.step(500)
    assert r.status["phase"] == "Running"  # the deadline binds only until the gang runs
    r2 = Run(startTimeoutSeconds=120, backoffLimit=2)  # one node: avoiding it would leave none
    r2.step()
    r2.run_current("Pending")
    r2.step(121)
    assert r2.status["startTimeouts"] == 1 and r2.status["avoidNodes"] == ["n0"]
    assert r2.status["phase"] == "Queued"  # at the head, until its old pod's grace period ends
    r2.kube.terminate()
    assert r2.step().admitted == ["team/j"] and pinned(r2.kube.pods["j-1-0"]) == "n0"


def test_the_virtual_clusters_start_timeout_is_the_default() -> None:
    r = Run()
    r.kube._vcs = [{"metadata": {"name": "vc-a"}, "spec": {"policy": "fifo", "startTimeoutSeconds": 30}}]
    r.step()
    r.run_current("Pending")
    r.step(29)
    assert r.status["phase"] == "Admitted"
    assert "startTimeouts" not in r.status
    r.step(2)
    assert r.status["startTimeouts"] == 1 and any(reason == "StartTimeout" for _, reason, _ in r.kube.events)


def _not_ready(r: Run, node: str, since: float) -> None:
    from qosmos.operator.translate import rfc3339

    for n in r.kube._nodes:
        if n["metadata"]["name"] == node:
            n["status"]["conditions"] = [{"type": "Ready", "status": "Unknown", "lastTransitionTime": rfc3339(since)}]


def _running_on_a_node_gone_not_ready(lost_s: int) -> tuple[Run, str]:
    """A gang running on one of two nodes, whose node has just stopped being Ready."""
    r = Run(nodes=("n0", "n1"), nodeLostSeconds=lost_s)
    r.step()
    node = pinned(r.kube.pods["j-0-0"])
    r.run_current()
    r.step()
    _not_ready(r, node, r.now)
    return r, node


def test_a_running_gang_on_a_node_not_ready_past_node_lost_seconds_is_requeued_elsewhere() -> None:
    r, node = _running_on_a_node_gone_not_ready(100)
    rep = r.step(30)
    assert r.status["phase"] == "Running" and rep.wake_at == pytest.approx(r.now - 30 + 100)
    rep = r.step(71)
    assert rep.preempted == ["team/j"] and not r.status.get("restarts")
    requeue = next(st for name, st in r.kube.status_patches if st.get("phase") == "Queued")
    assert requeue["conditions"][0]["reason"] == "NodeLost" and node in requeue["conditions"][0]["message"]
    # placed again in the same pass, not on the NotReady node
    assert rep.admitted == ["team/j"] and pinned(r.kube.pods["j-1-0"]) != node


def test_a_pod_evicted_from_a_not_ready_node_is_the_nodes_loss_not_a_restart() -> None:
    r, _ = _running_on_a_node_gone_not_ready(1000)
    r.kube.pods.pop("j-0-0")  # the taint manager evicted it before the grace ended
    rep = r.step()
    assert rep.preempted == ["team/j"] and rep.restarted == [] and not r.status.get("restarts")
    assert any(reason == "NodeLost" for _, reason, _ in r.kube.events)


def test_a_lost_node_keeps_the_checkpoints_made_before_it_went_not_ready() -> None:
    """The gang stalled when its node stopped being Ready: the grace that follows (nodeLostSeconds) is no
    run, and no checkpoint was written in it."""
    r = Run(nodes=("n0", "n1"), nodeLostSeconds=300, checkpointIntervalSeconds=600)
    r.step()
    node = pinned(r.kube.pods["j-0-0"])
    r.run_current()
    r.step()  # Running from here
    r.step(550)
    _not_ready(r, node, r.now)  # 550 s into its run: no checkpoint yet
    rep = r.step(300)
    assert rep.preempted == ["team/j"] and not r.status.get("restarts")
    requeue = next(st for _, st in r.kube.status_patches if st.get("phase") == "Queued")
    assert requeue["executedSeconds"] == 0 and requeue["lostRunSeconds"] == pytest.approx(550)


def _ready(r: Run, node: str, since: float) -> None:
    from qosmos.operator.translate import rfc3339

    for n in r.kube._nodes:
        if n["metadata"]["name"] == node:
            n["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastTransitionTime": rfc3339(since)}]


def test_a_node_back_before_node_lost_seconds_with_its_pods_failed_restarts_the_gang_from_before_the_stall() -> None:
    """The machine restarted: its pods failed. The gang restarts (counted, backed off), its run counted to
    when the node stopped being Ready (status.stalledSince), not to the pass that saw the failure."""
    r = Run(nodes=("n0", "n1"), nodeLostSeconds=300, checkpointIntervalSeconds=100)
    r.step()
    node = pinned(r.kube.pods["j-0-0"])
    r.run_current()
    r.step()  # Running from here
    started = r.now
    r.step(250)
    _not_ready(r, node, r.now)  # 250 s into its run: two checkpoints
    r.step()
    assert parse_time(r.status["stalledSince"]) == started + 250
    r.step(59)
    _ready(r, node, r.now)
    r.exit(137)
    rep = r.step()
    assert rep.restarted == ["team/j"] and r.status["restarts"] == 1 and "stalledSince" not in r.status
    assert r.status["executedSeconds"] == 200 and r.status["lostRunSeconds"] == pytest.approx(50)
    assert r.status["attainedServiceGpuSeconds"] == pytest.approx(250 * 8)  # not the 60 s of the stall


def test_a_node_back_with_its_pods_still_running_clears_the_stall() -> None:
    """A NotReady blip (the kubelet lost its apiserver, the pods ran on): the gang runs on, stall forgotten."""
    r, node = _running_on_a_node_gone_not_ready(300)
    r.step()
    assert "stalledSince" in r.status
    _ready(r, node, r.now)
    rep = r.step()
    assert "stalledSince" not in r.status and r.status["phase"] == "Running" and rep.preempted == []


def test_a_gang_whose_pods_succeeded_before_its_node_went_not_ready_succeeds() -> None:
    """Its pod there finished before the node went: the job is done, not lost with the node."""
    r, _ = _running_on_a_node_gone_not_ready(0)
    r.exit(0)
    rep = r.step()
    assert r.status["phase"] == "Succeeded" and rep.preempted == [] and "NodeLost" not in str(r.kube.events)


class Racing(FakeKube):
    """Another writer edits the DLJob right after the pass read it (once)."""

    race = True

    def dljobs(self) -> list[dict[str, Any]]:
        out = super().dljobs()
        if self.race and out and not out[0].get("status"):
            self.race = False
            self.edit("j", gpus=4, gpusPerNode=4)
        return out


def test_an_admission_is_written_only_on_the_version_it_was_decided_on() -> None:
    r = Run(kube=Racing)
    rep = r.step()
    assert rep.admitted == [] and r.kube.pods == {}  # the admission of the 8-GPU version was refused
    assert rep.wake_at == pytest.approx(r.now)  # decided again at once
    rep = r.step()
    assert rep.admitted == ["team/j"] and r.status["observedGeneration"] == 2
    limits = r.kube.pods["j-1-0" if "j-1-0" in r.kube.pods else "j-0-0"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "4"  # admitted as edited


def test_a_gang_is_running_once_ready_and_a_never_ready_one_times_out_saying_so() -> None:
    """Kueue's waitForPodsReady: a readiness probe (e.g. rendezvous done) holds the start; a gang Running
    but never Ready meets its start deadline, and its node is not avoided (the program's doing)."""
    r = Run(startTimeoutSeconds=60, backoffLimit=0)
    r.step()
    r.run_current()
    unready = {"type": "Ready", "status": "False", "message": "containers with unready status: [main]"}
    r.kube.pods["j-0-0"]["status"]["conditions"] = [unready]
    r.step(30)
    assert r.status["phase"] == "Admitted"
    r.step(31)
    assert r.status["phase"] == "Failed" and r.status["conditions"][0]["reason"] == "StartTimeout"
    assert "j-0-0: Running, not Ready: containers with unready status: [main]" in r.status["conditions"][0]["message"]
    assert "avoidNodes" not in r.status  # it ran there: the node is not to blame
    assert started({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
    assert not started({"status": {"phase": "Pending"}}) and started({"status": {"phase": "Succeeded"}})


def test_a_failed_containers_last_words_are_in_the_condition() -> None:
    r = Run(backoffLimit=0)
    r.step()
    r.run_current()
    r.step()
    pod = r.kube.pods["j-0-0"]
    assert pod["spec"]["containers"][0]["terminationMessagePolicy"] == "FallbackToLogsOnError"
    pod["status"] = {"phase": "Failed", "containerStatuses": [{"name": "main", "state": {"terminated": {
        "exitCode": 3, "message": "...\nrendezvous failed: DEADLINE_EXCEEDED connecting to j-0.j:1234"}}}]}  # fmt: skip
    r.step()
    msg = r.status["conditions"][0]["message"]
    assert r.status["phase"] == "Failed" and "container main exited 3" in msg
    assert msg.endswith(
        "rendezvous failed: DEADLINE_EXCEEDED connecting to j-0.j:1234: after 0 restarts (backoffLimit)"
    )


def test_gpus_per_pod_splits_a_nodes_gpus_over_pods_of_one_gang() -> None:
    """PyTorchJob's one pod per GPU: the core places 1 node x 3 GPUs, the gang is 3 pods of 1 GPU there,
    ranked 0..2, each booked (the node's other 5 GPUs stay free for the next job)."""
    r = Run(gpus=3, gpusPerNode=3, gpusPerPod=1)
    r.kube.add({**dljob(gpus=6, gpusPerNode=6), "metadata": {**dljob()["metadata"], "name": "k", "uid": "uid-k",
                                                             "creationTimestamp": "2026-01-02T03:00:01Z"}})  # fmt: skip
    rep = r.step()
    assert rep.admitted == ["team/j"]  # k (6 GPUs) does not fit next to j's 3
    assert sorted(r.kube.pods) == ["j-0-0", "j-0-1", "j-0-2"]
    assert r.status["placement"] == {"nodes": 1, "gpusPerNode": 1, "nodeNames": ["n0"] * 3, "shape": "3x1"}
    for i in range(3):
        pod = r.kube.pods[f"j-0-{i}"]
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert (env["WORLD_SIZE"], env["RANK"], pod["spec"]["hostname"]) == ("3", str(i), f"j-{i}")
        assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1" and pinned(pod) == "n0"
        assert pod["metadata"]["annotations"]["qosmos.io/placement"] == "1x3"  # the node shape, for the extender
    r.run_current()
    assert r.step().admitted == [] and r.status["phase"] == "Running"  # 3 booked: k still waits
    assert DLJobSpec.model_validate({"virtualCluster": "v", "gpus": 8, "gpusPerNode": 4, "gpusPerPod": 2})


@pytest.mark.parametrize("by_status", [True, False], ids=["status.retired", "label"])
def test_a_finished_job_with_nothing_left_leaves_the_working_set(by_status: bool) -> None:
    """Issue 21 §1: once Succeeded with its pods done, the DLJob is retired and the next pass's list no
    longer holds it. Where the apiserver selects DLJobs by ``status.retired`` (Kubernetes >= 1.31), the
    Succeeded write itself says so (no write more); elsewhere the label qosmos.io/finished (one write).
    None to its pods. One with a TTL to wait for, or with pods still running (cleanPodPolicy None),
    stays, and is retired once they are done."""
    kube = partial(FakeKube, retire_in_status=by_status)

    def retired(r: Run) -> bool:
        if by_status:
            return r.status.get("retired") is True and "labels" not in r.kube.jobs["j"]["metadata"]
        return (
            r.kube.jobs["j"]["metadata"].get("labels") == {"qosmos.io/finished": "true"} and "retired" not in r.status
        )

    r = Run(kube=kube)  # type: ignore[arg-type]
    r.run_to_exit(0)
    assert r.status["phase"] == "Succeeded" and retired(r)
    assert r.kube.dljobs() == []
    done = [st for _, st in r.kube.status_patches if st.get("phase") == "Succeeded"]
    assert len(done) == 1 and done[0].get("retired") is (True if by_status else None)
    assert len([st for _, st in r.kube.status_patches if "retired" in st]) == (1 if by_status else 0)
    # its pods are not written (kept for `kubectl logs`): the pod watch selects unfinished pods only, and
    # the caches drop a retired DLJob's finished pods (test_informers.py)
    assert r.kube.pods and all("qosmos.io/finished" not in p["metadata"]["labels"] for p in r.kube.pods.values())
    ttl = Run(kube=kube, ttlSecondsAfterFinished=100)  # type: ignore[arg-type]
    ttl.run_to_exit(0)
    assert not retired(ttl) and "retired" not in ttl.status and len(ttl.kube.dljobs()) == 1
    kept = Run(kube=kube, cleanPodPolicy="None", backoffLimit=0, gpus=2, gpusPerNode=2, gpusPerPod=1)  # type: ignore[arg-type]
    kept.step()
    kept.run_current()
    kept.step()
    kept.kube.pods["j-0-0"]["status"] = {"phase": "Failed"}
    kept.step()
    assert kept.status["phase"] == "Failed" and kept.kube.pods["j-0-1"]["status"]["phase"] == "Running"
    assert "labels" not in kept.kube.jobs["j"]["metadata"] and "retired" not in kept.status  # its other pod runs
    kept.kube.pods["j-0-1"]["status"] = {"phase": "Succeeded"}
    kept.step()
    assert retired(kept) and kept.kube.dljobs() == []


def _fail_after(r: Run, ran: float) -> Any:
    """The gang runs (startTime), its pod fails ``ran`` seconds later, and a pass sees it."""
    if r.kube.jobs["j"].get("status", {}).get("phase") != "Running":
        r.step(11)  # (past a restart's back-off)
        r.run_current()
        r.step()
    start = parse_time(r.status["startTime"])
    assert start is not None
    r.now = start + ran - 1
    r.exit(1)
    return r.step()


@pytest.mark.parametrize(("every", "kept"), [(300, 600.0), (0, 0.0), (None, 700.0)])
def test_a_failed_gang_keeps_the_progress_of_its_last_checkpoint(every: int | None, kept: float) -> None:
    """A failed pod gives its gang no grace period: the segment keeps its whole checkpoint intervals
    (spec.checkpointIntervalSeconds; 0: none; unset: all of it), the rest is lost and run again. The
    service it received (LAS's attained GPU-seconds) is the whole run's."""
    r = Run(backoffLimit=3, **({} if every is None else {"checkpointIntervalSeconds": every}))
    counted = REGISTRY.get_sample_value("qosmos_operator_lost_run_seconds_total", {"vc": "vc-a"}) or 0.0
    _fail_after(r, 700)
    after = REGISTRY.get_sample_value("qosmos_operator_lost_run_seconds_total", {"vc": "vc-a"}) or 0.0
    assert after - counted == pytest.approx(700 - kept)
    assert r.status["restarts"] == 1
    assert r.status["executedSeconds"] == kept and r.status["attainedServiceGpuSeconds"] == 700 * 8
    assert r.status.get("lostRunSeconds") == (700 - kept or None)
    (said,) = [m for _, reason, m in r.kube.events if reason == "Restarted"]
    assert ("since its last checkpoint lost" in said) is (kept < 700)
    if every == 300:
        assert said.endswith("; 100 s of run since its last checkpoint lost (checkpoints: every 300 s)")
    _fail_after(r, 350)  # the next segment: lost on top, progress on top of what was kept
    assert r.status["executedSeconds"] == kept + {300: 300.0, 0: 0.0, None: 350.0}[every]
    assert r.status["attainedServiceGpuSeconds"] == (700 + 350) * 8
    assert r.status.get("lostRunSeconds") == ({300: 150.0, 0: 1050.0, None: None}[every])


def test_a_lost_node_loses_the_run_since_the_last_checkpoint_and_a_suspension_keeps_it() -> None:
    """A node lost gave its pods no grace period; a suspension (as a preemption) stops them with theirs,
    time to checkpoint on SIGTERM: its whole run counts."""
    r = Run(nodes=("n0", "n1"), nodeLostSeconds=100, checkpointIntervalSeconds=60)
    r.step()
    node = pinned(r.kube.pods["j-0-0"])
    r.run_current()
    r.step()
    r.step(101)  # 101 s of run, then its node stops being Ready: requeued when the grace ends
    _not_ready(r, node, r.now)
    r.step(100)
    requeue = next(st for name, st in r.kube.status_patches if st.get("phase") == "Queued")
    assert requeue["executedSeconds"] == 60.0 and requeue["lostRunSeconds"] == 41.0
    assert requeue["conditions"][0]["message"].endswith(
        "; 41 s of run since its last checkpoint lost (checkpoints: every 60 s)"
    )
    r = Run(checkpointIntervalSeconds=0)
    r.step()
    r.run_current()
    r.step()
    r.kube.edit("j", suspend=True)
    r.step(500)
    assert r.status["phase"] == "Queued" and r.status["executedSeconds"] == 500.0
    assert "lostRunSeconds" not in r.status


# --------------------------------------------------------------------------- disruptions (kubectl drain)


def _running_gang(**spec: Any) -> Run:
    """A 16-GPU gang (two pods) running on two of three nodes for 100 s, checkpoints every 60 s."""
    r = Run(nodes=("n0", "n1", "n2"), gpus=16, checkpointIntervalSeconds=60, **spec)
    r.step()
    r.run_current()
    r.step()
    assert r.status["phase"] == "Running" and r.live() == ["j-0-0", "j-0-1"]
    r.step(100)
    return r


def _stamp(r: Run, dt: float = 0.0) -> str:
    from qosmos.operator.translate import rfc3339

    return rfc3339(r.now + dt)


@pytest.mark.parametrize("gone", [True, False])
def test_a_drained_pod_requeues_its_gang_without_counting_a_failure(gone: bool) -> None:
    """kubectl drain evicts a gang pod (DisruptionTarget EvictionByEvictionAPI): the node's maintenance,
    not the job's failure. Whether the pass sees the pod terminating or only its tombstone (gone before
    the pass: the watch caches keep how it went), the gang is requeued with no restart counted, its run
    kept whole (the eviction gave the pod its grace period to checkpoint in), and placed anew."""
    r = _running_gang(backoffLimit=0)
    r.kube.evict("j-0-0", _stamp(r), gone=gone)
    rep = r.step()
    assert rep.preempted == ["team/j"] and rep.restarted == [] and not r.status.get("restarts")
    requeue = next(st for _, st in r.kube.status_patches if st.get("phase") == "Queued")
    cond = requeue["conditions"][0]
    assert cond["reason"] == "Disrupted" and "pod j-0-0 was evicted (kubectl drain" in cond["message"]
    assert requeue["executedSeconds"] == pytest.approx(101) and not requeue.get("lostRunSeconds")
    assert any(reason == "Disrupted" for _, reason, _ in r.kube.events)
    assert r.status["phase"] != "Failed"  # backoffLimit 0: a counted failure would have failed it


def test_a_peer_failing_after_the_disruption_is_still_the_disruption() -> None:
    """The drained pod's peers lose their collective and exit non-zero after it: still the disruption."""
    r = _running_gang(backoffLimit=0)
    r.kube.evict("j-0-0", _stamp(r))
    r.now += 5
    r.kube.pods["j-0-1"]["status"] = {"phase": "Failed", "containerStatuses": [{"name": "main", "state": {
        "terminated": {"exitCode": 1, "finishedAt": _stamp(r)}}}]}  # fmt: skip
    rep = r.step()
    assert rep.preempted == ["team/j"] and not r.status.get("restarts") and r.status["phase"] != "Failed"


def test_a_pod_that_failed_before_the_disruption_fails_the_gang_first() -> None:
    r = _running_gang(backoffLimit=3)
    r.kube.pods["j-0-1"]["status"] = {"phase": "Failed", "containerStatuses": [{"name": "main", "state": {
        "terminated": {"exitCode": 1, "finishedAt": _stamp(r, -10)}}}]}  # fmt: skip
    r.kube.evict("j-0-0", _stamp(r))
    rep = r.step()
    assert rep.restarted == ["team/j"] and r.status["restarts"] == 1 and rep.preempted == []


@pytest.mark.parametrize(
    ("reason", "disrupted"),
    [
        ("PreemptionByScheduler", True),
        ("DeletionByTaintManager", True),
        ("DeletionByPodGC", True),
        ("TerminationByKubelet", False),
    ],
)
def test_which_disruptions_are_not_failures(reason: str, disrupted: bool) -> None:
    """Deletions by others are disruptions; the kubelet's own eviction under node pressure is a failure,
    counted, as a Job counts it."""
    r = _running_gang(backoffLimit=3)
    r.kube.evict("j-0-0", _stamp(r), reason=reason)
    rep = r.step()
    assert (rep.preempted == ["team/j"]) is disrupted and (r.status.get("restarts") == 1) is not disrupted


def test_a_job_waiting_on_drained_and_lost_nodes_says_which_take_nothing_new() -> None:
    """n0 drained (cordoned, its pod evicted) and n1 not Ready: the requeued 16-GPU gang waits, and its
    condition names those nodes and why (their GPUs count as not free: "0 node(s) have 8 free" alone
    does not say why); once they are usable again it runs."""
    r = _running_gang(backoffLimit=0)
    n0 = next(n for n in r.kube._nodes if n["metadata"]["name"] == "n0")
    n0["spec"]["unschedulable"] = True
    r.kube.evict("j-0-0", _stamp(r))
    _not_ready(r, "n1", r.now)
    r.step()
    r.kube.terminate()
    r.step()
    cond = r.status["conditions"][0]
    assert r.status["phase"] == "Queued" and cond["reason"] != "Disrupted", cond
    assert cond["message"].endswith("; taking nothing new now: node n0 (cordoned), n1 (not Ready)"), cond
    n0["spec"]["unschedulable"] = False
    _ready(r, "n1", r.now)
    rep = r.step()
    assert rep.admitted == ["team/j"]
