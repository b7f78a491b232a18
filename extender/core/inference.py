"""SODA's hardware-aware inference placer (seed 002 §V-D): serve on CPU replicas below the GPU
switching batch bs_gpu, on GPU replicas above it, scaled out at a threshold of their maximum load.

One pure function, :func:`decide`, is called by the operator's InferenceService controller on
live load and by ``qosmos simulate inference`` on a recorded QPS series, so the replay shows what
the controller does. No clocks: the caller passes ``now``; the carried :class:`InferenceState`
is plain data the controller keeps in the object's status.

Serving model (seed 002 §V-D1): a replica collects queries for a time window W or until it has
batch_max of them, then computes the batch; collection and computation are pipelined, and
W + compute must stay within the QoS target T. Pipelining needs W >= C(B) (the next batch is
collected while this one computes), the target needs W + C(B) <= T, so the largest batch a
replica serves is the largest B with C(B) <= T/2, served with W = C(B) — exactly the seed's
Fig. 16 set-up ("batch size that have the computation time closing to 100 ms [T = 200 ms], and
set the time window same as the computation time"; ResNet50 on CPU: batch 2 in 95.96 ms). A
batch of one needs no window (W = 0, C(1) <= T): that is how Table III's VGG16 and BAT, whose
largest batch is 1, count among the "six models" that can serve on 16 cores.
One replica's maximum load is therefore B / C(B) queries per second, and a query load of q is a
batch of q × C(bs_gpu) queries per GPU window: "query load below bs_gpu" (§V-D2) means
q × C(bs_gpu) < bs_gpu, i.e. q below one GPU replica's maximum load.

Compute time C(b), in this order (every threshold says which it came from, ``InferenceSpec.sources``):
1. an override (the InferenceService's gpuSwitchBatch / cpu.maxBatch, the CLI's options);
2. an inference profile (``core.inference_profiles``): C(b) measured under ``torch.inference_mode``
   on the node's GPU model (else the nearest) and on CPU cores (issue 23 §3);
3. on a GPU b / sPR(b) from the model database (GENIE Eq. 7 on one GPU, no Comm for inference,
   Eq. 8); on CPU b / (cores × per-core rate), linear in the batch and in the cores (seed 002
   Fig. 9 shows the largest batch growing with the cores; linear is our assumption).
Per-core rates come from seed 002 Table III (largest batch within 200 ms on 16 cores, compute
only, so rate >= batch / 3.2 s; we take that bound) and Fig. 16 for ResNet50 (2 / (16 × 95.96 ms)).
The database's profiles are training throughput (Lucid), i.e. forward and backward passes: as an
inference rate they are conservative (a forward pass is roughly a third of a training step), and
issue 23 measured them 16-35x off; a measured inference profile replaces them.

Switching ahead of the load (issue 23 §3): a replica asked for now serves only after its start-up
time, so a placer that follows the measured rate switches and scales after the load has arrived.
``decide`` takes ``forecast_qps``, the upper band of the rate forecast over the next
:func:`forecast_horizon_s` (the start-up time plus one decision period: what the replicas asked
for now must carry until the next decision's are Ready), and plans for the larger of the two.
The forecaster lives in ``predictors.qps_forecast``; the core takes the number.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from enum import StrEnum

from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.genie import ThroughputProfile
from qosmos.extender.core.inference_profiles import InferenceProfiles, MeasuredCompute, check_batch, check_scale
from qosmos.extender.core.modeldb import ModelDB

SODA_CPU_CORES = 16  # seed 002 §IV-E: the cores a GPU node leaves after 12 for its GPU jobs
SODA_QOS_TARGET_S = 0.2  # seed 002 §IV-E: "generally set as 200 ms"
# Seed 002 Table III: the largest batch 16 cores compute within 200 ms. 0: never on CPU.
SODA_TABLE_III: dict[str, int] = {
    "AlexNet": 16,
    "ResNet50": 4,
    "Inception3": 2,
    "VGG16": 1,
    "BAT": 1,
    "Transformer": 8,
    "DeepSpeech": 0,
    "WaveNet": 0,
}
# Queries per second per core: Table III's batch / (16 cores × 0.2 s), a lower bound of the rate;
# ResNet50 from the measurement of §VI-E (batch 2 in 95.96 ms on 16 cores) instead.
CPU_PER_CORE_QPS: dict[str, float] = {
    name: bs / (SODA_CPU_CORES * SODA_QOS_TARGET_S) for name, bs in SODA_TABLE_III.items()
} | {"ResNet50": 2 / (SODA_CPU_CORES * 0.09596)}
# Names of the model database (and common spellings) for the seed's models.
CPU_ALIASES: dict[str, str] = {"vgg": "VGG16", "inceptionv3": "Inception3", "googlenet": "Inception3"}

DEFAULT_SCALE_OUT_THRESHOLD = 0.8  # seed 002 §V-D1: "for example, 80% of load_max"
DEFAULT_HYSTERESIS = 0.2
DEFAULT_SWITCH_COOLDOWN_S = 300.0
DEFAULT_SCALE_OUT_AFTER_S = 0.0
DEFAULT_SCALE_IN_AFTER_S = 300.0
MAX_BATCH = 4096  # the search bound for a serving batch
_EPS = 1e-9


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


class Mode(StrEnum):
    GPU = "GPU"
    CPU = "CPU"

    @classmethod
    def parse(cls, value: str | Mode, field_name: str = "mode") -> Mode:
        if isinstance(value, Mode):
            return value
        try:
            return cls(str(value).strip().upper())
        except ValueError:
            raise InvalidInput(field_name, value, "expected GPU or CPU") from None


class Reason(StrEnum):
    """Why :func:`decide` answered as it did (short, for Events and logs)."""

    INITIAL = "initial"  # no state yet: sized for the load at once
    HOLD = "hold"  # the load fits the current replicas
    SATURATED = "saturated"  # overloaded, but already at the most replicas allowed
    SCALE_OUT = "scale-out"
    SCALE_IN = "scale-in"
    SWITCH_TO_CPU = "switch-to-cpu"
    SWITCH_TO_GPU = "switch-to-gpu"
    BOUNDS = "bounds"  # replicas outside [min, max] of the spec (it changed): corrected at once
    WAITING = "waiting"  # a change is wanted but the load has not asked for it long enough
    COOLDOWN = "cooldown"  # a mode switch is wanted but the last one is too recent


# ---- the latency model --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuCompute:
    """C(b) on one GPU: b / sPR(b) (GENIE Eq. 7), times ``scale`` (1 unless a profiled bs_gpu rescales it)."""

    profile: ThroughputProfile
    scale: float = 1.0

    def __post_init__(self) -> None:
        check_scale(self.scale)

    def seconds(self, batch: float) -> float:
        check_batch(batch)
        rate = self.profile.spr(batch)
        return math.inf if rate <= 0 else self.scale * batch / rate


@dataclass(frozen=True, slots=True)
class CpuCompute:
    """C(b) on ``cores`` CPU cores: b / (cores × per-core rate), linear in both (see the module notes)."""

    cores: int
    per_core_qps: float

    def __post_init__(self) -> None:
        if isinstance(self.cores, bool) or not isinstance(self.cores, int) or self.cores < 1:
            raise InvalidInput("cores", self.cores, "must be an integer >= 1")
        if not (math.isfinite(self.per_core_qps) and self.per_core_qps > 0):
            raise InvalidInput("per_core_qps", self.per_core_qps, "must be a finite number > 0")

    def seconds(self, batch: float) -> float:
        check_batch(batch)
        return batch / (self.cores * self.per_core_qps)


Compute = GpuCompute | CpuCompute | MeasuredCompute


def window_s(compute: Compute, batch: int) -> float:
    """The collection window of a replica serving ``batch``: C(batch) (seed 002 Fig. 16), none for 1."""
    return 0.0 if batch <= 1 else compute.seconds(batch)


def serving_batch(compute: Compute, target_s: float) -> int:
    """The largest batch B a replica serves within ``target_s``: W(B) + C(b) <= T for every b <= B
    (a partial batch computes too), 0 when not even one query fits.

    C(b) need not grow with b (a GPU's rate rises with the batch: EfficientNet computes 64 faster
    than 32), so every batch up to ``MAX_BATCH`` is tried with the slowest smaller batch.
    """
    if not (math.isfinite(target_s) and target_s > 0):
        raise InvalidInput("qos_target", target_s, "must be a finite number of seconds > 0")
    best, slowest = 0, 0.0
    for b in range(1, MAX_BATCH + 1):
        slowest = max(slowest, compute.seconds(b))
        if window_s(compute, b) + slowest <= target_s + _EPS:
            best = b
    return best


@dataclass(frozen=True, slots=True)
class Serving:
    """How one replica serves in one mode: batch_max B, window W, compute model."""

    mode: Mode
    batch: int
    compute: Compute
    gpus: int = 0  # per replica
    cores: int = 0  # per replica

    def __post_init__(self) -> None:
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1:
            raise InvalidInput("batch", self.batch, "a serving batch must be an integer >= 1")

    @property
    def compute_s(self) -> float:
        """C(B): compute time of a full batch."""
        return self.compute.seconds(self.batch)

    @property
    def window_s(self) -> float:
        return window_s(self.compute, self.batch)

    @property
    def capacity_qps(self) -> float:
        """One replica's maximum load (load_max per replica, §V-D1): a full batch per C(B)."""
        return self.batch / self.compute_s

    def latency_s(self, qps_per_replica: float) -> float:
        """Worst latency in a batch (its first query) at a steady per-replica load, queueing excluded.

        The batch closes when the window ends or B queries are in, whichever is first; the
        first query waits that long, then the batch computes. Above ``capacity_qps`` queries
        also queue (the replay adds that wait).
        """
        if not (math.isfinite(qps_per_replica) and qps_per_replica >= 0):
            raise InvalidInput("qps", qps_per_replica, "must be a finite number >= 0")
        w, b_max = self.window_s, self.batch
        arriving = qps_per_replica * w
        if arriving < b_max:
            return w + self.compute.seconds(max(1.0, arriving))
        return b_max / qps_per_replica + self.compute_s


