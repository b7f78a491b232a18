"""`qosmos simulate --partitions`: cohorts that share nodes, end to end through the engine and the CLI,
hand-computed.

Cluster: a0 (4 GPUs, VC a) and b0 (4 GPUs, VC b). A1 (a, 4 GPUs, 100 s) starts at 0 on a0; A2 (a,
4 GPUs, 100 s, submitted at 1) borrows b's idle b0 at 1 (cap_a = 4 + 4 idle in b). B1 (b, 4 GPUs,
50 s) arrives at 10: b's head, within b's nominal 4, no free GPU. Reclaim: lost work A1 = 10 × 4 = 40,
A2 = 9 × 4 = 36 GPU-s, so A2 is stopped and B1 starts at 10, in the same pass, on b0. A2 waits (cap_a
= 4 + 0: b lends nothing while B1 runs), borrows b0 again when B1 ends at 60 and runs its 91 s left
plus the 8 s resume overhead: it ends at 159. a borrowed 4 GPUs over 1-10 and 60-100 (A1 ends at 100,
then a holds 4 = its share): 4 × 49 = 196 GPU-s.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.simulator.engine import SimConfig, simulate
from qosmos.simulator.metrics import summarize
from qosmos.simulator.partitions import load_partitions, parse_partitions
from qosmos.simulator.traces import load_native
from typer.testing import CliRunner

from qosmos.cli import app

from .conftest import write

JOBS = "id,submit,gpus,duration,vc\nA1,0,4,100,a\nA2,1,4,100,a\nB1,10,4,50,b"
NODES = "name,gpus,vc\na0,4,a\nb0,4,b"
COHORT = "- {name: a, cohort: c}\n- {name: b, cohort: c}\n"

runner = CliRunner()


def trace(tmp_path: Path):  # type: ignore[no-untyped-def]
    write(tmp_path / "nodes.csv", NODES)
    return load_native(write(tmp_path / "jobs.csv", JOBS))


def run(tmp_path: Path, partitions: str | None):  # type: ignore[no-untyped-def]
    specs = parse_partitions(__import__("yaml").safe_load(partitions), "p.yaml") if partitions else ()
    tr = trace(tmp_path)
    res = simulate(tr, SimConfig(partitions=specs))
    ids = {j.id: k for k, j in enumerate(tr.jobs)}
    return res, ids


def test_the_lenders_job_starts_on_the_nodes_the_reclaim_freed(tmp_path: Path) -> None:
    res, ix = run(tmp_path, COHORT)
    a1, a2, b1 = ix["A1"], ix["A2"], ix["B1"]
    assert res.start[a2] == 1 and res.preemptions[a2] == 1 and res.preemptions[a1] == 0
    assert res.start[b1] == 10 and res.end[b1] == 60
    b0 = res.node_names.index("b0")
    assert {(n, s) for j, n, s, _, _ in res.segments if j == b1} == {(b0, 10)}  # on the node A2 left
    assert res.end[a2] == pytest.approx(60 + 91 + 8)
    s = summarize(res)
    parts = s["partitions"]
    assert parts["a"]["max_borrowed_gpus"] == 4 and parts["a"]["reclaimed_jobs"] == 1  # type: ignore[index]
    assert parts["b"]["reclaims"] == 1 and parts["b"]["max_borrowed_gpus"] == 0  # type: ignore[index]
    assert parts["a"]["borrowed_gpu_hours"] == pytest.approx(196 / 3600)  # type: ignore[index]
    assert parts["a"]["nominal_gpus"] == 4 and parts["a"]["cohort"] == "c"  # type: ignore[index]


def test_without_a_cohort_each_vc_keeps_its_nodes(tmp_path: Path) -> None:
    res, ix = run(tmp_path, None)
    assert res.start[ix["A2"]] == 100 and res.start[ix["B1"]] == 10
    assert sum(res.preemptions) == 0
    assert "partitions" not in summarize(res)


def test_reclaim_within_cohort_never_lets_the_lender_wait(tmp_path: Path) -> None:
    never = COHORT.replace("{name: b, cohort: c}", "{name: b, cohort: c, preemption: {reclaimWithinCohort: Never}}")
    res, ix = run(tmp_path, never)
    assert sum(res.preemptions) == 0
    # B1 waits for the first 4 GPUs the cohort frees: a0, when A1 ends at 100
    assert res.start[ix["A2"]] == 1 and res.start[ix["B1"]] == 100
    a0 = res.node_names.index("a0")
    assert {n for j, n, _, _, _ in res.segments if j == ix["B1"]} == {a0}


def test_a_borrowing_limit_of_zero_keeps_a_on_its_share(tmp_path: Path) -> None:
    res, ix = run(tmp_path, COHORT.replace("{name: a, cohort: c}", "{name: a, cohort: c, borrowingLimit: 0}"))
    assert res.start[ix["A2"]] == 100 and sum(res.preemptions) == 0


def simulate_cli(trace_csv: Path, out: Path, pfile: Path):  # type: ignore[no-untyped-def]
    args = ["simulate", "--trace", str(trace_csv), "--out", str(out), "--no-plots", "--quiet"]
    return runner.invoke(app, [*args, "--partitions", str(pfile)])


def test_cli_runs_with_a_partitions_file(tmp_path: Path) -> None:
    trace(tmp_path)
    pfile = write(tmp_path / "p.yaml", COHORT)
    out = tmp_path / "out"
    r = simulate_cli(tmp_path / "jobs.csv", out, pfile)
    assert r.exit_code == 0, r.output
    s = json.loads((out / "summary.json").read_text())
    assert s["partitions"]["b"]["reclaims"] == 1 and s["preemptions"] == 1


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("- {name: z, cohort: c}", "[0].name"),  # no such VC in the trace
        ("- {name: a, cohort: c, nominalGpus: -1}", "nominalGpus"),
        ("- {name: a, borrowingLimit: 2}", "borrowingLimit"),  # a limit needs a cohort
        ("- {name: a, cohort: c, preemption: {reclaimWithinCohort: Sometimes}}", "reclaimWithinCohort"),
        ("- {name: a, cohort: c, colour: red}", "colour"),
        ("- {name: a, cohort: c}\n- {name: a}", "name"),
        ("- {name: a, cohort: c, policy: soda}", "cohort"),  # SODA's arrays split a VC's own nodes
        ("- {name: a, policy: soda, arraySplit: 1.5}", "arraySplit"),
        ("- {name: a, policy: soda, arraySplit: yes}", "arraySplit"),
        ("- {name: a, policy: soda, arraySplit: .nan}", "arraySplit"),
        ("- {name: a, arraySplit: 0.5}", "arraySplit"),  # fifo (--policy's default) has no job arrays
    ],
)
def test_cli_rejects_a_bad_partitions_file(tmp_path: Path, text: str, field: str) -> None:
    trace(tmp_path)
    pfile = write(tmp_path / "p.yaml", text)
    r = simulate_cli(tmp_path / "jobs.csv", tmp_path / "o", pfile)
    assert r.exit_code == 2, r.output
    assert "p.yaml" in r.output or "partitions" in r.output
    assert field in r.output


def test_load_partitions_json_and_errors(tmp_path: Path) -> None:
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"partitions": [{"name": "a", "cohort": "c", "lendingLimit": 2}]}))
    (spec,) = load_partitions(p)
    assert spec.lending_limit == 2 and spec.reclaim_within_cohort == "Any"
    p.write_text("{not json")
    with pytest.raises(InvalidInput, match="not valid JSON"):
        load_partitions(p)


def test_a_soda_partitions_array_split_is_its_entrys_else_the_traces(tmp_path: Path) -> None:
    # the trace asks all its GPUs in 4-GPU jobs: derived, the 4-GPU array would be the whole VC
    given = parse_partitions([{"name": "a", "policy": "soda", "arraySplit": 0.25}], "p.yaml")
    tr = trace(tmp_path)
    notes = simulate(tr, SimConfig(policy="soda", partitions=given)).notes
    assert "SODA arrays in a: 25% of its GPUs in the >=4-GPU array (its arraySplit)" in notes
    derived = simulate(tr, SimConfig(policy="soda")).notes
    assert any(n.startswith("SODA arrays in a: 100% of its GPUs") for n in derived)
