"""Kueue's generator file as qosmos objects (issue 21 §4), Kueue's summary read as its checker reads it,
and the loopback-only Kueue configuration; no cluster, no Kueue binaries."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from qosmos.dev.bench import Seen
from qosmos.dev.kueue import (
    POD_STEPS,
    KueueMissing,
    _summary_stats,
    job_manifest,
    job_phases,
    kueue_configuration,
    load_generator,
    pod_steps,
    require_kueue,
    scaled,
    scenario_stats,
    translate,
    vc_manifest,
    write_generator,
)
from qosmos.extender.core.errors import InvalidInput
from qosmos.operator.crds import VirtualClusterSpec
from qosmos.operator.translate import rfc3339
from typer.testing import CliRunner

from qosmos.cli import app

SMALL = """
cohorts:
  - className: co
    count: 2
    queuesSets:
    - className: big
      count: 1
      nominalQuota: 8
      borrowingLimit: 4
      reclaimWithinCohort: Any
      withinClusterQueue: LowerPriority
      workloadsSets:
      - count: 3
        creationIntervalMs: 100
        workloads:
        - className: small
          runtimeMs: 200
          priority: 50
          request: 1
      - count: 1
        creationIntervalMs: 1200
        workloads:
        - className: large
          runtimeMs: 1000
          priority: 200
          request: "8"
    - className: lil
      count: 1
      nominalQuota: "4"
      workloadsSets:
      - count: 2
        creationIntervalMs: 500
        workloads:
        - className: medium
          runtimeMs: 500
          priority: 100
          request: 4
        - className: small
          runtimeMs: 300
          priority: 50
          request: 2
