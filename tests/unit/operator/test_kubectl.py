"""``kubectl qosmos`` formatting from DLJob objects (operator/kubectl.py): the queue, why a DLJob waits
(with the operator's own condition), and GENIE's placement table for it."""

from __future__ import annotations

import ast
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from qosmos.extender.core import admission
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.explain import load_profiles
from qosmos.operator import kubectl
from qosmos.operator.kubectl import UNBLOCK, explain_dljob, format_explain, format_queue, format_why, queue_of
from qosmos.operator.reconcile import condition, reason_of

NOW = 1_700_000_000.0
ROOT = Path(__file__).resolve().parents[3]


def ts(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def dljob(name: str, ns: str = "team-a", vc: str = "vc-a", created: float = NOW - 600, **status: Any) -> dict[str, Any]:
    spec = {"virtualCluster": vc, "gpus": 8, "qosClass": "Prior", "modelType": "ResNet50"}
    spec |= {"globalBatchSize": 256, "iterations": 1000}
    return {
        "apiVersion": "qosmos.io/v1alpha1",
        "kind": "DLJob",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": ts(created)},
        "spec": spec,
        "status": status,
    }


def waiting(code: str, message: str, position: int, **extra: Any) -> dict[str, Any]:
    """A queued DLJob's status as the operator writes it (its condition from reconcile.condition)."""
    return {
        "phase": "Queued",
        "queuePosition": position,
        "conditions": [condition("False", reason_of(code), message, NOW - 30, None)],
        **extra,
    }


VC = {
    "metadata": {"name": "vc-a"},
    "spec": {"policy": "swaf", "backfill": "easy", "cohort": "team", "quota": {"gpus": 16, "borrowingLimit": 8}},
    "status": {"gpus": {"total": 32, "used": 24, "borrowed": 0, "lent": 0}, "queued": 3, "running": 2},
}


def test_queue_lists_the_vcs_waiting_jobs_in_the_operators_order() -> None:
    jobs = [
        # submitted before the head: the policy (SWAF), not the arrival, orders the queue
        dljob("late", created=NOW - 900, **waiting(admission.BEHIND, "behind", 1, waitingAllowanceSeconds=3720)),
        dljob("new", created=NOW - 5),  # no pass yet: no position, goes last
        dljob(
            "head",
            **waiting(admission.HEAD, "needs 1 node(s) × 8 GPUs", 0, waitingAllowanceSeconds=-41, eta=ts(NOW + 130)),
        ),
        dljob("running", phase="Running", startTime=ts(NOW - 100)),
        dljob("elsewhere", vc="vc-b", **waiting(admission.HEAD, "x", 0)),
    ]
    assert [j["metadata"]["name"] for j in queue_of("vc-a", jobs)] == ["head", "late", "new"]
    lines = format_queue("vc-a", VC, jobs, NOW).splitlines()
    assert lines[0].startswith("VirtualCluster vc-a: policy swaf, placement cer, backfill easy; GPUs 24/32 used")
    assert "quota 16 in cohort team (+8 borrowable)" in lines[0] and "3 queued, 2 running" in lines[0]
    assert lines[1].split() == ["POS", "DLJOB", "QOS", "GPUS", "ALLOWANCE", "ETA", "REASON", "WAITING"]
    assert lines[2].split() == ["0", "team-a/head", "Prior", "8", "-41s", "in", "2m", "Head", "10m"]
    assert lines[3].split() == ["1", "team-a/late", "Prior", "8", "62m", "-", "BehindHead", "15m"]
    assert lines[4].split() == ["-", "team-a/new", "Prior", "8", "-", "-", "-", "5s"]
    assert len(lines) == 5


def test_queue_of_a_missing_or_empty_virtual_cluster() -> None:
    text = format_queue("ghost", None, [dljob("j", vc="ghost", **waiting(admission.HEAD, "x", 0))], NOW)
    assert text.splitlines()[0] == "VirtualCluster ghost does not exist (its DLJobs wait: VirtualClusterMissing)"
    assert "team-a/j" in text
    assert format_queue("vc-a", VC, [], NOW).splitlines()[-1] == "no DLJob waits in its queue"


def test_why_gives_the_operators_reason_numbers_and_what_unblocks_it() -> None:
    msg = "needs 1 node(s) × 8 GPUs in vc-a; 0 GPUs free in vc-a; does not fit the free resources now"
    job = dljob(
        "head",
        **waiting(
            admission.HEAD,
            msg,
            0,
            waitingAllowanceSeconds=-41,
            deadline=ts(NOW + 300),
            eta=ts(NOW + 130),
            predictedDurationSeconds=3600,
        ),
    )
    lines = format_why(job, NOW).splitlines()
    assert lines[0] == "DLJob team-a/head (VirtualCluster vc-a): Queued, position 0 in its queue"
    assert lines[1] == "reason: Head" and lines[2] == f"  {msg}"
    assert "waiting allowance (GENIE Eq. 13): -41s (overdue" in lines[3]
    assert lines[4] == f"deadline (GENIE Eq. 12): {ts(NOW + 300)}"
    assert lines[5] == "predicted run time: 60m"
    assert lines[6] == f"ETA: in 2m ({ts(NOW + 130)})"
    assert lines[7] == f"what would unblock it: {UNBLOCK['Head']}"


def test_why_for_jobs_that_do_not_wait() -> None:
    run = dljob("r", phase="Running", startTime=ts(NOW - 90), placement={"nodes": 1, "gpusPerNode": 8, "shape": "1x8"})
    assert format_why(run, NOW) == "DLJob team-a/r (VirtualCluster vc-a): Running on 1x8 for 90s; it is not pending"
    assert "waiting for the operator's first pass" in format_why(dljob("n"), NOW)
    failed = dljob(
        "f", phase="Failed", conditions=[condition("False", "InvalidPod", "spec.containers: Required", NOW, None)]
    )
    text = format_why(failed, NOW)
    assert "Failed, it is not pending" in text and "spec.containers: Required" in text and "fix spec.template" in text


def _reasons_the_operator_writes() -> set[str]:
    """Every condition reason reconcile.py writes: the core's wait codes (through reason_of) and the
    literals it passes to condition(), _wait_status() or as a reason= (and reason= defaults)."""
    tree = ast.parse((ROOT / "operator" / "reconcile.py").read_text())
    out = {reason_of(c) for c in (admission.HEAD, admission.NO_FIT, admission.RESERVED, admission.BEHIND)}
    out |= {reason_of(c) for c in (admission.QUOTA, admission.BLOCKED)}
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef):  # a default reason= (e.g. _requeue's)
            args = n.args.args[len(n.args.args) - len(n.args.defaults) :]
            out |= {
                d.value
                for a, d in zip(args, n.args.defaults, strict=True)
                if a.arg == "reason" and isinstance(d, ast.Constant)
            }
        if not isinstance(n, ast.Call):
            continue
        out |= {k.value.value for k in n.keywords if k.arg == "reason" and isinstance(k.value, ast.Constant)}
        name = ast.unparse(n.func)
        args = [a.value for a in n.args if isinstance(a, ast.Constant)]
        if name == "condition" and args[:1] == ["False"] and len(args) > 1:
            out.add(args[1])
        elif name.endswith("_wait_status") and len(n.args) > 1 and isinstance(n.args[1], ast.Constant):
            out.add(n.args[1].value)
    return out


