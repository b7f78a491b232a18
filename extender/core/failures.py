"""What a failed run of a gang costs and when it runs again: pure rules the operator applies to a DLJob
whose pod failed and the simulator applies to a job whose node failed (one implementation of both).

Restarts follow batch/v1 Job's pod back-off: 10 s doubling, capped at 6 minutes, reset after a run
longer than 10 minutes; after ``backoff_limit`` counted restarts the job fails. A run that ends without a
grace period (a failure, a lost node) keeps the progress of its whole checkpoint intervals only.
"""

from __future__ import annotations

import math

BACKOFF_BASE_S = 10.0
BACKOFF_CAP_S = 360.0
BACKOFF_RESET_S = 600.0  # a run this long was not a crash loop: the next failure backs off from the start
DEFAULT_BACKOFF_LIMIT = 3  # each retry restarts the whole gang, so fewer than batch/v1 Job's 6
DEFAULT_NODE_LOST_S = 300  # as the taint manager's default tolerationSeconds for not-ready/unreachable


def restart_delay(consecutive: int) -> float:
    """Seconds before the gang is recreated after its ``consecutive``-th failed run in a row (>= 1)."""
    return min(BACKOFF_BASE_S * 2.0 ** (max(consecutive, 1) - 1), BACKOFF_CAP_S)


def consecutive_failures(previous: int, ran_seconds: float | None) -> int:
    """The count of failed runs in a row after one more that ran ``ran_seconds`` (None: never started)."""
    if ran_seconds is not None and ran_seconds > BACKOFF_RESET_S:
        return 1
    return previous + 1


def kept_run(ran: float, checkpoint_interval: float | None) -> float:
    """Seconds of a run segment that ended without a grace period (a failed pod, a lost node) whose progress
    the job keeps: its whole checkpoint intervals, one every ``checkpoint_interval`` seconds of run from the
    segment's start (0: none, it keeps no periodic checkpoints; None: the whole run)."""
    if checkpoint_interval is None:
        return ran
    if checkpoint_interval <= 0:
        return 0.0
    return math.floor(ran / checkpoint_interval) * float(checkpoint_interval)


def node_lost_at(not_ready_since: float, grace: float, pod_gone: float = math.inf) -> float:
    """When a gang with a node not Ready since ``not_ready_since`` goes back to its queue (reason NodeLost,
    not a failure): after ``grace`` seconds of it (nodeLostSeconds), or sooner when a pod of it there has
    failed or gone (``pod_gone``: a machine back from a crash reports its pods failed). Its run ends at
    ``not_ready_since``: the stall ran nothing and wrote no checkpoint."""
    return min(not_ready_since + grace, pod_gone)


__all__ = [
    "BACKOFF_BASE_S",
    "BACKOFF_CAP_S",
    "BACKOFF_RESET_S",
    "DEFAULT_BACKOFF_LIMIT",
    "DEFAULT_NODE_LOST_S",
    "consecutive_failures",
    "kept_run",
    "node_lost_at",
    "restart_delay",
]
