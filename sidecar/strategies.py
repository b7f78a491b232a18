"""SODA node strategies (seed 002 §V-B, §V-E): pure functions and state machines producing desired state.

No files, clocks or Kubernetes here: the agent feeds measurements and time, applies the result.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from qosmos.extender.core.errors import InvalidInput
from qosmos.predictors.soda_cpu import CoreSearch, start_cores
from qosmos.sidecar.state import CpuTarget, HtbTarget, MbaTarget, PodInfo

CONTENTION_THRESHOLD = 0.75  # §V-E: node memory bandwidth at 75 % of peak
RELEASE_FRACTION = 0.8  # hysteresis: lift the throttle below 0.8 x threshold (60 % of peak)
MBA_PERCENT = 50  # §V-E gives no figure for the MBA cap; halving mirrors the no-RDT fallback
GPU_NET_SHARE = 0.75  # §V-E: 75 % of the link for GPU jobs, 25 % for CPU jobs
MAX_SEARCH_STEPS = 4  # seed 002: the best-fit core count "in less than four attempts" (Table V: four steps)


# --------------------------------------------------------------------------- adaptive cores (§V-B)


@dataclass
class AdaptiveCores:
    """One :class:`CoreSearch` per training pod, started from N_start (§V-B-1) and fed GPU utilisation.

    ``owner_history`` maps an owner to (category, cores) of earlier jobs. A pod carrying
    ``best_cores`` (its search finished before an agent restart) keeps that count. The search
    measures at most ``max_steps`` core counts (seed 002: "in less than four attempts"; Table V: four
    steps), whatever the curve: at the bound the best count measured is kept.
    """

    node_cpus: int
    owner_history: Mapping[str, Sequence[tuple[str, int]]] = field(default_factory=dict)
    tolerance: float = 1.0
    max_steps: int = MAX_SEARCH_STEPS
    searches: dict[str, CoreSearch] = field(default_factory=dict)

    def cores(self, pod: PodInfo) -> int:
        """The core count the pod should have now: never below its CPU request (rounded up)."""
        floor = min(pod.min_cores, self.node_cpus)
        if pod.best_cores:
            return min(max(floor, pod.best_cores), self.node_cpus)
        s = self.searches.get(pod.uid)
        if s is None:
            n0 = start_cores(
                pod.category,
                self.owner_history.get(pod.owner, ()),
                pipeline="pipeline" in pod.hints,
                large_weights="large-weights" in pod.hints,
                complex_iterations="complex-iterations" in pod.hints,
                max_cores=self.node_cpus,
            )
            # the search explores [request, node] only: fewer cores than requested are never tried
            n0 = max(n0, floor)
            s = self.searches[pod.uid] = CoreSearch(n0, floor, self.node_cpus, self.tolerance, self.max_steps)
        return s.best if s.done else s.current

    def observe(self, pod: PodInfo, utilisation: float) -> int | None:
        """Feed the mean GPU utilisation measured at the current count; returns the next count, or
        None when the search is done (then ``cores(pod)`` is the best fit)."""
        if pod.best_cores:
            return None
        self.cores(pod)
        return self.searches[pod.uid].next_cores(utilisation)

    def done(self, pod: PodInfo) -> bool:
        s = self.searches.get(pod.uid)
        return bool(pod.best_cores) or (s is not None and s.done)

    def forget(self, live_uids: Iterable[str]) -> None:
        live = set(live_uids)
        for uid in [u for u in self.searches if u not in live]:
            del self.searches[uid]


def assign_cpus(
    counts: Mapping[str, int], node_cpus: Sequence[int], from_top: bool = False
) -> dict[str, tuple[int, ...]]:
    """Give each pod (sorted by key) ``counts[key]`` consecutive CPUs, disjoint while they fit, from
    the low end (``from_top``: the high end), wrapping only when the node is oversubscribed; never empty."""
    cpus = sorted(node_cpus, reverse=from_top)
    if not cpus:
        raise InvalidInput("node cpus", "", "no online CPUs")
    out: dict[str, tuple[int, ...]] = {}
    at = 0
    for key in sorted(counts):
        n = min(max(1, counts[key]), len(cpus))
        out[key] = tuple(sorted(cpus[(at + i) % len(cpus)] for i in range(n)))
        at = (at + n) % len(cpus)
    return out


@dataclass(frozen=True)
class CpuManagerState:
    """The kubelet's CPU manager checkpoint (``cpu_manager_state``): with the static policy, the CPUs
    listed under ``entries`` are exclusive to those pods' containers and never shared."""

    policy: str = "none"
    default_cpus: tuple[int, ...] = ()
    exclusive: Mapping[str, frozenset[int]] = field(default_factory=dict)  # pod UID -> its exclusive CPUs

    def shareable(self, node_cpus: Sequence[int]) -> tuple[int, ...]:
        """The CPUs the agent may hand out: every node CPU but the exclusive ones (never none)."""
        taken = frozenset().union(*self.exclusive.values()) if self.exclusive else frozenset()
        free = tuple(c for c in node_cpus if c not in taken)
        if not free:
            raise InvalidInput("cpu_manager_state", "", "every CPU is exclusive to some pod: none to share")
        return free


# --------------------------------------------------------------------------- contention eliminator (§V-E)