def test_every_reason_the_operator_writes_has_a_hint() -> None:
    reasons = _reasons_the_operator_writes()
    assert {"Head", "NoFit", "Preempted", "VirtualClusterMissing"} <= reasons
    assert reasons <= set(UNBLOCK), sorted(reasons - set(UNBLOCK))


def nodes(n: int, gpus: int, labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    return [
        {
            "metadata": {"name": f"n{i}", "labels": dict(labels or {})},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi"}},
        }
        for i in range(n)
    ]


def test_explain_is_genies_table_on_the_vcs_nodes() -> None:
    from qosmos.extender.core import genie
    from qosmos.extender.core.types import Platform
    from qosmos.extender.explain import explain, resolve_profile

    vcs = [VC | {"spec": {"nodeSelector": {"pool": "a"}, "theta": 0.5}}, {"metadata": {"name": "vc-b"}, "spec": {}}]
    other = {"metadata": {"name": "other", "labels": {}}, "status": {"allocatable": {"nvidia.com/gpu": "4"}}}
    cluster = [*nodes(3, 8, {"pool": "a"}), other]
    job = dljob("bert", created=NOW - 60)
    result = explain_dljob(job, vcs, cluster, load_profiles(None), NOW)
    # the same call `qosmos explain --model ResNet50 --batch 256 --iters 1000 --qos prior --nodes 3 --gpus-per-node 8`
    profile, prov = resolve_profile("ResNet50", None, None, None, None, load_profiles(None))
    task = genie.Task("ResNet50", 256, 1000, "training", "prior", NOW - 60)
    want = explain(task, profile, Platform(3, 8), NOW, 0.5, prov)
    assert {k: v for k, v in result.items() if k in want} == want
    assert result["platform"] == {"nodes": 3, "gpus_per_node": 8} and result["fixed_shape"] is None
    text = format_explain(job, result, NOW, rows=4)
    lines = text.splitlines()
    assert lines[0].endswith("on VirtualCluster vc-a (3 nodes x 8 GPUs)")
    assert lines[1].split()[0] == "PLACEMENT"
    c = result["chosen"]
    assert any(ln.startswith(f"* {c['d_node']}x{c['d_gpn']} ") for ln in lines)
    assert f"GENIE's choice (Alg. 1): {c['d_node']}x{c['d_gpn']} (*)" in text
    assert "profile: built-in profile 'ResNet50'" in text
    json.dumps(result, allow_nan=False)  # --json prints it


def test_explain_a_fixed_shape_ranks_that_shape() -> None:
    from qosmos.extender.core import genie
    from qosmos.extender.core.types import Platform, Shape

    job = dljob("fixed")
    job["spec"] |= {"gpus": 4, "gpusPerNode": 2}
    result = explain_dljob(job, [VC], nodes(4, 8), load_profiles(None), NOW)
    task = genie.Task("ResNet50", 256, 1000, "training", "prior", NOW - 600)
    profile = load_profiles(None).db.get("ResNet50")
    row = genie.placement_row(task, Shape(2, 2), profile, Platform(4, 8), VC["spec"].get("theta", genie.DEFAULT_THETA))
    dl = genie.deadline(task, profile)
    assert result["fixed_shape"] == {
        "d_node": 2,
        "d_gpn": 2,
        "lat": row.lat,
        "feasible": genie.is_feasible(row.lat, NOW, dl),
        "waiting_allowance": pytest.approx(dl - (row.lat + NOW), abs=1e-6),  # Eq. 13
    }
    text = format_explain(job, result, NOW, rows=3)
    assert "spec.gpusPerNode fixes 2x2, the only placement GENIE policies consider" in text
    assert any(ln.strip().startswith("2x2 ") for ln in text.splitlines())  # shown even outside the top rows


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"kind": "cpu", "gpus": 0}, "spec.kind"),
        ({"modelType": None}, "spec"),
        ({"virtualCluster": "ghost"}, "spec.virtualCluster"),
    ],
)
def test_explain_refuses_what_has_no_table(change: dict[str, Any], field: str) -> None:
    job = dljob("j")
    job["spec"] = {k: v for k, v in (job["spec"] | change).items() if v is not None}
    if "modelType" not in job["spec"]:
        job["spec"].pop("globalBatchSize")
        job["spec"].pop("iterations")
    with pytest.raises(InvalidInput) as err:
        explain_dljob(job, [VC], nodes(2, 8), load_profiles(None), NOW)
    assert err.value.field == field


def test_duration_is_kubectls() -> None:
    assert [kubectl.duration(s) for s in (0, 45, -41, 119, 120, 3600, 3 * 3600 + 1800, 9 * 3600, 3 * 86400)] == [
        "0s",
        "45s",
        "-41s",
        "119s",
        "2m",
        "60m",
        "3h30m",
        "9h",
        "3d",
    ]


def test_console_script_is_declared() -> None:
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-qosmos"] == "qosmos.operator.kubectl:main"
