"""gRPC API (``qosmos.v1alpha1.Extender``): Score, Rank, Explain, Admit and ExplainQueue, plus health
checking and reflection.

Each call translates messages into the core's domain types and calls the core: Score the
same scoring as the HTTP extender (over its cache), Rank an ordering policy (SWAF by
default), Explain ``qosmos.extender.explain`` (the same table as ``qosmos explain``), Admit and
ExplainQueue one admission pass (``core.admission.admit`` through ``qosmos.extender.admission_api``,
as ``qosmos explain queue``). Invalid input becomes INVALID_ARGUMENT with the core's message.
"""

from __future__ import annotations

import json
import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures
from typing import Any, TypeVar, cast

import grpc
import orjson
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from qosmos.extender.admission_api import (
    MAX_GENIE_ROWS,
    MAX_JOBS,
    NodeCacheView,
    admit_input,
    admit_response,
    check_queue,
    explain_queue_response,
    job_from_spec,
)
from qosmos.extender.cache import PodInfo, pod_info
from qosmos.extender.core import genie
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.ordering import OrderContext, get_policy
from qosmos.extender.core.types import Platform
from qosmos.extender.explain import Profiles, check_limits, describe, resolve_profile
from qosmos.extender.explain import explain as explain_task
from qosmos.extender.proto import qosmos_pb2 as pb
from qosmos.extender.proto import qosmos_pb2_grpc as pb_grpc
from qosmos.extender.service import ExtenderService
from qosmos.extender.tls import ClientPolicy, TLSFiles, is_loopback

log = logging.getLogger("qosmos.extender.grpc")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Extender"].full_name
DEFAULT_POLICY = "swaf"
_R = TypeVar("_R")


def _opt(msg: Any, field: str) -> Any:
    return getattr(msg, field) if msg.HasField(field) else None


def explain_dict(
    req: pb.ExplainRequest, profiles: Profiles | None = None, cancel: Callable[[], None] | None = None
) -> dict[str, Any]:
    """The ``qosmos explain --json`` dict for a request."""
    coeffs = tuple(req.coeffs) if len(req.coeffs) else None
    if coeffs is not None and len(coeffs) != 3:
        raise InvalidInput("coeffs", list(coeffs), "expected k0,k1,k2")
    profile, provenance = resolve_profile(
        _opt(req, "model"),
        coeffs,
        _opt(req, "gamma"),
        _opt(req, "lam"),
        _opt(req, "nu"),
        profiles,
        req.gpu_model,
    )
    model = _opt(req, "model")
    task = genie.Task(
        model or "custom",
        int(req.batch),
        int(req.iters),
        req.kind or "training",  # type: ignore[arg-type]  # by name: Task.__post_init__ parses it
        req.qos or "normal",  # type: ignore[arg-type]  # likewise
        req.submit,
    )
    platform = Platform(req.nodes or 4, req.gpus_per_node or 4, req.gpu_model)
    theta = req.theta if req.HasField("theta") else genie.DEFAULT_THETA
    now = req.now if req.HasField("now") else req.submit
    return explain_task(task, profile, platform, now, theta, provenance, cancel)


def _placement(row: dict[str, Any]) -> pb.Placement:
    p = pb.Placement(
        d_node=row["d_node"],
        d_gpn=row["d_gpn"],
        feasible=bool(row.get("feasible", False)),
        extrapolated=bool(row.get("extrapolated", False)),
    )
    for k in ("pr", "lat", "cost", "cer"):
        if row.get(k) is not None:
            setattr(p, k, row[k])
    return p


_PROVENANCE_TEXT = ("origin", "match", "requested", "matched", "source", "file", "gpu_model", "gpu_match", "gpu_note")


def explain_response(result: dict[str, Any]) -> pb.ExplainResponse:
    prov = result["profile"]
    resp = pb.ExplainResponse(
        placements=[_placement(r) for r in result["placements"]],
        chosen=pb.Placement(d_node=result["chosen"]["d_node"], d_gpn=result["chosen"]["d_gpn"]),
        profile=describe(prov),
        json=json.dumps(result, indent=2, allow_nan=False),
        notes=result["notes"],
        max_placement_gpus=result["max_placement_gpus"],
        provenance=pb.ProfileProvenance(**{k: prov[k] or "" for k in _PROVENANCE_TEXT}, overrides=prov["overrides"]),
        throughput=_throughput(result["throughput"]),
    )
    for k in ("ect", "deadline", "waiting_allowance"):
        if result[k] is not None:
            setattr(resp, k, result[k])
    return resp


