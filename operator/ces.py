"""Cluster Energy Saving, live (issue 12 §4; seed 000 §4.3, Alg. 2).

The operator records the cluster's running GPU nodes every minute (ConfigMap
``qosmos-operator-ces``, so a restart keeps the history), trains the CES forecaster
(``qosmos.predictors.ces.CESForecaster``) on it and applies Alg. 2 with the functions
``qosmos predict ces`` replays — ``nodes_to_wake`` (JobArrivalCheck) and ``nodes_to_sleep``
(PeriodicCheck + DynamicResourceSleep), with H, P and C_R built as the replay builds them.
This module only translates: nodes, pods and DLJobs to node counts, and the decisions back to
node patches and power-driver calls.

- JobArrivalCheck, every pass: per partition (the VirtualCluster a node belongs to, as the
  reconcile pass assigns nodes), R = its busy nodes + the nodes its queued gangs lack (DLJobs whose
  condition ``Admitted=False`` says they wait for resources: NoFit, Head, BehindHead, Reserved;
  not Inadmissible: waking nodes cannot let such a job start;
  a gang of ``gpus / gpusPerNode`` nodes, or of ``ceil(gpus / the partition's largest node)``),
  C_A = its awake + waking nodes; ``nodes_to_wake`` says how many sleeping nodes wake. A sleeping
  node named by an admitted gang's placement always wakes (the core placed it there).
- PeriodicCheck every ``period`` minutes (10): H = the forecaster's 10-minute slots of the past
  hour, P = its forecast for the next 3 h (persistence, i.e. no predicted fall, until it is
  trained on ``min_train_minutes`` of history), C_R = nodes busy at any minute of the last
  ``period``; ``nodes_to_sleep`` says how many idle awake nodes sleep.

A sleeping node is cordoned (``spec.unschedulable``), tainted ``qosmos.io/power=asleep:NoSchedule``
and labelled ``qosmos.io/power=asleep``; only a node without running pods (DaemonSet and mirror
pods aside) and named by no admitted gang sleeps, and the node's pods are listed again after the
cordon: one that appeared meanwhile undoes the sleep. A waking node is labelled
``qosmos.io/power=waking`` and stays cordoned and tainted (``=waking``) for the wake latency
(annotation ``qosmos.io/power-ready-at``) — and, with a real power driver, until it reports Ready —
then the taint, the cordon and the label go. The nodes are the truth: a restarted operator reads
the power states back from them.

The power driver does the real work: ``none`` (the dev cluster: the latency is modelled by the
cordon), ``command`` (a template run without a shell, ``{node}``, ``{action}`` = sleep|wake,
``{power}`` = off|on, e.g. ``ipmitool -H {node}-bmc -U admin -P secret chassis power {power}``),
or ``webhook`` (POST ``{"node": ..., "action": ...}``).
"""

from __future__ import annotations

import json
import logging
import math
import shlex
import subprocess
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from prometheus_client import Counter, Gauge, Histogram
from qosmos.extender.cache import GPU_RESOURCE
from qosmos.extender.core.errors import InvalidInput
from qosmos.operator import metrics
from qosmos.operator.crds import DLJobPhase, DLJobSpec
from qosmos.operator.kube import BOUND, Kube, Raw
from qosmos.operator.translate import Gang, assign_nodes, key_of, meta, nodes_of, parse_time, rfc3339
from qosmos.predictors.ces import (
    HORIZON,
    SLOT_MIN,
    CESConfig,
    CESForecaster,
    Series,
    busy_nodes,
    choose_knobs,
    future_nodes_trend,
    nodes_to_sleep,
    nodes_to_wake,
    recent_nodes_trend,
    sigma_tradeoff,
    to_slots,
)

log = logging.getLogger("qosmos.operator")

LABEL_POWER = "qosmos.io/power"  # asleep | waking; absent: awake
TAINT_KEY = "qosmos.io/power"
ANN_SINCE = "qosmos.io/power-since"  # when the node was put to sleep or woken (RFC 3339)
ANN_READY_AT = "qosmos.io/power-ready-at"  # a waking node serves from then on (RFC 3339, ms)
ASLEEP, WAKING, AWAKE = "asleep", "waking", "awake"
CONFIG_MAP = "qosmos-operator-ces"
KEY = "history.json"
MAX_MINUTES = 28 * 1440  # four weeks of per-minute counts: ~150 kB of the ConfigMap's 1 MiB
RESOURCE_WAITS = ("NoFit", "Head", "BehindHead", "Reserved")  # Admitted=False reasons: waits for resources
XIS = (0.0, 2.0, 5.0, 10.0)  # ξ candidates of the automatic choice (as `qosmos predict ces`)
ACTIVE_PHASES = (DLJobPhase.ADMITTED.value, DLJobPhase.RUNNING.value)

