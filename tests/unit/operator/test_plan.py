"""The pass split in two (issue 21 §2): ``Planner.plan(snapshot, now)`` decides on hand-built snapshots
and returns typed writes, touching nothing; the ``Applier`` executes them in the safe order, stops a
sequence at a refused precondition, and remembers what the apiserver refused for the next plan."""

from __future__ import annotations

import copy
import json
import threading
from typing import Any

import pytest
from kubernetes.client.rest import ApiException
from qosmos.operator.durations import Durations
from qosmos.operator.reconcile import Planner, Reconciler, Snapshot, parse_dljobs
from qosmos.operator.translate import GATE, parse_time, rfc3339
from qosmos.operator.writes import (
    Applier,
    CreatePod,
    DeletePod,
    EnsureService,
    Event,
    LabelNode,
    PatchStatus,
    PatchVCStatus,
    Plan,
    Recorder,
    Sequence,
    Ungate,
    records_only,
)
from qosmos.testing.fakekube import DEFAULT_VCS, FakeKube, dljob_object, gpu_node

T0 = parse_time("2026-01-02T03:04:05Z") or 0.0


def dljob(name: str, gpus: int = 8, created: float = 0.0, **status: Any) -> dict[str, Any]:
    obj = dljob_object(name, T0 + created, gpus=gpus)
    obj["metadata"]["resourceVersion"] = "7"
    obj["status"] = status
    return obj


def snapshot(*jobs: dict[str, Any], nodes: int = 2, pods: list[dict[str, Any]] | None = None) -> Snapshot:
    return Snapshot(
        vcs=copy.deepcopy(list(DEFAULT_VCS)),
        nodes=[gpu_node(f"n{i}") for i in range(nodes)],
        jobs=parse_dljobs([copy.deepcopy(j) for j in jobs]),
        pods=pods or [],
    )


def kinds(seq: Sequence) -> list[str]:
    return [type(w).__name__ for w in seq.writes]


def test_a_plan_reads_nothing_changes_no_input_and_is_the_same_twice() -> None:
    snap = snapshot(dljob("a", 16), dljob("b", 8, created=1.0))
    before = copy.deepcopy(snap)
    first, rep = Planner(durations=Durations(None)).plan(snap, T0 + 10)
    again, _ = Planner(durations=Durations(None)).plan(snap, T0 + 10)
    assert snap == before  # the plan mirrors its status writes on its own copies
    assert first == again
    assert rep.admitted == ["team/a"]  # b waits behind a (FIFO): 16 of the 16 GPUs


def test_an_admission_is_one_sequence_status_first_then_pods_and_service_then_gates() -> None:
    plan, _ = Planner(durations=Durations(None)).plan(snapshot(dljob("a", 16)), T0 + 10)
    labels, *rest = plan.stages
    assert all(isinstance(w, LabelNode) for s in labels for w in s.writes)  # the extender reads them first
    (admission,) = [s for stage in rest for s in stage if s.admits == "team/a"]
    assert kinds(admission) == ["PatchStatus", "Event", "CreatePod", "CreatePod", "EnsureService", "Ungate", "Ungate"]
    status = admission.writes[0]
    assert isinstance(status, PatchStatus) and status.precondition and status.resource_version == "7"
    assert status.status["phase"] == "Admitted" and status.status["placement"]["nodeNames"] == ["n0", "n1"]
    pods = [w for w in admission.writes if isinstance(w, CreatePod)]
    assert all(any(g["name"] == GATE for g in p.pod["spec"]["schedulingGates"]) for p in pods)
    assert {p.attempt for p in pods} == {("uid-a", 0)}
    # the VirtualCluster's status comes last, after every DLJob's
    assert isinstance(plan.stages[-1][-1].writes[-1], PatchVCStatus)