def _throughput(info: dict[str, Any]) -> pb.ThroughputInfo:
    t = pb.ThroughputInfo(
        form=info["form"],
        measured_range=info["measured_range"] or [],
        batch_outside_range=info["batch_outside_range"],
        measured_on=info["measured_on"],
    )
    if info["heldout_error"] is not None:
        t.heldout_error = info["heldout_error"]
    return t


def response_to_dict(resp: pb.ExplainResponse) -> dict[str, Any]:
    """An ExplainResponse back to the ``qosmos explain --json`` shape (built from the typed fields)."""
    prov = resp.provenance
    return {
        "placements": [
            {
                "d_node": p.d_node,
                "d_gpn": p.d_gpn,
                **{k: _opt(p, k) for k in ("pr", "lat", "cost", "cer")},
                "feasible": p.feasible,
                "extrapolated": p.extrapolated,
            }
            for p in resp.placements
        ],
        "chosen": {"d_node": resp.chosen.d_node, "d_gpn": resp.chosen.d_gpn},
        **{k: _opt(resp, k) for k in ("ect", "deadline", "waiting_allowance")},
        "max_placement_gpus": resp.max_placement_gpus,
        "notes": list(resp.notes),
        "profile": {
            **{k: getattr(prov, k) or None for k in _PROVENANCE_TEXT},
            "overrides": list(prov.overrides),
        },
        "throughput": {
            "form": resp.throughput.form,
            "heldout_error": _opt(resp.throughput, "heldout_error"),
            "measured_range": list(resp.throughput.measured_range) or None,
            "batch_outside_range": resp.throughput.batch_outside_range,
            "measured_on": dict(resp.throughput.measured_on),
        },
    }


def pod_from_spec(spec: pb.PodSpec) -> PodInfo:
    if spec.gpus < 0 or spec.cpu_milli < 0 or spec.memory_mib < 0:
        raise InvalidInput("pod", spec.name, "resources must be >= 0")
    from qosmos.extender.core.scoring import parse_gpu_models

    return PodInfo(
        uid=spec.uid or f"{spec.namespace or 'default'}/{spec.name}",
        namespace=spec.namespace or "default",
        name=spec.name,
        node_name="",
        gpus=spec.gpus,
        cpu_milli=spec.cpu_milli,
        memory_mib=spec.memory_mib,
        vc=spec.vc or None,
        gpu_models=parse_gpu_models("|".join(spec.gpu_models)),
        placement=spec.placement or None,
        nodes=tuple(spec.nodes),
        job=spec.job or None,
    )


