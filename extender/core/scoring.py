"""Node filtering and scoring for one pod of a job: the hook the extender, operator and simulator share.

Pure (stdlib + numpy + core). A pod is one member of a gang that realises a GENIE
placement ⟨d_node, d_gpn⟩ (seed 001 §5, Alg. 1): each member asks for d_gpn GPUs on its
own node. The decision is the core placer's plan for the members not yet placed; scores
rank nodes by (in order of weight) membership in that plan, the switch of the gang's
peers or plan (topology, AnalySIM §3.1), and best fit on free GPUs (consolidation,
Helios Alg. 1). VC and GPU-model constraints are hard: nodes failing them can never host
the pod, whatever is released.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import numpy as np
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.placement import Placer, get_placer
from qosmos.extender.core.types import Allocation, PlacementRequest, Shape

MAX_SCORE = 10  # kube-scheduler's MaxExtenderPriority
PLAN_SCORE = MAX_SCORE
# Nodes outside the plan score at most 1 + FIT_WEIGHT + TOPOLOGY_WEIGHT, well below a plan
# node, so that a modest extender weight dominates kube-scheduler's own spreading scores.
FIT_WEIGHT = 3.0
TOPOLOGY_WEIGHT = 2.0
DEFAULT_PLACER = "cer"
# Feasible nodes /filter passes on (the top tier of the decision): enough for kube-scheduler's
# own scores to break ties, few enough that neither side serialises or scores hundreds.
DEFAULT_SHORTLIST = 8


def parse_shape(text: str) -> Shape:
    """``"<d_node>x<d_gpn>"`` (the ``qosmos.io/placement`` annotation) as a Shape."""
    if not isinstance(text, str):
        raise InvalidInput("placement", text, 'expected "<d_node>x<d_gpn>", e.g. "2x4"')
    parts = text.strip().lower().split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise InvalidInput("placement", text, 'expected "<d_node>x<d_gpn>", e.g. "2x4"')
    d_node, d_gpn = int(parts[0]), int(parts[1])
    if not (1 <= d_node <= 100_000 and 1 <= d_gpn <= 1024):
        raise InvalidInput("placement", text, "d_node must be in [1, 100000] and d_gpn in [1, 1024]")
    return Shape(d_node, d_gpn)


def format_shape(shape: Shape) -> str:
    """The annotation form of a shape, inverse of :func:`parse_shape`."""
    return f"{shape.d_node}x{shape.d_gpn}"


def parse_gpu_models(text: str) -> tuple[str, ...]:
    """Allowed GPU models, ``"V100M16|V100M32"`` as in openb's ``gpu_spec``; empty means any."""
    if not isinstance(text, str):
        raise InvalidInput("gpu-models", text, 'expected models separated by "|"')
    return tuple(sorted({m.strip() for m in text.split("|") if m.strip()}))


@dataclass(slots=True)
class PodAsk:
    """What one pod (gang member) needs, translated from its Kubernetes object at the edge.

    ``gpus`` is the pod's own GPU request (d_gpn of its job's shape); ``shape`` the job's
    placement when the operator chose one; ``nodes`` the operator's node choice when given;
    ``peer_nodes`` the node indexes already holding members of the same job.
    """

    gpus: int
    cpu_milli: int = 0
    memory_mib: int = 0
    vc: str | None = None
    gpu_models: tuple[str, ...] = ()
    shape: Shape | None = None
    nodes: tuple[int, ...] = ()
    peer_nodes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.gpus, int) or self.gpus < 0:
            raise InvalidInput("gpus", self.gpus, "must be an integer >= 0")
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise InvalidInput("resources", (self.cpu_milli, self.memory_mib), "must be >= 0")
        if self.shape is not None and self.gpus and self.shape.d_gpn != self.gpus:
            raise InvalidInput(
                "placement",
                format_shape(self.shape),
                f"GPUs per node {self.shape.d_gpn} differ from the pod's request of {self.gpus}",
            )

    def remaining(self) -> int:
        """Gang members still to place, this pod included."""
        if self.shape is None:
            return 1
        return max(1, self.shape.d_node - len(set(self.peer_nodes)))

    def request(self) -> PlacementRequest:
        """The placement request for the members not yet placed (this pod and later peers)."""
        r = self.remaining()
        shape = Shape(r, self.gpus) if self.shape is not None and self.gpus else None
        return PlacementRequest(
            gpus=self.gpus * r,
            shape=shape,
            vc=self.vc,
            gpu_models=self.gpu_models,
            cpu_milli=self.cpu_milli * r,
            memory_mib=self.memory_mib * r,
            nodes=r if shape is not None else 0,
        )


