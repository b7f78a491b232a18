"""What one ``qosmos dev`` apiserver sustains on this machine: the write kinds an admission costs.

    python benchmarks/apiserver_writes.py --writes 500 --workers 16

A ``qosmos dev`` cluster of 4 fake nodes without the operator (so nothing else writes); then, with
``--workers`` clients side by side, ``--writes`` of each: DLJob creations, DLJob status patches,
pod creations (gated: never scheduled) and Event creations. Prints writes/s and the p50/p99 latency
of each kind as one JSON line. It bounds ``qosmos bench operator``: an admission is a status patch
and a pod creation (plus an ungate per pod of a multi-pod gang), written by the same apiserver that
also binds, runs and finishes the pods.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from qosmos.dev.bench import GROUP, NAMESPACE, VERSION, bare_cluster, dljob_manifest


def timed(fn: Callable[[str], Any], names: list[str], workers: int) -> dict[str, float]:
    lat: list[float] = []

    def one(name: str) -> None:
        t = time.perf_counter()
        fn(name)
        lat.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, names))
    wall = time.perf_counter() - t0
    lat.sort()
    return {
        "per_s": round(len(names) / wall, 1),
        "p50_ms": round(lat[len(lat) // 2] * 1e3, 1),
        "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writes", type=int, default=500, help="writes of each kind")
    ap.add_argument("--workers", type=int, default=16, help="clients side by side")
    a = ap.parse_args()
    with bare_cluster("qosmos-apiserver-writes-") as (_, core, custom):
        names = [f"j{i}" for i in range(a.writes)]

        def pod(name: str) -> dict[str, Any]:
            spec = {"schedulingGates": [{"name": "x"}], "containers": [{"name": "c", "image": "pause"}]}
            return {"metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}

        def event(name: str) -> dict[str, Any]:
            obj = {"kind": "Pod", "name": name, "namespace": NAMESPACE}
            return {"metadata": {"generateName": "e."}, "involvedObject": obj, "reason": "X", "message": "m"}

        out = {
            "dljob_create": timed(
                lambda n: custom.create_namespaced_custom_object(
                    GROUP, VERSION, NAMESPACE, "dljobs", dljob_manifest(n, gpus=1, run_s=5), _preload_content=False
                ).read(),
                names,
                a.workers,
            ),
            "dljob_status_patch": timed(
                lambda n: custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, NAMESPACE, "dljobs", n, {"status": {"phase": "Queued"}}, _preload_content=False
                ).read(),
                names,
                a.workers,
            ),
            "pod_create": timed(
                lambda n: core.create_namespaced_pod(NAMESPACE, pod(n), _preload_content=False).read(), names, a.workers
            ),
            "event_create": timed(
                lambda n: core.create_namespaced_event(NAMESPACE, event(n), _preload_content=False).read(),
                names,
                a.workers,
            ),
        }
        print(json.dumps({"writes": a.writes, "workers": a.workers, **out}))


if __name__ == "__main__":
    main()
