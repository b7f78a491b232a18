"""The histories peering operator replicas share in ConfigMaps (QSSF durations, CES node counts),
written on a real apiserver: each write is a compare-and-swap (``Kube.update_config_map``), so a
peer's write between a replica's read and its write is read again and merged, never written over."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from qosmos.extender.core.types import Job
from qosmos.operator.ces import CONFIG_MAP as CES_MAP
from qosmos.operator.ces import KEY as CES_KEY
from qosmos.operator.ces import CESOptions, EnergySaver
from qosmos.operator.durations import CONFIG_MAP, KEY, Durations
from qosmos.operator.kube import Conflict, Kube

pytestmark = pytest.mark.integration

Update = Callable[[dict[str, str] | None], dict[str, str]]


def stored(kube: Kube, name: str) -> dict[str, str] | None:
    return kube.read_config_map(kube.namespace or "", name)


def test_update_config_map_is_a_compare_and_swap(k8s_api: Any, k8s_namespace: str) -> None:
    kube = Kube(k8s_api, k8s_namespace)
    ns, name = k8s_namespace, "shared"
    seen: list[dict[str, str] | None] = []

    def add(key: str, peer: Callable[[], None] | None = None) -> Update:
        def update(data: dict[str, str] | None) -> dict[str, str]:
            seen.append(data)
            if peer is not None and len(seen) == 1:
                peer()  # a peer writes after this read
            return {**(data or {}), key: "x"}

        return update

    def peer_writes(key: str) -> Callable[[], None]:
        return lambda: kube.core.patch_namespaced_config_map(name, ns, {"data": {key: "peer"}})

    def peer_creates() -> None:
        kube.core.create_namespaced_config_map(ns, {"metadata": {"name": name}, "data": {"early": "peer"}})

    # absent: created; a peer that creates it first (409 AlreadyExists) is read and kept
    assert kube.update_config_map(ns, name, add("a", peer_creates)) == {"early": "peer", "a": "x"}
    assert seen == [None, {"early": "peer"}] and stored(kube, name) == {"early": "peer", "a": "x"}
    # a peer's write between the read and the write (409 Conflict): read again, its key kept
    seen.clear()
    kube.update_config_map(ns, name, add("b", peer_writes("p")))
    assert len(seen) == 2 and seen[1] == {"early": "peer", "a": "x", "p": "peer"}
    assert stored(kube, name) == {"early": "peer", "a": "x", "p": "peer", "b": "x"}
    # deleted in between (404): created again
    seen.clear()
    kube.update_config_map(ns, name, add("c", lambda: kube.core.delete_namespaced_config_map(name, ns)))
    assert seen[1] is None and stored(kube, name) == {"c": "x"}

    # a peer that writes every time: Conflict after the attempts, nothing of this replica written
    def always(data: dict[str, str] | None) -> dict[str, str]:
        kube.core.patch_namespaced_config_map(name, ns, {"data": {"n": str(len(seen))}})
        seen.append(data)
        return {"mine": "x"}

    seen.clear()
    with pytest.raises(Conflict, match="3 writes"):
        kube.update_config_map(ns, name, always, attempts=3)
    assert len(seen) == 3 and "mine" not in (stored(kube, name) or {})


def job(name: str) -> Job:
    return Job(f"team/{name}", 0.0, 1, user="team", vc="vc-a", name=name, model="ResNet50", batch=64, iters=10)


def test_durations_of_two_replicas_racing_keep_both_rows(k8s_api: Any, k8s_namespace: str) -> None:
    """Replica a reads the history, b writes its row, a writes: a's write is refused and made again
    with b's row taken in (each row observed by a once)."""
    ns = k8s_namespace
    b = Durations(Kube(k8s_api, ns), ns)

    class Racing(Kube):
        def update_config_map(self, namespace: str, name: str, update: Update, attempts: int = 5) -> dict[str, str]:
            calls: list[int] = []

            def between(data: dict[str, str] | None) -> dict[str, str]:
                out = update(data)
                calls.append(1)
                if len(calls) == 1:
                    assert b.save(200.0)
                return out

            return super().update_config_map(namespace, name, between, attempts)

    a = Durations(Racing(k8s_api, ns), ns)
    a.load()
    b.load()
    a.observe(job("train-a"), 100.0, 100.0)
    b.observe(job("train-b"), 200.0, 200.0)
    assert a.save(200.0)
    rows = json.loads((stored(b.kube, CONFIG_MAP) or {})[KEY])
    assert [r["name"] for r in rows] == ["train-a", "train-b"]
    a.predict(job("x"), 1000.0)
    assert a.predictor.observed == 2


def test_ces_history_of_a_replica_back_from_standby_or_a_pause_keeps_the_peers_minutes(
    k8s_api: Any, k8s_namespace: str
) -> None:
    """A records, stands by; B records; A active again continues B's history. Then A, paused (still
    active), carries its count over minutes B saw: the ConfigMap keeps B's counts."""

    class Counting(Kube):
        writes = 0

        def update_config_map(self, namespace: str, name: str, update: Update, attempts: int = 5) -> dict[str, str]:
            self.writes += 1
            return super().update_config_map(namespace, name, update, attempts)

    opts = CESOptions(namespace=k8s_namespace)
    a, b = EnergySaver(Counting(k8s_api, k8s_namespace), opts), EnergySaver(Kube(k8s_api, k8s_namespace), opts)
    try:

        def history() -> tuple[int, list[int]]:
            doc = json.loads((stored(a.kube, CES_MAP) or {})[CES_KEY])
            return doc["first"], doc["running"]

        for minute in (100, 101, 102):
            a.record(minute, 5, 8)
        a.record(102, 6, 8)  # inside the minute: written at the stand-by, not lost
        a.stand_by()
        assert history() == (100, [5, 5, 6])
        a.stand_by()  # each pass standing by: written once, at the first
        assert a.kube.writes == 4
        for minute, running in ((103, 2), (104, 2), (105, 3)):
            b.record(minute, running, 8)
        assert history() == (100, [5, 5, 6, 2, 2, 3])  # written as each new minute begins
        a.record(106, 1, 8)  # active again: B's minutes, not 6 carried over them
        assert a.history.running == [5, 5, 6, 2, 2, 3, 1] and not a.history.filled
        assert history() == (100, [5, 5, 6, 2, 2, 3, 1])

        b.record(107, 0, 8)  # both active: A paused from 106 to 109
        b.record(108, 0, 8)
        a.record(109, 4, 8)
        assert history() == (100, [5, 5, 6, 2, 2, 3, 1, 0, 0, 4])
        b.record(110, 4, 8)  # B merges what A wrote: its own counts stay, A's minute is taken in
        assert history() == (100, [5, 5, 6, 2, 2, 3, 1, 0, 0, 4, 4]) and b.history.running[-2] == 4
    finally:
        a._pool.shutdown()
        b._pool.shutdown()
