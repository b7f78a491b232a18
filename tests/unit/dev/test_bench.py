"""The pure parts of ``qosmos bench operator|fidelity``: the fidelity measures, the trace slice and its
native files (read back by the simulator's own loader), the openb DLJobs."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
from qosmos.dev.bench import (
    SliceJob,
    dljob_manifest,
    eta_points,
    eta_summary,
    finished_by,
    mean_relative_jct_difference,
    openb_jobs,
    pair_order_agreement,
    simulate_slice,
    trace_slice,
    write_native,
)
from qosmos.dev.fakenodes import synthetic_nodes
from qosmos.extender.core.errors import InvalidInput


def test_pair_order_counts_only_pairs_apart_in_the_simulation() -> None:
    sim = [0.0, 5.0, 20.0, 40.0]
    # pairs >= 10 s apart in sim: (0,2) (0,3) (1,2) (1,3) (2,3); (0,1) is not judged
    live = [1.0, 0.0, 30.0, 25.0]  # (0,1) swapped but not judged; (2,3) swapped
    frac, n = pair_order_agreement(sim, live)
    assert n == 5
    assert frac == pytest.approx(4 / 5)


def test_pair_order_a_live_tie_is_a_disagreement_and_nan_pairs_are_skipped() -> None:
    frac, n = pair_order_agreement([0.0, 30.0, 60.0], [5.0, 5.0, math.nan])
    assert n == 1  # only (0,1): the third job never started live
    assert frac == 0.0
    assert math.isnan(pair_order_agreement([0.0, 1.0], [0.0, 1.0])[0])


def test_mean_relative_jct_difference() -> None:
    assert mean_relative_jct_difference([100.0, 50.0], [110.0, 45.0]) == pytest.approx((0.1 + 0.1) / 2)
    assert mean_relative_jct_difference([100.0, 50.0], [100.0, math.nan]) == 0.0


def test_trace_slice_compresses_arrivals_and_clamps_run_times() -> None:
    jobs, info = trace_slice("builtin:helios-synth", 20, max_gpus=32, span_s=60.0, min_run_s=5.0, max_run_s=50.0)
    assert len(jobs) == 20
    assert jobs[0].submit == 0.0
    assert jobs[-1].submit == pytest.approx(60.0, abs=0.01)  # the arrivals fill the span
    assert all(5.0 <= j.run_s <= 50.0 and 1 <= j.gpus <= 32 for j in jobs)
    assert [j.submit for j in jobs] == sorted(j.submit for j in jobs)
    assert info["speedup"] > 1
    fixed, info2 = trace_slice("builtin:helios-synth", 20, max_gpus=32, speedup=2.0, min_run_s=1.0, max_run_s=1e9)
    assert info2["speedup"] == 2.0 and fixed[-1].submit == pytest.approx(
        jobs[-1].submit * info["speedup"] / 2, rel=1e-3
    )
    with pytest.raises(InvalidInput, match="jobs"):
        trace_slice("builtin:helios-synth", 1, max_gpus=32)


def test_the_native_slice_is_what_the_simulator_replays(tmp_path: Path) -> None:
    """One 8-GPU node, FIFO: a (0 s, 8 GPUs, 30 s), b (1 s, 4 GPUs, 10 s), c (2 s, 4, 10) -> b and c
    wait for a, then start together at 30."""
    sl = [SliceJob("a", 0.0, 8, 30.0), SliceJob("b", 1.0, 4, 10.0), SliceJob("c", 2.0, 4, 10.0)]
    path = write_native(sl, synthetic_nodes(1, 8, "V100M32"), tmp_path / "slice")
    rows = simulate_slice(path, tmp_path / "sim", "fifo", "consolidate", "none")
    assert rows["a"]["start"] == 0.0 and rows["a"]["end"] == 30.0
    assert rows["b"]["start"] == 30.0 and rows["c"]["start"] == 30.0 and rows["c"]["end"] == 40.0
    with open(tmp_path / "slice" / "nodes.csv") as f:
        (node,) = list(csv.DictReader(f))
    assert node["name"] == "node-0" and node["gpus"] == "8" and node["switch"] == "switch-000"


def test_openb_jobs_and_their_dljobs() -> None:
    jobs = openb_jobs(50)
    assert len(jobs) == 50 and len({j.name for j in jobs}) == 50
    cpu = [j for j in jobs if j.kind == "cpu"]
    assert all(j.gpus == 0 for j in cpu) and all(j.gpus >= 1 for j in jobs if j.kind == "training")
    m = dljob_manifest("x", gpus=2, run_s=12.5, cpu_milli=4000, memory_mib=1024)
    assert m["spec"]["gpus"] == 2 and m["spec"]["cpus"] == "4000m" and m["spec"]["memory"] == "1024Mi"
    assert m["spec"]["template"]["metadata"]["annotations"]["qosmos.io/run-duration"] == "12.500s"
    with pytest.raises(InvalidInput, match="only"):
        openb_jobs(10**6)


def test_eta_points_first_eta_and_the_last_one_a_lead_before_the_start() -> None:
    etas = [(1.0, None), (2.0, 100.0), (50.0, 130.0), (70.0, 140.0), (95.0, None)]
    first, before = eta_points(etas, 150.0, 60.0)
    assert first == (2.0, 100.0)  # the first ETA set, not the empty status before it
    assert before == (70.0, 140.0)  # the last value at or before 150 - 60 = 90
    assert eta_points(etas, 160.0, 60.0)[1] is None  # at 100 the ETA had been cleared
    assert eta_points(etas, 40.0, 60.0) == ((2.0, 100.0), None)  # started under a minute after its first ETA
    assert eta_points([(1.0, None)], 10.0) == (None, None)
    assert eta_points(etas, math.nan)[1] is None  # never started


def test_finished_by_counts_ends_at_or_before() -> None:
    assert finished_by([1.0, 5.0, math.inf, math.nan], 5.0) == 2
    assert finished_by([], 5.0) == 0


def _row(wait: float, submit_error: float, submit_history: int, before_error: float = math.nan) -> dict[str, float]:
    return {
        "wait": wait,
        "eta_submit_error": submit_error,
        "eta_submit_history": submit_history,
        "eta_before_error": before_error,
        "eta_before_history": submit_history if math.isfinite(before_error) else -1,
    }


def test_eta_summary_medians_in_seconds_and_of_the_wait_on_the_judged_slice() -> None:
    rows = [
        _row(100.0, -60.0, 10, -30.0),  # before the history: in "all" only
        _row(100.0, -20.0, 50, -10.0),
        _row(200.0, 10.0, 60),
        _row(80.0, 40.0, 70, 8.0),
        _row(0.5, math.nan, 80),  # no ETA (started at once): not counted
    ]
    res = eta_summary(rows, history=50, lead=60.0)
    sub = res["after_history"]["at_submit"]
    assert sub["jobs_with_eta"] == 3
    assert sub["median_abs_error_s"] == 20.0  # |-20|, |10|, |40|
    assert sub["median_abs_error_of_wait"] == pytest.approx(0.2)  # 0.2, 0.05, 0.5
    assert sub["mean_error_s"] == pytest.approx(10.0) and sub["early"] == 1
    before = res["after_history"]["before_start"]
    assert before["jobs_with_eta"] == 2 and before["median_abs_error_s"] == pytest.approx(9.0)
    assert before["median_abs_error_of_wait"] == pytest.approx((0.1 + 0.1) / 2)
    every = res["all"]["at_submit"]
    assert every["jobs_with_eta"] == 4 and every["median_abs_error_s"] == pytest.approx(30.0)
    assert res["all"]["before_start"]["jobs_with_eta"] == 3
    assert res["jobs_that_waited"] == 5 and res["history"] == 50 and res["lead_s"] == 60.0
    empty = eta_summary([_row(10.0, math.nan, 0)])["all"]["at_submit"]
    assert empty == {
        "jobs_with_eta": 0,
        "median_abs_error_s": None,
        "median_abs_error_of_wait": None,
        "mean_error_s": None,
        "early": 0,
    }


def test_the_apiserver_requests_of_a_run_are_counted_by_verb_and_resource() -> None:
    """What ``bench scenario`` reports as ``control_plane``: the apiserver's requests between two reads of
    its /metrics, codes and scopes summed, subresources apart, reads and writes apart."""
    from qosmos.dev.bench import request_counts, requests_between

    def text(patches: int, creates: int, watches: int) -> str:
        return f"""# HELP apiserver_request_total Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{{code="200",component="apiserver",resource="dljobs",scope="resource",subresource="status",verb="PATCH"}} {patches}
