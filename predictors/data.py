"""Readers for the real traces the predictors are evaluated on (see ../shared/data/SOURCES.md).

Only what the predictors need: openb pods as :class:`Job` (duration = deletion_time −
scheduled_time), the Philly per-minute node series and the Philly run-time list.
"""

from __future__ import annotations

import csv
import os
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Job, JobKind

OPENB_QOS = {"LS": 0, "Guaranteed": 1, "Burstable": 2, "BE": 3}


def shared_data_dir() -> Path | None:
    """$QOSMOS_SHARED/data, else <repo>/../shared/data; None when absent."""
    env = os.environ.get("QOSMOS_SHARED")
    candidates = [Path(env) / "data", Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parent.parent.parent / "shared" / "data")
    for c in candidates:
        if (c / "SOURCES.md").exists() or (c / "philly").is_dir():
            return c
    return None


def load_openb_pods(path: Path) -> list[Job]:
    """openb pods that were scheduled and deleted, as jobs sorted by creation time.

    submit = creation_time, duration = deletion_time − scheduled_time (seconds).
    openb has no users and its names are ids, so ``user``/``name`` stay empty; the QoS
    class, CPU, memory and GPU share are kept (category = openb qos label).
    """
    jobs: list[Job] = []
    with open(path, newline="") as fh:
        for line, row in enumerate(csv.DictReader(fh), start=2):
            try:
                if not row["scheduled_time"] or not row["deletion_time"]:
                    continue
                dur = float(row["deletion_time"]) - float(row["scheduled_time"])
                if dur < 0:
                    continue
                gpus = int(row["num_gpu"])
                gpu_milli = int(row["gpu_milli"]) if gpus == 1 else 1000
                jobs.append(
                    Job(
                        id=row["name"],
                        submit_time=float(row["creation_time"]),
                        gpus=gpus,
                        kind=JobKind.TRAINING if gpus else JobKind.CPU,
                        cpu_milli=int(row["cpu_milli"]),
                        memory_mib=int(row["memory_mib"]),
                        gpu_milli=max(1, min(1000, gpu_milli or 1000)),
                        category=row["qos"],
                        duration=dur,
                    )
                )
            except (KeyError, ValueError) as exc:
                raise InvalidInput(f"{path}:{line}", row, f"bad openb pod row ({exc})") from None
    jobs.sort(key=lambda j: (j.submit_time, j.id))
    return jobs


def load_node_series(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-minute ``time,active,total`` → (epoch-minute int64, active, total)."""
    t, a, n = [], [], []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        for line, row in enumerate(reader, start=2):
            try:
                t.append(int(datetime.fromisoformat(row["time"]).replace(tzinfo=UTC).timestamp() // 60))
                a.append(float(row["active"]))
                n.append(float(row["total"]))
            except (KeyError, ValueError) as exc:
                raise InvalidInput(f"{path}:{line}", row, f"bad node-series row ({exc})") from None
    if not t:
        raise InvalidInput("series", str(path), "empty")
    return np.asarray(t, np.int64), np.asarray(a), np.asarray(n)


def load_runtimes(path: Path) -> np.ndarray:
    """One run time (s) a line after a header; order kept (trace order)."""
    with open(path) as fh:
        header = fh.readline()
        try:
            float(header)
            values = [float(header)]
        except ValueError:
            values = []
        values += [float(x) for x in fh if x.strip()]
    return np.asarray(values)
