"""GENIE lightweight profiler (seed 001 §5.1.5) and the model-database file.

Samples CSV (one measured run a row; header required):

    model,batch,d_node,d_gpn,rate
    ResNet50,32,1,1,361.2        # B single-GPU runs at several batch sizes → k0, k1, k2 (Eq. 7)
    ResNet50,256,2,4,2210.0      # N + G multi-GPU runs at one global batch → γ, λ (Eq. 8)

``batch`` is the global batch, ``rate`` the processing rate PR in samples/s (Eq. 5).
The fits are the core's :func:`fit_spr` / :func:`fit_comm`; this module adds grouping,
the fit error (mean absolute % error of PR over every sample) and the JSON database
file that ``ModelDB`` (pure) is built from: ``{"profiles": [{model, k0, ...}, ...]}``.
"""

from __future__ import annotations

import csv
import json
import os
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.genie import (
    DEFAULT_NU,
    Task,
    ThroughputProfile,
    fit_comm,
    fit_single_gpu_profile,
    processing_rate,
)
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.types import Shape

SAMPLE_COLUMNS = ("model", "batch", "d_node", "d_gpn", "rate")
DEFAULT_DB = Path("~/.config/qosmos/models.json")
MODELDB_ENV = "QOSMOS_MODELDB"  # overrides DEFAULT_DB; ``--db`` overrides both


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


@dataclass(frozen=True)
class FitReport:
    profile: ThroughputProfile
    mape: float  # mean |PR_pred − PR| / PR over all samples, in %
    single_gpu_runs: int
    multi_gpu_runs: int
    comm_fitted: bool


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
        out.append(Sample(model, batch, Shape(d_node, d_gpn), rate))
    if not out:
        raise InvalidInput("samples", str(path), "no samples after the header")
    return out


def write_samples(path: Path, samples: Sequence[Sample]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(SAMPLE_COLUMNS)
        for s in samples:
            w.writerow([s.model, s.batch, s.shape.d_node, s.shape.d_gpn, repr(s.rate)])


def fit_profile(samples: Sequence[Sample], nu: float = DEFAULT_NU, source: str = "") -> FitReport:
    """k_i from the single-GPU runs (fit_spr), γ/λ from the multi-GPU runs of the most-profiled
    global batch (fit_comm); without ≥ 2 multi-GPU runs γ, λ keep the documented defaults."""
    models = {s.model for s in samples}
    if len(models) != 1:
        raise InvalidInput("model", sorted(models), "fit one model at a time")
    model = models.pop()
    single = [s for s in samples if s.shape.gpus == 1]
    multi = [s for s in samples if s.shape.gpus > 1]
    if not single:
        raise InvalidInput("samples", model, "need at least one single-GPU run (d_node = d_gpn = 1)")
    base = fit_single_gpu_profile(
        model,
        [float(s.batch) for s in single],
        [s.rate for s in single],
        nu=nu,
        source=source or f"lightweight profile: {len(single)} single-GPU + {len(multi)} multi-GPU runs",
    )
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
    return FitReport(base, 100.0 * float(np.mean(errs)), len(single), len(multi), comm_fitted)


def fit_file(path: Path) -> list[FitReport]:
    samples = read_samples(path)
    groups: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        groups[s.model].append(s)
    return [fit_profile(groups[m], source=f"lightweight profile from {Path(path).name}") for m in sorted(groups)]


# ---- the model database file -------------------------------------------------------------------


def _profile_json(p: ThroughputProfile) -> dict[str, object]:
    d = asdict(p)
    if not np.isfinite(d["b_max"]):
        d["b_max"] = None
    return d


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
        return [
            ThroughputProfile(**{**r, "b_max": float("inf") if r.get("b_max") is None else r["b_max"]}) for r in rows
        ]
    except json.JSONDecodeError as exc:
        raise InvalidInput("model database", str(path), f"not JSON (line {exc.lineno}: {exc.msg})") from None
    except (KeyError, TypeError, AttributeError) as exc:
        raise InvalidInput("model database", str(path), f"not a qosmos model database ({exc})") from None


def write_db(path: Path, profiles: Sequence[ThroughputProfile]) -> None:
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(
        json.dumps(
            {
                "format": 1,
                "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "profiles": [_profile_json(p) for p in profiles],
            },
            indent=2,
        )
    )
    tmp.replace(path)


def upsert_profiles(path: Path, new: Sequence[ThroughputProfile]) -> list[ThroughputProfile]:
    """Add or replace profiles (by model name, case-insensitive) in the database file."""
    by_name = {p.model.lower(): p for p in read_db(path)}
    for p in new:
        by_name[p.model.lower()] = p
    profiles = sorted(by_name.values(), key=lambda p: p.model.lower())
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


def measure_torch(model: str, batches: Sequence[int], steps: int = 10, warmup: int = 3) -> list[Sample]:
    """Time ``steps`` training steps of a small reference network per batch size on the local
    device (CUDA if present, else CPU); returns single-GPU samples (samples/s).

    ``model`` names a torchvision model when torchvision is installed, else a 3-layer MLP on
    224×224×3 inputs is used and the name is only a label.
    """
    import torch  # optional dependency, imported lazily

    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        import torchvision

        net = getattr(torchvision.models, model.lower())(num_classes=1000)
        shape = (3, 224, 224)
    except (ImportError, AttributeError):
        net = torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(3 * 64 * 64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1000)
        )
        shape = (3, 64, 64)
    net = net.to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    out = []
    for b in batches:
        x = torch.randn(b, *shape, device=device)
        y = torch.randint(0, 1000, (b,), device=device)
        for i in range(warmup + steps):
            if i == warmup:
                if device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
            opt.zero_grad()
            loss_fn(net(x), y).backward()
            opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        out.append(Sample(model, b, Shape(1, 1), b * steps / (time.perf_counter() - t0)))
    return out
