"""Cluster state: who holds which GPU, CPU and memory, as numpy arrays for speed.

GPUs are tracked per GPU in milli-units so that GPU-sharing pods (openb ``gpu_milli``)
and whole-GPU jobs live in one accounting; ``free_gpus`` caches the count of wholly free
GPUs per node. Allocation and release are the only mutators, and both check what they
change, so a stale caller can never double-allocate a GPU.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import POOL_AND, Allocation, Node, NodeGrant, PlacementRequest, Platform

_LINEAGES = itertools.count()

FULL = 1000  # milli-GPU of one whole GPU
# products at or past this would overflow int64 arithmetic (a pod may ask up to 2^62 cores, summed over containers)
_INT64_SAFE = 2**62


def share(amount: int, part: int, whole: int) -> int:
    """What ``part`` of a request's ``whole`` GPUs (or pods) take of its CPU or memory: rounded up, in
    integers (a float share rounds 6000 × 2/3 up to 4001, and loses digits of the largest requests)."""
    return -(-amount * part // whole) if whole else amount


def _distinct(ids: tuple[int, ...]) -> bool:
    return len(ids) < 2 or len(set(ids)) == len(ids)


def _share(req: PlacementRequest) -> str:
    """The request's CPU and memory, as a never-fits message says them."""
    parts = [f"{req.cpu_milli} milli-CPU" if req.cpu_milli else "", f"{req.memory_mib} MiB" if req.memory_mib else ""]
    return " and ".join(p for p in parts if p)


