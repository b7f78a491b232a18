"""``kubectl qosmos``: the console script ``kubectl-qosmos`` (kubectl runs any ``kubectl-<name>`` on
PATH as ``kubectl <name>``).

* ``queue VC``: a VirtualCluster's queued DLJobs in its policy's order, with GENIE's waiting
  allowance (Eq. 13), the forecast start (ETA) and why each waits;
* ``why DLJOB``: the operator's ``Admitted`` condition (the core's reason and line) and what would
  unblock it;
* ``explain DLJOB``: GENIE's placement table for its task on its VirtualCluster's nodes
  (``qosmos.extender.explain``, the table ``qosmos explain`` prints).

Everything shown comes from the objects (the operator writes the statuses); nothing is decided
here. The formatting functions take objects and return text, so they are tested without a cluster.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from qosmos.extender.core import admission
from qosmos.extender.core.errors import InvalidInput
from qosmos.operator.crds import GROUP, VERSION, DLJobPhase, VirtualClusterSpec
from qosmos.operator.kube import Raw
from qosmos.operator.reconcile import ADMITTED, reason_of
from qosmos.operator.translate import NO_VC, assign_nodes, core_nodes, job_from_dljob, parse_time

from qosmos.clitools import clean_errors

QUEUED = (None, DLJobPhase.QUEUED.value)

# What would unblock a DLJob, by the reason of its Admitted=False condition (the core's wait codes,
# admission.py, as the operator spells them, and the operator's own reasons).
UNBLOCK: dict[str, str] = {
    reason_of(admission.HEAD): "it is first in line and holds a reservation: it starts as soon as running jobs free "
    "what it needs (see ETA); no job may start in a way that delays it",
    reason_of(admission.NO_FIT): "the free GPUs of its VirtualCluster cannot hold it now: it starts when running jobs "
    "finish; fewer GPUs, no fixed gpusPerNode, fewer gpuModels constraints or more nodes in the VirtualCluster "
    "(its nodeSelector) would let it start sooner",
    reason_of(admission.RESERVED): "it would fit now, but starting it would delay the blocked head's reservation: it "
    "starts once it fits without delaying the head (a shorter predicted run, or backfill relaxed|adaptive with a "
    "larger relaxFactor on the VirtualCluster)",
    reason_of(admission.BEHIND): "a blocked job ahead of it holds the queue (no backfilling): it moves up when that "
    "job starts; backfill easy|relaxed|adaptive on the VirtualCluster would let it start around the head",
    reason_of(admission.QUOTA): "its VirtualCluster's GPU quota is in use: it starts when its running jobs release "
    "GPUs; a larger spec.quota.gpus or spec.quota.borrowingLimit would admit it",
    reason_of(admission.INADMISSIBLE): "it asks more than its VirtualCluster could ever give it (more GPUs than its "
    "spec.quota.gpus plus borrowingLimit, or a shape its nodes or its spec.placement cannot hold even when empty): "
    "it blocks no other job and starts only once the VirtualCluster changes (quota, nodes, placement) or it is "
    "resubmitted smaller",
    reason_of(admission.BLOCKED): "the VirtualCluster's ordering policy holds it (e.g. a share used up): it starts "
    "when the policy ranks it ahead",
    "Preempted": "a job that ranks higher took its GPUs; it is back in its queue and restarts from the beginning "
    "(unless its workload checkpoints)",
    "PreemptedForInference": "an InferenceService's replica needed its room (SODA: the last-submitted training or "
    "CPU job gives way); it waits at the head of its queue and restarts from the beginning (unless it checkpoints)",
    "VirtualClusterMissing": "its spec.virtualCluster names no VirtualCluster: create it, or recreate the DLJob "
    "naming an existing one",
    "NodeLost": "a node of its placement is gone, or NotReady longer than nodeLostSeconds: it is back in its queue "
    "(no restart counted) and will be placed anew",
    "Disrupted": "a pod of its gang was evicted or deleted by someone else (kubectl drain, kube-scheduler's "
    "preemption, a NoExecute taint, the pod GC; the message says which): it is back in its queue with its run kept "
    "(no restart counted) and will be placed anew",
    "StartTimeout": "its gang was not all Running within startTimeoutSeconds (the message says what each pod waited "
    "for: an image pull, a taint, the scheduler): requeued at the head of its queue away from those nodes "
    "(status.avoidNodes), Failed after backoffLimit such requeues; fix the image or template, or raise the timeout",
    "InvalidPod": "the apiserver refused its pods (see the message): fix spec.template and recreate the DLJob",
    "Suspended": "spec.suspend is true: it is out of its queue (stopped with its pods' grace period if it ran); "
    "set spec.suspend to false and it is queued again",
    "DeadlineExceeded": "spec.activeDeadlineSeconds (counted from its creation, queue time included) passed: "
    "it failed and its pods were stopped; a longer deadline, or none, on a new DLJob",
    "InvalidTemplate": "a dry run of its pods was refused by the apiserver (see the message): it stays out of its "
    "queue until spec.template is fixed (kubectl edit or apply: the new generation is checked at once)",
}


# --------------------------------------------------------------------------- formatting (pure)


def duration(seconds: float) -> str:
    """kubectl's compact durations: 45s, 12m, 3h, 2d (sign kept: -41s)."""
    if not math.isfinite(seconds):
        return "-"
    sign = "-" if seconds < 0 else ""
    s = abs(round(seconds))
    if s < 120:
        return f"{sign}{s}s"
    if s < 120 * 60:
        return f"{sign}{s // 60}m"
    if s < 48 * 3600:
        h, m = divmod(s // 60, 60)
        return f"{sign}{h}h{m}m" if h < 8 and m else f"{sign}{h}h"
    return f"{sign}{s // 86400}d"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns as kubectl prints them: upper-case headers, left-aligned, three spaces apart."""
    cols = [headers, *rows]
    widths = [max(len(r[i]) for r in cols) for i in range(len(headers))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cols)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("status") or {}


def _key(obj: Mapping[str, Any]) -> str:
    m = _meta(obj)
    return f"{m.get('namespace', 'default')}/{m.get('name', '')}"


def admitted_condition(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return next((c for c in _status(obj).get("conditions") or [] if c.get("type") == ADMITTED), {})


def _eta(obj: Mapping[str, Any], now: float) -> str:
    t = parse_time(_status(obj).get("eta"))
    if t is None:
        return "-"
    return "now" if t <= now else f"in {duration(t - now)}"


def queue_of(vc: str, dljobs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The VirtualCluster's waiting DLJobs in its policy's order: the operator's ``queuePosition``,
    then (no position yet: not seen by a pass) by creation."""

    def order(obj: Mapping[str, Any]) -> tuple[float, float, str]:
        pos = _status(obj).get("queuePosition")
        created = parse_time(_meta(obj).get("creationTimestamp")) or math.inf
        return (math.inf if pos is None else float(pos), created, _key(obj))

    waiting = [
        j for j in dljobs if (j.get("spec") or {}).get("virtualCluster") == vc and _status(j).get("phase") in QUEUED
    ]
    return sorted(waiting, key=order)


def format_queue(vc_name: str, vc: Mapping[str, Any] | None, dljobs: Sequence[Mapping[str, Any]], now: float) -> str:
    """``kubectl qosmos queue VC``: a line on the VirtualCluster, then its queue in order."""
    lines = []
    if vc is None:
        lines.append(f"VirtualCluster {vc_name} does not exist (its DLJobs wait: VirtualClusterMissing)")
    else:
        spec = VirtualClusterSpec.model_validate(vc.get("spec") or {})
        st = _status(vc)
        gpus = st.get("gpus") or {}
        quota = f", quota {spec.quota.gpus}" if spec.quota else ""
        if spec.cohort is not None:
            b = spec.quota.borrowing_limit if spec.quota else None
            quota += f" in cohort {spec.cohort} (+{'any' if b is None else b} borrowable)"
        lines.append(
            f"VirtualCluster {vc_name}: policy {spec.policy}, placement {spec.placement}, backfill {spec.backfill}; "
            f"GPUs {gpus.get('used', 0)}/{gpus.get('total', 0)} used{quota}, borrowed {gpus.get('borrowed', 0)}, "
            f"lent {gpus.get('lent', 0)}; {st.get('queued', 0)} queued, {st.get('running', 0)} running"
        )
    queue = queue_of(vc_name, dljobs)
    if not queue:
        lines.append("no DLJob waits in its queue")
        return "\n".join(lines)
    rows = []
    for obj in queue:
        job_spec, st = obj.get("spec") or {}, _status(obj)
        allowance = st.get("waitingAllowanceSeconds")
        queued_since = parse_time(st.get("queuedSince")) or parse_time(_meta(obj).get("creationTimestamp"))
        rows.append(
            [
                "-" if st.get("queuePosition") is None else str(st["queuePosition"]),
                _key(obj),
                str(job_spec.get("qosClass", "Normal")),
                str(job_spec.get("gpus", 0)),
                "-" if allowance is None else duration(float(allowance)),
                _eta(obj, now),
                str(admitted_condition(obj).get("reason", "-")),
                "-" if queued_since is None else duration(now - queued_since),
            ]
        )
    lines.append(table(["POS", "DLJOB", "QOS", "GPUS", "ALLOWANCE", "ETA", "REASON", "WAITING"], rows))
    return "\n".join(lines)


def format_why(obj: Mapping[str, Any], now: float) -> str:
    """``kubectl qosmos why DLJOB``: its phase; while it waits, the operator's reason and line, the
    numbers behind them, and what would unblock it."""
    spec, st = obj.get("spec") or {}, _status(obj)
    phase = st.get("phase")
    vc = spec.get("virtualCluster", "?")
    head = f"DLJob {_key(obj)} (VirtualCluster {vc})"
    cond = admitted_condition(obj)
    if phase == DLJobPhase.FAILED.value and cond.get("status") == "False":
        reason = str(cond.get("reason", ""))
        hint = UNBLOCK.get(reason)
        return "\n".join(
            [f"{head}: Failed, it is not pending", f"reason: {reason}", f"  {cond.get('message', '')}"]
            + ([f"what would fix it: {hint}"] if hint else [])
        )
    if phase not in QUEUED:
        placement = (st.get("placement") or {}).get("shape")
        where = f" on {placement}" if placement else ""
        since = {"Admitted": "admittedAt", "Running": "startTime"}.get(str(phase), "completionTime")
        t = parse_time(st.get(since))
        ago = f" for {duration(now - t)}" if t is not None and phase in ("Admitted", "Running") else ""
        return f"{head}: {phase}{where}{ago}; it is not pending"
    if not cond:
        return f"{head}: waiting for the operator's first pass (no Admitted condition yet)"
    reason = str(cond.get("reason", ""))
    pos = st.get("queuePosition")
    lines = [f"{head}: {'Queued' if phase else 'new'}" + ("" if pos is None else f", position {pos} in its queue")]
    lines.append(f"reason: {reason}")
    lines.append(f"  {cond.get('message', '')}")
    allowance = st.get("waitingAllowanceSeconds")
    if allowance is not None:
        late = " (overdue: its QoS deadline can no longer be met)" if allowance < 0 else ""
        lines.append(f"waiting allowance (GENIE Eq. 13): {duration(float(allowance))}{late}")
    if st.get("deadline"):
        lines.append(f"deadline (GENIE Eq. 12): {st['deadline']}")
    if st.get("predictedDurationSeconds") is not None:
        lines.append(f"predicted run time: {duration(float(st['predictedDurationSeconds']))}")
    eta = _eta(obj, now)
    lines.append(f"ETA: {eta}" + (f" ({st['eta']})" if st.get("eta") else " (no forecast)"))
    lines.append(f"what would unblock it: {UNBLOCK.get(reason, 'no hint for this reason')}")
    return "\n".join(lines)


def explain_dljob(
    obj: Mapping[str, Any],
    vcs: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    profiles: Any,
    now: float,
) -> dict[str, Any]:
    """GENIE's table for the DLJob's task on its VirtualCluster (``qosmos.extender.explain.explain``):
    the platform is the VirtualCluster's nodes, count x largest node, as the operator's passes see it."""
    from qosmos.extender.core import genie
    from qosmos.extender.core.types import JobKind, Platform
    from qosmos.extender.explain import explain, resolve_profile

    job = job_from_dljob(obj)
    if job.kind is JobKind.CPU:
        raise InvalidInput("spec.kind", "cpu", "a cpu DLJob has no GENIE placement table")
    if not (job.model and job.batch and job.iters):
        raise InvalidInput(
            "spec", _key(obj), "GENIE needs modelType, globalBatchSize and iterations (its task <type, b, iters>)"
        )
    vc = next((v for v in vcs if _meta(v).get("name") == job.vc), None)
    if vc is None:
        raise InvalidInput("spec.virtualCluster", job.vc, "no such VirtualCluster")
    mine = [n for n in core_nodes(nodes, assign_nodes(nodes, vcs)) if n.vc == job.vc and n.vc != NO_VC]
    if not mine:
        raise InvalidInput("spec.virtualCluster", job.vc, "the VirtualCluster selects no node")
    by_model: dict[str, int] = {}
    for n in mine:
        by_model[n.gpu_model] = by_model.get(n.gpu_model, 0) + n.gpus
    gpu_model = max(sorted(by_model), key=lambda m: by_model[m])  # the VC's main GPU model, as the simulator's
    platform = Platform.of([n.gpus for n in mine], gpu_model)
    theta = VirtualClusterSpec.model_validate(vc.get("spec") or {}).theta
    profile, provenance = resolve_profile(job.model, None, None, None, None, profiles, gpu_model)
    result = explain(genie.Task.from_job(job), profile, platform, now, theta, provenance)
    result["platform"] = {"nodes": platform.nodes, "gpus_per_node": platform.gpus_per_node}
    result["fixed_shape"] = None
    fixed = job.fixed_shape
    if fixed is not None:  # GENIE policies rank it on this one shape (core/ordering.py, _GeniePolicy.ranked)
        task = genie.Task.from_job(job)
        row = genie.placement_row(task, fixed, profile, platform, theta)
        dl = genie.deadline(task, profile)
        result["fixed_shape"] = {
            "d_node": fixed.d_node,
            "d_gpn": fixed.d_gpn,
            "lat": row.lat if math.isfinite(row.lat) else None,
            "feasible": genie.is_feasible(row.lat, now, dl),
            "waiting_allowance": (
                genie.waiting_allowance(genie.ect(task, profile), row.lat, now - task.submit)
                if math.isfinite(row.lat)
                else None
            ),
        }
    return result


def format_explain(obj: Mapping[str, Any], result: Mapping[str, Any], now: float, rows: int = 16) -> str:
    """The table of :func:`explain_dljob`: the best ``rows`` placements by CER plus GENIE's choice."""
    from qosmos.extender.explain import describe

    spec = obj.get("spec") or {}
    chosen = (result["chosen"]["d_node"], result["chosen"]["d_gpn"])
    fixed = result.get("fixed_shape")
    shown = list(result["placements"])
    if rows and len(shown) > rows:
        shown = sorted(shown, key=lambda r: (-(r["cer"] or 0.0), r["d_node"] * r["d_gpn"], r["d_node"]))[:rows]
        for want in (chosen, (fixed["d_node"], fixed["d_gpn"]) if fixed else None):
            if want and not any((r["d_node"], r["d_gpn"]) == want for r in shown):
                shown += [r for r in result["placements"] if (r["d_node"], r["d_gpn"]) == want]

    def num(x: float | None, fmt: str) -> str:
        return "inf" if x is None else format(x, fmt)

    body = [
        [
            ("* " if (r["d_node"], r["d_gpn"]) == chosen else "  ") + f"{r['d_node']}x{r['d_gpn']}",
            num(r["pr"], ".1f"),
            num(r["lat"], ".1f"),
            num(r["cost"], ".4f"),
            num(r["cer"], ".1f"),
            "yes" if r["feasible"] else "no",
            "yes" if r["extrapolated"] else "",
        ]
        for r in shown
    ]
    plat = result["platform"]
    lines = [
        f"DLJob {_key(obj)}: {spec.get('modelType')} b={spec.get('globalBatchSize')} iters={spec.get('iterations')} "
        f"{spec.get('kind', 'training')} {spec.get('qosClass', 'Normal')} on VirtualCluster "
        f"{spec.get('virtualCluster')} ({plat['nodes']} nodes x {plat['gpus_per_node']} GPUs)",
        table(["PLACEMENT", "PR (SAMPLES/S)", "LAT (S)", "COST", "CER", "FEASIBLE", "EXTRAPOLATED"], body),
    ]
    if len(shown) < len(result["placements"]):
        lines.append(f"showing {len(shown)} of {len(result['placements'])} placements, the best by CER (--rows 0: all)")
    deadline = result["deadline"]
    allowance = result["waiting_allowance"]
    lines.append(
        f"GENIE's choice (Alg. 1): {chosen[0]}x{chosen[1]} (*); deadline (Eq. 12) "
        f"{'-' if deadline is None else duration(deadline - now) + ' from now'}; waiting allowance (Eq. 13) "
        f"{'-' if allowance is None else duration(allowance)}"
    )
    if fixed:
        w = fixed["waiting_allowance"]
        lines.append(
            f"spec.gpusPerNode fixes {fixed['d_node']}x{fixed['d_gpn']}, the only placement GENIE policies consider: "
            f"Lat {num(fixed['lat'], '.1f')} s, {'feasible' if fixed['feasible'] else 'not feasible'}, waiting "
            f"allowance {'-' if w is None else duration(w)}"
        )
    placed = (_status(obj).get("placement") or {}).get("shape")
    if placed:
        lines.append(f"admitted as {placed}")
    lines.append(f"profile: {describe(result['profile'])}")
    lines += [f"note: {n}" for n in result["notes"]]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the cluster


class Cluster:
    """Reads through the kubeconfig (``--kubeconfig``, ``$KUBECONFIG``, ``~/.kube/config``, else in-cluster)."""

    def __init__(self, kubeconfig: Path | None, context: str | None) -> None:
        from kubernetes import client, config

        file = str(kubeconfig) if kubeconfig else None
        if kubeconfig is not None and not kubeconfig.is_file():
            raise InvalidInput("kubeconfig", file, "no such file")
        try:
            contexts, current = config.list_kube_config_contexts(config_file=file)
            active = next((c for c in contexts if c["name"] == context), None) if context else current
            if active is None:
                raise InvalidInput("context", context, "not in the kubeconfig")
            self.api = config.new_client_from_config(config_file=file, context=context)
            self.namespace = (active.get("context") or {}).get("namespace") or "default"
        except config.ConfigException:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                raise InvalidInput("kubeconfig", file, "no kubeconfig found, and not running in a cluster") from None
            self.api = client.ApiClient()
            self.namespace = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read_text().strip()
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)

    # (the client types a custom object, or a list of them, as ``object``: it is the apiserver's JSON object)
    def dljobs(self, namespace: str | None) -> list[dict[str, Any]]:
        if namespace:
            return list(
                cast("dict[str, Any]", self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "dljobs"))[
                    "items"
                ]
            )
        return list(cast("dict[str, Any]", self.custom.list_cluster_custom_object(GROUP, VERSION, "dljobs"))["items"])

    def dljob(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(
            cast("dict[str, Any]", self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "dljobs", name))
        )

    def virtual_clusters(self) -> list[dict[str, Any]]:
        return list(
            cast("dict[str, Any]", self.custom.list_cluster_custom_object(GROUP, VERSION, "virtualclusters"))["items"]
        )

    def nodes(self) -> list[dict[str, Any]]:
        return list(json.loads(cast(Raw, self.core.list_node(_preload_content=False)).data)["items"])


