"""``qosmos operator run``: watch caches (``qosmos.operator.informers``) keep VirtualClusters, nodes,
the DLJobs of the working set and the pods a pass reads; kopf watches InferenceServices and runs the
peering. Every event that can change a decision (and a timer) asks for a reconcile pass, and one worker
runs the passes, debounced and one at a time (so each VirtualCluster has one pass at a time). The pass
itself (``qosmos.operator.reconcile``) reads the caches, never a half-written state of its own: its
writes go through into them. A restart rebuilds the caches from one list each: nothing is lost."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import kopf
from qosmos.extender.core.modeldb import ModelDB
from qosmos.operator import inference, metrics
from qosmos.operator.durations import SAVE_INTERVAL_S
from qosmos.operator.kube import OwnWrites

if TYPE_CHECKING:
    from qosmos.operator.ces import CESOptions

log = logging.getLogger("qosmos.operator")


@dataclass
class RunOptions:
    kubeconfig: str | None = None
    namespace: str | None = None
    metrics_port: int = 0  # 0: no metrics server
    interval_s: float = 10.0  # the timer: waiting allowances and oldest waits move with time
    debounce_s: float = 0.2  # events within this window share one pass
    history_namespace: str = "default"  # where the QSSF duration history ConfigMap lives
    history_save_interval_s: float = SAVE_INTERVAL_S  # the QSSF history is written at most this often
    modeldb: ModelDB | None = None  # GENIE profiles (qosmos.extender.explain.load_profiles); None: built-ins
    ces: CESOptions | None = None  # Cluster Energy Saving (qosmos.operator.ces); None: off
    metrics_host: str = "127.0.0.1"
    peering: str | None = None  # kopf peering object name (qosmos.operator.peering); None: standalone
    peering_priority: int | None = None  # None: peering.default_priority() (the oldest replica runs)
    peering_identity: str | None = None  # None: peering.own_identity()


class PokeOnlyDiffBase(kopf.DiffBaseStorage):
    """kopf's diff base for handlers that only poke. kopf builds an object's "essence" (a deep copy of
    the whole body) on every watch event for change-detecting handlers (on.create/update); every
    handler here is on.event, so that copy is never read, and under a burst of DLJob and pod events
    it was a fifth of the operator's busy CPU (py-spy, ``qosmos bench operator``)."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: Any) -> None:
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None


def echo(body: Any, own: OwnWrites) -> bool:
    """A watch event that only echoes a write a pass made (and mirrored) itself: its
    resourceVersion is one the apiserver returned to that write. Another writer's change after it
    has a new resourceVersion, so it is never taken for an echo."""
    return ((body.get("metadata") or {}).get("resourceVersion")) in own