@dataclass
class ContentionEliminator:
    """Throttle CPU jobs while node memory bandwidth is at or above ``threshold`` x peak.

    With MBA: one shared resctrl group for CPU jobs at ``mba_percent``; without: halve their cores.
    Engaged at ``threshold``, released below ``threshold * release_fraction`` (no flapping).
    """

    has_mba: bool
    threshold: float = CONTENTION_THRESHOLD
    release_fraction: float = RELEASE_FRACTION
    mba_percent: int = MBA_PERCENT
    engaged: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= 1:
            raise InvalidInput("threshold", self.threshold, "must be in (0, 1]")
        if not 0 < self.release_fraction <= 1:
            raise InvalidInput("release_fraction", self.release_fraction, "must be in (0, 1]")

    def update(self, used: float | None, peak: float | None) -> bool:
        """Feed node bandwidth (bytes/s) and its peak; returns whether throttling is engaged."""
        if used is None or not peak or peak <= 0:
            return self.engaged  # no measurement: keep the current decision
        ratio = used / peak
        if not self.engaged and ratio >= self.threshold:
            self.engaged = True
        elif self.engaged and ratio < self.threshold * self.release_fraction:
            self.engaged = False
        return self.engaged

    def mba_target(
        self, pids: Iterable[int], group: str = "qosmos-cpu-jobs", peak: float | None = None
    ) -> MbaTarget | None:
        if not (self.has_mba and self.engaged):
            return None
        return MbaTarget(group, self.mba_percent, tuple(sorted(set(pids))), peak)

    def cpu_job_cores(self, full: int, floor: int = 1) -> int:
        """A CPU job's core count now: halved (rounded up, never below ``floor``, its request) when
        engaged without MBA."""
        if self.engaged and not self.has_mba:
            return min(full, max(1, floor, math.ceil(full / 2)))
        return full


def full_cores(pod: PodInfo, node_cpus: int) -> int:
    """A CPU job's unthrottled core count: its annotation, else its CPU limit (rounded up), else the
    node; never below its request (rounded up)."""
    if pod.full_cores:
        n = pod.full_cores
    elif pod.limit_cores:
        n = max(1, math.ceil(pod.limit_cores - 1e-9))
    else:
        n = node_cpus
    return min(max(n, pod.min_cores), node_cpus)


def cpu_job_targets(
    pods: Sequence[PodInfo], node_cpus: Sequence[int], eliminator: ContentionEliminator
) -> list[CpuTarget]:
    """CPU jobs' cpusets: disjoint runs from the high end of the node (training pods pack from the low
    end), overlapping only when their counts exceed the node."""
    cpus = sorted(node_cpus)
    counts: dict[str, int] = {}
    fulls: dict[str, int] = {}
    for p in pods:
        fulls[p.uid] = full_cores(p, len(cpus))
        counts[p.uid] = eliminator.cpu_job_cores(fulls[p.uid], min(p.min_cores, len(cpus)))
    by_key = {p.key: p for p in pods}
    placed = assign_cpus({p.key: counts[p.uid] for p in pods}, cpus, from_top=True)
    out = []
    for key in sorted(by_key):
        p = by_key[key]
        n, full = counts[p.uid], fulls[p.uid]
        halved = n < full
        quota = None if p.limit_cores is None and not halved else float(n if halved else (p.limit_cores or n))
        out.append(CpuTarget(p.uid, p.key, placed[key], quota, "halved (§V-E, no MBA)" if halved else "full"))
    return out


# --------------------------------------------------------------------------- network (§V-E)


def htb_target(
    pods: Sequence[PodInfo], dev: str, link_mbit: int, gpu_share: float = GPU_NET_SHARE, enabled: bool = True
) -> HtbTarget | None:
    """tc HTB only where the admin enabled shaping (``enabled``) and while a GPU job that asks for it
    (``qosmos.io/multi-node``) runs on the node (§V-E); CPU jobs share the rest. Every pod address
    (IPv4 and IPv6) is classified."""
    if not enabled or not dev or link_mbit <= 0:
        return None
    if not any(p.multi_node and p.role != "cpu" for p in pods):
        return None
    gpu = tuple(sorted({ip for p in pods if p.role in ("training", "inference") for ip in p.all_ips}))
    cpu = tuple(sorted({ip for p in pods if p.role == "cpu" for ip in p.all_ips}))
    return HtbTarget(dev, link_mbit, gpu, cpu, gpu_share)


def veth_caps(
    pods: Sequence[PodInfo], link_mbit: int, gpu_share: float = GPU_NET_SHARE, enabled: bool = True
) -> dict[str, int]:
    """Per-pod shaping on each pod's host veth (``--tc-dev veth``): while a GPU job that asks for it
    (``qosmos.io/multi-node``) runs, each CPU-job pod is capped at an equal part of the CPU jobs'
    share, (1 - ``gpu_share``) of the link; GPU-job pods, unmanaged pods and the host are never
    capped. Unlike the HTB on one device, a capped pod cannot borrow another's idle part.
    Pod uid -> Mbit/s."""
    if not enabled or link_mbit <= 0:
        return {}
    if not any(p.multi_node and p.role != "cpu" for p in pods):
        return {}
    cpu = sorted(p.uid for p in pods if p.role == "cpu")
    if not cpu:
        return {}
    each = max(1, int(link_mbit * (1 - gpu_share)) // len(cpu))
    return dict.fromkeys(cpu, each)
