"""Node outages in a replay (``SimConfig.outages``): nothing is placed on a down node; a gang with a node
there stalls, holding its GPUs, and is requeued as the operator requeues a DLJob on a lost node (after
nodeLostSeconds, or when the node is back if sooner; its run counted to the stall, its work kept to its
last checkpoint); a drained node's gangs are requeued at once, their run kept (the operator's Disrupted);
replicas there are asked for again; RandomOutages draws the same outages for every policy; bad outage
files are refused with their line."""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.failures import node_lost_at
from qosmos.extender.core.types import Job, Node
from qosmos.simulator.engine import DONE, FAILED, REJECTED, SimConfig, simulate
from qosmos.simulator.failures import RandomOutages, ScriptedOutages, node_outage_model
from qosmos.simulator.metrics import summarize
from qosmos.simulator.services import ServiceTimeline
from qosmos.simulator.traces import Trace
from qosmos.testing.segments import peak_gpus
from typer.testing import CliRunner


def _trace(*jobs: Job, nodes: tuple[Node, ...] = (Node("n0", 2), Node("n1", 2))) -> Trace:
    return Trace("t", list(jobs), list(nodes))


def _cfg(outages: dict[str, list[tuple[float, float] | tuple[float, float, bool]]], **kw: object) -> SimConfig:
    kw.setdefault("placement", "first-fit")
    kw.setdefault("preemption_overhead", 8.0)
    return SimConfig(outages=ScriptedOutages(outages), **kw)  # type: ignore[arg-type]


def test_a_gang_on_a_down_node_is_requeued_after_the_grace_elsewhere_from_its_last_checkpoint() -> None:
    trace = _trace(Job("a", 0.0, 2, duration=1000.0), Job("b", 450.0, 2, duration=100.0))
    res = simulate(trace, _cfg({"n0": [(400.0, 5000.0)]}, checkpoint_interval=300))
    # a: 0-400 on n0, stalls (its 2 GPUs held), requeued at 400 + 300; kept 300 s, lost 100 s; on n1 at 700
    # after b (450-550 on n1: n0 is down) with 8 s to resume and 700 s left
    assert sorted(res.segments) == [(0, 0, 0.0, 400.0, 2), (0, 1, 700.0, 1408.0, 2), (1, 1, 450.0, 550.0, 2)]
    assert res.state == [DONE, DONE] and res.end == [1408.0, 550.0]
    assert res.node_lost == [1, 0] and res.preemptions == [0, 0] and res.restarts == [0, 0]
    assert res.lost_s == pytest.approx([100.0, 0.0])
    assert res.run_time[0] == pytest.approx(400 + 708)  # the stall (400-700) ran nothing
    s = summarize(res)
    assert s["node_outages"] == 1 and s["node_lost_requeues"] == 1
    assert s["lost_gpu_hours"] == pytest.approx(100 * 2 / 3600)
    assert s["node_down_gpu_hours"] == pytest.approx((1408 - 400) * 2 / 3600)  # down to the replay's end


def test_a_drained_nodes_gang_is_requeued_at_once_with_its_run_kept() -> None:
    """kubectl drain at 400 s: no stall, no grace, no checkpoint lost (its pods had their grace period); the
    gang goes back to its queue then (a preemption) and starts on n1, paying the resume overhead; nothing
    goes to n0 until it is uncordoned at 2000 s (b waits for n1, free sooner)."""
    trace = _trace(Job("a", 0.0, 2, duration=1000.0), Job("b", 450.0, 2, duration=100.0))
    res = simulate(trace, _cfg({"n0": [(400.0, 2000.0, True)]}, checkpoint_interval=300))
    assert sorted(res.segments) == [(0, 0, 0.0, 400.0, 2), (0, 1, 400.0, 1008.0, 2), (1, 1, 1008.0, 1108.0, 2)]
    assert res.preemptions == [1, 0] and res.node_lost == [0, 0] and res.restarts == [0, 0]
    assert res.lost_s == pytest.approx([0.0, 0.0])
    s = summarize(res)
    assert (s["node_outages"], s["node_drains"], s["node_drain_requeues"], s["node_lost_requeues"]) == (1, 1, 1, 0)
    assert s["node_down_gpu_hours"] == pytest.approx((1108 - 400) * 2 / 3600)  # to the replay's end