class Trigger:
    """Asks for a pass; many asks before the worker wakes make one pass."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.own = OwnWrites()  # the passes' own status writes (their Kube records them)
        self.loop: asyncio.AbstractEventLoop | None = None  # set by the worker: the watch threads poke through it

    def poke(self, **_: Any) -> None:
        self.event.set()

    def poke_from_thread(self) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.event.set)


class Changes:
    """Which watch events are worth a pass: every change a decision reads, not the echoes of the
    passes' own writes (status; pods created, ungated, labelled), not node heartbeats, not other pods
    (they only hold resources: the timer's pass sees them)."""

    def __init__(self, own: OwnWrites) -> None:
        self.own = own
        self.nodes = NodeChanges()

    def worth_a_pass(self, store: str, type_: str, obj: Any) -> bool:
        if type_ == "RELIST":  # a watch resumed after 410: what changed meanwhile is unknown
            return True
        if store in ("dljobs", "virtualclusters", "inferenceservices"):
            return type_ == "DELETED" or not echo(obj, self.own)
        if store == "nodes":
            return self.nodes.changed(type_, obj)
        if store in ("pods", "replica-pods"):  # not the echo of a pod the pass created, ungated or labelled
            return not echo(obj, self.own)
        return False


def build_registry(trigger: Trigger, opts: RunOptions) -> kopf.OperatorRegistry:
    """kopf's part: InferenceServices (their pods and everything a DLJob pass reads are the
    informers'), the peering, the login."""
    registry = kopf.OperatorRegistry()

    # async: kopf calls it on its event loop (a sync one goes through a thread pool per event, and
    # would set the loop's asyncio.Event from another thread)
    async def poke(**_: Any) -> None:
        trigger.poke()

    inference.register(registry, poke)

    @kopf.on.startup(registry=registry)
    def _configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.enabled = False  # handler logs are not Kubernetes Events; ours are
        settings.persistence.diffbase_storage = PokeOnlyDiffBase()
        settings.watching.server_timeout = 300
        settings.networking.request_timeout = 60

    @kopf.on.login(registry=registry)
    def _login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        if opts.kubeconfig:
            return kopf.login_with_kubeconfig(**kwargs)
        return kopf.login_via_client(**kwargs)

    return registry


class NodeChanges:
    """Node events worth a pass: only a change the pass reads. A heartbeat (KWOK or a kubelet
    rewriting its conditions' times) would otherwise cost a full pass, which on 1,523 nodes is most of
    an idle operator's CPU."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[Any, ...]] = {}

    def changed(self, type: str | None, body: Any) -> bool:
        name = str((body.get("metadata") or {}).get("name", ""))
        if type == "DELETED":
            self.seen.pop(name, None)
            return True
        sig = node_signature(body)
        if self.seen.get(name) == sig:
            return False
        self.seen[name] = sig
        return True


def node_signature(node: Any) -> tuple[Any, ...]:
    """What of a node can change a decision: labels (VirtualCluster, GPU model, pool), the operator's
    annotations, schedulability and taints, allocatable resources, readiness."""
    m, spec, st = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    ready = next((c.get("status") for c in st.get("conditions") or [] if c.get("type") == "Ready"), None)
    return (
        tuple(sorted((m.get("labels") or {}).items())),
        tuple(sorted((k, v) for k, v in (m.get("annotations") or {}).items() if k.startswith("qosmos.io/"))),
        bool(spec.get("unschedulable")),
        repr(spec.get("taints") or []),
        tuple(sorted((st.get("allocatable") or {}).items())),
        ready,
    )


async def worker(trigger: Trigger, opts: RunOptions, stop: asyncio.Event) -> None:
    """Runs the passes: on a poke (after the debounce window), every ``interval_s``, and when the last
    pass said a running job's turn ends (preemptive policies: ``PassReport.wake_at``). The decision at a
    turn end does not depend on when its pass runs (the core sees the service as of the turn end), so
    the timer alone would make it too, up to ``interval_s`` late; the wake-up makes it on time."""
    from qosmos.operator.durations import Durations
    from qosmos.operator.informers import CachedKube
    from qosmos.operator.reconcile import Reconciler

    api = _api_client(opts.kubeconfig)
    trigger.loop = asyncio.get_running_loop()
    changes = Changes(trigger.own)

    def on_event(store: str, type_: str, obj: Any) -> None:
        if changes.worth_a_pass(store, type_, obj):
            trigger.poke_from_thread()

    kube = CachedKube(api, opts.namespace, own=trigger.own, on_event=on_event)
    kube.informers.start()
    while not await asyncio.to_thread(kube.informers.wait_synced, 10.0):
        if stop.is_set():
            return
        log.info("waiting for the first list of %s", [s.name for s in kube.informers.stores if not s.synced.is_set()])
    durations = Durations(kube, opts.history_namespace, save_interval_s=opts.history_save_interval_s)
    rec = Reconciler(kube, modeldb=opts.modeldb, durations=durations)
    power = None
    if opts.ces is not None:  # a CES step after each pass, in this worker: no pass admits onto a node going to sleep
        from qosmos.operator.ces import EnergySaver

        power = EnergySaver(kube, opts.ces)
    serving = inference.InferenceController(kube, modeldb=opts.modeldb)
    peer = None
    if opts.peering:  # kopf pauses only its handlers: the timer's passes ask the peering object too
        from qosmos.operator.peering import Peering

        assert opts.peering_identity is not None and opts.peering_priority is not None
        peer = Peering(api, opts.peering, opts.namespace, opts.peering_identity, opts.peering_priority)
    try:
        trigger.poke()
        wake: float | None = None
        while not stop.is_set():
            timeout = opts.interval_s if wake is None else min(opts.interval_s, max(wake - time.time(), 0.0))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(trigger.event.wait(), timeout=timeout)
            await asyncio.sleep(opts.debounce_s)
            trigger.event.clear()
            t0 = time.perf_counter()
            try:
                if peer is not None and not await asyncio.to_thread(peer.active):
                    metrics.ACTIVE.set(0)  # standing by: the replica taking over reads what this one held back
                    await asyncio.to_thread(durations.stand_by, time.time())
                    if power is not None:
                        await asyncio.to_thread(power.stand_by)
                    wake = None
                    continue
                metrics.ACTIVE.set(1)
                served_wake = await inference.tick(serving)  # first: a service's replicas go before queued DLJobs
                rep = await asyncio.to_thread(rec.run_pass)
                wake = inference.soonest(rep.wake_at, served_wake)
                if power is not None:
                    wake = power.sooner(wake, await asyncio.to_thread(power.step))
                if rep.admitted or rep.finished or rep.restarted or rep.preempted:
                    log.info(
                        "pass %.0f ms (%s): admitted %d, finished %d, restarted %d, preempted %d, %d writes (status: %s)",
                        (time.perf_counter() - t0) * 1e3,
                        " ".join(f"{k} {v * 1e3:.0f}" for k, v in rep.phases.items()),
                        len(rep.admitted),
                        len(rep.finished),
                        len(rep.restarted),
                        len(rep.preempted),
                        rep.writes,
                        " ".join(f"{k} {v}" for k, v in sorted(rep.status_writes.items())),
                    )
            except Exception:
                metrics.ERRORS.labels("pass").inc()
                log.exception("reconcile pass failed; retrying")
                await asyncio.sleep(1.0)
                trigger.poke()
    finally:
        durations.stand_by(time.time(), force=True)  # what the interval held back: a graceful stop loses none
        if power is not None:
            power.stand_by()
        kube.informers.stop()


def _api_client(kubeconfig: str | None) -> Any:
    """The worker's API client: the kubeconfig (else in-cluster), with a connection pool as large as
    the writes a pass runs side by side (8 gangs x their pods)."""
    from kubernetes import client, config

    cfg = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    cfg.connection_pool_maxsize = 64
    return client.ApiClient(cfg)


# Python's cyclic collector runs a young-generation scan every 700 net allocations; a pass allocates
# several objects per DLJob (its plan's copies) while the watch caches hold many per object, and with
# 15,000 DLJobs queued the scans were a third of a plan's time (benchmarks/plan_at_scale.py: p50
# 2.44 s with the default, 1.83 s with this, 1.60 s with no collector). The operator's objects (the
# apiserver's JSON, the plan's records) form no cycles that need collecting sooner; reference counting
# frees them as before.
GC_THRESHOLDS = (50_000, 10, 10)


def tune_gc() -> None:
    gc.set_threshold(*GC_THRESHOLDS)


def run(opts: RunOptions) -> None:
    """Run until SIGINT/SIGTERM."""
    tune_gc()
    if opts.kubeconfig:
        os.environ["KUBECONFIG"] = opts.kubeconfig  # kopf's login reads it
    if opts.peering:
        from qosmos.operator import peering

        opts = dataclasses.replace(
            opts,
            peering_identity=opts.peering_identity or peering.own_identity(),
            peering_priority=peering.default_priority() if opts.peering_priority is None else opts.peering_priority,
        )
        assert opts.peering is not None  # as tested above: the replace() keeps it
        peering.ensure_object(_api_client(opts.kubeconfig), opts.peering, opts.namespace)  # kopf waits for it
        log.info("peering %s as %s, priority %d", opts.peering, opts.peering_identity, opts.peering_priority)
    if opts.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(opts.metrics_port, addr=opts.metrics_host)

    async def main() -> None:
        trigger = Trigger()
        stop = asyncio.Event()
        registry = build_registry(trigger, opts)
        task = asyncio.create_task(worker(trigger, opts, stop))

        def _died(t: asyncio.Task[None]) -> None:
            if not t.cancelled() and t.exception() is not None:
                log.error("the reconcile worker stopped: %s", t.exception())
                os._exit(1)  # a supervisor restarts us; the objects are the truth

        task.add_done_callback(_died)
        try:
            await kopf.operator(
                registry=registry,
                standalone=not opts.peering,
                peering_name=opts.peering or None,
                priority=opts.peering_priority,
                identity=opts.peering_identity,  # type: ignore[arg-type]  # kopf's NewType over str
                clusterwide=opts.namespace is None,
                namespaces=[opts.namespace] if opts.namespace else (),
                liveness_endpoint=None,
            )
        finally:
            stop.set()
            task.cancel()

    asyncio.run(main())
