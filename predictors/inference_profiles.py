"""Inference profiles on disk (issue 23 §1, §3): measured compute time C(b) per model and device.

Samples CSV (one measurement a row; header required; extra metadata columns optional):

    model,device,gpu_model,cores,batch,compute_s,torch,measured,precision
    ResNet50,gpu,H200,,20,0.0038,2.11,2026-11,fp32      # one GPU of the model gpu_model
    ResNet50,cpu,H200,16,8,0.112,2.11,2026-11,fp32      # 16 CPU cores of an H200 node

``compute_s`` is the median time of one forward pass of a batch of ``batch`` (seconds). ``cores``
is required on CPU rows and ignored on GPU rows; ``gpu_model`` is required on GPU rows (on CPU
rows, the node's GPU model, may be empty). Optional columns: ``torch``, ``measured`` (a date),
``precision``, ``source``, ``host``; one curve takes them from its first row.

The model database file (``predictors.profiler``) keeps them under the key ``inference_profiles``,
beside the throughput ``profiles`` (which this module leaves as they are):
``{"profiles": [...], "inference_profiles": [{model, device, gpu_model, cores, points: [[batch,
compute_s], ...], meta: {...}}, ...]}``. :func:`load_inference_profiles` overlays the file's on the
built-in ones (:data:`~qosmos.extender.core.profiles_measured.MEASURED_INFERENCE_CURVES`).

:func:`measure_inference_torch` measures them (PyTorch imported lazily; ``qosmos profile run
--inference``): forward passes under ``torch.inference_mode`` at each batch size on the GPU, and at
each core count on the CPU (``torch.set_num_threads``); warm-up passes, then the median of timed
windows.
"""

from __future__ import annotations

import csv
import json
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.inference_profiles import ComputeCurve, Device, InferenceProfiles

SAMPLE_COLUMNS = ("model", "device", "gpu_model", "cores", "batch", "compute_s")
META_COLUMNS = ("torch", "cuda", "measured", "precision", "source", "host")
DB_KEY = "inference_profiles"


@dataclass(frozen=True, slots=True)
class InferenceSample:
    """One measured C(b): ``model`` on ``device`` (a GPU of ``gpu_model``, or ``cores`` CPU cores)."""

    model: str
    device: Device
    gpu_model: str
    cores: int
    batch: int
    compute_s: float
    meta: dict[str, str] = field(default_factory=dict, compare=False)


def read_inference_samples(path: Path) -> list[InferenceSample]:
    """Samples CSV -> samples; bad input names file, line and field (the shared readers)."""
    from qosmos.predictors.readers import CsvRows

    rows = CsvRows(Path(path), SAMPLE_COLUMNS, what="inference samples")
    out: list[InferenceSample] = []
    for line, row in rows:
        model = rows.text(row, "model")
        if not model:
            raise rows.err(line, "model", "", "missing model name")
        raw_device = rows.text(row, "device")
        try:
            device = Device.parse(raw_device)
        except InvalidInput:
            raise rows.err(line, "device", raw_device, "expected gpu or cpu") from None
        gpu_model = rows.text(row, "gpu_model")
        if device is Device.GPU and not gpu_model:
            raise rows.err(line, "gpu_model", "", "a GPU row needs the GPU model it was measured on")
        cores = 0
        if device is Device.CPU:
            cores = rows.int_(line, row, "cores")
            if cores < 1:
                raise rows.err(line, "cores", row["cores"].strip(), "a CPU row needs the cores it ran on (>= 1)")
        batch = rows.int_(line, row, "batch")
        if batch < 1:
            raise rows.err(line, "batch", row["batch"].strip(), "must be >= 1")
        compute_s = rows.num(line, row, "compute_s")
        if not compute_s > 0:
            raise rows.err(line, "compute_s", row["compute_s"].strip(), "must be > 0 seconds")
        meta = {k: rows.text(row, k) for k in META_COLUMNS if rows.text(row, k)}
        out.append(InferenceSample(model, device, gpu_model, cores, batch, compute_s, meta))
    if not out:
        raise InvalidInput("inference samples", str(path), "no samples after the header")
    return out


def write_inference_samples(path: Path, samples: Sequence[InferenceSample]) -> None:
    cols = [c for c in META_COLUMNS if any(c in s.meta for s in samples)]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([*SAMPLE_COLUMNS, *cols])
        for s in samples:
            cores = s.cores if s.device is Device.CPU else ""
            w.writerow(
                [s.model, s.device.value, s.gpu_model, cores, s.batch, repr(s.compute_s)]
                + [s.meta.get(c, "") for c in cols]
            )