class GatesMeet(FakeKube):
    """An apiserver whose ungate requests each wait until the gang's four are in flight together."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.meet = threading.Barrier(4, timeout=30)

    def ungate(self, namespace: str, name: str, gates: list[dict[str, Any]]) -> None:
        self.meet.wait()  # one at a time, the first would wait alone and break the barrier: the write fails
        super().ungate(namespace, name, gates)


def test_a_gangs_gates_are_removed_by_requests_in_flight_together() -> None:
    """Kubernetes has no multi-object write: the window in which some of a gang's pods may bind while
    a peer is still gated is one round trip only if the gates go out side by side, not one per reply."""
    kube = GatesMeet([gpu_node(f"n{i}") for i in range(4)], [dljob("a", 32)])
    rec = Reconciler(kube, durations=Durations(None), clock=lambda: T0 + 10)  # type: ignore[arg-type]
    rep = rec.run_pass()
    assert rep.admitted == ["team/a"] and len(kube.pods) == 4
    assert not kube.meet.broken
    assert all(not any(g["name"] == GATE for g in p["spec"].get("schedulingGates") or []) for p in kube.pods.values())


def test_a_dljob_its_nodes_could_never_hold_is_inadmissible_and_the_fifo_queue_moves_on() -> None:
    """vc-a (FIFO, no backfilling) on 2 nodes of 8 GPUs: "big" asks 64, "b" behind it 8. Before, big
    held the queue for ever as its head (and CES counted its NoFit as demand to wake nodes for)."""
    kube = FakeKube([gpu_node("n0"), gpu_node("n1")], [dljob("big", 64), dljob("b", 8, created=1.0)])
    rec = Reconciler(kube, durations=Durations(None), clock=lambda: T0 + 10)  # type: ignore[arg-type]
    rep = rec.run_pass()
    assert rep.admitted == ["team/b"]
    st = kube.jobs["big"]["status"]
    assert st["phase"] == "Queued" and st["conditions"][0]["reason"] == "Inadmissible"
    assert (
        "its fixed shape can never fit in vc-a: only 2 eligible nodes have 8 GPUs; placement needs 8"
        in (st["conditions"][0]["message"])
    )


def test_a_plan_on_the_state_it_made_writes_nothing_more() -> None:
    kube = FakeKube([gpu_node("n0"), gpu_node("n1")], [dljob("a", 16)])
    now = T0 + 10
    rec = Reconciler(kube, durations=Durations(None), clock=lambda: now)  # type: ignore[arg-type]
    rec.run_pass()
    for name in list(kube.pods):
        kube.bind(name, "n0" if name.endswith("-0") else "n1")
    rec.run_pass()  # Running
    assert kube.jobs["a"]["status"]["phase"] == "Running"
    plan, rep = rec.planner.plan(rec.read(), now)
    assert plan.writes() == [] and rep.admitted == []


def test_a_queued_job_whose_node_is_still_held_waits_with_the_cores_reason_in_one_write() -> None:
    held = dljob("a", 8, phase="Running", admittedAt=rfc3339(T0), startTime=rfc3339(T0),
                 placement={"nodes": 1, "gpusPerNode": 8, "nodeNames": ["n0"], "shape": "1x8"})  # fmt: skip
    plan, rep = Planner(durations=Durations(None)).plan(snapshot(held, dljob("b", 8, created=1), nodes=1), T0 + 10)
    (seq,) = [s for stage in plan.stages for s in stage if any(getattr(w, "name", "") == "b" for w in s.writes)]
    (patch,) = seq.writes
    assert isinstance(patch, PatchStatus) and not patch.precondition
    assert patch.status["phase"] == "Queued" and patch.status["conditions"][0]["reason"] == "Head"
    # a's pods were never created (the snapshot has none) and it is Running: its gang failed
    assert rep.restarted == ["team/a"]


def test_a_requeue_stops_the_pods_of_the_placement_in_the_same_sequence_as_its_status() -> None:
    placed = dljob("a", 8, phase="Admitted", admittedAt=rfc3339(T0),
                   placement={"nodes": 1, "gpusPerNode": 8, "nodeNames": ["gone"], "shape": "1x8"})  # fmt: skip
    plan, rep = Planner(durations=Durations(None)).plan(snapshot(placed, nodes=1), T0 + 10)
    assert rep.preempted == ["team/a"]
    seq = next(s for stage in plan.stages for s in stage if isinstance(s.writes[0], PatchStatus))
    assert kinds(seq)[:3] == ["PatchStatus", "DeletePod", "Event"]
    assert seq.writes[0].status["conditions"][0]["reason"] == "NodeLost"  # type: ignore[union-attr]
    assert seq.writes[1] == DeletePod("team", "a-0-0")


def test_records_wait_for_the_admissions_but_a_requeue_does_not() -> None:
    w = Recorder()
    done = PatchStatus("team", "a", {"phase": "Succeeded"})
    w.add("team/a", done, Event({}, "Succeeded", ""))
    w.add("team/r", PatchStatus("team", "r", {"phase": "Queued"}), DeletePod("team", "r-0-0"))
    w.add("team/x", PatchStatus("team", "x", {"phase": "Running"}))
    w.stage(defer=records_only)
    w.add("team/b", PatchStatus("team", "b", {"phase": "Admitted"}, "7", True), admits="team/b")
    w.add("team/x", PatchStatus("team", "x", {"phase": "Queued"}))  # x is reclaimed later in the pass
    w.stage()
    w.add("vc", PatchVCStatus("vc", {}))
    requeue, admissions, vc, records = w.done().stages
    assert [s.writes[0].name for s in requeue] == ["r"]  # type: ignore[union-attr]
    # x's record goes with its later write, before it: a Running patch after the Queued one would undo it
    assert [[w.status["phase"] for w in s.writes] for s in admissions] == [["Admitted"], ["Running", "Queued"]]  # type: ignore[union-attr]
    assert vc == [Sequence((PatchVCStatus("vc", {}),))]
    assert records == [Sequence((done, Event({}, "Succeeded", "")))]
    # an admission is never held back, even one made only of status writes
    w = Recorder()
    w.add("team/b", PatchStatus("team", "b", {"phase": "Admitted"}, "7", True), admits="team/b")
    w.stage(defer=lambda _: True)
    assert w.done().stages == [[Sequence((PatchStatus("team", "b", {"phase": "Admitted"}, "7", True),), "team/b")]]


def test_a_finished_gangs_record_is_written_after_the_admission_its_gpus_allow() -> None:
    kube = FakeKube([gpu_node("n0"), gpu_node("n1")], [dljob("a", 16)])
    now = T0 + 10
    rec = Reconciler(kube, durations=Durations(None), clock=lambda: now)  # type: ignore[arg-type]
    rec.run_pass()
    kube.run_new_pods("Succeeded")  # a's gang ran and finished before the next pass
    kube.add(dljob("b", 16, created=5))
    plan, rep = rec.planner.plan(rec.read(), now)
    assert rep.admitted == ["team/b"] and rep.finished == ["team/a"]
    stage_of = {
        (w.name, w.status.get("phase")): i
        for i, stage in enumerate(plan.stages)
        for s in stage
        for w in s.writes
        if isinstance(w, PatchStatus)
    }
    assert stage_of[("b", "Admitted")] < stage_of[("a", "Succeeded")] == len(plan.stages) - 1


# ---- the applier --------------------------------------------------------------------------------


def test_a_refused_precondition_stops_its_sequence_only() -> None:
    kube = FakeKube([gpu_node("n0")], [dljob("a"), dljob("b")])
    pod = {"metadata": {"name": "a-0-0", "namespace": "team"}, "spec": {}}
    stale = Sequence(
        (PatchStatus("team", "a", {"phase": "Admitted"}, "stale-version", True), CreatePod(pod, "team/a", ("u", 0))),
        admits="team/a",
    )
    rv = kube.jobs["b"]["metadata"]["resourceVersion"]
    other = Sequence(
        (PatchStatus("team", "b", {"phase": "Admitted"}, rv, True), Event(kube.jobs["b"], "Admitted", "")),
        admits="team/b",
    )
    done = Applier(kube).apply(Plan([[stale, other]]))  # type: ignore[arg-type]
    assert done.stale == ["team/a"] and done.admitted == ["team/b"]
    assert kube.pods == {} and "phase" not in (kube.jobs["a"].get("status") or {})
    assert kube.jobs["b"]["status"]["phase"] == "Admitted" and [r for _, r, _ in kube.events] == ["Admitted"]


def test_a_later_precondition_uses_the_version_the_applys_own_write_returned() -> None:
    kube = FakeKube([gpu_node("n0")], [dljob("a")])
    rv = kube.jobs["a"]["metadata"]["resourceVersion"]
    first = Sequence((PatchStatus("team", "a", {"phase": "Queued"}),))
    second = Sequence((PatchStatus("team", "a", {"phase": "Admitted"}, rv, True),), admits="team/a")
    done = Applier(kube).apply(Plan([[first], [second]]))
    assert done.admitted == ["team/a"] and kube.jobs["a"]["status"]["phase"] == "Admitted"


class Refusing(FakeKube):
    """An apiserver that refuses the gang's pods (422), as admission plugins or a webhook may."""

    def create_pod(self, pod: dict[str, Any]) -> bool:
        body = json.dumps({"message": 'Pod "x" is invalid: spec.containers[0].image: Required value'})
        raise _api(422, body)


