"""Active and standby operator replicas through kopf's peering (``qosmos operator run --peering NAME``).

kopf's peering is not leader election: every replica writes a keep-alive (identity, priority,
lifetime, lastseen) into the ``status`` of one ``ClusterKopfPeering`` object (``KopfPeering`` in
``--namespace``), and a replica pauses its watch streams while a live peer has a **higher or the
same** priority (``kopf._core.engines.peering.process_peering_event``; equal priorities pause every
replica). Two consequences for qosmos:

* Replicas need distinct priorities. :func:`default_priority` ranks by start time, the oldest
  first, so a replica that joins (a rolling update, a rescheduled pod) stands by instead of
  taking over from a running one.
* kopf pauses only its own watch handlers; the reconcile worker also runs on a timer. The worker
  therefore asks :func:`is_active` (the same rule, on the same object) before every pass.

A replica that exits cleanly removes its record (kopf writes ``lifetime: 0``), and the standby
takes over at its next pass; one killed outright is waited for until its record expires (its
``lifetime``, kopf's 60 s). kopf's caveat stands: there is no per-object lock, so two replicas
may both act for a moment around a change of hands. Every write of a pass is idempotent (a create
meets AlreadyExists, status patches converge), so such an overlap repeats work, not decisions.
"""

from __future__ import annotations

import os
import random
import socket
import time
from collections.abc import Mapping
from typing import Any, cast

GROUP = "kopf.dev"
VERSION = "v1"
CLUSTER_PLURAL = "clusterkopfpeerings"  # cluster-wide operators (no --namespace)
NAMESPACED_PLURAL = "kopfpeerings"


def own_identity() -> str:
    """This replica's peer id: the pod name (``POD_ID``, as kopf reads it) else host/pid/random."""
    pod = os.environ.get("POD_ID")
    if pod:
        return pod
    return f"{socket.gethostname()}/{os.getpid()}/{random.randrange(16**6):06x}"


def default_priority(now: float | None = None) -> int:
    """A priority that ranks replicas by start time, the oldest highest (kopf: the higher runs).

    Milliseconds since the epoch, negated, times 1,000 plus a random 0-999: two replicas started in
    the same millisecond still differ (equal priorities would pause both)."""
    t = time.time() if now is None else now
    return -int(t * 1000) * 1000 + random.randrange(1000)


def is_active(status: Mapping[str, Any] | None, identity: str, priority: int) -> bool:
    """kopf's rule on a peering object's ``status``: active unless a live peer other than this one has
    a priority >= ours. Before this replica's own record is there (kopf's first keep-alive), it
    counts as standing by: a replica that started a moment earlier may not have written yet either."""
    from kopf._core.engines.peering import Identity, Peer

    records = dict(status or {})
    if identity not in records:
        return False
    for peer_id, info in records.items():
        if peer_id == identity or not isinstance(info, Mapping):
            continue
        peer = Peer(identity=Identity(peer_id), **info)
        if not peer.is_dead and peer.priority >= priority:
            return False
    return True


def ensure_object(api_client: Any, name: str, namespace: str | None) -> None:
    """Create the peering object (kopf waits, paused, until it exists); AlreadyExists is fine."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    custom = client.CustomObjectsApi(api_client)
    kind = "KopfPeering" if namespace else "ClusterKopfPeering"
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, "metadata": {"name": name}}
    try:
        if namespace:
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, NAMESPACED_PLURAL, body)
        else:
            custom.create_cluster_custom_object(GROUP, VERSION, CLUSTER_PLURAL, body)
    except ApiException as exc:
        if exc.status != 409:
            raise


class Peering:
    """This replica's view of its peering object, read before each pass."""

    def __init__(self, api_client: Any, name: str, namespace: str | None, identity: str, priority: int) -> None:
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api_client)
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.priority = priority

    def active(self) -> bool:
        """Whether this replica may run a pass now (:func:`is_active` on a fresh read)."""
        if self.namespace:
            obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, NAMESPACED_PLURAL, self.name)
        else:
            obj = self.custom.get_cluster_custom_object(GROUP, VERSION, CLUSTER_PLURAL, self.name)
        # the client types a custom object as ``object``: it is the apiserver's JSON object
        return is_active(cast("Mapping[str, Any]", obj).get("status"), self.identity, self.priority)