def curves_from_samples(samples: Sequence[InferenceSample], source: str = "") -> list[ComputeCurve]:
    """One curve per (model, device, GPU model, cores); several samples of one batch: their median."""
    groups: dict[tuple[str, Device, str, int], list[InferenceSample]] = defaultdict(list)
    for s in samples:
        groups[(s.model, s.device, s.gpu_model, s.cores)].append(s)
    out = []
    for (model, device, gpu_model, cores), rows in sorted(groups.items()):
        by_batch: dict[int, list[float]] = defaultdict(list)
        for r in rows:
            by_batch[r.batch].append(r.compute_s)
        batches = sorted(by_batch)
        meta = dict(rows[0].meta)
        if source and "source" not in meta:
            meta["source"] = source
        seconds = tuple(statistics.median(by_batch[b]) for b in batches)
        out.append(ComputeCurve(model, device, gpu_model, cores, tuple(batches), seconds, meta))
    return out


# ---- the model database file's "inference_profiles" ------------------------------------------------


def curve_json(c: ComputeCurve) -> dict[str, Any]:
    return {
        "model": c.model,
        "device": c.device.value,
        "gpu_model": c.gpu_model,
        "cores": c.cores,
        "points": [[b, s] for b, s in zip(c.batches, c.seconds, strict=True)],
        "meta": dict(c.meta),
    }


def curve_from_json(d: Any, where: str) -> ComputeCurve:
    try:
        points = d["points"]
        return ComputeCurve(
            str(d["model"]),
            Device.parse(d["device"]),
            str(d.get("gpu_model") or ""),
            int(d.get("cores") or 0),
            tuple(int(p[0]) for p in points),
            tuple(float(p[1]) for p in points),
            {str(k): str(v) for k, v in (d.get("meta") or {}).items()},
        )
    except (KeyError, TypeError, IndexError, ValueError, AttributeError) as exc:
        raise InvalidInput("model database", where, f"a malformed inference profile ({exc})") from None