def test_a_gang_stalled_elsewhere_and_drained_here_keeps_its_work_to_the_stall() -> None:
    """A 2-node gang: n1 goes down at 300 s (it stalls), n0 is drained at 350 s: requeued then, its run
    counted to the stall and kept to its last checkpoint (no grace where the node was down), not as a
    NodeLost requeue."""
    nodes = (Node("n0", 2), Node("n1", 2), Node("n2", 4))
    trace = _trace(Job("a", 0.0, 4, duration=1000.0, nodes=2), nodes=nodes)
    res = simulate(trace, _cfg({"n1": [(300.0, 5000.0)], "n0": [(350.0, 5000.0, True)]}, checkpoint_interval=200))
    assert res.preemptions == [1] and res.node_lost == [0]
    assert res.lost_s == pytest.approx([100.0]) and res.run_time[0] == pytest.approx(300 + 8 + 800)


def test_a_node_back_before_the_grace_fails_its_pods_and_the_gang_restarts_there() -> None:
    """A machine back from a crash reports its pods failed: the gang restarts as after a failure (back-off,
    counted against the backoff limit) on its GPUs, its run counted to the stall."""
    trace = _trace(Job("a", 0.0, 2, duration=1000.0), nodes=(Node("n0", 2),))
    res = simulate(trace, _cfg({"n0": [(400.0, 500.0)]}, checkpoint_interval=300, node_lost_seconds=300))
    # 0-400, stalled to 500; back-off 10 s; 8 s to resume; 700 s left (300 kept)
    assert res.segments == [(0, 0, 0.0, 400.0, 2), (0, 0, 510.0, 1218.0, 2)]
    assert res.restarts == [1] and res.node_lost == [0] and res.lost_s == pytest.approx([100.0])
    assert node_lost_at(400.0, 300.0, 500.0) == 500.0 and node_lost_at(400.0, 300.0) == 700.0
    failing = simulate(
        _trace(Job("a", 0.0, 2, duration=1000.0), nodes=(Node("n0", 2),)),
        _cfg({"n0": [(400.0, 500.0)]}, backoff_limit=0),
    )
    assert failing.state == [FAILED] and failing.end == [500.0] and failing.run_time == [pytest.approx(400.0)]


def test_a_stalled_multi_node_gang_holds_its_gpus_on_the_node_still_up() -> None:
    """Its pod on n1 still holds n1's GPUs until the gang is requeued: c waits for them."""
    trace = _trace(Job("a", 0.0, 4, duration=1000.0), Job("c", 450.0, 2, duration=100.0))
    res = simulate(trace, _cfg({"n0": [(400.0, 600.0)]}, checkpoint_interval=0, node_lost_seconds=1000))
    runs = sorted((trace.jobs[i].id, s, e, n) for i, n, s, e, _ in res.segments)
    # n1's GPUs held through the stall (c waits from 450): n0 is back at 600, before the grace, so the gang
    # restarts there after its 10 s back-off (8 s to resume, nothing kept without checkpoints); c after it
    assert runs == [
        ("a", 0.0, 400.0, 0),
        ("a", 0.0, 400.0, 1),
        ("a", 610.0, 1618.0, 0),
        ("a", 610.0, 1618.0, 1),
        ("c", 1618.0, 1718.0, 0),
    ]
    assert res.lost_s[0] == pytest.approx(400.0)  # no checkpoints: the run is all lost


def test_nothing_is_placed_on_a_down_node_and_a_job_waits_for_it() -> None:
    """(Outage times count from the first submission, as the services' timelines do.)"""
    trace = _trace(Job("x", 50.0, 1, duration=5.0), Job("a", 150.0, 2, duration=50.0), nodes=(Node("n0", 2),))
    res = simulate(trace, _cfg({"n0": [(10.0, 300.0)]}))
    assert res.start == [50.0, 350.0] and res.end == [55.0, 400.0] and res.node_lost == [0, 0]


def test_a_job_deleted_while_its_gang_stalls_ends_then() -> None:
    trace = _trace(Job("a", 0.0, 2, duration=1000.0), nodes=(Node("n0", 2),))
    trace.withdraw_at[0] = 500.0
    res = simulate(trace, _cfg({"n0": [(400.0, 900.0)]}))
    assert res.state == [DONE] and res.end == [500.0] and res.node_lost == [0]
    assert res.run_time == [pytest.approx(400.0)]


