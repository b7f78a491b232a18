"""Lifecycle rules of a DLJob's gang that do not need the cluster: pure functions of the DLJob's spec,
status and its pods as read (no client, no clock: ``now`` is an argument).

Restarts as batch/v1 Job restarts pods: exponential back-off between gang restarts (10 s doubling,
capped at 6 minutes, reset after a run longer than 10 minutes) and exit-code rules in the shape of
Job's ``podFailurePolicy`` (the first rule a failed container matches decides: FailJob, Ignore or
Count; no match counts).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from qosmos.operator.crds import FailureAction, PodFailurePolicy

BACKOFF_BASE_S = 10.0
BACKOFF_CAP_S = 360.0
BACKOFF_RESET_S = 600.0  # a run this long was not a crash loop: the next failure backs off from the start


def restart_delay(consecutive: int) -> float:
    """Seconds before the gang is recreated after its ``consecutive``-th failed run in a row (>= 1)."""
    return min(BACKOFF_BASE_S * 2.0 ** (max(consecutive, 1) - 1), BACKOFF_CAP_S)


def consecutive_failures(previous: int, ran_seconds: float | None) -> int:
    """The count of failed runs in a row after one more that ran ``ran_seconds`` (None: never started)."""
    if ran_seconds is not None and ran_seconds > BACKOFF_RESET_S:
        return 1
    return previous + 1


def exit_codes(pods: Iterable[Mapping[str, Any]]) -> list[tuple[str, int]]:
    """(container, exit code) of every container that terminated with a non-zero code."""
    out = []
    for p in pods:
        for cs in (p.get("status") or {}).get("containerStatuses") or []:
            term = ((cs.get("state") or {}).get("terminated")) or ((cs.get("lastState") or {}).get("terminated"))
            code = (term or {}).get("exitCode")
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


__all__ = [
    "BACKOFF_BASE_S",
    "BACKOFF_CAP_S",
    "BACKOFF_RESET_S",
    "consecutive_failures",
    "exit_codes",
    "failure_action",
    "restart_delay",
]