def _read_json(path: Path) -> dict[str, Any]:
    from qosmos.predictors.readers import check_file

    text = check_file(path, "model database").read_text(encoding="utf-8-sig")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput("model database", str(path), f"not JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise InvalidInput("model database", str(path), "not a qosmos model database (not a JSON object)")
    return data


def read_inference_db(path: Path) -> list[ComputeCurve]:
    """The curves stored in the database file (empty when the file or the key does not exist)."""
    path = Path(path).expanduser()
    if not path.exists():
        return []
    rows = _read_json(path).get(DB_KEY) or []
    if not isinstance(rows, list):
        raise InvalidInput("model database", str(path), f"{DB_KEY} is not a list")
    return [curve_from_json(r, f"{path}: {DB_KEY}[{i}]") for i, r in enumerate(rows)]


def upsert_inference_profiles(path: Path, new: Sequence[ComputeCurve]) -> list[ComputeCurve]:
    """Add or replace curves (same model, device, GPU model, cores) under ``inference_profiles`` in the
    database file; every other key of the file (the throughput ``profiles``) is kept as it is."""
    path = Path(path).expanduser()
    data = _read_json(path) if path.exists() else {"format": 1, "profiles": []}
    data.setdefault("profiles", [])
    db = InferenceProfiles(read_inference_db(path))
    for c in new:
        db.add(c)
    curves = db.curves()
    data[DB_KEY] = [curve_json(c) for c in curves]
    data["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)
    return curves


def load_inference_profiles(path: Path | str | None = None, *, resolve: bool = True) -> InferenceProfiles:
    """Built-in curves overlaid with the database file's (file wins); the file as ``load_modeldb``
    finds it (``--db`` > $QOSMOS_MODELDB > ~/.config/qosmos/models.json, which may be absent)."""
    from qosmos.predictors.profiler import modeldb_path

    db = InferenceProfiles.builtin()
    file = modeldb_path(Path(path) if path is not None else None) if (path is not None or resolve) else None
    if file is not None and file.is_file():
        for c in read_inference_db(file):
            db.add(c)
    return db


# ---- measuring (optional torch) ---------------------------------------------------------------------


def _median_window(run: Any, sync: Any, passes: int, windows: int) -> float:
    """Median over ``windows`` timed windows of ``passes`` forward passes each: seconds per pass."""
    times = []
    for _ in range(windows):
        sync()
        t0 = time.perf_counter()
        for _ in range(passes):
            run()
        sync()
        times.append((time.perf_counter() - t0) / passes)
    return statistics.median(times)


def measure_inference_torch(
    model: str,
    batches: Sequence[int],
    cores: Sequence[int] = (),
    cpu_batches: Sequence[int] | None = None,
    *,
    gpu_model: str | None = None,
    warmup: int = 5,
    passes: int = 10,
    windows: int = 5,
    precision: str = "fp32",
    gpu: bool = True,
) -> list[InferenceSample]:
    """C(b) of a built-in ``model`` (:mod:`qosmos.predictors.torch_models`, at its dataset's input
    size) under ``torch.inference_mode``: on the GPU (when CUDA is there) at each of ``batches``, and
    on the CPU at each of ``cores`` (``torch.set_num_threads``) at each of ``cpu_batches`` (default
    ``batches``). ``warmup`` passes, then the median of ``windows`` windows of ``passes`` passes each.
    ``gpu_model`` names the GPU (default: CUDA's device name); ``gpu=False`` measures the CPU only."""
    import torch  # optional dependency, imported lazily
    from qosmos.predictors.torch_models import canonical_name, workload

    model = canonical_name(model)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    if dtype is None:
        raise InvalidInput("precision", precision, "expected fp32, fp16 or bf16")
    meta = {"torch": torch.__version__.split("+")[0], "measured": time.strftime("%Y-%m-%d"), "precision": precision}
    out: list[InferenceSample] = []
    name = gpu_model or (torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
    if gpu and torch.cuda.is_available():
        meta["cuda"] = str(torch.version.cuda)
        torch.backends.cudnn.benchmark = True
        for b in batches:
            forward = workload(model, b, "cuda", dtype=dtype, train=False).forward
            with torch.inference_mode():
                for _ in range(warmup):
                    forward()
                s = _median_window(forward, torch.cuda.synchronize, passes, windows)
            out.append(InferenceSample(model, Device.GPU, name, 0, b, s, meta))
            del forward
            torch.cuda.empty_cache()
    threads = torch.get_num_threads()
    try:
        for c in cores:
            torch.set_num_threads(c)
            for b in cpu_batches or batches:
                forward = workload(model, b, "cpu", train=False).forward
                with torch.inference_mode():
                    for _ in range(max(1, warmup // 2)):
                        forward()
                    s = _median_window(forward, lambda: None, max(1, passes // 5), windows)
                out.append(InferenceSample(model, Device.CPU, name, c, b, s, meta))
    finally:
        torch.set_num_threads(threads)
    return out


def _ints(text: str, option: str, *, allow_empty: bool = False) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InvalidInput(option, text, "comma-separated integers") from None
    if (not vals and not allow_empty) or any(v < 1 for v in vals):
        raise InvalidInput(option, text, "one or more integers >= 1")
    return vals


def run_inference_profile(
    out: Path,
    model: str,
    batches: str,
    cores: str,
    cpu_batches: str,
    gpu_model: str | None,
    precision: str,
    passes: int,
    windows: int,
    warmup: int,
) -> list[InferenceSample]:
    """``qosmos profile run --inference``: measure, write the samples CSV, print them."""
    import typer
    from rich.console import Console

    sizes = _ints(batches, "batches")
    core_counts = _ints(cores, "cores", allow_empty=True)
    cpu_sizes = _ints(cpu_batches, "cpu_batches")
    if precision not in ("fp32", "fp16", "bf16"):
        raise InvalidInput("precision", precision, "with --inference: fp32, fp16 or bf16")
    try:
        import torch  # noqa: F401
    except ImportError:
        typer.echo(
            "error: PyTorch is needed (torchvision for the image models); `pip install torch torchvision`", err=True
        )
        raise typer.Exit(2) from None
    samples = measure_inference_torch(
        model,
        sizes,
        core_counts,
        cpu_sizes,
        gpu_model=gpu_model,
        warmup=warmup,
        passes=passes,
        windows=windows,
        precision=precision,
    )
    write_inference_samples(out, samples)
    console = Console()
    for x in samples:
        console.print(
            f"{x.model} {x.device.value} {x.gpu_model or ''} {x.cores or ''} batch {x.batch}: "
            f"{x.compute_s * 1000:.3f} ms"
        )
    console.print(f"wrote {out}; store it with `qosmos profile inference {out}`")
    return samples


__all__ = [
    "DB_KEY",
    "InferenceSample",
    "curves_from_samples",
    "load_inference_profiles",
    "measure_inference_torch",
    "read_inference_db",
    "read_inference_samples",
    "run_inference_profile",
    "upsert_inference_profiles",
    "write_inference_samples",
]
