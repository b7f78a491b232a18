"""Extender benchmarks behind ``qosmos bench extender`` and ``qosmos bench scheduling``.

``extender``: HTTP /filter + /prioritize latency with N openb nodes loaded straight into
the cache (no control plane), against a bare JSON echo server (same aiohttp server,
``orjson`` parse + dump of the same bodies) as the floor. Server and client run in
separate processes so the client's work never shares the server's GIL.

``scheduling``: end-to-end scheduling throughput of openb GPU pods on the 1,523 fake openb
nodes of a real control plane, with a kube-scheduler using the extender and with one
using the default profile alone.

Only the benchmarks need a throw-away control plane and fake nodes: ``qosmos.dev`` (the same
one ``qosmos dev up`` starts) is imported inside the functions that use them, never at module
level, so serving the extender never loads it.
"""

from __future__ import annotations

import csv
import http.client
import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

import numpy as np
import orjson

if TYPE_CHECKING:
    # what the client returns for a call with _preload_content=False, whatever its annotation says
    from urllib3 import HTTPResponse

GPU_RESOURCE = "nvidia.com/gpu"


# ---- data ------------------------------------------------------------------------------------
def openb_node_manifests(n: int) -> list[dict[str, Any]]:
    """``n`` fake openb Node objects: the 1,523 real nodes (repeated with a suffix past that;
    an even spread over them below, so a small cluster still mixes GPU and CPU nodes)."""
    from qosmos.dev.fakenodes import fake_node_manifests, openb_nodes, spread_sample

    rows = spread_sample(openb_nodes(all_nodes=True), n)
    out = []
    for i in range(n):
        r = dict(rows[i % len(rows)])
        if i >= len(rows):
            r["sn"] = f"{r['sn']}-{i // len(rows)}"
        out.append(r)
    return fake_node_manifests(out)


def openb_gpu_pods(limit: int | None = None, path: str | Path | None = None) -> list[dict[str, Any]]:
    """openb default-list GPU pods as rows {name, cpu_milli, memory_mib, num_gpu, gpu_spec}."""
    from qosmos.dev.fakenodes import OPENB_DIR, shared_dir

    p = Path(path) if path else shared_dir() / OPENB_DIR / "openb_pod_list_default.csv"
    rows = []
    with open(p, newline="") as f:
        for r in csv.DictReader(f):
            if int(r["num_gpu"] or 0) <= 0:
                continue
            rows.append(
                {
                    "name": r["name"].strip(),
                    "cpu_milli": int(r["cpu_milli"]),
                    "memory_mib": int(r["memory_mib"]),
                    "num_gpu": int(r["num_gpu"]),
                    "gpu_spec": (r.get("gpu_spec") or "").strip(),
                }
            )
            if limit is not None and len(rows) >= limit:
                break
    return rows


def pod_manifest(
    row: dict[str, Any], scheduler: str, uid: str | None = None, namespace: str = "default"
) -> dict[str, Any]:
    """A Pod object for one openb pod row (its GPU-model list becomes our annotation)."""
    from qosmos.dev.fakenodes import gpu_pod_manifest

    pod = gpu_pod_manifest(
        row["name"].lower(),
        int(row["num_gpu"]),
        scheduler,
        cpu_milli=int(row["cpu_milli"]),
        memory_mib=int(row["memory_mib"]),
        annotations={"qosmos.io/gpu-models": row["gpu_spec"]} if row.get("gpu_spec") else None,
        labels={"app": "qosmos-bench"},
        namespace=namespace,
    )
    if uid:
        pod["metadata"]["uid"] = uid
    return pod


