"""GPU quotas with borrowing between partitions (VirtualClusters), and reclaim.

Every partition with a quota has a nominal GPU quota ``q``, a borrowing limit ``b`` (None: no limit)
and a lending limit ``l`` (None: it lends all it does not use): its running jobs may hold up to ``q``
GPUs, and up to ``b`` more that it borrows from the unused quota of the others. A partition's unused
quota is lendable only as far as its own waiting jobs do not need it and its lending limit allows
(``spare = min(l, q − held − min(demand, q − held))``). What partition P may hold (Kueue's
ClusterQueue semantics: borrow the cohort's unused nominal quota up to ``borrowingLimit``; a lender's
``lendingLimit`` caps what it lends):

    pool_P = Σ_{m ≠ P} spare_m − Σ_{m ≠ P} borrowed_m          (what the others lend, less what they borrow)
    cap_P  = q_P + max(0, min(b_P, pool_P))                      (``effective_quota``)

so everything borrowed in the cohort, P's included, stays within what the others lend
(Σ_m borrowed_m ≤ Σ_{m ≠ P} spare_m for the borrower P). When lenders want their quota back (the
GPUs borrowed exceed the spare quota left), :func:`reclaim` preempts the borrowed job submitted last
(and requeues it), then the next, until what is borrowed fits again.

Pure accounting (no placement): a pass of a partition runs under :func:`effective_quota`, the
operator (or the simulator) books the starts, and :func:`reclaim` says which running jobs to stop.
Partitions without a quota neither lend nor borrow. Cohorts whose members share nodes
(``core.cohorts``) use the same ``effective_quota`` and reclaim through the admission pass instead,
where the placer checks that the freed GPUs let the lender's job start.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from qosmos.extender.core.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class QuotaState:
    """One partition's quota and what it holds and wants now."""

    name: str
    nominal: int  # GPUs its own running jobs may hold
    borrowing_limit: int | None = 0  # GPUs it may hold beyond ``nominal``, borrowed; None: no limit
    held: int = 0  # GPUs its running jobs hold
    demand: int = 0  # GPUs its waiting jobs ask for in all
    lending_limit: int | None = None  # GPUs of its unused quota it lends at most; None: all of it

    def __post_init__(self) -> None:
        for f in ("nominal", "borrowing_limit", "held", "demand", "lending_limit"):
            v = getattr(self, f)
            if v is None and f in ("borrowing_limit", "lending_limit"):
                continue
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise InvalidInput(f, v, "must be an integer >= 0")

    @property
    def borrowed(self) -> int:
        """GPUs held beyond the nominal quota."""
        return max(self.held - self.nominal, 0)

    @property
    def spare(self) -> int:
        """Unused quota that its own waiting jobs do not need: what it can lend."""
        free = max(self.nominal - self.held, 0)
        spare = free - min(self.demand, free)
        return spare if self.lending_limit is None else min(spare, self.lending_limit)


@dataclass(frozen=True, slots=True)
class HeldJob:
    """A running job as reclaim sees it."""

    id: str
    partition: str
    gpus: int
    submit_time: float


def _check(states: Sequence[QuotaState]) -> dict[str, QuotaState]:
    by_name = {s.name: s for s in states}
    if len(by_name) != len(states):
        raise InvalidInput("partitions", [s.name for s in states], "partition names must be unique")
    return by_name


def lendable(states: Sequence[QuotaState], besides: str = "") -> int:
    """Spare quota of every partition (but ``besides``) not already borrowed by someone."""
    _check(states)
    spare = sum(s.spare for s in states if s.name != besides)
    borrowed = sum(s.borrowed for s in states if s.name != besides)
    return max(spare - borrowed, 0)


def effective_quota(states: Sequence[QuotaState], name: str) -> int:
    """GPUs partition ``name``'s running jobs may hold after this pass: its nominal quota plus what it
    may borrow in all, ``min(borrowing limit, pool)`` where the pool is what the others lend less what
    they borrow themselves (the module's cap_P). What it borrows already counts against both."""
    by_name = _check(states)
    if name not in by_name:
        raise InvalidInput("partition", name, "has no quota state")
    me = by_name[name]
    pool = lendable(states, besides=name)
    room = pool if me.borrowing_limit is None else min(me.borrowing_limit, pool)
    return me.nominal + room


def reclaim(states: Sequence[QuotaState], running: Sequence[HeldJob]) -> list[HeldJob]:
    """Running jobs to preempt so that what is borrowed fits in the spare quota again: the borrowing
    jobs submitted last first, each only while its partition still borrows."""
    by_name = _check(states)
    borrowed = {s.name: s.borrowed for s in states}
    over = sum(borrowed.values()) - sum(s.spare for s in states)
    out: list[HeldJob] = []
    if over <= 0:
        return out
    candidates = sorted(  # submitted last first; equal times: the larger id (later name) first
        (j for j in running if borrowed.get(j.partition, 0) > 0 and j.gpus > 0),
        key=lambda j: (j.submit_time, j.id),
        reverse=True,
    )
    for j in candidates:
        if over <= 0:
            break
        if borrowed[j.partition] <= 0 or j.partition not in by_name:
            continue
        out.append(j)
        borrowed[j.partition] -= j.gpus
        over -= min(j.gpus, borrowed[j.partition] + j.gpus)
    return out


def accounting(states: Sequence[QuotaState]) -> Mapping[str, tuple[int, int]]:
    """Per partition (GPUs borrowed, GPUs of its quota lent to others): the lent GPUs are the
    borrowed ones charged to lenders in name order, up to each lender's unused quota."""
    _check(states)
    left = sum(s.borrowed for s in states)
    out: dict[str, tuple[int, int]] = {}
    for s in sorted(states, key=lambda s: s.name):
        lent = min(max(s.nominal - s.held, 0), left)
        left -= lent
        out[s.name] = (s.borrowed, lent)
    return out


__all__ = ["HeldJob", "QuotaState", "accounting", "effective_quota", "lendable", "reclaim"]
