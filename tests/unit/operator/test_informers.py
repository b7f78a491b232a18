"""The operator's watch caches (issue 21 §1): a store kept in step by list + watch, resumed from its
position, listed again on 410; the pass's own writes written through (read-your-writes) without the
stream and the write-through undoing each other; finished DLJobs never held."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from qosmos.operator.durations import Durations
from qosmos.operator.informers import GangPods, Informers, Reflector, Store
from qosmos.operator.kube import Kube
from qosmos.operator.reconcile import Reconciler
from qosmos.testing.fakekube import DEFAULT_VCS, FakeKube, dljob_object, gpu_node

Obj = dict[str, Any]


def obj(name: str, rv: int, ns: str = "team", **extra: Any) -> Obj:
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": str(rv), **extra}}


# ---- the store's ordering rules --------------------------------------------------------------
def test_events_replace_older_objects_and_deletions_remove_them() -> None:
    s = Store("dljobs")
    s.replace([obj("a", 5), obj("b", 6)], 6)
    assert s.rv == 6 and s.synced.is_set()
    assert s.event("MODIFIED", obj("a", 8, labels={"x": "1"}))
    assert s.get("team/a")["metadata"]["labels"] == {"x": "1"}  # type: ignore[index]
    assert s.rv == 8
    assert s.event("DELETED", obj("b", 9))
    assert s.get("team/b") is None and s.rv == 9
    s.bookmark(20)
    assert s.rv == 20 and len(s) == 1


def test_a_write_through_is_kept_until_the_stream_passes_it() -> None:
    s = Store("dljobs")
    s.replace([obj("a", 5)], 5)
    assert s.wrote(obj("a", 10, labels={"admitted": "yes"}))  # the pass's own write, not delivered yet
    # an event from before the write (another writer at 7) must not undo it
    assert not s.event("MODIFIED", obj("a", 7, labels={"kubelet": "x"}))
    assert s.get("team/a")["metadata"]["labels"] == {"admitted": "yes"}  # type: ignore[index]
    assert s.event("MODIFIED", obj("a", 10, labels={"admitted": "yes"}))  # the write's own event
    assert s.event("MODIFIED", obj("a", 12, labels={"later": "1"}))  # and what came after it
    assert s.get("team/a")["metadata"]["labels"] == {"later": "1"}  # type: ignore[index]
    # a write whose version the stream has passed already is old news: not taken
    assert not s.wrote(obj("a", 11, labels={"stale": "1"}))
    assert s.get("team/a")["metadata"]["labels"] == {"later": "1"}  # type: ignore[index]
    # a version that is not an integer is never written through (the event is the only update)
    assert not s.wrote({"metadata": {"name": "a", "namespace": "team", "resourceVersion": "x1"}})


def test_a_written_object_the_selector_drops_leaves_the_store() -> None:
    s = Store("dljobs", lambda o: "qosmos.io/finished" not in (o["metadata"].get("labels") or {}))
    s.replace([obj("a", 5)], 5)
    s.wrote(obj("a", 6, labels={"qosmos.io/finished": "true"}))
    assert s.get("team/a") is None and len(s) == 0


def test_an_object_deleted_by_us_is_not_brought_back_by_an_older_event() -> None:
    s = Store("pods")
    s.replace([obj("p", 5)], 5)
    s.deleted("team/p")
    assert s.get("team/p") is None
    assert not s.event("MODIFIED", obj("p", 6))  # in flight from before the delete
    assert s.get("team/p") is None
    assert s.event("DELETED", obj("p", 7))
    assert s.event("ADDED", obj("p", 9))  # created again later (same name): taken
    assert s.get("team/p") is not None


def test_a_relist_keeps_writes_newer_than_the_list() -> None:
    s = Store("pods")
    s.replace([obj("old", 3)], 3)
    s.wrote(obj("new", 12))
    s.replace([obj("other", 10)], 10)  # listed at 10: "new" (12) is not in it yet, "old" is gone
    assert {k for k in ("team/old", "team/new", "team/other") if s.get(k)} == {"team/new", "team/other"}
    assert s.lists == 2


# ---- the reflector ----------------------------------------------------------------------------
class Script:
    """A scripted apiserver: lists and watch streams in order; records the versions watched from."""

    def __init__(self, lists: list[tuple[list[Obj], int]], streams: list[list[Obj] | Exception]) -> None:
        self.lists, self.streams = lists, streams
        self.watched_from: list[int] = []
        self.done = threading.Event()

    def list_(self) -> tuple[list[Obj], int]:
        return self.lists.pop(0)

    def watch(self, rv: int) -> Iterator[Obj]:
        self.watched_from.append(rv)
        if not self.streams:
            self.done.set()
            raise _Stop
        item = self.streams.pop(0)
        if isinstance(item, Exception):
            raise item
        yield from item


class _Stop(Exception):
    pass


class Gone(Exception):
    status = 410


def run_script(script: Script, store: Store) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    r = Reflector(
        store, script.list_, script.watch, lambda s, t, o: seen.append((t, o.get("metadata", {}).get("name", "")))
    )
    t = threading.Thread(target=r.run, daemon=True)
    t.start()
    try:
        assert script.done.wait(10), script.watched_from
    finally:
        r.stopped.set()
        t.join(5)
    return seen


def test_the_reflector_resumes_from_its_position_and_lists_again_on_410(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("qosmos.operator.informers.BACKOFF_S", (0.0,))
    ev = lambda t, o: {"type": t, "object": o}  # noqa: E731
    script = Script(
        lists=[([obj("a", 5)], 5), ([obj("a", 40), obj("c", 41)], 41), ([obj("a", 40)], 46)],
        streams=[
            [ev("ADDED", obj("b", 7)), ev("BOOKMARK", {"metadata": {"resourceVersion": "15"}})],  # server timeout
            ConnectionError("reset"),  # resumed from the same place
            [ev("MODIFIED", obj("a", 20)), ev("ERROR", {"kind": "Status", "code": 410, "reason": "Expired"})],
            [ev("DELETED", obj("c", 45))],
            Gone(),  # a watch refused with 410 at the request: listed again too
        ],
    )
    s = Store("dljobs")
    seen = run_script(script, s)
    # list@5, watch 5 -> b@7, bookmark 15; reset; watch 15 -> a@20, 410 -> list@41; watch 41 -> c deleted;
    # watch 45 refused (410) -> list@46; watch 46
    assert script.watched_from[:6] == [5, 15, 15, 41, 45, 46]  # then the script has no more
    assert s.lists == 3  # the initial list, after the Expired event, after the refused watch
    assert ("ADDED", "b") in seen and ("MODIFIED", "a") in seen and ("DELETED", "c") in seen
    assert ("RELIST", "") in seen  # a pass after a relist: what changed in between is unknown
    assert {k for k in ("team/a", "team/b", "team/c") if s.get(k)} == {"team/a"}


class Absent(Exception):
    status = 404


def test_a_collection_not_served_is_empty_and_synced_until_its_crd_appears(monkeypatch: pytest.MonkeyPatch) -> None:
    """A list answered 404 (an InferenceService CRD not installed) must not hold the passes back: the
    store is synced and empty, and listed again until the resource is served."""
    monkeypatch.setattr("qosmos.operator.informers.ABSENT_S", 0.0)
    calls: list[str] = []

    def list_() -> tuple[list[Obj], int]:
        calls.append("list")
        if len(calls) < 3:
            raise Absent()
        return [obj("svc", 30)], 30

    done = threading.Event()
    s = Store("inferenceservices")
    seen: list[str] = []

    def watch(rv: int) -> Iterator[Obj]:
        done.set()
        raise _Stop

    r = Reflector(s, list_, watch, lambda st, t, o: seen.append(t))
    t = threading.Thread(target=r.run, daemon=True)
    t.start()
    try:
        assert done.wait(10)
    finally:
        r.stopped.set()
        t.join(5)
    assert calls == ["list"] * 3 and s.synced.is_set() and not s.absent
    assert s.get("team/svc") is not None and "RELIST" in seen  # it appeared: a pass


# ---- the DLJob pods' store: unfinished pods watched, finished ones read once ---------------------
def pod(name: str, rv: int, phase: str = "Running", job: str = "j", **meta: Any) -> Obj:
    return {**obj(name, rv, labels={"qosmos.io/job": job}, **meta), "status": {"phase": phase}}


def test_a_pod_that_finishes_is_read_once_and_kept_as_it_ended() -> None:
    """The watch selects unfinished pods, so a finish arrives as DELETED with the pod's last running
    state: the store reads the pod (one GET, off the stream's thread) and keeps it finished; a pod
    really gone goes, and one the operator deleted itself is not read again."""
    now: dict[str, Obj | None] = {"j-0": pod("j-0", 9, "Succeeded"), "j-1": None, "j-2": pod("j-2", 9, "Failed")}
    reads: list[str] = []
    news: list[str] = []

    def fetch(ns: str, name: str) -> Obj | None:
        reads.append(name)
        return now[name]

    s = GangPods("pods", lambda o: True, fetch, lambda o: news.append(o["metadata"]["name"]))
    s.replace([pod("j-0", 5), pod("j-1", 5), pod("j-2", 5)], 5)
    assert s.event("DELETED", pod("j-0", 9))  # the event carries the running state, at the finish's version
    assert s.settle() and s.rv == 9
    assert s.get("team/j-0")["status"]["phase"] == "Succeeded" and news == ["j-0"]  # type: ignore[index]
    assert s.event("DELETED", pod("j-1", 10))  # gone: nothing to keep
    assert s.settle() and s.get("team/j-1") is None and reads == ["j-0", "j-1"]
    s.deleted("team/j-2")  # the operator deleted it: its DELETED event is not read
    assert s.event("DELETED", pod("j-2", 11))
    assert s.settle() and s.get("team/j-2") is None and reads == ["j-0", "j-1"]


def test_a_pod_is_kept_as_last_seen_until_its_read_succeeds() -> None:
    """The stream does not wait for the read (its position moves on); a relist meanwhile keeps the pod;
    a failed read is retried, and only its answer changes what the pass sees."""
    gate = threading.Event()
    tries: list[int] = []

    def fetch(ns: str, name: str) -> Obj | None:
        tries.append(1)
        if len(tries) < 2:
            raise ConnectionError("apiserver unreachable")
        gate.wait(5)
        return pod(name, 9, "Failed")

    s = GangPods("pods", lambda o: True, fetch)
    s.replace([pod("j-0", 5)], 5)
    s.event("DELETED", pod("j-0", 9))
    assert s.rv == 9  # the stream's position moved on at once
    s.replace([], 12)  # a relist (it holds no finished pod) while the read is under way
    assert s.get("team/j-0")["status"]["phase"] == "Running"  # type: ignore[index]  # as last seen
    gate.set()
    assert s.settle() and len(tries) == 2
    assert s.get("team/j-0")["status"]["phase"] == "Failed"  # type: ignore[index]
    s.stopped.set()


def test_finished_pods_survive_a_relist_and_go_with_their_dljob() -> None:
    s = GangPods("pods", lambda o: True, lambda ns, name: pod(name, 9, "Succeeded", job=name[0]))
    s.replace([pod("a-0", 5, job="a"), pod("b-0", 5, job="b")], 5)
    s.event("DELETED", pod("a-0", 9, job="a"))
    assert s.settle()
    s.replace([pod("b-0", 5, job="b")], 12)  # a relist after 410 holds no finished pod
    assert s.get("team/a-0")["status"]["phase"] == "Succeeded"  # type: ignore[index]
    s.prune({"team/b"})  # a's DLJob left the working set: its finished pod goes, b's running one stays
    assert s.get("team/a-0") is None and s.get("team/b-0") is not None
    s.prune(set())
    assert s.get("team/b-0") is not None  # an unfinished pod is the watch's to remove, never pruned


def test_a_pod_deleted_by_a_disruption_leaves_how_it_went_until_its_dljob_goes() -> None:
    """A drained pod (DisruptionTarget EvictionByEvictionAPI) deleted before a pass saw it terminating:
    the store keeps how it went (the DELETED event's last state), for its DLJob's pass; a pod deleted
    otherwise, or one the operator deleted, leaves nothing; it goes with its DLJob."""
    from qosmos.operator.lifecycle import Disruption

    s = GangPods("pods", lambda o: True, lambda ns, name: None)
    s.replace([pod("a-0", 5, job="a"), pod("a-1", 5, job="a"), pod("b-0", 5, job="b"), pod("b-1", 5, job="b")], 5)
    drained = pod("a-0", 9, job="a")
    cond = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    drained["status"]["conditions"] = [{**cond, "lastTransitionTime": "2026-01-02T03:04:05Z"}]
    s.event("DELETED", drained)
    s.event("DELETED", pod("a-1", 10, job="a"))  # gone without a disruption: a failure, nothing kept
    other = pod("b-0", 11, job="b")
    other["status"]["conditions"] = [{**cond, "reason": "TerminationByKubelet"}]  # the kubelet's own: a failure
    s.event("DELETED", other)
    s.deleted("team/b-1")  # the operator deleted it: its DELETED event is not read
    s.event("DELETED", {**pod("b-1", 12, job="b"), "status": drained["status"]})
    assert s.settle()
    assert s.disrupted() == {"team/a-0": Disruption("EvictionByEvictionAPI", 1767323045.0)}
    assert s.get("team/a-0") is None  # gone: no GPUs booked for it
    s.prune({"team/a"})
    assert "team/a-0" in s.disrupted()
    s.prune({"team/b"})
    assert s.disrupted() == {}


def test_pods_that_finished_unwatched_are_listed_once_per_list() -> None:
    listed: list[tuple[str, str]] = []

    def job_pods(ns: str, job: str) -> list[Obj]:
        listed.append((ns, job))
        return [pod(f"{job}-0", 7, "Succeeded", job=job), pod(f"{job}-1", 7, "Running", job=job)]

    s = GangPods("pods", lambda o: True, lambda ns, name: None)
    s.replace([pod("a-1", 8, job="a")], 8)
    s.recover_jobs([("team", "a")], job_pods)
    assert listed == [("team", "a")] and s.get("team/a-0")["status"]["phase"] == "Succeeded"  # type: ignore[index]
    assert s.get("team/a-1")["metadata"]["resourceVersion"] == "8"  # type: ignore[index]  # the watch's is newer
    s.recover_jobs([("team", "a")], job_pods)  # no list since: the watch has reported every finish
    assert listed == [("team", "a")]
    s.replace([], 20)
    s.recover_jobs([("team", "a")], job_pods)
    assert listed == [("team", "a")] * 2


# ---- read-your-writes through a whole pass ----------------------------------------------------
class CachedFake(FakeKube):
    """The in-memory apiserver read through the informers' stores the way ``CachedKube`` reads it:
    each store listed once, watch events delivered only when the test says (``deliver``), and every
    write's result written through as the apiserver's reply would be (``write_through=False``: not)."""

    def __init__(self, *a: Any, write_through: bool = True, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.inf = Informers(self.lister())  # type: ignore[arg-type]
        self.write_through = write_through
        self.deliver()

    def lister(self) -> SimpleNamespace:
        """What Informers asks of the operator's Kube (the fake lists by ``deliver``, not by calls)."""
        return SimpleNamespace(
            custom=None,
            core=None,
            namespace=None,
            pod=self.pod,
            dljob_selectors=None,
            retire_in_status=self.retire_in_status,
        )

    def deliver(self) -> None:
        """Everything the stream would have delivered by now: the stores listed again."""
        top = int(next(self._versions))
        self.inf.vcs.replace(copy.deepcopy(self._vcs), top)
        self.inf.services.replace([], top)
        self.inf.nodes_.replace(copy.deepcopy(self._nodes), top)
        self.inf.dljobs_.replace(FakeKube.dljobs(self), top)
        live = [p for p in FakeKube.gang_pods(self) if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
        self.inf.gang.replace(live, top)  # the pods' watch selects unfinished ones (kube.LIVE)
        self.inf.replicas.replace([], top)
        self.inf.others.replace([], top)

    def _through(self, resource: str, o: Obj | None) -> None:
        if self.write_through and o is not None:
            self.inf.wrote(resource, copy.deepcopy(o))

    # reads: the stores
    dljobs = lambda self: self.inf.dljobs_.items()  # noqa: E731
    gang_pods = lambda self: self.inf.gang_pods()  # noqa: E731

    def recover_pods(self, jobs: list[tuple[str, str]]) -> None:
        self.inf.gang.recover_jobs(jobs, self.job_pods)

    def leaves_watch(self, name: str, last: Obj) -> None:
        """The pods' watch reports that ``name`` no longer matches it (it finished, or it is gone):
        DELETED with ``last``, its last state that matched."""
        self.inf.gang.event("DELETED", copy.deepcopy(last))
        assert self.inf.gang.settle()

    nodes = lambda self: self.inf.nodes_.items()  # noqa: E731
    virtual_clusters = lambda self: self.inf.vcs.items()  # noqa: E731

    # writes: the fake's, then the reply written through
    def patch_dljob_status(
        self, namespace: str, name: str, status: Obj, resource_version: str | None = None
    ) -> str | None:
        rv = super().patch_dljob_status(namespace, name, status, resource_version)
        self._through("dljobs", self.jobs[name])
        return rv

    def create_pod(self, pod: Obj) -> bool:
        created = super().create_pod(pod)
        self._through("pods", self.pods[pod["metadata"]["name"]])
        return created

    def ungate(self, namespace: str, name: str, gates: list[Obj]) -> None:
        super().ungate(namespace, name, gates)
        self._through("pods", self.pods[name])


def job(name: str, priority: int = 0) -> Obj:
    return dljob_object(name, 1_767_000_000.0, priority=priority)


@pytest.mark.parametrize("write_through", [True, False])
def test_the_next_pass_sees_the_gpus_its_predecessor_booked_before_the_watch_delivers(write_through: bool) -> None:
    """One 8-GPU node; pass 1 admits A. Then B (higher priority) arrives and the watch has delivered
    nothing of pass 1's writes yet: pass 2 must see A holding the node through the write-through,
    not book B onto the same GPUs."""
    vcs = copy.deepcopy(list(DEFAULT_VCS))
    vcs[0]["spec"]["policy"] = "priority"
    kube = CachedFake([gpu_node("n0")], [job("a")], vcs=vcs, write_through=write_through)
    rec = Reconciler(kube, durations=Durations(None), clock=lambda: 1_767_000_100.0)  # type: ignore[arg-type]
    assert rec.run_pass().admitted == ["team/a"]
    b = job("b", priority=5)
    kube.add(b)
    kube.inf.dljobs_.event("ADDED", copy.deepcopy(b))  # B's event arrives; pass 1's are still in flight
    second = rec.run_pass().admitted
    gangs = {p["metadata"]["labels"]["qosmos.io/job"] for p in kube.pods.values()}
    if write_through:
        assert second == [] and gangs == {"a"}
        assert kube.jobs["a"]["status"]["phase"] == "Admitted"
    else:  # what the write-through prevents: both gangs' pods for the one node's 8 GPUs (and A's
        # admission overwritten by a wait status decided on the stale copy)
        assert second == ["team/b"] and gangs == {"a", "b"}


def test_a_pass_changes_nothing_it_reads_from_the_stores() -> None:
    kube = CachedFake([gpu_node("n0"), gpu_node("n1")], [job("a"), job("b"), job("c")])
    before = [copy.deepcopy(s.items()) for s in kube.inf.stores]
    rec = Reconciler(kube, durations=Durations(None), clock=lambda: 1_767_000_100.0)  # type: ignore[arg-type]
    kube.write_through = False  # what the pass read must be as the stream left it
    rec.run_pass()
    assert [s.items() for s in kube.inf.stores] == before


@pytest.mark.parametrize("by_status", [True, False], ids=["status.retired", "label"])
def test_a_gang_that_finishes_is_seen_through_the_watch_and_its_pods_leave_with_it(by_status: bool) -> None:
    """Through whole passes: the pod's finish comes as the watch's DELETED (a finished pod leaves the
    selection); the pass sees it Succeeded and retires the DLJob, no pod written, and the finished pod
    leaves the caches with it. With ``status.retired`` the Succeeded write's reply takes the DLJob out of
    the store at once; with the label, the pass after it writes the label."""
    kube = CachedFake([gpu_node("n0")], [job("a")], retire_in_status=by_status)
    rec = Reconciler(kube, durations=Durations(None), clock=lambda: 1_767_000_100.0)  # type: ignore[arg-type]
    assert rec.run_pass().admitted == ["team/a"]
    kube.bind("a-0-0", "n0")
    kube.deliver()
    rec.run_pass()
    assert kube.jobs["a"]["status"]["phase"] == "Running"
    running = copy.deepcopy(kube.pods["a-0-0"])
    kube.bind("a-0-0", "n0", "Succeeded")
    kube.leaves_watch("a-0-0", running)
    assert kube.inf.gang_pods() != []  # the finished pod, kept while its DLJob is in the working set
    assert rec.run_pass().finished == ["team/a"]
    assert kube.jobs["a"]["status"]["phase"] == "Succeeded"
    if by_status:
        assert kube.jobs["a"]["status"]["retired"] is True and "labels" not in kube.jobs["a"]["metadata"]
        assert kube.inf.dljobs_.items() == []  # the reply written through: out before any event
    else:
        rec.run_pass()  # retired
        assert kube.jobs["a"]["metadata"]["labels"] == {"qosmos.io/finished": "true"}
        assert kube.inf.dljobs_.items() != []  # until the label's event
        kube.deliver()
    assert "qosmos.io/finished" not in kube.pods["a-0-0"]["metadata"]["labels"]  # the pod was not written
    assert kube.inf.dljobs_.items() == [] and kube.inf.gang_pods() == []
    writes = len(kube.status_patches)
    rec.run_pass()  # (its VirtualCluster's status says one job fewer running)
    kube.deliver()
    assert rec.run_pass().writes == 0 and len(kube.status_patches) == writes  # nothing more for the DLJob


def test_a_gang_that_finished_while_the_operator_was_down_succeeds_after_the_restart() -> None:
    """The pods' list holds no finished pod: without the per-job list after it, a restarted operator
    would take the Running gang's missing pod for a failure and restart it."""
    kube = CachedFake([gpu_node("n0")], [job("a")])
    rec = Reconciler(kube, durations=Durations(None), clock=lambda: 1_767_000_100.0)  # type: ignore[arg-type]
    rec.run_pass()
    kube.bind("a-0-0", "n0")
    kube.deliver()
    rec.run_pass()
    assert kube.jobs["a"]["status"]["phase"] == "Running"
    kube.bind("a-0-0", "n0", "Succeeded")  # finished while no operator watched
    restarted = CachedFake.__new__(CachedFake)
    restarted.__dict__.update(kube.__dict__)
    restarted.inf = Informers(restarted.lister())  # type: ignore[arg-type]
    restarted.deliver()  # the new caches' first lists
    assert restarted.inf.gang.items() == []
    rec = Reconciler(restarted, durations=Durations(None), clock=lambda: 1_767_000_200.0)  # type: ignore[arg-type]
    rep = rec.run_pass()
    assert rep.finished == ["team/a"] and rep.restarted == []
    assert restarted.jobs["a"]["status"]["phase"] == "Succeeded"


class Custom:
    """The client's CustomObjectsApi as far as a DLJob list goes: it answers ``status`` (an HTTP code)
    to any list selecting by field, and records every call's selectors."""

    def __init__(self, status: int | None) -> None:
        self.status = status
        self.calls: list[tuple[str | None, str | None]] = []

    def list_cluster_custom_object(self, group: str, version: str, plural: str, **kw: Any) -> Any:
        from kubernetes.client.rest import ApiException

        self.calls.append((kw.get("label_selector"), kw.get("field_selector")))
        if kw.get("field_selector") and self.status is not None:
            raise ApiException(status=self.status, reason="field label not supported: status.retired")
        return SimpleNamespace(data=b'{"items": []}', read=lambda: b"", release_conn=lambda: None)


@pytest.mark.parametrize(
    ("answer", "mode", "selects"),
    [(None, True, "status.retired!=true"), (400, False, None)],
    ids=["selectable", "kubernetes-1.30"],
)
def test_the_dljob_list_selects_retired_ones_by_status_where_the_apiserver_can(
    answer: int | None, mode: bool, selects: str | None
) -> None:
    """Kubernetes >= 1.31 with the CRD's selectableFields selects ``status.retired``; 1.30 (or an older
    CRD) answers 400 and DLJobs are retired by label: asked once, every list and watch then the same."""
    kube = Kube.__new__(Kube)
    kube.namespace, kube.retire_in_status, kube.custom = None, None, Custom(answer)
    assert kube.dljobs() == [] and kube.retire_in_status is mode
    assert kube.dljob_selectors() == {
        "label_selector": "!qosmos.io/finished",
        **({"field_selector": selects} if selects else {}),
    }
    probe, *lists = kube.custom.calls
    assert probe == (None, "status.retired!=true")
    assert lists == [("!qosmos.io/finished", selects)]  # asked once


def test_the_retirement_mode_is_asked_again_while_dljobs_are_not_served() -> None:
    kube = Kube.__new__(Kube)
    kube.namespace, kube.retire_in_status, kube.custom = None, None, Custom(404)
    kube.dljobs()
    assert kube.retire_in_status is None  # the CRD not installed yet: no answer
    kube.custom.status = None  # installed
    assert kube.dljob_selectors()["field_selector"] == "status.retired!=true" and kube.retire_in_status is True
