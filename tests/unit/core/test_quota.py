"""Borrowing and reclaim between partitions (extender/core/quota.py), hand-computed."""

from __future__ import annotations

import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.quota import HeldJob, QuotaState, accounting, effective_quota, lendable, reclaim


def test_idle_partition_lends_its_unused_quota_up_to_the_borrowing_limit() -> None:
    a = QuotaState("a", nominal=16, borrowing_limit=8, held=16, demand=8)
    b = QuotaState("b", nominal=16, held=4)  # idle: 12 spare
    assert lendable([a, b], besides="a") == 12
    assert effective_quota([a, b], "a") == 16 + 8  # limited by its borrowing limit
    b2 = QuotaState("b", nominal=16, held=12)  # 4 spare
    assert effective_quota([a, b2], "a") == 20


def test_a_lender_with_waiting_jobs_keeps_what_they_need() -> None:
    a = QuotaState("a", nominal=8, borrowing_limit=8, held=8)
    b = QuotaState("b", nominal=16, held=4, demand=10)  # 12 free, 10 wanted: 2 spare
    assert effective_quota([a, b], "a") == 10


def test_without_borrowing_limit_the_quota_is_nominal() -> None:
    a = QuotaState("a", nominal=8, held=0)
    b = QuotaState("b", nominal=16)
    assert effective_quota([a, b], "a") == 8


def test_what_is_borrowed_already_counts_against_limit_and_lenders() -> None:
    a = QuotaState("a", nominal=8, borrowing_limit=8, held=14)  # borrows 6
    b = QuotaState("b", nominal=16, held=0)  # 16 spare, 6 lent
    assert lendable([a, b], besides="a") == 16
    assert effective_quota([a, b], "a") == 8 + 6 + 2  # 2 left of its limit
    c = QuotaState("c", nominal=8, borrowing_limit=8, held=0)
    # c may borrow what b still has after a's 6
    assert effective_quota([a, b, c], "c") == 8 + 8
    assert accounting([a, b]) == {"a": (6, 0), "b": (0, 6)}


def test_reclaim_preempts_the_borrowed_job_submitted_last() -> None:
    a = QuotaState("a", nominal=8, borrowing_limit=8, held=16)  # borrows 8 from b
    b = QuotaState("b", nominal=8, held=0, demand=4)  # wants 4 back: spare 4 < 8 borrowed
    jobs = [
        HeldJob("a/j1", "a", 8, 10.0),
        HeldJob("a/j2", "a", 4, 20.0),
        HeldJob("a/j3", "a", 4, 30.0),
        HeldJob("b/x", "b", 0, 40.0),
    ]
    # over = 8 - 4 = 4: the last submitted (j3, 4 GPUs) is enough
    assert [j.id for j in reclaim([a, b], jobs)] == ["a/j3"]
    b_all = QuotaState("b", nominal=8, held=0, demand=8)  # over = 8: j3 then j2
    assert [j.id for j in reclaim([a, b_all], jobs)] == ["a/j3", "a/j2"]


def test_reclaim_stops_when_the_partition_no_longer_borrows() -> None:
    a = QuotaState("a", nominal=8, borrowing_limit=4, held=10)  # borrows 2
    b = QuotaState("b", nominal=8, held=8, demand=8)  # spare 0
    jobs = [HeldJob("a/old", "a", 8, 1.0), HeldJob("a/new", "a", 2, 2.0)]
    assert [j.id for j in reclaim([a, b], jobs)] == ["a/new"]
    assert reclaim([QuotaState("a", nominal=8, held=8), b], jobs) == []


def test_bad_input_is_refused() -> None:
    with pytest.raises(InvalidInput):
        QuotaState("a", nominal=-1)
    with pytest.raises(InvalidInput):
        effective_quota([QuotaState("a", 1), QuotaState("a", 2)], "a")
    with pytest.raises(InvalidInput):
        effective_quota([QuotaState("a", 1)], "b")
