"""This node's managed pods, kept current by one list and then a watch (not a list every pass).

Both select ``spec.nodeName=<node>`` and the managed label on the server; every request has a client
timeout (``_request_timeout``) and each watch a server-side one (``timeout_seconds``), after which it
is re-opened from the last resourceVersion. A 410 Gone (the version expired) or an ERROR event means
a fresh list. Failures back off (1 s doubling to 30 s) and leave the last known pods in place.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from qosmos.sidecar.state import MANAGED_LABEL, MANAGED_VALUE

log = logging.getLogger("qosmos.sidecar")

StreamFn = Callable[..., Iterator[dict[str, Any]]]


class NotSynced(RuntimeError):
    """The pods are not known yet: the pass must not act on an empty list."""


def _default_stream(func: Callable[..., Any], **kwargs: Any) -> Iterator[dict[str, Any]]:
    from kubernetes import watch

    events: Iterator[dict[str, Any]] = watch.Watch().stream(func, **kwargs)
    return events


class PodCache:
    """Running pods of one node carrying the managed label. ``api``: a ``CoreV1Api``."""

    def __init__(
        self,
        api: Any,
        node: str,
        request_timeout_s: float = 10.0,
        watch_timeout_s: int = 300,
        stream: StreamFn = _default_stream,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.node = api, node
        self.request_timeout_s, self.watch_timeout_s = request_timeout_s, watch_timeout_s
        self.stream, self.sleep, self.clock = stream, sleep, clock
        self.pods_by_uid: dict[str, Any] = {}
        self.resource_version = ""
        self.synced = False  # a list succeeded at least once
        self.last_contact = float("-inf")  # when the API last answered (list or watch event)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _selectors(self) -> dict[str, Any]:
        return {"field_selector": f"spec.nodeName={self.node}", "label_selector": f"{MANAGED_LABEL}={MANAGED_VALUE}"}

    def relist(self) -> None:
        resp = self.api.list_pod_for_all_namespaces(**self._selectors(), _request_timeout=self.request_timeout_s)
        with self._lock:
            self.pods_by_uid = {p.metadata.uid: p for p in resp.items}
            self.resource_version = resp.metadata.resource_version or ""
            self.synced = True
            self.last_contact = self.clock()

    def watch_once(self) -> bool:
        """One watch from the current version until its timeout; False when a relist is needed."""
        events = self.stream(
            self.api.list_pod_for_all_namespaces,
            **self._selectors(),
            watch=True,  # list + watch on pods (the chart's ClusterRole)
            resource_version=self.resource_version,
            timeout_seconds=self.watch_timeout_s,
            allow_watch_bookmarks=True,
            _request_timeout=(self.request_timeout_s, self.watch_timeout_s + self.request_timeout_s),
        )
        for ev in events:
            kind, obj = ev.get("type"), ev.get("object")
            if kind == "ERROR":
                log.info("pod watch: %s; listing again", getattr(obj, "message", obj))
                return False
            md = getattr(obj, "metadata", None)
            with self._lock:
                self.last_contact = self.clock()
                if md is not None and md.resource_version:
                    self.resource_version = md.resource_version
                if kind in ("ADDED", "MODIFIED") and md is not None:
                    self.pods_by_uid[md.uid] = obj
                elif kind == "DELETED" and md is not None:
                    self.pods_by_uid.pop(md.uid, None)
            if self._stop.is_set():
                break
        return True

    def step(self) -> None:
        """List when needed, then watch once (what the background thread repeats)."""
        if not self.synced or not self.resource_version:
            self.relist()
        try:
            ok = self.watch_once()
        except Exception as e:
            if getattr(e, "status", None) == 410:  # the version expired: list again
                ok = False
            else:
                raise
        if not ok:
            self.relist()

    def pods(self) -> list[Any]:
        """The running pods; raises :class:`NotSynced` before the first list (a pass that saw "no pods"
        would release every throttle and remove the HTB of a node it simply has not listed yet)."""
        if not self.synced:
            raise NotSynced(f"no pod list of node {self.node} from the API yet")
        with self._lock:
            pods = list(self.pods_by_uid.values())
        return [p for p in pods if (p.status and p.status.phase) == "Running"]

    def _loop(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                self.step()
                backoff = 1.0
            except Exception as e:  # the API away: keep the last pods, retry with a backoff
                log.warning("pod watch: %s (retrying in %.0f s)", e, backoff)
                self.sleep(backoff)
                backoff = min(30.0, backoff * 2)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="pod-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
