"""GPU quotas with borrowing between partitions (VirtualClusters), and reclaim.

Every partition with a quota has a nominal GPU quota ``q`` and a borrowing limit ``b``: its running
jobs may hold up to ``q`` GPUs, and up to ``b`` more that it borrows from the unused quota of
*idle* partitions. A partition's unused quota is lendable only as far as its own waiting jobs do
not need it (``spare = q − held − min(waiting demand, q − held)``). When lenders want their quota
back (the GPUs borrowed exceed the spare quota left), the borrowed job submitted last is preempted
(and requeued), then the next, until what is borrowed fits again.

Pure accounting (no placement): a pass of a partition runs under :func:`effective_quota`, the
operator (or the simulator) books the starts, and :func:`reclaim` says which running jobs to stop.
Partitions without a quota neither lend nor borrow.
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
    borrowing_limit: int = 0  # GPUs it may hold beyond ``nominal``, borrowed from idle partitions
    held: int = 0  # GPUs its running jobs hold
    demand: int = 0  # GPUs its waiting jobs ask for in all

    def __post_init__(self) -> None:
        for f in ("nominal", "borrowing_limit", "held", "demand"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 0:
                raise InvalidInput(f, v, "must be an integer >= 0")

    @property
    def borrowed(self) -> int:
        """GPUs held beyond the nominal quota."""
        return max(self.held - self.nominal, 0)

    @property
    def spare(self) -> int:
        """Unused quota that its own waiting jobs do not need: what it can lend."""
        free = max(self.nominal - self.held, 0)
        return free - min(self.demand, free)


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
    may still borrow (its limit less what it already borrows, at most what the others can lend)."""
    by_name = _check(states)
    if name not in by_name:
        raise InvalidInput("partition", name, "has no quota state")
    me = by_name[name]
    room = min(max(me.borrowing_limit - me.borrowed, 0), lendable(states, besides=name))
    return me.nominal + me.borrowed + room


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
