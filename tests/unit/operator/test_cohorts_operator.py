"""VirtualCluster cohorts in the operator (issue 21 §3): the VirtualCluster's cohort, limits and
preemption reach the core's Partition, a member's pass places on the cohort's nodes, a reclaim the
core decides is executed through the operator's requeue path, and DLJob.spec.priority reaches the
core. The decisions are the core's (``core.cohorts``); these tests check the operator carries them."""

from __future__ import annotations

from typing import Any

import pytest
from qosmos.extender.core.cohorts import PreemptionPolicy
from qosmos.operator import crds
from qosmos.operator.crds import LABEL_VC, VirtualClusterSpec
from qosmos.operator.durations import Durations
from qosmos.operator.reconcile import Reconciler
from qosmos.operator.translate import job_from_dljob, parse_time, rfc3339
from qosmos.testing.fakekube import FakeKube, gpu_node

T0 = parse_time("2026-01-02T03:04:05Z") or 0.0


def dljob(name: str, vc: str, created: float, gpus: int = 8, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "qosmos.io/v1alpha1",
        "kind": "DLJob",
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": f"uid-{name}",
            "generation": 1,
            "creationTimestamp": rfc3339(T0 + created),
        },
        "spec": {"virtualCluster": vc, "gpus": gpus, "gpusPerNode": gpus, **spec},
    }


def vc(name: str, pool: str, cohort: str | None = "team", **spec: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"nodeSelector": {"pool": pool}, "policy": "fifo", "placement": "consolidate", **spec}
    if cohort is not None:
        s["cohort"] = cohort
    return {"metadata": {"name": name}, "spec": s}


class Cluster:
    """Two 8-GPU nodes, n0 of VirtualCluster va and n1 of vb, and the operator's passes over them."""

    def __init__(self, **spec: Any) -> None:
        self.kube = FakeKube(
            [gpu_node("n0", pool="a"), gpu_node("n1", pool="b")],
            vcs=[vc("va", "a", quota={"gpus": 8}, **spec), vc("vb", "b", quota={"gpus": 8}, **spec)],
        )
        self.now = T0
        self.rec = Reconciler(self.kube, durations=Durations(None), clock=lambda: self.now)  # type: ignore[arg-type]

    def step(self, dt: float = 60.0) -> list[str]:
        self.now += dt
        return self.rec.run_pass().admitted

    def status(self, name: str) -> dict[str, Any]:
        return self.kube.jobs[name].get("status") or {}

    def nodes_of(self, name: str) -> list[str]:
        return list(self.status(name)["placement"]["nodeNames"])

    def reason(self, name: str) -> str:
        return str(self.status(name)["conditions"][0]["reason"])


def test_a_cohort_member_starts_on_another_members_idle_node() -> None:
    c = Cluster()
    c.kube.add(dljob("a0", "va", 0), dljob("a1", "va", 1))
    assert c.step() == ["team/a0", "team/a1"]  # 8 of va's quota + 8 borrowed from idle vb
    assert sorted(c.nodes_of("a0") + c.nodes_of("a1")) == ["n0", "n1"]
    borrowed = "a0" if c.nodes_of("a0") == ["n1"] else "a1"
    (pod,) = [p for p in c.kube.pods.values() if p["metadata"]["labels"]["qosmos.io/job"] == borrowed]
    assert pod["metadata"]["labels"][LABEL_VC] == "vb"  # the extender lets it use vb's node
    assert c.kube.vc_status["va"]["gpus"] == {"total": 8, "used": 16, "borrowed": 8, "lent": 0}
    assert c.kube.vc_status["vb"]["gpus"] == {"total": 8, "used": 0, "borrowed": 0, "lent": 8}


def test_a_lenders_dljob_that_can_never_start_keeps_nothing_from_being_lent() -> None:
    # vb's b-wide asks its 8 GPUs as 8 pods of 1 on 8 nodes: the cohort has 2. Counted as vb's demand
    # it kept vb's idle node from being lent for ever; the simulator rejects such a job up front
    c = Cluster()
    c.kube.add(dljob("b-wide", "vb", 0, gpusPerNode=1), dljob("a0", "va", 1), dljob("a1", "va", 2))
    assert c.step() == ["team/a0", "team/a1"]
    assert c.reason("b-wide") == "Inadmissible"
    assert c.kube.vc_status["vb"]["gpus"] == {"total": 8, "used": 0, "borrowed": 0, "lent": 8}


def test_without_a_cohort_a_virtual_cluster_keeps_its_own_nodes_and_quota() -> None:
    c = Cluster(cohort=None)
    c.kube.add(dljob("a0", "va", 0), dljob("a1", "va", 1))
    assert c.step() == ["team/a0"] and c.nodes_of("a0") == ["n0"]
    assert c.status("a1")["phase"] == "Queued" and c.reason("a1") == "Quota"
    assert c.kube.vc_status["va"]["gpus"]["borrowed"] == c.kube.vc_status["vb"]["gpus"]["lent"] == 0


