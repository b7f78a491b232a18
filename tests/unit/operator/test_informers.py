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
from qosmos.operator.informers import Informers, Reflector, Store
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


# ---- read-your-writes through a whole pass ----------------------------------------------------
class CachedFake(FakeKube):
    """The in-memory apiserver read through the informers' stores the way ``CachedKube`` reads it:
    each store listed once, watch events delivered only when the test says (``deliver``), and every
    write's result written through as the apiserver's reply would be (``write_through=False``: not)."""

    def __init__(self, *a: Any, write_through: bool = True, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.inf = Informers(SimpleNamespace(custom=None, core=None, namespace=None))  # type: ignore[arg-type]
        self.write_through = write_through
        self.deliver()

    def deliver(self) -> None:
        """Everything the stream would have delivered by now: the stores listed again."""
        top = int(next(self._versions))
        self.inf.vcs.replace(copy.deepcopy(self._vcs), top)
        self.inf.services.replace([], top)
        self.inf.nodes_.replace(copy.deepcopy(self._nodes), top)
        self.inf.dljobs_.replace(FakeKube.dljobs(self), top)
        self.inf.gang.replace(FakeKube.gang_pods(self), top)
        self.inf.replicas.replace([], top)
        self.inf.others.replace([], top)

    def _through(self, resource: str, o: Obj | None) -> None:
        if self.write_through and o is not None:
            self.inf.wrote(resource, copy.deepcopy(o))

    # reads: the stores
    dljobs = lambda self: self.inf.dljobs_.items()  # noqa: E731
    gang_pods = lambda self: self.inf.gang.items()  # noqa: E731
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
