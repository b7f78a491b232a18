"""benchmarks/scenario_floor.py's null admitter: its books are the floor's only decisions, so they must
keep Kueue's limits (a node's GPUs, a queue's nominal + borrowingLimit, the cohort's nodes), admit
highest priority first, free a job's GPUs when its pod finishes, and write only the minimum."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from qosmos.dev.kueue import Scenario, ScenarioJob, ScenarioQueue
from qosmos.testing.scripts import benchmark

floor = benchmark("scenario_floor")


class Recorder:
    """Stands for the two API clients: records each write (the floor's writes are its output)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def patch_namespaced_custom_object_status(self, *args: Any) -> None:
        with self.lock:
            self.calls.append(("status", args[4], args[5]["status"]))

    def create_namespaced_pod(self, namespace: str, pod: dict[str, Any], **_: Any) -> Any:
        with self.lock:
            self.calls.append(("pod", pod["metadata"]["name"], pod["spec"]["nodeSelector"]))

        class Resp:
            def read(self) -> bytes:
                return b"{}"

            def release_conn(self) -> None:
                pass

        return Resp()


def job(name: str, vc: str, gpus: int, priority: int = 50) -> ScenarioJob:
    return ScenarioJob(name, vc, "small", gpus, 0.2, priority, "Normal", 0.0)


def scenario(borrowing: int | None = 0) -> Scenario:
    # one cohort of two queues, each one node of 4 GPUs
    queues = [ScenarioQueue(q, "c", "cq", 4, borrowing, 1, 4) for q in ("qa", "qb")]
    return Scenario(queues, [], 4)


def admitter(sc: Scenario, jobs: list[ScenarioJob]) -> tuple[Any, Recorder]:
    sc.jobs = jobs
    rec = Recorder()
    return floor.NullAdmitter(sc, {"qa": ["n-a"], "qb": ["n-b"]}, rec, rec), rec


def admitted(starts: list[tuple[ScenarioJob, str]]) -> dict[str, str]:
    return {j.name: node for j, node in starts}


def test_node_and_queue_limits_and_priority_order() -> None:
    jobs = [job("low", "qa", 3, 50), job("high", "qa", 3, 200), job("b1", "qb", 4)]
    adm, _ = admitter(scenario(borrowing=0), jobs)
    for i, j in enumerate(jobs):
        adm.submitted(j, float(i))
    # 'high' first (priority), on qa's node; 'low' does not fit qa's nominal 4 without borrowing
    assert admitted(adm._admit()) == {"high": "n-a", "b1": "n-b"}
    assert [t[2].name for t in adm.books["c"].pending] == ["low"]
    assert adm._admit() == []


def test_borrowing_within_the_cohort_and_freeing() -> None:
    jobs = [job("a1", "qa", 4), job("a2", "qa", 4), job("a3", "qa", 1)]
    adm, rec = admitter(scenario(borrowing=4), jobs)
    for i, j in enumerate(jobs):
        adm.submitted(j, float(i))
    # a2 borrows qb's idle node; a3 fits nowhere (both nodes full)
    assert admitted(adm._admit()) == {"a1": "n-a", "a2": "n-b"}
    adm.finished("a1", 10.0)
    assert admitted(adm._admit()) == {"a3": "n-a"}
    adm.finished("a1", 11.0)  # a second Succeeded event of the same pod frees nothing twice
    assert adm.books["c"].free == {"n-a": 3, "n-b": 0}
    adm.writes.shutdown(wait=True)
    assert ("status", "a1", {"phase": "Succeeded", "completionTime": floor.rfc3339(10.0)}) in rec.calls
    assert sum(1 for c in rec.calls if c[1] == "a1") == 1


@pytest.mark.parametrize("borrowing", [None, 100])
def test_the_cohorts_nodes_cap_borrowing(borrowing: int | None) -> None:
    jobs = [job(f"a{i}", "qa", 4) for i in range(3)]
    adm, _ = admitter(scenario(borrowing=borrowing), jobs)
    for i, j in enumerate(jobs):
        adm.submitted(j, float(i))
    assert len(adm._admit()) == 2  # the cohort's 8 GPUs, whatever the borrowing limit says


def test_a_start_writes_its_status_then_its_pod_on_the_node() -> None:
    j = job("a1", "qa", 2)
    adm, rec = admitter(scenario(), [j])
    adm._write_start(j, "n-a", 0.0)
    assert rec.calls == [
        ("status", "a1", {"phase": "Admitted", "admittedAt": floor.rfc3339(0.0)}),
        ("pod", "a1-0-0", {"kubernetes.io/hostname": "n-a"}),
    ]
    pod = floor.pod_of(j, "n-a")
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "2"}
    assert pod["metadata"]["annotations"][floor.RUN_DURATION_ANNOTATION] == "0.200s"