apiserver_request_total{{code="409",component="apiserver",resource="dljobs",scope="resource",subresource="status",verb="PATCH"}} 2
apiserver_request_total{{code="201",component="apiserver",resource="pods",scope="resource",subresource="",verb="POST"}} {creates}
apiserver_request_total{{code="200",component="apiserver",resource="pods",scope="cluster",subresource="",verb="WATCH"}} {watches}
apiserver_request_total{{code="200",component="apiserver",resource="nodes",scope="cluster",subresource="",verb="LIST"}} 4
# HELP apiserver_request_duration_seconds x
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_count{{resource="pods",verb="POST"}} 999
"""

    before = request_counts(text(10, 5, 1))
    assert before[("PATCH", "dljobs/status")] == 12 and before[("POST", "pods")] == 5
    reads, writes = requests_between(before, request_counts(text(40, 6, 3)))
    assert writes == {"PATCH dljobs/status": 30, "POST pods": 1}
    assert list(writes) == ["PATCH dljobs/status", "POST pods"]  # most first
    assert reads == {"WATCH pods": 2}  # the LIST did not change


def test_a_gang_start_in_whole_seconds_never_makes_a_negative_latency() -> None:
    """A pod's startTime is whole seconds, the creation this process's clock: a gang started in its
    creation's second (start 100 for a creation at 100.4) is 0.3 s (the middle of [0, 0.6)), not -0.4 s."""
    from qosmos.dev.bench import Seen, start_latency

    seen = {"a": Seen(created=100.4), "b": Seen(created=100.4), "c": Seen(created=100.0), "d": Seen()}
    got = start_latency(seen, {"a": 100.0, "b": 103.0, "c": 101.0, "d": 105.0, "gone": 1.0})
    assert got["jobs"] == 3  # d has no creation seen; "gone" was never seen
    assert got["max"] == pytest.approx(3.1) and got["p50"] == pytest.approx(1.5)  # b: [2.6, 3.6); c: [1, 2)
    alone = start_latency({"a": Seen(created=100.4)}, {"a": 100.0})
    assert alone["p50"] == alone["max"] == pytest.approx(0.3)
