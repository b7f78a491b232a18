"""GENIE lightweight profiler (seed 001 §5.1.5) and the model-database file.

Samples CSV (one measured run a row; header required):

    model,batch,d_node,d_gpn,rate
    ResNet50,32,1,1,361.2        # B single-GPU runs at several batch sizes → k0, k1, k2 (Eq. 7)
    ResNet50,256,2,4,2210.0      # N + G multi-GPU runs at one global batch → γ, λ (Eq. 8)

``batch`` is the global batch, ``rate`` the processing rate PR in samples/s (Eq. 5).
Optional columns (``qosmos profile run`` writes them; files without them load as before):
``rate_spread_pct``, ``windows`` (the spread of the repeated windows' rates and how many)
and the environment ``device, device_memory_mib, driver, cuda, torch, precision,
measured_at`` (:data:`qosmos.predictors.timing.ENV_COLUMNS`).

The fits are the core's: every single-GPU form by leave-one-out error
(:func:`select_single_gpu_profile`: quadratic Eq. 7, affine iteration time, monotone
interpolation) and :func:`fit_comm` for Eq. 8. This module adds grouping, the fit error
(mean absolute % error of PR over every sample, in the chosen form) and the JSON database
file that ``ModelDB`` (pure) is built from: ``{"profiles": [{model, k0, ..., form, ...}, ...]}``.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import os
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.genie import (
    DEFAULT_NU,
    Task,
    ThroughputProfile,
    fit_comm,
    processing_rate,
    select_single_gpu_profile,
)
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.types import Shape
from qosmos.predictors.timing import (
    ENV_COLUMNS,
    MAX_WARMUP,
    MIN_WINDOW_S,
    STAT_COLUMNS,
    World,
    common_environment,
    cpu_list,
    cpu_share,
    parse_nvidia_smi,
    parse_precision,
    process_world,
    warm_up,
    window_rounds,
    window_stats,
    window_steps,
)

SAMPLE_COLUMNS = ("model", "batch", "d_node", "d_gpn", "rate")
DEFAULT_DB = Path("~/.config/qosmos/models.json")
MODELDB_ENV = "QOSMOS_MODELDB"  # overrides DEFAULT_DB; ``--db`` overrides both
INIT_METHOD_ENV = "QOSMOS_INIT_METHOD"  # the ranks' torch.distributed init_method (_local_world's file://)


def modeldb_path(explicit: Path | None = None) -> Path:
    """The one model-database location: ``--db`` > $QOSMOS_MODELDB > ~/.config/qosmos/models.json.

    ``profile fit`` writes here; explain, simulate, the extender and the operator read it.
    """
    if explicit is not None:
        return explicit.expanduser()
    env = os.environ.get(MODELDB_ENV)
    return Path(env).expanduser() if env else DEFAULT_DB.expanduser()


@dataclass(frozen=True, slots=True)
class Sample:
    model: str
    batch: int
    shape: Shape
    rate: float
    spread_pct: float | None = None  # (max - min) / median of the measured windows' rates, in %
    windows: int | None = None
    env: tuple[tuple[str, str], ...] = ()  # ENV_COLUMNS as measured; empty for hand-written samples


@dataclass(frozen=True)
class FitReport:
    profile: ThroughputProfile
    mape: float  # mean |PR_pred − PR| / PR over all samples, in %, in the chosen form
    single_gpu_runs: int
    multi_gpu_runs: int
    comm_fitted: bool
    candidates: dict[str, float | None] = field(default_factory=dict)  # form -> held-out error % (None: not fitted)


def read_samples(path: Path) -> list[Sample]:
    """Samples CSV → :class:`Sample` list; bad input names file, line and field (shared readers)."""
    from qosmos.predictors.readers import CsvRows

    rows = CsvRows(Path(path), SAMPLE_COLUMNS, what="samples")
    out = []
    for line, row in rows:
        model = rows.text(row, "model")
        if not model:
            raise rows.err(line, "model", "", "missing model name")
        batch = rows.int_(line, row, "batch")
        d_node = rows.int_(line, row, "d_node")
        d_gpn = rows.int_(line, row, "d_gpn")
        rate = rows.num(line, row, "rate")
        for fld, v in (("batch", batch), ("d_node", d_node), ("d_gpn", d_gpn), ("rate", rate)):
            if not v > 0:
                raise rows.err(line, fld, row[fld].strip(), "must be > 0")
        spread = rows.num(line, row, "rate_spread_pct", optional=True) if "rate_spread_pct" in row else math.nan
        windows = rows.int_(line, row, "windows", default=0) if "windows" in row else 0
        env = tuple((k, rows.text(row, k)) for k in ENV_COLUMNS if rows.text(row, k))
        out.append(
            Sample(
                model,
                batch,
                Shape(d_node, d_gpn),
                rate,
                None if math.isnan(spread) else spread,
                windows or None,
                env,
            )
        )
    if not out:
        raise InvalidInput("samples", str(path), "no samples after the header")
    return out


def write_samples(path: Path, samples: Sequence[Sample]) -> None:
    """The samples CSV; the optional columns only when some sample has them."""
    stats = any(s.spread_pct is not None or s.windows is not None for s in samples)
    env_keys = [k for k in ENV_COLUMNS if any(dict(s.env).get(k) for s in samples)]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([*SAMPLE_COLUMNS, *(STAT_COLUMNS if stats else ()), *env_keys])
        for s in samples:
            row = [s.model, s.batch, s.shape.d_node, s.shape.d_gpn, repr(s.rate)]
            if stats:
                row += ["" if s.spread_pct is None else repr(s.spread_pct), "" if s.windows is None else s.windows]
            env = dict(s.env)
            w.writerow(row + [env.get(k, "") for k in env_keys])


def fit_profile(samples: Sequence[Sample], nu: float = DEFAULT_NU, source: str = "") -> FitReport:
    """sPR(b') from the single-GPU runs in the form with the lowest leave-one-out error
    (select_single_gpu_profile), γ/λ from the multi-GPU runs of the most-profiled global batch
    (fit_comm, through the chosen form's sPR); without ≥ 2 multi-GPU runs γ, λ keep the
    documented defaults. Samples measured at different precisions are refused: one profile,
    one precision."""
    models = {s.model for s in samples}
    if len(models) != 1:
        raise InvalidInput("model", sorted(models), "fit one model at a time")
    model = models.pop()
    single = [s for s in samples if s.shape.gpus == 1]
    multi = [s for s in samples if s.shape.gpus > 1]
    if not single:
        raise InvalidInput("samples", model, "need at least one single-GPU run (d_node = d_gpn = 1)")
    precisions = sorted({dict(s.env).get("precision", "") for s in samples} - {""})
    if len(precisions) > 1:
        raise InvalidInput(
            "precision", precisions, f"{model}: samples at several precisions; fit each under its own model name"
        )
    # Repeated runs of one batch size (several measurement sessions) count once, at their median:
    # duplicates would let leave-one-out "predict" a point from its own repeat.
    by_batch: dict[int, list[float]] = defaultdict(list)
    for s in single:
        by_batch[s.batch].append(s.rate)
    batches = sorted(by_batch)
    choice = select_single_gpu_profile(
        model,
        [float(b) for b in batches],
        [statistics.median(by_batch[b]) for b in batches],
        nu=nu,
        source=source or f"lightweight profile: {len(single)} single-GPU + {len(multi)} multi-GPU runs",
        measured_on=common_environment([dict(s.env) for s in samples]),
    )
    base = choice.profile
    comm_fitted = False
    if len(multi) >= 2:
        global_batch = Counter(s.batch for s in multi).most_common(1)[0][0]
        runs = [s for s in multi if s.batch == global_batch]
        if len(runs) >= 2:
            gamma, lam = fit_comm([s.shape for s in runs], global_batch, [s.rate for s in runs], base)
            base = replace(base, gamma=gamma, lam=lam)
            comm_fitted = True
    errs = []
    for s in samples:
        pred = processing_rate(Task(model, s.batch, 1), s.shape, base)
        errs.append(abs(pred - s.rate) / s.rate)
    return FitReport(base, 100.0 * float(np.mean(errs)), len(single), len(multi), comm_fitted, choice.candidates)


def fit_file(path: Path | Sequence[Path]) -> list[FitReport]:
    """One profile per model from one samples CSV, or several (repeated sessions: medians per batch)."""
    paths = [Path(path)] if isinstance(path, (str, Path)) else [Path(p) for p in path]
    groups: dict[str, list[Sample]] = defaultdict(list)
    for p in paths:
        for s in read_samples(p):
            groups[s.model].append(s)
    names = ", ".join(p.name if p.parent == paths[0].parent else str(p) for p in paths)
    return [fit_profile(groups[m], source=f"lightweight profile from {names}") for m in sorted(groups)]


# ---- the model database file -------------------------------------------------------------------


def profile_json(p: ThroughputProfile) -> dict[str, object]:
    """A profile as stored: asdict, with b_max None for infinity, knots as [b', t] pairs and
    measured_on as an object."""
    d = asdict(p)
    if not np.isfinite(d["b_max"]):
        d["b_max"] = None
    d["knots"] = [list(k) for k in p.knots]
    d["measured_on"] = dict(p.measured_on)
    return d


def _profile_from_json(r: dict[str, object]) -> ThroughputProfile:
    """The inverse of :func:`profile_json`; files written before the forms (no form, knots, ...) load as quadratics."""
    fields = dict(r)
    fields["b_max"] = float("inf") if r.get("b_max") is None else r["b_max"]
    if "knots" in r:
        fields["knots"] = tuple((float(b), float(t)) for b, t in r["knots"])  # type: ignore[attr-defined]
    if "measured_on" in r:
        fields["measured_on"] = tuple((str(k), str(v)) for k, v in r["measured_on"].items())  # type: ignore[attr-defined]
    return ThroughputProfile(**fields)  # type: ignore[arg-type]


def read_db(path: Path) -> list[ThroughputProfile]:
    """Profiles stored in the JSON database file (empty when the file does not exist)."""
    from qosmos.predictors.readers import check_file

    path = Path(path).expanduser()
    if not path.exists():
        return []
    text = check_file(path, "model database").read_text(encoding="utf-8-sig")
    try:
        data = json.loads(text)
        rows = data["profiles"]
        return [_profile_from_json(r) for r in rows]
    except json.JSONDecodeError as exc:
        raise InvalidInput("model database", str(path), f"not JSON (line {exc.lineno}: {exc.msg})") from None
    except InvalidInput as exc:
        raise InvalidInput("model database", str(path), f"bad profile: {exc}") from None
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise InvalidInput("model database", str(path), f"not a qosmos model database ({exc})") from None


def write_db(path: Path, profiles: Sequence[ThroughputProfile]) -> None:
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    # the file's inference profiles (predictors.inference_profiles) stay as they are
    from qosmos.predictors.inference_profiles import DB_KEY, curve_json, read_inference_db

    kept = {DB_KEY: [curve_json(c) for c in read_inference_db(path)]} if path.is_file() else {}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(
        json.dumps(
            {
                "format": 1,
                "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "profiles": [profile_json(p) for p in profiles],
                **{k: v for k, v in kept.items() if v},
            },
            indent=2,
        )
    )
    tmp.replace(path)


def upsert_profiles(path: Path, new: Sequence[ThroughputProfile]) -> list[ThroughputProfile]:
    """Add or replace profiles (by model name, case-insensitive, and the GPU model measured on)."""
    from qosmos.extender.core.gpus import gpu_key

    by_name = {(p.model.lower(), gpu_key(p.gpu_model)): p for p in read_db(path)}
    for p in new:
        by_name[(p.model.lower(), gpu_key(p.gpu_model))] = p
    profiles = [by_name[k] for k in sorted(by_name)]
    write_db(path, profiles)
    return profiles


def load_modeldb(path: Path | None = None, *, resolve: bool = False) -> ModelDB:
    """Built-in profiles overlaid with the database file's (file wins).

    ``resolve=True`` reads the one location (:func:`modeldb_path`) when ``path`` is None,
    and tolerates its absence there (nothing profiled yet); an explicit path must exist.
    """
    db = ModelDB.builtin()
    if path is None and resolve:
        default = modeldb_path(None)
        if default.is_file():
            path = default
    elif path is not None:
        # read_db reads a missing file as empty (for upsert): a file the caller named must be there
        path = Path(path).expanduser()
        if path.is_dir():
            raise InvalidInput("db", str(path), "is a directory, expected a model database file")
        if not path.is_file():
            raise InvalidInput("db", str(path), "no such model database file")
    if path is not None:
        for p in read_db(path):
            db.add(p)
    return db


# ---- measuring a real training step (optional torch) ---------------------------------------------


def torch_environment(torch: Any, device: str, precision: str) -> dict[str, str]:
    """ENV_COLUMNS of this machine: GPU name, memory, driver (nvidia-smi), CUDA and torch versions,
    and the CPUs the measuring process may run on (a launch-bound step is the host's speed)."""
    import platform
    import shutil
    import subprocess

    env = {"torch": str(torch.__version__), "precision": precision, "host_cpus": cpu_list(os.sched_getaffinity(0))}
    env["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if device != "cuda":
        env["device"] = f"cpu {platform.processor() or platform.machine()}".strip()
        return env
    props = torch.cuda.get_device_properties(torch.cuda.current_device())  # a rank's own GPU
    env |= {"device": str(props.name), "device_memory_mib": str(props.total_memory // 2**20)}
    env["cuda"] = str(torch.version.cuda)
    smi = shutil.which("nvidia-smi")
    if smi:
        query = [smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits", "-i", "0"]
        try:
            out = subprocess.run(query, capture_output=True, text=True, timeout=10, check=True).stdout
            env["driver"] = parse_nvidia_smi(out)["driver"]
        except (OSError, subprocess.SubprocessError, InvalidInput):
            pass  # the driver version is informative only
    return env


class MeasureFailed(ChildProcessError):  # an OSError: the CLIs report it in one line
    """The data-parallel processes did not finish: the failed rank's exit status and its error."""


def measure_torch(
    model: str,
    batches: Sequence[int],
    steps: int = 10,
    warmup: int = 3,
    *,
    windows: int = 5,
    precision: str = "fp32",
    max_warmup: int = MAX_WARMUP,
    min_window_s: float = MIN_WINDOW_S,
    gpus: int = 1,
    interleave: bool = True,
    cpus: set[int] | None = None,
    timeout_s: float | None = None,
) -> list[Sample]:
    """Training-step rate of a model per batch size on the local device (CUDA if present, else CPU).

    Per batch size: warm-up of at least ``warmup`` steps that ends when the step time is stable
    (:func:`timing.warm_up`, at most ``max_warmup``), then ``windows`` windows of ``steps`` steps,
    lengthened to at least ``min_window_s`` (a window of a few millisecond-steps measures launch
    jitter, not the model), with a CUDA event after every step (on the CPU and data-parallel: the
    window's synchronised wall time); the sample's rate is the batch over the lower quartile of the
    step times (:func:`timing.window_stats`: the launch-bound step undisturbed by the host), with
    the window rates' spread and the environment (:func:`torch_environment`, the CPUs the process
    may run on included). ``cpus``: the process pins itself to them before torch starts its threads
    (and stays pinned); a data-parallel process to its own share of them (:func:`timing.cpu_share`).
    ``torch.backends.cudnn.benchmark`` is on, so the warm-up includes cuDNN's kernel choice.
    ``interleave`` (default): every batch size's workload is built and warmed up first, then the
    windows are taken in rounds, one window of each batch size per round, so a slow drift of the
    host (another tenant, the CPU's clock: launch-bound sizes differ by up to 70 % between sessions
    on an H200) moves every batch size alike instead of bending the curve; it holds all the
    workloads at once (``False``: one batch size after another, for a GPU too small for that).
    Python's garbage collector is off inside the measured windows, as ``timeit`` does.
    Precision: fp32 (TF32 off), tf32 (TF32 matmul and convolutions), bf16/fp16 (autocast; fp16
    with a gradient scaler, as AMP training runs).

    Data-parallel samples (DistributedDataParallel, one process per GPU, NCCL; gloo processes on a
    machine without CUDA), each batch size the global batch split evenly over the processes, are
    d_node x d_gpn runs for Eq. 8's γ, λ (:func:`fit_profile`):

    - ``gpus`` > 1: this call runs ``gpus`` processes on this node (:func:`_local_world`: they meet
      through a file and talk over loopback, nothing listens on the node's network) and returns
      rank 0's samples, d_gpn = ``gpus``; ``timeout_s`` bounds it (the processes are killed,
      :class:`MeasureFailed`), and the first rank to fail stops the others.
    - called in a process that torchrun started (or one of a DLJob's pods, told RANK and
      WORLD_SIZE: :func:`timing.process_world`): this process is one rank of that world, which may
      span nodes (d_node = WORLD_SIZE / LOCAL_WORLD_SIZE); rank 0 returns the samples, the others
      an empty list. ``gpus`` must then be 1 or LOCAL_WORLD_SIZE.

    ``model`` names a model of the built-in list (:mod:`qosmos.predictors.torch_models`: the
    database's name, built at its dataset's input size; ``mlp`` for a small smoke-test network).
    """
    precision = parse_precision(precision)
    if gpus < 1:
        raise InvalidInput("gpus", gpus, "must be >= 1")
    if not batches or any(b < 1 for b in batches):
        raise InvalidInput("batches", list(batches), "one or more batch sizes > 0")
    world = process_world(os.environ)
    if world is not None and gpus not in (1, world.local_size):
        raise InvalidInput(
            "gpus",
            gpus,
            f"this is rank {world.rank} of {world.size} (RANK and WORLD_SIZE set, by torchrun or a DLJob): "
            f"{world.local_size} processes on this node already",
        )
    size = world.size if world is not None else gpus
    bad = [b for b in batches if b % size]
    if bad:
        raise InvalidInput("batches", bad, f"a global batch must split evenly over {size} GPUs")
    # a data-parallel process pins itself to its share of ``cpus``: one CPU each at least
    share = cpu_share(cpus, *((world.local_rank, world.local_size) if world else (0, gpus))) if cpus else None
    from qosmos.predictors.torch_models import canonical_name  # imports torch

    model = canonical_name(model)
    args = (model, list(batches), steps, warmup, windows, precision, max_warmup, min_window_s, interleave)
    if world is None and gpus > 1:
        spec = dict(zip(_SPEC_KEYS, args, strict=True)) | {"cpus": sorted(cpus) if cpus else None}
        return _local_world(gpus, spec, timeout_s)
    threads = None
    if world is not None:
        if share:
            os.sched_setaffinity(0, share)
        # gloo processes on the CPU: each its own share of the CPUs, not every CPU each
        threads = max(1, len(os.sched_getaffinity(0)) // (1 if share else world.local_size))
    elif cpus:
        os.sched_setaffinity(0, cpus)  # before torch starts its threads: they inherit it
    samples = _measure(world, threads, *args)
    return samples if world is None or world.rank == 0 else []


_SPEC_KEYS = ("model", "batches", "steps", "warmup", "windows", "precision", "max_warmup", "min_window_s", "interleave")


def _local_world(gpus: int, spec: dict[str, Any], timeout_s: float | None) -> list[Sample]:
    """``gpus`` processes of :func:`measure_torch` on this node, started here; rank 0's samples.

    Not torchrun: its rendezvous store (a TCPStore, which takes anyone's connection) listens on every
    address of the node, torch offers no way to bind it, and a profile of one node needs no network.
    The ranks meet through a file (torch's FileStore, ``INIT_METHOD_ENV``) and their collectives'
    sockets (gloo's, NCCL's bootstrap) are on ``lo``: nothing listens beyond the node. The first rank
    to fail stops the others (a rank waiting in a collective for a dead peer would wait out gloo's
    30-minute timeout)."""
    import signal
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="qosmos-ranks-") as tmp:
        out = Path(tmp) / "samples.csv"
        # -m puts the working directory first on sys.path: a folder there named like a stdlib module
        # (this repository's operator/) would shadow it in every worker
        env = os.environ | {"PYTHONSAFEPATH": "1", INIT_METHOD_ENV: f"file://{tmp}/store"}
        env |= {"WORLD_SIZE": str(gpus), "LOCAL_WORLD_SIZE": str(gpus), "GLOO_SOCKET_IFNAME": "lo"}
        env |= {"NCCL_SOCKET_IFNAME": "lo"}  # (NCCL's bootstrap; the data goes GPU to GPU on one node)
        cmd = [sys.executable, "-m", "qosmos.predictors.profiler", json.dumps(spec), str(out)]
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for rank in range(gpus):
                with open(Path(tmp) / f"rank{rank}.log", "wb") as log:
                    procs.append(
                        subprocess.Popen(
                            cmd,
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            env=env | {"RANK": str(rank), "LOCAL_RANK": str(rank)},
                            start_new_session=True,  # its own group: killed with what it started
                        )
                    )
            failed = _wait_ranks(procs, None if timeout_s is None else time.monotonic() + timeout_s)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        if failed is None:
            raise MeasureFailed(f"{gpus} data-parallel processes did not finish within {timeout_s:g} s")
        if failed or not out.is_file():
            rank, code = failed[0] if failed else (0, 0)
            errors = sorted(Path(tmp).glob("rank*.error"))  # the workers' own messages (see _worker)
            log_tail = (Path(tmp) / f"rank{rank}.log").read_text(errors="replace").strip().splitlines()[-20:]
            why = [f"{e.stem}: {e.read_text().strip()}" for e in errors] or log_tail
            what = (
                f"rank {rank} of {gpus} data-parallel processes exited with status {code}"
                if failed
                else f"all {gpus} data-parallel processes exited with status 0 but rank 0 wrote no samples"
            )
            raise MeasureFailed(f"{what}: " + "\n".join(why))
        return read_samples(out)


def _wait_ranks(procs: Sequence[Any], deadline: float | None) -> list[tuple[int, int]] | None:
    """Until every rank exits 0 (``[]``) or one fails (``[(rank, status)]``, the first seen); None
    past ``deadline`` (monotonic)."""
    while True:
        codes = [p.poll() for p in procs]
        failed = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
        if failed or all(code == 0 for code in codes):
            return failed[:1]
        if deadline is not None and time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def _measure(
    world: World | None,
    threads: int | None,
    model: str,
    batches: list[int],
    steps: int,
    warmup: int,
    windows: int,
    precision: str,
    max_warmup: int,
    min_window_s: float,
    interleave: bool,
) -> list[Sample]:
    """measure_torch's loop in one process: a rank of ``world`` (None: no process group); ``threads``
    torch threads on a CPU (None: torch's default)."""
    import contextlib
    import functools

    import torch  # optional dependency, imported lazily
    from qosmos.predictors.torch_models import workload

    cuda = torch.cuda.is_available()
    device = f"cuda:{world.local_rank}" if cuda and world is not None else ("cuda" if cuda else "cpu")
    dist: ModuleType | None = None
    if not cuda and threads is not None:
        torch.set_num_threads(threads)
    if world is not None:
        import torch.distributed

        dist = torch.distributed
        if cuda:
            torch.cuda.set_device(world.local_rank)
        # env:// (MASTER_ADDR/PORT) under torchrun or in a DLJob's pods; a file of _local_world's
        init = os.environ.get(INIT_METHOD_ENV) or "env://"
        dist.init_process_group("nccl" if cuda else "gloo", init_method=init, rank=world.rank, world_size=world.size)
    flags = (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    kind = "cuda" if cuda else "cpu"
    scaler = torch.amp.GradScaler(kind) if precision == "fp16" and cuda else None
    env = tuple(torch_environment(torch, kind, precision).items())

    def autocast() -> Any:
        return torch.autocast(device_type=kind, dtype=amp_dtype) if amp_dtype is not None else contextlib.nullcontext()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()
        if dist is not None:
            dist.barrier()

    def wrap(net: Any) -> Any:
        if dist is None:
            return net
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(net, device_ids=[world.local_rank] if cuda and world else None)

    def timed_step(train_step: Any) -> float:
        sync()
        t0 = time.perf_counter()
        train_step(autocast, scaler)
        sync()
        return time.perf_counter() - t0 if dist is None else slowest(dist, time.perf_counter() - t0, device)

    def window(n: int, train_step: Any) -> list[float]:
        """The window's step times (s): each step's with CUDA events, else the window's mean per step."""
        if cuda and dist is None:  # one process: an event after each step, no host sync inside the window
            marks = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
            marks[0].record()
            for mark in marks[1:]:
                train_step(autocast, scaler)
                mark.record()
            marks[-1].synchronize()
            return [float(a.elapsed_time(b)) / 1000.0 for a, b in itertools.pairwise(marks)]
        sync()  # data-parallel: the slowest process's window, all-reduces included
        t0 = time.perf_counter()
        for _ in range(n):
            train_step(autocast, scaler)
        sync()
        return [(time.perf_counter() - t0) / n] * n

    def prepare(b: int) -> tuple[int, Any, int]:
        """(batch, its warmed-up step, steps per window)."""
        train_step = workload(model, b // (world.size if world else 1), device, wrap=wrap).step
        warm_up(functools.partial(timed_step, train_step), min_steps=warmup, max_steps=max(warmup, max_warmup))
        n = window_steps(steps, math.fsum(window(steps, train_step)), min_window_s)
        if dist is not None:  # every process runs the same number of steps
            n_t = torch.tensor([n], device=device if cuda else "cpu")
            dist.broadcast(n_t, 0)
            n = int(n_t.item())
        return b, train_step, n

    shape = Shape(world.nodes, world.local_size) if world is not None else Shape(1, 1)
    out = []
    try:
        for group in [list(batches)] if interleave else [[b] for b in batches]:
            runs = [prepare(b) for b in group]
            measured = window_rounds([functools.partial(window, n, train_step) for _, train_step, n in runs], windows)
            for (b, _, _), steps_of in zip(runs, measured, strict=True):
                st = window_stats(b, steps_of)
                out.append(Sample(model, b, shape, st.rate, st.spread_pct, st.windows, env))
            del runs
            if cuda:
                torch.cuda.empty_cache()
    finally:
        (torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) = flags
        if dist is not None:
            dist.destroy_process_group()
    return out


def slowest(dist: Any, seconds: float, device: str) -> float:
    """The largest of every rank's ``seconds``, the same on every rank (all-reduce MAX). A
    data-parallel warm-up decides on these: each rank stops at the same step. Deciding on its own
    times, a rank that found them stable one step before the others would wait in a barrier while
    they ran a step of all-reduces: a deadlock."""
    import torch

    value = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return float(value.item())


def _worker(argv: Sequence[str]) -> None:
    """One rank of :func:`_local_world`: ``SPEC_JSON OUT``; rank 0 writes the samples to OUT."""
    spec = json.loads(argv[0])
    cpus = spec.pop("cpus")
    out = Path(argv[1])
    try:
        samples = measure_torch(**spec, cpus=set(cpus) if cpus else None)
    except Exception as exc:  # the exit status says nothing: leave the error beside OUT
        rank = os.environ.get("RANK", "0")
        out.with_name(f"rank{rank}.error").write_text(f"{type(exc).__name__}: {exc}\n")
        raise
    if samples:
        write_samples(out, samples)


if __name__ == "__main__":
    import sys

    _worker(sys.argv[1:])
