"""What Kueue's scalability scenario costs on this machine when every workload runs one pod, whatever
the operator decides (issue 21 §4): a floor for ``qosmos bench scenario``.

    python benchmarks/scenario_floor.py --generator <kueue>/test/performance/scheduler/configs/baseline/generator.yaml \
        --scale 0.2 [--with-kueue]

The set-up of ``qosmos bench scenario`` (the generator translated by ``qosmos.dev.kueue.translate``: one
pool of 20-GPU KWOK nodes per ClusterQueue, the DLJobs created on the generator's clock by 16 clients),
but without the qosmos operator: a *null admitter* in this process keeps each cohort's books in memory
(a queue's usage within nominal + borrowingLimit, first fit on the cohort's nodes, which hold its
nominal total; highest priority first, then creation; no preemption) and writes only what a job
that runs a pod cannot do without: the DLJob's Admitted status, its pod (ungated, for qosmos-scheduler,
on the node chosen), and its Succeeded status once a pod watch sees the pod finish. No reads of the
cluster, no Events, no waiting reasons, no ETAs, no Running status, no VirtualCluster statuses.
kube-scheduler binds the pod and KWOK runs it for the job's runtime, as in the bench.

So its wall time and its per-class time to admission bound from below what any operator that gives
each job a pod can reach here; ``--with-kueue`` first runs Kueue's own runner on the same (scaled)
file, as ``bench scenario --with-kueue`` does, for the same-run comparison. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from qosmos.dev.bench import GROUP, NAMESPACE, VERSION, ControlPlaneUse, DLJobWatch, ProcStats, wait_service_account
from qosmos.dev.cluster import POOL_LABEL, DevOptions, _Quiet, down, up
from qosmos.dev.kueue import (
    Scenario,
    ScenarioJob,
    create_on_clock,
    kueue_baseline,
    load_generator,
    scaled,
    scenario_dljob,
    scenario_stats,
    translate,
    write_generator,
)
from qosmos.dev.kwok import RUN_DURATION_ANNOTATION
from qosmos.operator.kube import _done

CLIENTS = 16  # as bench scenario: 16 clients create, 16 write


@dataclass(slots=True)
class Books:
    """One cohort's GPUs: per node free (its nodes hold the cohort's nominal total), per queue used;
    pending jobs in admission order."""

    free: dict[str, int]  # node -> free GPUs
    queue_used: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    pending: list[tuple[int, float, ScenarioJob]] = field(default_factory=list)  # (-priority, created, job)


def pod_of(j: ScenarioJob, node: str) -> dict[str, Any]:
    """The job's one pod as the operator would create it for a placement on ``node``."""
    req = {"nvidia.com/gpu": str(j.gpus)}
    body = scenario_dljob(j)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{j.name}-0-0",
            "namespace": NAMESPACE,
            "labels": {"qosmos.io/job": j.name},
            "annotations": {
                RUN_DURATION_ANNOTATION: body["spec"]["template"]["metadata"]["annotations"][RUN_DURATION_ANNOTATION]
            },
        },
        "spec": {
            "schedulerName": "qosmos-scheduler",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"operator": "Exists"}],
            "containers": [
                {
                    "name": "main",
                    "image": body["spec"]["template"]["spec"]["containers"][0]["image"],
                    "resources": {"requests": req, "limits": req},
                }
            ],
        },
    }


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class NullAdmitter:
    """Admits in memory (see the module docstring) and writes the few writes of each job side by side."""

    def __init__(self, sc: Scenario, nodes_of_queue: dict[str, list[str]], custom: Any, core: Any) -> None:
        self.custom, self.core = custom, core
        self.jobs = {j.name: j for j in sc.jobs}
        self.limit = {
            q.name: q.nominal_gpus + (10**9 if q.borrowing_limit is None else q.borrowing_limit) for q in sc.queues
        }
        self.cohort_of = {q.name: q.cohort for q in sc.queues}
        self.books: dict[str, Books] = {}
        for q in sc.queues:
            b = self.books.setdefault(q.cohort, Books({}))
            for n in nodes_of_queue[q.name]:
                b.free[n] = q.gpus_per_node
        self.placed: dict[str, str] = {}  # job -> node
        self.lock = threading.Condition()
        self.writes = ThreadPoolExecutor(CLIENTS, thread_name_prefix="null-admitter")
        self.errors: list[str] = []
        self._stop = False

    def submitted(self, j: ScenarioJob, at: float) -> None:
        with self.lock:
            self.books[self.cohort_of[j.vc]].pending.append((-j.priority, at, j))
            self.lock.notify()

    def finished(self, name: str, at: float) -> None:
        with self.lock:
            node = self.placed.pop(name, None)
            if node is None:
                return
            j = self.jobs[name]
            b = self.books[self.cohort_of[j.vc]]
            b.free[node] += j.gpus
            b.queue_used[j.vc] -= j.gpus
            self.lock.notify()
        self.writes.submit(self._write_done, name, at)

    def run(self) -> None:
        while True:
            starts: list[tuple[ScenarioJob, str]] = []
            with self.lock:
                while not self._stop and not (starts := self._admit()):
                    self.lock.wait(0.5)
                if self._stop:
                    return
            now = time.time()
            for j, node in starts:
                self.writes.submit(self._write_start, j, node, now)

    def stop(self) -> None:
        with self.lock:
            self._stop = True
            self.lock.notify()
        self.writes.shutdown(wait=True)

    def _admit(self) -> list[tuple[ScenarioJob, str]]:
        out = []
        for b in self.books.values():
            b.pending.sort(key=lambda t: (t[0], t[1]))
            keep = []
            for t in b.pending:
                j = t[2]
                node = None
                if b.queue_used[j.vc] + j.gpus <= self.limit[j.vc]:
                    node = next((n for n, f in b.free.items() if f >= j.gpus), None)
                if node is None:
                    keep.append(t)
                    continue
                b.free[node] -= j.gpus
                b.queue_used[j.vc] += j.gpus
                self.placed[j.name] = node
                out.append((j, node))
            b.pending = keep
        return out

    def _write_start(self, j: ScenarioJob, node: str, now: float) -> None:
        if self._status(j.name, {"phase": "Admitted", "admittedAt": rfc3339(now)}):
            try:
                # read to its end, then released, as the operator's writes (a connection back in the pool
                # with a body unread hands that body to the next request as its status line)
                _done(self.core.create_namespaced_pod(NAMESPACE, pod_of(j, node), _preload_content=False))
            except Exception as exc:  # the run then does not finish: said in the output
                self.errors.append(f"{j.name}: {exc}")

    def _write_done(self, name: str, at: float) -> None:
        self._status(name, {"phase": "Succeeded", "completionTime": rfc3339(at)})

    def _status(self, name: str, status: dict[str, Any]) -> bool:
        """The DLJob's status merge patch; False (and the error kept) when refused."""
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, NAMESPACE, "dljobs", name, {"status": status}
            )
        except Exception as exc:
            self.errors.append(f"{name}: {exc}")
            return False
        return True


