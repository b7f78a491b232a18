"""The extender's node and pod cache: Kubernetes objects translated to the core's ClusterState.

Fed by watches (:class:`KubeWatcher`) or directly (tests, benchmarks). GPUs held by bound
pods are allocated in the core's ClusterState, whose ``allocate`` refuses a GPU that is
not free, so a stale view can never hand a GPU out twice. Pods that the scheduler is
about to bind but that the watch has not shown bound yet are held in an *assumed* ledger
keyed by pod UID; an entry is replaced by the real pod when the watch sees it, and
expires after ``assume_ttl`` seconds otherwise.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, ClassVar, TypeVar

from kubernetes.utils import parse_quantity as k8s_parse_quantity
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.scoring import PodAsk, parse_gpu_models, parse_shape
from qosmos.extender.core.types import Allocation, Node, PlacementRequest

log = logging.getLogger("qosmos.extender.cache")

GPU_RESOURCE = "nvidia.com/gpu"
LABEL_VC = "qosmos.io/vc"
LABEL_GPU_MODEL = "qosmos.io/gpu-model"
LABEL_SWITCH = "qosmos.io/switch"
LABEL_RACK = "qosmos.io/rack"
LABEL_JOB = "qosmos.io/job"
ANN_PLACEMENT = "qosmos.io/placement"
ANN_NODES = "qosmos.io/nodes"
ANN_GPU_MODELS = "qosmos.io/gpu-models"
DEFAULT_ASSUME_TTL = 30.0

_MAX_QUANTITY = Decimal(2**62)
_T = TypeVar("_T")


def parse_quantity(value: object, field: str = "quantity") -> Decimal:
    """A Kubernetes resource quantity ("500m", "16Gi", "2", "1e3") as a Decimal in base units.

    Parsing is the kubernetes client's; the bounds keep hostile input cheap and finite.
    """
    if isinstance(value, bool) or not isinstance(value, str | int | float) or len(str(value)) > 64:
        raise InvalidInput(field, value, "expected a Kubernetes quantity string")
    try:
        out: Decimal = k8s_parse_quantity(value)
    except (ValueError, TypeError, ArithmeticError):
        raise InvalidInput(field, value, "expected a Kubernetes quantity string") from None
    if not out.is_finite() or out < 0:
        raise InvalidInput(field, value, "must be a finite quantity >= 0")
    if out > _MAX_QUANTITY:
        raise InvalidInput(field, value, "quantity too large")
    return out


def _cpu_milli(q: object) -> int:
    return int((parse_quantity(q, "cpu") * 1000).to_integral_value(rounding="ROUND_CEILING"))


def _mem_mib(q: object) -> int:
    return int((parse_quantity(q, "memory") / (2**20)).to_integral_value(rounding="ROUND_CEILING"))


def _whole(q: object, field: str) -> int:
    v = parse_quantity(q, field)
    if v != v.to_integral_value():
        raise InvalidInput(field, q, "must be a whole number")
    return int(v)


def _mapping(obj: object, field: str) -> Mapping[str, Any]:
    if obj is None:
        return {}
    if not isinstance(obj, Mapping):
        raise InvalidInput(field, type(obj).__name__, "expected an object")
    return obj


def _str_map(obj: object, field: str) -> Mapping[str, Any]:
    m = _mapping(obj, field)
    for k, v in m.items():
        if not isinstance(v, str):
            raise InvalidInput(f"{field}.{k}", v, "expected a string")
    return m


@dataclass(slots=True)
class PodInfo:
    """The parts of a Pod the extender uses (requests summed over containers)."""

    uid: str
    namespace: str
    name: str
    node_name: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    vc: str | None
    gpu_models: tuple[str, ...]
    placement: str | None
    nodes: tuple[str, ...]
    job: str | None
    terminal: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _container_requests(containers: object, field: str) -> list[tuple[int, int, int]]:
    if containers is None:
        return []
    if not isinstance(containers, list):
        raise InvalidInput(field, type(containers).__name__, "expected a list")
    out = []
    for c in containers:
        res = _mapping(_mapping(c, field).get("resources"), f"{field}.resources")
        req = dict(_mapping(res.get("limits"), f"{field}.resources.limits"))
        req.update(_mapping(res.get("requests"), f"{field}.resources.requests"))
        gpus = _whole(req[GPU_RESOURCE], GPU_RESOURCE) if GPU_RESOURCE in req else 0
        cpu = _cpu_milli(req["cpu"]) if "cpu" in req else 0
        mem = _mem_mib(req["memory"]) if "memory" in req else 0
        out.append((gpus, cpu, mem))
    return out


def pod_info(pod: object) -> PodInfo:
    """Translate a Pod (dict as on the wire) into a PodInfo; InvalidInput on a malformed object."""
    p = _mapping(pod, "Pod")
    if not p:
        raise InvalidInput("Pod", pod, "a pod object is required")
    meta = _mapping(p.get("metadata"), "Pod.metadata")
    spec = _mapping(p.get("spec"), "Pod.spec")
    status = _mapping(p.get("status"), "Pod.status")
    labels = _str_map(meta.get("labels"), "Pod.metadata.labels")
    ann = _str_map(meta.get("annotations"), "Pod.metadata.annotations")
    name, ns, uid = meta.get("name", ""), meta.get("namespace", "default"), meta.get("uid", "")
    for f, v in (("name", name), ("namespace", ns), ("uid", uid)):
        if not isinstance(v, str):
            raise InvalidInput(f"Pod.metadata.{f}", v, "expected a string")
    node_name = spec.get("nodeName") or ""
    if not isinstance(node_name, str):
        raise InvalidInput("Pod.spec.nodeName", node_name, "expected a string")
    main = _container_requests(spec.get("containers"), "Pod.spec.containers")
    init = _container_requests(spec.get("initContainers"), "Pod.spec.initContainers")
    gpus, cpu, mem = (sum(x[k] for x in main) for k in range(3))
    if init:
        gpus, cpu, mem = (
            max(gpus, *(x[0] for x in init)),
            max(cpu, *(x[1] for x in init)),
            max(mem, *(x[2] for x in init)),
        )
    if gpus > 1024:
        raise InvalidInput(GPU_RESOURCE, gpus, "more than 1024 GPUs in one pod")
    placement = ann.get(ANN_PLACEMENT)
    nodes = tuple(n.strip() for n in ann.get(ANN_NODES, "").split(",") if n.strip())
    vc = labels.get(LABEL_VC) or None
    job = labels.get(LABEL_JOB) or None
    phase = status.get("phase")
    return PodInfo(
        uid=uid or f"{ns}/{name}",
        namespace=ns,
        name=name,
        node_name=node_name,
        gpus=gpus,
        cpu_milli=cpu,
        memory_mib=mem,
        vc=vc,
        gpu_models=parse_gpu_models(ann.get(ANN_GPU_MODELS, "")),
        placement=placement,
        nodes=nodes,
        job=f"{ns}/{job}" if job else None,
        terminal=phase in ("Succeeded", "Failed"),
    )


def hard_rule_terms(labels: Mapping[str, str], annotations: Mapping[str, str]) -> list[dict[str, Any]]:
    """The extender's hard rules for a pod (its VirtualCluster's nodes, its allowed GPU models) as
    alternative node-selector terms (ORed): written into the pods the operator creates as required
    node affinity, so that kube-scheduler keeps them even when the extender (``ignorable``) is down.
    Mirrors :func:`pod_info`'s reading and ``ClusterState.eligible``: a node without the VC label is in
    VC ``default``; GPU models match the node's ``qosmos.io/gpu-model`` label exactly. [] = no rule."""
    exprs: list[dict[str, Any]] = []
    models = parse_gpu_models(annotations.get(ANN_GPU_MODELS, ""))
    if models:
        exprs.append({"key": LABEL_GPU_MODEL, "operator": "In", "values": list(models)})
    vc = labels.get(LABEL_VC) or None
    if vc is None:
        return [{"matchExpressions": exprs}] if exprs else []
    in_vc = {"key": LABEL_VC, "operator": "In", "values": [vc]}
    if vc != "default":
        return [{"matchExpressions": [in_vc, *exprs]}]
    unlabelled = {"key": LABEL_VC, "operator": "DoesNotExist"}
    return [{"matchExpressions": [in_vc, *exprs]}, {"matchExpressions": [unlabelled, *exprs]}]


