"""``qosmos bench scheduling`` end to end on a small real cluster (numbers are reported, not asserted)."""

from __future__ import annotations

import os

import pytest
from qosmos.extender.bench import _cpu_seconds, bench_scheduling
from qosmos.testing.controlplane import binaries_present


@pytest.mark.slow
def test_bench_scheduling_runs_both_profiles() -> None:
    if not binaries_present():
        pytest.skip("control plane not built (hack/k8s/build.sh)")
    out = bench_scheduling(pods=40, nodes=60, timeout=120, shortlist=4)
    assert {"pods_per_s_extender", "pods_per_s_default", "ratio"} <= set(out)
    ext, default = out["extender_run"], out["default_run"]
    assert ext["bound"] >= 36 and default["bound"] >= 36  # a GPU-model constraint may match none of 60 nodes
    assert out["pods_per_s_extender"] > 0 and out["pods_per_s_default"] > 0
    for run in (ext, default):
        cpu = run["cpu_ms_per_pod"]  # 10 ms clock ticks: a short run may show 0 for one process
        assert {"etcd", "kube-apiserver", "kube-scheduler", "bench-client"} <= set(cpu)
        assert min(cpu.values()) >= 0 and sum(cpu.values()) > 0
        assert run["packing"]["nodes_used"] >= 1
    assert "extender" in ext["cpu_ms_per_pod"]
    assert ext["extender_server_ms"]["filter_calls"] >= 40
    # the extender consolidates: never more nodes than the spreading default profile
    assert ext["packing"]["nodes_used"] <= default["packing"]["nodes_used"]


def test_cpu_seconds_reads_proc() -> None:
    import time

    t0 = _cpu_seconds({"me": os.getpid()})["me"]
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    assert _cpu_seconds({"me": os.getpid()})["me"] > t0
    assert _cpu_seconds({"gone": 2**22 + 12345}) == {}
