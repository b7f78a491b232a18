"""Measurement sources: GPU utilisation per pod and node memory bandwidth.

GPU utilisation: NVML (``nvidia-ml-py``, optional) when a GPU is present, else a declared source
— a JSON file or an HTTP endpoint on loopback returning ``{"<namespace>/<pod>": percent, ...}``
(a ``"*"`` key applies to every pod). Memory bandwidth: resctrl MBM (``mbm_total_bytes`` counters)
where present, else a declared JSON file/endpoint ``{"bytes_per_second": x, "peak_bytes_per_second": y}``.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from qosmos.extender.core.errors import InvalidInput

# --------------------------------------------------------------------------- declared JSON documents


def _load_json(spec: str, field_name: str) -> Any:
    """Read a declared source: ``http://127.0.0.1...`` or a file path (``file:`` prefix optional)."""
    try:
        if spec.startswith(("http://", "https://")):
            with urllib.request.urlopen(spec, timeout=2) as r:
                return json.loads(r.read())
        path = Path(spec.removeprefix("file:"))
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as e:
        raise InvalidInput(field_name, spec, f"not JSON (line {e.lineno}): {e.msg}") from None
    except OSError:
        return None  # endpoint down: no measurement this round


class GpuSource(Protocol):
    def utilisation(self, pod_key: str, pids: Sequence[int]) -> float | None: ...


@dataclass
class DeclaredGpuSource:
    """A file or endpoint giving each pod's GPU utilisation in percent."""

    spec: str

    def utilisation(self, pod_key: str, pids: Sequence[int] = ()) -> float | None:
        doc = _load_json(self.spec, "gpu utilisation source")
        if doc is None:
            return None
        if not isinstance(doc, dict):
            raise InvalidInput("gpu utilisation source", self.spec, "expected an object of pod -> percent")
        v = doc.get(pod_key, doc.get("*"))
        if v is None:
            return None
        try:
            return float(v)
        except (TypeError, ValueError):
            raise InvalidInput(f"gpu utilisation source {self.spec} field {pod_key}", v, "not a number") from None


@dataclass
class NvmlGpuSource:
    """NVML: mean utilisation of the GPUs running any of the pod's processes.

    When NVML shows processes but none of the pod's (e.g. before the job starts CUDA), the GPUs are
    other pods': no measurement. When it shows no process anywhere (no visibility into processes,
    e.g. without the host PID namespace), the mean of every GPU is the best available."""

    _nvml: Any = field(default=None, repr=False)

    @staticmethod
    def available() -> bool:
        try:
            import pynvml

            pynvml.nvmlInit()
            return int(pynvml.nvmlDeviceGetCount()) > 0
        except Exception:
            return False

    def utilisation(self, pod_key: str, pids: Sequence[int] = ()) -> float | None:
        import pynvml

        if self._nvml is None:
            pynvml.nvmlInit()
            self._nvml = pynvml
        n = pynvml.nvmlDeviceGetCount()
        utils, mine = [], []
        want = set(pids)
        seen_any = False
        for i in range(n):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            u = float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
            utils.append(u)
            try:
                procs = {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}
            except pynvml.NVMLError:
                procs = set()
            seen_any = seen_any or bool(procs)
            if want & procs:
                mine.append(u)
        if not mine and seen_any:
            return None  # only other pods' GPUs are busy: not this pod's utilisation
        vals = mine or utils
        return sum(vals) / len(vals) if vals else None


def make_gpu_source(spec: str) -> GpuSource | None:
    """``nvml``, ``auto`` (NVML when a GPU answers, else none), a file path or an http:// URL; "" for none."""
    if spec in ("", "none"):
        return None
    if spec == "nvml":
        return NvmlGpuSource()
    if spec == "auto":
        return NvmlGpuSource() if NvmlGpuSource.available() else None
    return DeclaredGpuSource(spec)


def describe_gpu_source(src: GpuSource | None, spec: str) -> str:
    """For the agent's start line: which source feeds the §V-B search (and what happens without one)."""
    if isinstance(src, NvmlGpuSource):
        return "from NVML"
    if isinstance(src, DeclaredGpuSource):
        return f"from {src.spec}"
    if spec == "auto":
        return "none (no GPU answers NVML; give --gpu-util FILE|URL): training pods keep their start cores"
    return "none: training pods keep their start cores"


# --------------------------------------------------------------------------- memory bandwidth


class BandwidthSource(Protocol):
    def sample(self) -> tuple[float | None, float | None]:
        """(bytes/s used on the node, peak bytes/s); None where unknown."""
        ...


@dataclass
class DeclaredBandwidthSource:
    spec: str
    peak: float | None = None

    def sample(self) -> tuple[float | None, float | None]:
        doc = _load_json(self.spec, "memory bandwidth source")
        if doc is None:
            return None, self.peak
        if not isinstance(doc, dict) or "bytes_per_second" not in doc:
            raise InvalidInput(
                "memory bandwidth source", self.spec, "expected {bytes_per_second, peak_bytes_per_second}"
            )
        peak = doc.get("peak_bytes_per_second", self.peak)
        return float(doc["bytes_per_second"]), (float(peak) if peak else None)


@dataclass
class ResctrlMbmSource:
    """Node total from resctrl MBM: the sum of every domain's ``mbm_total_bytes``, as a rate between samples."""

    root: Path = Path("/sys/fs/resctrl")
    peak: float | None = None
    clock: Callable[[], float] | None = None
    _last: tuple[float, int] | None = None

    def total_bytes(self) -> int:
        total = 0
        for f in sorted((self.root / "mon_data").glob("mon_L3_*/mbm_total_bytes")):
            text = f.read_text().strip()
            if text.isdigit():  # "Unavailable" on a domain that cannot count
                total += int(text)
        for group in self.root.iterdir():  # counters of other control groups (ours included)
            if (
                group.is_dir()
                and (group / "mon_data").is_dir()
                and group.name not in ("info", "mon_groups", "mon_data")
            ):
                for f in sorted((group / "mon_data").glob("mon_L3_*/mbm_total_bytes")):
                    text = f.read_text().strip()
                    if text.isdigit():
                        total += int(text)
        return total

    def sample(self) -> tuple[float | None, float | None]:
        import time

        now = (self.clock or time.monotonic)()
        total = self.total_bytes()
        last, self._last = self._last, (now, total)
        if last is None or now <= last[0] or total < last[1]:
            return None, self.peak
        return (total - last[1]) / (now - last[0]), self.peak
