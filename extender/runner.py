"""``qosmos extender serve``: the HTTP extender and the gRPC API over one watch-fed cache.

SIGTERM/SIGINT: readiness and gRPC health turn NOT_SERVING, the listeners stop accepting,
in-flight requests finish (up to ``shutdown_grace_s``; a long gRPC computation stops at its
next deadline check), then the watches stop. ``--node-list`` serves a static node set
without a cluster (no watch, no binding).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from qosmos.extender.cache import ClusterCache, KubeWatcher
from qosmos.extender.config import ExtenderConfig, setup_logging
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.http_server import ExtenderHTTP, HTTPServer
from qosmos.extender.service import ExtenderService

log = logging.getLogger("qosmos.extender")


def kube_client(kubeconfig: str | None) -> Any:
    """An ApiClient from ``kubeconfig``, else in-cluster, else the default kubeconfig.

    No usable configuration is bad input (InvalidInput naming what was tried).
    """
    from kubernetes import client, config

    try:
        if kubeconfig:
            if not Path(kubeconfig).expanduser().is_file():
                raise InvalidInput("kubeconfig", kubeconfig, "no such file")
            api = config.new_client_from_config(config_file=str(Path(kubeconfig).expanduser()))
        else:
            try:
                config.load_incluster_config()
                api = client.ApiClient()
            except config.ConfigException:
                api = config.new_client_from_config()
    except (config.ConfigException, OSError, ValueError, TypeError, KeyError) as exc:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidInput(
            "kubeconfig",
            where,
            f"no usable cluster configuration ({first}); give --kubeconfig, run in a pod, "
            "or serve a static node set with --node-list",
        ) from None
    api.configuration.connection_pool_maxsize = 16
    return client.ApiClient(api.configuration)


def static_cache(node_list: str, assume_ttl: float) -> ClusterCache:
    """A cache holding the nodes of an openb node list and no pods: ready at once, never watched."""
    from qosmos.simulator.traces import load_openb_nodes

    path = Path(node_list).expanduser()
    if not path.is_file():
        raise InvalidInput("node_list", node_list, "no such file")
    cache = ClusterCache(assume_ttl=assume_ttl)
    cache.replace_nodes(load_openb_nodes(path))
    cache.replace_pods([])
    cache.mark_synced()
    return cache


def make_binder(api: Any) -> Any:
    """POST a Binding for a pod (the optional /bind verb)."""
    from kubernetes import client

    v1 = client.CoreV1Api(api)

    def bind(namespace: str, name: str, uid: str, node: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        # a dict body: the client's validate_call builds the V1Binding from it
        v1.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)  # type: ignore[arg-type]

    return bind


async def serve_async(
    cfg: ExtenderConfig, api: Any, stop: asyncio.Event | None = None, cache: ClusterCache | None = None
) -> int:
    """Run until ``stop`` is set (or SIGTERM/SIGINT when it is None); returns the gRPC calls still running.

    With ``cache`` (a static node set) there is no watch and no binder; else ``api`` feeds the cache.
    """
    from qosmos.extender.explain import load_profiles

    profiles = load_profiles(cfg.db)
    tls = cfg.tls
    ssl_context = tls.server_context() if tls is not None else None
    loop = asyncio.get_running_loop()
    watcher = None
    if cache is None:
        cache = ClusterCache(assume_ttl=cfg.assume_ttl_s)
        watcher = KubeWatcher(cache, api, timeout_seconds=cfg.watch_timeout_s, dispatch=loop.call_soon_threadsafe)
    service = ExtenderService(
        cache,
        cfg.placer,
        binder=make_binder(api) if api is not None else None,
        shortlist=cfg.shortlist,
        max_assumed_gpus=cfg.max_assumed_gpus,
    )
    stopping = False
    ready_cache = cache
    http = HTTPServer(
        ExtenderHTTP(
            service,
            ready=lambda: ready_cache.ready and not stopping,
            max_body=cfg.max_body_bytes,
            clients=cfg.clients,
        ),
        cfg.http_host,
        cfg.http_port,
        ssl_context=ssl_context,
    )
    grpc_server = None
    if cfg.grpc_port >= 0:
        from qosmos.extender.grpc_service import GRPCServer

        grpc_server = GRPCServer(
            service,
            host=cfg.grpc_host,
            port=cfg.grpc_port,
            tls=tls,
            profiles=profiles,
            request_timeout_s=cfg.request_timeout_s,
            clients=cfg.clients,
        )
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
    await http.start_async()
    if grpc_server is not None:
        grpc_server.start()
    if watcher is not None:
        watcher.start()
    log.info(
        "extender serving",
        extra={
            "http": http.url,
            "grpc": f"{cfg.grpc_host}:{grpc_server.port}" if grpc_server else None,
            "tls": tls is not None,
            "nodes": "static " + str(cfg.node_list) if watcher is None else "watch",
            "placer": cfg.placer,
            "modeldb": profiles.file or "built-in",
        },
    )
    if tls is not None and (open_groups := cfg.clients.open_groups()):
        log.warning(
            "any client certificate the CA signed may call these routes; name the allowed ones with "
            "--scheduler-clients, --metrics-clients, --api-clients",
            extra={"open": open_groups},
        )
    freezer = asyncio.create_task(_freeze_when_ready(cache))
    await stop.wait()
    freezer.cancel()
    stopping = True
    log.info("extender shutting down", extra={"grace_s": cfg.shutdown_grace_s})
    if grpc_server is not None:
        grpc_server.set_serving(False)
        grpc_server.stopping.set()  # in-flight calls stop at their next deadline check
    await http.stop_async(cfg.shutdown_grace_s)
    if grpc_server is not None:
        await loop.run_in_executor(None, grpc_server.stop, cfg.shutdown_grace_s)
    if watcher is not None:
        await loop.run_in_executor(None, watcher.stop)
    left = grpc_server.servicer.in_flight if grpc_server is not None else 0
    log.info("extender stopped", extra={"grpc_calls_left": left})
    return left


async def _freeze_when_ready(cache: ClusterCache) -> None:
    """After the initial lists, move the long-lived objects out of the collector's way (fewer GC pauses)."""
    while not cache.ready:
        await asyncio.sleep(0.1)
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)
    # Watch threads hand the GIL back sooner, so a request never waits a whole 5 ms interval.
    sys.setswitchinterval(0.0005)


def serve(cfg: ExtenderConfig) -> None:
    """Serve until SIGTERM/SIGINT. Startup problems (files, ports, cluster access) raise InvalidInput."""
    setup_logging(cfg.log_level)
    cache = None
    api = None
    if cfg.node_list:
        cache = static_cache(cfg.node_list, cfg.assume_ttl_s)
    else:
        api = kube_client(cfg.kubeconfig)
    profile = os.environ.get("QOSMOS_EXTENDER_CPROFILE")  # a path: dump the event loop's profile on exit
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    try:
        left = asyncio.run(serve_async(cfg, api, cache=cache))
    finally:
        if prof is not None:
            prof.disable()
            prof.dump_stats(str(profile))
    if left:
        # Past the grace period a call still computing must not keep the process alive
        # (worker threads are joined at interpreter exit).
        log.warning("exiting with gRPC calls still running", extra={"calls": left})
        logging.shutdown()
        os._exit(0)
