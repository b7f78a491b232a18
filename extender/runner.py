"""``qosmos extender serve``: the HTTP extender and the gRPC API over one watch-fed cache.

SIGTERM/SIGINT: readiness and gRPC health turn NOT_SERVING, the listeners stop accepting,
in-flight requests finish (up to ``shutdown_grace_s``), then the watches stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from typing import Any

from qosmos.extender.cache import ClusterCache, KubeWatcher
from qosmos.extender.config import ExtenderConfig, setup_logging
from qosmos.extender.http_server import ExtenderHTTP, HTTPServer
from qosmos.extender.service import ExtenderService

log = logging.getLogger("qosmos.extender")


def kube_client(kubeconfig: str | None) -> Any:
    """An ApiClient from ``kubeconfig``, else in-cluster, else the default kubeconfig."""
    from kubernetes import client, config

    if kubeconfig:
        api = config.new_client_from_config(config_file=kubeconfig)
    else:
        try:
            config.load_incluster_config()
            api = client.ApiClient()
        except config.ConfigException:
            api = config.new_client_from_config()
    api.configuration.connection_pool_maxsize = 16
    return client.ApiClient(api.configuration)


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
        v1.create_namespaced_pod_binding(name, namespace, body, _preload_content=False)

    return bind


async def serve_async(cfg: ExtenderConfig, api: Any, stop: asyncio.Event | None = None) -> None:
    """Run until ``stop`` is set (or SIGTERM/SIGINT when it is None)."""
    cache = ClusterCache(assume_ttl=cfg.assume_ttl_s)
    loop = asyncio.get_running_loop()
    watcher = KubeWatcher(cache, api, timeout_seconds=cfg.watch_timeout_s, dispatch=loop.call_soon_threadsafe)
    service = ExtenderService(cache, cfg.placer, binder=make_binder(api), shortlist=cfg.shortlist)
    stopping = False
    http = HTTPServer(
        ExtenderHTTP(service, ready=lambda: cache.ready and not stopping, max_body=cfg.max_body_bytes),
        cfg.http_host,
        cfg.http_port,
    )
    grpc_server = None
    if cfg.grpc_port >= 0:
        from qosmos.extender.grpc_service import GRPCServer

        grpc_server = GRPCServer(service, port=cfg.grpc_port)
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
    watcher.start()
    await http.start_async()
    if grpc_server is not None:
        grpc_server.start()
    log.info(
        "extender serving",
        extra={"http": http.url, "grpc_port": grpc_server.port if grpc_server else None, "placer": cfg.placer},
    )
    freezer = asyncio.create_task(_freeze_when_ready(cache))
    await stop.wait()
    freezer.cancel()
    stopping = True
    log.info("extender shutting down", extra={"grace_s": cfg.shutdown_grace_s})
    if grpc_server is not None:
        grpc_server.set_serving(False)
    await http.stop_async(cfg.shutdown_grace_s)
    if grpc_server is not None:
        await loop.run_in_executor(None, grpc_server.stop, cfg.shutdown_grace_s)
    await loop.run_in_executor(None, watcher.stop)
    log.info("extender stopped")


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
    setup_logging(cfg.log_level)
    api = kube_client(cfg.kubeconfig)
    profile = os.environ.get("QOSMOS_EXTENDER_CPROFILE")  # a path: dump the event loop's profile on exit
    if not profile:
        asyncio.run(serve_async(cfg, api))
        return
    import cProfile

    prof = cProfile.Profile()
    prof.enable()
    try:
        asyncio.run(serve_async(cfg, api))
    finally:
        prof.disable()
        prof.dump_stats(profile)