def _api(status: int, body: str) -> ApiException:
    exc = ApiException(status=status, reason="Unprocessable Entity")
    exc.body = body
    return exc


def test_a_refused_pod_fails_its_dljob_with_the_apiservers_words_at_the_next_pass() -> None:
    kube = Refusing([gpu_node("n0")], [dljob("a")])
    now = T0 + 10
    rec = Reconciler(kube, durations=Durations(None), clock=lambda: now)  # type: ignore[arg-type]
    rep = rec.run_pass()
    assert rep.admitted == ["team/a"] and rep.wake_at == pytest.approx(now)  # decided again at once
    assert rec.planner.memory.refused == {("uid-a", 0): 'Pod "x" is invalid: spec.containers[0].image: Required value'}
    rec.run_pass()
    st = kube.jobs["a"]["status"]
    assert st["phase"] == "Failed" and st["conditions"][0]["reason"] == "InvalidPod"
    assert "image: Required value" in st["conditions"][0]["message"]
    assert ("a", "InvalidPod") in [(n, r) for n, r, _ in kube.events]
    assert rec.planner.memory.refused == {}


def test_a_service_known_to_exist_is_not_asked_for_again() -> None:
    kube = FakeKube([gpu_node("n0"), gpu_node("n1")], [dljob("a", 16)])
    rec = Reconciler(kube, durations=Durations(None), clock=lambda: T0 + 10)  # type: ignore[arg-type]
    rec.run_pass()
    assert rec.planner.memory.headless == {"uid-a"}
    plan, _ = rec.planner.plan(rec.read(), T0 + 11)  # the pods exist, not bound yet: nothing to create
    assert not any(isinstance(w, (EnsureService, CreatePod, Ungate)) for w in plan.writes())


