"""Inference profiles: a model's measured compute time C(b) per device (issue 23 §1, §3-4).

SODA's placer (seed 002 §V-D1) sizes everything from C(b), the time one replica computes a batch of
b queries: the largest batch within T/2, the GPU switching batch bs_gpu and each replica's maximum
load B / C(B). An inference profile holds C(b) as measured — forward passes under
``torch.inference_mode`` (``qosmos profile run --inference``) — on a GPU of a named model at several
batch sizes, and on a number of CPU cores at several batch sizes. Pure: built from data, no files.

Between the measured points (monotone piecewise-linear interpolation):
- C(0) = 0 is taken as a point, so below the smallest measured batch C(b) falls linearly to zero
  (a GPU's fixed launch cost is then under-counted, but only for batches far below bs_gpu; on CPU
  the time is about linear in the batch);
- the measured times are made non-decreasing in b (a running maximum) before interpolating: a larger
  batch never computes faster, whatever one noisy measurement says;
- above the largest measured batch C(b) grows with the last segment's slope (with one point: the
  line through the origin).

CPU core counts: the curve of the nearest measured core count c (ties: the larger), scaled linearly
in the cores, C_N(b) = C_c(b) × c / N — the same linear assumption the seed-derived rates make
(seed 002 Fig. 9 shows the largest batch growing with the cores). The profile says so when it scales.

GPU models: the node's own GPU model first; else the nearest (:mod:`qosmos.extender.core.gpus`).
Every lookup says which profile it used and how it was chosen.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.gpus import GPU_GENERATIONS, distance, generation, gpu_key, same_model


def model_key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


class Device(StrEnum):
    GPU = "gpu"
    CPU = "cpu"

    @classmethod
    def parse(cls, value: str, field_name: str = "device") -> Device:
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise InvalidInput(field_name, value, "expected gpu or cpu") from None


@dataclass(frozen=True, slots=True)
class ComputeCurve:
    """Measured C(b) of one model on one device: a GPU of ``gpu_model``, or ``cores`` CPU cores (of a
    machine whose GPU model is ``gpu_model``, '' when unknown).

    ``meta``: what the measurement was (source, measured date, precision, framework version ...),
    shown wherever a threshold derived from it is.
    """

    model: str
    device: Device
    gpu_model: str
    cores: int
    batches: tuple[int, ...]
    seconds: tuple[float, ...]
    meta: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "device", Device.parse(self.device))
        if not self.model.strip():
            raise InvalidInput("model", self.model, "must be a model name")
        if self.device is Device.GPU and not self.gpu_model.strip():
            raise InvalidInput("gpu_model", self.gpu_model, "a GPU curve needs the GPU model it was measured on")
        if self.device is Device.CPU and (isinstance(self.cores, bool) or self.cores < 1):
            raise InvalidInput("cores", self.cores, "a CPU curve needs the cores it was measured on (>= 1)")
        if not self.batches or len(self.batches) != len(self.seconds):
            raise InvalidInput("points", len(self.batches), "need one compute time per batch, at least one")
        if any(b < 1 for b in self.batches) or len(set(self.batches)) != len(self.batches):
            raise InvalidInput("batch", self.batches, "batches must be distinct integers >= 1")
        if not all(math.isfinite(s) and s > 0 for s in self.seconds):
            raise InvalidInput("compute_s", self.seconds, "compute times must be finite seconds > 0")
        order = sorted(range(len(self.batches)), key=lambda i: self.batches[i])
        object.__setattr__(self, "batches", tuple(int(self.batches[i]) for i in order))
        object.__setattr__(self, "seconds", tuple(float(self.seconds[i]) for i in order))
        object.__setattr__(self, "meta", dict(self.meta))

    @property
    def where(self) -> str:
        """The device in words: ``H200`` or ``16 cores of a H200 node``."""
        if self.device is Device.GPU:
            return self.gpu_model
        return f"{self.cores} cores" + (f" of a {self.gpu_model} node" if self.gpu_model else "")

    @property
    def label(self) -> str:
        """``profile H200 (measured 2026-11, fp32, PyTorch 2.11)``: where a threshold came from."""
        bits = [self.meta.get(k, "") for k in ("measured", "precision")]
        if self.meta.get("torch"):
            bits.append(f"PyTorch {self.meta['torch']}")
        said = ", ".join(b for b in bits if b)
        if said and self.meta.get("measured"):
            said = "measured " + said
        return f"profile {self.where}" + (f" ({said})" if said else "")


@dataclass(frozen=True, slots=True)
class MeasuredCompute:
    """C(b) from a :class:`ComputeCurve` (the module's interpolation), times ``scale``
    (cores measured / cores served, or an override's rescaling)."""

    curve: ComputeCurve
    scale: float = 1.0

    def __post_init__(self) -> None:
        check_scale(self.scale)

    def seconds(self, batch: float) -> float:
        check_batch(batch)
        return self.scale * interpolate(self.curve.batches, self.curve.seconds, float(batch))


def check_scale(scale: float) -> None:
    """A compute model's scale factor: finite and positive (every C(b) model checks it the same way)."""
    if not (math.isfinite(scale) and scale > 0):
        raise InvalidInput("scale", scale, "must be a finite number > 0")


def check_batch(batch: float) -> None:
    if not batch > 0:
        raise InvalidInput("batch", batch, "must be > 0")


def interpolate(batches: tuple[int, ...], seconds: tuple[float, ...], b: float) -> float:
    """Monotone piecewise-linear C(b) through (0, 0) and the points (module notes)."""
    xs = [0.0, *map(float, batches)]
    ys = [0.0]
    for s in seconds:
        ys.append(max(ys[-1], s))  # never faster for a larger batch
    for i in range(1, len(xs)):
        if b <= xs[i]:
            x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
            return y0 + (y1 - y0) * (b - x0) / (x1 - x0)
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return ys[-1] + slope * (b - xs[-1])


@dataclass(frozen=True, slots=True)
class CurveLookup:
    """A curve found for a request, and how: ``own`` (the GPU model or core count asked for),
    ``nearest`` (another, see ``how``), ``any`` (nothing asked for)."""

    curve: ComputeCurve
    match: str
    how: str
    scale: float = 1.0  # the CPU core scaling C_c × c / N

    @property
    def compute(self) -> MeasuredCompute:
        return MeasuredCompute(self.curve, self.scale)

    @property
    def source(self) -> str:
        return f"{self.curve.label}{'' if self.match == 'own' else '; ' + self.how}"


class InferenceProfiles:
    """Compute curves by model, device, GPU model and cores. Pure: built from data, reads no files."""

    def __init__(self, curves: Iterable[ComputeCurve] = ()) -> None:
        self._curves: dict[tuple[str, Device, str, int], ComputeCurve] = {}
        for c in curves:
            self.add(c)

    @classmethod
    def builtin(cls) -> InferenceProfiles:
        """The GPU-measured curves shipped with the package (hack/gpu/run.sh)."""
        from qosmos.extender.core.profiles_measured import MEASURED_INFERENCE_CURVES  # imports this module

        return cls(MEASURED_INFERENCE_CURVES)

    @staticmethod
    def _id(c: ComputeCurve) -> tuple[str, Device, str, int]:
        return (model_key(c.model), c.device, gpu_key(c.gpu_model), c.cores if c.device is Device.CPU else 0)

    def add(self, curve: ComputeCurve) -> None:
        """Add or replace (same model, device, GPU model and cores) a curve."""
        self._curves[self._id(curve)] = curve

    def curves(self, model: str | None = None) -> list[ComputeCurve]:
        want = None if model is None else model_key(model)
        return [c for k, c in sorted(self._curves.items()) if want is None or k[0] == want]

    def __len__(self) -> int:
        return len(self._curves)

    def gpu(self, model: str, gpu_model: str | None = None) -> CurveLookup | None:
        """The GPU curve of ``model`` on ``gpu_model`` (own first, else the nearest), None without one."""
        found = [c for c in self.curves(model) if c.device is Device.GPU]
        if not found:
            return None
        if not gpu_model:
            best = sorted(found, key=lambda c: generation(gpu_key(c.gpu_model)), reverse=True)[0]
            return CurveLookup(best, "any", f"no GPU model given: the {best.gpu_model} profile (the newest measured)")
        want = gpu_key(gpu_model)
        best = min(found, key=lambda c: distance(want, gpu_key(c.gpu_model), c.gpu_model))
        if same_model(want, gpu_key(best.gpu_model)):
            return CurveLookup(best, "own", f"the {gpu_model} profile")
        return CurveLookup(best, "nearest", f"no {gpu_model} profile: the nearest GPU model's, {best.gpu_model}")

    def cpu(self, model: str, cores: int, gpu_model: str | None = None) -> CurveLookup | None:
        """The CPU curve of ``model`` for ``cores`` cores: the nearest measured core count (ties: the
        larger), preferring curves measured on a node of ``gpu_model``; scaled linearly in the cores."""
        if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
            raise InvalidInput("cores", cores, "must be an integer >= 1")
        found = [c for c in self.curves(model) if c.device is Device.CPU]
        if not found:
            return None
        want = gpu_key(gpu_model) if gpu_model else None
        same = [c for c in found if want is not None and same_model(want, gpu_key(c.gpu_model))]
        pool = same or found
        best = min(pool, key=lambda c: (abs(c.cores - cores), -c.cores, gpu_key(c.gpu_model)))
        notes = []
        if want is not None and not same:
            notes.append(f"no CPU profile on a {gpu_model} node: {best.where}'s")
        if best.cores != cores:
            notes.append(f"scaled linearly from {best.cores} to {cores} cores")
        match = "own" if not notes else "nearest"
        return CurveLookup(best, match, "; ".join(notes) or f"{cores} cores", best.cores / cores)


__all__ = [
    "GPU_GENERATIONS",
    "ComputeCurve",
    "CurveLookup",
    "Device",
    "InferenceProfiles",
    "MeasuredCompute",
    "gpu_key",
    "interpolate",
    "model_key",
]
