"""gRPC API (``qosmos.v1alpha1.Extender``): Score, Rank and Explain, plus health checking and reflection.

Each call translates messages into the core's domain types and calls the core: Score the
same scoring as the HTTP extender (over its cache), Rank an ordering policy (SWAF by
default), Explain ``qosmos.extender.explain`` (the same table as ``qosmos explain``).
Invalid input becomes INVALID_ARGUMENT with the core's message.
"""

from __future__ import annotations

import json
import logging
import math
from concurrent import futures
from typing import Any

import grpc
import orjson
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from qosmos.extender.cache import PodInfo, pod_info
from qosmos.extender.core import genie
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.ordering import OrderContext, get_policy
from qosmos.extender.core.types import Job, Platform
from qosmos.extender.explain import explain as explain_task
from qosmos.extender.explain import resolve_profile
from qosmos.extender.proto import qosmos_pb2 as pb
from qosmos.extender.proto import qosmos_pb2_grpc as pb_grpc
from qosmos.extender.service import ExtenderService

log = logging.getLogger("qosmos.extender.grpc")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Extender"].full_name
DEFAULT_POLICY = "swaf"


def _opt(msg: Any, field: str) -> Any:
    return getattr(msg, field) if msg.HasField(field) else None


def explain_dict(req: pb.ExplainRequest, db: ModelDB | None = None) -> tuple[dict[str, Any], str]:
    """The ``qosmos explain --json`` dict for a request, and the profile's provenance."""
    coeffs = tuple(req.coeffs) if len(req.coeffs) else None
    if coeffs is not None and len(coeffs) != 3:
        raise InvalidInput("coeffs", list(coeffs), "expected k0,k1,k2")
    profile, provenance = resolve_profile(
        _opt(req, "model"),
        coeffs,
        _opt(req, "gamma"),
        _opt(req, "lam"),
        _opt(req, "nu"),
        db,  # type: ignore[arg-type]
    )
    model = _opt(req, "model")
    task = genie.Task(
        model or "custom", int(req.batch), int(req.iters), req.kind or "training", req.qos or "normal", req.submit
    )
    platform = Platform(req.nodes or 4, req.gpus_per_node or 4)
    theta = req.theta if req.HasField("theta") else genie.DEFAULT_THETA
    now = req.now if req.HasField("now") else req.submit
    return explain_task(task, profile, platform, now, theta), provenance


def _placement(row: dict[str, Any]) -> pb.Placement:
    p = pb.Placement(d_node=row["d_node"], d_gpn=row["d_gpn"], feasible=bool(row.get("feasible", False)))
    for k in ("pr", "lat", "cost", "cer"):
        if row.get(k) is not None:
            setattr(p, k, row[k])
    return p


def explain_response(result: dict[str, Any], provenance: str) -> pb.ExplainResponse:
    resp = pb.ExplainResponse(
        placements=[_placement(r) for r in result["placements"]],
        chosen=pb.Placement(d_node=result["chosen"]["d_node"], d_gpn=result["chosen"]["d_gpn"]),
        profile=provenance,
        json=json.dumps(result, indent=2, allow_nan=False),
    )
    for k in ("ect", "deadline", "waiting_allowance"):
        if result[k] is not None:
            setattr(resp, k, result[k])
    return resp


def response_to_dict(resp: pb.ExplainResponse) -> dict[str, Any]:
    """An ExplainResponse back to the ``qosmos explain --json`` shape (built from the typed fields)."""
    return {
        "placements": [
            {
                "d_node": p.d_node,
                "d_gpn": p.d_gpn,
                **{k: _opt(p, k) for k in ("pr", "lat", "cost", "cer")},
                "feasible": p.feasible,
            }
            for p in resp.placements
        ],
        "chosen": {"d_node": resp.chosen.d_node, "d_gpn": resp.chosen.d_gpn},
        **{k: _opt(resp, k) for k in ("ect", "deadline", "waiting_allowance")},
    }