def test_far_positions_drift_are_refreshed_at_most_every_refresh_s_near_ones_at_once() -> None:
    """40 one-GPU jobs on one 8-GPU node; the 8 running finish and the next 8 start: every position
    moves by 8. Near the head (< NEAR_HEAD) that is written at once; farther back only once REFRESH_S
    has passed since the job's last write (a 2,000-job queue under churn rewrote every job every pass)."""
    from qosmos.operator.reconcile import NEAR_HEAD, REFRESH_S

    queued = [dljob(f"q{i:02d}", 1, created=float(i)) for i in range(40)]
    planner = Planner(durations=Durations(None))
    plan, rep = planner.plan(snapshot(*queued, nodes=1), T0 + 100)
    assert rep.admitted == [f"team/q{i:02d}" for i in range(8)]
    written = {w.name: w.status for w in plan.writes() if isinstance(w, PatchStatus)}
    assert written["q39"]["queuePosition"] == 39
    for j in queued:  # the state it made; then the 8 running ones finish
        j["status"] = {**j["status"], **written[j["metadata"]["name"]]}
    for j in queued[:8]:
        j["status"]["phase"] = "Succeeded"

    def moved(now: float) -> set[str]:
        plan, rep = planner.plan(snapshot(*queued, nodes=1), now)
        assert rep.admitted == [f"team/q{i:02d}" for i in range(8, 16)]
        return {w.name for w in plan.writes() if isinstance(w, PatchStatus) and "queuePosition" in w.status}

    near = {f"q{i:02d}" for i in range(16, 40) if i - 8 < NEAR_HEAD}  # q_i: from position i to i - 8
    far = {f"q{i:02d}" for i in range(16, 40)} - near
    assert near and far
    soon = moved(T0 + 101)
    assert near <= soon and not soon & far
    assert far <= moved(T0 + 101 + REFRESH_S)


def test_a_move_within_the_near_region_drifts_coming_near_is_written_at_once() -> None:
    """Two of the running one-GPU jobs finish each pass and two start: every queued position moves by 2.
    Written at once: a first position, a new head, a job coming below NEAR_HEAD; a move within the near
    region (5 -> 3, 9 -> 7), and its message now naming another job ahead, drifts like a far one (each
    admission rewrote all NEAR_HEAD jobs of its queue: 300 of a pass's ~670 writes with Kueue's 30
    queues)."""
    from qosmos.operator.reconcile import NEAR_HEAD, REFRESH_S

    assert NEAR_HEAD == 10
    queued = [dljob(f"q{i:02d}", 1, created=float(i)) for i in range(40)]
    planner = Planner(durations=Durations(None))

    def step(now: float, finishing: list[dict[str, Any]], admitted: list[str]) -> dict[str, int]:
        for j in finishing:
            j["status"]["phase"] = "Succeeded"
        plan, rep = planner.plan(snapshot(*queued, nodes=1), now)
        assert rep.admitted == [f"team/{n}" for n in admitted]
        written = {w.name: w.status for w in plan.writes() if isinstance(w, PatchStatus)}
        for j in queued:  # the state the writes made
            j["status"] = {**j.get("status", {}), **written.get(j["metadata"]["name"], {})}
        return {n: st["queuePosition"] for n, st in written.items() if st.get("queuePosition") is not None}

    first = step(T0 + 100, [], [f"q{i:02d}" for i in range(8)])
    assert first["q10"] == 10 and first["q39"] == 39  # every first position at once
    # q10-q17 come near (10 -> 2 ... 17 -> 9): at once; q18 on (18 -> 10) drift, not due yet
    assert step(T0 + 101, queued[:2], ["q08", "q09"]) == {f"q{i:02d}": i - 8 for i in range(10, 18)}
    # q12 becomes the head (its reason changes: written, position and all); q13 5 -> 3 ... q17 9 -> 7 move
    # within the near region, their message naming another job ahead: they drift; q18 and q19 come near
    assert step(T0 + 102, queued[2:4], ["q10", "q11"]) == {"q12": 2, "q18": 8, "q19": 9}
    due = step(T0 + 102 + REFRESH_S, queued[4:6], ["q12", "q13"])
    assert due["q17"] == 5 and due["q20"] == 8 and due["q30"] == 18  # once due: near and far refreshed


