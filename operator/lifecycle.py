"""Lifecycle rules of a DLJob's gang that do not need the cluster: pure functions of the DLJob's spec,
status and its pods as read (no client, no clock: ``now`` is an argument).

Restarts as batch/v1 Job restarts pods: exponential back-off between gang restarts (10 s doubling,
capped at 6 minutes, reset after a run longer than 10 minutes) and exit-code rules in the shape of
Job's ``podFailurePolicy`` (the first rule a failed container matches decides: FailJob, Ignore or
Count; no match counts). A gang must be all Running within its start timeout (Kueue's
``waitForPodsReady``): what its pods wait for is read from their status, and the nodes they never
started on are avoided next time. A node that stops reporting Ready loses its gang after the
node-lost grace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from qosmos.operator.crds import FailureAction, PodFailurePolicy
from qosmos.operator.translate import parse_time


def _terminated(container_status: Mapping[str, Any]) -> Mapping[str, Any]:
    """A container's termination record: its current state's, else its last one's ({} when neither)."""
    cs = container_status
    return ((cs.get("state") or {}).get("terminated")) or ((cs.get("lastState") or {}).get("terminated")) or {}


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The condition of type ``kind`` in a pod's or node's status, None when it reports none."""
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)


# Pods stopped on purpose by someone else (the reasons of Kubernetes' DisruptionTarget condition): a drain's
# eviction, kube-scheduler's preemption, the taint manager, the pod GC. Not the kubelet's own eviction under
# node pressure (TerminationByKubelet), which a Job counts as a failure too.
DISRUPTIONS = {
    "EvictionByEvictionAPI": "was evicted (kubectl drain, or the Eviction API)",
    "PreemptionByScheduler": "was preempted by kube-scheduler for a pod of higher priority",
    "DeletionByTaintManager": "was evicted by a NoExecute taint of its node",
    "DeletionByPodGC": "was deleted by the pod garbage collector (its node gone or out of service)",
}


class Disruption(NamedTuple):
    reason: str  # one of DISRUPTIONS
    since: float | None  # when (the condition's lastTransitionTime; None when it does not say)


def disruption(pod: Mapping[str, Any]) -> Disruption | None:
    """How the pod was disrupted (its ``DisruptionTarget`` condition, a reason of :data:`DISRUPTIONS`), None
    when it was not."""
    c = _condition(pod.get("status") or {}, "DisruptionTarget")
    if c is None or c.get("status") != "True" or c.get("reason") not in DISRUPTIONS:
        return None
    return Disruption(str(c["reason"]), parse_time(c.get("lastTransitionTime")))


def exit_codes(pods: Iterable[Mapping[str, Any]]) -> list[tuple[str, int]]:
    """(container, exit code) of every container that terminated with a non-zero code."""
    out = []
    for p in pods:
        for cs in (p.get("status") or {}).get("containerStatuses") or []:
            code = _terminated(cs).get("exitCode")
            if isinstance(code, int) and code != 0:
                out.append((str(cs.get("name") or ""), code))
    return out


def failure_action(
    policy: PodFailurePolicy | None, codes: Sequence[tuple[str, int]]
) -> tuple[FailureAction, tuple[str, int] | None]:
    """What a failed run leads to, and the (container, code) that decided it (None: no rule matched)."""
    if policy is not None:
        for rule in policy.rules:
            e = rule.on_exit_codes
            for container, code in codes:
                if e.container_name not in (None, container):
                    continue
                if (code in e.values) == (e.operator == "In"):
                    return rule.action, (container, code)
    return FailureAction.COUNT, None


def start_deadline(admitted_at: float | None, restart_after: float | None, timeout_s: float) -> float | None:
    """When a gang not yet all Running is overdue: its admission's (or, after a restart, its back-off's
    end, when the gang was recreated) plus the start timeout. None without either."""
    since = max((t for t in (admitted_at, restart_after) if t is not None), default=None)
    return None if since is None else since + timeout_s


def started(pod: Mapping[str, Any]) -> bool:
    """A gang pod that has started, as Kueue's waitForPodsReady counts: Succeeded, or Running and Ready
    (a readiness probe holds it until, say, its rendezvous is done; a pod that reports no Ready
    condition counts as ready once Running)."""
    status = pod.get("status") or {}
    if status.get("phase") == "Succeeded":
        return True
    if status.get("phase") != "Running":
        return False
    ready = _condition(status, "Ready")
    return ready is None or ready.get("status") == "True"


def termination_message(pods: Iterable[Mapping[str, Any]], limit: int = 600) -> str | None:
    """The last lines a failed container left (its termination message; with the gang pods'
    ``FallbackToLogsOnError``, its log's tail), so the DLJob's condition says why, not only the code."""
    for p in pods:
        for cs in (p.get("status") or {}).get("containerStatuses") or []:
            term = _terminated(cs)
            msg = str(term.get("message") or "").strip()
            if msg and term.get("exitCode"):
                return msg[-limit:]
    return None


def waiting_reasons(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """Why each pod of a gang is not running, in the pod's own words: a container's waiting reason
    (``ImagePullBackOff: Back-off pulling image ...``), the scheduler's (``Unschedulable: 0/3 nodes
    ...``) or its phase. Running and finished pods say nothing."""
    out = []
    for p in pods:
        name = str((p.get("metadata") or {}).get("name", "?"))
        status = p.get("status") or {}
        if started(p) or status.get("phase") == "Failed":
            continue
        if status.get("phase") == "Running":
            ready = _condition(status, "Ready") or {}
            out.append(f"{name}: Running, not Ready" + (f": {ready['message']}" if ready.get("message") else ""))
            continue
        said = []
        for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
            w = (cs.get("state") or {}).get("waiting") or {}
            if w.get("reason") and w.get("reason") not in ("ContainerCreating", "PodInitializing"):
                said.append(f"{w['reason']}" + (f": {w['message']}" if w.get("message") else ""))
        if not said:
            for c in status.get("conditions") or []:
                if c.get("type") == "PodScheduled" and c.get("status") == "False":
                    said.append(
                        f"{c.get('reason') or 'NotScheduled'}" + (f": {c['message']}" if c.get("message") else "")
                    )
        if not said:
            gated = (p.get("spec") or {}).get("schedulingGates")
            said.append("SchedulingGated" if gated else f"{status.get('phase') or 'Pending'}")
        out.append(f"{name}: {'; '.join(dict.fromkeys(said))}")
    return out


def unstarted_nodes(pods_by_node: Mapping[str, Iterable[Mapping[str, Any]] | None]) -> list[str]:
    """The placement's nodes where no pod of the gang ever ran a container (missing, or Pending: the
    image, the scheduler, the node): the gang's next placement avoids them. A pod Running but not
    Ready is the program's doing, not the node's."""
    return [
        node
        for node, pods in pods_by_node.items()
        if not any((p.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed") for p in pods or ())
    ]


def ready_since(node: Mapping[str, Any]) -> float | None:
    """When the node's Ready condition last changed (``lastTransitionTime``; None when it does not say)."""
    ready = _condition(node.get("status") or {}, "Ready")
    return None if ready is None else parse_time(ready.get("lastTransitionTime"))


def not_ready_since(node: Mapping[str, Any], now: float) -> float | None:
    """Since when (epoch seconds) a node's Ready condition is False or Unknown (``now`` when it does not
    say); None while Ready or while it reports no Ready condition yet."""
    ready = _condition(node.get("status") or {}, "Ready")
    if ready is None or ready.get("status") == "True":
        return None
    return parse_time(ready.get("lastTransitionTime")) or now


__all__ = [
    "DISRUPTIONS",
    "Disruption",
    "disruption",
    "exit_codes",
    "failure_action",
    "not_ready_since",
    "ready_since",
    "start_deadline",
    "started",
    "termination_message",
    "unstarted_nodes",
    "waiting_reasons",
]