def require_node_terms(affinity: Mapping[str, Any] | None, alternatives: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``affinity`` with its required node affinity ANDed with (alternative 1 OR alternative 2 ...):
    required terms are ORed, so every pair (own term, alternative) becomes one term. Preferred node
    affinity and pod (anti-)affinity are kept as they are; never drops what the template required."""
    out = copy.deepcopy(dict(affinity or {}))
    if not alternatives:
        return out
    req = out.setdefault("nodeAffinity", {}).setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    own = req.get("nodeSelectorTerms") or [{}]
    terms = []
    for t in own:
        for alt in alternatives:
            term = dict(t)
            for part in ("matchExpressions", "matchFields"):
                merged = [*(t.get(part) or []), *(alt.get(part) or [])]
                if merged:
                    term[part] = copy.deepcopy(merged)
            terms.append(term)
    req["nodeSelectorTerms"] = terms
    return out


def node_from_object(obj: object) -> Node:
    """Translate a Node (dict as on the wire) into the core's Node."""
    o = _mapping(obj, "Node")
    meta = _mapping(o.get("metadata"), "Node.metadata")
    labels = _str_map(meta.get("labels"), "Node.metadata.labels")
    status = _mapping(o.get("status"), "Node.status")
    alloc = _mapping(status.get("allocatable") or status.get("capacity"), "Node.status.allocatable")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput("Node.metadata.name", name, "expected a non-empty string")
    return Node(
        name=name,
        gpus=_whole(alloc[GPU_RESOURCE], GPU_RESOURCE) if GPU_RESOURCE in alloc else 0,
        gpu_model=labels.get(LABEL_GPU_MODEL, ""),
        cpu_milli=_cpu_milli(alloc["cpu"]) if "cpu" in alloc else 0,
        memory_mib=_mem_mib(alloc["memory"]) if "memory" in alloc else 0,
        vc=labels.get(LABEL_VC, "default"),
        switch=labels.get(LABEL_SWITCH, ""),
        rack=labels.get(LABEL_RACK, ""),
    )


@dataclass(slots=True)
class _Held:
    info: PodInfo
    alloc: Allocation | None
    expires: float = float("inf")
    owner: str = ""  # the caller that assumed it (assumed entries)


class ClusterCache:
    """Thread-safe view of nodes and GPU-holding pods as a core ClusterState.

    Every mutation bumps ``generation`` so callers can memoise decisions per state.
    """

    def __init__(self, assume_ttl: float = DEFAULT_ASSUME_TTL, clock: Callable[[], float] = time.monotonic) -> None:
        self.lock = threading.RLock()
        self.assume_ttl = assume_ttl
        self.clock = clock
        self.generation = 0
        self.conflicts = 0
        self._nodes: dict[str, Node] = {}
        self._bound: dict[str, _Held] = {}
        self._assumed: dict[str, _Held] = {}
        self._state: ClusterState | None = None
        self._nodes_synced = False
        self._pods_synced = False

    # ---- readiness -----------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """True once the initial node and pod lists are in."""
        return self._nodes_synced and self._pods_synced

    def mark_synced(self, nodes: bool = True, pods: bool = True) -> None:
        with self.lock:
            self._nodes_synced |= nodes
            self._pods_synced |= pods

    # ---- nodes ---------------------------------------------------------------------------
    def replace_nodes(self, nodes: Iterable[Node]) -> None:
        """Replace every node (initial list or relist)."""
        with self.lock:
            self._nodes = {n.name: n for n in nodes}
            self._invalidate()
            self._nodes_synced = True

    def upsert_node(self, node: Node) -> None:
        with self.lock:
            if self._nodes.get(node.name) != node:
                self._nodes[node.name] = node
                self._invalidate()

    def delete_node(self, name: str) -> None:
        with self.lock:
            if self._nodes.pop(name, None) is not None:
                self._invalidate()

    # ---- pods ----------------------------------------------------------------------------
    def replace_pods(self, pods: Iterable[PodInfo]) -> None:
        """Replace every bound pod (initial list or relist); assumed entries of listed pods go."""
        with self.lock:
            self._bound = {p.uid: _Held(p, None) for p in pods if p.node_name and not p.terminal}
            for uid in list(self._assumed):
                if uid in self._bound:
                    del self._assumed[uid]
            self._invalidate()
            self._pods_synced = True

    def upsert_pod(self, pod: PodInfo) -> None:
        """A pod seen by the watch: bound pods hold resources, others (and terminal ones) release."""
        with self.lock:
            if not pod.node_name or pod.terminal:
                self.delete_pod(pod.uid)
                return
            old = self._bound.get(pod.uid)
            if old is not None and old.info.node_name == pod.node_name and old.alloc is not None:
                old.info = pod
                return
            guess = self._assumed.get(pod.uid)
            if old is None and guess is not None and guess.info.node_name == pod.node_name and guess.alloc is not None:
                # assumed where it landed: the held GPUs become the bound pod's, the state is unchanged
                del self._assumed[pod.uid]
                if (guess.info.gpus, guess.info.cpu_milli, guess.info.memory_mib) == (
                    pod.gpus,
                    pod.cpu_milli,
                    pod.memory_mib,
                ):
                    guess.info, guess.expires = pod, float("inf")
                    self._bound[pod.uid] = guess
                    return
                self._assumed[pod.uid] = guess
            self._drop_assumed(pod.uid)
            if old is not None:
                self._release(old)
            held = _Held(pod, None)
            self._bound[pod.uid] = held
            self._hold(held)
            self.generation += 1

    def delete_pod(self, uid: str) -> None:
        with self.lock:
            self._drop_assumed(uid)
            held = self._bound.pop(uid, None)
            if held is not None:
                self._release(held)
                self.generation += 1

    def assume(self, pod: PodInfo, node_name: str, ttl: float | None = None, owner: str = "") -> bool:
        """Hold ``pod``'s resources on ``node_name`` until the watch shows it bound (or ``ttl`` passes).

        False when the node cannot hold it in the cached view (nothing is recorded then).
        ``owner`` names the caller, for :meth:`assumed_gpus`.
        """
        with self.lock:
            if pod.uid in self._bound:
                return True
            self._drop_assumed(pod.uid)
            self.state()
            info = dataclasses.replace(pod, node_name=node_name)
            held = _Held(info, None, self.clock() + (self.assume_ttl if ttl is None else ttl), owner)
            if not self._hold(held, strict=True):
                return False
            self._assumed[pod.uid] = held
            self.generation += 1
            return True

    def assumed_gpus(self, owner: str, besides: str = "") -> int:
        """GPUs held in the assumed ledger by ``owner``'s entries (other than pod ``besides``)."""
        with self.lock:
            return sum(h.info.gpus for u, h in self._assumed.items() if h.owner == owner and u != besides)

    def forget(self, uid: str) -> None:
        """Drop an assumed entry (e.g. the pod is being scheduled again)."""
        with self.lock:
            if self._drop_assumed(uid):
                self.generation += 1

    def expire(self) -> int:
        """Release assumed entries past their expiry; returns how many."""
        with self.lock:
            now = self.clock()
            gone = []
            # Entries are (re)inserted on assume, so with one TTL the oldest expire first.
            for uid, h in self._assumed.items():
                if h.expires > now:
                    break
                gone.append(uid)
            for uid in gone:
                self._drop_assumed(uid)
            if gone:
                self.generation += 1
            return len(gone)

    # ---- views ---------------------------------------------------------------------------
    def state(self) -> ClusterState | None:
        """The current ClusterState (None without nodes). Call with ``lock`` held while using it."""
        with self.lock:
            if self._state is None and self._nodes:
                self._rebuild()
            return self._state

    def node_index(self, name: str) -> int | None:
        st = self.state()
        return None if st is None else st.index.get(name)

    def peer_nodes(self, job: str | None, uid: str) -> tuple[int, ...]:
        """Node indexes holding other members of ``job`` (bound or assumed)."""
        if job is None:
            return ()
        st = self.state()
        if st is None:
            return ()
        out = []
        for table in (self._bound, self._assumed):
            for other, h in table.items():
                if other != uid and h.info.job == job and h.info.node_name in st.index:
                    out.append(st.index[h.info.node_name])
        return tuple(out)

    def ask_for(self, pod: PodInfo) -> PodAsk:
        """The core's PodAsk for ``pod`` in the current state (peers, operator's nodes resolved)."""
        st = self.state()
        index = st.index if st is not None else {}
        return PodAsk(
            gpus=pod.gpus,
            cpu_milli=pod.cpu_milli,
            memory_mib=pod.memory_mib,
            vc=pod.vc,
            gpu_models=pod.gpu_models,
            shape=parse_shape(pod.placement) if pod.placement else None,
            nodes=tuple(index[n] for n in pod.nodes if n in index),
            peer_nodes=self.peer_nodes(pod.job, pod.uid),
        )

    def stats(self) -> dict[str, int]:
        with self.lock:
            st = self.state()
            return {
                "nodes": len(self._nodes),
                "pods": len(self._bound),
                "assumed": len(self._assumed),
                "gpus_total": 0 if st is None else st.total_gpus,
                "gpus_used": 0 if st is None else st.used_gpus,
                "conflicts": self.conflicts,
            }

    def held_on(self, node_name: str) -> list[str]:
        """UIDs of pods (bound or assumed) holding resources on a node."""
        with self.lock:
            return [u for t in (self._bound, self._assumed) for u, h in t.items() if h.info.node_name == node_name]

    # ---- internals -----------------------------------------------------------------------
    def _invalidate(self) -> None:
        self._state = None
        self.generation += 1

    def _rebuild(self) -> None:
        self._state = ClusterState(list(self._nodes.values()))
        for h in self._bound.values():
            h.alloc = None
            self._hold(h)
        for uid, h in list(self._assumed.items()):
            h.alloc = None
            if not self._hold(h, strict=True):
                del self._assumed[uid]

    def _grant(self, st: ClusterState, i: int, info: PodInfo, with_cpu: bool) -> Allocation | None:
        req = PlacementRequest(
            info.gpus,
            # a node without CPU figures is accounted on GPUs only
            cpu_milli=info.cpu_milli if with_cpu and st.cpu_cap[i] > 0 else 0,
            memory_mib=info.memory_mib if with_cpu and st.mem_cap[i] > 0 else 0,
        )
        # the one fit check (ClusterState), for this node alone
        if st.free_gpus[i] < info.gpus or not st.cpu_fits(i, req.cpu_milli, req.memory_mib):
            return None
        return Allocation((st.grant(i, info.gpus, req, info.gpus),), False)

    def _hold(self, held: _Held, strict: bool = False) -> bool:
        """Allocate ``held`` in the state. A bound pod is the truth: when the node looks full,
        assumed entries there are evicted first, then CPU/memory are dropped; ``strict``
        (assumed pods) refuses instead."""
        st = self._state
        if st is None:
            return not strict
        i = st.index.get(held.info.node_name)
        if i is None:
            return not strict
        attempts = [True] if strict else [True, True, False]
        for n, with_cpu in enumerate(attempts):
            alloc = self._grant(st, i, held.info, with_cpu)
            if alloc is not None:
                try:
                    st.allocate(alloc)
                except InvalidInput:
                    alloc = None
            if alloc is not None:
                held.alloc = alloc
                return True
            if not strict and n == 0:
                for uid, h in list(self._assumed.items()):
                    if h.info.node_name == held.info.node_name:
                        self._drop_assumed(uid)
        if not strict:
            self.conflicts += 1
            log.warning("pod %s bound to %s does not fit the cached view", held.info.key, held.info.node_name)
        return False

    def _release(self, held: _Held) -> None:
        if held.alloc is not None and self._state is not None:
            with contextlib.suppress(InvalidInput):
                self._state.release(held.alloc)
        held.alloc = None

    def _drop_assumed(self, uid: str) -> bool:
        held = self._assumed.pop(uid, None)
        if held is None:
            return False
        self._release(held)
        return True


class KubeWatcher:
    """List-then-watch nodes and bound pods into a ClusterCache, in two daemon threads.

    Raw JSON (``deserialize=False``) keeps 1,500-node lists cheap; a 410 Gone relists.
    """

    def __init__(
        self,
        cache: ClusterCache,
        api_client: Any,
        timeout_seconds: int = 60,
        dispatch: Callable[[Callable[[], None]], Any] | None = None,
    ) -> None:
        """``dispatch`` runs event handlers elsewhere (e.g. ``loop.call_soon_threadsafe``: on the
        server's event loop, between requests, instead of interleaved with them under the GIL)."""
        self.cache = cache
        self.dispatch = dispatch
        self.api_client = api_client
        self.timeout_seconds = timeout_seconds
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watches: list[Any] = []

    def start(self) -> None:
        for name, fn in (("nodes", self._run_nodes), ("pods", self._run_pods)):
            t = threading.Thread(target=self._loop, args=(name, fn), name=f"qosmos-watch-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for w in list(self._watches):
            with contextlib.suppress(Exception):
                w.stop()
        for t in self._threads:
            t.join(timeout)

    def _loop(self, name: str, fn: Callable[[], None]) -> None:
        delay = 0.2
        while not self._stop.is_set():
            try:
                fn()
                delay = 0.2
            except Exception as exc:
                if self._stop.is_set():
                    return
                log.warning("watch %s failed: %s; retrying in %.1fs", name, exc, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, 10.0)

    def _list(self, fn: Callable[..., Any], params: dict[str, Any]) -> dict[str, Any]:
        import orjson

        resp = fn(**params, _preload_content=False, _request_timeout=60)
        data: dict[str, Any] = orjson.loads(resp.data)
        return data

    def _watch(
        self, fn: Callable[..., Any], params: dict[str, Any], rv: str, on_event: Callable[[str, dict[str, Any]], None]
    ) -> str:
        """Stream watch events until timeout or stop; returns the last resourceVersion ('' to relist)."""
        import orjson

        resp = fn(
            **params,
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=self.timeout_seconds,
            _preload_content=False,
            _request_timeout=(10, self.timeout_seconds + 10),
        )
        self._watches.append(_RespStopper(resp))
        buf = b""
        try:
            for chunk in resp.stream(65536, decode_content=False):
                if self._stop.is_set():
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    ev = orjson.loads(line)
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        if obj.get("code") == 410:
                            return ""
                        raise RuntimeError(f"watch error: {obj.get('message')}")
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if ev.get("type") != "BOOKMARK":
                        if self.dispatch is None:
                            on_event(ev.get("type", ""), obj)
                        else:
                            self.dispatch(functools.partial(on_event, ev.get("type", ""), obj))
        finally:
            resp.release_conn()
            self._watches = [w for w in self._watches if w.resp is not resp]
        return rv

    def _sync(
        self,
        list_fn: Callable[..., Any],
        selector: dict[str, Any],
        parse: Callable[[dict[str, Any]], _T],
        replace: Callable[[list[_T]], None],
        on_event: Callable[[str, dict[str, Any]], None],
    ) -> None:
        """List (replacing the cache's view), then watch from that resourceVersion until stopped."""
        data = self._list(list_fn, selector)
        items: list[_T] = []
        for obj in data.get("items") or []:
            try:
                items.append(parse(obj))
            except InvalidInput as exc:
                log.warning("skipping object: %s", exc)
        replace(items)
        rv = (data.get("metadata") or {}).get("resourceVersion", "")
        while rv and not self._stop.is_set():
            rv = self._watch(list_fn, selector, rv, on_event)

    def _run_nodes(self) -> None:
        from kubernetes import client

        list_nodes = client.CoreV1Api(self.api_client).list_node
        self._sync(list_nodes, {}, node_from_object, self.cache.replace_nodes, self._on_node)

    def _on_node(self, kind: str, obj: dict[str, Any]) -> None:
        try:
            node = node_from_object(obj)
        except InvalidInput as exc:
            log.warning("skipping node event: %s", exc)
            return
        if kind == "DELETED":
            self.cache.delete_node(node.name)
        else:
            self.cache.upsert_node(node)

    _POD_SELECTOR: ClassVar[dict[str, Any]] = {
        "field_selector": "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
    }

    def _run_pods(self) -> None:
        from kubernetes import client

        list_pods = client.CoreV1Api(self.api_client).list_pod_for_all_namespaces
        self._sync(list_pods, self._POD_SELECTOR, pod_info, self.cache.replace_pods, self._on_pod)

    def _on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        try:
            pod = pod_info(obj)
        except InvalidInput as exc:
            log.warning("skipping pod event: %s", exc)
            return
        if kind == "DELETED":
            self.cache.delete_pod(pod.uid)
        else:
            self.cache.upsert_pod(pod)


@dataclass(slots=True)
class _RespStopper:
    resp: Any

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.resp.shutdown() if hasattr(self.resp, "shutdown") else self.resp.close()
