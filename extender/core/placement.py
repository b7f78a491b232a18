"""Placement algorithms behind one interface (AnalySIM §3.1, Helios Alg. 1, GENIE §5.4).

A placer turns a PlacementRequest into a concrete Allocation on the current
ClusterState, or None when it does not fit now. Placers never mutate the state; the
caller allocates what it accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
from qosmos.extender.core.cluster import FULL, ClusterState, share
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Allocation, NodeGrant, PlacementRequest, Shape


class Placer(Protocol):
    name: str

    def place(self, req: PlacementRequest, cluster: ClusterState) -> Allocation | None: ...


def _usable(req: PlacementRequest, cluster: ClusterState, per_node_gpus: int, total: int) -> np.ndarray:
    """Eligible nodes with ``per_node_gpus`` whole free GPUs and room for their CPU/memory share."""
    return cluster.fit_mask(req, per_node_gpus, total)


_ONE_NODE: dict[int, Shape] = {}  # Shape(1, g) by g: immutable, so shared (placement asks for one per request)


def default_shape(req: PlacementRequest, cluster: ClusterState) -> Shape:
    """The ⟨#nodes, #GPUs per node⟩ a plain GPU request asks for (AnalySIM's request tuple).

    A chosen (GENIE) shape, else the user's fixed node count (:attr:`PlacementRequest.gang`);
    otherwise one node when the largest eligible node can hold the job, else as many full nodes
    of that size as needed.
    """
    if req.shape is not None:
        return req.shape
    if req.nodes and (gang := req.gang) is not None:  # the user's fixed gang (types.fixed_shape)
        return gang
    biggest = cluster.biggest_node(req.vc, req.gpu_models, req.pool)
    if biggest <= 0 or req.gpus <= biggest:
        g = max(req.gpus, 1)
        shape = _ONE_NODE.get(g)
        if shape is None:
            shape = _ONE_NODE[g] = Shape(1, g)
        return shape
    d_node = -(-req.gpus // biggest)
    # Uneven splits (9 GPUs on 8-GPU nodes) take ceil(gpus/d_node) per node and one GPU less
    # on the last nodes; see _split.
    return Shape(d_node, -(-req.gpus // d_node))


def _split(shape: Shape, gpus: int) -> list[int]:
    """GPUs per node for ``shape`` carrying exactly ``gpus`` (the last nodes give up the excess)."""
    counts = [shape.d_gpn] * shape.d_node
    for i in range(shape.gpus - gpus):
        counts[-1 - (i % shape.d_node)] -= 1
    return counts


def _allocation(cluster: ClusterState, req: PlacementRequest, picks: list[tuple[int, int]]) -> Allocation:
    total = sum(g for _, g in picks)
    grants = tuple(cluster.grant(node, g, req, total) for node, g in picks)
    return Allocation(grants, cluster.cross_switch([n for n, _ in picks]))


def _shared_gpu(req: PlacementRequest, cluster: ClusterState) -> Allocation | None:
    """GPU sharing: the partially used GPU with the least sufficient free share (best fit)."""
    mask = cluster.fit_mask(req, 0, 0)
    if not mask.any():
        return None
    free = cluster.gpu_free_milli
    ok = (free >= req.gpu_milli) & mask[:, None]
    if not ok.any():
        return None
    score = np.where(ok, free, FULL + 1)
    node, gpu = np.unravel_index(int(np.argmin(score)), score.shape)
    grant = NodeGrant(int(node), (int(gpu),), req.gpu_milli, req.cpu_milli, req.memory_mib)
    return Allocation((grant,), False)


def _cpu_only(req: PlacementRequest, cluster: ClusterState) -> Allocation | None:
    """CPU jobs: best fit on CPU, GPU-less nodes first so GPU nodes keep their cores (SODA §V-C)."""
    ask = PlacementRequest(0, vc=req.vc, cpu_milli=req.cpu_milli, memory_mib=req.memory_mib, pool=req.pool)
    mask = cluster.fit_mask(ask, 0, 0)
    if not mask.any():
        return None
    score = np.where(mask, cluster.free_cpu + (cluster.gpu_cap > 0) * (1 << 40), np.iinfo(np.int64).max)
    node = int(np.argmin(score))
    return Allocation((NodeGrant(node, (), FULL, req.cpu_milli, req.memory_mib),), False)


class _Placer:
    """CPU-only and GPU-sharing requests are placed the same way by every placer; whole-GPU
    requests go to the subclass's ``place_gpus``."""

    name = ""

    def place(self, req: PlacementRequest, cluster: ClusterState) -> Allocation | None:
        if req.gpus == 0:
            return _cpu_only(req, cluster)
        if req.gpu_milli < FULL:
            return _shared_gpu(req, cluster)
        return self.place_gpus(req, cluster)

    def place_gpus(self, req: PlacementRequest, cluster: ClusterState) -> Allocation | None:
        raise NotImplementedError


