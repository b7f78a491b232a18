"""Backfilling modes and the relax factor (seed 004 §VI-B; Mu'alem & Feitelson; Ward et al.).

EASY reserves the blocked head's start; relaxed backfilling tolerates a delay of ``factor`` ×
the head's expected wait; adaptive relaxed backfilling scales that factor with the queue length
(formula (1)). The reservation itself is node-aware and lives in the admission cycle
(:mod:`qosmos.extender.core.admission`).
"""

from __future__ import annotations

import math

from qosmos.extender.core import genie
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.types import Allocation, Job, Shape

MODES = ("none", "easy", "relaxed", "adaptive")


def remaining_run(predicted: float, job: Job) -> float:
    """Run seconds left of ``job``, predicted (or asked by its user) to run ``predicted`` in all, after its
    finished segments: what a live scheduler knows of a requeued job that resumes (backfilling's estimate,
    a running job's expected end), in the simulator as in the operator."""
    return max(predicted - job.executed, 0.0)


def task_latency(job: Job, shape: Shape, gpu_model: str, modeldb: ModelDB) -> float | None:
    """The whole of ``job``'s run at ``shape`` on ``gpu_model``'s profile (GENIE Eq. 4) when it is a GENIE
    task whose model type has a profile; None otherwise."""
    if not job.has_genie_task:
        return None
    try:
        profile = modeldb.get(job.model, gpu_model)
    except InvalidInput:  # a model type without a profile: its run time is the predictor's
        return None
    return genie.latency(genie.Task.from_job(job), shape, profile)


def allocation_latency(job: Job, alloc: Allocation | None, cluster: ClusterState, modeldb: ModelDB) -> float | None:
    """:func:`task_latency` at ``alloc``'s shape on the GPU model of its first node (what it runs on)."""
    if alloc is None or not alloc.grants:
        return None
    node = alloc.grants[0].node
    shape = genie.run_shape([len(g.gpu_ids) for g in alloc.grants])
    return task_latency(job, shape, cluster.gpu_models[cluster.model_id[node]], modeldb)


def expected_run(
    job: Job, alloc: Allocation | None, predicted: float | None, cluster: ClusterState, modeldb: ModelDB
) -> float:
    """Run seconds ``job`` has left on ``alloc`` as a live scheduler expects them (backfilling's estimates, a
    running job's expected end), in the simulator as in the operator: a GENIE task's latency at that shape
    (Eq. 4) times the work it has left; another job's ``predicted`` run time less what it ran; inf when
    neither is known."""
    lat = allocation_latency(job, alloc, cluster, modeldb)
    if lat is not None:
        return lat * job.work_left
    return math.inf if predicted is None else remaining_run(predicted, job)


def relax_factor(mode: str, base: float, queue_len: int, max_queue_len: int) -> float:
    """none/easy: 0; relaxed: base; adaptive: base x queue length / max queue length (004 §VI-B (1))."""
    if mode not in MODES:
        raise InvalidInput("backfill", mode, f"expected one of {', '.join(MODES)}")
    if base < 0 or not math.isfinite(base):
        raise InvalidInput("relax_factor", base, "must be a finite number >= 0")
    if mode in ("none", "easy"):
        return 0.0
    if mode == "relaxed":
        return base
    if max_queue_len <= 0:
        return 0.0
    return base * min(queue_len, max_queue_len) / max_queue_len