SLEEPING = Gauge("qosmos_operator_ces_sleeping_nodes", "GPU nodes asleep (Cluster Energy Saving)")
WAKING_NODES = Gauge("qosmos_operator_ces_waking_nodes", "GPU nodes woken and not serving yet (wake latency)")
RUNNING_NODES = Gauge("qosmos_operator_ces_running_nodes", "C_R: GPU nodes busy (running pods or an admitted gang)")
ACTIVE_NODES = Gauge("qosmos_operator_ces_active_nodes", "C_A: GPU nodes awake or waking")
SIGMA = Gauge("qosmos_operator_ces_sigma", "buffer nodes σ in use")
WAKEUPS = Counter("qosmos_operator_ces_wakeups_total", "NodesWakeUp calls (Alg. 2 JobArrivalCheck)")
WOKEN = Counter("qosmos_operator_ces_woken_nodes_total", "nodes woken")
NODES_PER_WAKEUP = Histogram(
    "qosmos_operator_ces_nodes_per_wakeup",
    "nodes woken by one NodesWakeUp",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, float("inf")),
)
SLEEPS = Counter("qosmos_operator_ces_sleeps_total", "DynamicResourceSleep calls that put nodes to sleep")
SLEPT = Counter("qosmos_operator_ces_slept_nodes_total", "nodes put to sleep")
DELAYED_JOBS = Counter("qosmos_operator_ces_delayed_jobs_total", "DLJobs that waited for woken nodes")
WAKE_DELAY = Histogram(
    "qosmos_operator_ces_wake_delay_seconds",
    "from the wake-up a waiting DLJob triggered to the DLJob running",
    buckets=(1, 5, 10, 30, 60, 120, 300, 600, 1200, 3600, float("inf")),
)


# --------------------------------------------------------------------------- configuration


class PowerError(Exception):
    """A power driver call failed."""


