"""The extender's verbs (filter, prioritize, bind) on wire-format dicts, independent of the transport.

Translates the kube-scheduler extender protocol (``k8s.io/kube-scheduler/extender/v1``,
PascalCase JSON) into the core's PodAsk, asks the core (``scoring``) and translates the
answer back. Every malformed input raises InvalidInput, which the transports turn into a 400.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np
import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from qosmos.extender.cache import ClusterCache, PodInfo, pod_info
from qosmos.extender.core import scoring
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.placement import get_placer
from qosmos.extender.core.types import Allocation

log = logging.getLogger("qosmos.extender")

MAX_NODES = 100_000
DEFAULT_MAX_ASSUMED_GPUS = 1024
NOT_IN_CACHE = "node is not in the extender's cache yet"

_LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class Metrics:
    """Prometheus metrics of one extender instance, in their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.latency = Histogram(
            "qosmos_extender_request_seconds",
            "Extender request latency by verb",
            ["verb"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.decisions = Counter(
            "qosmos_extender_decisions_total",
            "Extender decisions by verb and outcome",
            ["verb", "outcome"],
            registry=self.registry,
        )
        self.forbidden = Counter(
            "qosmos_extender_forbidden_total",
            "Requests refused because the client's certificate is not allowed on the route (HTTP 403, gRPC PERMISSION_DENIED)",
            ["route"],
            registry=self.registry,
        )
        self.cache = Gauge(
            "qosmos_extender_cache_objects", "Objects in the extender cache", ["kind"], registry=self.registry
        )

    def observe_cache(self, stats: Mapping[str, int]) -> None:
        for kind in ("nodes", "pods", "assumed", "gpus_total", "gpus_used", "conflicts"):
            self.cache.labels(kind).set(stats.get(kind, 0))


@dataclass(slots=True)
class _Decision:
    generation: int
    pod: PodInfo
    ask: scoring.PodAsk
    planned: tuple[int, ...]
    allocation: Allocation | None


def _node_names(args: Mapping[str, Any]) -> tuple[list[str], list[Any] | None]:
    """Candidate node names from NodeNames (nodeCacheCapable) or Nodes.Items; also the items when given."""
    names = args.get("NodeNames")
    if names is not None:
        if not isinstance(names, list) or not set(map(type, names)) <= {str}:
            raise InvalidInput("NodeNames", type(names).__name__, "expected a list of strings")
        if len(names) > MAX_NODES:
            raise InvalidInput("NodeNames", len(names), f"more than {MAX_NODES} nodes")
        return names, None
    nodes = args.get("Nodes")
    if nodes is None:
        return [], None
    if not isinstance(nodes, Mapping):
        raise InvalidInput("Nodes", type(nodes).__name__, "expected a NodeList object")
    items = nodes.get("items", nodes.get("Items")) or []
    if not isinstance(items, list) or len(items) > MAX_NODES:
        raise InvalidInput("Nodes.items", type(items).__name__, f"expected a list of at most {MAX_NODES} nodes")
    out = []
    for it in items:
        meta = it.get("metadata") if isinstance(it, Mapping) else None
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(name, str):
            raise InvalidInput("Nodes.items[].metadata.name", name, "expected a string")
        out.append(name)
    return out, items


def api_error(exc: BaseException) -> str:
    """One line for a failed API call: the status and the API server's message, never raw HTTP headers."""
    status = getattr(exc, "status", None)
    if status is None:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".rstrip(": ")
    message = ""
    body = getattr(exc, "body", None)
    if body:
        try:
            message = str(orjson.loads(body).get("message", ""))
        except (orjson.JSONDecodeError, AttributeError, TypeError):
            message = str(body)[:200]
    reason = getattr(exc, "reason", "") or ""
    return f"API server answered {status} {reason}".rstrip() + (f": {message}" if message else "")


class ExtenderService:
    """filter / prioritize / bind over a ClusterCache. Thread-safe (the cache lock serialises decisions)."""

    def __init__(
        self,
        cache: ClusterCache,
        placer: str = scoring.DEFAULT_PLACER,
        metrics: Metrics | None = None,
        assume: bool = True,  # hold a pod's GPUs where kube-scheduler will bind it (lone /filter node, top /prioritize score)
        binder: Callable[[str, str, str, str], None] | None = None,
        shortlist: int = scoring.DEFAULT_SHORTLIST,
        max_assumed_gpus: int = DEFAULT_MAX_ASSUMED_GPUS,  # per caller; 0: no cap
    ) -> None:
        self.cache = cache
        self.max_assumed_gpus = max_assumed_gpus
        self.shortlist = shortlist
        self.placer = get_placer(placer)
        self.metrics = metrics or Metrics()
        self.assume = assume
        self.binder = binder
        self._memo: OrderedDict[str, _Decision] = OrderedDict()
        self._seen: dict[str, PodInfo] = {}
        self._parsed: dict[tuple[str, str], PodInfo] = {}
        self._names_memo: list[tuple[ClusterState, Sequence[str], np.ndarray]] = []

    # ---- decisions ---------------------------------------------------------------------
    def _decide(self, pod: PodInfo) -> _Decision:
        """The core's plan for this pod in the current cache state, memoised per generation."""
        memo = self._memo.get(pod.uid)
        if memo is not None and memo.generation == self.cache.generation and memo.pod == pod:
            return memo
        st = self.cache.state()
        assert st is not None
        ask = self.cache.ask_for(pod)
        alloc = scoring.plan(st, ask, self.placer)
        d = _Decision(self.cache.generation, pod, ask, scoring.plan_nodes(st, ask, alloc), alloc)
        self._memo[pod.uid] = d
        self._memo.move_to_end(pod.uid)
        while len(self._memo) > 1024:
            self._memo.popitem(last=False)
        return d

    def _prepare(self, args: object) -> tuple[PodInfo, list[str], list[Any] | None]:
        if not isinstance(args, Mapping):
            raise InvalidInput("ExtenderArgs", type(args).__name__, "expected a JSON object")
        pod = self._pod(args.get("Pod"))
        names, items = _node_names(args)
        self._seen[pod.uid] = pod
        if len(self._seen) > 4096:
            self._seen.pop(next(iter(self._seen)))
        return pod, names, items

    def _pod(self, obj: object) -> PodInfo:
        """pod_info, memoised by (uid, resourceVersion) so /prioritize reuses /filter's parse."""
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        key = None
        if isinstance(meta, Mapping):
            uid, rv = meta.get("uid"), meta.get("resourceVersion")
            if isinstance(uid, str) and uid and isinstance(rv, str) and rv:
                key = (uid, rv)
                hit = self._parsed.get(key)
                if hit is not None:
                    return hit
        pod = pod_info(obj)
        if key is not None:
            self._parsed[key] = pod
            if len(self._parsed) > 1024:
                self._parsed.pop(next(iter(self._parsed)))
        return pod

    def _indexes(self, names: Sequence[str]) -> np.ndarray:
        """Cache indexes of ``names`` (-1 for unknown nodes); call with the lock held and a state."""
        st = self.cache.state()
        assert st is not None
        # kube-scheduler sends the same feasible-node lists again and again: a list compare
        # (C, memcmp on equal strings) is cheaper than hashing every fresh string.
        for memo_st, memo_names, memo_idx in self._names_memo:
            if memo_st is st and memo_names == names:
                return memo_idx
        idx = self._lookup(st.index, names)
        self._names_memo = [(st, names, idx), *self._names_memo[:1]]
        return idx

    @staticmethod
    def _lookup(index: Mapping[str, int], names: Sequence[str]) -> np.ndarray:
        if len(names) > 1:
            try:
                return np.fromiter(itemgetter(*names)(index), dtype=np.int64, count=len(names))
            except KeyError:
                pass
        get = index.get
        return np.fromiter((get(n, -1) for n in names), dtype=np.int64, count=len(names))

    def _assume(self, verb: str, pod: PodInfo, node: str, caller: str) -> bool:
        """Hold the pod's GPUs for ``caller``, within its cap on the assumed ledger."""
        if self.max_assumed_gpus and self.cache.assumed_gpus(caller, pod.uid) + pod.gpus > self.max_assumed_gpus:
            self.metrics.decisions.labels(verb, "assume_capped").inc()
            log.warning(
                "caller %r would hold more than %d assumed GPUs; %s not held",
                caller,
                self.max_assumed_gpus,
                pod.key,
                extra={"caller": caller},
            )
            return False
        return self.cache.assume(pod, node, owner=caller)

    def filter(self, args: object, caller: str = "") -> dict[str, Any]:
        """ExtenderArgs -> ExtenderFilterResult. ``caller`` identifies the client (its cap on assumed GPUs)."""
        pod, names, items = self._prepare(args)
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        planned_kept = False
        with self.cache.lock:
            self.cache.expire()
            self.cache.forget(pod.uid)
            st = self.cache.state()
            if st is None:
                failed = dict.fromkeys(names, NOT_IN_CACHE)
                keep: list[str] = []
            else:
                idx = self._indexes(names)
                known = idx >= 0
                d = self._decide(pod)
                res = scoring.filter_nodes(st, d.ask, idx[known])
                fitmask = np.zeros(len(st.nodes) + 1, dtype=bool)
                # Fitting nodes below the top tier are left out without a reason: they stay feasible.
                fitmask[scoring.shortlist(st, d.ask, res.fits, d.planned, self.shortlist)] = True
                kept = np.flatnonzero(fitmask[idx])
                keep = [names[j] for j in kept.tolist()]
                planned_kept = bool(d.planned) and bool(np.isin(idx[kept], d.planned).any())
                if len(keep) == 1 and self.assume and pod.gpus > 0:
                    # kube-scheduler binds a lone feasible node without calling /prioritize: hold it now.
                    self._assume("filter", pod, keep[0], caller)
                # /prioritize comes next with exactly these names
                self._names_memo = [(st, keep, idx[kept]), (st, names, idx)]
                node_names = self._node_names(st)
                for groups, reasons in ((res.failed, failed), (res.unresolvable, unresolvable)):
                    for arr, why in groups:
                        for i in arr.tolist():
                            reasons[node_names[i]] = why
                if not known.all():
                    for j in np.flatnonzero(~known).tolist():
                        failed[names[j]] = NOT_IN_CACHE
        # "planned": the plan's node is among those passed on, i.e. the window held the core's choice.
        outcome = "none" if not keep else "planned" if planned_kept else "fit"
        self.metrics.decisions.labels("filter", outcome).inc()
        out: dict[str, Any] = {
            "Nodes": None,
            "NodeNames": keep,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": "",
        }
        if items is not None:
            wanted = set(keep)
            out["Nodes"] = {"items": [it for it in items if it["metadata"]["name"] in wanted]}
            out["NodeNames"] = None
        return out

    def _node_names(self, st: Any) -> list[str]:
        if getattr(self, "_names_for", None) is not st:
            self._names_for = st
            self._names = [n.name for n in st.nodes]
        return self._names

    def prioritize_scores(self, args: object, caller: str = "") -> tuple[list[str], list[int]]:
        """ExtenderArgs -> (node names, scores 0-10); the HTTP layer serialises it."""
        pod, names, _ = self._prepare(args)
        with self.cache.lock:
            self.cache.expire()
            self.cache.forget(pod.uid)
            st = self.cache.state()
            if st is None:
                return names, [0] * len(names)
            idx = self._indexes(names)
            known = idx >= 0
            d = self._decide(pod)
            scores = np.zeros(len(names), dtype=np.int64)
            if known.any():
                scores[known] = scoring.score_nodes(st, d.ask, idx[known], d.planned)
            best = scoring.best_node(scores, np.arange(len(names)))
            if best is not None and self.assume and pod.gpus > 0:
                # The scheduler very likely binds where we score highest: hold the GPUs there
                # until the watch shows the real binding (or the entry expires).
                self._assume("prioritize", pod, names[best], caller)
        self.metrics.decisions.labels("prioritize", "planned" if d.planned else "unplanned").inc()
        return names, scores.tolist()

    def prioritize(self, args: object, caller: str = "") -> list[dict[str, Any]]:
        """ExtenderArgs -> HostPriorityList (scores 0-10)."""
        names, scores = self.prioritize_scores(args, caller)
        return [{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)]

    def bind(self, args: object, caller: str = "") -> dict[str, Any]:
        """ExtenderBindingArgs -> ExtenderBindingResult: hold the pod's GPUs exactly, then bind via the API."""
        if not isinstance(args, Mapping):
            raise InvalidInput("ExtenderBindingArgs", type(args).__name__, "expected a JSON object")
        fields = {}
        for f in ("PodName", "PodNamespace", "PodUID", "Node"):
            v = args.get(f)
            if not isinstance(v, str) or not v:
                raise InvalidInput(f, v, "expected a non-empty string")
            fields[f] = v
        if self.binder is None:
            return {"Error": "this extender does not bind (no API client)"}
        memo = self._seen.get(fields["PodUID"])
        if memo is not None:
            with self.cache.lock:
                if not self._assume("bind", memo, fields["Node"], caller):
                    log.warning(
                        "binding %s/%s to %s beyond the cached free GPUs",
                        fields["PodNamespace"],
                        fields["PodName"],
                        fields["Node"],
                    )
        try:
            self.binder(fields["PodNamespace"], fields["PodName"], fields["PodUID"], fields["Node"])
        except Exception as exc:
            self.metrics.decisions.labels("bind", "error").inc()
            log.warning(
                "binding %s/%s to %s failed: %s",
                fields["PodNamespace"],
                fields["PodName"],
                fields["Node"],
                api_error(exc),
            )
            return {"Error": api_error(exc)}
        self.metrics.decisions.labels("bind", "bound").inc()
        return {"Error": ""}

    def score_names(self, pod: PodInfo, names: Sequence[str]) -> tuple[list[str], list[int], list[str], dict[str, str]]:
        """(names, scores, planned node names, reasons for unfit nodes) for gRPC Score; no names: every node."""
        with self.cache.lock:
            st = self.cache.state()
            if st is None:
                return list(names), [0] * len(names), [], dict.fromkeys(names, NOT_IN_CACHE)
            if not names:
                names = [n.name for n in st.nodes]
            idx = np.fromiter((st.index.get(n, -1) for n in names), dtype=np.int64, count=len(names))
            d = self._decide(pod)
            known = idx >= 0
            scores = np.zeros(len(names), dtype=np.int64)
            reasons: dict[str, str] = {n: NOT_IN_CACHE for n, i in zip(names, idx.tolist(), strict=True) if i < 0}
            if known.any():
                res = scoring.filter_nodes(st, d.ask, idx[known])
                scores[known] = scoring.score_nodes(st, d.ask, idx[known], d.planned)
                fits = np.isin(idx, res.fits)
                scores[~fits] = 0
                for i, why in scoring.FilterResult.reasons([*res.failed, *res.unresolvable]).items():
                    reasons[st.nodes[i].name] = why
            return list(names), scores.tolist(), [st.nodes[i].name for i in d.planned], reasons