# ---- servers (child processes) ---------------------------------------------------------------
def _serve_extender(n_nodes: int, assume: bool, q: Any) -> None:
    import asyncio
    import gc

    from qosmos.extender.cache import ClusterCache, node_from_object
    from qosmos.extender.http_server import ExtenderHTTP, HTTPServer
    from qosmos.extender.service import ExtenderService

    cache = ClusterCache()
    cache.replace_nodes(node_from_object(m) for m in openb_node_manifests(n_nodes))
    cache.mark_synced()
    cache.state()
    server = HTTPServer(ExtenderHTTP(ExtenderService(cache, assume=assume)))
    _run_forever(server.start_async, lambda: server.port, q, asyncio, gc)


def _serve_aiohttp(handler: Callable[[Any], Any], q: Any) -> None:
    """Serve one bare aiohttp handler on a free loopback port (the benchmark floors)."""
    import asyncio
    import gc

    from aiohttp import web

    state: dict[str, Any] = {}

    async def start() -> None:
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(web.Server(handler, access_log=None), "127.0.0.1", 0)
        state["port"] = srv.sockets[0].getsockname()[1]

    _run_forever(start, lambda: state["port"], q, asyncio, gc)


async def _echo_handler(request: Any) -> Any:
    """Parse and re-serialise the body: the floor every JSON extender pays."""
    from aiohttp import web

    body = await request.read()
    return web.Response(body=orjson.dumps(orjson.loads(body)), content_type="application/json")


async def _noop_extender_handler(request: Any) -> Any:
    """A protocol-only extender (keeps every node, scores 0): the floor for end-to-end throughput."""
    from aiohttp import web

    args = orjson.loads(await request.read())
    names = args.get("NodeNames") or []
    if request.path.endswith("filter"):
        out: Any = {"NodeNames": names, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}
    else:
        out = [{"Host": n, "Score": 0} for n in names]
    return web.Response(body=orjson.dumps(out), content_type="application/json")


def _serve_echo(q: Any) -> None:
    _serve_aiohttp(_echo_handler, q)


def _serve_noop_extender(q: Any) -> None:
    _serve_aiohttp(_noop_extender_handler, q)


def _run_forever(start: Callable[[], Any], port: Callable[[], int], q: Any, asyncio: Any, gc: Any) -> None:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    loop.run_until_complete(start())
    gc.collect()
    gc.freeze()
    q.put(port())
    loop.run_forever()


# ---- client --------------------------------------------------------------------------------
def _drive(ports: tuple[int, int], bodies: list[tuple[str, bytes]], warmup: int) -> tuple[list[float], list[float]]:
    """Send every body to both servers in turn (extender, then floor), so both see the same machine noise."""
    conns = [http.client.HTTPConnection("127.0.0.1", p, timeout=30) for p in ports]
    out: tuple[list[float], list[float]] = ([], [])
    headers = {"Content-Type": "application/json"}
    for k, (path, body) in enumerate(bodies):
        for conn, lat in zip(conns, out, strict=True):
            t0 = time.perf_counter()
            conn.request("POST", path, body, headers)
            resp = conn.getresponse()
            data = resp.read()
            dt = time.perf_counter() - t0
            if resp.status != 200:
                raise RuntimeError(f"{path} -> {resp.status}: {data[:200]!r}")
            if k >= warmup:
                lat.append(dt)
    for conn in conns:
        conn.close()
    return out


def _bodies(n_nodes: int, requests: int, extender_port: int | None) -> list[tuple[str, bytes]]:
    """Alternating /filter and /prioritize bodies: openb pods over every node name."""
    names = [m["metadata"]["name"] for m in openb_node_manifests(n_nodes)]
    pods = openb_gpu_pods()
    out = []
    conn = http.client.HTTPConnection("127.0.0.1", extender_port, timeout=30) if extender_port else None
    for i in range(requests):
        row = pods[i % len(pods)]
        pod = pod_manifest({**row, "name": f"{row['name']}-{i}"}, "qosmos-scheduler", uid=f"bench-{i}")
        fbody = orjson.dumps({"Pod": pod, "NodeNames": names})
        kept = names
        if conn is not None:
            conn.request("POST", "/filter", fbody, {"Content-Type": "application/json"})
            kept = orjson.loads(conn.getresponse().read())["NodeNames"]
        out.append(("/filter", fbody))
        out.append(("/prioritize", orjson.dumps({"Pod": pod, "NodeNames": kept})))
    if conn is not None:
        conn.close()
    return out