@dataclass(slots=True)
class FilterResult:
    """Node indexes that fit now; groups of nodes that fail now (``failed``) or can never fit
    (``unresolvable``), each group an index array with its reason."""

    fits: np.ndarray
    failed: list[tuple[np.ndarray, str]] = field(default_factory=list)
    unresolvable: list[tuple[np.ndarray, str]] = field(default_factory=list)

    @staticmethod
    def reasons(groups: Sequence[tuple[np.ndarray, str]]) -> dict[int, str]:
        """Groups flattened to {node index: reason}."""
        return {int(i): why for idx, why in groups for i in idx.tolist()}


def _grouped(
    cand: np.ndarray, mask: np.ndarray, keys: np.ndarray, reason: Callable[[int], str]
) -> list[tuple[np.ndarray, str]]:
    """Candidates under ``mask``, grouped by ``keys`` with one reason per key."""
    sel = cand[mask]
    if sel.size == 0:
        return []
    k = keys[mask]
    return [(sel[k == u], reason(int(u))) for u in np.unique(k)]


def filter_nodes(cluster: ClusterState, ask: PodAsk, candidates: np.ndarray) -> FilterResult:
    """Split ``candidates`` (node indexes) into nodes that can take the pod now and the reasons others cannot."""
    cand = np.asarray(candidates, dtype=np.int64)
    eligible_vc = cluster.eligible(ask.vc, ())[cand]
    eligible_model = cluster.eligible(None, ask.gpu_models)[cand]
    cap = cluster.gpu_cap[cand]
    cap_ok = cap >= ask.gpus
    # the pod's own CPU and memory, checked by the cluster's one fit rule (capacity, then free now)
    pod = PlacementRequest(0, cpu_milli=ask.cpu_milli, memory_mib=ask.memory_mib)
    size_ok = cluster.fit_mask(pod, 0, 0, now=False)[cand]
    free = cluster.free_gpus[cand]
    free_ok = free >= ask.gpus
    res_ok = cluster.fit_mask(pod, 0, 0)[cand]
    peer = np.isin(cand, np.asarray(ask.peer_nodes, dtype=np.int64)) if ask.peer_nodes else np.zeros(cand.size, bool)
    never = ~(eligible_vc & eligible_model & cap_ok & size_ok)
    fits = ~never & free_ok & res_ok & ~peer
    result = FilterResult(cand[fits])
    if never.any():
        models = cluster.gpu_models
        un = result.unresolvable
        if (m := ~eligible_vc).any():
            un.append((cand[m], f"node is not in the pod's virtual cluster {ask.vc!r}"))
        want = "|".join(ask.gpu_models)
        un += _grouped(
            cand,
            eligible_vc & ~eligible_model,
            cluster.model_id[cand],
            lambda u: f"node's GPU model {models[u] or 'none'} is not one of {want}",
        )
        un += _grouped(
            cand,
            eligible_vc & eligible_model & ~cap_ok,
            cap,
            lambda u: f"node has {u} GPUs; the pod needs {ask.gpus}",
        )
        if (m := eligible_vc & eligible_model & cap_ok & ~size_ok).any():
            un.append((cand[m], "node's CPU or memory capacity is below the pod's request"))
    if (m := ~never & peer).any():
        result.failed.append((cand[m], "node already holds a member of the pod's job"))
    result.failed += _grouped(
        cand,
        ~never & ~peer & ~free_ok,
        free * 100_000 + cap,
        lambda u: f"{u // 100_000} of {u % 100_000} GPUs free; the pod needs {ask.gpus}",
    )
    if (m := ~never & ~peer & free_ok & ~res_ok).any():
        result.failed.append((cand[m], "not enough free CPU or memory"))
    return result