def watch_pods(core: Any, on_finished: Any, stop: threading.Event) -> None:
    """Calls ``on_finished(job, at)`` once per pod of the namespace that turns Succeeded. Raw JSON
    lines (orjson), not the client's models: this process shares the cluster's 2 cores, and decoding
    every pod event into a V1Pod would make the floor dearer than it is."""
    from kubernetes.watch.watch import iter_resp_lines

    done: set[str] = set()
    rv = ""
    while not stop.is_set():
        try:
            if not rv:  # first, or after 410 Gone: list again (pods finished meanwhile are in it)
                body = orjson.loads(core.list_namespaced_pod(NAMESPACE, _preload_content=False).data)
                rv = body["metadata"]["resourceVersion"]
                events = [{"type": "ADDED", "object": p} for p in body.get("items") or []]
            else:
                resp = core.list_namespaced_pod(
                    NAMESPACE,
                    watch=True,
                    resource_version=rv,
                    timeout_seconds=30,
                    allow_watch_bookmarks=True,
                    _preload_content=False,
                )
                events = (orjson.loads(line) for line in iter_resp_lines(resp) if line)
            for ev in events:
                pod = ev["object"]
                if ev["type"] == "ERROR":
                    rv = ""  # 410 Gone: the version was compacted away
                    break
                rv = pod["metadata"]["resourceVersion"]
                name = pod["metadata"]["name"]
                if (pod.get("status") or {}).get("phase") == "Succeeded" and name not in done:
                    done.add(name)
                    on_finished(pod["metadata"]["labels"]["qosmos.io/job"], time.time())
                if stop.is_set():
                    return
        except Exception:
            time.sleep(0.3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--generator", type=Path, required=True)
    ap.add_argument("--scale", type=float, default=0.2)
    ap.add_argument("--timeout", type=float, default=1200.0)
    ap.add_argument("--with-kueue", action="store_true")
    a = ap.parse_args()
    from kubernetes import client, config

    gen = load_generator(a.generator)
    sc = translate(gen, a.scale)
    tmp = Path(tempfile.mkdtemp(prefix="qosmos-scenario-floor-"))
    kueue = None
    if a.with_kueue:
        f = write_generator(scaled(gen, a.scale) if a.scale != 1.0 else gen, tmp / "generator.yaml")
        kueue = kueue_baseline(f, tmp / "kueue", timeout_s=a.timeout)
    opts = DevOptions(
        dir=tmp / "cluster",
        nodes=len(sc.pools()),
        gpus_per_node=sc.gpus_per_node,
        pools=sc.pools(),
        detached=False,
        operator=False,
        start_timeout=300.0,
    )
    state, _ = up(opts, _Quiet())
    stop = threading.Event()
    try:
        api = config.new_client_from_config(config_file=state.kubeconfig)
        api.configuration.connection_pool_maxsize = 2 * CLIENTS
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        wait_service_account(core)
        nodes_of_queue: dict[str, list[str]] = defaultdict(list)
        for n in core.list_node().items:
            nodes_of_queue[(n.metadata.labels or {}).get(POOL_LABEL, "")].append(n.metadata.name)
        use = ControlPlaneUse(api, state.pids())
        me = ProcStats(os.getpid())
        me0 = me.cpu_s()
        adm = NullAdmitter(sc, nodes_of_queue, custom, core)
        threading.Thread(target=watch_pods, args=(core, adm.finished, stop), daemon=True).start()
        admitter = threading.Thread(target=adm.run, daemon=True)
        admitter.start()
        with DLJobWatch(api, NAMESPACE) as watch:
            t0 = time.time()
            submit_lag = create_on_clock(custom, watch, sc.jobs, adm.submitted, CLIENTS)
            while watch.count("Succeeded") < len(sc.jobs) and time.time() - t0 < a.timeout and not adm.errors:
                time.sleep(0.2)
            t_end = time.time()
            seen = watch.snapshot()
        stop.set()
        adm.stop()
        ok = sum(1 for s in seen.values() if "Succeeded" in s.phases)
        floor = {
            "wall_s": round(t_end - t0, 1),
            **scenario_stats(sc, seen, t0, t_end),
            "workloads": len(sc.jobs),
            "succeeded": ok,
            "errors": adm.errors[:5],
            "submit_lag_s": submit_lag,
            "control_plane": use.report(len(sc.jobs)),
            # this process: the 16 creating clients, the watches and the null admitter, on the same cores
            "bench_client_cpu_s": round(me.cpu_s() - me0, 1),
        }
    finally:
        stop.set()
        down(opts.dir, grace=5)
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        json.dumps(
            {
                "generator": str(a.generator),
                "scale": a.scale,
                "floor": floor,
                "kueue": kueue,
                "machine_cores": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