_NO_NODE = np.iinfo(np.int64).max


def _room(cluster: ClusterState, req: PlacementRequest, node: int, g: int) -> int:
    """The most of ``g`` of the request's GPUs whose CPU/memory share fits on ``node`` now."""
    while g > 0 and not cluster.cpu_fits(node, share(req.cpu_milli, g, req.gpus), share(req.memory_mib, g, req.gpus)):
        g -= 1
    return g


def _pick_shape(req: PlacementRequest, cluster: ClusterState, shape: Shape, best_fit: bool) -> Allocation | None:
    """``shape.d_node`` usable nodes with ``shape.d_gpn`` free GPUs each: the first in node order, or with
    ``best_fit`` the fewest free GPUs first (the smallest sufficient nodes, leaving big holes intact;
    ties in node order)."""
    # each node's share as _allocation grants it: d_gpn of the request's GPUs (an uneven split, 5 GPUs as
    # 3 + 2, gives the first nodes d_gpn of req.gpus, not of shape.gpus)
    usable = _usable(req, cluster, shape.d_gpn, req.gpus)
    if shape.d_node == 1:  # the common case: one argmin/argmax picks what the stable sort puts first
        node = int(np.where(usable, cluster.free_gpus, _NO_NODE).argmin()) if best_fit else int(usable.argmax())
        if not usable[node]:
            return None
        return Allocation((cluster.grant(node, req.gpus, req, req.gpus),), False)
    cand = np.flatnonzero(usable)
    if cand.size < shape.d_node:
        return None
    chosen = cand[np.argsort(cluster.free_gpus[cand], kind="stable")] if best_fit else cand
    return _allocation(cluster, req, list(zip(chosen[: shape.d_node].tolist(), _split(shape, req.gpus), strict=True)))


class FirstFit(_Placer):
    """The first node combination found, scanning nodes in order (AnalySIM §3.1)."""

    name = "first-fit"

    def place_gpus(self, req: PlacementRequest, cluster: ClusterState) -> Allocation | None:
        return _pick_shape(req, cluster, default_shape(req, cluster), best_fit=False)


class BestFit(_Placer):
    """The smallest sufficient nodes: fewest free GPUs left over (AnalySIM §3.1)."""

    name = "best-fit"

    def place_gpus(self, req: PlacementRequest, cluster: ClusterState) -> Allocation | None:
        return _pick_shape(req, cluster, default_shape(req, cluster), best_fit=True)


class FreeGPU(_Placer):
    """Idle GPUs from any nodes, fewest nodes first (AnalySIM §3.1 "free-GPU").

    Greedy on the largest free counts gives the fewest nodes; the last node is then the
    best fit for the remainder, so the job leaves big holes intact.
    """

    name = "free-gpu"

    def place_gpus(self, req: PlacementRequest, cluster: ClusterState) -> Allocation | None:
        if req.nodes:  # a gang the user fixed is placed as fixed (best fit, like its spare GPUs below)
            return _pick_shape(req, cluster, default_shape(req, cluster), best_fit=True)
        cand = np.flatnonzero(_usable(req, cluster, 1, req.gpus))
        if cand.size == 0:
            return None
        free = cluster.free_gpus[cand]
        if int(free.sum()) < req.gpus:
            return None

        order = np.argsort(-free, kind="stable")
        picks: list[tuple[int, int]] = []
        need = req.gpus
        for pos, j in enumerate(order):
            if free[j] >= need:
                # best fit for the remainder among the not-yet-picked candidates with room for its share
                rest = order[pos:]
                ok = free[rest] >= need
                if req.cpu_milli or req.memory_mib:
                    ok &= cluster.fit_mask(req, need, req.gpus)[cand[rest]]
                fitting = rest[ok]
                if fitting.size:
                    j = fitting[np.argmin(free[fitting])]
                    picks.append((int(cand[j]), need))
                    need = 0
                    break
            # CPU/memory were checked for one GPU's share: take only what the node has room for
            take = _room(cluster, req, int(cand[j]), min(int(free[j]), need))
            if take:
                picks.append((int(cand[j]), take))
                need -= take
        if need:
            return None
        return _allocation(cluster, req, picks)


