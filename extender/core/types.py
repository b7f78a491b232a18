"""Domain types shared by the extender, the operator, the predictors and the simulator.

Plain slotted dataclasses (cheap enough for a million-job replay); pydantic stays at the
API edges. Kubernetes objects and file formats are translated into these at the edges.
Units: seconds for times, milli-CPU for CPU, MiB for memory, whole GPUs unless a field
says milli-GPU.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Sequence, Set
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Protocol, runtime_checkable

from qosmos.extender.core.errors import InvalidInput


class QoSClass(IntEnum):
    """User priority classes of GENIE (seed 001 §5.2.1). Lower value = more urgent."""

    URGENT = 0
    PRIOR = 1
    NORMAL = 2

    @classmethod
    def parse(cls, value: str | int | QoSClass, field_name: str = "qos") -> QoSClass:
        if isinstance(value, QoSClass):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                pass
        elif isinstance(value, str) and value.strip().upper() in cls.__members__:
            return cls[value.strip().upper()]
        raise InvalidInput(field_name, value, "expected one of urgent, prior, normal")


class JobKind(StrEnum):
    TRAINING = "training"
    INFERENCE = "inference"
    CPU = "cpu"

    @classmethod
    def parse(cls, value: str | JobKind, field_name: str = "kind") -> JobKind:
        if isinstance(value, JobKind):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise InvalidInput(field_name, value, "expected one of training, inference, cpu") from None


class JobEnd(StrEnum):
    """How a recorded job ended (Helios/Philly states); the simulator replays it."""

    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"


def _require(cond: bool, field_name: str, value: object, reason: str) -> None:
    if not cond:
        raise InvalidInput(field_name, value, reason)


def _finite(x: float) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _seconds(x: float, field_name: str) -> None:
    _require(_finite(x) and x >= 0, field_name, x, "must be >= 0")


@dataclass(slots=True)
class Job:
    """A task/job as every component sees it.

    ``gpus`` is the request (0 for CPU jobs). ``nodes`` > 0 fixes the gang to that many nodes
    with gpus / nodes GPUs each (:attr:`fixed_shape`, the DLJob's gpusPerNode); 0 lets the placer
    choose. GENIE-aware policies may then choose another shape ⟨d_node, d_gpn⟩ (even another GPU
    count) for training/inference tasks with a model, batch and iterations; never for a fixed one.
    ``duration`` is the oracle/recorded run time on the requested GPUs (simulator only);
    ``predicted_duration`` comes from a predictor (QSSF) and never from the oracle;
    ``requested_duration`` is the user's own estimate (a time limit), when the trace has one.
    ``executed`` and ``attained`` are runtime state (seconds run, GPU-seconds of service)
    kept by whoever runs the job, for SRTF and LAS; ``work_left`` is the fraction of a GENIE task's
    work still to do as GENIE's model counts it (a task resumed on another shape runs the rest); ``enqueued`` is when it last entered
    its queue (arrival, preemption, an MLFQ demotion or a round-robin turn), NaN = submit.
    ``pool`` confines the job to a named node subset of the cluster (``ClusterState.define_pool``,
    e.g. the nodes a DLJob's pod template may run on); None: any node of its VC.
    ``priority`` (higher first, Kueue's workload priority) breaks ties of the partition's policy and
    says whom a partition with ``within_partition: LowerPriority`` preemption may stop for it.
    ``checkpoint_interval``: seconds of run between the job's own periodic checkpoints, what a run that
    fails keeps (``core.failures.kept_run``; 0: none periodic; None: a failed run keeps all it ran).
    """

    id: str
    submit_time: float
    gpus: int = 1
    kind: JobKind = JobKind.TRAINING
    user: str = ""
    vc: str = "default"
    model: str = ""
    batch: int = 0
    iters: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    qos: QoSClass = QoSClass.NORMAL
    name: str | None = None
    duration: float | None = None
    predicted_duration: float | None = None
    requested_duration: float | None = None
    gpu_milli: int = 1000
    gpu_models: tuple[str, ...] = ()
    nodes: int = 0
    category: str = ""
    end_state: JobEnd = JobEnd.COMPLETED
    executed: float = 0.0
    attained: float = 0.0
    work_left: float = 1.0
    enqueued: float = math.nan
    pool: str | None = None
    priority: int = 0
    checkpoint_interval: float | None = None

    @property
    def queued_since(self) -> float:
        return self.submit_time if self.enqueued != self.enqueued else self.enqueued

    @property
    def arrival_order(self) -> tuple[float, bool, float]:
        """Where the job stands in a queue its policy does not sort: by when it entered the queue; at one
        instant the jobs that arrived then before those sent back then (the simulator's event loop enqueues
        an instant's arrivals, then runs the pass that preempts); then by submission. The simulator's
        unsorted queues and the operator's waiting DLJobs keep this order (each with its own last tie:
        trace index, name), so both break a policy's ties alike."""
        return self.queued_since, self.enqueued == self.enqueued, self.submit_time

    def __post_init__(self) -> None:
        _require(isinstance(self.id, str) and self.id != "", "id", self.id, "must be a non-empty string")
        _require(_finite(self.submit_time), "submit_time", self.submit_time, "must be a finite number")
        _require(isinstance(self.gpus, int) and self.gpus >= 0, "gpus", self.gpus, "must be an integer >= 0")
        self.kind = JobKind.parse(self.kind)
        self.qos = QoSClass.parse(self.qos)
        _require(isinstance(self.batch, int) and self.batch >= 0, "batch", self.batch, "must be an integer >= 0")
        _require(isinstance(self.iters, int) and self.iters >= 0, "iters", self.iters, "must be an integer >= 0")
        _require(self.cpu_milli >= 0, "cpu_milli", self.cpu_milli, "must be >= 0")
        _require(self.memory_mib >= 0, "memory_mib", self.memory_mib, "must be >= 0")
        _require(0 < self.gpu_milli <= 1000, "gpu_milli", self.gpu_milli, "must be in (0, 1000]")
        _require(isinstance(self.nodes, int) and self.nodes >= 0, "nodes", self.nodes, "must be an integer >= 0")
        _require(_finite(self.work_left) and 0 <= self.work_left <= 1, "work_left", self.work_left, "must be in [0, 1]")
        _require(
            isinstance(self.priority, int) and not isinstance(self.priority, bool),
            "priority",
            self.priority,
            "must be an integer",
        )
        fixed_shape(self.gpus, self.nodes)  # a fixed gang must split its GPUs evenly
        if self.gpu_milli < 1000:
            _require(self.gpus == 1, "gpu_milli", self.gpu_milli, "GPU sharing (gpu_milli < 1000) needs gpus == 1")
        if self.kind is JobKind.CPU:
            _require(self.gpus == 0, "gpus", self.gpus, "a cpu job requests no GPUs")
        # optional seconds (a check only when set: a trace of a million jobs builds a million of these)
        if self.checkpoint_interval is not None:
            _seconds(self.checkpoint_interval, "checkpoint_interval")
        if self.duration is not None:
            _seconds(self.duration, "duration")
        if self.requested_duration is not None:
            _seconds(self.requested_duration, "requested_duration")
        if self.predicted_duration is not None:
            _seconds(self.predicted_duration, "predicted_duration")

    @property
    def fixed_shape(self) -> Shape | None:
        """The ⟨nodes, gpus / nodes⟩ the user fixed, None when the placer (or GENIE) chooses."""
        return fixed_shape(self.gpus, self.nodes)

    @property
    def has_genie_task(self) -> bool:
        """True when GENIE's task model t = <type, b, iters> (Eq. 2) is fully known."""
        return self.kind is not JobKind.CPU and bool(self.model) and self.batch > 0 and self.iters > 0


@dataclass(frozen=True, slots=True)
class Shape:
    """GENIE placement s = <d_node, d_gpn> (seed 001 Eq. 3): symmetric over nodes."""

    d_node: int
    d_gpn: int

    def __post_init__(self) -> None:
        _require(isinstance(self.d_node, int) and self.d_node >= 1, "d_node", self.d_node, "must be >= 1")
        _require(isinstance(self.d_gpn, int) and self.d_gpn >= 1, "d_gpn", self.d_gpn, "must be >= 1")

    @property
    def gpus(self) -> int:
        return self.d_node * self.d_gpn


def fixed_shape(gpus: int, nodes: int) -> Shape | None:
    """The gang a request fixes: ``nodes`` nodes × gpus / nodes GPUs; None when ``nodes`` is 0 (the
    placer chooses) or nothing needs whole GPUs. The one place a fixed node count becomes a shape."""
    if nodes <= 0 or gpus <= 0:
        return None
    if gpus % nodes:
        raise InvalidInput("nodes", nodes, f"{gpus} GPUs do not split evenly over {nodes} nodes")
    return Shape(nodes, gpus // nodes)


def shape_text(shape: Shape) -> str:
    """A shape as messages spell it."""
    return f"{shape.d_node} node(s) × {shape.d_gpn} GPUs"


@dataclass(frozen=True, slots=True)
class Platform:
    """GENIE platform P = <N, G, Comm(.)> (seed 001 Eq. 1); Comm's γ, λ live on the profile.

    The seed's platform is N alike nodes of G GPUs. A partition's nodes may differ (1, 1 and 2 GPUs):
    ``nodes_with[g - 1]`` is then how many have at least g GPUs, and a shape ⟨d_node, d_gpn⟩ the nodes
    cannot hold (3 × 2 there) is no candidate (:meth:`holds`); () for alike nodes (:meth:`of`)."""

    nodes: int
    gpus_per_node: int
    gpu_model: str = ""  # the GPUs' model, for the model database's per-GPU profiles ("" unknown)
    nodes_with: tuple[int, ...] = ()

    @classmethod
    def of(cls, gpus: Sequence[int], gpu_model: str = "") -> Platform:
        """The platform of nodes with these GPU counts (N counts every node, as before; G the largest)."""
        caps = [int(g) for g in gpus]
        most = max(max(caps, default=1), 1)
        alike = all(g == most for g in caps)
        nodes_with = () if alike else tuple(sum(1 for c in caps if c >= g) for g in range(1, most + 1))
        return cls(max(len(caps), 1), most, gpu_model, nodes_with)

    def holds(self, shape: Shape) -> bool:
        """Whether the platform's nodes can hold the shape (d_node nodes of d_gpn GPUs each)."""
        if shape.d_node > self.nodes or shape.d_gpn > self.gpus_per_node:
            return False
        return not self.nodes_with or self.nodes_with[shape.d_gpn - 1] >= shape.d_node

    def __post_init__(self) -> None:
        _require(isinstance(self.nodes, int) and self.nodes >= 1, "nodes", self.nodes, "must be >= 1")
        _require(
            isinstance(self.gpus_per_node, int) and self.gpus_per_node >= 1,
            "gpus_per_node",
            self.gpus_per_node,
            "must be >= 1",
        )
        if self.nodes_with:
            w = self.nodes_with
            _require(
                len(w) == self.gpus_per_node
                and w[0] <= self.nodes
                and all(a >= b >= 0 for a, b in itertools.pairwise(w)),
                "nodes_with",
                w,
                "must count, for 1..gpus_per_node GPUs, the nodes with at least that many (non-increasing, <= nodes)",
            )

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(slots=True)
class Node:
    """A worker node. ``switch`` and ``rack`` give the physical topology (AnalySIM §3.1)."""

    name: str
    gpus: int
    gpu_model: str = ""
    cpu_milli: int = 0
    memory_mib: int = 0
    vc: str = "default"
    switch: str = ""
    rack: str = ""

    def __post_init__(self) -> None:
        _require(bool(self.name), "name", self.name, "must be a non-empty string")
        _require(isinstance(self.gpus, int) and self.gpus >= 0, "gpus", self.gpus, "must be an integer >= 0")
        _require(self.cpu_milli >= 0, "cpu_milli", self.cpu_milli, "must be >= 0")
        _require(self.memory_mib >= 0, "memory_mib", self.memory_mib, "must be >= 0")


@dataclass(frozen=True, slots=True)
class NodeGrant:
    """What one node gives a job: whole GPUs, or a slice of one GPU (gpu_milli < 1000)."""

    node: int
    gpu_ids: tuple[int, ...]
    gpu_milli: int = 1000
    cpu_milli: int = 0
    memory_mib: int = 0

    @property
    def gpus(self) -> int:
        return len(self.gpu_ids) if self.gpu_milli == 1000 else 0


@dataclass(frozen=True, slots=True)
class Allocation:
    """A concrete placement: which nodes and GPUs a job holds."""

    grants: tuple[NodeGrant, ...]
    cross_switch: bool = False

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(g.node for g in self.grants)

    @property
    def gpus(self) -> int:
        return sum(len(g.gpu_ids) for g in self.grants if g.gpu_milli == 1000)

    @property
    def shape(self) -> Shape | None:
        """The ⟨d_node, d_gpn⟩ this allocation realises, None when GPUs per node differ."""
        counts = {len(g.gpu_ids) for g in self.grants}
        if len(counts) != 1 or not self.grants or 0 in counts:
            return None
        return Shape(len(self.grants), counts.pop())


POOL_AND = "&"  # a request's pool "a&b": the nodes of both named pools (a node subset within another)


@dataclass(slots=True)
class PlacementRequest:
    """What a placer must find room for."""

    gpus: int
    shape: Shape | None = None
    vc: str | None = None
    gpu_models: tuple[str, ...] = ()
    gpu_milli: int = 1000
    cpu_milli: int = 0
    memory_mib: int = 0
    nodes: int = 0
    pool: str | None = None  # a named node subset of the cluster (SODA's arrays; "a&b": both); None: all

    def __post_init__(self) -> None:
        _require(isinstance(self.gpus, int) and self.gpus >= 0, "gpus", self.gpus, "must be an integer >= 0")
        if self.shape is not None:
            _require(self.shape.gpus == self.gpus, "shape", self.shape, f"must cover exactly {self.gpus} GPUs")

    @property
    def gang(self) -> Shape | None:
        """The shape this request must be placed with: the chosen one, else the fixed one, else None."""
        return self.shape if self.shape is not None else fixed_shape(self.gpus, self.nodes)

    @classmethod
    def for_job(
        cls, job: Job, shape: Shape | None = None, *, use_vc: bool = True, pool: str | None = None
    ) -> PlacementRequest:
        gpus = shape.gpus if shape is not None else job.gpus
        if job.pool is not None:  # the job's own subset within the caller's (a SODA array's) one
            pool = job.pool if pool is None else f"{pool}{POOL_AND}{job.pool}"
        return cls(
            gpus=gpus,
            shape=shape,
            vc=job.vc if use_vc else None,
            gpu_models=job.gpu_models,
            gpu_milli=job.gpu_milli,
            cpu_milli=job.cpu_milli,
            memory_mib=job.memory_mib,
            nodes=job.nodes,
            pool=pool,
        )


@runtime_checkable
class DurationPredictor(Protocol):
    """What the admission cycle asks of a duration predictor (QSSF, elapsed-time runtime).

    Causal by contract: ``predict`` sees only what was ``observe``d before ``now``; the
    simulator calls ``observe`` at a job's simulated end, the operator when a DLJob finishes.
    Errors propagate: a caller falls back only when configured to, and says so.
    """

    @property
    def name(self) -> str:
        """The predictor's name as the CLI and the status say it (read-only: a class attribute or a property)."""
        ...

    def predict(self, job: Job, now: float) -> float | None:
        """Expected run seconds of ``job`` on its requested GPUs; None when nothing is known."""
        ...

    def observe(self, job: Job, duration: float, end: float) -> None:
        """``job`` finished at ``end`` after running ``duration`` seconds."""
        ...


class SubmissionPredictions:
    """Each job's predicted run time, asked of ``predictor`` when the job is first seen (its submission:
    Helios predicts a job once, at submission, seed 000 §4.2.2) and kept while it waits, runs, is preempted
    or restarted. A job the predictor cannot answer yet (no history like it) is asked again at later calls
    and keeps its first answer. The simulator and the operator both predict through this, so QSSF's order
    and backfilling's estimates read the same number in both; ``key`` names a job where its id may be
    reused (the operator: a DLJob's uid)."""

    def __init__(self, predictor: DurationPredictor) -> None:
        self.predictor = predictor
        self.known: dict[Hashable, float] = {}

    def predict(self, job: Job, now: float, key: Hashable | None = None) -> float | None:
        k = job.id if key is None else key
        got = self.known.get(k)
        if got is None:
            got = self.predictor.predict(job, now)
            if got is not None:
                self.known[k] = got
        return got

    def seed(self, key: Hashable, predicted: float) -> None:
        """A prediction made before (the operator's, read back from a DLJob's status after a restart)."""
        self.known.setdefault(key, predicted)

    def forget(self, key: Hashable) -> None:
        """The job is done (finished, withdrawn, deleted): its prediction is no longer asked for."""
        self.known.pop(key, None)

    def retain(self, keys: Set[Hashable]) -> None:
        """Keep only the predictions of ``keys`` (the jobs still there)."""
        for k in [k for k in self.known if k not in keys]:
            del self.known[k]