def job_from_spec(spec: pb.JobSpec) -> Job:
    return Job(
        id=spec.id,
        submit_time=spec.submit_time,
        gpus=spec.gpus,
        kind=spec.kind or "training",  # type: ignore[arg-type]
        user=spec.user,
        vc=spec.vc or "default",
        model=spec.model,
        batch=int(spec.batch),
        iters=int(spec.iters),
        qos=spec.qos or "normal",  # type: ignore[arg-type]
        predicted_duration=_opt(spec, "predicted_duration"),
        duration=_opt(spec, "duration"),
        attained=spec.attained,
        executed=spec.executed,
    )


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


class ExtenderServicer(pb_grpc.ExtenderServicer):
    """The Extender service over an ExtenderService (for Score) and the core (Rank, Explain)."""

    def __init__(self, service: ExtenderService | None, modeldb: ModelDB | None = None) -> None:
        self.service = service
        self.modeldb = modeldb or ModelDB.builtin()

    def _invalid(self, context: grpc.ServicerContext, exc: Exception) -> None:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    def Score(self, request: pb.ScoreRequest, context: grpc.ServicerContext) -> pb.ScoreResponse:
        if self.service is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no cluster cache in this server")
        try:
            pod = pod_info(orjson.loads(request.pod_json)) if request.pod_json else pod_from_spec(request.pod)
            names, scores, planned, reasons = self.service.score_names(pod, list(request.node_names))
        except (InvalidInput, orjson.JSONDecodeError) as exc:
            self._invalid(context, exc)
            raise
        return pb.ScoreResponse(
            scores=[
                pb.NodeScore(node=n, score=s, reason=reasons.get(n, "")) for n, s in zip(names, scores, strict=True)
            ],
            planned_nodes=planned,
        )

    def Rank(self, request: pb.RankRequest, context: grpc.ServicerContext) -> pb.RankResponse:
        try:
            name = request.policy or DEFAULT_POLICY
            policy = get_policy(name)
            jobs = [job_from_spec(j) for j in request.jobs]
            platform = Platform(request.nodes or 4, request.gpus_per_node or 4)
            ctx = OrderContext(
                now=request.now,
                platform=platform,
                modeldb=self.modeldb,
                theta=request.theta if request.HasField("theta") else genie.DEFAULT_THETA,
                total_gpus=int(request.total_gpus or platform.gpus),
                total_cpu_milli=int(request.total_cpu_milli),
            )
            decisions = policy.order(jobs, ctx)
        except InvalidInput as exc:
            self._invalid(context, exc)
            raise
        out = []
        for pos, d in enumerate(decisions):
            r = pb.RankedJob(id=d.job.id, position=pos, blocked=d.blocked or "", queue=d.queue)
            if d.shape is not None:
                r.d_node, r.d_gpn = d.shape.d_node, d.shape.d_gpn
            if d.waiting_allowance is not None:
                r.waiting_allowance = d.waiting_allowance if not math.isnan(d.waiting_allowance) else math.inf
            out.append(r)
        return pb.RankResponse(jobs=out, policy=name)

    def Explain(self, request: pb.ExplainRequest, context: grpc.ServicerContext) -> pb.ExplainResponse:
        try:
            result, provenance = explain_dict(request, self.modeldb)
        except InvalidInput as exc:
            self._invalid(context, exc)
            raise
        return explain_response(result, provenance)


class GRPCServer:
    """A grpc.Server with the Extender service, health checking and reflection."""

    def __init__(self, service: ExtenderService | None, host: str = "[::]", port: int = 0, workers: int = 8) -> None:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="qosmos-grpc"))
        pb_grpc.add_ExtenderServicer_to_server(ExtenderServicer(service), self.server)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            self.server,
        )
        self.port = self.server.add_insecure_port(f"{host}:{port}")
        if self.port == 0:
            raise RuntimeError(f"cannot bind gRPC to {host}:{port}")

    def start(self) -> GRPCServer:
        self.server.start()
        self.set_serving(True)
        log.info("extender gRPC listening", extra={"port": self.port})
        return self

    def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        self.health.set("", status)
        self.health.set(SERVICE_NAME, status)

    def stop(self, grace: float = 10.0) -> None:
        self.set_serving(False)
        self.server.stop(grace).wait(grace + 1)
