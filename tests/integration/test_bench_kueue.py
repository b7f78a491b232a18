"""``qosmos bench operator --against kueue`` at a small scale: the same jobs admitted by the qosmos
operator (DLJobs) and by the full Kueue manager (suspended batch/v1 Jobs), each on a real ``qosmos dev``
cluster, every job to completion; the two sides report the same keys. Needs hack/kueue/build.sh."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from qosmos.dev.kueue import COMMON_KEYS, METRICS_CERT_DIR, kueue_build
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