def test_a_node_that_never_comes_back_ends_the_replay_with_the_job_that_needs_it_waiting() -> None:
    """Outages go on for ever on other nodes; the replay still ends when nothing else can happen."""

    class Forever:
        def next_outage(self, node: str, after: float) -> tuple[float, float] | None:
            if node == "big":
                return (0.0, math.inf) if after < 0.0 else None
            k = 0 if after < 0 else math.floor(after / 100.0) + 1  # down every 100 s for 50 s, for ever
            return (100.0 * k, 100.0 * k + 50.0)

    trace = _trace(
        Job("a", 30.0, 8, duration=10.0), Job("b", 20.0, 1, duration=10.0), nodes=(Node("big", 8), Node("s", 2))
    )
    res = simulate(trace, SimConfig(outages=Forever()))  # type: ignore[arg-type]
    assert res.state[1] == DONE and res.start[1] == 70.0  # s is down from 20 (the first submission) to 70
    assert res.state[0] not in (DONE, REJECTED)
    assert any("never started" in n for n in res.notes)


def test_a_replica_on_a_down_node_is_asked_for_again_elsewhere() -> None:
    svc = ServiceTimeline("svc", ((0.0, 1, 0),), gpu_cpu_milli=0)
    trace = _trace(Job("a", 0.0, 1, duration=10.0), Job("z", 2000.0, 1, duration=10.0))
    res = simulate(trace, _cfg({"n0": [(100.0, 5000.0)]}, services=(svc,)))
    placed = sorted((n, s, e) for _, n, s, e, _ in res.service_segments)
    assert placed[0][:2] == (0, 0.0) and placed[0][2] == 100.0  # on n0 until it went down
    assert placed[1][:2] == (1, 100.0)  # asked again at once, on n1
    assert res.services["svc"]["replicas_lost"] == 1 and res.services["svc"]["replicas_placed"] == 2


def test_random_outages_depend_on_the_seed_and_the_node_alone() -> None:
    a, b = RandomOutages(10.0, 1.0, seed=3), RandomOutages(10.0, 1.0, seed=3)
    first = [a.next_outage("n0", t) for t in (0.0, 1e5, 5e5)]
    b.next_outage("other", 0.0)
    assert [b.next_outage("n0", t) for t in (5e5, 0.0, 1e5)] == [first[2], first[0], first[1]]
    assert RandomOutages(10.0, 1.0, seed=4).next_outage("n0", 0.0) != first[0]
    # over 2,000 outages the mean time up is the MTBF and the mean time down the MTTR
    spans, t = [], -1.0
    for _ in range(2000):
        got = a.next_outage("n1", t)
        assert got is not None
        spans.append(got)
        t = got[0]
    ups = [d - (spans[k - 1][1] if k else 0.0) for k, (d, *_) in enumerate(spans)]
    downs = [u - d for d, u, *_ in spans]
    assert sum(ups) / len(ups) / 3600 == pytest.approx(10.0, rel=0.06)
    assert sum(downs) / len(downs) / 3600 == pytest.approx(1.0, rel=0.06)
    assert all(ups[k] > 0 for k in range(len(ups)))


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("node,down,up\nn0,10,5\n", ":2"),
        ("node,down,up\nn0,10,20\nn0,x,30\n", ":3"),
        ("node,down,up\n,10,20\n", ":2"),
        ("node,down\nn0,10\n", "node,down,up"),
        ("node,down,up,kind\nn0,10,20,drain\nn1,5,6,reboot\n", ":3 kind"),
    ],
)
def test_a_bad_outage_row_is_refused_with_its_line(tmp_path: Path, text: str, named: str) -> None:
    path = tmp_path / "outages.csv"
    path.write_text(text)
    with pytest.raises(InvalidInput, match=named):
        ScriptedOutages.read(path)


def test_overlapping_outages_and_both_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="overlaps"):
        ScriptedOutages({"n0": [(10.0, 20.0), (15.0, 30.0)]})
    path = tmp_path / "o.csv"
    path.write_text("node,down,up\nn0,10,\n")
    assert ScriptedOutages.read(path).outages == {"n0": [(10.0, math.inf, False)]}
    path.write_text("node,down,up,kind\nn0,10,20,drain\nn0,30,,\nn1,5,6,down\n")
    assert ScriptedOutages.read(path).outages == {
        "n0": [(10.0, 20.0, True), (30.0, math.inf, False)],
        "n1": [(5.0, 6.0, False)],
    }
    with pytest.raises(InvalidInput, match="not both"):
        node_outage_model(5.0, 1.0, path, 0)
    with pytest.raises(InvalidInput, match="names no node"):
        simulate(_trace(Job("a", 0.0, 1, duration=1.0)), SimConfig(outages=ScriptedOutages({"n7": [(1.0, 2.0)]})))
    with pytest.raises(InvalidInput, match="recorded"):
        SimConfig(policy="recorded", outages=ScriptedOutages({})).validate()