class ClusterState:
    def __init__(self, nodes: Sequence[Node]) -> None:
        if not nodes:
            raise InvalidInput("nodes", [], "a cluster needs at least one node")
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            raise InvalidInput("nodes", names, "node names must be unique")
        self.nodes = list(nodes)
        self.index = {n.name: i for i, n in enumerate(self.nodes)}
        n = len(self.nodes)
        self.gpu_cap = np.array([nd.gpus for nd in self.nodes], dtype=np.int64)
        width = max(1, int(self.gpu_cap.max()))
        self.gpu_free_milli = np.zeros((n, width), dtype=np.int64)
        for i, cap in enumerate(self.gpu_cap):
            self.gpu_free_milli[i, :cap] = FULL
        self.free_gpus = self.gpu_cap.copy()
        self.cpu_cap = np.array([nd.cpu_milli for nd in self.nodes], dtype=np.int64)
        self.mem_cap = np.array([nd.memory_mib for nd in self.nodes], dtype=np.int64)
        self.free_cpu = self.cpu_cap.copy()
        self.free_mem = self.mem_cap.copy()
        # A node without CPU (memory) figures, as in Helios/Philly traces, does not constrain CPU
        # (memory): one rule for placement, filtering, planning and admission (see fit_mask).
        self.cpu_untracked = self.cpu_cap == 0
        self.mem_untracked = self.mem_cap == 0
        self.vcs = sorted({nd.vc for nd in self.nodes})
        self.vc_id = np.array([self.vcs.index(nd.vc) for nd in self.nodes], dtype=np.int64)
        self.gpu_models = sorted({nd.gpu_model for nd in self.nodes})
        self.model_id = np.array([self.gpu_models.index(nd.gpu_model) for nd in self.nodes], dtype=np.int64)
        switches = sorted({nd.switch for nd in self.nodes})
        self.switch_id = np.array([switches.index(nd.switch) for nd in self.nodes], dtype=np.int64)
        self.n_switches = len(switches)
        # The static per-node figures as Python ints: allocate/release/grant read them per grant, and a
        # numpy scalar read costs several times a list read in those loops.
        self._cap = self.gpu_cap.tolist()
        self._node_vc = self.vc_id.tolist()
        self._switch = self.switch_id.tolist()
        self._masks: dict[tuple[str | None, tuple[str, ...], str | None], np.ndarray] = {}
        self._biggest: dict[tuple[str | None, tuple[str, ...], str | None], int] = {}
        # Named node subsets (SODA's resource arrays); static, shared by copies like the masks.
        self.pools: dict[str, np.ndarray] = {}
        # Cohorts (``share_nodes``): VC name -> the VCs whose nodes its requests may use; static, shared.
        self.cohorts: dict[str, tuple[str, ...]] = {}
        self._groups: dict[str | None, tuple[int, ...]] = {}  # vc_group's answers (static between cohort changes)
        self._own: dict[str, int] = {}  # GPUs on each VC's own nodes (static)
        # Answers that depend on the static parts only, shared by copies: the empty books (``emptied``)
        # and what callers ask of them (``on_empty``)
        self._fixed: dict[Any, Any] = {}
        # Per partition (VC): wholly free GPUs, and a counter bumped on every release, so callers
        # can remember a refusal until something is released (allocations only shrink free space).
        self.vc_free = np.bincount(self.vc_id, weights=self.gpu_cap, minlength=len(self.vcs)).astype(np.int64)
        self.vc_releases = np.zeros(len(self.vcs), dtype=np.int64)
        # Which books the release counters count on: a state built afresh (the operator's, every pass)
        # restarts them at 0, so a refusal remembered against another state must not carry over.
        # Copies share it while they only add allocations (a pass's starts, which its caller books too);
        # a copy's first release gives it a lineage of its own (below).
        self.lineage = next(_LINEAGES)
        self._derived = False
        self.books = 0  # bumped by every allocate and release: what was derived from the books is stale
        # Nodes nothing new may go to for now (not Ready, cordoned, down), even where a release frees room
        # on them within a pass (a preempted gang's): None when every node is usable. Replaced, never
        # written in place, so that copies made before keep theirs.
        self.unusable: np.ndarray | None = None

    def copy(self) -> ClusterState:
        """An independent copy of the mutable books (static arrays and caches are shared)."""
        c = object.__new__(ClusterState)
        c.__dict__.update(self.__dict__)
        for name in ("gpu_free_milli", "free_gpus", "free_cpu", "free_mem", "vc_free", "vc_releases"):
            setattr(c, name, getattr(self, name).copy())
        c._derived = True
        return c

    def emptied(self) -> ClusterState:
        """The cluster with nothing allocated, on books of its own (static parts shared; made once, for
        reading only): where a placer's "could it ever" is asked (it finds at least as much room there
        as on any state)."""
        c: ClusterState | None = self._fixed.get("empty")
        if c is None:
            c = self.copy()
            width = c.gpu_free_milli.shape[1]
            c.gpu_free_milli = np.where(np.arange(width) < self.gpu_cap[:, None], FULL, 0).astype(np.int64)
            c.free_gpus, c.free_cpu, c.free_mem = self.gpu_cap.copy(), self.cpu_cap.copy(), self.mem_cap.copy()
            c.vc_free = np.bincount(self.vc_id, weights=self.gpu_cap, minlength=len(self.vcs)).astype(np.int64)
            c.vc_releases = np.zeros(len(self.vcs), dtype=np.int64)
            c.lineage, c.books = next(_LINEAGES), 0
            c.unusable = None
            self._fixed["empty"] = c
        return c

    def on_empty(self, key: Hashable, ask: Callable[[ClusterState], bool]) -> bool:
        """``ask(self.emptied())``, remembered under ``key`` for as long as the nodes are these (the
        caller's key says what is asked: a placer's name and the request)."""
        got: bool | None = self._fixed.get(key)
        if got is None:
            got = self._fixed[key] = ask(self.emptied())
        return got

    def vc_index(self, vc: str | None) -> int:
        """Index of ``vc`` in ``vcs``; -1 when no node belongs to it."""
        try:
            return self.vcs.index(vc) if vc is not None else -1
        except ValueError:
            return -1

    # ---- the one fit check -------------------------------------------------------------------
    def fit_mask(self, req: PlacementRequest, per_node_gpus: int, total_gpus: int, *, now: bool = True) -> np.ndarray:
        """Nodes that can host ``per_node_gpus`` of ``req``'s ``total_gpus`` whole GPUs with their share of
        its CPU and memory: eligible (VC, GPU model) and, with ``now``, free enough; without ``now``,
        large enough (could ever fit). Placement, extender filtering/planning and admission all use it."""
        mask = self.eligible(req.vc, req.gpu_models, req.pool)
        # a fresh array from here on: the cached eligible mask is never written
        mask = mask & ((self.free_gpus if now else self.gpu_cap) >= per_node_gpus) if per_node_gpus else mask.copy()
        if now and self.unusable is not None:
            mask &= ~self.unusable
        if not (req.cpu_milli or req.memory_mib):
            return mask
        cpu, mem = share(req.cpu_milli, per_node_gpus, total_gpus), share(req.memory_mib, per_node_gpus, total_gpus)
        cpus, mems = (self.free_cpu, self.free_mem) if now else (self.cpu_cap, self.mem_cap)
        if cpu:
            mask &= (cpus >= cpu) | self.cpu_untracked
        if mem:
            mask &= (mems >= mem) | self.mem_untracked
        return mask

    def cpu_fits(self, node: int, cpu_milli: int, memory_mib: int) -> bool:
        """Whether ``node`` has room now for this much CPU and memory (untracked figures never bind)."""
        return bool(
            (self.cpu_untracked[node] or self.free_cpu[node] >= cpu_milli)
            and (self.mem_untracked[node] or self.free_mem[node] >= memory_mib)
        )

    # ---- views ---------------------------------------------------------------------------
    @property
    def total_gpus(self) -> int:
        return int(self.gpu_cap.sum())

    @property
    def used_gpus(self) -> int:
        """GPUs not wholly free (a shared GPU counts as used)."""
        return int(self.gpu_cap.sum() - self.free_gpus.sum())

    def used_nodes(self) -> int:
        return int(np.count_nonzero(self.free_gpus < self.gpu_cap))

    def define_pool(self, name: str, mask: np.ndarray) -> None:
        """Name a static subset of nodes that requests may be confined to (``PlacementRequest.pool``)."""
        if mask.shape != (len(self.nodes),) or mask.dtype != bool:
            raise InvalidInput("pool", name, f"needs a boolean mask over the {len(self.nodes)} nodes")
        if not name or POOL_AND in name:
            raise InvalidInput("pool", name, f"a pool name is non-empty and has no {POOL_AND!r} (it joins pools)")
        prev = self.pools.get(name)
        if prev is not None and np.array_equal(prev, mask):
            return
        frozen = mask.copy()
        frozen.setflags(write=False)
        self.pools[name] = frozen
        for cache in (self._masks, self._biggest):
            for key in [k for k in cache if k[2] is not None and name in k[2].split(POOL_AND)]:
                del cache[key]
        self._fixed.clear()  # what was asked of the empty nodes may have named it

    def share_nodes(self, members: Sequence[str]) -> None:
        """Make ``members`` (the VCs of one cohort) place on the union of their nodes: from now on a
        request of any of them is eligible on every member's nodes. Static like the pools (copies share
        it); repeating the same call changes nothing."""
        group = tuple(sorted(set(members)))
        if not group or any(not m for m in group):
            raise InvalidInput("cohort", list(members), "names no VirtualCluster")
        if all(self.cohorts.get(m) == group for m in group):
            return
        for m in group:
            old = self.cohorts.get(m)
            if old is not None and old != group:
                raise InvalidInput("cohort", m, f"already shares nodes with {', '.join(old)}")
            self.cohorts[m] = group
        self._masks.clear()  # in place: every copy's cached masks go too
        self._biggest.clear()
        self._groups.clear()
        self._fixed.clear()

    def vc_group(self, vc: str | None) -> tuple[int, ...]:
        """Indices (into ``vcs``) of the VCs whose nodes a request of ``vc`` may use: its cohort's, else
        its own (empty when none of them has a node). Memoised: every admission cycle of a forecast asks."""
        g = self._groups.get(vc)
        if g is None:
            names = self.cohorts.get(vc, (vc,)) if vc is not None else ()
            g = self._groups[vc] = tuple(self.vcs.index(v) for v in names if v in self.vcs)
        return g

    def own_gpus(self, vc: str) -> int:
        """GPUs on ``vc``'s own nodes, whatever it shares (a cohort member's default nominal share)."""
        n = self._own.get(vc)
        if n is None:
            i = self.vc_index(vc)
            n = self._own[vc] = int(self.gpu_cap[self.vc_id == i].sum()) if i >= 0 else 0
        return n

    def platform(self, mask: np.ndarray) -> Platform:
        """The GENIE platform of the nodes of ``mask``: their count, the largest, what each size counts
        (unlike nodes offer no shape they cannot hold) and their main GPU model."""
        return Platform.of(self.gpu_cap[mask].tolist(), self.main_gpu_model(mask))

    def main_gpu_model(self, mask: np.ndarray) -> str:
        """The GPU model with the most GPUs among the nodes of ``mask`` ("" when none is named): what a
        GENIE platform of those nodes is profiled as."""
        counts = np.bincount(self.model_id[mask], weights=self.gpu_cap[mask], minlength=len(self.gpu_models))
        return self.gpu_models[int(np.argmax(counts))] if counts.size and counts.max() > 0 else ""

    def eligible(self, vc: str | None, gpu_models: tuple[str, ...] = (), pool: str | None = None) -> np.ndarray:
        """Nodes a request may use: its VC (logical partition; a cohort's union, ``share_nodes``),
        allowed GPU models and node pool."""
        key = (vc, gpu_models, pool)
        mask = self._masks.get(key)
        if mask is None:
            mask = np.ones(len(self.nodes), dtype=bool)
            if vc is not None and vc in self.cohorts:
                mask &= np.isin(self.vc_id, self.vc_group(vc))
            elif vc is not None:
                mask &= self.vc_id == (self.vcs.index(vc) if vc in self.vcs else -1)
            if gpu_models:
                ids = [self.gpu_models.index(m) for m in gpu_models if m in self.gpu_models]
                mask &= np.isin(self.model_id, ids)
            for part in pool.split(POOL_AND) if pool is not None else ():
                if part not in self.pools:
                    raise InvalidInput("pool", part, f"no such node pool (known: {', '.join(self.pools) or 'none'})")
                mask &= self.pools[part]
            mask.setflags(write=False)
            self._masks[key] = mask
        return mask

    def biggest_node(self, vc: str | None, gpu_models: tuple[str, ...] = (), pool: str | None = None) -> int:
        """GPUs of the largest node a request may use (static, so cached per partition)."""
        key = (vc, gpu_models, pool)
        size = self._biggest.get(key)
        if size is None:
            mask = self.eligible(vc, gpu_models, pool)
            size = self._biggest[key] = int(self.gpu_cap[mask].max()) if mask.any() else 0
        return size

    def capacity(self, vc: str | None, gpu_models: tuple[str, ...] = ()) -> int:
        """GPUs the request's partition has in all (free or not)."""
        return int(self.gpu_cap[self.eligible(vc, gpu_models)].sum())

    def could_ever_fit(self, req: PlacementRequest) -> str | None:
        """None when an empty cluster could host ``req``; else the reason it never can."""
        mask = self.eligible(req.vc, req.gpu_models, req.pool)
        if not mask.any():
            within = f" in node pool {req.pool}" if req.pool is not None else ""
            return f"no node in vc={req.vc!r} with GPU model in {list(req.gpu_models) or 'any'}{within}"
        caps = self.gpu_cap[mask]
        gang = req.gang  # a chosen or user-fixed shape
        # each node's share of the request's CPU and memory goes with its GPUs (fit_mask): a node holds
        # at most the GPUs whose share its capacity covers
        most = self._most_gpus(req, mask) if req.gpu_milli == FULL and (req.cpu_milli or req.memory_mib) else caps
        if gang is not None:
            fits = int(np.count_nonzero(caps >= gang.d_gpn))
            if fits < gang.d_node:
                return f"only {fits} eligible nodes have {gang.d_gpn} GPUs; placement needs {gang.d_node}"
            fits = int(np.count_nonzero(most >= gang.d_gpn))
            if fits < gang.d_node:
                return (
                    f"only {fits} eligible nodes have {gang.d_gpn} GPUs with their share of {_share(req)}; "
                    f"placement needs {gang.d_node}"
                )
        elif req.gpus > int(caps.sum()):
            return f"needs {req.gpus} GPUs; the eligible nodes have {int(caps.sum())}"
        elif req.gpus > int(most.sum()):
            return f"needs {req.gpus} GPUs with {_share(req)}; the eligible nodes could hold {int(most.sum())} of them"
        if req.gpus == 0 and not self.fit_mask(req, 0, 0, now=False).any():
            return f"needs {req.cpu_milli} milli-CPU on one node; the largest eligible node has {int(self.cpu_cap[mask].max())}"
        if req.gpu_milli < FULL:
            if not (caps > 0).any():
                return "a GPU-sharing request needs a node with GPUs"
            # its CPU and memory all on the node of the GPU it shares (placement._shared_gpu)
            if (req.cpu_milli or req.memory_mib) and not (
                self.fit_mask(req, 0, 0, now=False) & (self.gpu_cap > 0)
            ).any():
                return f"a GPU-sharing request needs {_share(req)} on one node with GPUs; no eligible node has them"
        return None

    def _most_gpus(self, req: PlacementRequest, mask: np.ndarray) -> np.ndarray:
        """Per eligible node, the most of ``req``'s whole GPUs it could ever hold with their share of the
        request's CPU and memory (ceil(need × g / gpus) <= capacity, i.e. g <= capacity × gpus / need)."""
        most: np.ndarray = self.gpu_cap[mask].astype(np.int64)
        for need, cap, untracked in (
            (req.cpu_milli, self.cpu_cap, self.cpu_untracked),
            (req.memory_mib, self.mem_cap, self.mem_untracked),
        ):
            if need and req.gpus:
                caps = cap[mask]
                if max(need, req.gpus * int(caps.max())) >= _INT64_SAFE:  # Python ints: exact, no overflow
                    caps = caps.astype(object)
                bound = np.minimum(most, caps * req.gpus // need).astype(np.int64)
                most = np.where(untracked[mask], most, bound)
        return most

    # ---- mutators --------------------------------------------------------------------------
    def refusal(self, alloc: Allocation) -> InvalidInput | None:
        """Why ``alloc`` cannot be booked now (a GPU, or a node's CPU or memory, not free); None: it can."""
        gfm, cap = self.gpu_free_milli, self._cap
        for g in alloc.grants:
            row, need, c = gfm[g.node], g.gpu_milli, cap[g.node]
            for gpu in g.gpu_ids:
                if gpu >= c or row[gpu] < need:
                    return InvalidInput("allocation", (self.nodes[g.node].name, gpu), "GPU is not free")
            if (g.cpu_milli or g.memory_mib) and not self.cpu_fits(g.node, g.cpu_milli, g.memory_mib):
                return InvalidInput("allocation", self.nodes[g.node].name, "CPU or memory is not free")
        return None

    def allocate(self, alloc: Allocation) -> None:
        self.books += 1
        refused = self.refusal(alloc)
        if refused is not None:
            raise refused
        gfm = self.gpu_free_milli
        for g in alloc.grants:
            node = g.node
            row = gfm[node]
            if g.gpu_milli == FULL and _distinct(g.gpu_ids):  # checked above: each of its GPUs is wholly free
                n = len(g.gpu_ids)
                if n:
                    for gpu in g.gpu_ids:
                        row[gpu] = 0
                    self.free_gpus[node] -= n
                    self.vc_free[self._node_vc[node]] -= n
            else:
                vc = self._node_vc[node]
                for gpu in g.gpu_ids:
                    if row[gpu] == FULL:
                        self.free_gpus[node] -= 1
                        self.vc_free[vc] -= 1
                    row[gpu] -= g.gpu_milli
            if g.cpu_milli and not self.cpu_untracked[node]:
                self.free_cpu[node] -= g.cpu_milli
            if g.memory_mib and not self.mem_untracked[node]:
                self.free_mem[node] -= g.memory_mib

    def set_usable(self, node: int, usable: bool) -> None:
        """Whether anything new may be placed on ``node`` now (``fit_mask``), whatever is free there."""
        flags = np.zeros(len(self.nodes), dtype=bool) if self.unusable is None else self.unusable.copy()
        flags[node] = not usable
        self.unusable = flags if flags.any() else None
        self.books += 1  # (what was derived from the books is stale)
        if usable:  # room again, as a release gives: refusals remembered since no longer hold (see release)
            if self._derived:
                self.lineage, self._derived = next(_LINEAGES), False
            self.vc_releases[self._node_vc[node]] += 1

    def book_free(self, node: int) -> Allocation | None:
        """Book whatever is still free on ``node`` (its whole free GPUs, CPU and memory) and mark it unusable
        (:meth:`set_usable`) so nothing new is placed there (a node not Ready, cordoned or asleep; what runs
        there stays booked as its own): the allocation booked, None when nothing was free."""
        self.set_usable(node, False)
        row = self.gpu_free_milli[node, : int(self.gpu_cap[node])]
        ids = tuple(int(g) for g in (row == FULL).nonzero()[0])
        cpu = 0 if self.cpu_untracked[node] else max(int(self.free_cpu[node]), 0)
        mem = 0 if self.mem_untracked[node] else max(int(self.free_mem[node]), 0)
        if not (ids or cpu or mem):
            return None
        alloc = Allocation((NodeGrant(node, ids, FULL, cpu, mem),))
        self.allocate(alloc)
        return alloc

    def release(self, alloc: Allocation) -> None:
        self.books += 1
        if self._derived:
            # A copy that releases may go where the books it came from never go (a preemption taken
            # back: released, then allocated again), so its release count no longer names one state of
            # theirs: a refusal remembered on it (FitMemo) held on the original after another release.
            self.lineage, self._derived = next(_LINEAGES), False
        gfm = self.gpu_free_milli
        for g in alloc.grants:
            node = g.node
            row = gfm[node]
            vc = self._node_vc[node]
            ids = g.gpu_ids
            # whole GPUs held wholly (distinct ids, as placers grant them): booked at once
            if g.gpu_milli == FULL and ids and all(row[gpu] == 0 for gpu in ids) and _distinct(ids):
                for gpu in ids:
                    row[gpu] = FULL
                self.free_gpus[node] += len(ids)
                self.vc_free[vc] += len(ids)
                ids = ()
            for gpu in ids:
                row[gpu] += g.gpu_milli
                if row[gpu] > FULL:
                    raise InvalidInput("release", (self.nodes[node].name, gpu), "released more than allocated")
                if row[gpu] == FULL:
                    self.free_gpus[node] += 1
                    self.vc_free[vc] += 1
            if g.cpu_milli and not self.cpu_untracked[node]:
                self.free_cpu[node] += g.cpu_milli
            if g.memory_mib and not self.mem_untracked[node]:
                self.free_mem[node] += g.memory_mib
            self.vc_releases[vc] += 1

    # ---- helpers for placers ---------------------------------------------------------------
    def grant(self, node: int, gpus: int, req: PlacementRequest, total_gpus: int) -> NodeGrant:
        """Whole free GPUs on ``node`` plus its share of the request's CPU and memory."""
        cap = self._cap[node]
        if self.free_gpus[node] == cap:  # an idle node: its first GPUs
            ids = tuple(range(min(gpus, cap)))
        else:
            row = self.gpu_free_milli[node, :cap].tolist()  # a handful of GPUs: a list scan beats numpy calls
            ids = tuple([k for k, free in enumerate(row) if free == FULL][:gpus])
        if not (req.cpu_milli or req.memory_mib):
            return NodeGrant(node, ids)
        return NodeGrant(
            node, ids, FULL, share(req.cpu_milli, gpus, total_gpus), share(req.memory_mib, gpus, total_gpus)
        )

    def cross_switch(self, nodes: Sequence[int]) -> bool:
        if len(nodes) < 2:
            return False
        sw = self._switch
        return len({sw[i] for i in nodes}) > 1
