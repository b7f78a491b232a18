"""Restarts like batch/v1 Job's (issue 20 §2): back-off between gang restarts, exit-code rules, the
failed attempt's pods kept for kubectl logs, cleanPodPolicy. Pure rules, then passes over a FakeKube."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from qosmos.operator.crds import DLJobSpec, FailureAction, PodFailurePolicy
from qosmos.operator.durations import Durations
from qosmos.operator.lifecycle import consecutive_failures, exit_codes, failure_action, restart_delay
from qosmos.operator.reconcile import Reconciler
from qosmos.operator.translate import parse_time
from qosmos.testing.fakekube import FakeKube, gpu_node

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
    def __init__(self, **spec: Any) -> None:
        self.kube = FakeKube([gpu_node("n0")], [dljob(**spec)])
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

    def run_current(self) -> None:
        for name, p in self.kube.pods.items():
            if (p.get("status") or {}).get("phase") is None:
                p["spec"].pop("schedulingGates", None)
                self.kube.bind(name, "n0")

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
    r.step()
    r.run_current()
    r.step()
    r.exit(0)
    r.step()
    assert r.status["phase"] == "Succeeded" and ("j-0-0" in r.kube.pods) is kept


def test_suspend_holds_a_queued_job_stops_a_running_one_and_resume_queues_it() -> None:
    r = Run(suspend=True)
    r.step()
    assert r.status["phase"] == "Queued" and r.status["conditions"][0]["reason"] == "Suspended"
    assert r.kube.pods == {}
    r.kube.jobs["j"]["spec"]["suspend"] = False
    r.step()
    r.run_current()
    r.step()
    assert r.status["phase"] == "Running"
    r.kube.jobs["j"]["spec"]["suspend"] = True
    rep = r.step()
    assert rep.preempted == ["team/j"] and r.status["phase"] == "Queued"
    assert r.status["conditions"][0]["reason"] == "Suspended"
    assert r.kube.deletions == [("j-0-0", None)]  # stopped with its own grace period
    assert "deletionTimestamp" in r.kube.pods["j-0-0"]["metadata"]
    r.step()
    assert r.status["phase"] == "Queued"  # held, and its old pod still books n0
    r.kube.terminate()
    r.kube.jobs["j"]["spec"]["suspend"] = False
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
    r.step()
    r.run_current()
    r.step()
    r.exit(0)
    r.step()
    assert r.status["phase"] == "Succeeded"
    assert r.step(50).wake_at == pytest.approx(r.now + 49)
    r.step(60)
    assert "j" not in r.kube.jobs
