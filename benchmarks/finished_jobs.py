"""Does a reconcile pass grow with history? Pass time and memory with N finished DLJobs in the cluster.

    python benchmarks/finished_jobs.py --steps 0 10000 50000 --active 20

A ``qosmos dev`` cluster (4 fake 8-GPU KWOK nodes, no operator of its own) with one VirtualCluster and
``--active`` queued DLJobs; then, step by step, finished DLJobs are added until the cluster holds each
``--steps`` count: created, then their status set to Succeeded and, as the operator's finishing write
does where the apiserver selects DLJobs by it (Kubernetes >= 1.31), ``status.retired`` (two writes each,
both seen by the caches' DLJob watch: added, then gone from its selection; ``--label``: three, the
status then the label ``qosmos.io/finished=true``, as on Kubernetes 1.30). At each step an
in-process ``Reconciler`` (the operator's pass, on a real client) reading the operator's watch caches
(``CachedKube``, started before the first step, as the operator runs) runs ``--passes`` passes; the
JSON line per step gives the median pass time, the pass's peak Python allocation (tracemalloc), the
process's RSS, the objects the caches hold, and, for comparison, the same pass reading by LIST (the
apiserver filters the retired ones but still scans every DLJob: ``listing_pass_p50_s``), the
time of that list and of a list of every DLJob.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from qosmos.dev.bench import GROUP, NAMESPACE, VERSION, bare_cluster, dljob_manifest


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[0, 10_000, 50_000], help="finished DLJobs at each step")
    ap.add_argument("--active", type=int, default=20, help="queued DLJobs the passes work on")
    ap.add_argument("--passes", type=int, default=7, help="passes measured at each step (after 2 warm-up passes)")
    ap.add_argument("--workers", type=int, default=16, help="clients creating the finished DLJobs side by side")
    ap.add_argument("--label", action="store_true", help="retire them by label (Kubernetes 1.30's way), not status")
    a = ap.parse_args()
    from qosmos.operator.crds import LABEL_FINISHED
    from qosmos.operator.durations import Durations
    from qosmos.operator.informers import CachedKube
    from qosmos.operator.kube import Kube
    from qosmos.operator.reconcile import Reconciler

    with bare_cluster("qosmos-finished-jobs-") as (api, _, custom):
        vc = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "VirtualCluster", "metadata": {"name": "vc-a"},
              "spec": {"policy": "fifo", "placement": "consolidate"}}  # fmt: skip
        custom.create_cluster_custom_object(GROUP, VERSION, "virtualclusters", vc)
        for i in range(a.active):  # more than the 32 GPUs hold: some run, the rest queue
            body = dljob_manifest(f"active-{i}", gpus=8, run_s=3600)
            body["spec"]["virtualCluster"] = "vc-a"
            custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "dljobs", body)

        def finished(i: int) -> None:
            body = dljob_manifest(f"done-{i}", gpus=1, run_s=5)
            body["spec"]["virtualCluster"] = "vc-a"
            custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "dljobs", body, _preload_content=False)
            status: dict[str, Any] = {"phase": "Succeeded", "completionTime": "2026-11-26T00:00:00Z"}
            if not a.label:
                status["retired"] = True
            custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, NAMESPACE, "dljobs", f"done-{i}", {"status": status}, _preload_content=False
            )
            if a.label:  # each passes through the caches' watch
                retire = {"metadata": {"labels": {LABEL_FINISHED: "true"}}}
                custom.patch_namespaced_custom_object(
                    GROUP, VERSION, NAMESPACE, "dljobs", f"done-{i}", retire, _preload_content=False
                )

        kube = Kube(api)
        cached = CachedKube(api)
        cached.informers.start()
        assert cached.informers.wait_synced(60), "the caches never listed"
        rec = Reconciler(cached, durations=Durations(None))
        listing = Reconciler(kube, durations=Durations(None))
        have = 0
        for target in sorted(a.steps):
            t = time.perf_counter()
            with ThreadPoolExecutor(a.workers) as pool:
                list(pool.map(finished, range(have, target)))
            create_s = time.perf_counter() - t
            have = max(have, target)
            for _ in range(2):
                rec.run_pass()
            times = []
            tracemalloc.start()
            for _ in range(a.passes):
                times.append(rec.run_pass().seconds)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            time.sleep(1.0)  # the caches catch up with the last creations (their events are filtered out anyway)
            listed_passes = [listing.run_pass().seconds for _ in range(3)]
            t = time.perf_counter()
            listed = len(kube.dljobs())
            list_s = time.perf_counter() - t
            t = time.perf_counter()
            resp: Any = custom.list_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, "dljobs", _preload_content=False
            )
            every = len(json.loads(resp.data)["items"])
            list_all_s = time.perf_counter() - t
            print(json.dumps({
                "finished": have, "created_in_s": round(create_s, 1), "pass_p50_s": round(statistics.median(times), 4),
                "pass_max_s": round(max(times), 4), "pass_peak_alloc_mb": round(peak / 2**20, 1),
                "rss_mb": round(rss_mb(), 1), "maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "cached_objects": {st.name: len(st) for st in cached.informers.stores},
                "listing_pass_p50_s": round(statistics.median(listed_passes), 4),
                "listed_by_pass": listed, "pass_list_s": round(list_s, 4), "every_dljob": every,
                "list_every_dljob_s": round(list_all_s, 3),
            }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