def test_simulate_cli_replays_outages_from_a_file(tmp_path: Path) -> None:
    from qosmos.cli import app

    (tmp_path / "nodes.csv").write_text("name,gpus\nn0,2\nn1,2\n")
    (tmp_path / "jobs.csv").write_text("id,submit,gpus,duration\na,0,2,1000\nb,10,2,1000\n")
    (tmp_path / "outages.csv").write_text("node,down,up\nn0,400,\n")
    out = tmp_path / "out"
    args = [
        "simulate",
        "--trace",
        str(tmp_path / "jobs.csv"),
        "--out",
        str(out),
        "--no-plots",
        "--placement",
        "first-fit",
    ]
    got = CliRunner().invoke(app, [*args, "--node-outages", str(tmp_path / "outages.csv"), "--node-lost-seconds", "60"])
    assert got.exit_code == 0, got.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["node_outages"] == 1 and summary["node_lost_requeues"] == 1
    rows = {r["id"]: r for r in csv.DictReader((out / "jobs.csv").open())}
    # a stalls at 400 on n0, requeued at 460, waits for b's n1 (free at 1010; n0 never comes back) and,
    # without checkpoint intervals, keeps its 400 s: 8 s to resume, 600 s left
    assert rows["a"]["node_lost"] == "1" and float(rows["a"]["start"]) == 0.0
    assert float(rows["a"]["end"]) == pytest.approx(1010 + 8 + 600)
    both = CliRunner().invoke(app, [*args, "--node-outages", str(tmp_path / "outages.csv"), "--node-mtbf-hours", "5"])
    assert both.exit_code == 2 and "not both" in both.output


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    nodes=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=4),
    jobs=st.lists(st.tuples(st.integers(0, 500), st.integers(1, 9), st.integers(1, 400)), min_size=1, max_size=12),
    outages=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 800), st.integers(1, 400), st.booleans()), min_size=1, max_size=6
    ),
    policy=st.sampled_from(["fifo", "sjf", "srtf", "las", "mlfq", "swaf", "soda", "capacity"]),
    backfill=st.sampled_from(["none", "easy"]),
    grace=st.sampled_from([0.0, 60.0, 300.0]),
    checkpoint=st.sampled_from([None, 0.0, 50.0]),
    migration=st.booleans(),
)
def test_with_outages_every_job_ends_and_nothing_runs_on_a_down_node(
    nodes, jobs, outages, policy, backfill, grace, checkpoint, migration
) -> None:  # type: ignore[no-untyped-def]
    cluster = [Node(f"n{k}", g) for k, g in enumerate(nodes)]
    trace = Trace("p", [Job(f"J{k}", float(s), g, duration=float(d)) for k, (s, g, d) in enumerate(jobs)], cluster)
    spans: dict[str, list[tuple[float, float, bool]]] = defaultdict(list)
    for k, down, length, drain in outages:  # later overlapping ones dropped: one node's outages do not overlap
        name = f"n{k % len(nodes)}"
        if all(down > u or down + length < d for d, u, _ in spans[name]):
            spans[name].append((float(down), float(down + length), drain))
    cfg = SimConfig(
        policy=policy,
        backfill=backfill,
        backfill_estimates="oracle",
        migration=migration,
        outages=ScriptedOutages(spans),
        node_lost_seconds=grace,
        checkpoint_interval=checkpoint,
    )
    res = simulate(trace, cfg)
    assert res.overcommitted == 0
    for i, job in enumerate(trace.jobs):
        # (a node back before the grace fails the pods there: past the backoff limit the job fails)
        assert res.state[i] in (DONE, REJECTED, FAILED), (job.id, res.state[i], res.notes)
        assert res.state[i] != FAILED or res.restarts[i] == cfg.backoff_limit
        if res.state[i] == DONE:
            assert res.end[i] - res.start[i] >= job.duration - 1e-6  # type: ignore[operator]
    origin = min(j.submit_time for j in trace.jobs)  # outage times count from the first submission
    for _, node, start, end, _ in res.segments:
        for down, up in ((origin + d, origin + u) for d, u, _ in spans.get(f"n{node}", ())):
            assert end <= down + 1e-9 or start >= up - 1e-9, (node, start, end, down, up)
    for node, peak in peak_gpus(res.segments).items():
        assert peak <= res.node_gpus[node], (node, peak)
    assert sum(res.node_lost) <= sum(len(v) for v in spans.values()) * len(trace.jobs)
    assert res.drains <= sum(d for v in spans.values() for *_, d in v)  # (those after the replay's end: none)
