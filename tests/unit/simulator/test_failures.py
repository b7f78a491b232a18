"""Failures in a replay (``SimConfig.failures``): a failed run keeps its whole checkpoint intervals, runs again
on its GPUs after the operator's back-off, and fails for good past the backoff limit; GpuFailures draws
each job's failures on its own GPU-seconds, the same in every policy's run."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Job, Node
from qosmos.simulator.engine import DONE, FAILED, SimConfig, simulate
from qosmos.simulator.failures import GpuFailures, ScriptedFailures
from qosmos.simulator.metrics import summarize
from qosmos.simulator.outputs import write_jobs_csv
from qosmos.simulator.traces import Trace, load_trace
from typer.testing import CliRunner


def _trace(*jobs: Job, gpus: int = 2) -> Trace:
    return Trace("t", list(jobs), [Node("n0", gpus)])


def test_a_failed_run_keeps_its_whole_checkpoint_intervals_and_restarts_after_the_back_off() -> None:
    trace = _trace(Job("a", 0.0, 2, duration=1000.0), Job("b", 10.0, 2, duration=500.0))
    cfg = SimConfig(failures=ScriptedFailures({"a": [400.0, 700.0]}), checkpoint_interval=300, preemption_overhead=8.0)
    res = simulate(trace, cfg)
    # 0-400: fails, keeps 300 s (100 lost); back-off 10 s; 8 s to resume, then 700 s left.
    # 700: 282 s run since the resume, no whole interval: all lost; back-off 20 s (the second in a row).
    assert res.segments[:3] == [(0, 0, 0.0, 400.0, 2), (0, 0, 410.0, 700.0, 2), (0, 0, 720.0, 1428.0, 2)]
    assert res.state == [DONE, DONE] and res.end == [1428.0, 1928.0]  # b waits for a's GPUs throughout
    assert res.restarts == [2, 0] and res.lost_s == pytest.approx([382.0, 0.0])
    assert res.run_time[0] == pytest.approx(400 + 290 + 708)
    assert res.overhead_s[0] == pytest.approx(16.0)
    assert trace.jobs[0].executed == 300.0  # what it kept: the estimates' (backfilling, SRTF) remaining run
    s = summarize(res)
    assert s["restarts"] == 2 and s["failed_jobs"] == 0
    assert s["lost_gpu_hours"] == pytest.approx(382.0 * 2 / 3600)


@pytest.mark.parametrize(("own", "default", "end"), [(None, None, 1010.0), (0, 300, 1410.0), (None, 0, 1410.0)])
def test_what_a_failure_keeps_follows_the_jobs_own_interval_then_the_replays(
    own: float | None, default: float | None, end: float
) -> None:
    """None keeps the whole run; 0 keeps nothing (a job's own interval goes before the replay's)."""
    trace = _trace(Job("a", 0.0, 1, duration=1000.0, checkpoint_interval=own))
    cfg = SimConfig(failures=ScriptedFailures({"a": [400.0]}), checkpoint_interval=default, preemption_overhead=0.0)
    res = simulate(trace, cfg)
    assert res.end[0] == pytest.approx(end)


def test_past_the_backoff_limit_the_job_fails_for_good_and_frees_its_gpus() -> None:
    trace = _trace(Job("a", 0.0, 2, duration=1000.0), Job("b", 1.0, 2, duration=100.0))
    fails = ScriptedFailures({"a": [100.0, 200.0, 300.0, 400.0]})
    res = simulate(trace, SimConfig(failures=fails, backoff_limit=2, preemption_overhead=0.0))
    # restarts after 100 (+10 s) and 200 (+20 s); the third failure, at 300, is past the limit of 2
    assert res.state == [FAILED, DONE] and res.restarts == [2, 0]
    assert res.end[0] == 300.0 and res.start[1] == 300.0
    s = summarize(res)
    assert s["failed_jobs"] == 1 and s["jobs"] == 1 and s["unfinished_jobs"] == 0
    assert s["avg_jct_s"] == pytest.approx(399.0)  # only b's: a failed job has no completion time


def test_a_failure_within_the_back_off_or_while_waiting_cuts_nothing() -> None:
    trace = _trace(Job("a", 0.0, 2, duration=100.0), Job("b", 0.0, 2, duration=100.0))
    fails = ScriptedFailures({"a": [50.0, 55.0], "b": [20.0]})
    res = simulate(trace, SimConfig(failures=fails, preemption_overhead=0.0))
    assert res.restarts == [1, 0]  # 55 s lies in a's back-off (50-60); b waits until a is done at 110
    assert res.end == [110.0, 210.0]


def test_a_job_deleted_within_its_back_off_ends_then() -> None:
    trace = Trace("t", [Job("a", 0.0, 1, duration=1000.0)], [Node("n0", 1)], withdraw_at=[105.0])
    res = simulate(trace, SimConfig(failures=ScriptedFailures({"a": [100.0]})))
    assert res.end == [105.0] and res.run_time == [100.0]


def test_a_failed_jobs_jobs_csv_row_says_so(tmp_path: Path) -> None:
    trace = _trace(Job("a", 0.0, 2, duration=1000.0))
    res = simulate(trace, SimConfig(failures=ScriptedFailures({"a": [100.0, 200.0]}), backoff_limit=1))
    write_jobs_csv(tmp_path / "jobs.csv", res)
    row = next(csv.DictReader((tmp_path / "jobs.csv").open()))
    assert (row["state"], row["restarts"], row["lost_run_s"]) == ("failed", "1", "0.0")


def test_gpu_failures_come_at_the_rate_asked_for() -> None:
    """A 1-GPU job running 1,000 h with an MTBF of 1 GPU-hour fails about 1,000 times (Poisson, sd 32)."""
    trace = _trace(Job("a", 0.0, 1, duration=3.6e6))
    res = simulate(trace, SimConfig(failures=GpuFailures(1.0, seed=3), backoff_limit=10**6, preemption_overhead=0.0))
    assert 880 < res.restarts[0] < 1120
    eight = simulate(
        _trace(Job("a", 0.0, 8, duration=3.6e6 / 8), gpus=8),
        SimConfig(failures=GpuFailures(1.0, seed=3), backoff_limit=10**6, preemption_overhead=0.0),
    )
    assert eight.restarts == res.restarts  # the same GPU-hours of run: the same failures, 8 times as often


def test_gpu_failures_read_on_from_the_points_drawn_so_far() -> None:
    """Each segment start reads the job's next failure point on from those drawn before (not all drawn
    again); the points are those of the job's own draws, whatever order the jobs and times are asked in."""
    import random

    model, job = GpuFailures(0.01, seed=5), Job("a", 0.0, 1, duration=1.0)
    rng = random.Random(0)
    asks = [(rng.randrange(4), rng.uniform(0, 2000.0), rng.choice((1.0, 2.0, 8.0))) for _ in range(300)]
    for index, served, gpus in asks:  # jobs interleaved, each job's served time up and down
        draws, at = random.Random(f"qosmos-failures:5:{index}"), 0.0
        while at <= served + 1e-3:
            at += draws.expovariate(1.0 / 36.0)
        assert model.next_failure(job, index, 100.0, gpus, served) == pytest.approx(100.0 + (at - served) / gpus)
    assert max(len(points) for _, points in model._points.values()) < 2000 / 36 * 2  # drawn once, not per ask


