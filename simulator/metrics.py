"""Metrics of a simulated run (Helios §4.2.3 Tables 3-4, GENIE §7.1 Eq. 14-16, AnalySIM §4, seed 004 §VI).

Computed over finished jobs (state DONE); withdrawn, rejected and failed jobs (past the backoff limit
of ``SimConfig.failures``) are counted apart, with the restarts and the run that failures lost.
JCT = end − submit; queuing delay = first start − submit; a job is *queued* when it waited
more than 0 s. QoS-guarantee % (Eq. 14) and normalised latency (Eq. 16) only over jobs
with a GENIE task; null otherwise. GPU utilisation = GPU-seconds used / (GPUs × makespan).
Fragmentation = time-weighted used GPUs / used nodes (AnalySIM Fig. 4(c)). Bounded
slowdown = max(1, JCT / max(run, 10 s)) (seed 004 §VI-B). Inference services (seed 002 §V-D2) are
counted apart (``service_*``, ``by_service``); ``cluster_gpu_utilization`` adds their replicas'
GPU-seconds within the makespan to the jobs' (``gpu_utilization`` stays the jobs' alone).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from qosmos.extender.core import genie
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.types import Shape
from qosmos.simulator.engine import DONE, FAILED, REJECTED, WITHDRAWN, SimResult

SHORT_S, LONG_S = 15 * 60.0, 6 * 3600.0  # Helios Table 4 job-length groups
BSLD_TAU = 10.0


def _stats(x: np.ndarray, prefix: str) -> dict[str, float | None]:
    if x.size == 0:
        return {f"avg_{prefix}": None, f"median_{prefix}": None, f"p95_{prefix}": None, f"p99_{prefix}": None}
    return {
        f"avg_{prefix}": float(x.mean()),
        f"median_{prefix}": float(np.median(x)),
        f"p95_{prefix}": float(np.percentile(x, 95)),
        f"p99_{prefix}": float(np.percentile(x, 99)),
    }


def job_table(res: SimResult) -> dict[str, np.ndarray]:
    """Per-finished-job arrays: index, submit, start, end, jct, queue, run, gpus."""
    idx = np.flatnonzero(np.asarray(res.state) == DONE)
    jobs = res.trace.jobs
    submit = np.fromiter((jobs[i].submit_time for i in idx), float, idx.size)
    start = np.asarray(res.start, float)[idx]
    end = np.asarray(res.end, float)[idx]
    return {
        "idx": idx,
        "submit": submit,
        "start": start,
        "end": end,
        "jct": end - submit,
        "queue": start - submit,
        "run": np.asarray(res.run_time, float)[idx],
        "gpus": np.fromiter((jobs[i].gpus for i in idx), float, idx.size),
    }


def qos_metrics(res: SimResult, idx: Sequence[int], modeldb: ModelDB | None = None) -> dict[str, float | None]:
    """QoS-guarantee % (Eq. 14, with genie.deadline) and mean normalised latency (Eq. 15-16)."""
    db = modeldb or ModelDB.builtin()
    jobs = res.trace.jobs
    ok = total = 0
    norm: list[float] = []
    for i in idx:
        j = jobs[i]
        if not j.has_genie_task:
            continue
        task = genie.Task.from_job(j)
        prof = db.get(j.model, j.gpu_models[0] if j.gpu_models else "")
        total += 1
        if genie.qos_guaranteed(res.end[i], genie.deadline(task, prof)):
            ok += 1
        wall = res.end[i] - j.submit_time
        norm.append(genie.normalized_latency(wall, genie.latency(task, Shape(1, 1), prof)))
    if total == 0:
        return {"qos_guarantee": None, "normalized_latency": None, "genie_jobs": 0}
    return {"qos_guarantee": 100.0 * ok / total, "normalized_latency": float(np.mean(norm)), "genie_jobs": total}


def _group_summary(t: dict[str, np.ndarray], sel: np.ndarray) -> dict[str, float | int | None]:
    jct, q = t["jct"][sel], t["queue"][sel]
    return {
        "jobs": int(sel.sum()),
        "avg_jct_s": float(jct.mean()) if jct.size else None,
        "avg_queue_s": float(q.mean()) if q.size else None,
        "queued_jobs": int((q > 0).sum()),
    }


SIZE_GROUPS = ("0", "1", "2-4", "5-8", ">8")
LENGTH_GROUPS = ("short", "middle", "long")


def size_group(g: float) -> str:
    if g <= 1:
        return "1" if g == 1 else "0"
    if g <= 4:
        return "2-4"
    if g <= 8:
        return "5-8"
    return ">8"


def length_group(run: float) -> str:
    return "short" if run < SHORT_S else "long" if run > LONG_S else "middle"


def size_groups(gpus: np.ndarray) -> np.ndarray:
    """size_group for an array (as indices into SIZE_GROUPS)."""
    return np.select([gpus < 1, gpus == 1, gpus <= 4, gpus <= 8], [0, 1, 2, 3], 4)


def length_groups(run: np.ndarray) -> np.ndarray:
    """length_group for an array (as indices into LENGTH_GROUPS)."""
    return np.select([run < SHORT_S, run > LONG_S], [0, 2], 1)


def summarize(res: SimResult, modeldb: ModelDB | None = None) -> dict[str, object]:
    """The summary.json dictionary."""
    t = job_table(res)
    jobs = res.trace.jobs
    out: dict[str, object] = {"jobs": int(t["idx"].size)}
    out.update(_stats(t["jct"], "jct_s"))
    out.update(_stats(t["queue"], "queue_s"))
    out["queued_jobs"] = int((t["queue"] > 0).sum())
    out.update(qos_metrics(res, t["idx"].tolist(), modeldb))
    state = np.asarray(res.state)
    if t["idx"].size:
        admitted = np.flatnonzero(state != REJECTED)
        first = min(jobs[i].submit_time for i in admitted)
        makespan = float(t["end"].max() - first)
    else:
        first, makespan = 0.0, 0.0
    out["makespan_s"] = makespan
    used = float(sum(res.gpu_seconds))
    out["gpu_seconds"] = used
    out["gpu_utilization"] = used / (res.total_gpus * makespan) if makespan > 0 and res.total_gpus else None
    out["fragmentation"] = res.frag_integral / res.frag_time if res.frag_time > 0 else None
    out.update(service_metrics(res, used, first, makespan))
    if getattr(res, "partitions", None):  # --partitions: cohort usage per partition (issue 21 §3)
        out["partitions"] = res.partitions
    bsld = np.maximum(1.0, t["jct"] / np.maximum(t["run"], BSLD_TAU)) if t["idx"].size else np.array([])
    out["avg_bounded_slowdown"] = float(bsld.mean()) if bsld.size else None
    out["backfill_violations"] = res.violations
    out["backfilled_jobs"] = int(sum(res.backfilled))
    out["preemptions"] = int(sum(res.preemptions))
    out["migrations"] = res.migrations
    out["preemption_overhead_s"] = float(sum(res.overhead_s))
    out["cross_switch_jobs"] = int(sum(res.cross_switch))
    out["withdrawn_jobs"] = int((state == WITHDRAWN).sum())
    out["failed_jobs"] = int((state == FAILED).sum())  # past the backoff limit (``SimConfig.failures``)
    out["restarts"] = int(sum(res.restarts))
    out["lost_gpu_hours"] = res.lost_gpu_seconds / 3600.0  # run lost since the last checkpoint (failures, lost nodes)
    out["node_outages"] = res.outages  # nodes that went down (``SimConfig.outages``)
    out["node_lost_requeues"] = int(sum(res.node_lost))  # gangs requeued because a node of theirs went down
    out["node_down_gpu_hours"] = res.down_gpu_seconds / 3600.0  # down or drained
    out["node_drains"] = res.drains  # of node_outages, the drains (``kind`` drain in --node-outages)
    out["node_drain_requeues"] = res.drain_requeues  # gangs a drain evicted and requeued
    out["rejected_jobs"] = int((state == REJECTED).sum())
    out["rejected_reasons"] = res.rejected_reasons
    out["unfinished_jobs"] = int((~np.isin(state, (DONE, WITHDRAWN, REJECTED, FAILED))).sum())
    out["recorded_overcommitted"] = res.overcommitted
    out["total_gpus"] = res.total_gpus
    out["nodes"] = len(res.node_names)
    out["wall_s"] = res.wall_s
    out["jobs_per_s"] = out["jobs"] / res.wall_s if res.wall_s > 0 else None  # type: ignore[operator]
    # breakdowns
    vc_names, vc_of = np.unique(np.array([jobs[i].vc for i in t["idx"]], dtype=object).astype(str), return_inverse=True)
    out["by_vc"] = {str(vc): _group_summary(t, vc_of == k) for k, vc in enumerate(vc_names)}
    sg = size_groups(t["gpus"])
    out["by_size"] = {name: _group_summary(t, sg == k) for k, name in enumerate(SIZE_GROUPS) if (sg == k).any()}
    lg = length_groups(t["run"])
    out["by_length"] = {name: _group_summary(t, lg == k) for k, name in enumerate(LENGTH_GROUPS) if (lg == k).any()}
    c = res.config
    out["config"] = {
        "trace": res.trace.name,
        "policy": c.policy,
        "placement": c.placement,
        "backfill": c.backfill,
        "relax_factor": c.relax_factor,
        "preemption_overhead_s": c.preemption_overhead,
        "migration": c.migration,
        "cross_switch_penalty": c.cross_switch_penalty,
        "partition_policy": c.partition_policy,
        "seed": c.seed,
        "tick_s": c.tick,
        "services": [s.name for s in getattr(c, "services", ())],
        "failures": None if c.failures is None else repr(c.failures),
        "checkpoint_interval_s": c.checkpoint_interval,
        "backoff_limit": c.backoff_limit,
        **{
            k: getattr(c, k)
            for k in ("backfill_estimates", "truth_noise", "predictor", "predictor_fallback")
            if hasattr(c, k)
        },
    }
    out["notes"] = res.notes
    return _clean(out)  # type: ignore[return-value]


SERVICE_COUNTS = ("replicas_placed", "replicas_pending_at_end", "replicas_lost")


def service_metrics(res: SimResult, job_gpu_seconds: float, first: float, makespan: float) -> dict[str, object]:
    """The services' figures, summed and per service, and the cluster's GPU utilisation with them over
    the makespan (from the ``first`` submission)."""
    per = {
        name: {k: int(v) if k in SERVICE_COUNTS else float(v) for k, v in st.items()}
        for name, st in res.services.items()
    }
    out: dict[str, object] = {"services": len(per)}
    for k in ("gpu_seconds", "cpu_core_seconds", "pending_replica_seconds", *SERVICE_COUNTS):
        out[f"service_{k}"] = sum((st[k] for st in per.values()), 0 if k in SERVICE_COUNTS else 0.0)
    out["service_preemptions"] = res.service_preemptions
    cluster = None
    if makespan > 0 and res.total_gpus:
        end = first + makespan
        inside = sum(max(0.0, min(e, end) - max(s, first)) * g for _, _, s, e, g in res.service_segments)
        cluster = (job_gpu_seconds + inside) / (res.total_gpus * makespan)
    out["cluster_gpu_utilization"] = cluster
    out["by_service"] = per
    return out


def recorded_stats(res_or_trace: object) -> dict[str, float | None]:
    """JCT/queue statistics straight from a trace's recorded times (for fidelity checks)."""
    trace = getattr(res_or_trace, "trace", res_or_trace)
    jct, q = [], []
    for j, s, e in zip(trace.jobs, trace.recorded_start, trace.recorded_end, strict=True):  # type: ignore[attr-defined]
        if s is None or e is None:
            continue
        jct.append(e - j.submit_time)
        q.append(s - j.submit_time)
    a, b = np.array(jct, float), np.array(q, float)
    out: dict[str, float | None] = {"jobs": float(a.size)}
    out.update(_stats(a, "jct_s"))
    out.update(_stats(b, "queue_s"))
    out["queued_jobs"] = float((b > 0).sum())
    return out


def _clean(x: object) -> object:
    """JSON-safe: NaN/inf become None, numpy scalars become Python numbers."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x
