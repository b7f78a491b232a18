"""``qosmos bench operator`` and ``qosmos bench fidelity``: the operator measured on a ``qosmos dev``
cluster (real apiserver, scheduler, extender, KWOK nodes), never on mocks.

- operator: N DLJobs applied at once on the openb nodes; admissions/s, apply-to-Running latency, the
  operator process's CPU and peak memory (from /proc), all DLJobs Succeeded or the run fails.
- fidelity: a trace slice submitted at its (compressed) arrival times with its run times as
  ``qosmos.io/run-duration``, then the same slice replayed by ``qosmos simulate`` on the same nodes;
  how often the live cluster starts job pairs in the simulator's order, and how far JCTs differ; and
  how far the operator's ETAs (``status.eta``) were from the real starts (:func:`eta_summary`).

Times of the live side are taken by this process's DLJob watch (sub-second; the objects' own
timestamps have one-second resolution).
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from qosmos.dev.cluster import DevOptions, Progress, _Quiet, down, up
from qosmos.dev.controlplane import new_api_client
from qosmos.dev.fakenodes import ALL_NODE_CSV, OPENB_DIR, shared_dir
from qosmos.dev.kwok import RUN_DURATION_ANNOTATION
from qosmos.extender.core.errors import InvalidInput
from qosmos.operator.crds import LABEL_JOB
from qosmos.operator.translate import parse_time

if TYPE_CHECKING:
    from urllib3 import BaseHTTPResponse

GROUP, VERSION = "qosmos.io", "v1alpha1"
NAMESPACE = "bench"
VC_NAME = "bench"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
OPENB_PODS = "openb_pod_list_default.csv"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PHASES = ("Queued", "Admitted", "Running", "Succeeded", "Failed")
ORDER_GAP_S = 10.0  # pairs whose simulated starts differ by less are not judged (the rule)
ETA_LEAD_S = 60.0  # the second ETA judged: the last one seen at or before start - this (issue 21 §5)
ETA_HISTORY = 50  # ETAs judged separately once this many jobs had finished (the predictor's history)


# --------------------------------------------------------------------------- the live side


@dataclass(slots=True)
class Seen:
    """When this process first saw a DLJob in each phase (time.time()), and every ETA it saw:
    ``etas`` holds (seen at, ``status.eta`` as Unix seconds or None when unset), one entry per change."""

    created: float = math.nan
    phases: dict[str, float] = field(default_factory=dict)
    obj: dict[str, Any] = field(default_factory=dict)
    etas: list[tuple[float, float | None]] = field(default_factory=list)


class DLJobWatch:
    """A watch on the namespace's DLJobs from before the first is created, resumed from its last
    resourceVersion (relisted on 410 Gone): every phase change is seen once, when it happens."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api_client)
        self.namespace = namespace
        self.seen: dict[str, Seen] = {}
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dljob-watch", daemon=True)

    def __enter__(self) -> DLJobWatch:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the DLJob watch did not start within 30 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(70)

    def created(self, name: str, at: float) -> None:
        with self.lock:
            self.seen.setdefault(name, Seen()).created = at

    def phases_of(self, obj: dict[str, Any]) -> list[str]:
        """The phases ``obj`` is in now (a DLJob: its status.phase); subclasses watch other kinds."""
        phase = (obj.get("status") or {}).get("phase")
        return [phase] if phase else []

    def list_call(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        """The list function and its arguments that the watch lists and streams."""
        return self.custom.list_namespaced_custom_object, (GROUP, VERSION, self.namespace, "dljobs")

    def _record(self, obj: dict[str, Any], at: float) -> None:
        name = obj["metadata"]["name"]
        phases = self.phases_of(obj)
        eta = parse_time((obj.get("status") or {}).get("eta"))
        with self.lock:
            s = self.seen.setdefault(name, Seen())
            s.obj = obj
            for phase in phases:
                s.phases.setdefault(phase, at)
            if (s.etas[-1][1] if s.etas else None) != eta:
                s.etas.append((at, eta))

    def _list(self) -> str:
        fn, args = self.list_call()
        res = fn(*args)
        now = time.time()
        for obj in res.get("items") or []:
            self._record(obj, now)
        return str(res["metadata"]["resourceVersion"])

    def _run(self) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        rv = self._list()
        self._ready.set()
        while not self._stop.is_set():
            w = watch.Watch()
            fn, args = self.list_call()
            try:
                for ev in w.stream(
                    fn,
                    *args,
                    resource_version=rv,
                    timeout_seconds=30,
                    allow_watch_bookmarks=True,
                ):
                    obj = ev["object"]
                    rv = obj["metadata"]["resourceVersion"]
                    if ev["type"] in ("ADDED", "MODIFIED"):
                        self._record(obj, time.time())
                    if self._stop.is_set():
                        break
            except ApiException as exc:
                if exc.status == 410:  # the resourceVersion is too old: list again
                    rv = self._list()
                else:
                    time.sleep(0.5)
            except Exception:  # a dropped connection: resume from rv
                if not self._stop.is_set():
                    time.sleep(0.5)

    def count(self, *phases: str) -> int:
        with self.lock:
            return sum(1 for s in self.seen.values() if any(p in s.phases for p in phases))

    def snapshot(self) -> dict[str, Seen]:
        with self.lock:
            return {k: Seen(v.created, dict(v.phases), v.obj, list(v.etas)) for k, v in self.seen.items()}


@dataclass(slots=True)
class ProcStats:
    """CPU seconds (user + system) and peak resident memory of a process, from /proc."""

    pid: int

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (man 5 proc: fields 14, 15)

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return math.nan


class ControlPlaneUse:
    """What each process of a dev cluster spent during a run (CPU-s from /proc) and the apiserver's
    requests by verb and resource (its ``apiserver_request_total``, read before and after): where a
    run's time went when the operator waits on the apiserver."""

    WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY"})  # the apiserver's verb label

    def __init__(self, api_client: Any, pids: Mapping[str, int]) -> None:
        self.api_client, self.procs = api_client, {n: ProcStats(p) for n, p in pids.items()}
        self.cpu0, self.req0 = self._cpu(), self._requests()

    def _cpu(self) -> dict[str, float]:
        out = {}
        for name, proc in self.procs.items():
            with contextlib.suppress(OSError):
                out[name] = proc.cpu_s()
        return out

    def _requests(self) -> dict[tuple[str, str], float]:
        c = self.api_client
        method, url, headers, _, _ = c.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
        resp = c.call_api(method, url, header_params=headers)
        resp.read()
        return request_counts(resp.data.decode())

    def report(self, jobs: int) -> dict[str, Any]:
        """CPU-s per process, the apiserver's reads and writes per resource over the run (writes per job)."""
        cpu1 = self._cpu()
        cpu = {n: round(cpu1[n] - self.cpu0.get(n, 0.0), 1) for n in cpu1}
        reads, writes = requests_between(self.req0, self._requests())
        total = sum(writes.values())
        return {
            "cpu_s": _most_first(cpu),
            "apiserver_reads": reads,
            "apiserver_writes": writes,
            "apiserver_writes_total": total,
            "apiserver_writes_per_job": round(total / jobs, 2) if jobs else None,
        }


def request_counts(text: str) -> dict[tuple[str, str], float]:
    """``apiserver_request_total`` of a /metrics text summed over codes and scopes: (verb, resource[/sub])."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, str], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name != "apiserver_request_total":
                continue
            sub = s.labels.get("subresource")
            key = (s.labels.get("verb", ""), s.labels.get("resource", "") + (f"/{sub}" if sub else ""))
            out[key] = out.get(key, 0.0) + s.value
    return out


def requests_between(
    before: Mapping[tuple[str, str], float], after: Mapping[tuple[str, str], float]
) -> tuple[dict[str, int], dict[str, int]]:
    """(reads, writes) made between two :func:`request_counts`, as ``"VERB resource"`` -> count, most first."""
    reads: dict[str, int] = {}
    writes: dict[str, int] = {}
    for (verb, res), v in after.items():
        d = int(v - before.get((verb, res), 0.0))
        if not d:
            continue
        if verb in ControlPlaneUse.WRITES:
            writes[f"{verb} {res}"] = d
        elif verb in ("GET", "LIST", "WATCH"):
            reads[f"{verb} {res}"] = d
    return _most_first(reads), _most_first(writes)


def _most_first(counts: Mapping[str, float]) -> dict[str, Any]:
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def dljob_manifest(
    name: str,
    *,
    gpus: int,
    run_s: float,
    kind: str = "training",
    cpu_milli: int = 0,
    memory_mib: int = 0,
    vc: str = VC_NAME,
    namespace: str = NAMESPACE,
) -> dict[str, Any]:
    """A DLJob whose pods KWOK runs for ``run_s`` seconds (pause containers)."""
    spec: dict[str, Any] = {
        "virtualCluster": vc,
        "kind": kind,
        "gpus": gpus,
        "template": {
            "metadata": {"annotations": {RUN_DURATION_ANNOTATION: f"{run_s:.3f}s"}},
            "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "main", "image": PAUSE_IMAGE}]},
        },
    }
    if cpu_milli:
        spec["cpus"] = f"{cpu_milli}m"
    if memory_mib:
        spec["memory"] = f"{memory_mib}Mi"
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DLJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


@contextlib.contextmanager
def dev_cluster(opts: DevOptions, progress: Progress) -> Iterator[tuple[Any, dict[str, Any]]]:
    """A ``qosmos dev`` cluster with its operator, torn down afterwards: (API client, state as JSON)."""
    state, _ = up(opts, progress)
    try:
        if not state.operator.get("started"):
            raise RuntimeError(f"the operator did not start: {state.operator.get('reason')}")
        yield new_api_client(state.kubeconfig), state.to_json()
    finally:
        down(opts.dir, grace=5)


def wait_service_account(core: Any, namespace: str = NAMESPACE, timeout: float = 60.0) -> None:
    """Until the namespace's "default" ServiceAccount exists (kube-controller-manager makes it): the
    ServiceAccount admission plugin refuses pods before it."""
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + timeout
    while True:
        try:
            core.read_namespaced_service_account("default", namespace)
            return
        except ApiException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


@contextlib.contextmanager
def bare_cluster(prefix: str, nodes: int = 4, pool: int = 64) -> Iterator[tuple[Any, Any, Any]]:
    """A ``qosmos dev`` cluster of ``nodes`` fake nodes without an operator, with the bench namespace
    (and its default ServiceAccount): (API client with ``pool`` connections, CoreV1Api,
    CustomObjectsApi); torn down and its folder removed afterwards. The benchmarks that measure the
    apiserver or an in-process pass start from it."""
    from kubernetes import client, config

    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    opts = DevOptions(dir=tmp / "cluster", nodes=nodes, pools=(), detached=False, operator=False)
    state, _ = up(opts, _Quiet())
    try:
        cfg = client.Configuration()
        config.load_kube_config(config_file=state.kubeconfig, client_configuration=cfg)
        cfg.connection_pool_maxsize = pool
        api = client.ApiClient(cfg)
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        core.create_namespace({"metadata": {"name": NAMESPACE}})  # type: ignore[arg-type]  # validate_call: a V1Namespace
        wait_service_account(core)
        yield api, core, custom
    finally:
        down(opts.dir, grace=5)
        shutil.rmtree(tmp, ignore_errors=True)


def _prepare(api_client: Any, policy: str, placement: str, backfill: str, gpus: int, timeout: float = 300.0) -> float:
    """The namespace and one VirtualCluster over every node, Ready with all ``gpus`` (the operator has
    labelled every node for it): jobs applied then measure admission, not the VirtualCluster's set-up.
    Returns the seconds the VirtualCluster took to be ready."""
    from kubernetes import client

    t0 = time.monotonic()
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    # the client's validate_call turns the dict into the V1Namespace it is typed to take
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})  # type: ignore[arg-type]
    custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "virtualclusters",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "VirtualCluster",
            "metadata": {"name": VC_NAME},
            "spec": {"nodeSelector": {}, "policy": policy, "placement": placement, "backfill": backfill},
        },
    )

    def ready() -> bool:
        with contextlib.suppress(Exception):
            core.read_namespaced_service_account("default", NAMESPACE)  # pods need it
            vc = cast("dict[str, Any]", custom.get_cluster_custom_object(GROUP, VERSION, "virtualclusters", VC_NAME))
            st = vc.get("status") or {}
            ok = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
            return ok and int((st.get("gpus") or {}).get("total") or 0) == gpus
        return False

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return time.monotonic() - t0
        time.sleep(0.5)
    raise RuntimeError(f"VirtualCluster {VC_NAME} was not Ready with {gpus} GPUs within {timeout:.0f} s")


def _create(api_client: Any, watch: DLJobWatch, body: dict[str, Any]) -> None:
    from kubernetes import client

    client.CustomObjectsApi(api_client).create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "dljobs", body)
    watch.created(body["metadata"]["name"], time.time())


def _wait_done(
    watch: DLJobWatch, n: int, timeout: float, tick: Callable[[int, int], None] | None = None
) -> tuple[int, int]:
    """Until all ``n`` DLJobs finished or ``timeout`` s passed: (succeeded, failed)."""
    deadline = time.monotonic() + timeout
    while True:
        ok, bad = watch.count("Succeeded"), watch.count("Failed")
        if tick is not None:
            tick(ok + bad, n)
        if ok + bad >= n or time.monotonic() >= deadline:
            return ok, bad
        time.sleep(0.5)


def _quantiles(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None, "max": None}
    a = np.asarray(values, dtype=float)
    return {
        "p50": round(float(np.percentile(a, 50)), 3),
        "p99": round(float(np.percentile(a, 99)), 3),
        "max": round(float(a.max()), 3),
    }


def labelled_pods(api_client: Any, namespace: str, label: str) -> Iterator[dict[str, Any]]:
    """Every pod of ``namespace`` carrying ``label``, listed in pages of 1,000."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    cont: str | None = None
    while True:
        # _preload_content=False returns the raw urllib3 response (the client types the decoded V1PodList)
        resp = cast("BaseHTTPResponse", core.list_namespaced_pod(namespace, label_selector=label, limit=1000,
                                                                 _continue=cont, _preload_content=False))  # fmt: skip
        data = json.loads(resp.data)
        yield from data.get("items") or []
        cont = (data.get("metadata") or {}).get("continue")
        if not cont:
            return


def gang_starts(api_client: Any, namespace: str, label: str) -> dict[str, float]:
    """When each job's whole gang was running: the latest ``status.startTime`` of its pods (KWOK writes
    it when it starts a pod: a server-side time, whatever a watch saw late or missed), by the job name
    the pods carry in ``label``. Whole seconds (metav1.Time). Read once the jobs are done: finished pods
    stay (cleanPodPolicy Running keeps them; a Job keeps its pods)."""
    out: dict[str, float] = {}
    for p in labelled_pods(api_client, namespace, label):
        job = ((p.get("metadata") or {}).get("labels") or {}).get(label)
        t = parse_time((p.get("status") or {}).get("startTime"))
        if job and t is not None:
            out[job] = max(out.get(job, t), t)
    return out


def start_latency(seen: Mapping[str, Seen], starts: Mapping[str, float]) -> dict[str, float | None]:
    """Quantiles of (gang start - creation) over the jobs whose gang started, with their count.
    ``startTime`` is whole seconds (the start lies in [start, start + 1)) while the creation time is
    this process's clock: a gang started within its creation's second would come out negative. Each
    latency is the middle of the interval the two allow, which is never below 0."""
    lat = []
    for name, s in seen.items():
        if name in starts and math.isfinite(s.created):
            low, high = max(starts[name] - s.created, 0.0), max(starts[name] + 1.0 - s.created, 0.0)
            lat.append((low + high) / 2)
    return {**_quantiles(lat), "jobs": len(lat)}


# --------------------------------------------------------------------------- bench operator


@dataclass(slots=True)
class JobRow:
    name: str
    gpus: int
    kind: str
    cpu_milli: int
    memory_mib: int


def openb_jobs(n: int, path: Path | None = None) -> list[JobRow]:
    """The first ``n`` pods of the openb default trace as DLJobs: a GPU pod a training job of its GPU
    count (a GPU-sharing pod, gpu_milli < 1000, takes one whole GPU: a DLJob asks for whole GPUs), a
    CPU pod a ``cpu`` job; CPU and memory requests as the pod's."""
    p = path or shared_dir() / OPENB_DIR / OPENB_PODS
    out: list[JobRow] = []
    with open(p, newline="") as f:
        for r in csv.DictReader(f):
            gpus = int(r["num_gpu"] or 0)
            out.append(
                JobRow(
                    name=f"j{len(out):05d}",
                    gpus=gpus,
                    kind="training" if gpus else "cpu",
                    cpu_milli=int(r["cpu_milli"] or 0),
                    memory_mib=int(r["memory_mib"] or 0),
                )
            )
            if len(out) >= n:
                break
    if len(out) < n:
        raise InvalidInput("jobs", n, f"the openb trace {p} has only {len(out)} pods")
    return out


def bench_workload(
    jobs: int, nodes: int, run_s: float, spread_s: float, seed: int, name: str, workdir: Path | None, **dev: Any
) -> tuple[list[JobRow], list[float], Path, DevOptions]:
    """What an operator bench applies, the same for qosmos and for the controller it is measured beside:
    the first ``jobs`` openb pods, each run ``run_s`` × U(1 − spread, 1 + spread) seconds (seeded), on
    ``nodes`` openb nodes of a fresh ``qosmos dev`` cluster in ``workdir`` (a temporary folder if None)."""
    if jobs < 1 or not 1 <= nodes <= 1523:
        raise InvalidInput("jobs/nodes", (jobs, nodes), "jobs >= 1 and nodes in [1, 1523] (the openb node list)")
    rows = openb_jobs(jobs)
    rng = random.Random(seed)
    runs = [run_s * rng.uniform(1 - spread_s, 1 + spread_s) for _ in rows]
    tmp = Path(tempfile.mkdtemp(prefix=f"qosmos-bench-{name}-")) if workdir is None else workdir
    opts = DevOptions(
        dir=tmp / "cluster",
        node_list=shared_dir() / OPENB_DIR / ALL_NODE_CSV,
        nodes=nodes if nodes < 1523 else None,
        pools=(),
        detached=False,
        start_timeout=300.0,
        **dev,
    )
    return rows, runs, tmp, opts


def admission_stats(seen: Mapping[str, Seen], t0: float) -> dict[str, Any]:
    """Admissions and their latencies from what a watch saw, the same for every controller measured:
    the window runs from the first create (``t0``) to the last admission, i.e. what the controller
    sustains with the whole queue in front of it (creation is part of it, as a user applying 1,000
    jobs sees it)."""
    admitted = sorted(s.phases["Admitted"] for s in seen.values() if "Admitted" in s.phases)
    to_running = [s.phases["Running"] - s.created for s in seen.values() if "Running" in s.phases]
    to_admitted = [s.phases["Admitted"] - s.created for s in seen.values() if "Admitted" in s.phases]
    window = (admitted[-1] - t0) if admitted else math.nan
    return {
        "admissions": len(admitted),
        "admission_window_s": round(window, 3),
        "admissions_per_s": round(len(admitted) / window, 2) if admitted and window > 0 else None,
        "apply_to_admitted_s": _quantiles(to_admitted),
        "apply_to_running_s": _quantiles(to_running),
    }


def bench_operator(
    jobs: int = 1000,
    nodes: int = 1523,
    run_s: float = 30.0,
    spread_s: float = 0.5,
    policy: str = "fifo",
    placement: str = "consolidate",
    timeout: float = 1200.0,
    workdir: Path | None = None,
    seed: int = 0,
    progress: Progress | None = None,
    tick: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """``jobs`` openb DLJobs applied at once (16 clients in parallel) on ``nodes`` openb nodes; each
    runs ``run_s`` × U(1 − spread, 1 + spread) seconds."""
    rows, runs, tmp, opts = bench_workload(jobs, nodes, run_s, spread_s, seed, "operator", workdir)
    try:
        with dev_cluster(opts, progress or _Quiet()) as (api_client, state):
            vc_ready = _prepare(api_client, policy, placement, "none", sum(r["gpu"] for r in opts.node_rows()))
            proc = ProcStats(int(state["operator"]["pid"]))
            comps = {c["name"]: ProcStats(int(c["pid"])) for c in state["components"]}
            comps.setdefault("qosmos-operator", proc)
            cpu0 = proc.cpu_s()
            comp0 = {k: p.cpu_s() for k, p in comps.items()}
            with DLJobWatch(api_client, NAMESPACE) as watch:
                t0 = time.time()
                bodies = [
                    dljob_manifest(
                        r.name, gpus=r.gpus, run_s=x, kind=r.kind, cpu_milli=r.cpu_milli, memory_mib=r.memory_mib
                    )
                    for r, x in zip(rows, runs, strict=True)
                ]
                with ThreadPoolExecutor(16) as pool:
                    list(pool.map(lambda b: _create(api_client, watch, b), bodies))
                applied = time.time() - t0
                ok, bad = _wait_done(watch, jobs, timeout, tick)
                cpu = proc.cpu_s() - cpu0
                by_comp = {k: round(p.cpu_s() - comp0[k], 1) for k, p in comps.items()}
                peak = proc.peak_rss_mb()
                seen = watch.snapshot()
                starts = gang_starts(api_client, NAMESPACE, LABEL_JOB)
    finally:
        if workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return {
        "jobs": jobs,
        "nodes": nodes,
        "gpu_jobs": sum(1 for r in rows if r.gpus),
        "gpus_requested": sum(r.gpus for r in rows),
        "run_s": run_s,
        "policy": policy,
        "placement": placement,
        "succeeded": ok,
        "failed": bad,
        "all_succeeded": ok == jobs,
        "vc_ready_s": round(vc_ready, 1),  # before the jobs: the operator labelling every node for the VC
        "apply_s": round(applied, 3),
        **admission_stats(seen, t0),
        # from the pods' own start times: what bench operator --against kueue compares on both sides
        "apply_to_gang_start_s": start_latency(seen, starts),
        "operator": {"cpu_s": round(cpu, 2), "peak_rss_mb": round(peak, 1), "pid": proc.pid},
        # where the machine's CPU went from the first create to the last finish (the whole cluster
        # shares this machine's cores: on 2 cores the apiserver and KWOK's 1,523 node heartbeats count)
        "cpu_s_by_component": by_comp,
        "machine_cores": os.cpu_count(),
        "targets": {"admissions_per_s": ">= 50", "operator_peak_rss_mb": "<= 500"},
    }


# --------------------------------------------------------------------------- bench fidelity


@dataclass(slots=True)
class SliceJob:
    """One job of the slice, in the bench's (compressed) seconds from the first arrival."""

    name: str
    submit: float
    gpus: int
    run_s: float
    cpu_milli: int = 0
    memory_mib: int = 0


def trace_slice(
    trace: str,
    jobs: int,
    *,
    fmt: str | None = None,
    offset: int = 0,
    max_gpus: int,
    span_s: float = 120.0,
    speedup: float | None = None,
    min_run_s: float = 60.0,
    max_run_s: float = 240.0,
    seed: int = 0,
) -> tuple[list[SliceJob], dict[str, Any]]:
    """``jobs`` GPU jobs of ``trace`` (by submit time, from ``offset``) that fit the cluster, with
    arrivals and run times divided by ``speedup`` (default: what fits the arrivals into ``span_s``),
    run times then clamped to [min_run_s, max_run_s] so the live side's fixed overheads (a few
    seconds per job) stay small against them. Both sides get exactly these numbers."""
    from qosmos.simulator.traces import load_trace

    if jobs < 2:
        raise InvalidInput("jobs", jobs, "must be >= 2 (pairs are compared)")
    if not 0 < min_run_s <= max_run_s:
        raise InvalidInput("min_run_s", min_run_s, "must be > 0 and <= max_run_s")
    tr = load_trace(trace, fmt, seed=seed, jobs=max(10_000, 4 * (offset + jobs)))
    usable = sorted(
        (j for j in tr.jobs if j.duration is not None and 1 <= j.gpus <= max_gpus and j.kind != "cpu"),
        key=lambda j: j.submit_time,
    )[offset : offset + jobs]
    if len(usable) < jobs:
        raise InvalidInput("jobs", jobs, f"{trace} has only {len(usable)} GPU jobs with run times from {offset}")
    t0 = usable[0].submit_time
    span = usable[-1].submit_time - t0
    factor = speedup if speedup is not None else max(1.0, span / span_s)
    if not factor > 0:
        raise InvalidInput("speedup", speedup, "must be > 0")
    out: list[SliceJob] = []
    clamped = 0
    for i, j in enumerate(usable):
        assert j.duration is not None
        raw = j.duration / factor
        run = min(max(raw, min_run_s), max_run_s)
        clamped += run != raw
        out.append(SliceJob(f"f{i:04d}", (j.submit_time - t0) / factor, j.gpus, round(run, 3)))
    info = {
        "trace": trace,
        "offset": offset,
        "speedup": round(factor, 3),
        "arrival_span_s": round(span / factor, 1),
        "run_s_clamped": clamped,
        "run_s_range": [min_run_s, max_run_s],
    }
    return out, info


def write_native(jobs: Sequence[SliceJob], node_rows: Sequence[dict[str, Any]], directory: Path) -> Path:
    """The slice as a native trace (``jobs.csv``) with its ``nodes.csv``: the dev cluster's nodes with
    the switch labels ``fake_node_manifest`` gives them (32 nodes a rack, 4 racks a switch)."""
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "nodes.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "gpus", "vc", "switch", "gpu_model", "cpu_milli", "memory_mib"])
        for i, r in enumerate(node_rows):
            w.writerow(
                [
                    r["sn"].lower(),
                    r["gpu"],
                    VC_NAME,
                    f"switch-{i // 32 // 4:03d}",
                    r["model"],
                    r["cpu_milli"],
                    r["memory_mib"],
                ]
            )
    path = directory / "jobs.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "submit", "gpus", "duration", "vc", "cpu_milli", "memory_mib"])
        for j in jobs:
            w.writerow([j.name, f"{j.submit:.3f}", j.gpus, f"{j.run_s:.3f}", VC_NAME, j.cpu_milli, j.memory_mib])
    return path


def simulate_slice(
    trace_csv: Path, out: Path, policy: str, placement: str, backfill: str
) -> dict[str, dict[str, float]]:
    """``qosmos simulate`` on the slice (the command a user runs); id -> {submit, start, end}."""
    cmd = [
        sys.executable, "-m", "qosmos", "simulate",
        "--trace", str(trace_csv), "--format", "native", "--node-list", str(trace_csv.with_name("nodes.csv")),
        "--policy", policy, "--placement", placement, "--backfill", backfill,
        "--cross-switch-penalty", "1.0",  # KWOK runs a pod exactly its run-duration, wherever it is
        "--out", str(out), "--no-plots", "--quiet",
    ]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"qosmos simulate failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
    rows: dict[str, dict[str, float]] = {}
    with open(out / "jobs.csv", newline="") as f:
        for r in csv.DictReader(f):
            rows[r["id"]] = {k: float(r[k]) if r[k] else math.nan for k in ("submit", "start", "end")}
    return rows


def pair_order_agreement(sim: Sequence[float], live: Sequence[float], gap: float = ORDER_GAP_S) -> tuple[float, int]:
    """Of the job pairs whose simulated starts differ by >= ``gap`` s, the fraction the live cluster
    started in the same order (a live tie counts as disagreement): (fraction, pairs judged)."""
    s = np.asarray(sim, dtype=float)
    v = np.asarray(live, dtype=float)
    if s.shape != v.shape:
        raise ValueError("sim and live must have one start per job")
    ds = s[:, None] - s[None, :]
    dv = v[:, None] - v[None, :]
    judged = np.triu(np.abs(ds) >= gap, k=1) & np.isfinite(ds) & np.isfinite(dv)
    n = int(judged.sum())
    if n == 0:
        return math.nan, 0
    agree = np.sign(ds[judged]) == np.sign(dv[judged])
    return float(agree.mean()), n


def mean_relative_jct_difference(sim: Sequence[float], live: Sequence[float]) -> float:
    """mean over jobs of |JCT_live − JCT_sim| / JCT_sim."""
    s = np.asarray(sim, dtype=float)
    v = np.asarray(live, dtype=float)
    ok = np.isfinite(s) & np.isfinite(v) & (s > 0)
    return float(np.mean(np.abs(v[ok] - s[ok]) / s[ok])) if ok.any() else math.nan


def eta_points(
    etas: Sequence[tuple[float, float | None]], start: float, lead: float = ETA_LEAD_S
) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """The two ETAs of a job judged against its start, each as (seen at, ETA) or None: the first ETA
    its watch saw (at submission) and the last value ``status.eta`` had at or before ``start − lead``
    (None when it was unset then, or the job started less than ``lead`` s after its first event)."""
    first = next(((at, eta) for at, eta in etas if eta is not None), None)
    before = None
    if math.isfinite(start):
        last = [(at, eta) for at, eta in etas if at <= start - lead]
        if last and (eta := last[-1][1]) is not None:
            before = (last[-1][0], eta)
    return first, before


def finished_by(ends: Sequence[float], t: float) -> int:
    """How many jobs had finished at or before ``t`` (``ends`` in any order; NaN never finished)."""
    return sum(1 for e in ends if e <= t)


def _eta_stats(rows: Sequence[Mapping[str, Any]], which: str, history: int) -> dict[str, Any]:
    """Median |ETA − start| (s) and median |ETA − start| / wait over the rows whose ``which`` ETA
    exists and was seen once ``history`` jobs had finished."""
    err, rel, signed = [], [], []
    for r in rows:
        e = r[f"eta_{which}_error"]
        if not math.isfinite(e) or r[f"eta_{which}_history"] < history:
            continue
        err.append(abs(e))
        signed.append(e)
        if r["wait"] > 0:
            rel.append(abs(e) / r["wait"])

    def med(v: list[float]) -> float | None:
        return round(float(np.median(v)), 4) if v else None

    return {
        "jobs_with_eta": len(err),
        "median_abs_error_s": med(err),
        "median_abs_error_of_wait": med(rel),  # per job |ETA − start| / (start − submit), jobs that waited
        "mean_error_s": round(float(np.mean(signed)), 2) if signed else None,  # < 0: early on average
        "early": sum(1 for e in signed if e < 0),
    }


def eta_summary(
    rows: Sequence[Mapping[str, Any]], history: int = ETA_HISTORY, lead: float = ETA_LEAD_S
) -> dict[str, Any]:
    """The ETA errors of a fidelity run (rows as :func:`bench_fidelity` writes them: ``wait`` =
    start − submit; ``eta_submit_*`` / ``eta_before_*``: the ETA at submission and the one ``lead`` s
    before the start, with ``_error`` = ETA − start (NaN without one) and ``_history`` = jobs finished
    when it was seen). ``all``: every ETA; ``after_history``: only ETAs seen once ``history`` jobs had
    finished (the predictor had that many observations), the slice the target is judged on."""
    return {
        "lead_s": lead,
        "history": history,
        "jobs_that_waited": sum(1 for r in rows if r["wait"] > 0),
        "all": {"at_submit": _eta_stats(rows, "submit", 0), "before_start": _eta_stats(rows, "before", 0)},
        "after_history": {
            "at_submit": _eta_stats(rows, "submit", history),
            "before_start": _eta_stats(rows, "before", history),
        },
    }


def bench_fidelity(
    trace: str,
    jobs: int = 40,
    *,
    fmt: str | None = None,
    offset: int = 0,
    nodes: int = 4,
    gpus_per_node: int = 8,
    gpu_model: str = "V100M32",
    span_s: float = 120.0,
    speedup: float | None = None,
    min_run_s: float = 60.0,
    max_run_s: float = 240.0,
    policy: str = "fifo",
    placement: str = "consolidate",
    backfill: str = "none",
    timeout: float = 3600.0,
    out: Path | None = None,
    seed: int = 0,
    eta_history: int = ETA_HISTORY,
    eta_lead_s: float = ETA_LEAD_S,
    progress: Progress | None = None,
    tick: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """The slice live on a ``qosmos dev`` cluster of ``nodes`` × ``gpus_per_node``, then simulated;
    every job's ETAs against its real start (:func:`eta_summary`)."""
    if eta_history < 0 or not eta_lead_s >= 0:
        raise InvalidInput("eta_history/eta_lead_s", (eta_history, eta_lead_s), "must be >= 0")
    opts = DevOptions(
        dir=Path(tempfile.mkdtemp(prefix="qosmos-bench-fidelity-")) / "cluster",
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        gpu_model=gpu_model,
        pools=(),
        detached=False,
    )
    opts.validate()
    sl, info = trace_slice(
        trace,
        jobs,
        fmt=fmt,
        offset=offset,
        max_gpus=nodes * gpus_per_node,
        span_s=span_s,
        speedup=speedup,
        min_run_s=min_run_s,
        max_run_s=max_run_s,
        seed=seed,
    )
    work = out if out is not None else opts.dir.parent
    trace_csv = write_native(sl, opts.node_rows(), work / "slice")
    try:
        with dev_cluster(opts, progress or _Quiet()) as (api_client, _state):
            _prepare(api_client, policy, placement, backfill, nodes * gpus_per_node)
            with DLJobWatch(api_client, NAMESPACE) as watch:
                t0 = time.time()
                for j in sl:  # at its arrival time, one client: the order of creation is the trace's
                    delay = t0 + j.submit - time.time()
                    if delay > 0:
                        time.sleep(delay)
                    _create(api_client, watch, dljob_manifest(j.name, gpus=j.gpus, run_s=j.run_s))
                ok, bad = _wait_done(watch, len(sl), timeout, tick)
                seen = watch.snapshot()
        sim = simulate_slice(trace_csv, work / "simulated", policy, placement, backfill)
    finally:
        if out is None:
            shutil.rmtree(opts.dir.parent, ignore_errors=True)
    rows = []
    ends = [min(s.phases.get("Succeeded", math.inf), s.phases.get("Failed", math.inf)) for s in seen.values()]
    for j in sl:
        s = seen.get(j.name, Seen())
        live_start = s.phases.get("Admitted", math.nan) - t0
        live_end = s.phases.get("Succeeded", math.nan) - t0
        live_submit = s.created - t0
        sm = sim.get(j.name, {"submit": math.nan, "start": math.nan, "end": math.nan})
        row: dict[str, Any] = {
            "id": j.name,
            "gpus": j.gpus,
            "run_s": j.run_s,
            "submit": j.submit,
            "live_submit": live_submit,
            "live_start": live_start,
            "live_end": live_end,
            "sim_start": sm["start"],
            "sim_end": sm["end"],
            "live_jct": live_end - live_submit,
            "sim_jct": sm["end"] - sm["submit"],
            "wait": live_start - live_submit,
        }
        points = eta_points(s.etas, live_start + t0, eta_lead_s)
        for which, point in zip(("submit", "before"), points, strict=True):
            at, eta = point if point is not None else (math.nan, math.nan)
            row[f"eta_{which}"] = eta - t0
            row[f"eta_{which}_seen"] = at - t0
            row[f"eta_{which}_error"] = eta - t0 - live_start  # < 0: the ETA was early
            row[f"eta_{which}_history"] = finished_by(ends, at) if point is not None else -1
        rows.append(row)
    if out is not None:
        with open(out / "fidelity.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()} for r in rows)
        with open(out / "etas.json", "w") as f:  # every status.eta seen, (seen at, ETA) from the first create
            json.dump({k: [[at - t0, None if e is None else e - t0] for at, e in v.etas] for k, v in seen.items()}, f)
    order, pairs = pair_order_agreement([r["sim_start"] for r in rows], [r["live_start"] for r in rows])
    jct = mean_relative_jct_difference([r["sim_jct"] for r in rows], [r["live_jct"] for r in rows])
    lag = [r["live_submit"] - r["submit"] for r in rows]
    return {
        **info,
        "jobs": len(sl),
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "policy": policy,
        "placement": placement,
        "backfill": backfill,
        "succeeded": ok,
        "failed": bad,
        "simulated": sum(1 for r in rows if math.isfinite(r["sim_end"])),
        "pair_order_agreement": None if math.isnan(order) else round(order, 4),
        "pairs_judged": pairs,
        "mean_relative_jct_difference": None if math.isnan(jct) else round(jct, 4),
        "submit_lag_s": _quantiles(lag),  # how late this process created jobs against their arrival
        "mean_jct_s": {
            "live": round(float(np.nanmean([r["live_jct"] for r in rows])), 2),
            "sim": round(float(np.nanmean([r["sim_jct"] for r in rows])), 2),
        },
        "eta": eta_summary(rows, eta_history, eta_lead_s),
        "targets": {
            "pair_order_agreement": ">= 0.95",
            "mean_relative_jct_difference": "<= 0.05",
            "eta.after_history.*.median_abs_error_of_wait": "<= 0.25",
        },
        "out": str(out) if out is not None else None,
    }