def test_every_policy_meets_the_same_failures_in_each_jobs_run() -> None:
    """Common random numbers: each job's failures are drawn on its own GPU-seconds from the seed and its
    index, so non-preemptive policies that order the jobs differently lose the same runs to them."""
    trace = load_trace("builtin:helios-synth", jobs=400, seed=1, nodes=2, gpus_per_node=8)
    runs = {
        p: simulate(trace, SimConfig(policy=p, failures=GpuFailures(50.0, seed=7), checkpoint_interval=600))
        for p in ("fifo", "sjf")
    }
    assert sum(runs["fifo"].restarts) > 20
    assert runs["fifo"].restarts == runs["sjf"].restarts
    assert runs["fifo"].lost_s == pytest.approx(runs["sjf"].lost_s)
    assert runs["fifo"].start != runs["sjf"].start  # (the schedules do differ)
    other = simulate(trace, SimConfig(policy="fifo", failures=GpuFailures(50.0, seed=8), checkpoint_interval=600))
    assert other.restarts != runs["fifo"].restarts


def test_failures_leave_a_replay_without_them_as_it_was() -> None:
    trace = load_trace("builtin:helios-synth", jobs=300, seed=2)
    plain = simulate(trace, SimConfig(policy="las"))
    never = simulate(trace, SimConfig(policy="las", failures=ScriptedFailures({})))
    assert plain.segments == never.segments and plain.end == never.end
    assert not any(plain.restarts) and not any(plain.lost_s)


