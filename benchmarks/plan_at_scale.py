"""How long does a pass's plan take with Kueue's scenario queued at once? No cluster: the operator's
``Reconciler`` on the in-memory apiserver (``qosmos.testing.fakekube``), so what is timed is the plan.

    python benchmarks/plan_at_scale.py --generator <kueue>/test/performance/scheduler/configs/baseline/generator.yaml

The generator file's queues become VirtualClusters of their cohorts over nodes of their nominal quota
(``qosmos bench scenario``'s translation, ``dev.kueue.translate``), its workloads DLJobs, all created
at once (``--scale`` of them). The first pass writes every DLJob's first Queued status (and admits what
fits); the next ``--passes`` passes, with nothing changed in between but the clock, are the steady state
of a pass while that many DLJobs wait: one JSON line with the first pass's and the steady passes'
plan seconds (median, max), and the writes each made (the status patches by kind). ``--finish``:
between passes the admitted gangs run to completion, so each pass finishes and admits (churn).
``--profile FILE``: a cProfile of the steady passes' plans. The process's garbage collector is tuned
as the operator's (``--default-gc``: not).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import statistics
import time
from collections import Counter
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--generator", type=Path, required=True, help="Kueue's generator.yaml")
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of its workloads (and queues' quotas)")
    ap.add_argument("--passes", type=int, default=5, help="steady passes measured after the first")
    ap.add_argument("--policy", default="priority")
    ap.add_argument("--backfill", default="easy")
    ap.add_argument("--profile", type=Path, help="write a cProfile of the steady passes' plans here")
    ap.add_argument("--default-gc", action="store_true", help="Python's collector thresholds, not the operator's")
    ap.add_argument("--finish", action="store_true", help="between passes, the admitted gangs run to completion")
    a = ap.parse_args()
    if not a.default_gc:
        from qosmos.operator.runner import tune_gc

        tune_gc()  # as `qosmos operator run` does

    from qosmos.dev.cluster import POOL_LABEL
    from qosmos.dev.kueue import load_generator, scenario_dljob, translate, vc_manifest
    from qosmos.operator.durations import Durations
    from qosmos.operator.reconcile import Reconciler
    from qosmos.operator.translate import rfc3339
    from qosmos.testing.fakekube import FakeKube, gpu_node

    sc = translate(load_generator(a.generator), a.scale)
    t0 = 1_767_000_000.0
    vcs = [vc_manifest(q, a.policy, "consolidate", a.backfill) for q in sc.queues]
    nodes = [
        gpu_node(f"{q.name}-{i}", q.gpus_per_node, **{POOL_LABEL: q.name}) for q in sc.queues for i in range(q.nodes)
    ]
    jobs = []
    for n, j in enumerate(sc.jobs):
        body = scenario_dljob(j)
        body["metadata"].update(uid=f"uid-{n}", generation=1, creationTimestamp=rfc3339(t0 + j.submit_s))
        jobs.append(body)
    kube = FakeKube(nodes, jobs, vcs)
    now = t0 + max(j.submit_s for j in sc.jobs) + 1.0
    rec = Reconciler(kube, durations=Durations(None), clock=lambda: now)  # type: ignore[arg-type]

    def plan_s(rep: object) -> float:
        return float(rep.phases["plan"])  # type: ignore[attr-defined]

    t = time.perf_counter()
    first = rec.run_pass()
    first_s = time.perf_counter() - t
    prof = cProfile.Profile() if a.profile else None
    steady, writes = [], []
    status: Counter[str] = Counter()
    patched = len(kube.status_patches)
    for _ in range(a.passes):
        now += 1.0
        if a.finish:
            kube.run_new_pods("Succeeded")
        if prof is not None:
            prof.enable()
        rep = rec.run_pass()
        if prof is not None:
            prof.disable()
        steady.append(plan_s(rep))
        writes.append(rep.writes)
        status.update(rep.status_writes)
    if prof is not None:
        prof.dump_stats(str(a.profile))
    queued = sum(1 for o in kube.jobs.values() if (o.get("status") or {}).get("phase") == "Queued")
    print(json.dumps({
        "dljobs": len(jobs), "virtual_clusters": len(vcs), "nodes": len(nodes), "queued": queued,
        "first_pass_s": round(first_s, 2), "first_plan_s": round(plan_s(first), 2), "first_writes": first.writes,
        "steady_plan_p50_s": round(statistics.median(steady), 3), "steady_plan_max_s": round(max(steady), 3),
        "steady_writes": writes, "steady_status_writes": dict(status),
        # which fields the steady passes' status patches carried (phase changes apart)
        "steady_patch_fields": dict(Counter(
            ",".join(sorted(k for k in st if k != "observedGeneration"))
            for _, st in kube.status_patches[patched:] if "phase" not in st
        ).most_common(8)),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