def _start(target: Callable[..., None], *args: Any) -> tuple[Any, int]:
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, q), daemon=True)
    proc.start()
    return proc, int(q.get(timeout=120))


def bench_extender(nodes: int = 1523, requests: int = 2000, warmup: int = 200, assume: bool = False) -> dict[str, Any]:
    """Latency of /filter and /prioritize (each request timed alone) and of the echo floor, interleaved."""
    ext, ext_port = _start(_serve_extender, nodes, assume)
    echo, echo_port = _start(_serve_echo)
    try:
        bodies = _bodies(nodes, requests + warmup // 2, ext_port)
        lat_list, floor_list = _drive((ext_port, echo_port), bodies, warmup)
        server = _server_side_ms(f"http://127.0.0.1:{ext_port}/metrics")
    finally:
        for proc in (ext, echo):
            proc.terminate()
            proc.join(5)
    lat, floor = np.asarray(lat_list), np.asarray(floor_list)
    filt, prio = lat[0::2], lat[1::2]
    ms = 1000.0
    p99, floor_p99 = float(np.percentile(lat, 99)) * ms, float(np.percentile(floor, 99)) * ms
    return {
        "nodes": nodes,
        "requests": int(filt.size),  # pods, as --requests counts them
        "http_requests": int(lat.size),  # one /filter and one /prioritize per pod
        "p50_ms": round(float(np.percentile(lat, 50)) * ms, 3),
        "p99_ms": round(p99, 3),
        "floor_p50_ms": round(float(np.percentile(floor, 50)) * ms, 3),
        "floor_p99_ms": round(floor_p99, 3),
        "p99_over_floor": round(p99 / floor_p99, 2),
        "filter_p50_ms": round(float(np.percentile(filt, 50)) * ms, 3),
        "filter_p99_ms": round(float(np.percentile(filt, 99)) * ms, 3),
        "prioritize_p50_ms": round(float(np.percentile(prio, 50)) * ms, 3),
        "prioritize_p99_ms": round(float(np.percentile(prio, 99)) * ms, 3),
        "request_bytes_filter": len(bodies[0][1]),
        "server_side": server,
        "cpus": os.cpu_count(),
    }


# ---- end-to-end scheduling ------------------------------------------------------------------
class _SchedulerOptions(TypedDict, total=False):
    """The options of ``qosmos_scheduler_config`` a benchmark overrides."""

    percentage_of_nodes_to_score: int


def _bench_scheduler_config(name: str, extender_url: str | None, percentage: int | None = None) -> str:
    """The shipped qosmos-scheduler config (or the default profile alone), renamed ``name``.

    ``percentage`` overrides the qosmos profile's percentageOfNodesToScore (0: kube-scheduler's adaptive default).
    """
    import yaml
    from qosmos.extender.schedconfig import qosmos_scheduler_config, scheduler_config

    if extender_url:
        kw: _SchedulerOptions = {} if percentage is None else {"percentage_of_nodes_to_score": percentage}
        cfg = yaml.safe_load(qosmos_scheduler_config(extender_url, scheduler_name=name, **kw))
    else:
        cfg = yaml.safe_load(scheduler_config(name))
    # kube-scheduler's client defaults (qps 50, burst 100) would cap binding, not scheduling.
    cfg["clientConnection"] = {"qps": 5000, "burst": 10000}
    return yaml.safe_dump(cfg, sort_keys=False)


def start_extender_process(
    kubeconfig: Path, log_path: Path, http_port: int, grpc_port: int = 0, extra_args: Sequence[str] = ()
) -> subprocess.Popen[bytes]:
    """``qosmos extender serve`` as a child process: plaintext on loopback (``--insecure``) unless
    ``extra_args`` carries the ``--tls-*`` files."""
    log = open(log_path, "ab")  # noqa: SIM115 - lives as long as the child
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "qosmos",
            "extender",
            "serve",
            "--kubeconfig",
            str(kubeconfig),
            "--http-host",
            "127.0.0.1",
            "--http-port",
            str(http_port),
            "--grpc-port",
            str(grpc_port),
            *(() if any(a.startswith("--tls-") for a in extra_args) else ("--insecure",)),
            *extra_args,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_http_ok(url: str, timeout: float = 60.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout:.0f}s")


def _server_side_ms(url: str) -> dict[str, float]:
    """Mean server-side latency per verb from the extender's /metrics."""
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for line in text.splitlines():
        for table, suffix in ((sums, "_sum{"), (counts, "_count{")):
            if line.startswith("qosmos_extender_request_seconds" + suffix):
                verb = line.split('verb="', 1)[1].split('"', 1)[0]
                table[verb] = float(line.rsplit(" ", 1)[1])
    return {f"{v}_mean_ms": round(1000 * sums[v] / counts[v], 3) for v in sums if counts.get(v)} | {
        f"{v}_calls": counts[v] for v in counts
    }


def _create_pods(api: Any, namespace: str, manifests: list[dict[str, Any]], workers: int = 16) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from kubernetes import client

    v1 = client.CoreV1Api(api)

    def one(m: dict[str, Any]) -> None:
        # a dict body: the client's validate_call builds the V1Pod from it
        v1.create_namespaced_pod(namespace, m, _preload_content=False)  # type: ignore[arg-type]

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, manifests))