# ---- the service's spec and carried state ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InferenceSpec:
    """An inference service, resolved to numbers (build it with :func:`resolve_spec`).

    ``cpu`` None: the service never runs on CPU (no CPU profile, or its max batch is below 1).
    ``scale_out_threshold``: scale out when the load passes this share of the replicas' maximum
    load. ``hysteresis`` h: the load must fall to (1 − h) of a switching or scale-out point
    before the service leaves it downwards. Times in seconds.
    """

    model: str
    qos_target_ms: float
    gpu: Serving
    cpu: Serving | None
    min_replicas: int = 1
    max_replicas: int = 8
    cpu_min_replicas: int | None = None  # None: min_replicas
    cpu_max_replicas: int = 8
    scale_out_threshold: float = DEFAULT_SCALE_OUT_THRESHOLD
    hysteresis: float = DEFAULT_HYSTERESIS
    switch_cooldown_s: float = DEFAULT_SWITCH_COOLDOWN_S
    scale_out_after_s: float = DEFAULT_SCALE_OUT_AFTER_S
    scale_in_after_s: float = DEFAULT_SCALE_IN_AFTER_S
    notes: tuple[str, ...] = field(default=(), compare=False)
    # where each threshold came from: (name, source) for gpu_compute, gpu_switch_batch, cpu_compute,
    # cpu_max_batch (:meth:`thresholds`)
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.qos_target_ms) and self.qos_target_ms > 0):
            raise InvalidInput("qos_target_ms", self.qos_target_ms, "must be a finite number > 0")
        if self.gpu.mode is not Mode.GPU or (self.cpu is not None and self.cpu.mode is not Mode.CPU):
            raise InvalidInput("mode", (self.gpu.mode, self.cpu and self.cpu.mode), "gpu and cpu serving swapped")
        for name in ("min_replicas", "max_replicas", "cpu_max_replicas"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidInput(name, v, "must be an integer >= 1")
        if self.max_replicas < self.min_replicas:
            raise InvalidInput("max_replicas", self.max_replicas, f"below min_replicas {self.min_replicas}")
        if self.cpu_min_replicas is not None and (
            isinstance(self.cpu_min_replicas, bool)
            or not isinstance(self.cpu_min_replicas, int)
            or self.cpu_min_replicas < 1
        ):
            raise InvalidInput("cpu_min_replicas", self.cpu_min_replicas, "must be an integer >= 1")
        if self.cpu is not None and self.cpu_max_replicas < self.min_for(Mode.CPU):
            raise InvalidInput(
                "cpu_max_replicas", self.cpu_max_replicas, f"below the CPU minimum {self.min_for(Mode.CPU)}"
            )
        if not (0 < self.scale_out_threshold <= 1):
            raise InvalidInput("scale_out_threshold", self.scale_out_threshold, "must be in (0, 1]")
        if not (0 <= self.hysteresis < 1):
            raise InvalidInput("hysteresis", self.hysteresis, "must be in [0, 1)")
        for name in ("switch_cooldown_s", "scale_out_after_s", "scale_in_after_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise InvalidInput(name, v, "must be a finite number of seconds >= 0")

    @property
    def qos_target_s(self) -> float:
        return self.qos_target_ms / 1000.0

    @property
    def gpu_switch_batch(self) -> int:
        """bs_gpu, the switching point (§V-D2)."""
        return self.gpu.batch

    def serving(self, mode: Mode) -> Serving:
        if mode is Mode.CPU:
            if self.cpu is None:
                raise InvalidInput("mode", mode.value, f"{self.model} has no CPU serving")
            return self.cpu
        return self.gpu

    def min_for(self, mode: Mode) -> int:
        if mode is Mode.CPU and self.cpu_min_replicas is not None:
            return self.cpu_min_replicas
        return self.min_replicas

    def max_for(self, mode: Mode) -> int:
        return self.cpu_max_replicas if mode is Mode.CPU else self.max_replicas

    def load_batch(self, qps: float) -> float:
        """The load as a batch: queries arriving in one GPU batch interval C(bs_gpu) (module notes)."""
        return qps * self.gpu.compute_s

    def source(self, name: str) -> str:
        """Where threshold ``name`` came from ('' when not recorded)."""
        return dict(self.sources).get(name, "")

    def thresholds(self) -> dict[str, dict[str, object]]:
        """The derived thresholds (seed 002 §V-D1) with their sources, for explain and summaries."""
        out: dict[str, dict[str, object]] = {
            "gpu_switch_batch": {"value": self.gpu.batch, "source": self.source("gpu_switch_batch")},
            "gpu_compute_ms": {"value": round(self.gpu.compute_s * 1000, 3), "source": self.source("gpu_compute")},
            "gpu_replica_max_qps": {"value": round(self.gpu.capacity_qps, 3), "source": self.source("gpu_compute")},
        }
        cpu = self.cpu
        out["cpu_max_batch"] = {"value": cpu.batch if cpu else 0, "source": self.source("cpu_max_batch")}
        out["cpu_compute_ms"] = {
            "value": round(cpu.compute_s * 1000, 3) if cpu else None,
            "source": self.source("cpu_compute"),
        }
        out["cpu_replica_max_qps"] = {
            "value": round(cpu.capacity_qps, 3) if cpu else 0.0,
            "source": self.source("cpu_compute"),
        }
        out["cpu_cores_per_replica"] = {"value": cpu.cores if cpu else 0, "source": self.source("cpu_cores")}
        return out

    def gpu_only(self) -> InferenceSpec:
        """The same service never leaving the GPU (SODA's baseline, the original service mode §V-D1)."""
        return replace(self, cpu=None)


@dataclass(frozen=True, slots=True)
class InferenceState:
    """What :func:`decide` carries from one call to the next (the controller keeps it in status).

    ``up_since`` / ``down_since``: since when the load has asked for more (scale out, to GPU) or
    less (scale in, to CPU) without a break; None when it does not.
    """

    mode: Mode
    replicas: int
    last_switch_s: float | None = None
    switches: int = 0
    up_since: float | None = None
    down_since: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", Mode.parse(self.mode))
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int) or self.replicas < 0:
            raise InvalidInput("replicas", self.replicas, "must be an integer >= 0")
        if isinstance(self.switches, bool) or not isinstance(self.switches, int) or self.switches < 0:
            raise InvalidInput("switches", self.switches, "must be an integer >= 0")
        for name in ("last_switch_s", "up_since", "down_since"):
            v = getattr(self, name)
            if v is not None and not math.isfinite(v):
                raise InvalidInput(name, v, "must be a finite time or None")


@dataclass(frozen=True, slots=True)
class Decision:
    """What to run now (``mode``, ``replicas``), why, and the state to carry to the next call.

    ``target_mode`` / ``target_replicas``: what the load asks for (equal to mode / replicas
    unless the change waits); ``retry_at``: when a waiting change would be due if the load stays,
    so a controller can requeue itself then (None when nothing waits).
    """

    mode: Mode
    replicas: int
    reason: Reason
    message: str
    state: InferenceState
    target_mode: Mode
    target_replicas: int
    load_batch: float
    capacity_qps: float
    retry_at: float | None = None
    switched: bool = False  # the mode differs from the state's it was given
    planned_qps: float = 0.0  # the load planned for: the larger of the observed rate and the forecast


# ---- building a spec from what a user gives ----------------------------------------------------------


def cpu_rate(model: str) -> float | None:
    """Per-core queries per second of ``model`` from seed 002 (Table III, Fig. 16), if it is there."""
    name = _seed_name(model)
    return None if name is None else CPU_PER_CORE_QPS[name]


def _seed_name(model: str) -> str | None:
    key = _norm(model)
    by_key = {_norm(k): k for k in CPU_PER_CORE_QPS}
    return by_key.get(key) or CPU_ALIASES.get(key)


def _seed_source(model: str) -> str:
    name = _seed_name(model)
    if name == "ResNet50":
        return "seed 002 Fig. 16 (ResNet50: batch 2 in 95.96 ms on 16 cores), linear in the cores"
    return f"seed 002 Table III ({name}: batch {SODA_TABLE_III.get(name or '', 0)} within 200 ms on 16 cores)"


def resolve_spec(
    model: str,
    qos_target_ms: float,
    *,
    db: ModelDB,
    gpu_switch_batch: int | None = None,
    cpu_cores_per_replica: int = SODA_CPU_CORES,
    cpu_max_batch: int | None = None,
    cpu_per_core_qps: float | None = None,
    min_replicas: int = 1,
    max_replicas: int = 8,
    cpu_min_replicas: int | None = None,
    cpu_max_replicas: int | None = None,
    scale_out_threshold: float = DEFAULT_SCALE_OUT_THRESHOLD,
    hysteresis: float = DEFAULT_HYSTERESIS,
    switch_cooldown_s: float = DEFAULT_SWITCH_COOLDOWN_S,
    scale_out_after_s: float = DEFAULT_SCALE_OUT_AFTER_S,
    scale_in_after_s: float = DEFAULT_SCALE_IN_AFTER_S,
    inference_profiles: InferenceProfiles | None = None,
    gpu_model: str | None = None,
) -> InferenceSpec:
    """An :class:`InferenceSpec` from an InferenceService's fields, the rest from an inference profile
    or the model database (module notes: overrides, then a profile, then the database and the seed).

    ``inference_profiles``: the measured C(b) curves (None: the built-in ones; an empty
    :class:`InferenceProfiles` uses only the database and the seed); ``gpu_model``: the GPU model of
    the nodes that serve (its own profile first, else the nearest).
    GPU: C(b) from the model's GPU inference profile, else b / sPR(b) of the database's training
    profile; bs_gpu = the largest batch one GPU serves within the target, unless given — a given
    bs_gpu rescales C so that the window plus C(bs_gpu) is exactly the target (the curve keeps its
    shape). CPU: a given per-core rate, else one implied by a given max batch (its window + compute
    taken as the target), else the model's CPU inference profile for the replica's cores, else
    seed 002's rate; max batch given, else the largest within the target. No CPU data at all, or a
    max batch below 1: never on CPU.
    """
    if not (isinstance(qos_target_ms, int | float) and math.isfinite(qos_target_ms) and qos_target_ms > 0):
        raise InvalidInput("qos_target_ms", qos_target_ms, "must be a finite number > 0")
    if isinstance(cpu_cores_per_replica, bool) or not isinstance(cpu_cores_per_replica, int):
        raise InvalidInput("cpu_cores_per_replica", cpu_cores_per_replica, "must be an integer >= 1")
    if cpu_cores_per_replica < 1:
        raise InvalidInput("cpu_cores_per_replica", cpu_cores_per_replica, "must be an integer >= 1")
    if cpu_per_core_qps is not None and not (math.isfinite(cpu_per_core_qps) and cpu_per_core_qps >= 0):
        raise InvalidInput("cpu_per_core_qps", cpu_per_core_qps, "must be a finite number >= 0 (0: never on CPU)")
    profiles = InferenceProfiles.builtin() if inference_profiles is None else inference_profiles
    target = qos_target_ms / 1000.0
    notes: list[str] = []
    sources: dict[str, str] = {}

    gpu_compute: GpuCompute | MeasuredCompute
    measured = profiles.gpu(model, gpu_model)
    if measured is not None:
        gpu_compute = measured.compute
        sources["gpu_compute"] = measured.source
    else:
        found = db.lookup(model)
        if found.how != "exact":
            notes.append(f"GPU profile of {model}: {found.matched}'s ({found.how} name)")
        gpu_compute = GpuCompute(found.profile)
        sources["gpu_compute"] = (
            f"model DB training rate ({found.matched}: {found.profile.source or 'given'}); no inference profile"
        )
    if gpu_switch_batch is None:
        bs_gpu = serving_batch(gpu_compute, target)
        if bs_gpu < 1:
            raise InvalidInput(
                "qos_target_ms", qos_target_ms, f"one GPU cannot serve {model} within it even at batch 1"
            )
        sources["gpu_switch_batch"] = sources["gpu_compute"]
        notes.append(f"bs_gpu {bs_gpu} from the {sources['gpu_compute']}")
    else:
        if isinstance(gpu_switch_batch, bool) or not isinstance(gpu_switch_batch, int) or gpu_switch_batch < 1:
            raise InvalidInput("gpu_switch_batch", gpu_switch_batch, "must be an integer >= 1")
        bs_gpu = gpu_switch_batch
        spent = window_s(gpu_compute, bs_gpu) + gpu_compute.seconds(bs_gpu)
        gpu_compute = replace(gpu_compute, scale=gpu_compute.scale * target / spent)
        sources["gpu_switch_batch"] = "override"
        sources["gpu_compute"] = (
            f"override (bs_gpu {bs_gpu} within the target; the curve's shape from the {sources['gpu_compute']})"
        )
    gpu = Serving(Mode.GPU, bs_gpu, gpu_compute, gpus=1)

    cpu: Serving | None = None
    cpu_compute: Compute | None = None
    cores = cpu_cores_per_replica
    sources["cpu_cores"] = "given" if cores != SODA_CPU_CORES else "seed 002 §IV-E (16 spare cores of a GPU node)"
    if cpu_max_batch is not None and cpu_max_batch < 1:
        notes.append("CPU max batch below 1: never on CPU")
        sources["cpu_max_batch"] = sources["cpu_compute"] = "override (never on CPU)"
    elif cpu_per_core_qps is not None:
        if cpu_per_core_qps > 0:
            cpu_compute = CpuCompute(cores, cpu_per_core_qps)
            sources["cpu_compute"] = f"override (per-core rate {cpu_per_core_qps:.4g} queries/s)"
        else:
            notes.append("CPU rate 0 given: never on CPU")
            sources["cpu_max_batch"] = sources["cpu_compute"] = "override (never on CPU)"
    elif cpu_max_batch is not None:
        # a profiled max batch: its window + compute is the target (2 C(B) = T, or C(1) = T)
        rate = cpu_max_batch / (cores * (target / 2 if cpu_max_batch > 1 else target))
        cpu_compute = CpuCompute(cores, rate)
        sources["cpu_compute"] = f"override (max batch {cpu_max_batch} within the target)"
    elif (found_cpu := profiles.cpu(model, cores, gpu_model)) is not None:
        cpu_compute = found_cpu.compute
        sources["cpu_compute"] = found_cpu.source
    else:
        seed_rate = cpu_rate(model)
        if seed_rate is None:
            notes.append(f"no CPU profile for {model}: never on CPU (give a CPU max batch or per-core rate)")
            sources["cpu_max_batch"] = sources["cpu_compute"] = "no CPU profile or seed measurement"
        elif seed_rate > 0:
            cpu_compute = CpuCompute(cores, seed_rate)
            sources["cpu_compute"] = _seed_source(model)
            notes.append(f"CPU rate {seed_rate:.4g} queries/s per core from SODA's measurements")
        else:
            notes.append(f"CPU rate 0 for {model} (SODA Table III): never on CPU")
            sources["cpu_max_batch"] = sources["cpu_compute"] = _seed_source(model)
    if cpu_compute is not None:
        if cpu_max_batch is not None:
            b, sources["cpu_max_batch"] = cpu_max_batch, "override"
        else:
            b, sources["cpu_max_batch"] = serving_batch(cpu_compute, target), sources["cpu_compute"]
        if b >= 1:
            cpu = Serving(Mode.CPU, b, cpu_compute, cores=cores)
        else:
            notes.append(f"{cores} CPU cores cannot serve {model} within the target: never on CPU")
    return InferenceSpec(
        model=model,
        qos_target_ms=float(qos_target_ms),
        gpu=gpu,
        cpu=cpu,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        cpu_min_replicas=cpu_min_replicas,
        cpu_max_replicas=max_replicas if cpu_max_replicas is None else cpu_max_replicas,
        scale_out_threshold=scale_out_threshold,
        hysteresis=hysteresis,
        switch_cooldown_s=switch_cooldown_s,
        scale_out_after_s=scale_out_after_s,
        scale_in_after_s=scale_in_after_s,
        notes=tuple(notes),
        sources=tuple(sources.items()),
    )


# ---- the decision -------------------------------------------------------------------------------------


def needed_replicas(serving: Serving, qps: float, fraction: float) -> int:
    """Replicas whose maximum load times ``fraction`` covers ``qps`` (at least 1)."""
    return max(1, math.ceil(qps / (fraction * serving.capacity_qps) - _EPS))


def _cpu_serves(spec: InferenceSpec, qps: float, band: float) -> bool:
    """SODA's CPU condition (§V-D2) shrunk by ``band`` (1 = the plain rule): the load is below
    band × bs_gpu, and CPU replicas within their limit carry it under band × the threshold."""
    if spec.cpu is None:
        return False
    below = spec.load_batch(qps) < band * spec.gpu_switch_batch
    return below and needed_replicas(spec.cpu, qps, spec.scale_out_threshold * band) <= spec.cpu_max_replicas


def _sized(spec: InferenceSpec, mode: Mode, qps: float, fraction: float) -> int:
    n = needed_replicas(spec.serving(mode), qps, fraction)
    return min(max(n, spec.min_for(mode)), spec.max_for(mode))


def _fmt(qps: float) -> str:
    return f"{qps:.4g} queries/s"


def forecast_horizon_s(ready_s: float, period_s: float) -> float:
    """How far ahead a forecast must see for :func:`decide`: replicas asked for now serve after
    ``ready_s``, and they must carry the load until those asked for at the next decision, one
    ``period_s`` later, are Ready too."""
    for name, v in (("ready_s", ready_s), ("period_s", period_s)):
        if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
            raise InvalidInput(name, v, "must be a finite number of seconds >= 0")
    return float(ready_s + period_s)


def decide(
    spec: InferenceSpec,
    state: InferenceState | None,
    qps: float,
    now: float,
    *,
    prefer_gpu: bool = False,
    forecast_qps: float | None = None,
) -> Decision:
    """Mode and replicas for an observed query rate ``qps`` at time ``now`` (seconds, any epoch).

    SODA §V-D: below bs_gpu on CPU replicas, as many as the load needs at their max batch; above
    it on GPU replicas; in either mode replicas are added when the load passes the threshold of
    the replicas' maximum load for ``scale_out_after_s`` (§V-D1: "for a period of time"; by
    default 0, the period being the window the caller measures the rate over), at once when it
    passes the maximum itself. ``prefer_gpu``: the caller saw CPU jobs queue while GPUs idle, when
    SODA serves on GPU (§V-D2); how many queued jobs count as many is the caller's call.
    ``qps`` is the load to serve: a caller that sees queued queries adds what draining them
    within its period takes (the replay does).

    ``forecast_qps`` (issue 23 §3, switching ahead of the load): the upper band of the query rate
    forecast over the next :func:`forecast_horizon_s`. The placer plans for the larger of it and
    ``qps``: the next mode's replicas are asked for before the predicted crossing (so they are Ready
    when the load arrives), each mode is sized for the band, and a step down needs the band below
    the point too. A forecast above what the current replicas serve counts as an overload (no
    wait, no cooldown): QoS first, as for a measured overload. None: the observed rate alone.

    Where the seed is silent, we chose (the seed gives no scale-in rule, hysteresis or cooldown):
    - Hysteresis: a step down (GPU → CPU, fewer replicas) needs the load at (1 − h) of the point it
      crosses — below (1 − h) bs_gpu, and under (1 − h) × the threshold of the smaller set — so a
      load wandering around a point does not flap; steps up use the plain points, so QoS never
      waits on the band.
    - Steps down wait ``scale_in_after_s`` of load that asks for them without a break (like a
      Kubernetes HPA stabilisation window); steps up ``scale_out_after_s``.
    - A mode switch also waits ``switch_cooldown_s`` after the previous one.
    - Overload (the load above what the current replicas serve) skips every wait: QoS first,
      as the seed launches new jobs "directly" when the load exceeds the maximum.
    - With no state yet (a new service) the size for the load is taken at once.
    - A switch to CPU lands on as many CPU replicas as carry the load under (1 − h) × the threshold
      (at least ``cpu_min_replicas``): the CPU set starts with the band's headroom, since a burst
      that one GPU replica absorbs can swamp small CPU replicas (issue 12's GenAI replay).
    """
    if not (isinstance(qps, int | float) and math.isfinite(qps) and qps >= 0):
        raise InvalidInput("qps", qps, "must be a finite number >= 0")
    if not (isinstance(now, int | float) and math.isfinite(now)):
        raise InvalidInput("now", now, "must be a finite time in seconds")
    if forecast_qps is not None and not (
        isinstance(forecast_qps, int | float) and math.isfinite(forecast_qps) and forecast_qps >= 0
    ):
        raise InvalidInput("forecast_qps", forecast_qps, "must be a finite number >= 0 or None")
    observed = qps
    if forecast_qps is not None and forecast_qps > qps:
        qps = float(forecast_qps)  # plan for the band: every rule below reads the planned load
    thr, band = spec.scale_out_threshold, 1.0 - spec.hysteresis
    load_batch = spec.load_batch(qps)

    def answer(
        mode: Mode, n: int, reason: Reason, message: str, st: InferenceState, target: tuple[Mode, int] | None = None
    ) -> Decision:
        tm, tn = target if target is not None else (mode, n)
        retry = None
        if reason is Reason.WAITING:
            since = st.up_since if st.up_since is not None else st.down_since
            wait = spec.scale_out_after_s if st.up_since is not None else spec.scale_in_after_s
            retry = (since if since is not None else now) + wait
        elif reason is Reason.COOLDOWN and st.last_switch_s is not None:
            retry = st.last_switch_s + spec.switch_cooldown_s
        cap = n * spec.serving(mode).capacity_qps
        switched = state is not None and mode is not state.mode
        if qps > observed:
            message = f"{message} (forecast; {_fmt(observed)} observed)"
        return Decision(mode, n, reason, message, st, tm, tn, load_batch, cap, retry, switched, qps)

    if state is None:
        cpu = not prefer_gpu and _cpu_serves(spec, qps, 1.0)
        mode = Mode.CPU if cpu else Mode.GPU
        n = _sized(spec, mode, qps, thr)
        return answer(mode, n, Reason.INITIAL, f"{_fmt(qps)}: start on {n} {mode} replica(s)", InferenceState(mode, n))

    mode, n = state.mode, state.replicas
    if mode is Mode.CPU and spec.cpu is None:  # the spec lost its CPU serving: back to GPU now
        m = _sized(spec, Mode.GPU, qps, thr)
        st = InferenceState(Mode.GPU, m, now, state.switches + 1)
        return answer(Mode.GPU, m, Reason.BOUNDS, f"{spec.model} no longer serves on CPU", st)
    serving = spec.serving(mode)
    overloaded = qps > n * serving.capacity_qps + _EPS
    lo, hi = spec.min_for(mode), spec.max_for(mode)
    if not lo <= n <= hi:
        m = min(max(n, lo), hi)
        st = replace(state, replicas=m, up_since=None, down_since=None)
        return answer(mode, m, Reason.BOUNDS, f"{n} {mode} replica(s) outside [{lo}, {hi}]", st)

    # Where the load wants the service, and whether that is a step up or down.
    up: bool
    if mode is Mode.CPU:
        if prefer_gpu or not _cpu_serves(spec, qps, 1.0):
            target, up, why = (Mode.GPU, _sized(spec, Mode.GPU, qps, thr)), True, Reason.SWITCH_TO_GPU
        else:
            target, up, why = _within(spec, mode, n, qps, thr, band)
    elif not prefer_gpu and _cpu_serves(spec, qps, band):
        target, up, why = (Mode.CPU, _sized(spec, Mode.CPU, qps, thr * band)), False, Reason.SWITCH_TO_CPU
    else:
        target, up, why = _within(spec, mode, n, qps, thr, band)

    if target == (mode, n):
        st = replace(state, up_since=None, down_since=None)
        if overloaded:
            return answer(mode, n, Reason.SATURATED, f"{_fmt(qps)} over {n} {mode} replica(s), at the maximum", st)
        return answer(mode, n, Reason.HOLD, f"{_fmt(qps)} fits {n} {mode} replica(s)", st)

    if up:
        since = state.up_since if state.up_since is not None else now
        st = replace(state, up_since=since, down_since=None)
        due = overloaded or now - since >= spec.scale_out_after_s
    else:
        since = state.down_since if state.down_since is not None else now
        st = replace(state, up_since=None, down_since=since)
        due = now - since >= spec.scale_in_after_s
    wants = f"{target[1]} {target[0]} replica(s)"
    if not due:
        return answer(mode, n, Reason.WAITING, f"{_fmt(qps)} asks for {wants} since {since:g}", st, target)
    switching = target[0] is not mode
    last = state.last_switch_s
    if switching and not overloaded and last is not None and now - last < spec.switch_cooldown_s:
        msg = f"{_fmt(qps)} asks for {wants}; last switch at {last:g}"
        return answer(mode, n, Reason.COOLDOWN, msg, st, target)
    new = InferenceState(
        target[0],
        target[1],
        now if switching else state.last_switch_s,
        state.switches + (1 if switching else 0),
    )
    verb = "overload: " if overloaded else ""
    return answer(target[0], target[1], why, f"{verb}{_fmt(qps)}: {n} {mode} -> {wants}", new)


def _within(
    spec: InferenceSpec, mode: Mode, n: int, qps: float, thr: float, band: float
) -> tuple[tuple[Mode, int], bool, Reason]:
    """Scaling inside one mode: out to the threshold's size, in only below the band's."""
    grow = _sized(spec, mode, qps, thr)
    if grow > n:
        return (mode, grow), True, Reason.SCALE_OUT
    shrink = _sized(spec, mode, qps, thr * band)
    if shrink < n:
        return (mode, shrink), False, Reason.SCALE_IN
    return (mode, n), False, Reason.HOLD


__all__ = [
    "CPU_PER_CORE_QPS",
    "MAX_BATCH",
    "SODA_TABLE_III",
    "CpuCompute",
    "Decision",
    "GpuCompute",
    "InferenceSpec",
    "InferenceState",
    "Mode",
    "Reason",
    "Serving",
    "cpu_rate",
    "decide",
    "forecast_horizon_s",
    "needed_replicas",
    "resolve_spec",
    "serving_batch",
    "window_s",
]
