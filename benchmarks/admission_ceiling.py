"""The admissions/s this machine's control plane allows whatever the operator does (issue 11's target).

    python benchmarks/admission_ceiling.py --jobs 1000 --nodes 1523

The set-up of ``qosmos bench operator`` (a ``qosmos dev`` cluster of the openb nodes, the first
``--jobs`` openb pods applied as DLJobs by 16 clients), but without the qosmos operator: a *null
admitter* admits each DLJob the moment its create returns, with only the writes an admission cannot
do without: the DLJob's status (phase Admitted) and its pod (ungated, for qosmos-scheduler, which
binds it; KWOK then runs it). No reads, no decisions, no Events, no Running/Succeeded bookkeeping:
an upper bound of what any operator can reach on the same machine. Prints one JSON line with
admissions/s measured as the bench measures it (first create to last admission, from a watch) and
when the last pod was bound.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from qosmos.dev.bench import (
    GROUP,
    NAMESPACE,
    PAUSE_IMAGE,
    VERSION,
    DLJobWatch,
    ProcStats,
    dljob_manifest,
    openb_jobs,
    wait_service_account,
)
from qosmos.dev.cluster import DevOptions, _Quiet, down, up
from qosmos.dev.fakenodes import ALL_NODE_CSV, OPENB_DIR, shared_dir
from qosmos.dev.kwok import RUN_DURATION_ANNOTATION

CLIENTS = 16  # as bench operator: 16 clients apply, the operator writes 16 gangs side by side


def pod_of(body: dict[str, Any]) -> dict[str, Any]:
    """The DLJob's one pod as the operator would create it (requests, scheduler, run duration)."""
    spec, name = body["spec"], body["metadata"]["name"]
    req: dict[str, str] = {}
    if spec["gpus"]:
        req["nvidia.com/gpu"] = str(spec["gpus"])
    if spec.get("cpus"):
        req["cpu"] = spec["cpus"]
    if spec.get("memory"):
        req["memory"] = spec["memory"]
    ann = spec["template"]["metadata"]["annotations"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-0-0",
            "namespace": NAMESPACE,
            "labels": {"qosmos.io/job": name},
            "annotations": {RUN_DURATION_ANNOTATION: ann[RUN_DURATION_ANNOTATION]},
        },
        "spec": {
            "schedulerName": "qosmos-scheduler",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": {"requests": req, "limits": req}}],
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=1523)
    ap.add_argument("--run-seconds", type=float, default=30.0)
    a = ap.parse_args()
    from kubernetes import client, config

    tmp = Path(tempfile.mkdtemp(prefix="qosmos-admission-ceiling-"))
    opts = DevOptions(
        dir=tmp / "cluster",
        node_list=shared_dir() / OPENB_DIR / ALL_NODE_CSV,
        nodes=a.nodes if a.nodes < 1523 else None,
        pools=(),
        detached=False,
        operator=False,
        start_timeout=300.0,
    )
    state, _ = up(opts, _Quiet())
    try:
        api = config.new_client_from_config(config_file=state.kubeconfig)
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        wait_service_account(core)
        comps = {c["name"]: ProcStats(int(c["pid"])) for c in state.to_json()["components"]}
        cpu0 = {k: p.cpu_s() for k, p in comps.items()}
        bodies = [
            dljob_manifest(
                r.name, gpus=r.gpus, run_s=a.run_seconds, kind=r.kind, cpu_milli=r.cpu_milli, memory_mib=r.memory_mib
            )
            for r in openb_jobs(a.jobs)
        ]
        todo: queue.Queue[dict[str, Any] | None] = queue.Queue()

        def create(body: dict[str, Any]) -> None:
            custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "dljobs", body)
            watch.created(body["metadata"]["name"], time.time())
            todo.put(body)

        def admitter() -> None:
            while (body := todo.get()) is not None:
                name = body["metadata"]["name"]
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, NAMESPACE, "dljobs", name, {"status": {"phase": "Admitted", "admittedAt": now}}
                )
                core.create_namespaced_pod(NAMESPACE, pod_of(body))

        with DLJobWatch(api, NAMESPACE) as watch:
            workers = [threading.Thread(target=admitter, daemon=True) for _ in range(CLIENTS)]
            for w in workers:
                w.start()
            t0 = time.time()
            with ThreadPoolExecutor(CLIENTS) as pool:
                list(pool.map(create, bodies))
            applied = time.time() - t0
            while watch.count("Admitted") < a.jobs and time.time() - t0 < 600:
                time.sleep(0.2)
            for _ in workers:
                todo.put(None)
            seen = watch.snapshot()
        admitted = sorted(s.phases["Admitted"] for s in seen.values() if "Admitted" in s.phases)
        bound_at = None
        while time.time() - t0 < 900:
            pods = core.list_namespaced_pod(NAMESPACE).items
            if len(pods) == a.jobs and all(p.spec.node_name for p in pods):
                bound_at = time.time() - t0
                break
            time.sleep(1.0)
        window = admitted[-1] - t0 if admitted else float("nan")
        print(
            json.dumps(
                {
                    "jobs": a.jobs,
                    "nodes": a.nodes,
                    "apply_s": round(applied, 2),
                    "admissions": len(admitted),
                    "admission_window_s": round(window, 2),
                    "admissions_per_s": round(len(admitted) / window, 1) if admitted else None,
                    "all_pods_bound_s": None if bound_at is None else round(bound_at, 1),
                    "cpu_s_by_component": {k: round(p.cpu_s() - cpu0[k], 1) for k, p in comps.items()},
                    "machine_cores": os.cpu_count(),
                }
            )
        )
    finally:
        down(opts.dir, grace=5)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