class Consolidate(_Placer):
    """As few nodes as possible (Helios Alg. 1 ConsolidateAllocate).

    A job that fits one node takes the best-fitting node; a larger job waits for whole
    idle nodes (a 16-GPU job needs two idle 8-GPU nodes), preferring one switch.
    """

    name = "consolidate"

    def place_gpus(self, req: PlacementRequest, cluster: ClusterState) -> Allocation | None:
        shape = default_shape(req, cluster)
        free = cluster.free_gpus
        if shape.d_node == 1:
            return _pick_shape(req, cluster, shape, best_fit=True)
        if req.shape is not None or req.nodes:
            return _TopologyAware().place_shape(req, cluster, shape)
        idle = np.flatnonzero(_usable(req, cluster, 1, req.gpus) & (free == cluster.gpu_cap))
        caps = cluster.gpu_cap[idle]
        if int(caps.sum()) < req.gpus:
            return None
        order = idle[np.argsort(-caps, kind="stable")]
        picks, need = [], req.gpus
        for node in order:
            # idle (``_usable``) checked the share of one GPU: a node gives the GPUs whose share it holds
            take = _room(cluster, req, int(node), min(int(cluster.gpu_cap[node]), need))
            if take == 0:
                continue
            picks.append((int(node), take))
            need -= take
            if need == 0:
                break
        return _allocation(cluster, req, picks) if need == 0 else None


class _TopologyAware:
    """Realise a shape on one switch when possible (best fit inside it), else across switches."""

    def place_shape(self, req: PlacementRequest, cluster: ClusterState, shape: Shape) -> Allocation | None:
        cand = np.flatnonzero(_usable(req, cluster, shape.d_gpn, req.gpus))
        if cand.size < shape.d_node:
            return None
        free = cluster.free_gpus[cand]
        if shape.d_node > 1 and cluster.n_switches > 1:
            sw = cluster.switch_id[cand]
            counts = np.bincount(sw, minlength=cluster.n_switches)
            ok = np.flatnonzero(counts >= shape.d_node)
            if ok.size:
                # the switch that fits with the fewest spare nodes keeps big switches whole
                best = ok[np.argmin(counts[ok])]
                inside = np.flatnonzero(sw == best)
                chosen = inside[np.argsort(free[inside], kind="stable")[: shape.d_node]]
                return _allocation(
                    cluster,
                    req,
                    list(zip((int(cand[j]) for j in chosen), _split(shape, req.gpus), strict=True)),
                )
        chosen = np.argsort(free, kind="stable")[: shape.d_node]
        return _allocation(
            cluster, req, list(zip((int(cand[j]) for j in chosen), _split(shape, req.gpus), strict=True))
        )


class CERPlacer(_Placer):
    """Realise the GENIE placement ⟨d_node, d_gpn⟩ chosen by CER (seed 001 Alg. 1).

    The policy puts the chosen shape on the request; this placer finds nodes for it,
    topology-aware. Without a shape it consolidates like Helios.
    """

    name = "cer"

    def place_gpus(self, req: PlacementRequest, cluster: ClusterState) -> Allocation | None:
        if req.shape is None:
            return Consolidate().place_gpus(req, cluster)
        return _TopologyAware().place_shape(req, cluster, req.shape)


PLACERS: dict[str, Callable[[], Placer]] = {
    "consolidate": Consolidate,
    "first-fit": FirstFit,
    "best-fit": BestFit,
    "free-gpu": FreeGPU,
    "cer": CERPlacer,
}


def places_on_empty(placer: Placer, req: PlacementRequest, cluster: ClusterState) -> bool:
    """Whether ``placer`` finds ``req`` a placement on ``cluster``'s nodes with nothing running: the "could
    it ever" of admission and of the simulator's up-front check (could_ever_fit is necessary only: a
    heuristic may never place what fits in all). Remembered per cluster and request."""
    key = ("places", placer.name, req.gpus, req.shape, req.vc, req.gpu_models, req.gpu_milli, req.cpu_milli,
           req.memory_mib, req.nodes, req.pool)  # fmt: skip
    return cluster.on_empty(key, lambda empty: placer.place(req, empty) is not None)


def get_placer(name: str) -> Placer:
    try:
        return PLACERS[name]()
    except KeyError:
        raise InvalidInput("placement", name, f"expected one of {', '.join(PLACERS)}") from None