def test_drift_refreshes_are_bounded_per_pass_stalest_first() -> None:
    """150 queued one-GPU jobs whose far positions all drift and are all due: one pass writes at most
    DRIFT_WRITES of them, the ones written longest ago first; later passes the rest, as fast as the
    bucket refills (DRIFT_WRITES_PER_S), whatever the number of passes."""
    from qosmos.operator.reconcile import DRIFT_WRITES, DRIFT_WRITES_PER_S, REFRESH_S

    queued = [dljob(f"q{i:03d}", 1, created=float(i)) for i in range(150)]
    planner = Planner(durations=Durations(None))
    plan, _ = planner.plan(snapshot(*queued, nodes=1), T0 + 100)
    written = {w.name: w.status for w in plan.writes() if isinstance(w, PatchStatus)}
    for j in queued:
        j["status"] = {**j["status"], **written[j["metadata"]["name"]]}
    for j in queued[:8]:
        j["status"]["phase"] = "Succeeded"
    for i, j in enumerate(queued):  # written at different times: q149 longest ago
        planner.memory.refreshed[f"team/{j['metadata']['name']}"] = T0 + 100 - i

    def drift(now: float) -> list[str]:
        plan, _ = planner.plan(snapshot(*queued, nodes=1), now)
        return [w.name for w in plan.writes() if isinstance(w, PatchStatus) and w.status.get("queuePosition")]

    # q008-q015 start; q_i moves from position i to i - 8: q016 and q017 end near the head (written at
    # once), q018-q149 drift, of which the DRIFT_WRITES written longest ago go now, the rest next pass
    near = {"q016", "q017"}
    t = T0 + 100 + REFRESH_S + 1
    first = set(drift(t))
    assert first == near | {f"q{i:03d}" for i in range(150 - DRIFT_WRITES, 150)}
    # one second on: the bucket holds DRIFT_WRITES_PER_S more, the next stalest
    k = int(DRIFT_WRITES_PER_S)
    assert set(drift(t + 1)) == near | {f"q{i:03d}" for i in range(150 - DRIFT_WRITES - k, 150 - DRIFT_WRITES)}
    assert set(drift(t + 1)) == near  # a second pass at the same time finds it empty
    rest = set(drift(t + 1 + (150 - 18 - DRIFT_WRITES) / DRIFT_WRITES_PER_S))
    assert rest == near | {f"q{i:03d}" for i in range(18, 150 - DRIFT_WRITES - k)}


def test_a_prediction_appearing_drifts_it_does_not_rewrite_every_queued_job_at_once() -> None:
    """QSSF's first observation gives every queued job a prediction in the same pass; writing each at
    once was one status patch per queued DLJob (15,000 with Kueue's file). It drifts: written with the
    job's next write, or once REFRESH_S has passed."""
    from qosmos.extender.core.types import Job
    from qosmos.operator.reconcile import REFRESH_S

    queued = [dljob(f"q{i:02d}", 8, created=float(i)) for i in range(20)]
    planner = Planner(durations=Durations(None))
    plan, _ = planner.plan(snapshot(*queued, nodes=1), T0 + 100)
    written = {w.name: w.status for w in plan.writes() if isinstance(w, PatchStatus)}
    for j in queued:
        j["status"] = {**j["status"], **written.get(j["metadata"]["name"], {})}
    assert not any("predictedDurationSeconds" in st for st in written.values())  # no history yet
    planner.durations.observe(Job("team/done", T0, gpus=8, user="team"), 300.0, T0 + 100)

    def predicted(now: float) -> set[str]:
        plan, _ = planner.plan(snapshot(*queued, nodes=1), now)
        written = {w.name: w.status for w in plan.writes() if isinstance(w, PatchStatus)}
        for j in queued:  # the state the writes made
            j["status"] = {**j["status"], **written.get(j["metadata"]["name"], {})}
        return {n for n, st in written.items() if "predictedDurationSeconds" in st}

    # q00 runs: q01 is the new head, q10 comes below NEAR_HEAD; their writes carry their predictions
    assert predicted(T0 + 101) == {"q01", "q10"}
    assert predicted(T0 + 101 + REFRESH_S) == {f"q{i:02d}" for i in range(2, 20)} - {"q10"}  # the rest, drifting


