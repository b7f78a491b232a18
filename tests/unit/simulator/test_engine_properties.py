"""Invariants of the event engine over generated traces (hypothesis): every job ends or is rejected up
front (none left in a queue when the events run out), none starts before its submission or runs less
than its duration, no node ever holds more than its GPUs, FIFO with exact estimates never lets a
backfilled job delay the reserved head, and cohort members borrow within their limits. Each broke at
least once while this was written (a GPU-sharing job whose cores no GPU node had, a SODA reclaim for a
job that did not start, a job no SODA array's placer ever placed, a preemptive policy's fill past the
quota, a GENIE shape no node could hold, Capacity's shares): the cases are in test_admission.py,
test_placement.py, test_ordering_backfill.py and test_engine.py."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qosmos.simulator.engine import DONE, REJECTED, SimConfig, simulate
from qosmos.simulator.partitions import PartitionSpec
from qosmos.simulator.traces import load_native
from qosmos.testing.segments import peak_gpus

POLICIES = ["fifo", "sjf", "srtf", "qssf", "las", "rr", "mlfq", "priority", "swaf", "wfair", "capacity", "soda"]
EXACT = ("fifo", "sjf", "priority", "wfair", "capacity", "soda", "swaf", "qssf")  # policies asserted violation-free

# nodes: GPUs, milli-CPU (0: not reported), switch
nodes_st = st.lists(
    st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([0, 8000, 32000]), st.sampled_from(["s0", "s1"])),
    min_size=1,
    max_size=4,
)
# jobs: submit, GPUs (0: a CPU job), duration, milli-CPU, nodes fixed (0: the placer's), milli-GPU
jobs_st = st.lists(
    st.tuples(
        st.integers(0, 500),
        st.integers(0, 9),
        st.integers(1, 400),
        st.sampled_from([0, 0, 1000, 4000, 20000]),
        st.sampled_from([0, 0, 1, 2]),
        st.sampled_from([1000, 1000, 1000, 500]),
    ),
    min_size=1,
    max_size=12,
)


def _trace(tmp: Path, nodes: list[tuple[int, int, str]], jobs: list[tuple[int, int, int, int, int, int]]) -> Path:
    rows = []
    for k, (submit, gpus, duration, cpu, fixed, milli) in enumerate(jobs):
        if milli < 1000:  # GPU sharing: one GPU, placed by the sharing rule
            gpus, fixed = 1, 0
        if gpus == 0:
            fixed, cpu = 0, cpu or 1000
        if fixed and gpus % fixed:
            fixed = 0
        kind = "cpu" if gpus == 0 else "training"
        rows.append(f"J{k},{submit},{gpus},{duration},{cpu},{fixed},{milli},{kind}\n")
    (tmp / "nodes.csv").write_text(
        "name,gpus,cpu_milli,switch\n" + "".join(f"n{i},{g},{c},{s}\n" for i, (g, c, s) in enumerate(nodes))
    )
    path = tmp / "jobs.csv"
    path.write_text("id,submit,gpus,duration,cpu_milli,nodes,gpu_milli,kind\n" + "".join(rows))
    return path


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    nodes=nodes_st,
    jobs=jobs_st,
    policy=st.sampled_from(POLICIES),
    placement=st.sampled_from(["consolidate", "first-fit", "best-fit", "free-gpu", "cer"]),
    backfill=st.sampled_from(["none", "easy", "relaxed", "adaptive"]),
    estimates=st.sampled_from(["oracle", "predicted"]),
    migration=st.booleans(),
)
def test_every_job_ends_within_the_cluster(
    tmp_path_factory, nodes, jobs, policy, placement, backfill, estimates, migration
) -> None:  # type: ignore[no-untyped-def]
    tr = load_native(_trace(tmp_path_factory.mktemp("t"), nodes, jobs))
    cfg = SimConfig(
        policy=policy,
        placement=placement,
        backfill=backfill,
        backfill_estimates=estimates,
        migration=migration,
        predictor_fallback=True,
    )
    res = simulate(tr, cfg)
    assert res.overcommitted == 0
    # with exact estimates a backfilled job never delays the head it was let past (under SJF a shorter job
    # that arrives later goes ahead of it: no backfill's doing), nor does a migration (kept off its nodes)
    assert estimates != "oracle" or policy not in EXACT or res.violations == 0
    for i, job in enumerate(tr.jobs):
        assert res.state[i] in (DONE, REJECTED), (job.id, res.state[i], res.notes)
        if res.state[i] == DONE:
            assert res.start[i] >= job.submit_time
            assert job.duration is not None and res.end[i] - res.start[i] >= job.duration - 1e-6
    # milli-GPUs held per node, over time, never above its GPUs
    events: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for job_i, node, start, end, gpus in res.segments:
        assert end >= start
        milli = tr.jobs[job_i].gpu_milli if tr.jobs[job_i].gpu_milli < 1000 else 1000 * gpus
        events[node] += [(start, milli), (end, -milli)]
    for node, changes in events.items():
        held = 0
        for _, change in sorted(changes):  # at one instant, what ends is released first
            held += change
            assert held <= 1000 * res.node_gpus[node], (node, held)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    nodes=st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from("abc")), min_size=1, max_size=4),
    jobs=st.lists(
        st.tuples(st.integers(0, 300), st.integers(1, 9), st.integers(1, 400), st.sampled_from("abc")),
        min_size=1,
        max_size=12,
    ),
    # per VC (PartitionSpec's order): nominal share, borrowing and lending limits, policy, preemption
    limits=st.fixed_dictionaries(
        {
            vc: st.tuples(
                st.sampled_from([None, 0, 2, 4, 8]),
                st.sampled_from([None, 0, 2, 4]),
                st.sampled_from([None, 0, 2]),
                st.sampled_from([None, "fifo", "sjf", "srtf", "las"]),
                st.sampled_from(["Never", "LowerPriority"]),
                st.sampled_from(["Any", "Never"]),
            )
            for vc in "abc"
        }
    ),
    policy=st.sampled_from(["fifo", "sjf", "las", "qssf"]),
    placement=st.sampled_from(["consolidate", "first-fit", "best-fit"]),
    backfill=st.sampled_from(["none", "easy"]),
)
def test_a_cohort_borrows_within_its_limits_and_every_job_ends(
    tmp_path_factory, nodes, jobs, limits, policy, placement, backfill
) -> None:  # type: ignore[no-untyped-def]
    """The VCs with nodes in one cohort: no member ever borrows past its borrowing limit (the summary's
    most borrowed at once), no node holds more than its GPUs, every job ends or is rejected up front."""
    tmp = tmp_path_factory.mktemp("c")
    (tmp / "nodes.csv").write_text("name,gpus,vc\n" + "".join(f"n{i},{g},{v}\n" for i, (g, v) in enumerate(nodes)))
    rows = "".join(f"J{k},{s},{g},{d},{v}\n" for k, (s, g, d, v) in enumerate(jobs))
    (tmp / "jobs.csv").write_text("id,submit,gpus,duration,vc\n" + rows)
    tr = load_native(tmp / "jobs.csv")
    have = {v for _, v in nodes}
    specs = tuple(PartitionSpec(vc, "team", *lim) for vc, lim in limits.items() if vc in have)
    cfg = SimConfig(
        policy=policy, placement=placement, backfill=backfill, backfill_estimates="oracle", partitions=specs
    )
    res = simulate(tr, cfg)
    assert res.overcommitted == 0
    for spec in specs:
        if spec.borrowing_limit is not None:
            assert res.partitions[spec.name]["max_borrowed_gpus"] <= spec.borrowing_limit, (spec, res.partitions)
    for i, job in enumerate(tr.jobs):
        assert res.state[i] in (DONE, REJECTED), (job.id, res.state[i], res.notes)
    for node, peak in peak_gpus(res.segments).items():
        assert peak <= res.node_gpus[node], (node, peak)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    nodes=st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from(["s0", "s1"])), min_size=1, max_size=4),
    # GENIE tasks: submit, GPUs asked, model, batch, iterations, QoS, nodes fixed
    jobs=st.lists(
        st.tuples(
            st.integers(0, 500),
            st.integers(1, 9),
            st.sampled_from(["BERT", "DCGAN", "ResNet50", "LSTM", "VGG", "PPO"]),
            st.sampled_from([1, 8, 32, 64, 256]),
            st.integers(1, 2000),
            st.sampled_from(["", "urgent", "prior", "normal"]),
            st.sampled_from([0, 0, 1, 2]),
        ),
        min_size=1,
        max_size=10,
    ),
    policy=st.sampled_from(["swaf", "tetris-cer", "tetris-perf", "minmin", "capacity", "qssf", "srtf"]),
    placement=st.sampled_from(["cer", "consolidate", "free-gpu", "first-fit"]),
    backfill=st.sampled_from(["none", "easy"]),
)
def test_genie_tasks_on_unlike_nodes_all_end(tmp_path_factory, nodes, jobs, policy, placement, backfill) -> None:  # type: ignore[no-untyped-def]
    """GENIE policies choose each task's shape: on nodes of different sizes only shapes they can hold
    (tetris-perf chose 3 nodes x 2 GPUs on nodes of 1, 1 and 2 GPUs, and the task never started)."""
    tmp = tmp_path_factory.mktemp("g")
    (tmp / "nodes.csv").write_text(
        "name,gpus,switch,gpu_model\n" + "".join(f"n{i},{g},{s},V100M32\n" for i, (g, s) in enumerate(nodes))
    )
    rows = []
    for k, (submit, gpus, model, batch, iters, qos, fixed) in enumerate(jobs):
        if policy == "capacity":  # a fixed shape over its type's share never starts there (its documented rule)
            fixed = 0
        rows.append(
            f"J{k},{submit},{gpus},{model},{batch},{iters},{qos},{fixed if fixed and gpus % fixed == 0 else 0}\n"
        )
    (tmp / "jobs.csv").write_text("id,submit,gpus,model,batch,iters,qos,nodes\n" + "".join(rows))
    tr = load_native(tmp / "jobs.csv")
    cfg = SimConfig(
        policy=policy, placement=placement, backfill=backfill, backfill_estimates="oracle", predictor_fallback=True
    )
    res = simulate(tr, cfg)
    assert res.overcommitted == 0
    for i, job in enumerate(tr.jobs):
        assert res.state[i] in (DONE, REJECTED), (job.id, res.state[i], res.notes)