@pytest.mark.parametrize("reclaim", ["Any", "Never"])
def test_a_lenders_blocked_job_reclaims_through_the_requeue_path(reclaim: str) -> None:
    c = Cluster(preemption={"reclaimWithinCohort": reclaim})
    c.kube.add(dljob("a0", "va", 0))
    assert c.step() == ["team/a0"]
    c.kube.add(dljob("a1", "va", 1))  # started later: less work lost by stopping it
    assert c.step() == ["team/a1"]
    freed = c.nodes_of("a1")
    c.kube.add(dljob("b0", "vb", 200))  # vb wants its quota back: a1's GPUs let b0 start
    admitted = c.step()
    if reclaim == "Never":
        assert admitted == [] and c.status("a1")["phase"] == "Admitted"
        assert c.status("b0")["phase"] == "Queued"
        return
    assert admitted == ["team/b0"] and c.nodes_of("b0") == freed  # on the GPUs the reclaim freed
    st = c.status("a1")
    assert st["phase"] == "Queued" and st["preemptions"] == 1 and "placement" not in st
    assert not [p for p in c.kube.pods.values() if p["metadata"]["labels"]["qosmos.io/job"] == "a1"]
    (message,) = [m for n, r, m in c.kube.events if n == "a1" and r == "Preempted"]
    assert "reclaim" in message and c.status("a1")["conditions"][0]["message"] == message  # the core's reason
    assert c.status("a0")["phase"] == "Admitted"  # more lost work: kept
    assert c.kube.vc_status["va"]["gpus"]["borrowed"] == 0


def test_priority_from_the_dljob_reaches_the_core() -> None:
    assert job_from_dljob(dljob("p", "va", 0, priority=7)).priority == 7
    assert job_from_dljob(dljob("q", "va", 0)).priority == 0
    c = Cluster(cohort=None)
    # FIFO with one 8-GPU node, two jobs submitted in the same second: priority breaks the tie
    c.kube.add(dljob("a-low", "va", 0), dljob("b-high", "va", 0, priority=3))
    assert c.step() == ["team/b-high"]
    assert c.status("a-low")["phase"] == "Queued"


def test_the_crd_model_refuses_limits_without_a_cohort() -> None:
    for f in ("borrowingLimit", "lendingLimit"):
        with pytest.raises(ValueError, match=rf"spec\.quota\.{f} needs spec\.cohort"):
            VirtualClusterSpec.model_validate({"quota": {"gpus": 8, f: 4}})
    # the earlier CRD's stored default borrows nothing: such a VirtualCluster still runs, capped as before
    old = VirtualClusterSpec.model_validate({"quota": {"gpus": 8, "borrowingLimit": 0}}).partition("va")
    assert (old.gpu_quota, old.borrowing_limit, old.cohort) == (8, None, None)
    spec = VirtualClusterSpec.model_validate(
        {
            "cohort": "team",
            "quota": {"gpus": 8, "borrowingLimit": 4, "lendingLimit": 2},
            "preemption": {"withinVirtualCluster": "LowerPriority", "reclaimWithinCohort": "Never"},
        }
    )
    part = spec.partition("va")
    assert (part.cohort, part.gpu_quota, part.borrowing_limit, part.lending_limit) == ("team", 8, 4, 2)
    assert part.preemption == PreemptionPolicy("LowerPriority", "Never")
    assert VirtualClusterSpec.model_validate({}).partition("v").preemption == PreemptionPolicy()
    with pytest.raises(ValueError, match="takes no cohort"):
        VirtualClusterSpec.model_validate({"cohort": "team", "policy": "soda"})
    with pytest.raises(ValueError, match=r"spec\.arraySplit applies only to a policy with job arrays"):
        VirtualClusterSpec.model_validate({"arraySplit": 0.6, "policy": "fifo"})
    assert VirtualClusterSpec.model_validate({"policy": "soda"}).partition("v").array_split == 0.5
    assert VirtualClusterSpec.model_validate({"policy": "soda", "arraySplit": 0.75}).partition("v").array_split == 0.75
    root = crds.crd(crds.VIRTUAL_CLUSTER)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rules = root["properties"]["spec"]["x-kubernetes-validations"]
    paths = {r["fieldPath"] for r in rules if "has(self.cohort)" in r["rule"]}
    assert {".quota.borrowingLimit", ".quota.lendingLimit", ".cohort"} <= paths


def test_a_member_that_admitted_this_pass_lends_what_it_left_idle_to_the_next() -> None:
    """Members' passes run in name order within one plan, and each reads the others' waiting jobs (a
    member with demand does not lend its idle quota). vb admits b0 and has 8 GPUs left idle with no
    demand: vc's pass, after it, borrows them for c1 in the same plan (a view of vb's queue from before
    its admissions would still count b0 as demand, and lend nothing)."""
    kube = FakeKube(
        [gpu_node("n0", pool="a"), gpu_node("n1", pool="b"), gpu_node("n2", pool="b"), gpu_node("n3", pool="c")],
        vcs=[vc("va", "a", quota={"gpus": 8}), vc("vb", "b", quota={"gpus": 16}), vc("vc", "c", quota={"gpus": 8})],
    )
    kube.add(dljob("a0", "va", 0), dljob("b0", "vb", 1), dljob("c0", "vc", 2), dljob("c1", "vc", 3))
    rec = Reconciler(kube, durations=Durations(None), clock=lambda: T0 + 60)  # type: ignore[arg-type]
    assert sorted(rec.run_pass().admitted) == ["team/a0", "team/b0", "team/c0", "team/c1"]
    assert kube.vc_status["vc"]["gpus"]["borrowed"] == 8 and kube.vc_status["vb"]["gpus"]["lent"] == 8
