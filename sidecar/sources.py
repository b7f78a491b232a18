"""Measurement sources: GPU utilisation per pod and node memory bandwidth.

GPU utilisation: NVML (``nvidia-ml-py``, optional) when a GPU is present, else a declared source
— a JSON file or an HTTP endpoint on loopback returning ``{"<namespace>/<pod>": percent, ...}``
(a ``"*"`` key applies to every pod). Memory bandwidth: resctrl MBM (``mbm_total_bytes`` counters)
where present, else a declared JSON file/endpoint ``{"bytes_per_second": x, "peak_bytes_per_second": y}``.
"""

from __future__ import annotations

import json
import math
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from qosmos.extender.core.errors import InvalidInput
from qosmos.sidecar.cgroups import parse_cpuset
from qosmos.sidecar.strategies import CpuManagerState

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
        return None  # not written yet: no measurement, nothing wrong
    except json.JSONDecodeError as e:
        raise InvalidInput(field_name, spec, f"not JSON (line {e.lineno}): {e.msg}") from None
    except UnicodeDecodeError:
        raise InvalidInput(field_name, spec, "not UTF-8 text") from None
    # OSError (endpoint down, refused, timed out) propagates: the agent counts it as "unreachable"
    # and has no measurement this round (NodeAgent._measure)


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
    """NVML: mean utilisation of the pod's GPUs.

    With ``devices_of`` (the kubelet's PodResources API, :class:`~qosmos.sidecar.podresources.PodGpus`)
    answering, the pod's GPUs are the device IDs the kubelet gave it, opened by UUID (the NVIDIA device
    plugin's IDs; a plain number is an index, ``<uuid>::<n>`` a time-sliced share of that GPU) and no
    other GPU is read; a pod the kubelet gave no GPU has no measurement. Where it answers None (not
    served), the fallback: the GPUs running any of the pod's processes. When NVML shows processes but
    none of the pod's (e.g. before the job starts CUDA), the GPUs are other pods': no measurement. When it
    shows no process anywhere (no visibility into processes, e.g. without the host PID namespace), the
    mean of every GPU is the best available."""

    devices_of: Callable[[str], Sequence[str] | None] | None = None
    _nvml: Any = field(default=None, repr=False)

    @staticmethod
    def available() -> bool:
        try:
            import pynvml

            pynvml.nvmlInit()
            return int(pynvml.nvmlDeviceGetCount()) > 0
        except Exception:
            return False

    def _init(self) -> Any:
        import pynvml

        if self._nvml is None:
            pynvml.nvmlInit()
            self._nvml = pynvml
        return pynvml

    def utilisation(self, pod_key: str, pids: Sequence[int] = ()) -> float | None:
        ids = self.devices_of(pod_key) if self.devices_of is not None else None
        if ids is not None:
            return self._by_device(list(ids))
        return self._by_process(pids)

    def _by_device(self, ids: list[str]) -> float | None:
        """Mean utilisation of exactly these GPUs (the kubelet's device IDs); none: no measurement."""
        if not ids:
            return None
        pynvml = self._init()
        utils: list[float] = []
        failed: Exception | None = None
        for dev in dict.fromkeys(i.split("::", 1)[0] for i in ids):  # time-sliced shares of one GPU: once
            try:
                h = (
                    pynvml.nvmlDeviceGetHandleByIndex(int(dev))
                    if dev.isdigit()
                    else pynvml.nvmlDeviceGetHandleByUUID(dev)
                )
                utils.append(float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu))
            except pynvml.NVMLError as e:  # not visible to this container, MIG (NotSupported), lost
                failed = failed or e
        if not utils and failed is not None:
            raise failed  # counted as source gpu, reason nvml
        return sum(utils) / len(utils) if utils else None

    def _by_process(self, pids: Sequence[int]) -> float | None:
        pynvml = self._init()
        n = pynvml.nvmlDeviceGetCount()
        utils, mine = [], []
        want = set(pids)
        seen_any = False
        failed: Exception | None = None
        for i in range(n):
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                # a MIG-enabled GPU answers NotSupported, a lost one GpuIsLost: that GPU gives no number
                u = float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
            except pynvml.NVMLError as e:
                failed = failed or e
                continue
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
        if not vals and failed is not None:
            raise failed  # no GPU answered: the agent counts it (source nvml) and measures nothing
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
        return ("none (no GPU answers NVML: none visible here, e.g. NVIDIA_VISIBLE_DEVICES unset; or give "
                "--gpu-util FILE|URL): training pods keep their start cores")  # fmt: skip
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
        out: list[float | None] = []
        for name, v in (("bytes_per_second", doc["bytes_per_second"]), ("peak_bytes_per_second", peak)):
            try:
                x = None if v is None else float(v)
            except (TypeError, ValueError):
                raise InvalidInput(f"memory bandwidth source {self.spec} field {name}", v, "not a number") from None
            if x is not None and (not math.isfinite(x) or x < 0):
                raise InvalidInput(f"memory bandwidth source {self.spec} field {name}", v, "must be finite and >= 0")
            out.append(x)
        return out[0], (out[1] or None)


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


# --------------------------------------------------------------------------- the kubelet's CPU manager


def read_cpu_manager_state(path: Path | None) -> CpuManagerState:
    """The kubelet's ``cpu_manager_state`` checkpoint: ``{"policyName", "defaultCpuSet", "entries":
    {podUID: {container: cpuset}}}``. No file (or no path): the ``none`` policy, nothing exclusive."""
    if path is None or not path.is_file():
        return CpuManagerState()
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise InvalidInput(f"cpu_manager_state {path} line {e.lineno}", "", e.msg) from None
    if not isinstance(doc, dict):
        raise InvalidInput(f"cpu_manager_state {path}", type(doc).__name__, "expected an object")
    policy = str(doc.get("policyName", "none"))
    entries = doc.get("entries") or {}
    if not isinstance(entries, dict):
        raise InvalidInput(f"cpu_manager_state {path} field entries", type(entries).__name__, "expected an object")
    exclusive: dict[str, frozenset[int]] = {}
    if policy == "static":
        for uid, containers in entries.items():
            if not isinstance(containers, dict):
                raise InvalidInput(f"cpu_manager_state {path} field entries.{uid}", containers, "expected an object")
            cpus: set[int] = set()
            for cpuset in containers.values():
                cpus.update(parse_cpuset(str(cpuset)))
            if cpus:
                exclusive[str(uid)] = frozenset(cpus)
    default = parse_cpuset(str(doc.get("defaultCpuSet", "")))
    return CpuManagerState(policy, default, exclusive)
