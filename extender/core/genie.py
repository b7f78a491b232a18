"""GENIE's prediction and cost model and its QoS-aware placement choice (seed 001 §5).

Every formula lives here once, with its equation number. Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from qosmos.extender.core import throughput
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Job, JobKind, Platform, QoSClass, Shape

DEFAULT_THETA = 0.4  # seed 001 Fig. 10
# Assumptions until multi-GPU runs are profiled (seed 001 §5.1.5 fits γ, λ from N + G runs):
DEFAULT_GAMMA = 0.3  # 2 GPUs on 2 nodes deliver 1.7 GPUs of rate (85% scaling over InfiniBand)
DEFAULT_LAMBDA = 0.3  # an intra-node (PCIe/NVLink) peer costs 30% of an inter-node peer
DEFAULT_NU = 10.0  # seconds of start-up (framework init, data loader warm-up)


@dataclass(frozen=True, slots=True)
class ThroughputProfile:
    """One model type's single-GPU rate sPR(b') in a chosen ``form``, Comm's γ, λ (Eq. 8), ν (Eq. 4).

    ``form`` (see :mod:`qosmos.extender.core.throughput`):

    - ``quadratic`` (default, the seed's reference): sPR(b') = k0 + k1 b' + k2 b'^2 (Eq. 7);
    - ``affine-time``: iteration time t(b') = time_a + time_c b' seconds, sPR = b' / t;
    - ``interpolated``: piecewise-linear iteration time through ``knots`` ((b', t) pairs);
    - ``launch-floor``: t(b') = max(floor, a + c b'), stored as its ``knots`` (two or three).

    k0..k2 always hold the Eq. 7 fit (the reference every form is compared with); only the
    quadratic form evaluates them. ``heldout_error`` is the form's leave-one-out error in %
    (None when not measured); ``measured_on`` the environment the samples came from.

    ``b_min``/``b_max`` bound the batch sizes a database profile was measured on. For the
    quadratic, Eq. 7 is used inside the range as GENIE does; outside it the quadratic is not
    trusted (:meth:`extrapolated`): below b_min the rate scales linearly down to 0 (a GPU fed
    with fewer samples), above b_max it is held at sPR(b_max) (a saturated GPU). The
    iteration-time forms follow their end slopes outside it (:func:`throughput.time_at`).
    A quadratic without a measured range (``b_max`` infinite, e.g. explicit ``--coeffs``)
    is Eq. 7 literally wherever it is positive, and 0 (no progress) where it is not.
    """

    model: str
    k0: float
    k1: float
    k2: float
    gamma: float = DEFAULT_GAMMA
    lam: float = DEFAULT_LAMBDA
    nu: float = DEFAULT_NU
    b_min: float = 1.0
    b_max: float = math.inf
    source: str = ""
    form: str = throughput.QUADRATIC
    time_a: float = 0.0
    time_c: float = 0.0
    knots: throughput.Knots = ()
    heldout_error: float | None = None
    measured_on: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for name in ("k0", "k1", "k2", "gamma", "lam", "nu", "b_min", "time_a", "time_c"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value):
                raise InvalidInput(name, value, "must be a finite number")
        if self.gamma < 0 or self.lam < 0 or self.nu < 0:
            raise InvalidInput("gamma/lam/nu", (self.gamma, self.lam, self.nu), "must be >= 0")
        if not 0 < self.b_min <= self.b_max:
            raise InvalidInput("b_min", self.b_min, "must satisfy 0 < b_min <= b_max")
        if self.heldout_error is not None and not (math.isfinite(self.heldout_error) and self.heldout_error >= 0):
            raise InvalidInput("heldout_error", self.heldout_error, "must be a finite number >= 0 (%) or None")
        if self.form not in throughput.FORMS:
            raise InvalidInput("form", self.form, f"must be one of {', '.join(throughput.FORMS)}")
        if self.form != throughput.QUADRATIC:
            self._check_time_form()
            return
        coeffs = (self.k0, self.k1, self.k2)
        if not self.measured:
            if not self._positive_somewhere():
                raise InvalidInput("k0,k1,k2", coeffs, "sPR = k0 + k1 b' + k2 b'^2 is never > 0 for b' > 0")
            return
        probes = [self.b_min, self.b_max]
        if self.k2 > 0 and self.b_min < (vertex := -self.k1 / (2 * self.k2)) < self.b_max:
            probes.append(vertex)
        if min(self._quadratic(b) for b in probes) <= 0:
            raise InvalidInput("k0,k1,k2", coeffs, "sPR must be > 0 on [b_min, b_max]")

    def _check_time_form(self) -> None:
        if not self.measured or self.b_min == self.b_max:
            raise InvalidInput("b_min/b_max", (self.b_min, self.b_max), f"form {self.form} needs a measured range")
        if self.form == throughput.AFFINE_TIME:
            if self.time_c < 0:
                raise InvalidInput("time_c", self.time_c, "iteration time must not fall as the batch grows")
            if self.time_a + self.time_c * self.b_min <= 0:
                raise InvalidInput("time_a,time_c", (self.time_a, self.time_c), "t(b_min) must be > 0")
            return
        throughput.check_knots(self.knots)
        if (self.knots[0][0], self.knots[-1][0]) != (self.b_min, self.b_max):
            raise InvalidInput("knots", self.knots, f"must span the measured range [{self.b_min:g}, {self.b_max:g}]")

    @property
    def measured(self) -> bool:
        """True for a database profile with a measured batch range (finite ``b_max``)."""
        return math.isfinite(self.b_max)

    def _positive_somewhere(self) -> bool:
        if self.k2 > 0 or (self.k2 == 0 and self.k1 > 0):
            return True  # grows without bound
        vertex = -self.k1 / (2 * self.k2) if self.k2 < 0 else 0.0
        return self._quadratic(max(vertex, 0.0)) > 0 or self.k0 > 0

    def _quadratic(self, b: float) -> float:
        return self.k0 + self.k1 * b + self.k2 * b * b

    def iteration_time(self, local_batch: float) -> float:
        """t(b') in seconds of the iteration-time forms (not defined for the quadratic)."""
        if self.form == throughput.AFFINE_TIME:
            return throughput.time_at(
                throughput.affine_knots(self.time_a, self.time_c, self.b_min, self.b_max), local_batch
            )
        if self.form in throughput.KNOTTED:
            return throughput.time_at(self.knots, local_batch)
        raise InvalidInput("form", self.form, "has no iteration time; it models the rate (Eq. 7)")

    def spr(self, local_batch: float) -> float:
        """sPR(b') for a local batch b', samples per second on one GPU, in the profile's form.

        Every rate in the core (PR of Eq. 5, CER, inference's C(b), the simulator) comes from here,
        so Eq. 8's communication penalty composes with any form.
        """
        if local_batch <= 0:
            raise InvalidInput("local_batch", local_batch, "must be > 0")
        if self.form != throughput.QUADRATIC:
            return local_batch / self.iteration_time(local_batch)
        if not self.measured:
            # Eq. 7 literally; where it is not positive the GPU makes no progress.
            return max(self._quadratic(local_batch), 0.0)
        if local_batch < self.b_min:
            return self._quadratic(self.b_min) * local_batch / self.b_min
        # Saturation guard: beyond the measured range the rate is held at sPR(b_max).
        return self._quadratic(min(local_batch, self.b_max))

    @property
    def gpu_model(self) -> str:
        """The GPU model the samples were measured on ("" when not recorded, or measured on a CPU)."""
        device = dict(self.measured_on).get("device", "")
        return "" if device.lower().startswith("cpu") else device

    def extrapolated(self, local_batch: float) -> bool:
        """True when sPR(b') is not read off the measured batches: b' outside [b_min, b_max]."""
        return self.measured and not self.b_min <= local_batch <= self.b_max


@dataclass(frozen=True, slots=True)
class Task:
    """GENIE task t = <type, b, iters> (Eq. 2) plus its calculation type and QoS class."""

    model: str
    batch: int
    iters: int
    kind: JobKind = JobKind.TRAINING
    qos: QoSClass = QoSClass.NORMAL
    submit: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.batch, int) or self.batch <= 0:
            raise InvalidInput("batch", self.batch, "must be an integer > 0")
        if not isinstance(self.iters, int) or self.iters <= 0:
            raise InvalidInput("iters", self.iters, "must be an integer > 0")
        object.__setattr__(self, "kind", JobKind.parse(self.kind))
        object.__setattr__(self, "qos", QoSClass.parse(self.qos))
        if self.kind is JobKind.CPU:
            raise InvalidInput("kind", self.kind.value, "GENIE models GPU tasks: training or inference")
        if not math.isfinite(self.submit):
            raise InvalidInput("submit", self.submit, "must be finite")

    @classmethod
    def from_job(cls, job: Job) -> Task:
        return cls(job.model, job.batch, job.iters, job.kind, job.qos, job.submit_time)


def comm(shape: Shape, gamma: float, lam: float, kind: JobKind = JobKind.TRAINING) -> float:
    """Comm(s), the synchronous communication penalty in GPUs (Eq. 8).

    Eq. 8's second case is written for d_node, d_gpn > 1; its average-path-length argument
    holds unchanged for d_node = 1 < d_gpn (λ(d_gpn-1)γ/(d_gpn-1) = λγ) and for
    d_gpn = 1 < d_node ((d_node-1)γ/(d_node-1) = γ), so one expression serves every
    placement except the single GPU. Inference has no synchronisation (§5.1.4).
    """
    n = shape.gpus
    if n == 1 or kind is JobKind.INFERENCE:
        return 0.0
    return ((shape.d_node - 1) * shape.d_gpn + lam * (shape.d_gpn - 1)) * gamma / (n - 1)


def processing_rate(task: Task, shape: Shape, profile: ThroughputProfile) -> float:
    """PR(t, s) = (d_node d_gpn - Comm(s)) sPR(b / (d_node d_gpn)) (Eq. 5-7)."""
    n = shape.gpus
    effective = n - comm(shape, profile.gamma, profile.lam, task.kind)
    return max(effective, 0.0) * profile.spr(task.batch / n)


def latency(task: Task, shape: Shape, profile: ThroughputProfile) -> float:
    """Lat(t, s) = b iters / PR(t, s) + ν (Eq. 4); infinite when Comm eats every GPU."""
    pr = processing_rate(task, shape, profile)
    if pr <= 0:
        return math.inf
    return task.batch * task.iters / pr + profile.nu


def run_shape(gpus_by_node: Sequence[int]) -> Shape:
    """The ⟨d_node, d_gpn⟩ a gang of these GPUs per node runs at: as many nodes, its widest node's GPUs."""
    return Shape(len(gpus_by_node), max(max(gpus_by_node), 1))


def work_left_after(work_left: float, ran: float, lat: float) -> float:
    """The fraction of a task's work left after it ran ``ran`` seconds at a shape where the whole task
    takes ``lat`` (Eq. 4): a task stopped and resumed, on that shape or another, runs the rest of it."""
    if not 0 < lat < math.inf:
        return work_left
    return min(max(work_left - ran / lat, 0.0), 1.0)


def cost(shape: Shape, platform: Platform, theta: float = DEFAULT_THETA) -> float:
    """Cost(s) = d_node d_gpn / (N G) + θ d_node / N (Eq. 10)."""
    if not math.isfinite(theta) or theta < 0:
        raise InvalidInput("theta", theta, "must be a finite number >= 0")
    return shape.gpus / platform.gpus + theta * shape.d_node / platform.nodes


def cer(
    task: Task, shape: Shape, profile: ThroughputProfile, platform: Platform, theta: float = DEFAULT_THETA
) -> float:
    """CER(t, s) = PR(t, s) / Cost(s) (Eq. 11)."""
    return processing_rate(task, shape, profile) / cost(shape, platform, theta)


def ect(task: Task, profile: ThroughputProfile) -> float:
    """Expected completion time e, relative to submission (Eq. 9)."""
    if task.qos is QoSClass.URGENT:
        return 0.0
    base = latency(task, Shape(1, 1), profile)
    return base if task.qos is QoSClass.PRIOR else 2.0 * base


def deadline(task: Task, profile: ThroughputProfile) -> float:
    """Absolute deadline submit + e, the right-hand side of Eq. 12."""
    return task.submit + ect(task, profile)


def is_feasible(lat: float, now: float, task_deadline: float) -> bool:
    """A placement guarantees QoS when l + t_curr <= e (Eq. 12); a placement that never finishes never does."""
    return math.isfinite(lat) and lat + now <= task_deadline


def feasible_until(lat: float, task_deadline: float) -> float:
    """The first instant at which a placement of latency ``lat`` no longer meets the deadline (Eq. 12):
    its waiting allowance is spent (Eq. 13): e - l, moved past it by the rounding of l + t (steps of the
    sum's float spacing: two or three at most). Never for a deadline at infinity."""
    t = task_deadline - lat
    if not math.isfinite(t):
        return math.inf if t > 0 or math.isnan(t) else -math.inf
    step = math.ulp(max(abs(task_deadline), abs(lat), abs(t)))
    while is_feasible(lat, t, task_deadline):
        t += step
    return t


def waiting_allowance(ect: float, lat: float, waited: float) -> float:
    """w = e - (l* + t_curr) (Eq. 13), with e (``ect``) and t_curr (``waited``) counted from the task's
    submission, as (e - l*) - waited: tasks whose e - l* agree and that waited alike tie exactly, on a
    trace's clock and on Unix time alike (SWAF's ties are then the queue's order on both). May be negative."""
    return (ect - lat) - waited


# The most GPUs one placement may use. It bounds Alg. 1's enumeration on any platform: at
# most sum_{g <= G} min(N, floor(MAX / g)) <= MAX (ln G + 0.58) shapes, e.g. 8,300 for G = 32.
MAX_PLACEMENT_GPUS = 2048


def placement_gpu_cap(platform: Platform, batch: int | None = None, max_gpus: int | None = None) -> int:
    """The most GPUs a shape may use: the platform, the caller's cap, b (b' >= 1, Eq. 6), MAX_PLACEMENT_GPUS."""
    cap = min(platform.gpus, MAX_PLACEMENT_GPUS)
    if max_gpus is not None:
        cap = min(cap, max_gpus)
    if batch is not None:
        cap = min(cap, batch)
    return cap


def count_shapes(platform: Platform, batch: int | None = None, max_gpus: int | None = None) -> int:
    """len(enumerate_shapes(...)) without building them."""
    cap = placement_gpu_cap(platform, batch, max_gpus)
    return sum(min(platform.nodes, cap // dg) for dg in range(1, min(platform.gpus_per_node, cap) + 1))


def enumerate_shapes(platform: Platform, batch: int | None = None, max_gpus: int | None = None) -> list[Shape]:
    """All ⟨d_node, d_gpn⟩ within platform limits (Alg. 1 line 3) that its nodes can hold.

    A shape needs at least one sample per GPU (b' >= 1, Eq. 6), at most ``max_gpus`` GPUs
    when the caller caps the search (e.g. to what the VC can ever hold), and at most
    MAX_PLACEMENT_GPUS. Only shapes within the cap are visited, so the work is bounded.
    """
    cap = placement_gpu_cap(platform, batch, max_gpus)
    shapes = (
        Shape(dn, dg)
        for dn in range(1, min(platform.nodes, cap) + 1)
        for dg in range(1, min(platform.gpus_per_node, cap // dn) + 1)
    )
    return [s for s in shapes if platform.holds(s)]  # unlike nodes: only shapes they can hold


CANCEL_EVERY = 1024


@dataclass(frozen=True, slots=True)
class PlacementRow:
    """One placement of a task: PR (Eq. 5), Lat (Eq. 4), Cost (Eq. 10), CER (Eq. 11)."""

    shape: Shape
    pr: float
    lat: float
    cost: float
    cer: float


@dataclass(frozen=True, slots=True)
class GenieDecision:
    """Alg. 1 lines 2-14 for one task: the table, feasibility, the chosen s*, e and w."""

    table: tuple[PlacementRow, ...]
    feasible: tuple[bool, ...]
    chosen: PlacementRow
    ect: float
    deadline: float
    waiting_allowance: float


def placement_table(
    task: Task,
    profile: ThroughputProfile,
    platform: Platform,
    theta: float = DEFAULT_THETA,
    shapes: Sequence[Shape] | None = None,
    cancel: Callable[[], None] | None = None,
) -> tuple[PlacementRow, ...]:
    """Alg. 1 lines 3-7: every placement within the platform with its PR, Lat, Cost, CER.

    Independent of the clock, so callers may cache it per (task, platform, θ). ``cancel``
    is called every CANCEL_EVERY rows; an edge with a deadline raises from it.
    """
    candidates = list(shapes) if shapes is not None else enumerate_shapes(platform, task.batch)
    if not candidates:
        raise InvalidInput("platform", platform, f"no placement fits batch {task.batch} on it")
    rows = []
    for i, s in enumerate(candidates):
        if cancel is not None and i % CANCEL_EVERY == 0:
            cancel()
        if s.d_node > platform.nodes or s.d_gpn > platform.gpus_per_node:
            raise InvalidInput("shape", s, f"larger than the platform {platform.nodes}x{platform.gpus_per_node}")
        rows.append(placement_row(task, s, profile, platform, theta))
    return tuple(rows)


def placement_row(
    task: Task, shape: Shape, profile: ThroughputProfile, platform: Platform, theta: float = DEFAULT_THETA
) -> PlacementRow:
    """One row of Alg. 1's table: PR (Eq. 5), Lat (Eq. 4), Cost (Eq. 10), CER (Eq. 11) of ``shape``.

    Unchecked against the platform: a shape the user fixed gets its estimates even when it is larger
    than the platform (it then never starts, and its wait says why)."""
    pr = processing_rate(task, shape, profile)
    lat = task.batch * task.iters / pr + profile.nu if pr > 0 else math.inf
    c = cost(shape, platform, theta)
    return PlacementRow(shape, pr, lat, c, pr / c)


def by_cer(table: Sequence[PlacementRow]) -> list[PlacementRow]:
    """Highest CER first; ties to fewer GPUs, then fewer nodes (cheaper, less fragmenting)."""
    return sorted(table, key=lambda r: (-r.cer, r.shape.gpus, r.shape.d_node))


def choice_candidates(ranked: Sequence[PlacementRow]) -> tuple[int, ...]:
    """The rows of a CER-ranked table :func:`choose` can pick when one is feasible: those of finite latency
    below every earlier row's (a row behind a faster one meets the deadline only when that one does,
    Eq. 12). Their latencies decrease, so the feasible ones are the last of them."""
    out: list[int] = []
    best = math.inf
    for i, row in enumerate(ranked):
        if row.lat < best:
            out.append(i)
            best = row.lat
    return tuple(out)


def choose(
    ranked: Sequence[PlacementRow], now: float, task_deadline: float, candidates: Sequence[int] | None = None
) -> PlacementRow:
    """Alg. 1 lines 8-13 on a CER-ranked table: best feasible (Eq. 12), else best overall. With the table's
    :func:`choice_candidates`, a binary search over them (l + t rounds monotonically in l), the same row:
    a long queue's tasks are chosen anew at every pass."""
    if candidates is None:
        for row in ranked:
            if is_feasible(row.lat, now, task_deadline):
                return row
        return ranked[0]
    lo, hi = 0, len(candidates)
    while lo < hi:
        mid = (lo + hi) // 2
        if is_feasible(ranked[candidates[mid]].lat, now, task_deadline):
            hi = mid
        else:
            lo = mid + 1
    return ranked[candidates[lo]] if lo < len(candidates) else ranked[0]


def evaluate_placements(
    task: Task,
    profile: ThroughputProfile,
    platform: Platform,
    now: float,
    theta: float = DEFAULT_THETA,
    shapes: Sequence[Shape] | None = None,
    cancel: Callable[[], None] | None = None,
) -> GenieDecision:
    """Alg. 1 lines 2-14 for one task: the placement table, s*, e and w (Eq. 9-13)."""
    if not math.isfinite(now):
        raise InvalidInput("now", now, "must be finite")
    table = placement_table(task, profile, platform, theta, shapes, cancel)
    e = ect(task, profile)
    dl = task.submit + e  # (deadline())
    chosen = choose(by_cer(table), now, dl)
    return GenieDecision(
        table,
        tuple(is_feasible(r.lat, now, dl) for r in table),
        chosen,
        e,
        dl,
        waiting_allowance(e, chosen.lat, now - task.submit),
    )


def swaf_order(allowances: Iterable[float]) -> list[int]:
    """Shortest waiting allowance first (Alg. 1 line 15): a stable ascending sort, as indices."""
    values = list(allowances)
    return sorted(range(len(values)), key=values.__getitem__)


# ---- metrics of §7.1 ---------------------------------------------------------------------


def qos_guaranteed(finish: float, task_deadline: float) -> bool:
    """A task counts towards Q when it completes no later than its ECT (Eq. 14)."""
    return finish <= task_deadline


def normalized_latency(wall: float, single_gpu_latency: float) -> float:
    """L_norm = L_wall / Lat(t, <1,1>) (Eq. 16)."""
    if single_gpu_latency <= 0:
        raise InvalidInput("single_gpu_latency", single_gpu_latency, "must be > 0")
    return wall / single_gpu_latency


# ---- lightweight profiling fits (§5.1.5) ----------------------------------------------------


def fit_spr(batches: Sequence[float], rates: Sequence[float]) -> tuple[float, float, float]:
    """Least-squares k0, k1, k2 of Eq. 7 from B single-GPU runs.

    With fewer than three distinct batch sizes the quadratic is not identifiable and the
    fit drops to linear (k2 = 0), or to a constant with one size.
    """
    b = np.asarray(batches, dtype=float)
    r = np.asarray(rates, dtype=float)
    if b.shape != r.shape or b.size == 0:
        raise InvalidInput("samples", (b.size, r.size), "need as many rates as batch sizes, at least one")
    if np.any(b <= 0) or np.any(r <= 0) or not np.all(np.isfinite(r)):
        raise InvalidInput("samples", "batch/rate", "batch sizes and rates must be > 0 and finite")
    degree = min(2, np.unique(b).size - 1)
    coeffs = np.zeros(3)
    vander = np.vander(b, degree + 1, increasing=True)
    coeffs[: degree + 1] = np.linalg.lstsq(vander, r, rcond=None)[0]
    return float(coeffs[0]), float(coeffs[1]), float(coeffs[2])


def fit_single_gpu_profile(
    model: str,
    batches: Sequence[float],
    rates: Sequence[float],
    *,
    nu: float = DEFAULT_NU,
    source: str = "",
    form: str = throughput.QUADRATIC,
    heldout_error: float | None = None,
    measured_on: tuple[tuple[str, str], ...] = (),
) -> ThroughputProfile:
    """A profile in ``form`` from B single-GPU runs (§5.1.5), trusted on the measured batch range;
    γ, λ keep the documented defaults until multi-GPU runs fit them.

    k_i are always :func:`fit_spr`'s (Eq. 7, the reference); the affine-time form adds
    :func:`throughput.fit_affine_time`'s a, c, the interpolated form
    :func:`throughput.fit_monotone_knots`'s knots, the launch-floor form
    :func:`throughput.fit_launch_floor`'s.
    """
    k0, k1, k2 = fit_spr(batches, rates)
    if form not in throughput.FORMS:
        raise InvalidInput("form", form, f"must be one of {', '.join(throughput.FORMS)}")
    time_a = time_c = 0.0
    knots: throughput.Knots = ()
    if form == throughput.AFFINE_TIME:
        time_a, time_c = throughput.fit_affine_time(batches, rates)
    elif form == throughput.INTERPOLATED:
        knots = throughput.fit_monotone_knots(batches, rates)
    elif form == throughput.LAUNCH_FLOOR:
        knots = throughput.fit_launch_floor(batches, rates)
    return ThroughputProfile(
        model,
        k0,
        k1,
        k2,
        gamma=DEFAULT_GAMMA,
        lam=DEFAULT_LAMBDA,
        nu=nu,
        b_min=float(min(batches)),
        b_max=float(max(batches)),
        source=source,
        form=form,
        time_a=time_a,
        time_c=time_c,
        knots=knots,
        heldout_error=heldout_error,
        measured_on=measured_on,
    )


def heldout_errors(batches: Sequence[float], rates: Sequence[float]) -> dict[str, float | None]:
    """Every form's leave-one-out error (mean abs % error of sPR), None where a fold cannot fit it.

    Each fold is fitted exactly as a stored profile is (:func:`fit_single_gpu_profile`), so a
    held-out end batch is predicted through the same out-of-range guard the scheduler uses.
    """

    def fitter(form: str) -> Callable[[Sequence[float], Sequence[float]], throughput.Predictor]:
        return lambda b, r: fit_single_gpu_profile("fold", b, r, form=form).spr

    return {
        form: throughput.leave_one_out(batches, rates, fitter(form), throughput.MIN_BATCHES[form])
        for form in throughput.FORMS
    }


@dataclass(frozen=True, slots=True)
class FormChoice:
    """The profile in the form with the lowest held-out error, and every form's error (None: not fitted)."""

    profile: ThroughputProfile
    candidates: dict[str, float | None]


def select_single_gpu_profile(
    model: str,
    batches: Sequence[float],
    rates: Sequence[float],
    *,
    nu: float = DEFAULT_NU,
    source: str = "",
    measured_on: tuple[tuple[str, str], ...] = (),
) -> FormChoice:
    """Fit every form and keep the one with the lowest leave-one-out error (ties: the simpler form).

    A form that cannot be fitted on all samples is not a candidate either. With too few batch
    sizes for any held-out error the quadratic of :func:`fit_spr` is kept (degraded to linear
    or constant as there), with ``heldout_error`` None.
    """
    candidates = heldout_errors(batches, rates)
    fitted: dict[str, ThroughputProfile] = {}
    for form, err in candidates.items():
        if err is None:
            continue
        try:
            fitted[form] = fit_single_gpu_profile(
                model, batches, rates, nu=nu, source=source, form=form, heldout_error=err, measured_on=measured_on
            )
        except InvalidInput:
            candidates[form] = None
    chosen = throughput.choose_form(candidates)
    if chosen is None:
        profile = fit_single_gpu_profile(model, batches, rates, nu=nu, source=source, measured_on=measured_on)
        return FormChoice(profile, candidates)
    return FormChoice(fitted[chosen], candidates)


def fit_comm(
    shapes: Sequence[Shape], batch: int, rates: Sequence[float], profile: ThroughputProfile
) -> tuple[float, float]:
    """γ and λ of Eq. 8 from N + G multi-GPU runs at one global batch.

    Eq. 5 gives, per run, Comm_j = n_j - PR_j / sPR(b / n_j); Eq. 8 is linear in
    (γ, γλ): Comm_j (n_j - 1) = γ (d_node-1) d_gpn + γλ (d_gpn - 1). Least squares on
    the multi-GPU runs returns γ and λ = (γλ)/γ.
    """
    rows, rhs = [], []
    for s, pr in zip(shapes, rates, strict=True):
        n = s.gpus
        if n == 1:
            continue
        observed = n - pr / profile.spr(batch / n)
        rows.append([(s.d_node - 1) * s.d_gpn, s.d_gpn - 1])
        rhs.append(observed * (n - 1))
    if len(rows) < 2:
        raise InvalidInput("shapes", len(rows), "need at least two multi-GPU runs to fit γ and λ")
    a, c = np.linalg.lstsq(np.asarray(rows, float), np.asarray(rhs, float), rcond=None)[0]
    gamma = float(a)
    if gamma <= 0:
        # No measurable cross-node penalty: fall back to γ from the intra-node term.
        return max(float(c), 0.0), 1.0
    return gamma, max(float(c) / gamma, 0.0)
