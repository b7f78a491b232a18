"""Which operator replica runs the passes (qosmos.operator.peering): kopf's rule on peering records
written the way kopf writes them (its own Peer class), and priorities that put the oldest first."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kopf._core.engines.peering import Identity, Peer
from qosmos.operator.peering import default_priority, is_active


def record(priority: int, lifetime: int = 60, seen_ago: float = 0.0) -> dict[str, Any]:
    """A keep-alive as kopf's ``touch`` writes it into the peering object's status."""
    lastseen = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seen_ago)).isoformat()
    return Peer(identity=Identity("x"), priority=priority, lifetime=lifetime, lastseen=lastseen).as_dict()


def test_alone_it_runs_once_its_own_record_is_there() -> None:
    assert not is_active({}, "a", 5)  # before its first keep-alive: a peer may not have written yet
    assert not is_active(None, "a", 5)
    assert is_active({"a": record(5)}, "a", 5)


def test_a_live_peer_with_a_higher_or_equal_priority_holds_it() -> None:
    assert not is_active({"a": record(5), "b": record(7)}, "a", 5)
    assert is_active({"a": record(7), "b": record(5)}, "a", 7)
    # equal priorities pause every replica, as kopf does
    assert not is_active({"a": record(5), "b": record(5)}, "a", 5)
    assert not is_active({"a": record(5), "b": record(5)}, "b", 5)


def test_a_dead_or_departed_peer_holds_nothing() -> None:
    # killed: its record expires after its lifetime
    assert is_active({"a": record(5), "b": record(7, lifetime=60, seen_ago=61)}, "a", 5)
    assert not is_active({"a": record(5), "b": record(7, lifetime=60, seen_ago=30)}, "a", 5)
    # a clean exit: kopf writes lifetime 0 (or removes the record)
    assert is_active({"a": record(5), "b": record(7, lifetime=0)}, "a", 5)


def test_exactly_one_of_several_replicas_runs() -> None:
    prios = {"a": default_priority(1000.0), "b": default_priority(1000.5), "c": default_priority(1001.0)}
    status = {k: record(p) for k, p in prios.items()}
    assert [k for k, p in prios.items() if is_active(status, k, p)] == ["a"]  # the oldest


def test_priorities_rank_by_start_time_and_differ_within_a_millisecond() -> None:
    assert default_priority(1_700_000_000.000) > default_priority(1_700_000_000.002)
    same = {default_priority(1_700_000_000.0) for _ in range(50)}
    assert len(same) > 1  # a random part below the millisecond breaks ties
    assert all(-1_700_000_000_000 * 1000 <= p < -1_700_000_000_000 * 1000 + 1000 for p in same)