class _Abort(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


MAX_RANK_JOBS = MAX_JOBS
MAX_RANK_ROWS = MAX_GENIE_ROWS  # GENIE placement rows one Rank may evaluate (jobs x shapes)
DEFAULT_REQUEST_TIMEOUT_S = 5.0


class ExtenderServicer(pb_grpc.ExtenderServicer):
    """The Extender service over an ExtenderService (for Score) and the core (Rank, Explain).

    Every call runs under a server-side deadline (the client's, capped at
    ``request_timeout_s``) and stops early when the server is shutting down.
    """

    def __init__(
        self,
        service: ExtenderService | None,
        profiles: Profiles | None = None,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        stopping: threading.Event | None = None,
        clients: ClientPolicy | None = None,
    ) -> None:
        self.service = service
        self.clients = clients or ClientPolicy()
        self.profiles = profiles or Profiles.builtin()
        self.request_timeout_s = request_timeout_s
        self.stopping = stopping or threading.Event()
        self.in_flight = 0
        self._lock = threading.Lock()

    def _cancel_for(self, context: grpc.ServicerContext) -> Callable[[], None]:
        remaining = context.time_remaining()
        budget = self.request_timeout_s if remaining is None else min(remaining, self.request_timeout_s)
        limit = time.monotonic() + budget

        def check() -> None:
            if self.stopping.is_set():
                raise _Abort(grpc.StatusCode.UNAVAILABLE, "the extender is shutting down")
            if time.monotonic() > limit:
                raise _Abort(grpc.StatusCode.DEADLINE_EXCEEDED, f"request took longer than {budget:.3g} s")

        return check

    def _authorise(self, context: grpc.ServicerContext, method: str) -> None:
        """PERMISSION_DENIED unless the client's certificate CN is one the ``api`` group allows."""
        if self.clients.api is None:
            return
        # types-grpcio has auth_context() -> Mapping[str, bytes]; grpc gives each property's values as a list
        auth = cast("Mapping[str, Sequence[bytes]]", context.auth_context())
        names = auth.get("x509_common_name") or []
        cn = names[0].decode() if names else None
        if not self.clients.allows("api", cn):
            if self.service is not None:
                self.service.metrics.forbidden.labels(f"grpc:{method}").inc()
            log.warning("grpc call refused", extra={"method": method, "caller": cn})
            context.abort(
                grpc.StatusCode.PERMISSION_DENIED, f"client {cn or 'unknown'} may not call {method} (--api-clients)"
            )

    def _run(self, context: grpc.ServicerContext, fn: Callable[[Callable[[], None]], _R]) -> _R:
        """Call ``fn(cancel)``; bad input becomes INVALID_ARGUMENT, a deadline DEADLINE_EXCEEDED."""
        self._authorise(context, fn.__name__)
        cancel = self._cancel_for(context)
        with self._lock:
            self.in_flight += 1
        try:
            cancel()
            out = fn(cancel)
            cancel()
            return out
        except (InvalidInput, orjson.JSONDecodeError) as exc:
            log.info("grpc invalid argument", extra={"method": fn.__name__, "error": str(exc)})
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except _Abort as exc:
            log.warning("grpc call aborted", extra={"method": fn.__name__, "error": str(exc)})
            context.abort(exc.code, str(exc))
        finally:
            with self._lock:
                self.in_flight -= 1
        raise AssertionError("unreachable: context.abort raises")

    def Score(self, request: pb.ScoreRequest, context: grpc.ServicerContext) -> pb.ScoreResponse:
        service = self.service
        if service is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no cluster cache in this server")
        assert service is not None

        def score(cancel: Callable[[], None]) -> pb.ScoreResponse:
            pod = pod_info(orjson.loads(request.pod_json)) if request.pod_json else pod_from_spec(request.pod)
            names, scores, planned, reasons = service.score_names(pod, list(request.node_names))
            return pb.ScoreResponse(
                scores=[
                    pb.NodeScore(node=n, score=s, reason=reasons.get(n, "")) for n, s in zip(names, scores, strict=True)
                ],
                planned_nodes=planned,
            )

        return self._run(context, score)

    def Rank(self, request: pb.RankRequest, context: grpc.ServicerContext) -> pb.RankResponse:
        def rank(cancel: Callable[[], None]) -> pb.RankResponse:
            name = request.policy or DEFAULT_POLICY
            policy = get_policy(name)
            if len(request.jobs) > MAX_RANK_JOBS:
                raise InvalidInput("jobs", len(request.jobs), f"at most {MAX_RANK_JOBS:,} jobs per call")
            platform = Platform(request.nodes or 4, request.gpus_per_node or 4)
            jobs = [job_from_spec(j, f"jobs[{j.id or i}]") for i, j in enumerate(request.jobs)]
            check_queue(jobs, platform)
            check_limits(genie.Task("rank", 1, 1), platform, request.now)
            ctx = OrderContext(
                now=request.now,
                platform=platform,
                modeldb=self.profiles.db,
                theta=request.theta if request.HasField("theta") else genie.DEFAULT_THETA,
                total_gpus=int(request.total_gpus or platform.gpus),
                total_cpu_milli=int(request.total_cpu_milli),
            )
            decisions = policy.order(jobs, ctx)
            out = []
            for pos, d in enumerate(decisions):
                r = pb.RankedJob(id=d.job.id, position=pos, blocked=d.blocked or "", queue=d.queue)
                if d.shape is not None:
                    r.d_node, r.d_gpn = d.shape.d_node, d.shape.d_gpn
                if d.waiting_allowance is not None:
                    r.waiting_allowance = d.waiting_allowance if not math.isnan(d.waiting_allowance) else math.inf
                out.append(r)
            return pb.RankResponse(jobs=out, policy=name)

        return self._run(context, rank)

    def Explain(self, request: pb.ExplainRequest, context: grpc.ServicerContext) -> pb.ExplainResponse:
        def explain(cancel: Callable[[], None]) -> pb.ExplainResponse:
            return explain_response(explain_dict(request, self.profiles, cancel))

        return self._run(context, explain)

    def _cache_view(self) -> NodeCacheView | None:
        """The extender's node cache now, for requests without nodes (None: no cache or no nodes yet)."""
        if self.service is None:
            return None
        cache = self.service.cache
        with cache.lock:
            st = cache.state()
            return None if st is None else NodeCacheView.of(st)

    def Admit(self, request: pb.AdmitRequest, context: grpc.ServicerContext) -> pb.AdmitResponse:
        def admit(cancel: Callable[[], None]) -> pb.AdmitResponse:
            inp = admit_input(request, self.profiles.db, self._cache_view, cancel)
            cancel()
            return admit_response(inp.admit(explain=not request.no_reasons), inp)

        return self._run(context, admit)

    def ExplainQueue(self, request: pb.AdmitRequest, context: grpc.ServicerContext) -> pb.ExplainQueueResponse:
        def explain_queue(cancel: Callable[[], None]) -> pb.ExplainQueueResponse:
            inp = admit_input(request, self.profiles.db, self._cache_view, cancel)
            cancel()
            return explain_queue_response(inp.admit(explain=True), inp)

        return self._run(context, explain_queue)


def check_port_free(host: str, port: int, address: str) -> None:
    """A one-line error for a port already taken: gRPC's own bind failure also prints a C-core log line."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds: TIME_WAIT is no conflict
        try:
            probe.bind((host.strip("[]"), port))
        except OSError as exc:
            raise InvalidInput("grpc_port", address, f"cannot listen there: {exc.strerror or exc}") from None


class GRPCServer:
    """A grpc.Server with the Extender service, health checking and reflection.

    With ``tls`` it listens with TLS and requires a client certificate signed by its CA;
    without, it serves plaintext (loopback only unless ``allow_remote_plaintext``).
    """

    def __init__(
        self,
        service: ExtenderService | None,
        host: str = "127.0.0.1",
        port: int = 0,
        workers: int = 8,
        tls: TLSFiles | None = None,
        profiles: Profiles | None = None,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        allow_remote_plaintext: bool = False,
        clients: ClientPolicy | None = None,
    ) -> None:
        if tls is None and not allow_remote_plaintext and not is_loopback(host):
            raise InvalidInput("grpc_host", host, "plaintext gRPC is for loopback only; give TLS files")
        self.stopping = threading.Event()
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="qosmos-grpc"),
            maximum_concurrent_rpcs=workers * 4,
            # gRPC shares a port with SO_REUSEPORT by default: a second extender would split the calls
            options=[("grpc.so_reuseport", 0)],
        )
        self.servicer = ExtenderServicer(service, profiles, request_timeout_s, self.stopping, clients)
        pb_grpc.add_ExtenderServicer_to_server(self.servicer, self.server)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            self.server,
        )
        address = f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
        check_port_free(host, port, address)
        try:
            if tls is None:
                self.port = self.server.add_insecure_port(address)
            else:
                self.port = self.server.add_secure_port(address, tls.grpc_credentials())
        except RuntimeError:
            self.port = 0
        if self.port == 0:
            raise InvalidInput("grpc_port", address, "cannot listen there (in use, or not an address of this host)")
        self.tls = tls is not None

    def start(self) -> GRPCServer:
        self.server.start()
        self.set_serving(True)
        log.info("extender gRPC listening", extra={"port": self.port, "tls": self.tls})
        return self

    def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        self.health.set("", status)
        self.health.set(SERVICE_NAME, status)

    def stop(self, grace: float = 10.0) -> None:
        """Stop accepting; in-flight calls get ``grace`` seconds, and long ones are cut at their next check."""
        self.set_serving(False)
        self.stopping.set()
        self.server.stop(grace).wait(grace + 1)