def plan(cluster: ClusterState, ask: PodAsk, placer: Placer | None = None) -> Allocation | None:
    """The core placer's allocation for the job members still to place, or None when it does not fit now."""
    req = ask.request()
    if cluster.could_ever_fit(req) is not None:
        return None
    return (placer or get_placer(DEFAULT_PLACER)).place(req, cluster)


def plan_nodes(cluster: ClusterState, ask: PodAsk, allocation: Allocation | None) -> tuple[int, ...]:
    """Nodes this pod should go to: the operator's choice when given, else the plan's, minus peers' nodes."""
    peers = set(ask.peer_nodes)
    if ask.nodes:
        return tuple(i for i in ask.nodes if i not in peers)
    if allocation is None:
        return ()
    return tuple(i for i in allocation.nodes if i not in peers)


def _raw_scores(cluster: ClusterState, ask: PodAsk, cand: np.ndarray, planned: Collection[int]) -> np.ndarray:
    """Unrounded scores: PLAN_SCORE for planned nodes, else 1 + best fit (<=3) + same switch (<=2); 0 if full."""
    free = cluster.free_gpus[cand]
    width = max(1, int(cluster.gpu_cap.max()))
    fit = 1.0 - np.clip(free - ask.gpus, 0, None) / width
    switches: Sequence[int] = [int(cluster.switch_id[i]) for i in (ask.peer_nodes or tuple(planned))]
    topo = np.isin(cluster.switch_id[cand], np.asarray(switches, dtype=np.int64)) if switches else np.zeros(cand.size)
    raw: np.ndarray = np.minimum(1.0 + FIT_WEIGHT * fit + TOPOLOGY_WEIGHT * topo, PLAN_SCORE - 1)
    if planned:
        raw[np.isin(cand, np.asarray(list(planned), dtype=np.int64))] = PLAN_SCORE
    raw[free < ask.gpus] = 0.0
    return raw


def score_nodes(
    cluster: ClusterState, ask: PodAsk, candidates: np.ndarray, planned: Collection[int] = ()
) -> np.ndarray:
    """Scores 0-10 for ``candidates``: 10 for planned nodes, else 1 + best fit (<=3) + same switch (<=2).

    Nodes that cannot take the pod now score 0.
    """
    cand = np.asarray(candidates, dtype=np.int64)
    if cand.size == 0:
        return np.zeros(0, dtype=np.int64)
    rounded: np.ndarray = np.rint(_raw_scores(cluster, ask, cand, planned))
    return rounded.astype(np.int64)


def shortlist(cluster: ClusterState, ask: PodAsk, fits: np.ndarray, planned: Collection[int], limit: int) -> np.ndarray:
    """The fitting nodes worth offering the scheduler: the top tier of unrounded scores, at most ``limit``.

    The top tier is the plan's nodes whenever one of them fits, else the tightest fit on the
    planned or peers' switch. Narrowing here spares kube-scheduler from scoring, and both
    sides from serialising, hundreds of nodes the decision would rank below the tier.
    ``limit`` <= 0 keeps every fitting node.
    """
    cand = np.asarray(fits, dtype=np.int64)
    if limit <= 0 or cand.size == 0:
        return cand
    raw = _raw_scores(cluster, ask, cand, planned)
    top: np.ndarray = cand[raw >= raw.max() - 1e-9]
    return top[:limit]


def best_node(scores: np.ndarray, candidates: np.ndarray) -> int | None:
    """The candidate with the highest score (first on ties), None when nothing scores above 0."""
    if scores.size == 0 or int(scores.max()) <= 0:
        return None
    return int(np.asarray(candidates)[int(np.argmax(scores))])