def test_first_statuses_beyond_the_head_come_from_a_bucket_the_front_of_every_queue_first() -> None:
    """An arrival burst: 260 one-GPU jobs in each of two VirtualClusters of one 8-GPU node. The first
    NEAR_HEAD positions of each queue get their first status at once; the rest from the FIRST_WRITES
    bucket, position by position across both queues, refilled at FIRST_WRITES_PER_S; a job admitted before
    its turn never gets a Queued status."""
    from qosmos.operator.reconcile import FIRST_WRITES, FIRST_WRITES_PER_S, NEAR_HEAD

    vcs = [{"metadata": {"name": v}, "spec": {"policy": "fifo", "placement": "consolidate",
                                              "nodeSelector": {"pool": v}}} for v in ("va", "vb")]  # fmt: skip
    nodes = [gpu_node("n0", pool="va"), gpu_node("n1", pool="vb")]
    jobs = {v: [dljob_object(f"{v}-{i:03d}", T0 + i, vc=v, gpus=1) for i in range(260)] for v in ("va", "vb")}
    for j in [*jobs["va"], *jobs["vb"]]:
        j["metadata"]["resourceVersion"] = "7"
    planner = Planner(durations=Durations(None))

    def step(now: float) -> dict[str, dict[str, Any]]:
        snap = Snapshot(vcs=copy.deepcopy(vcs), nodes=copy.deepcopy(nodes),
                        jobs=parse_dljobs([copy.deepcopy(j) for j in [*jobs["va"], *jobs["vb"]]]), pods=[])  # fmt: skip
        plan, _ = planner.plan(snap, now)
        written = {w.name: dict(w.status) for w in plan.writes() if isinstance(w, PatchStatus)}
        for j in [*jobs["va"], *jobs["vb"]]:
            j["status"] = {**(j.get("status") or {}), **written.get(j["metadata"]["name"], {})}
        return written

    first = step(T0 + 300)
    queued = {n: st for n, st in first.items() if st.get("phase") == "Queued"}
    positions = sorted(st["queuePosition"] for st in queued.values())
    # 8 admitted in each queue (positions 0-7 of this pass's order); the waiting ones before NEAR_HEAD
    # at once, then FIRST_WRITES more, the front of both queues first
    assert sum(st.get("phase") == "Admitted" for st in first.values()) == 16
    assert positions == sorted([*range(8, NEAR_HEAD)] * 2 + [NEAR_HEAD + i // 2 for i in range(FIRST_WRITES)])
    assert all({"queuePosition", "conditions"} <= set(st) for st in queued.values())  # whole statuses
    # one second on (the 16 admitted out of the queues: every position 8 less): FIRST_WRITES_PER_S more,
    # the next positions of both queues
    more = {n: st for n, st in step(T0 + 301).items() if st.get("phase") == "Queued"}
    nxt = NEAR_HEAD + FIRST_WRITES // 2 - 8
    k = int(FIRST_WRITES_PER_S)
    assert sorted(st["queuePosition"] for st in more.values()) == sorted(nxt + i // 2 for i in range(k))
    assert step(T0 + 301) == {}  # a pass at the same time: the bucket is empty, nothing else changed
    # the queues' tails: never written while waiting; admitted ones go straight to Admitted
    tail = [j for j in jobs["va"] if not j.get("status")]
    assert len(tail) == 260 - NEAR_HEAD - (FIRST_WRITES + k) // 2


def test_a_refusal_of_a_job_deleted_before_the_next_pass_is_forgotten() -> None:
    kube = Refusing([gpu_node("n0")], [dljob("a")])
    rec = Reconciler(kube, durations=Durations(None), clock=lambda: T0 + 10)  # type: ignore[arg-type]
    rec.run_pass()
    assert ("uid-a", 0) in rec.planner.memory.refused
    kube.delete_dljob("team", "a")
    rec.run_pass()
    assert rec.planner.memory.refused == {}


class FixedRuns(Durations):
    """Every job runs 100 s; a running one 100 s in all, or 10 s more once it has run that long."""

    def __init__(self) -> None:
        super().__init__(None)

    def predict(self, job: Any, now: float) -> float | None:
        return 100.0

    def predict_run(self, job: Any, now: float, elapsed: float) -> float | None:
        return max(100.0, elapsed + 10.0)


def test_the_eta_forecasts_of_a_pass_share_a_budget_stalest_virtual_cluster_first(monkeypatch: Any) -> None:
    """Four VirtualClusters, each a node of 8 GPUs and 16 one-GPU jobs: 8 start, 8 wait 100 s. Each
    forecast makes 8 + 8 job decisions; with a pass budget of 40 two run whole, the third is cut short
    (its jobs keep what ETA they had) and the fourth waits for a later pass, which serves it first. The
    passes are REFRESH_S apart: an ETA appearing on a job with a status is a drift refresh."""
    from qosmos.operator import reconcile
    from qosmos.operator.reconcile import REFRESH_S

    monkeypatch.setattr(reconcile, "FORECAST_PASS_WORK", 40)
    pools = "abcd"
    vcs = [{"metadata": {"name": f"vc-{x}"}, "spec": {"policy": "fifo", "placement": "consolidate",
                                                       "nodeSelector": {"pool": x}}} for x in pools]  # fmt: skip
    jobs = [dljob_object(f"{x}{i:02d}", T0 + i, vc=f"vc-{x}", gpus=1) for x in pools for i in range(16)]
    for j in jobs:
        j["metadata"]["resourceVersion"] = "7"
        j["status"] = {}
    planner = Planner(durations=FixedRuns())

    def etas(now: float) -> dict[str, float | None]:
        snap = Snapshot(vcs=copy.deepcopy(vcs), nodes=[gpu_node(f"n-{x}", pool=x) for x in pools],
                        jobs=parse_dljobs(copy.deepcopy(jobs)), pods=[])  # fmt: skip
        plan, _ = planner.plan(snap, now)
        written = {w.name: w.status for w in plan.writes() if isinstance(w, PatchStatus)}
        for j in jobs:  # the state the writes made
            j["status"] = {**j["status"], **written.get(j["metadata"]["name"], {})}
        return {
            j["metadata"]["name"]: parse_time(j["status"].get("eta")) for j in jobs if j["status"]["phase"] == "Queued"
        }

    first = etas(T0 + 100)
    waiting = [f"{x}{i:02d}" for x in pools for i in range(8, 16)]
    assert sorted(first) == waiting
    assert all(first[f"{x}{i:02d}"] == T0 + 200 for x in "ab" for i in range(8, 16))  # whole forecasts
    assert all(first[f"{x}{i:02d}"] is None for x in "cd" for i in range(8, 16))  # cut short, not reached
    second = etas(T0 + 100 + REFRESH_S)
    # vc-d (never forecast) first, then vc-a; vc-b is cut short and keeps its ETAs, vc-c gets nothing yet
    assert all(second[f"d{i:02d}"] == T0 + 200 for i in range(8, 16))
    assert all(second[f"{x}{i:02d}"] == T0 + 200 for x in "ab" for i in range(8, 16))
    assert all(second[f"c{i:02d}"] is None for i in range(8, 16))
    t = T0 + 100 + REFRESH_S
    assert planner.memory.forecast_at == {"vc-a": t, "vc-b": t, "vc-c": T0 + 100, "vc-d": t}
    third = etas(T0 + 100 + 2 * REFRESH_S)  # vc-c's turn
    assert all(v == T0 + 200 for v in third.values())


class FifoOnOneNode:
    """``jobs`` (each DLJob as the apiserver holds it) in a FIFO VirtualCluster of one 8-GPU node, planned
    by a Planner of :class:`FixedRuns`; its status writes are taken into the jobs, as the apiserver would."""

    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        self.jobs = jobs
        self.vcs = [{"metadata": {"name": "vc-a"}, "spec": {"policy": "fifo", "placement": "consolidate"}}]
        for j in jobs:
            j["metadata"]["resourceVersion"] = "7"
            j["status"] = {}
        self.planner = Planner(durations=FixedRuns())

    def plan(self, now: float) -> dict[str, dict[str, Any]]:
        """A pass at ``now``: each job's status after its writes."""
        snap = Snapshot(vcs=copy.deepcopy(self.vcs), nodes=[gpu_node("n0")],
                        jobs=parse_dljobs(copy.deepcopy(self.jobs)), pods=[])  # fmt: skip
        p, _ = self.planner.plan(snap, now)
        written = {w.name: w.status for w in p.writes() if isinstance(w, PatchStatus)}
        for j in self.jobs:
            j["status"] = {**j["status"], **written.get(j["metadata"]["name"], {})}
        return {j["metadata"]["name"]: j["status"] for j in self.jobs}


def test_a_genie_task_of_a_model_without_a_profile_ends_when_its_elapsed_time_says() -> None:
    """A running GENIE task whose model type has no profile is estimated like any job (its predicted run
    time): in the ETA forecast its end is the run time predicted given the time it has run (seed 004
    §VI-A), as another job's, not its expected end at admission (overdue: "now")."""
    task = {"modelType": "NoSuchNet", "globalBatchSize": 64, "iterations": 1000}
    jobs = [dljob_object("a", T0, **task), dljob_object("b", T0 + 1)]
    plan = FifoOnOneNode(jobs).plan
    st = plan(T0 + 10)
    assert st["a"]["phase"] == "Admitted" and st["b"]["phase"] == "Queued"
    assert parse_time(st["b"]["eta"]) == T0 + 110  # a: 100 s predicted
    later = plan(T0 + 10 + 150)  # a overdue after 150 s: predicted to run 160 s in all
    assert parse_time(later["b"]["eta"]) == T0 + 10 + 160


def test_a_job_restarted_after_a_failure_is_expected_to_run_the_rest_from_its_restart() -> None:
    """A gang restarted after a failure resumes: the rest of its predicted run time (less the 60 s its
    first segment ran) runs from the new segment's start, not from its admission, in the ETAs of the jobs
    behind it as in the pass's own view of when its GPUs free."""
    jobs = [dljob_object("a", T0), dljob_object("b", T0 + 1)]
    plan = FifoOnOneNode(jobs).plan
    assert plan(T0 + 10)["a"]["phase"] == "Admitted"
    # a ran 60 s, failed, and its gang runs again since T0 + 100 (what the failure's restart writes)
    jobs[0]["status"] |= {"startTime": rfc3339(T0 + 100), "executedSeconds": 60.0, "restarts": 1}
    st = plan(T0 + 110)
    assert st["a"]["phase"] == "Admitted" and st["b"]["phase"] == "Queued"
    assert parse_time(st["b"]["eta"]) == T0 + 140  # T0 + 100 + (100 - 60): 70 s run, 100 predicted in all


def test_parsed_dljobs_are_reused_while_their_resource_version_stands() -> None:
    from qosmos.operator.reconcile import Parsed

    a, b = dljob("a", 8), dljob("b", 8, created=1.0)
    parsed: Parsed = {}
    first = parse_dljobs([a, b], parsed)
    assert set(parsed) == {"uid-a", "uid-b"}
    b2 = copy.deepcopy(b)
    b2["metadata"]["resourceVersion"] = "8"
    b2["status"] = {"phase": "Queued", "queuedSince": rfc3339(T0 + 5)}
    again = parse_dljobs([copy.deepcopy(a), b2], parsed)
    assert again[0].spec is first[0].spec and again[0].job is first[0].job  # a: same version, not parsed again
    assert again[1].job is not first[1].job and again[1].job.enqueued == T0 + 5  # b moved: parsed anew
    assert parse_dljobs([b2], parsed)[0].job is again[1].job and set(parsed) == {"uid-b"}  # a deleted: forgotten
    bad = copy.deepcopy(b2)
    bad["metadata"]["resourceVersion"] = "9"
    bad["spec"]["gpus"] = -1
    assert parse_dljobs([bad], parsed) == [] and parsed == {}  # refused, and nothing kept for it


def test_the_plans_copy_of_a_job_is_equal_and_independent() -> None:
    from qosmos.operator.reconcile import _own

    (dl,) = parse_dljobs([dljob("a", 8)])
    own = _own(dl)
    assert own.job == dl.job and own.job is not dl.job
    own.job.predicted_duration = 42.0
    own.status["phase"] = "Queued"
    assert dl.job.predicted_duration is None and dl.status == {}


def test_a_dljob_is_predicted_when_first_seen_and_keeps_it_a_restart_reads_it_from_its_status() -> None:
    """QSSF predicts a job at its submission (seed 000 §4.2.2), as the simulator does: a queued DLJob keeps
    the run time it was first predicted (its place in QSSF's order) while the history grows; a later DLJob
    gets the newer history's. The operator predicted every queued job again at every pass (re-ranking jobs
    the simulator had ranked once). A restarted operator ranks it by the prediction its status shows."""
    from qosmos.extender.core.types import Job

    jobs = [dljob("q0", created=1.0), dljob("q1", created=2.0)]
    planner = Planner(durations=Durations(None))
    planner.durations.observe(Job("team/done", T0, gpus=8, user="team", name="done"), 300.0, T0 + 50)
    planner.plan(snapshot(*jobs, nodes=1), T0 + 100)
    first = dict(planner.predictions.known)
    assert set(first) == {"uid-q0", "uid-q1"} and first["uid-q1"] > 0
    planner.durations.observe(Job("team/done2", T0, gpus=8, user="team", name="done2"), 3000.0, T0 + 150)
    jobs.append(dljob("q2", created=160.0))
    planner.plan(snapshot(*jobs, nodes=1), T0 + 200)
    known = planner.predictions.known
    assert known["uid-q1"] == first["uid-q1"]  # kept
    assert known["uid-q2"] > first["uid-q1"]  # the newer history's
    jobs.pop(0)  # q0 gone: its prediction is forgotten
    planner.plan(snapshot(*jobs, nodes=1), T0 + 201)
    assert set(planner.predictions.known) == {"uid-q1", "uid-q2"}

    restarted = Planner(durations=Durations(None))  # a history that would predict otherwise (none)
    jobs[0]["status"] = {"predictedDurationSeconds": 123.4}
    restarted.plan(snapshot(*jobs, nodes=1), T0 + 300)
    assert restarted.predictions.known == {"uid-q1": 123.4}