"""


def _gen(tmp_path: Path, text: str = SMALL) -> Path:
    p = tmp_path / "generator.yaml"
    p.write_text(text)
    return p


def test_translate_makes_one_virtualcluster_per_queue_with_its_quota_as_nodes(tmp_path: Path) -> None:
    sc = translate(load_generator(_gen(tmp_path)))
    # 2 cohorts x (one "big" queue of 8 + one "lil" queue of 4); nodes of gcd(8, 4) = 4 GPUs
    assert sc.gpus_per_node == 4
    assert [(q.name, q.cohort, q.class_name, q.nominal_gpus, q.nodes) for q in sc.queues] == [
        ("big-0-0-co-0", "co-0", "big", 8, 2),
        ("lil-1-0-co-0", "co-0", "lil", 4, 1),
        ("big-0-0-co-1", "co-1", "big", 8, 2),
        ("lil-1-0-co-1", "co-1", "lil", 4, 1),
    ]
    assert sc.queues[0].borrowing_limit == 4
    assert sc.total_gpus == 24
    assert sc.pools() == ("big-0-0-co-0",) * 2 + ("lil-1-0-co-0",) + ("big-0-0-co-1",) * 2 + ("lil-1-0-co-1",)
    # per cohort: big 3 small + 1 large, lil 2 x (medium, small)
    assert len(sc.jobs) == 2 * (3 + 1 + 2 * 2)
    by = {j.name: j for j in sc.jobs}
    # the k-th workload of a set (templates in turn) is created at (k + 1) x interval
    assert [by[f"big-0-0-co-0-small-0-{i}-0"].submit_s for i in range(3)] == [0.1, 0.2, 0.3]
    assert by["big-0-0-co-0-large-1-0-0"].submit_s == 1.2
    lil = [by[f"lil-1-0-co-1-{c}-0-{si}-{wi}"] for si in range(2) for wi, c in enumerate(("medium", "small"))]
    assert [j.submit_s for j in lil] == [0.5, 1.0, 1.5, 2.0]
    large = by["big-0-0-co-1-large-1-0-0"]
    assert (large.vc, large.gpus, large.run_s, large.priority, large.qos_class) == (
        "big-0-0-co-1",
        8,
        1.0,
        200,
        "Urgent",
    )
    med = by["lil-1-0-co-0-medium-0-1-0"]
    assert (med.gpus, med.run_s, med.qos_class, med.class_name) == (4, 0.5, "Prior", "medium")
    assert {j.qos_class for j in sc.jobs if j.priority == 50} == {"Normal"}
    assert [j.submit_s for j in sc.jobs] == sorted(j.submit_s for j in sc.jobs)
    assert any("borrowing" in n for n in sc.notes)


def test_a_clusterqueue_is_a_virtualcluster_of_its_cohort_with_its_quota_and_preemption(tmp_path: Path) -> None:
    text = SMALL.replace("request: 4\n", "request: 12\n")  # lil (nominal 4) borrows 8 of its cohort's 12
    sc = translate(load_generator(_gen(tmp_path, text)))
    big, lil = sc.queues[0], sc.queues[1]
    vc = vc_manifest(big, "priority", "consolidate", "easy")
    assert vc["metadata"]["name"] == "big-0-0-co-0"
    assert vc["spec"]["cohort"] == "co-0"
    assert vc["spec"]["quota"] == {"gpus": 8, "borrowingLimit": 4}
    assert vc["spec"]["preemption"] == {"withinVirtualCluster": "LowerPriority", "reclaimWithinCohort": "Any"}
    assert (vc["spec"]["policy"], vc["spec"]["backfill"]) == ("priority", "easy")
    unset = vc_manifest(lil, "fifo", "consolidate", "none")["spec"]
    assert unset["quota"] == {"gpus": 4}  # no limit: what the cohort has
    assert unset["preemption"] == {"withinVirtualCluster": "Never", "reclaimWithinCohort": "Never"}  # Kueue's defaults
    assert unset["nodeSelector"] != vc["spec"]["nodeSelector"]  # each its own nodes, shared in the cohort
    VirtualClusterSpec.model_validate(vc["spec"])  # what the CRD's model accepts
    VirtualClusterSpec.model_validate(unset)
    assert {j.gpus for j in sc.jobs if j.vc == lil.name} == {12, 2}


def test_scale_keeps_at_least_one_workload_per_set_and_round_trips(tmp_path: Path) -> None:
    gen = load_generator(_gen(tmp_path))
    half = scaled(gen, 0.5)
    counts = [ws.count for c in half.cohorts for q in c.queues_sets for ws in q.workloads_sets]
    assert counts == [2, 1, 1]  # round(3 * .5) = 2, max(1, round(.5)) = 1, round(1) = 1
    assert len(translate(gen, 0.5).jobs) == 2 * (2 + 1 + 1 * 2)
    again = load_generator(write_generator(half, tmp_path / "half.yaml"))
    assert again == half
    with pytest.raises(InvalidInput, match="scale"):
        scaled(gen, 0.0)


def test_baseline_shape_nodes_of_twenty(tmp_path: Path) -> None:
    text = SMALL.replace("count: 2\n    queuesSets", "count: 5\n    queuesSets").replace(
        'nominalQuota: "4"', "nominalQuota: 20"
    )
    text = text.replace("nominalQuota: 8", "nominalQuota: 20")
    sc = translate(load_generator(_gen(tmp_path, text)))
    assert sc.gpus_per_node == 20 and all(q.nodes == 1 for q in sc.queues) and len(sc.queues) == 10


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        ("request: 1\n", 'request: "500m"\n', r"cohorts\.0\.queuesSets\.0\.workloadsSets\.0\.workloads\.0\.request"),
        ("runtimeMs: 200\n", "runtimeMs: 200\n          podCount: 4\n", "podCount"),
        # lil: no borrowing limit, so up to the cohort's 12; big: 8 + 4 = 12 of the cohort's 12
        ("request: 4\n", "request: 13\n", r"more than queue lil-1-0-co-0 may hold .*: 12\)"),
        ('request: "8"\n', 'request: "13"\n', r"more than queue big-0-0-co-0 may hold .*: 12\)"),
        ("reclaimWithinCohort: Any", "reclaimWithinCohort: LowerPriority", "reclaimWithinCohort"),
        ("className: small\n          runtimeMs: 200", "className: Small\n          runtimeMs: 200", "className"),
        ("cohorts:", "topology: {}\ncohorts:", "topology"),
    ],
)
def test_bad_generator_names_the_field(tmp_path: Path, old: str, new: str, match: str) -> None:
    assert old in SMALL
    with pytest.raises(InvalidInput, match=match):
        translate(load_generator(_gen(tmp_path, SMALL.replace(old, new, 1))))


def test_unreadable_generator(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot read"):
        load_generator(tmp_path / "missing.yaml")
    with pytest.raises(InvalidInput, match="line 2"):
        load_generator(_gen(tmp_path, "cohorts:\n  - [a\n"))


def test_summary_read_as_kueues_checker_reads_it() -> None:
    summary = {
        "clusterQueueClasses": {
            "cq": {
                "cpuUsed": 600_000 * 100_000,  # 600 units x 100 s, in milli-units x ms
                "cpuAverageUsage": 0,
                "nominalQuota": 1_200_000,  # 1,200 units
                "firstEventTime": "2026-11-26T03:00:00.123456789Z",
                "lastEventTime": "2026-11-26T03:03:20.123456789Z",  # 200 s later
            }
        },
        "workloadClasses": {
            "small": {"count": 3, "totalEvictions": 1, "averageTimeToAdmissionMs": 234_100, "averageTimeToFinishMs": 9},
            "large": {"count": 1, "totalEvictions": 0, "averageTimeToAdmissionMs": 16_500, "averageTimeToFinishMs": 0},
        },
        "droppedWorkloadEvents": 0,
    }
    stats = {"wallMs": 387_000, "userMs": 90_000, "sysMs": 9_000, "maxrss": 383_000}
    r = _summary_stats(summary, stats)
    assert r["cohort_usage_pct"] == {"cq": 25.0}  # 600 x 100 / (1,200 x 200)
    assert r["wall_s"] == 387.0
    assert r["classes"]["small"] == {
        "count": 3,
        "avg_time_to_admission_s": 234.1,
        "avg_time_to_finish_s": 0.009,
        "evictions": 1,
    }
    assert r["classes"]["large"]["avg_time_to_admission_s"] == 16.5
    assert r["workloads"] == 4
    assert r["minimalkueue"] == {"cpu_s": 99.0, "peak_rss_mb": 374.0}


def test_scenario_stats_per_class_and_usage(tmp_path: Path) -> None:
    sc = translate(load_generator(_gen(tmp_path)))
    t0 = 1000.0
    seen: dict[str, Seen] = {}
    for j in sc.jobs:  # every job admitted 2 s after creation, finished 1 s after admission
        created = t0 + j.submit_s
        seen[j.name] = Seen(created, {"Admitted": created + 2.0, "Running": created + 2.5, "Succeeded": created + 3.0})
    only_running = sc.jobs[0]  # seen Running first (Admitted missed): admission counts from its first phase
    seen[only_running.name] = Seen(t0 + only_running.submit_s, {"Running": t0 + only_running.submit_s + 4.0})
    r = scenario_stats(sc, seen, t0, t0 + 10.0)
    assert r["classes"]["large"] == {"count": 2, "avg_time_to_admission_s": 2.0, "avg_time_to_finish_s": 3.0}
    small = r["classes"]["small"]
    assert small["count"] == 2 * (3 + 2)
    assert small["avg_time_to_admission_s"] == pytest.approx((9 * 2.0 + 4.0) / 10, abs=1e-3)
    assert r["classes"]["medium"]["count"] == 4
    # big queues: 2 x (3 small x 1 GPU x 1 s + 1 large x 8 x 1 s) = 22 GPU-s, minus the unfinished job's
    # second: it holds its GPU from its first phase to the end (10 - 0.1 - 4 = 5.9 s) instead of 1 s
    big_used = 22 - 1 + (10 - only_running.submit_s - 4.0)
    assert r["cohort_usage_pct"]["big"] == pytest.approx(big_used * 100 / (16 * 10), abs=0.01)
    lil_used = 2 * 2 * (4 * 1 + 2 * 1)  # 2 queues x 2 rounds x (medium 4 GPUs + small 2 GPUs) x 1 s
    assert r["cohort_usage_pct"]["lil"] == pytest.approx(lil_used * 100 / (8 * 10), abs=0.01)
    assert not math.isnan(r["cohort_usage_pct"]["lil"])


def _pod(
    job: str, attempt: int, created: float, bound: float | None, running: float | None, done: float | None
) -> dict[str, Any]:
    st: dict[str, Any] = {}
    if bound is not None:
        st["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339(bound)}]
    if running is not None:
        st["startTime"] = rfc3339(running)
    if done is not None:
        st["containerStatuses"] = [{"name": "main", "state": {"terminated": {"finishedAt": rfc3339(done)}}}]
    labels = {"qosmos.io/job": job, "qosmos.io/attempt": str(attempt)}
    return {
        "metadata": {"name": f"{job}-{attempt}", "labels": labels, "creationTimestamp": rfc3339(created)},
        "status": st,
    }


def test_pod_steps_say_where_a_gangs_hold_went_step_by_step(tmp_path: Path) -> None:
    sc = translate(load_generator(_gen(tmp_path)))
    large, small = (
        next(j for j in sc.jobs if j.class_name == "large"),
        next(j for j in sc.jobs if j.class_name == "small"),
    )
    seen = {large.name: Seen(0.0, {"Admitted": 10.0, "Succeeded": 30.0}), small.name: Seen(0.0, {"Running": 5.0})}
    pods = [
        _pod(large.name, 0, 11, 12, 13, None),  # the first gang, requeued: not counted
        _pod(large.name, 1, 14, 15, 18, 26),  # the last gang: its slowest pod ends each step
        _pod(large.name, 1, 16, 17, 19, 27),
        _pod(small.name, 0, 7, 8, None, None),  # still pending: the steps it has not reached are left out
        {"metadata": {"name": "other", "creationTimestamp": rfc3339(1)}, "status": {}},  # no DLJob's
    ]
    r = pod_steps(sc, seen, pods)
    assert r["large"] == {
        "admitted_to_pods_created": 6.0,
        "created_to_bound": 1.0,
        "bound_to_running": 2.0,
        "running_to_finished": 8.0,
        "finished_to_succeeded": 3.0,
    }
    # the small job's admission is its first phase seen (Running), as in scenario_stats
    assert r["small"] == {"admitted_to_pods_created": 2.0, "created_to_bound": 1.0}
    assert list(r["large"]) == list(POD_STEPS)


def test_job_phases_from_kueue_and_the_job_controller() -> None:
    job = job_manifest(
        "j1",
        namespace="bench",
        gpus=2,
        cpu_milli=500,
        memory_mib=1024,
        run_s=3,
        image="pause",
        annotation="qosmos.io/run-duration",
    )
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "bench"}
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"] == {
        "requests": {"cpu": "500m", "memory": "1024Mi", "nvidia.com/gpu": "2"},
        "limits": {"nvidia.com/gpu": "2"},
    }
    assert job["spec"]["template"]["metadata"]["annotations"] == {"qosmos.io/run-duration": "3.000s"}
    assert job_phases(job) == []
    job["spec"]["suspend"] = False
    assert job_phases(job) == ["Admitted"]
    job["status"] = {"active": 1, "ready": 0}
    assert job_phases(job) == ["Admitted"]
    job["status"] = {"active": 1, "ready": 1}
    assert job_phases(job) == ["Admitted", "Running"]
    job["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
    assert job_phases(job) == ["Admitted", "Succeeded"]
    job["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
    assert job_phases(job) == ["Admitted", "Failed"]


def test_kueue_configuration_listens_on_loopback_only(tmp_path: Path) -> None:
    cfg = kueue_configuration(1001, 1002, 1003, tmp_path)
    assert cfg["health"]["healthProbeBindAddress"] == "127.0.0.1:1001"
    assert cfg["metrics"]["bindAddress"] == "127.0.0.1:1002"
    assert cfg["webhook"] == {"host": "127.0.0.1", "port": 1003, "certDir": str(tmp_path)}
    assert cfg["featureGates"] == {"VisibilityOnDemand": False}  # its server would bind every interface
    assert cfg["integrations"] == {"frameworks": ["batch/job"]}
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert "pprofBindAddress" not in cfg


def test_missing_build_says_how_to_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QOSMOS_KUEUE_CACHE", str(tmp_path))
    with pytest.raises(KueueMissing, match=r"hack/kueue/build\.sh") as exc:
        require_kueue()
    assert "performance-scheduler-runner" in str(exc.value) and str(tmp_path) in str(exc.value)
    res = CliRunner().invoke(app, ["bench", "kueue-baseline", "--json"])
    assert res.exit_code == 2
    assert "hack/kueue/build.sh" in res.output


def test_cli_refuses_bad_values(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["bench", "scenario", "--kueue-generator", str(tmp_path / "nope.yaml")])
    assert res.exit_code == 2 and "nope.yaml" in res.output
    res = runner.invoke(app, ["bench", "scenario", "--kueue-generator", str(_gen(tmp_path)), "--scale", "1.5"])
    assert res.exit_code == 2 and "scale" in res.output
    res = runner.invoke(app, ["bench", "operator", "--against", "volcano", "--jobs", "2", "--nodes", "2"])
    assert res.exit_code == 2 and "volcano" in res.output
