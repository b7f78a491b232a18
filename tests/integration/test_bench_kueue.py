"""``qosmos bench operator --against kueue`` at a small scale: the same jobs admitted by the qosmos
operator (DLJobs) and by the full Kueue manager (suspended batch/v1 Jobs), each on a real ``qosmos dev``
cluster, every job to completion; the two sides report the same keys (needs hack/kueue/build.sh); and
``qosmos bench scenario`` on a small Kueue generator file whose cohorts must really share."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from qosmos.dev.kueue import COMMON_KEYS, METRICS_CERT_DIR, POD_STEPS, kueue_build
from qosmos.testing.skips import skip_or_fail

from .conftest import need_dev_binaries

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def need_kueue() -> None:
    missing = kueue_build().missing()
    if missing:
        skip_or_fail(f"Kueue build missing ({', '.join(missing)}): run hack/kueue/build.sh")


def test_bench_operator_against_kueue_admits_and_completes_every_job_on_both_sides() -> None:
    need_dev_binaries()
    need_kueue()
    jobs = 24
    etc_before = [p for p in (METRICS_CERT_DIR, *METRICS_CERT_DIR.parents) if p.exists()]
    res = subprocess.run(
        [sys.executable, "-P", "-m", "qosmos", "bench", "operator", "--against", "kueue", "--jobs", str(jobs),
         "--nodes", "30", "--run-seconds", "3", "--timeout", "300", "--json"],
        capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    r = json.loads(res.stdout)
    q, k = r["qosmos"], r["kueue"]
    assert set(COMMON_KEYS) <= set(q) and set(COMMON_KEYS) <= set(k)
    assert set(q) & set(k) >= set(COMMON_KEYS)
    assert r["all_succeeded"]
    for side in (q, k):
        assert side["succeeded"] == jobs and side["failed"] == 0
        assert side["admissions"] == jobs
        assert side["admissions_per_s"] > 0
        assert 0 < side["apply_to_running_p50_s"] <= side["apply_to_running_p99_s"]
        # measured on every job, from its pods' start times (a Job's ready count can be missed by a watch)
        assert side["apply_to_gang_start_s"]["jobs"] == jobs
        assert side["apply_to_gang_start_s"]["p99"] == side["apply_to_running_p99_s"]
        assert side["cpu_s"] > 0
        assert 20 < side["peak_rss_mb"] < 4000  # from /proc of the controller's own process
    assert "kueue" in k["cpu_s_by_component"]
    assert k["controller"].startswith("kueue v0.17.0")
    # the metrics certificate Kueue reads from its fixed path under /etc is gone again (host as before)
    assert [p for p in (METRICS_CERT_DIR, *METRICS_CERT_DIR.parents) if p.exists()] == etc_before


BORROWING = """
cohorts:
  - className: co
    count: 1
    queuesSets:
    - className: cq
      count: 2
      nominalQuota: 4
      borrowingLimit: 4
      reclaimWithinCohort: Any
      withinClusterQueue: LowerPriority
      workloadsSets:
      - count: 2
        creationIntervalMs: 500
        workloads:
        - className: small
          runtimeMs: 2000
          priority: 50
          request: 1
      - count: 1
        creationIntervalMs: 3000
        workloads:
        - className: large
          runtimeMs: 2000
          priority: 200
          request: 8
"""


def test_bench_scenario_runs_a_generator_whose_large_workloads_only_fit_by_borrowing(tmp_path: Path) -> None:
    """Two ClusterQueues of 4 units in one cohort, each with a workload of 8: on qosmos each is a
    VirtualCluster of one 4-GPU node, so the 8-GPU DLJobs run only on the cohort's two nodes together."""
    need_dev_binaries()
    gen = tmp_path / "generator.yaml"
    gen.write_text(BORROWING)
    res = subprocess.run(
        [sys.executable, "-P", "-m", "qosmos", "bench", "scenario", "--kueue-generator", str(gen),
         "--timeout", "300", "--json"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    r = json.loads(res.stdout)
    q = r["qosmos"]
    assert (r["queues"], r["cohorts"], r["gpus"], r["policy"], r["backfill"]) == (2, 1, 8, "priority", "easy")
    assert q["workloads"] == q["succeeded"] == 2 * (2 + 1) and q["failed"] == 0
    assert q["classes"]["large"]["count"] == 2 and q["classes"]["small"]["count"] == 4
    # every job ran and succeeded: its pods recorded each step of its hold (one-second timestamps)
    assert {c: list(v) for c, v in q["pod_steps_s"].items()} == {"large": list(POD_STEPS), "small": list(POD_STEPS)}
    assert all(t > -1.0 for v in q["pod_steps_s"].values() for t in v.values())
    # the bench's own client (it created the VirtualClusters and DLJobs and watched them), apart from the cluster
    assert q["bench_client_cpu_s"] > 0 and "bench" not in q["control_plane"]["cpu_s"]