@dataclass(frozen=True)
class PowerDriver:
    """What puts a node to sleep and wakes it: ``none`` (only the cordon), a ``command`` template or a
    ``webhook``."""

    kind: str = "none"
    command: str = ""
    webhook: str = ""
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.kind not in ("none", "command", "webhook"):
            raise InvalidInput("power_driver", self.kind, "expected none, command or webhook")
        if self.kind == "command":
            if not self.command.strip():
                raise InvalidInput("power_command", self.command, "--power-driver command needs a command template")
            try:
                self.argv("node-0", "sleep")
            except (KeyError, IndexError, ValueError) as exc:
                raise InvalidInput(
                    "power_command", self.command, f"template fields are {{node}}, {{action}}, {{power}} ({exc})"
                ) from None
        if self.kind == "webhook" and not self.webhook.startswith(("http://", "https://")):
            raise InvalidInput("power_webhook", self.webhook, "--power-driver webhook needs an http(s) URL")

    def argv(self, node: str, action: str) -> list[str]:
        """The command for ``action`` (sleep | wake) on ``node``: each word of the template formatted
        on its own, so a node name never becomes shell syntax."""
        power = "off" if action == "sleep" else "on"
        return [w.format(node=node, action=action, power=power) for w in shlex.split(self.command)]

    def __call__(self, node: str, action: str) -> None:
        if self.kind == "command":
            argv = self.argv(node, action)
            try:
                done = subprocess.run(argv, capture_output=True, timeout=self.timeout_s, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise PowerError(f"{argv[0]}: {exc}") from exc
            if done.returncode != 0:
                raise PowerError(f"{shlex.join(argv)} exited {done.returncode}: {done.stderr.decode()[-300:].strip()}")
        elif self.kind == "webhook":
            body = json.dumps({"node": node, "action": action}).encode()
            req = urllib.request.Request(self.webhook, body, {"Content-Type": "application/json"}, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    resp.read()
            except (urllib.error.URLError, OSError) as exc:
                raise PowerError(f"POST {self.webhook} ({action} {node}): {exc}") from exc


@dataclass(frozen=True)
class CESOptions:
    """``qosmos operator run --ces ...``. Minutes are ``minute_s`` seconds long (60; tests compress
    time), Alg. 2's periods are in those minutes."""

    minute_s: float = 60.0
    period: int = 10  # PeriodicCheck every 10 minutes
    history: int = 60  # RecentNodesTrend over the past hour
    sigma: int | None = None  # buffer nodes; None: chosen on the recorded history
    xi_h: float = 0.0
    xi_p: float = 0.0
    wake_latency_s: float = 300.0  # a woken node stays unschedulable this long (Helios: 5 min to boot)
    driver: PowerDriver = field(default_factory=PowerDriver)
    namespace: str = "default"  # of the history ConfigMap
    min_train_minutes: int = 2 * 1440  # the forecaster trains on at least two days
    retrain_minutes: int = 1440  # and again every day
    auto_sigma_minutes: int = 3 * 1440  # σ is chosen once three days are recorded (validation: the later half)

    def __post_init__(self) -> None:
        if not self.minute_s > 0:
            raise InvalidInput("ces_minute", self.minute_s, "must be > 0 seconds")
        if self.period < 1 or self.history < 1:
            raise InvalidInput("ces_interval", self.period, "must be >= 1 minute")
        if self.sigma is not None and self.sigma < 0:
            raise InvalidInput("ces_sigma", self.sigma, "must be >= 0 or auto")
        if self.wake_latency_s < 0:
            raise InvalidInput("ces_wake_latency", self.wake_latency_s, "must be >= 0 seconds")

    def config(self, sigma: int, xi_h: float | None = None, xi_p: float | None = None) -> CESConfig:
        return CESConfig(
            sigma=sigma,
            xi_h=self.xi_h if xi_h is None else xi_h,
            xi_p=self.xi_p if xi_p is None else xi_p,
            boot_delay=max(0, math.ceil(self.wake_latency_s / self.minute_s)),
            period=self.period,
            history=self.history,
        )


def options(
    enabled: bool,
    minute_s: float = 60.0,
    interval: int = 10,
    sigma: str = "auto",
    wake_latency_s: float = 300.0,
    driver: str = "none",
    command: str = "",
    webhook: str = "",
    namespace: str = "default",
) -> CESOptions | None:
    """The operator CLI's ``--ces*`` / ``--power-*`` options as :class:`CESOptions` (None: CES off)."""
    if not enabled:
        return None
    if sigma.strip().lower() == "auto":
        sg: int | None = None
    else:
        try:
            sg = int(sigma)
        except ValueError:
            raise InvalidInput("ces_sigma", sigma, "expected a whole number of nodes or 'auto'") from None
    return CESOptions(
        minute_s=minute_s,
        period=interval,
        sigma=sg,
        wake_latency_s=wake_latency_s,
        driver=PowerDriver(driver, command, webhook),
        namespace=namespace,
    )


def sooner(a: float | None, b: float | None) -> float | None:
    """The earlier of two wake-up times (None: no wish)."""
    return b if a is None else a if b is None else min(a, b)


# --------------------------------------------------------------------------- objects -> counts


@dataclass(frozen=True, slots=True)
class PowerNode:
    """A GPU node as CES sees it."""

    name: str
    state: str  # awake | asleep | waking
    busy: bool  # a pod runs on it, or an admitted gang is placed on it
    partition: str  # its VirtualCluster ("" when none selects it)
    gpus: int
    ready_at: float | None = None  # waking: serves from then on
    ready: bool = True  # the node's Ready condition

    @property
    def active(self) -> bool:
        """Counts in C_A: awake or waking."""
        return self.state != ASLEEP


def power_state(node: Mapping[str, Any]) -> str:
    value = (meta(node).get("labels") or {}).get(LABEL_POWER)
    return value if value in (ASLEEP, WAKING) else AWAKE


def node_gpus(node: Mapping[str, Any]) -> int:
    st = node.get("status") or {}
    alloc = st.get("allocatable") or st.get("capacity") or {}
    try:
        return int(str(alloc.get(GPU_RESOURCE, "0")))
    except ValueError:
        return 0


def managed(node: Mapping[str, Any]) -> bool:
    """CES manages GPU nodes that are schedulable or that it cordoned itself (a node someone else
    cordoned is left alone and not counted)."""
    if node_gpus(node) <= 0:
        return False
    return power_state(node) != AWAKE or not (node.get("spec") or {}).get("unschedulable")


def holds_node(pod: Mapping[str, Any]) -> bool:
    """A bound, unfinished pod that makes its node busy: DaemonSet pods (on every node, asleep or not)
    and static pods do not."""
    m = meta(pod)
    if any(o.get("kind") == "DaemonSet" for o in m.get("ownerReferences") or []):
        return False
    if "kubernetes.io/config.mirror" in (m.get("annotations") or {}):
        return False
    phase = (pod.get("status") or {}).get("phase")
    return bool((pod.get("spec") or {}).get("nodeName")) and phase not in ("Succeeded", "Failed")


def placed_nodes(dljobs: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Node name -> the admitted or running DLJobs (keys) whose placement names it."""
    out: dict[str, list[str]] = defaultdict(list)
    for obj in dljobs:
        st = obj.get("status") or {}
        if st.get("phase") not in ACTIVE_PHASES:
            continue
        gang = Gang.of_status(st)
        for name in gang.node_names if gang else ():
            out[name].append(key_of(obj))
    return out


def _ready(node: Mapping[str, Any]) -> bool:
    conds = (node.get("status") or {}).get("conditions") or []
    return next((c.get("status") == "True" for c in conds if c.get("type") == "Ready"), False)


def power_view(
    nodes: Sequence[Mapping[str, Any]],
    vcs: Sequence[Mapping[str, Any]],
    dljobs: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
) -> list[PowerNode]:
    """The managed GPU nodes with their power state, busyness and partition (sorted by name)."""
    assignment = assign_nodes(nodes, vcs)
    held = {str((p.get("spec") or {}).get("nodeName")) for p in pods if holds_node(p)}
    placed = placed_nodes(dljobs)
    out = []
    for n in nodes:
        if not managed(n):
            continue
        name = str(meta(n).get("name", ""))
        ann = meta(n).get("annotations") or {}
        out.append(
            PowerNode(
                name=name,
                state=power_state(n),
                busy=name in held or name in placed,
                partition=assignment.get(name, ""),
                gpus=node_gpus(n),
                ready_at=parse_time(ann.get(ANN_READY_AT)),
                ready=_ready(n),
            )
        )
    return sorted(out, key=lambda p: p.name)


def admitted_condition(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    conds = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == "Admitted"), None)


def gang_nodes(spec: DLJobSpec, largest_node_gpus: int) -> int:
    """Nodes a gang needs: its fixed pods, else its GPUs over the partition's largest node."""
    fixed = nodes_of(spec)
    if fixed:
        return fixed
    return max(1, math.ceil(spec.gpus / max(1, largest_node_gpus)))


def lacking_gangs(dljobs: Sequence[Mapping[str, Any]], view: Sequence[PowerNode]) -> dict[str, list[tuple[str, int]]]:
    """Partition -> (DLJob key, nodes it needs) of the queued DLJobs waiting for resources."""
    largest: dict[str, int] = defaultdict(int)
    for n in view:
        largest[n.partition] = max(largest[n.partition], n.gpus)
    out: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for obj in dljobs:
        st = obj.get("status") or {}
        if st.get("phase") not in (None, DLJobPhase.QUEUED.value):
            continue
        cond = admitted_condition(obj)
        if not cond or cond.get("status") != "False" or cond.get("reason") not in RESOURCE_WAITS:
            continue
        try:
            spec = DLJobSpec.model_validate(obj.get("spec") or {})
        except ValueError:
            continue
        out[spec.virtual_cluster].append((key_of(obj), gang_nodes(spec, largest[spec.virtual_cluster])))
    return out


# --------------------------------------------------------------------------- decisions (pure)


@dataclass(frozen=True, slots=True)
class Wake:
    partition: str
    nodes: tuple[str, ...]
    request: int  # R
    active: int  # C_A before
    jobs: tuple[str, ...]  # the DLJobs waiting for them


def plan_wakes(
    view: Sequence[PowerNode],
    lacking: Mapping[str, Sequence[tuple[str, int]]],
    placed: Mapping[str, Sequence[str]],
    sigma: int,
) -> list[Wake]:
    """JobArrivalCheck per partition (``nodes_to_wake``): R = busy active nodes + the nodes the queued
    gangs lack; sleeping nodes an admitted gang is placed on always wake, first."""
    out = []
    parts = sorted({n.partition for n in view})
    for part in parts:
        grp = [n for n in view if n.partition == part]
        asleep = [n for n in grp if n.state == ASLEEP]
        if not asleep:
            continue
        pinned = [n for n in asleep if n.name in placed]
        need = sum(k for _, k in lacking.get(part, ()))
        if not need and not pinned:
            continue
        active = sum(n.active for n in grp)
        request = sum(n.busy for n in grp if n.active) + need + len(pinned)
        k = max(len(pinned), nodes_to_wake(active, request, sigma, len(asleep)))
        if k <= 0:
            continue
        order = pinned + [n for n in asleep if n.name not in placed]
        jobs = [key for key, _ in lacking.get(part, ())] + [j for n in pinned for j in placed[n.name]]
        out.append(Wake(part, tuple(n.name for n in order[:k]), request, active, tuple(dict.fromkeys(jobs))))
    return out


def plan_sleep(
    view: Sequence[PowerNode], history: Series, prediction: Series, running: int, config: CESConfig
) -> list[str]:
    """PeriodicCheck (``nodes_to_sleep``) over the whole cluster: which idle awake nodes sleep (the last
    by name first). ``running`` is C_R, the nodes busy at any minute of the last period."""
    idle = [n for n in view if n.state == AWAKE and not n.busy]
    active = sum(n.active for n in view)
    k = nodes_to_sleep(history, prediction, active, running, len(idle), config)
    return [n.name for n in sorted(idle, key=lambda n: n.name, reverse=True)[:k]]


# --------------------------------------------------------------------------- the recorded history


@dataclass
class History:
    """Running and managed GPU nodes per minute (the minute index is ``time // minute_s``); a minute
    stepped over is filled with the last count, as ``predictors.ces.per_minute`` fills the traces, and
    remembered as ``filled`` (not seen: a peer's count for it wins at a :meth:`merge`)."""

    minute_s: float
    first: int = -1
    running: list[int] = field(default_factory=list)
    total: list[int] = field(default_factory=list)
    filled: set[int] = field(default_factory=set)

    @property
    def last(self) -> int:
        return self.first + len(self.running) - 1 if self.running else -1

    def record(self, minute: int, running: int, total: int) -> bool:
        """The counts seen at ``minute`` (the most in a minute counts: busy at any time of it). True
        when a new minute began."""
        if not self.running or minute > self.last + MAX_MINUTES:
            self.first, self.running, self.total, self.filled = minute, [running], [total], set()
            return True
        if minute < self.first:
            return False  # a clock stepped back before the history: ignore
        if minute <= self.last:
            i = minute - self.first
            if minute in self.filled:  # seen after all: the carried count was a stand-in
                self.filled.discard(minute)
                self.running[i], self.total[i] = running, total
            self.running[i] = max(self.running[i], running)
            self.total[i] = max(self.total[i], total)
            return False
        gap = minute - self.last - 1
        self.filled.update(range(self.last + 1, minute))
        self.running += [self.running[-1]] * gap + [running]
        self.total += [self.total[-1]] * gap + [total]
        self._cut()
        return True

    def _cut(self) -> None:
        """Keep the newest MAX_MINUTES."""
        cut = max(0, len(self.running) - MAX_MINUTES)
        if cut:
            self.first += cut
            del self.running[:cut], self.total[:cut]
            self.filled = {m for m in self.filled if m >= self.first}

    def merge(self, stored: History) -> History:
        """This replica's history with a peer's (what the ConfigMap holds): peering replicas may both
        record for a while (one paused past its keep-alive), and one that stood by lacks the minutes
        the other recorded. Per minute the most either saw; a count only carried forward gives way to
        a seen one; minutes neither has (between the two) are carried forward."""
        if not stored.running or stored.minute_s != self.minute_s:
            return self
        if not self.running or self.last + MAX_MINUTES < stored.first:
            return History(self.minute_s, stored.first, list(stored.running), list(stored.total), set(stored.filled))
        if stored.last + MAX_MINUTES < self.first:
            return self  # (a peer's history from before a reset of this one)
        out = History(self.minute_s, min(self.first, stored.first))
        for m in range(out.first, max(self.last, stored.last) + 1):
            a, b = self._at(m), stored._at(m)
            if a is None or b is None:
                r, t, carried = a or b or (out.running[-1], out.total[-1], True)
            elif a[2] != b[2]:  # one saw it, the other carried a count forward
                r, t, carried = b if a[2] else a
            else:
                r, t, carried = max(a[0], b[0]), max(a[1], b[1]), a[2]
            out.running.append(r)
            out.total.append(t)
            if carried:
                out.filled.add(m)
        out._cut()
        return out

    def _at(self, minute: int) -> tuple[int, int, bool] | None:
        """(running, total, carried forward) at ``minute``; None outside the history."""
        if not self.running or not self.first <= minute <= self.last:
            return None
        i = minute - self.first
        return self.running[i], self.total[i], minute in self.filled

    def to_json(self) -> str:
        doc: dict[str, Any] = {"version": 1, "minuteSeconds": self.minute_s, "first": self.first}
        doc |= {"running": self.running, "total": self.total}
        if self.filled:  # as [first, last] runs: a pause of hours is one pair
            runs: list[list[int]] = []
            for m in sorted(self.filled):
                if runs and runs[-1][1] == m - 1:
                    runs[-1][1] = m
                else:
                    runs.append([m, m])
            doc["filled"] = runs
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, minute_s: float) -> History:
        """The history of a ConfigMap; an empty one when it is unreadable or kept in other minutes."""
        try:
            doc = json.loads(text)
            if float(doc["minuteSeconds"]) != minute_s:
                log.warning(
                    "CES history kept in %s s minutes, not %s s: starting afresh", doc["minuteSeconds"], minute_s
                )
                return cls(minute_s)
            running, total = [int(x) for x in doc["running"]], [int(x) for x in doc["total"]]
            if len(running) != len(total):
                raise ValueError("running and total differ in length")
            if not running:
                return cls(minute_s)
            first = int(doc["first"])
            last = first + len(running) - 1
            filled: set[int] = set()
            for a, b in doc.get("filled") or []:
                if not first <= int(a) <= int(b) <= last:
                    raise ValueError(f"filled minutes {a}-{b} outside the history's {first}-{last}")
                filled.update(range(int(a), int(b) + 1))
            return cls(minute_s, first, running, total, filled)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("CES history in ConfigMap %s unreadable, starting afresh: %s", CONFIG_MAP, exc)
            return cls(minute_s)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(minute indexes, running, total) as the predictors take them."""
        minutes = self.first + np.arange(len(self.running), dtype=np.int64)
        return minutes, np.asarray(self.running, float), np.asarray(self.total, float)

    def busy(self, minute: int, period: int) -> int:
        """C_R: the nodes busy at any minute of the last ``period`` up to ``minute`` (``busy_nodes``)."""
        if not self.running:
            return 0
        end = min(len(self.running), minute - self.first + 1)
        window = np.asarray(self.running[max(0, end - period) : end], float)
        return math.ceil(float(busy_nodes(window, period)[-1])) if window.size else 0

    def slots(self, minute: int) -> tuple[np.ndarray, np.ndarray]:
        """The forecaster's 10-minute slots (means) completed before ``minute``."""
        if not self.running:
            return np.empty(0, np.int64), np.empty(0)
        minutes, running, _ = self.arrays()
        slots, y = to_slots(minutes, running)
        done = slots + SLOT_MIN <= minute
        return slots[done], y[done]


def trend_inputs(
    history: History, minute: int, forecaster: CESForecaster | None, config: CESConfig
) -> tuple[np.ndarray, np.ndarray] | None:
    """H (the slots of the past hour, as ``ForecastWindow.replay`` takes them) and P (the forecast for
    the next 3 h; without a trained forecaster, the last slot held: no predicted fall). None while
    less than an hour is recorded."""
    slots, y = history.slots(minute)
    back = max(1, config.history // SLOT_MIN)
    if y.size < back + 1:
        return None
    h = y[-(back + 1) :]
    if forecaster is not None and forecaster.model is not None:
        p = forecaster.forecast(slots, y, np.array([y.size - 1]))[0]
    else:
        p = np.full(HORIZON, y[-1])
    return h, p


# --------------------------------------------------------------------------- the controller


@dataclass
class Trained:
    forecaster: CESForecaster | None
    sigma: int | None = None
    xi_h: float | None = None
    xi_p: float | None = None
    minutes: int = 0
    note: str = ""


def train(history: History, opts: CESOptions, total: int) -> Trained:
    """Fit the forecaster on the recorded history; with σ automatic and enough history, choose σ, ξ_H
    and ξ_P as ``qosmos predict ces --sigma auto`` does, on its later half (runs off the pass thread)."""
    minutes, running, tot = history.arrays()
    slots, y = to_slots(minutes, running)
    fc = CESForecaster().fit(slots, y, y.size)
    out = Trained(fc, minutes=len(history.running), note=f"forecaster trained on {y.size} slots")
    if opts.sigma is None and len(history.running) >= opts.auto_sigma_minutes:
        days = len(history.running) // 1440
        val_days = max(1, min(14, days // 2))
        val_to = int(minutes[0]) + days * 1440
        val_from = val_to - val_days * 1440
        step = max(1, total // 40)
        sigmas = list(range(0, max(2, total // 4) + 1, step))
        rows = sigma_tradeoff(
            minutes, running, tot, val_from, val_to, sigmas, opts.config(0), xis_h=list(XIS), xis_p=list(XIS)
        )
        best, why = choose_knobs(rows, 1.0)
        out.sigma, out.xi_h, out.xi_p = int(best["sigma"]), float(best["xi_h"]), float(best["xi_p"])
        out.note += f"; σ = {out.sigma}, ξ_H = {out.xi_h:g}, ξ_P = {out.xi_p:g} ({why}, last {val_days} day(s))"
    return out


def default_sigma(total: int) -> int:
    """σ before there is history to choose it on: 5 % of the GPU nodes, at least 1 (Helios' Philly
    buffer of 20 nodes on 420)."""
    return max(1, math.ceil(0.05 * total))


class EnergySaver:
    """Cluster Energy Saving in the operator: ``step()`` after each reconcile pass (same worker, so no
    pass admits onto a node while it is being put to sleep)."""

    sooner = staticmethod(sooner)

    def __init__(self, kube: Kube, opts: CESOptions, clock: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self.opts = opts
        self.clock = clock
        self.history = History(opts.minute_s)
        self.loaded = False
        self.dirty = False
        self.next_check = -1
        self.trained: Trained | None = None
        self.training: Future[Trained] | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qosmos-ces-train")
        self.waiting: dict[str, float] = {}  # DLJob key -> when nodes were woken for it

    # ---- reads ---------------------------------------------------------------------------------
    def _bound_pods(self) -> list[dict[str, Any]]:
        resp = cast(Raw, self.kube.core.list_pod_for_all_namespaces(field_selector=BOUND, _preload_content=False))
        return list(json.loads(resp.data).get("items") or [])

    def _pods_on(self, node: str) -> list[dict[str, Any]]:
        sel = f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"
        resp = cast(Raw, self.kube.core.list_pod_for_all_namespaces(field_selector=sel, _preload_content=False))
        return [p for p in json.loads(resp.data).get("items") or [] if holds_node(p)]

    def _stored(self, data: dict[str, str] | None) -> History:
        return (
            History.from_json(data[KEY], self.opts.minute_s) if data and data.get(KEY) else History(self.opts.minute_s)
        )

    def _load(self) -> None:
        """The recorded history (the first step after a start, or after standing by: with the minutes
        a peer recorded meanwhile)."""
        if self.loaded:
            return
        self.history = self.history.merge(self._stored(self.kube.read_config_map(self.opts.namespace, CONFIG_MAP)))
        self.loaded = True

    def _save(self) -> None:
        """Write the history merged with what a peer wrote (compare-and-swap: never over its minutes)."""
        if not self.dirty:
            return

        def merged(data: dict[str, str] | None) -> dict[str, str]:
            self.history = self.history.merge(self._stored(data))
            return {KEY: self.history.to_json()}

        self.kube.update_config_map(self.opts.namespace, CONFIG_MAP, merged)
        self.dirty = False

    def record(self, minute: int, running: int, total: int) -> None:
        """C_R and the managed nodes at ``minute``, written when a new minute begins."""
        self._load()
        self.dirty |= self.history.record(minute, running, total)
        self._save()

    def stand_by(self) -> None:
        """This replica stops running steps (each pass it stands by; at a stop): write the history,
        the current minute's counts included, and read it again when active (a peer records meanwhile).
        Best effort: what a failed write held is merged at the next load and written then."""
        if not self.loaded:
            return
        self.dirty = True
        try:
            self._save()
        except Exception as exc:
            log.warning("CES history not saved to ConfigMap %s/%s: %s", self.opts.namespace, CONFIG_MAP, exc)
        self.loaded = False

    # ---- the knobs -------------------------------------------------------------------------------
    def config(self, total: int) -> CESConfig:
        t = self.trained
        if self.opts.sigma is not None:
            return self.opts.config(self.opts.sigma)
        if t is not None and t.sigma is not None:
            return self.opts.config(t.sigma, t.xi_h, t.xi_p)
        return self.opts.config(default_sigma(total))

    def _train(self, total: int) -> None:
        """Pick up a finished fit; start the next one when due (in the background)."""
        if self.training is not None and self.training.done():
            try:
                self.trained = self.training.result()
                log.info("CES: %s", self.trained.note)
            except Exception:
                metrics.ERRORS.labels("ces").inc()
                log.exception("CES forecaster training failed")
            self.training = None
        n = len(self.history.running)
        due = n >= self.opts.min_train_minutes and (
            self.trained is None or n - self.trained.minutes >= self.opts.retrain_minutes
        )
        if due and self.training is None:
            snapshot = History(self.history.minute_s, self.history.first, list(self.history.running))
            snapshot.total = list(self.history.total)
            self.training = self._pool.submit(train, snapshot, self.opts, total)

    # ---- writes ----------------------------------------------------------------------------------
    def _patch_once(self, node: Mapping[str, Any], state: str, now: float, ready_at: float | None) -> None:
        """One JSON patch: label, annotations, cordon and taint for ``state`` (awake removes them). The
        resourceVersion test makes a concurrent change to the node fail the patch."""
        m = meta(node)
        spec = node.get("spec") or {}
        taints = [t for t in spec.get("taints") or [] if t.get("key") != TAINT_KEY]
        labels = {k: v for k, v in (m.get("labels") or {}).items() if k != LABEL_POWER}
        ann = {k: v for k, v in (m.get("annotations") or {}).items() if k not in (ANN_SINCE, ANN_READY_AT)}
        if state != AWAKE:
            taints.append({"key": TAINT_KEY, "value": state, "effect": "NoSchedule"})
            labels[LABEL_POWER] = state
            ann[ANN_SINCE] = rfc3339(now)
            if ready_at is not None:
                ann[ANN_READY_AT] = _stamp_ms(ready_at)
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": m.get("resourceVersion")},
            {"op": "add", "path": "/metadata/labels", "value": labels},
            {"op": "add", "path": "/metadata/annotations", "value": ann},
            {"op": "add", "path": "/spec/taints", "value": taints},
            {"op": "add", "path": "/spec/unschedulable", "value": state != AWAKE},
        ]
        resp = cast(Raw, self.kube.core.patch_node(m["name"], ops, _preload_content=False))
        resp.read()
        resp.release_conn()

    def _patch(self, name: str, state: str, now: float, ready_at: float | None = None) -> bool:
        """Read the node and patch it; a node changed in between (a heartbeat, a label) is read again."""
        from kubernetes.client.exceptions import ApiException

        for _ in range(3):
            try:
                self._patch_once(self._node(name), state, now, ready_at)
                return True
            except ApiException as exc:
                if exc.status == 404:
                    return False
                if exc.status not in (409, 422):
                    raise
        log.info("CES: %s changed under every patch; trying again next step", name)
        return False

    def _node(self, name: str) -> dict[str, Any]:
        """The node as it is now (a list by name: the verbs the operator holds already)."""
        from kubernetes.client.exceptions import ApiException

        sel = f"metadata.name={name}"
        resp = cast(Raw, self.kube.core.list_node(field_selector=sel, _preload_content=False))
        items = json.loads(resp.data).get("items")
        if not items:
            raise ApiException(status=404, reason=f"node {name} not found")
        return dict(items[0])

    def _sleep(self, name: str, now: float) -> bool:
        """Cordon, taint and label; undone when a pod turned up on the node meanwhile or the driver fails."""
        node = self._node(name)
        if power_state(node) != AWAKE or (node.get("spec") or {}).get("unschedulable"):
            return False
        if not self._patch(name, ASLEEP, now):
            return False
        pods = self._pods_on(name)
        if pods:
            log.info("CES: %s not put to sleep: pod %s arrived", name, key_of(pods[0]))
            self._patch(name, AWAKE, now)
            return False
        try:
            self.opts.driver(name, "sleep")
        except PowerError as exc:
            metrics.ERRORS.labels("ces").inc()
            log.warning("CES: power driver could not put %s to sleep, it stays awake: %s", name, exc)
            self._patch(name, AWAKE, now)
            return False
        return True

    def _wake(self, name: str, now: float) -> bool:
        if not self._patch(name, WAKING, now, ready_at=now + self.opts.wake_latency_s):
            return False
        try:
            self.opts.driver(name, "wake")
        except PowerError as exc:  # the node stays waking (unschedulable) until it reports Ready
            metrics.ERRORS.labels("ces").inc()
            log.warning("CES: power driver could not wake %s: %s", name, exc)
        return True

    # ---- the step --------------------------------------------------------------------------------
    def step(self) -> float | None:
        """One CES step; returns when the next one is due (the next minute, or a waking node's ready
        time). Errors are logged and counted, never raised into the reconcile worker."""
        try:
            return self._step()
        except Exception:
            metrics.ERRORS.labels("ces").inc()
            log.exception("CES step failed; retrying")
            return self.clock() + min(self.opts.minute_s, 5.0)

    def _step(self) -> float | None:
        now = self.clock()
        minute = int(now // self.opts.minute_s)
        self._load()
        nodes = self.kube.nodes()
        dljobs = self.kube.dljobs()
        view = power_view(nodes, self.kube.virtual_clusters(), dljobs, self._bound_pods())
        by_name = {n.name: n for n in view}
        total = len(view)
        cfg = self.config(total)

        # woken nodes whose latency passed (and, with a real driver, that report Ready) serve again
        for n in view:
            is_due = n.state == WAKING and (n.ready_at is None or n.ready_at <= now)
            if is_due and (self.opts.driver.kind == "none" or n.ready) and self._patch(n.name, AWAKE, now):
                by_name[n.name] = PowerNode(n.name, AWAKE, n.busy, n.partition, n.gpus)
                log.info("CES: %s awake", n.name)
        view = sorted(by_name.values(), key=lambda n: n.name)

        # the per-minute record: C_R counts busy nodes that are powered on
        running = sum(n.busy and n.active for n in view)
        self.record(minute, running, total)
        self._train(total)

        # JobArrivalCheck
        placed = {k: v for k, v in placed_nodes(dljobs).items() if k in by_name and by_name[k].state == ASLEEP}
        lacking = lacking_gangs(dljobs, view)
        for w in plan_wakes(view, lacking, placed, cfg.sigma):
            woken = [name for name in w.nodes if self._wake(name, now)]
            for name in woken:
                n = by_name[name]
                by_name[name] = PowerNode(name, WAKING, n.busy, n.partition, n.gpus, now + self.opts.wake_latency_s)
            if not woken:
                continue
            WAKEUPS.inc()
            WOKEN.inc(len(woken))
            NODES_PER_WAKEUP.observe(len(woken))
            for key in w.jobs:
                self.waiting.setdefault(key, now)
            log.info(
                "CES: NodesWakeUp(R − C_A + σ = %d − %d + %d): %s for %s",
                w.request,
                w.active,
                cfg.sigma,
                ", ".join(woken),
                ", ".join(w.jobs) or "placed gangs",
            )
            self._tell(dljobs, w)
        view = sorted(by_name.values(), key=lambda n: n.name)

        # PeriodicCheck
        if minute >= self.next_check:
            self.next_check = (minute // self.opts.period + 1) * self.opts.period
            trends = trend_inputs(self.history, minute, self.trained.forecaster if self.trained else None, cfg)
            if trends is not None:
                h, p = trends
                # C_R: nodes busy in the last period; the nodes queued gangs lack are wanted too (else the
                # next pass's JobArrivalCheck would wake what this one puts to sleep)
                c_r = max(
                    self.history.busy(minute, self.opts.period),
                    running + sum(k for g in lacking.values() for _, k in g),
                )
                names = plan_sleep(view, h, p, c_r, cfg)
                slept = [name for name in names if self._sleep(name, now)]
                for name in slept:
                    n = by_name[name]
                    by_name[name] = PowerNode(name, ASLEEP, False, n.partition, n.gpus)
                if slept:
                    SLEEPS.inc()
                    SLEPT.inc(len(slept))
                    log.info(
                        "CES: DynamicResourceSleep(C_R + σ = %d + %d), T_H = %.1f, T_P = %.1f: %s",
                        c_r,
                        cfg.sigma,
                        recent_nodes_trend(h),
                        future_nodes_trend(p),
                        ", ".join(slept),
                    )
            view = sorted(by_name.values(), key=lambda n: n.name)

        self._delays(dljobs, now)
        SLEEPING.set(sum(n.state == ASLEEP for n in view))
        WAKING_NODES.set(sum(n.state == WAKING for n in view))
        RUNNING_NODES.set(running)
        ACTIVE_NODES.set(sum(n.active for n in view))
        SIGMA.set(cfg.sigma)
        due = (minute + 1) * self.opts.minute_s
        for n in view:
            if n.state == WAKING and n.ready_at is not None:
                due = min(due, max(n.ready_at, now))
        return due

    def _tell(self, dljobs: Sequence[Mapping[str, Any]], w: Wake) -> None:
        """An Event on each waiting DLJob (``kubectl describe`` says why it waits a little longer)."""
        ready = f"ready in {self.opts.wake_latency_s:g} s" if self.opts.wake_latency_s else "ready now"
        for obj in dljobs:
            if key_of(obj) in w.jobs:
                self.kube.event(
                    obj,
                    "NodesWaking",
                    f"waking {len(w.nodes)} node(s) for waiting gangs: {', '.join(w.nodes)} ({ready})",
                )

    def _delays(self, dljobs: Sequence[Mapping[str, Any]], now: float) -> None:
        """A DLJob that waited for woken nodes: counted, with its delay, once it runs."""
        if not self.waiting:
            return
        by_key = {key_of(o): o for o in dljobs}
        for key, t0 in list(self.waiting.items()):
            obj = by_key.get(key)
            if obj is None:
                del self.waiting[key]
                continue
            st = obj.get("status") or {}
            if st.get("phase") == DLJobPhase.RUNNING.value:
                start = parse_time(st.get("startTime")) or now
                DELAYED_JOBS.inc()
                WAKE_DELAY.observe(max(0.0, start - t0))
                del self.waiting[key]
            elif st.get("phase") not in (None, *ACTIVE_PHASES, DLJobPhase.QUEUED.value):
                del self.waiting[key]  # finished or failed without running: no delay to tell


def _stamp_ms(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