@pytest.mark.parametrize(
    ("cfg", "field"),
    [
        (SimConfig(checkpoint_interval=-1.0), "checkpoint_interval"),
        (SimConfig(checkpoint_interval=float("nan")), "checkpoint_interval"),
        (SimConfig(backoff_limit=-1), "backoff_limit"),
        (SimConfig(policy="recorded", failures=ScriptedFailures({})), "failures"),
    ],
)
def test_bad_failure_settings_are_refused_by_name(cfg: SimConfig, field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        cfg.validate()
    assert err.value.field == field


def test_a_bad_mtbf_or_checkpoint_interval_is_refused() -> None:
    with pytest.raises(InvalidInput, match="mtbf_gpu_hours"):
        GpuFailures(0.0)
    with pytest.raises(InvalidInput, match="checkpoint_interval"):
        Job("a", 0.0, 1, checkpoint_interval=-5)


def test_simulate_cli_replays_failures(tmp_path: Path) -> None:
    from qosmos.cli import app

    out = tmp_path / "out"
    args = ["simulate", "--trace", "builtin:helios-synth", "--jobs", "300", "--out", str(out), "--no-plots", "--quiet"]
    r = CliRunner().invoke(
        app, [*args, "--mtbf-gpu-hours", "20", "--checkpoint-interval", "900", "--backoff-limit", "1"]
    )
    assert r.exit_code == 0, r.output
    s = json.loads((out / "summary.json").read_text())
    assert s["restarts"] > 0 and s["failed_jobs"] > 0 and s["lost_gpu_hours"] > 0
    assert s["config"]["failures"] == "GpuFailures(mtbf_gpu_hours=20, seed=0)"
    assert s["config"]["checkpoint_interval_s"] == 900 and s["config"]["backoff_limit"] == 1
    rows = list(csv.DictReader((out / "jobs.csv").open()))
    assert sum(r["state"] == "failed" for r in rows) == s["failed_jobs"]
    assert np.sum([int(r["restarts"]) for r in rows]) == s["restarts"]
    bad = CliRunner().invoke(app, [*args, "--mtbf-gpu-hours", "0"])
    assert bad.exit_code == 2 and "mtbf_gpu_hours" in bad.output


def test_migration_leaves_a_job_in_its_back_off_where_it_is() -> None:
    """x ends at 100 s and n0 and n1 each run one job: migration would move y to n1, but y failed at 95 s
    and restarts at 105 s on its GPUs (moving it would skip the back-off)."""
    trace = Trace(
        "t",
        [Job("x", 0.0, 1, duration=100.0), Job("y", 0.0, 1, duration=1000.0), Job("z", 0.0, 1, duration=1000.0)],
        [Node("n0", 2), Node("n1", 1)],
    )
    cfg = SimConfig(migration=True, preemption_overhead=0.0)
    moved = simulate(trace, cfg)
    assert moved.migrations == 0  # (z is alone on n1, full: y has nowhere to go without failures either)
    trace.nodes[1] = Node("n1", 2)
    moved = simulate(trace, cfg)
    assert moved.migrations == 1 and (1, 1, 100.0, 1000.0, 1) in moved.segments
    kept = simulate(trace, dataclasses.replace(cfg, failures=ScriptedFailures({"y": [95.0]})))
    assert kept.migrations == 0 and (1, 0, 105.0, 1010.0, 1) in kept.segments
