"""Readers for the real traces the predictors are evaluated on (see ../shared/data/SOURCES.md).

Only what the predictors need: openb pods as :class:`Job` (duration = deletion_time −
scheduled_time), the Philly per-minute node series and the Philly run-time list. All of
them go through the shared validation layer in :mod:`qosmos.predictors.readers` (the same
one the simulator's trace loaders use): bad input is an ``InvalidInput`` naming file, line
and field.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from qosmos.extender.core.types import Job
from qosmos.predictors.readers import (
    OPENB_QOS,
    OPENB_QOS_LABELS,
    Progress,
    read_node_series,
    read_openb_pods,
    read_runtimes,
    shared_data_dir,
)

__all__ = ["OPENB_QOS", "OPENB_QOS_LABELS", "load_node_series", "load_openb_pods", "load_runtimes", "shared_data_dir"]


def load_openb_pods(path: Path, progress: Progress | None = None) -> list[Job]:
    """openb pods that ran (have a scheduled_time), as jobs sorted by creation time.

    submit = creation_time, duration = deletion_time − scheduled_time (seconds). Every row
    is validated as ``qosmos simulate`` validates it (truncated rows, negative run times,
    bad numbers are errors). openb has no users and its names are ids, so ``user``/``name``
    stay empty; QoS class, CPU, memory and GPU share are kept (category = openb qos label).
    """
    pods = read_openb_pods(path, progress, what="pods")
    jobs = [j for j, s in zip(pods.jobs, pods.scheduled, strict=True) if s is not None]
    jobs.sort(key=lambda j: (j.submit_time, j.id))
    return jobs


def load_node_series(path: Path, progress: Progress | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-minute ``time,active,total`` → (epoch-minute int64, active, total); 0 <= active <= total."""
    return read_node_series(path, progress)


def load_runtimes(path: Path, progress: Progress | None = None) -> np.ndarray:
    """One run time (s) a line after an optional header; order kept (trace order)."""
    return read_runtimes(path, progress)