def _bound_times(
    api: Any, namespace: str, expected: int, timeout: float, started: threading.Event, idle: float = 15.0
) -> list[float]:
    """Watch the namespace's pods; monotonic times at which each pod was first seen bound.

    Stops when every pod is bound, at ``timeout``, or after ``idle`` seconds without a new
    bind once binding has begun: pods that can never fit (e.g. a GPU model constraint only
    the extender enforces) must not make the run wait out the timeout.
    """
    from kubernetes import client, watch

    v1 = client.CoreV1Api(api)
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    w = watch.Watch()

    def quiet() -> bool:
        return bool(seen) and time.monotonic() - max(seen.values()) > idle

    def note(obj: dict[str, Any]) -> None:
        if (obj.get("spec") or {}).get("nodeName"):
            seen.setdefault(obj["metadata"]["name"], time.monotonic())

    rv = None
    while len(seen) < expected and time.monotonic() < deadline and not quiet():
        if rv is None:  # list once (and again only if the watch expires), then resume the watch
            data = orjson.loads(cast("HTTPResponse", v1.list_namespaced_pod(namespace, _preload_content=False)).data)
            for it in data["items"]:
                note(it)
            rv = data["metadata"]["resourceVersion"]
            started.set()
        try:
            for ev in w.stream(
                v1.list_namespaced_pod, namespace, resource_version=rv, timeout_seconds=5, deserialize=False
            ):
                obj = ev["object"] if isinstance(ev["object"], dict) else {}
                if ev["type"] == "ERROR":
                    rv = None
                    break
                note(obj)
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if len(seen) >= expected or time.monotonic() > deadline or quiet():
                    w.stop()
                    break
        except client.ApiException as exc:
            if exc.status != 410:
                raise
            rv = None
    return sorted(seen.values())


def _cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user + system) each named process has used so far, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for name, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[name] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14, 15 of stat)
    return out


def _component_pids(cp: Any, extra: dict[str, int] | None = None) -> dict[str, int]:
    # Running components only; the newest kube-scheduler wins the key (older ones have stopped).
    pids = {
        ("kube-scheduler" if c.name.startswith("kube-scheduler-") else c.name): c.proc.pid
        for c in cp.components
        if c.running
    }
    return pids | {"bench-client": os.getpid()} | (extra or {})