def _not_found(exc: Exception) -> bool:
    return getattr(exc, "status", None) == 404


def _split(name: str, namespace: str | None, cluster: Cluster) -> tuple[str, str]:
    """``NAME`` in -n (else the context's namespace), or ``NAMESPACE/NAME``."""
    if "/" in name:
        ns, _, n = name.partition("/")
        return ns, n
    return namespace or cluster.namespace, name


# --------------------------------------------------------------------------- the command

app = typer.Typer(
    name="kubectl-qosmos",
    help="kubectl qosmos: a VirtualCluster's queue, why a DLJob waits, GENIE's placement table for it.",
    no_args_is_help=True,
    add_completion=False,
)

Kubeconfig = Annotated[Path | None, typer.Option(help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")]
Context = Annotated[str | None, typer.Option(help="kubeconfig context (default: the current one)")]
Namespace = Annotated[
    str | None, typer.Option("--namespace", "-n", help="namespace (default: the context's, for queue: all)")
]


@app.command("queue")
@clean_errors()
def queue_cmd(
    vc: Annotated[str, typer.Argument(help="the VirtualCluster")],
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    """A VirtualCluster's waiting DLJobs in its policy's order.

    With each: GENIE's waiting allowance (Eq. 13), the forecast start (ETA) and why it waits."""
    from kubernetes.client.exceptions import ApiException

    cluster = Cluster(kubeconfig, context)
    vcs = {_meta(v).get("name"): v for v in cluster.virtual_clusters()}
    try:
        jobs = cluster.dljobs(namespace)
    except ApiException as exc:
        if exc.status != 403 or namespace:
            raise
        jobs = cluster.dljobs(cluster.namespace)  # may not list every namespace: show what it may see
        typer.echo(f"(no access to DLJobs of all namespaces: showing {cluster.namespace} only)", err=True)
    typer.echo(format_queue(vc, vcs.get(vc), jobs, time.time()))


@app.command("why")
@clean_errors()
def why_cmd(
    dljob: Annotated[str, typer.Argument(help="the DLJob: NAME (in -n) or NAMESPACE/NAME")],
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
) -> None:
    """Why a DLJob is pending (the operator's reason and line) and what would unblock it."""
    from kubernetes.client.exceptions import ApiException

    cluster = Cluster(kubeconfig, context)
    ns, name = _split(dljob, namespace, cluster)
    try:
        obj = cluster.dljob(ns, name)
    except ApiException as exc:
        if _not_found(exc):
            raise InvalidInput("dljob", f"{ns}/{name}", "not found") from None
        raise
    typer.echo(format_why(obj, time.time()))


@app.command("explain")
@clean_errors()
def explain_cmd(
    dljob: Annotated[str, typer.Argument(help="the DLJob: NAME (in -n) or NAMESPACE/NAME")],
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    db: Annotated[
        Path | None,
        typer.Option(help="model database (default: $QOSMOS_MODELDB, ~/.config/qosmos/models.json, built-ins)"),
    ] = None,
    rows: Annotated[int, typer.Option(help="placements shown: the best by CER (0: all)")] = 16,
    as_json: Annotated[
        bool, typer.Option("--json", help="the whole table as JSON (qosmos explain --json's keys)")
    ] = False,
) -> None:
    """GENIE's placement table for a DLJob's task on its VirtualCluster's nodes.

    Each placement's rate, latency, cost, CER and feasibility; GENIE's choice, deadline and waiting allowance."""
    from kubernetes.client.exceptions import ApiException
    from qosmos.extender.explain import load_profiles

    if rows < 0:
        raise InvalidInput("rows", rows, "must be >= 0 (0: all)")
    cluster = Cluster(kubeconfig, context)
    ns, name = _split(dljob, namespace, cluster)
    try:
        obj = cluster.dljob(ns, name)
    except ApiException as exc:
        if _not_found(exc):
            raise InvalidInput("dljob", f"{ns}/{name}", "not found") from None
        raise
    now = time.time()
    result = explain_dljob(obj, cluster.virtual_clusters(), cluster.nodes(), load_profiles(db), now)
    if as_json:
        typer.echo(json.dumps(result, indent=2, allow_nan=False))
        return
    typer.echo(format_explain(obj, result, now, rows))


def main() -> None:
    app()