def _packing(api: Any, namespace: str) -> dict[str, Any]:
    """How tightly the bound pods sit: nodes used, GPUs per used node, idle GPUs left on used nodes.

    Consolidation (Helios Alg. 1, GENIE's CER placement) shows as fewer nodes and fewer idle
    GPUs stranded on them; kube-scheduler's default LeastAllocated spreads instead.
    """
    from kubernetes import client

    v1 = client.CoreV1Api(api)
    cap = {
        n["metadata"]["name"]: int(n["status"]["capacity"].get(GPU_RESOURCE, 0))
        for n in orjson.loads(cast("HTTPResponse", v1.list_node(_preload_content=False)).data)["items"]
    }
    used: dict[str, int] = {}
    pods = orjson.loads(cast("HTTPResponse", v1.list_namespaced_pod(namespace, _preload_content=False)).data)
    for p in pods["items"]:
        node = p["spec"].get("nodeName")
        if node:
            req = p["spec"]["containers"][0]["resources"].get("limits", {}).get(GPU_RESOURCE, "0")
            used[node] = used.get(node, 0) + int(req)
    gpus = sum(used.values())
    return {
        "nodes_used": len(used),
        "gpus_per_used_node": round(gpus / len(used), 2) if used else 0.0,
        "idle_gpus_on_used_nodes": sum(max(0, cap.get(n, 0) - g) for n, g in used.items()),
    }


def _sample_cpu(
    cp: Any,
    extra_pids: dict[str, int] | None,
    samples: list[tuple[float, dict[str, float]]],
    until: threading.Thread,
    every: float = 0.05,
) -> None:
    """Append (monotonic time, CPU seconds per process) every ``every`` s while ``until`` runs."""
    while True:
        samples.append((time.monotonic(), _cpu_seconds(_component_pids(cp, extra_pids))))
        if not until.is_alive():
            return
        time.sleep(every)


def _run_one(
    cp: Any,
    api: Any,
    scheduler: str,
    extender_url: str | None,
    pods: list[dict[str, Any]],
    timeout: float,
    extra_pids: dict[str, int] | None = None,
    percentage: int | None = None,
) -> dict[str, Any]:
    import uuid

    from kubernetes import client

    v1 = client.CoreV1Api(api)
    ns = f"bench-{uuid.uuid4().hex[:8]}"
    # a dict body: the client's validate_call builds the V1Namespace from it
    v1.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})  # type: ignore[arg-type]
    for _ in range(150):
        try:
            v1.read_namespaced_service_account("default", ns)
            break
        except client.ApiException:
            time.sleep(0.2)
    manifests = [pod_manifest(r, scheduler, namespace=ns) for r in pods]
    t0 = time.monotonic()
    _create_pods(api, ns, manifests)
    create_s = time.monotonic() - t0
    started = threading.Event()
    result: list[list[float]] = []
    watcher = threading.Thread(target=lambda: result.append(_bound_times(api, ns, len(pods), timeout, started)))
    watcher.start()
    started.wait(60)
    samples: list[tuple[float, dict[str, float]]] = []
    sampler = threading.Thread(target=_sample_cpu, args=(cp, extra_pids, samples, watcher), daemon=True)
    sampler.start()
    t_start = time.monotonic()
    comp = cp.start_scheduler(scheduler, _bench_scheduler_config(scheduler, extender_url, percentage))
    watcher.join(timeout + 60)
    sampler.join(5)
    comp.stop()
    times = result[0] if result else []
    bound = len(times)
    span = times[-1] - times[0] if bound > 1 else float("nan")
    cpu0 = next((c for t, c in reversed(samples) if times and t <= times[0]), samples[0][1] if samples else {})
    cpu1 = next((c for t, c in samples if times and t >= times[-1]), samples[-1][1] if samples else {})
    out = {
        "pods": len(pods),
        "bound": bound,
        "create_s": round(create_s, 2),
        "first_bind_after_start_s": round(times[0] - t_start, 2) if times else None,
        "span_s": round(span, 3),
        "pods_per_s": round((bound - 1) / span, 1) if bound > 1 and span > 0 else 0.0,
        # CPU ms per bound pod, per process, from just before the first bind to just after the
        # last: on 2 cores this, not latency, sets the rate.
        "cpu_ms_per_pod": {k: round(1000 * (cpu1[k] - cpu0[k]) / max(bound, 1), 2) for k in cpu1 if k in cpu0},
    }
    out["packing"] = _packing(api, ns)
    v1.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    v1.delete_namespace(ns)
    return out


def bench_scheduling(
    pods: int = 1000,
    timeout: float = 300.0,
    noop_floor: bool = False,
    shortlist: int | None = None,
    percentage: int | None = None,
    nodes: int = 1523,
) -> dict[str, Any]:
    """End-to-end throughput: extender profile vs default profile, each a fresh kube-scheduler.

    Pods are created first (their scheduler not yet running); throughput is bound pods over
    the time from the first bind to the last, so pod creation is not measured.
    """
    import tempfile

    from qosmos.dev.controlplane import ControlPlane
    from qosmos.dev.fakenodes import create_nodes
    from qosmos.dev.process import free_port
    from qosmos.extender.schedconfig import PERCENTAGE_OF_NODES_TO_SCORE

    rows = openb_gpu_pods(pods)
    with ControlPlane(start_default_scheduler=False) as cp:
        api = cp.api_client()
        from kubernetes import client

        api.configuration.connection_pool_maxsize = 32
        api = client.ApiClient(api.configuration)
        t0 = time.monotonic()
        create_nodes(api, openb_node_manifests(nodes), workers=16)
        nodes_s = time.monotonic() - t0
        port = free_port()
        log_path = Path(tempfile.mkdtemp(prefix="qosmos-bench-")) / "extender.log"
        ext_args = () if shortlist is None else ("--shortlist", str(shortlist))
        ext = start_extender_process(cp.kubeconfig_path, log_path, port, extra_args=ext_args)
        try:
            wait_http_ok(f"http://127.0.0.1:{port}/readyz", 120)
            with_ext = _run_one(
                cp,
                api,
                "qosmos-scheduler",
                f"http://127.0.0.1:{port}",
                rows,
                timeout,
                {"extender": ext.pid},
                percentage,
            )
            with_ext["extender_server_ms"] = _server_side_ms(f"http://127.0.0.1:{port}/metrics")
        finally:
            ext.terminate()
            ext.wait(20)
        default = _run_one(cp, api, "bench-default", None, rows, timeout)
        noop = None
        if noop_floor:
            proc, noop_port = _start(_serve_noop_extender)
            try:
                noop = _run_one(
                    cp,
                    api,
                    "bench-noop",
                    f"http://127.0.0.1:{noop_port}",
                    rows,
                    timeout,
                    {"extender": proc.pid},
                    percentage,
                )
            finally:
                proc.terminate()
                proc.join(5)
    extra = {} if noop is None else {"pods_per_s_noop_extender": noop["pods_per_s"], "noop_run": noop}
    return extra | {
        "pods": len(rows),
        "nodes": nodes,
        "percentage_of_nodes_to_score": PERCENTAGE_OF_NODES_TO_SCORE if percentage is None else percentage,
        "pods_per_s_extender": with_ext["pods_per_s"],
        "pods_per_s_default": default["pods_per_s"],
        "ratio": round(with_ext["pods_per_s"] / default["pods_per_s"], 3) if default["pods_per_s"] else None,
        "extender_run": with_ext,
        "default_run": default,
        "node_setup_s": round(nodes_s, 1),
    }
