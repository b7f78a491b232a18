"""The SODA node agent: watch this node's managed pods, run the strategies, apply through actuators.

One pass (:meth:`NodeAgent.reconcile`): list the node's pods carrying ``qosmos.io/node-agent=managed``;
find their cgroups; feed GPU utilisation to each training pod's core search (§V-B) once its
measurement window is over; feed node memory bandwidth to the contention eliminator (§V-E);
compute the desired state and apply it (CPU, MBA, tc); export metrics; emit Events for changes.

State lives in the node, not in the agent: cpusets/quotas are read back from the cgroups every
pass, the MBA group's tasks from resctrl, a finished search from the pod annotation
``qosmos.io/soda-cores``; desired state is derived from the pods' specs, so a restarted agent
converges to the same state (an unfinished search restarts from N_start). What it changed, and what
was there before, is in the journal (:mod:`~qosmos.sidecar.journal`): :meth:`NodeAgent.cleanup`
(SIGTERM, ``qosmos sidecar cleanup``) puts it all back.

Failures stay where they happen: a source that fails (NVML, a malformed or unreachable declared
source, resctrl) is "no measurement" this round, counted in ``qosmos_sidecar_source_errors{source,
reason}``; a pod that cannot be read (an unparsable quantity, ...) is skipped with a Warning Event and
``qosmos_sidecar_pods_skipped{reason}``; an actuator that fails for one pod is counted in
``qosmos_sidecar_errors{kind}``. The rest of the pass goes on, so an engaged throttle is released in
the pass that should release it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from qosmos.extender.core.errors import InvalidInput
from qosmos.sidecar.actuators import (
    MBA_PERCENT_MODE,
    Actuator,
    PodCgroups,
    ResctrlMba,
    TcHtb,
    TcRefused,
    TcVeth,
    detect_resctrl,
    make_actuator,
    run_tc,
)
from qosmos.sidecar.cgroups import (
    CgroupLayout,
    container_children,
    parse_cpuset,
    pids_of_container,
    pod_dir_from_pids,
)
from qosmos.sidecar.fs import FS, HostFS, JournalFS
from qosmos.sidecar.journal import Journal
from qosmos.sidecar.netdev import host_veth
from qosmos.sidecar.podresources import PodGpus
from qosmos.sidecar.restore import RestoreReport, restore
from qosmos.sidecar.sources import BandwidthSource, GpuSource, read_cpu_manager_state
from qosmos.sidecar.state import (
    BEST_CORES_ANNOTATION,
    CATEGORY_ANNOTATION,
    CORES_ANNOTATION,
    HINTS_ANNOTATION,
    MANAGED_LABEL,
    MANAGED_VALUE,
    MULTI_NODE_ANNOTATION,
    OWNER_ANNOTATION,
    ROLE_ANNOTATION,
    ROLES,
    CpuTarget,
    DesiredState,
    PodInfo,
    VethTarget,
)
from qosmos.sidecar.strategies import (
    AdaptiveCores,
    ContentionEliminator,
    CpuManagerState,
    assign_cpus,
    cpu_job_targets,
    htb_target,
    veth_caps,
)

log = logging.getLogger("qosmos.sidecar")
COMPONENT = "qosmos-sidecar"


def parse_cpu_quantity(q: object) -> float:
    """Kubernetes CPU quantity -> cores (``"500m"`` -> 0.5, ``"1Ki"`` -> 1024.0, ``"2e3m"`` -> 2.0): every
    suffix the API accepts (the client's ``parse_quantity``); anything else is :class:`InvalidInput`."""
    from kubernetes.utils import parse_quantity

    text = str(q).strip()
    try:
        v = float(parse_quantity(text))
    except (ValueError, ArithmeticError, TypeError):
        raise InvalidInput("cpu quantity", text, "expected a Kubernetes quantity like 2, 500m or 1Ki") from None
    if not math.isfinite(v) or v < 0:
        raise InvalidInput("cpu quantity", text, "must be finite and >= 0")
    return v


def pod_info(pod: Any) -> PodInfo | None:
    """A managed pod's strategy view from a ``V1Pod``; None when not managed (never touched)."""
    md = pod.metadata
    if (md.labels or {}).get(MANAGED_LABEL) != MANAGED_VALUE:
        return None
    ann = md.annotations or {}
    role = ann.get(ROLE_ANNOTATION, "cpu").strip().lower()
    if role not in ROLES:
        role = "cpu"
    limits: list[float] = []
    requests: list[float] = []
    unlimited = False
    for c in pod.spec.containers or []:
        lim = ((c.resources and c.resources.limits) or {}).get("cpu")
        req = ((c.resources and c.resources.requests) or {}).get("cpu")
        if lim is None:
            unlimited = True
        else:
            limits.append(parse_cpu_quantity(lim))
        if req is not None:
            requests.append(parse_cpu_quantity(req))
        elif lim is not None:
            requests.append(limits[-1])  # the API defaults a missing request to the limit

    def as_int(key: str) -> int | None:
        v = ann.get(key)
        return int(v) if v and str(v).strip().isdigit() and int(v) > 0 else None

    return PodInfo(
        uid=md.uid,
        namespace=md.namespace,
        name=md.name,
        role=role,
        category=ann.get(CATEGORY_ANNOTATION, ""),
        owner=ann.get(OWNER_ANNOTATION, ""),
        multi_node=ann.get(MULTI_NODE_ANNOTATION, "").lower() == "true",
        ip=(pod.status and pod.status.pod_ip) or "",
        ips=tuple(i.ip for i in ((pod.status and pod.status.pod_ips) or []) if getattr(i, "ip", None)),
        limit_cores=None if unlimited or not limits else sum(limits),
        request_cores=sum(requests),
        full_cores=as_int(CORES_ANNOTATION),
        best_cores=as_int(BEST_CORES_ANNOTATION),
        hints=frozenset(h.strip() for h in ann.get(HINTS_ANNOTATION, "").split(",") if h.strip()),
    )


VETH = "veth"  # --tc-dev veth: cap CPU-job pods on their own host veths instead of one device


@dataclass
class Window:
    """A training pod's measurement window at one core count (§V-B-2: ~60 s per step)."""

    cores: int
    since: float
    samples: list[float] = field(default_factory=list)


@dataclass
class AgentOptions:
    step_seconds: float = 60.0  # how long each core count is measured (§V-B-2)
    warmup_seconds: float = 10.0  # samples ignored right after a change
    interval: float = 5.0  # seconds between passes
    link_mbit: int = 0  # tc: link rate; 0 disables network shaping
    tc_dev: str = ""  # a device for one HTB, or VETH: per pod on each pod's host veth
    mb_peak: float | None = None  # node peak memory bandwidth, bytes/s
    net_shaping: bool = False  # the admin's switch for tc; a pod's annotation only asks for it
    stale_seconds: float = 60.0  # no bandwidth measurement this long: an engaged throttle is lifted
    cpu_manager_state: Path | None = None  # the kubelet's cpu_manager_state (static policy: exclusive CPUs)


class Metrics:
    """Per-pod CPU, throttling, cores and agent actions for Prometheus."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        lbl = ["namespace", "pod"]
        r = self.registry
        self.cores = Gauge("qosmos_sidecar_pod_cpuset_cpus", "CPUs in the pod's cpuset", lbl, registry=r)
        self.quota = Gauge("qosmos_sidecar_pod_cfs_quota_cores", "CFS quota in CPUs (-1: none)", lbl, registry=r)
        self.usage = Gauge("qosmos_sidecar_pod_cpu_usage_seconds", "CPU time used by the pod", lbl, registry=r)
        self.throttled = Gauge("qosmos_sidecar_pod_throttled_periods", "CFS periods throttled", lbl, registry=r)
        self.throttled_s = Gauge("qosmos_sidecar_pod_throttled_seconds", "time throttled", lbl, registry=r)
        self.gpu = Gauge("qosmos_sidecar_pod_gpu_utilisation_percent", "last GPU utilisation", lbl, registry=r)
        self.search_steps = Gauge("qosmos_sidecar_core_search_steps", "steps of the §V-B search", lbl, registry=r)
        self.membw = Gauge("qosmos_sidecar_memory_bandwidth_ratio", "node memory bandwidth / peak", registry=r)
        self.engaged = Gauge("qosmos_sidecar_contention_throttling", "1 while CPU jobs are throttled", registry=r)
        self.actions = Counter("qosmos_sidecar_actions", "actions taken", ["kind"], registry=r)
        self.errors = Counter("qosmos_sidecar_errors", "failed actions", ["kind"], registry=r)
        self.source_errors = Counter(
            "qosmos_sidecar_source_errors", "rounds without a measurement: a source failed", ["source", "reason"],
            registry=r,
        )  # fmt: skip
        self.skipped = Counter("qosmos_sidecar_pods_skipped", "managed pods skipped in a pass", ["reason"], registry=r)
        self.tc_refused = Counter(
            "qosmos_sidecar_tc_refused", "shaping refused: the device's root qdisc is not ours", ["device"], registry=r
        )
        self.passes = Counter("qosmos_sidecar_passes", "reconcile passes completed", registry=r)
        self.pod_resources = Gauge(
            "qosmos_sidecar_pod_resources",
            "1: pods' GPUs from the kubelet's PodResources API; 0: not served, NVML matches processes on every GPU",
            registry=r,
        )


def error_reason(e: BaseException) -> str:
    """A short, bounded label for why a source failed."""
    name = type(e).__name__
    if name.startswith("NVMLError"):
        return "nvml"
    if isinstance(e, (InvalidInput, ValueError, KeyError, TypeError)):
        return "malformed"
    if isinstance(e, FileNotFoundError):
        return "missing"
    if isinstance(e, OSError):  # URLError, refused, timed out, EIO from a cgroup file
        return "unreachable"
    return "error"


def read_cpu_stat(layout: CgroupLayout, cpu_dir: Path) -> dict[str, float]:
    """usage seconds, throttled periods and throttled seconds of a cgroup (v1: cpu + cpuacct; v2: cpu.stat)."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError, ValueError):
        lines = (cpu_dir / "cpu.stat").read_text().splitlines()
        stat = {k: int(v) for k, v in (ln.split() for ln in lines if len(ln.split()) == 2)}
        out["nr_throttled"] = float(stat.get("nr_throttled", 0))
        if layout.version == 2:
            out["usage_s"] = stat.get("usage_usec", 0) / 1e6
            out["throttled_s"] = stat.get("throttled_usec", 0) / 1e6
        else:
            out["throttled_s"] = stat.get("throttled_time", 0) / 1e9
            rel = cpu_dir.relative_to(layout.hierarchy("cpu"))
            usage = layout.hierarchy("cpuacct") / rel / "cpuacct.usage"
            if usage.is_file():
                out["usage_s"] = int(usage.read_text()) / 1e9
    return out


class NodeAgent:
    """Reconciles one node. ``api``: a ``kubernetes.client.CoreV1Api`` (None: pods given to ``reconcile``
    or by ``pod_source``). ``journal``: the restore point the actuators write to; ``fs`` and ``tc``:
    what :meth:`cleanup` restores through (the actuators' own, without the journal)."""

    def __init__(
        self,
        node: str,
        api: Any,
        layout: CgroupLayout,
        cpu: Actuator,
        gpu_source: GpuSource | None = None,
        bandwidth: BandwidthSource | None = None,
        mba: Actuator | None = None,
        net: Actuator | None = None,
        options: AgentOptions | None = None,
        owner_history: Mapping[str, Sequence[tuple[str, int]]] | None = None,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        has_mba: bool | None = None,
        journal: Journal | None = None,
        fs: FS | None = None,
        tc: Callable[[Sequence[str]], Any] = run_tc,
        pod_source: Callable[[], list[Any]] | None = None,
        request_timeout_s: float = 10.0,
        pod_gpus: PodGpus | None = None,
        cpu_online: Path = Path("/sys/devices/system/cpu/online"),
    ) -> None:
        self.node, self.api, self.layout = node, api, layout
        self.pod_gpus = pod_gpus
        self.cpu_online = cpu_online
        self.cpu, self.mba, self.net = cpu, mba, net
        self.gpu_source, self.bandwidth = gpu_source, bandwidth
        self.opt = options or AgentOptions()
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.journal = journal if journal is not None else Journal()
        self.fs, self.tc = fs or HostFS(), tc
        self.pod_source = pod_source
        self.request_timeout_s = request_timeout_s
        self.node_cpus = self._node_cpus()
        self.adaptive = AdaptiveCores(len(self.node_cpus), owner_history or {})
        self.eliminator = ContentionEliminator(has_mba=bool(mba) if has_mba is None else has_mba)
        self.windows: dict[str, Window] = {}
        self.last_actions: list[str] = []
        self._resumed = False  # the first pass reads a throttle left by a previous agent
        self._cpu_manager = CpuManagerState()
        self._last_bandwidth = clock()  # when bandwidth was last measured
        self._warned: dict[str, str] = {}  # pod UID -> the last Warning it got (one Event per problem)
        self._tc_warned: dict[str, str] = {}
        self._veths: dict[str, str] = {}  # pod UID -> its host veth (--tc-dev veth)
        self.events: list[tuple[str, str, str]] = []  # without an API: (pod UID, reason, type) not sent
        self.last_pass_end = float("-inf")  # for /healthz
        self.passes = 0

    # -- discovery ------------------------------------------------------------------------

    def _node_cpus(self) -> tuple[int, ...]:
        """The CPUs pods may use: the kubepods cpuset (v2: effective), else the hierarchy root, else the
        online CPUs (the chart mounts only the kubepods subtree; v2 without the cpuset controller
        enabled there has no cpuset file at all)."""
        for d in (self.layout.kubepods("cpuset"), self.layout.hierarchy("cpuset")):
            for name in ("cpuset.cpus.effective", "cpuset.cpus"):
                f = d / name
                if f.is_file() and f.read_text().strip():
                    return parse_cpuset(f.read_text())
        if self.cpu_online.is_file() and self.cpu_online.read_text().strip():
            return parse_cpuset(self.cpu_online.read_text())
        raise InvalidInput("cgroup root", str(self.layout.root), f"no cpuset.cpus found, nor {self.cpu_online}")

    def list_pods(self) -> list[Any]:
        if self.pod_source is not None:
            return self.pod_source()
        resp = self.api.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self.node}",
            label_selector=f"{MANAGED_LABEL}={MANAGED_VALUE}",
            _request_timeout=self.request_timeout_s,
        )
        return [p for p in resp.items if (p.status and p.status.phase) == "Running"]

    def pod_cgroups(self, pod: Any) -> PodCgroups | None:
        uid = pod.metadata.uid
        qos = (pod.status and pod.status.qos_class) or None
        dirs: dict[str, Path] = {}
        for ctrl in ("cpuset", "cpu"):
            d = self.layout.pod_dir(ctrl, uid, qos)
            if d is None:
                d = pod_dir_from_pids(self.layout, ctrl, self._pids_from_status(pod))
            if d is None:
                return None
            dirs[ctrl] = d
        return PodCgroups(dirs["cpuset"], dirs["cpu"])

    @staticmethod
    def _pids_from_status(pod: Any) -> list[int]:
        """PIDs of the pod's containers (from their IDs in the pod status) for the /proc fallback."""
        pids: list[int] = []
        for st in (pod.status and pod.status.container_statuses) or []:
            if st.container_id:
                pids += pids_of_container(st.container_id)
        return pids

    def _veth(self, uid: str, cg: PodCgroups) -> str | None:
        """The pod's host-side veth (found once per pod: a pod keeps its sandbox's network)."""
        if uid not in self._veths:
            pids = self.tasks(cg)
            dev = host_veth(pids[0]) if pids else None
            if dev is None:
                log.info("pod %s: no host veth found (no process yet, or not a veth CNI): not shaped", uid)
                return None
            self._veths[uid] = dev
        return self._veths[uid]

    def tasks(self, cg: PodCgroups) -> list[int]:
        """Every thread of the pod (resctrl moves threads one at a time)."""
        name = "tasks" if self.layout.version == 1 else "cgroup.threads"
        out: list[int] = []
        for d in container_children(cg.cpuset):
            with contextlib.suppress(OSError, ValueError):
                out += [int(t) for t in (d / name).read_text().split()]
        return out

    # -- containment --------------------------------------------------------------------------

    def _source_failed(self, source: str, e: BaseException) -> None:
        reason = error_reason(e)
        self.metrics.source_errors.labels(source, reason).inc()
        log.warning("%s source: no measurement this round (%s): %s", source, reason, e)

    def _skip(self, pod: Any, reason: str, e: BaseException) -> None:
        md = pod.metadata
        self.metrics.skipped.labels(reason).inc()
        msg = f"qosmos node agent skips this pod: {e}"
        log.warning("pod %s/%s skipped (%s): %s", md.namespace, md.name, reason, e)
        if self._warned.get(md.uid) != msg:  # one Event per problem, not one per pass
            self._warned[md.uid] = msg
            self._event(pod, "NodeAgentSkipped", msg, "Warning")

    def _read_cpu_manager(self) -> CpuManagerState:
        """The kubelet's CPU manager state; on a read failure, the last one read (counted)."""
        try:
            self._cpu_manager = read_cpu_manager_state(self.opt.cpu_manager_state)
        except Exception as e:
            self._source_failed("cpu-manager", e)
        return self._cpu_manager

    def refresh_pod_gpus(self) -> bool | None:
        """The pods' GPUs from the kubelet's PodResources API (None: not configured). Where it is not
        served, NVML falls back to matching the pods' processes on every GPU it sees: logged when that
        changes, ``qosmos_sidecar_pod_resources`` 0 and the failure counted (source pod-resources)."""
        if self.pod_gpus is None:
            return None
        before = self.pod_gpus.served
        try:
            self.pod_gpus.refresh()
        except Exception as e:
            self.metrics.source_errors.labels("pod-resources", error_reason(e)).inc()
            if before is not False:
                log.warning("PodResources not served at %s (%s): GPUs of a pod found by its processes on every "
                            "GPU NVML sees", self.pod_gpus.socket, e)  # fmt: skip
        else:
            if before is not True:
                log.info("PodResources served at %s: each pod's GPUs are the kubelet's", self.pod_gpus.socket)
        self.metrics.pod_resources.set(1 if self.pod_gpus.served else 0)
        return self.pod_gpus.served

    def _sample_bandwidth(self, now: float) -> tuple[float | None, float | None]:
        if self.bandwidth is None:
            return None, None
        try:
            used, peak = self.bandwidth.sample()
        except Exception as e:
            self._source_failed("memory-bandwidth", e)
            return None, None
        if used is not None:
            self._last_bandwidth = now
        return used, peak

    # -- one pass ---------------------------------------------------------------------------

    def reconcile(self, pods: Sequence[Any] | None = None) -> list[str]:
        """Measure, decide, apply; returns the actions taken. Nothing one pod or one source does stops it."""
        now = self.clock()
        raw = list(pods) if pods is not None else self.list_pods()
        with contextlib.suppress(OSError):
            self.journal.prune_files()
        cpu_manager = self._read_cpu_manager()
        managed: list[tuple[Any, PodInfo, PodCgroups]] = []
        for p in raw:
            try:
                info = pod_info(p)
                if info is None:
                    continue
                if info.uid in cpu_manager.exclusive:
                    log.debug("pod %s: exclusive CPUs of the static CPU manager, left alone", info.key)
                    continue
                cg = self.pod_cgroups(p)
            except Exception as e:
                self._skip(p, "invalid-spec" if isinstance(e, InvalidInput) else "error", e)
                continue
            if cg is None:
                log.info("pod %s: cgroups not found yet", info.key)
                continue
            self._warned.pop(info.uid, None)
            managed.append((p, info, cg))
        live = {i.uid for _, i, _ in managed}
        self.adaptive.forget(live)
        for uid in [u for u in self.windows if u not in live]:
            del self.windows[uid]
        actions: list[str] = []
        try:
            shareable = cpu_manager.shareable(self.node_cpus)
        except InvalidInput as e:
            self._source_failed("cpu-manager", e)
            shareable = self.node_cpus

        # §V-B: adaptive cores of training pods
        counts: dict[str, int] = {}
        training = [(p, i, cg) for p, i, cg in managed if i.role == "training"]
        if training and self.gpu_source is not None:
            self.refresh_pod_gpus()  # which GPUs each pod holds, once per pass
        for pod, info, cg in training:
            try:
                actions += self._search_step(pod, info, cg, now)
                counts[info.uid] = min(self.adaptive.cores(info), len(shareable))
            except Exception as e:
                self.metrics.errors.labels("search").inc()
                log.warning("pod %s: core search: %s", info.key, e)
        placed = assign_cpus(counts, shareable) if counts else {}
        desired = DesiredState()
        for _, info, _ in training:
            if info.uid in counts:
                n = counts[info.uid]
                desired.cpu.append(CpuTarget(info.uid, info.key, placed[info.uid], float(n), "§V-B search"))

        # §V-E: memory bandwidth contention
        cpu_jobs = [(p, i, cg) for p, i, cg in managed if i.role == "cpu"]
        if not self._resumed:
            self._resume_contention(cpu_jobs, shareable)
        used, peak = self._sample_bandwidth(now)
        peak = peak or self.opt.mb_peak
        engaged_before = self.eliminator.engaged
        engaged = self.eliminator.update(used, peak)
        if engaged and used is None and now - self._last_bandwidth >= self.opt.stale_seconds:
            # measuring nothing for this long: do not keep CPU jobs throttled on an old number
            log.warning("no memory bandwidth measured for %.0f s: lifting the throttle", now - self._last_bandwidth)
            engaged = self.eliminator.engaged = False
        if used is not None and peak:
            self.metrics.membw.set(used / peak)
        self.metrics.engaged.set(1 if engaged else 0)
        desired.cpu += cpu_job_targets([i for _, i, _ in cpu_jobs], shareable, self.eliminator)
        if self.mba is not None:
            pids = [t for _, _, cg in cpu_jobs for t in self.tasks(cg)]
            desired.mba = self.eliminator.mba_target(pids, peak=peak)
        if self.opt.tc_dev == VETH:  # per pod, on each pod's host veth
            caps = veth_caps([i for _, i, _ in managed], self.opt.link_mbit, enabled=self.opt.net_shaping)
            self._veths = {u: d for u, d in self._veths.items() if u in caps}  # pods gone or uncapped: forgotten
            devs = {i.uid: dev for _, i, cg in managed if i.uid in caps and (dev := self._veth(i.uid, cg))}
            desired.veth = VethTarget(tuple(sorted((devs[u], mbit) for u, mbit in caps.items() if u in devs)))
        else:
            desired.htb = htb_target([i for _, i, _ in managed], self.opt.tc_dev, self.opt.link_mbit,
                                     enabled=self.opt.net_shaping)  # fmt: skip
        if engaged != engaged_before:
            how = "MBA" if self.eliminator.has_mba else "halving cores"
            for pod, _info, _ in cpu_jobs:
                self._event(pod, "ContentionThrottle" if engaged else "ContentionReleased",
                            f"node memory bandwidth {'at/above' if engaged else 'below'} threshold: "
                            f"{'throttling by ' + how if engaged else 'restored'}")  # fmt: skip

        # apply: each pod and each actuator on its own
        where = {i.uid: cg for _, i, cg in managed}
        by_uid = {i.uid: p for p, i, _ in managed}
        for t in desired.cpu:
            try:
                done = self.cpu.apply(t, where[t.uid])
            except Exception as e:
                self.metrics.errors.labels("cpu").inc()
                log.warning("cpu %s: %s", t.key, e)
                continue
            if done:
                self.metrics.actions.labels("cpu").inc(len(done))
                self._event(by_uid[t.uid], "CpuAdjusted", "; ".join(done) + (f" ({t.reason})" if t.reason else ""))
            actions += done
        net_target = desired.veth if self.opt.tc_dev == VETH else desired.htb
        for kind, act, target in (("mba", self.mba, desired.mba), ("net", self.net, net_target)):
            if act is None:
                continue
            try:
                done = act.apply(target)
            except TcRefused as e:
                self.metrics.tc_refused.labels(self.opt.tc_dev).inc()
                log.warning("tc: %s", e)
                for pod, info, _ in managed:
                    if info.multi_node and info.role != "cpu" and self._tc_warned.get(info.uid) != str(e):
                        self._tc_warned[info.uid] = str(e)  # one Event per pod and problem
                        self._event(pod, "NetworkShapingRefused", str(e), "Warning")
                continue
            except Exception as e:
                self.metrics.errors.labels(kind).inc()
                log.warning("%s: %s", kind, e)
                continue
            self.metrics.actions.labels(kind).inc(len(done))
            actions += done
        try:
            self._export(managed)
        except Exception as e:
            log.warning("metrics: %s", e)
        self.last_actions = actions
        for a in actions:
            log.info("%s", a)
        self.passes += 1
        self.metrics.passes.inc()
        self.last_pass_end = self.clock()
        return actions

    def _resume_contention(self, cpu_jobs: Sequence[tuple[Any, PodInfo, PodCgroups]], cpus: Sequence[int]) -> None:
        """First pass only: a throttle a previous agent left on the node is still engaged, so that a
        restart in the hysteresis band (60-75 % of peak) does not lift it. The node says so: the
        shared MBA group holds tasks under a cap, or (no MBA) a CPU job has exactly its halved cpuset."""
        self._resumed = True
        if self.eliminator.has_mba:
            throttled = getattr(self.mba, "throttled", None)
            try:
                engaged = bool(throttled and throttled())
            except Exception as e:
                self._source_failed("resctrl", e)
                engaged = False
        else:
            reader = getattr(self.cpu, "read_cpus", None)
            infos = [i for _, i, _ in cpu_jobs]
            halved = {t.uid: t for t in cpu_job_targets(infos, cpus, ContentionEliminator(False, engaged=True))}
            full = {t.uid: t for t in cpu_job_targets(infos, cpus, ContentionEliminator(False))}
            engaged = False
            for _, info, cg in cpu_jobs:
                want, kids = set(halved[info.uid].cpus), container_children(cg.cpuset)
                if reader is None or not kids or len(want) == len(full[info.uid].cpus):
                    continue  # a job that cannot be halved (one core, or its request): its cpuset says nothing
                with contextlib.suppress(OSError, InvalidInput):
                    engaged = engaged or all(reader(d) == want for d in kids)
        if engaged:
            self.eliminator.engaged = True
            log.info("resuming: CPU jobs were throttled by a previous agent (contention eliminator engaged)")

    def _search_step(self, pod: Any, info: PodInfo, cg: PodCgroups, now: float) -> list[str]:
        if self.adaptive.done(info):
            return []
        cores = self.adaptive.cores(info)
        w = self.windows.get(info.uid)
        if w is None or w.cores != cores:
            self.windows[info.uid] = Window(cores, now)
            return []
        if now - w.since >= self.opt.warmup_seconds and self.gpu_source is not None:
            try:
                u = self.gpu_source.utilisation(info.key, self.tasks(cg))
            except Exception as e:  # NVML (MIG, a lost GPU), a malformed or unreachable declared source
                self._source_failed("gpu", e)
                u = None
            if u is not None and math.isfinite(u):
                w.samples.append(u)
                self.metrics.gpu.labels(info.namespace, info.name).set(u)
        if now - w.since < self.opt.step_seconds or not w.samples:
            return []
        mean = sum(w.samples) / len(w.samples)
        nxt = self.adaptive.observe(info, mean)
        s = self.adaptive.searches.get(info.uid)
        steps = s.steps if s else 0
        self.metrics.search_steps.labels(info.namespace, info.name).set(steps)
        if nxt is None:
            best = self.adaptive.cores(info)
            self._annotate(pod, {BEST_CORES_ANNOTATION: str(best)})
            msg = f"§V-B search done after {steps} steps: {best} cores (tried {[c for c, _ in (s.trace if s else [])]})"
            self._event(pod, "CoreSearchDone", msg)
            return [f"{info.key}: {msg}"]
        self.windows[info.uid] = Window(nxt, now)
        return [f"{info.key}: {cores} cores -> GPU {mean:.1f} %, next {nxt}"]

    # -- reporting -------------------------------------------------------------------------

    def _export(self, managed: Sequence[tuple[Any, PodInfo, PodCgroups]]) -> None:
        for _, info, cg in managed:
            lbl = (info.namespace, info.name)
            with contextlib.suppress(OSError, InvalidInput):
                self.metrics.cores.labels(*lbl).set(len(parse_cpuset((cg.cpuset / "cpuset.cpus").read_text()) or ()))
            kids = container_children(cg.cpu)
            with contextlib.suppress(OSError, ValueError, AttributeError):
                reader = getattr(self.cpu, "read_quota", None)
                if reader is not None and kids:
                    qs = [reader(d) for d in kids]
                    q = -1 if -1 in qs else max(qs)
                    self.metrics.quota.labels(*lbl).set(-1 if q == -1 else q / getattr(self.cpu, "period_us", 100_000))
            st = read_cpu_stat(self.layout, cg.cpu)
            if "usage_s" in st:
                self.metrics.usage.labels(*lbl).set(st["usage_s"])
            per_container = [read_cpu_stat(self.layout, d) for d in kids]  # the quota is on the containers
            self.metrics.throttled.labels(*lbl).set(sum(c.get("nr_throttled", 0) for c in per_container))
            self.metrics.throttled_s.labels(*lbl).set(sum(c.get("throttled_s", 0) for c in per_container))

    def _annotate(self, pod: Any, ann: dict[str, str]) -> None:
        if self.api is None:
            pod.metadata.annotations = {**(pod.metadata.annotations or {}), **ann}
            return
        try:
            self.api.patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace,
                                          {"metadata": {"annotations": ann}},
                                          _request_timeout=self.request_timeout_s)  # fmt: skip
        except Exception as e:  # the API being away must not stop the node's work
            log.warning("annotate %s/%s: %s", pod.metadata.namespace, pod.metadata.name, e)

    def _event(self, pod: Any, reason: str, message: str, type_: str = "Normal") -> None:
        if self.api is None:
            self.events.append((pod.metadata.uid, reason, type_))
            return
        from kubernetes import client

        now = dt.datetime.now(dt.UTC)
        md = pod.metadata
        ev = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{md.name}.", namespace=md.namespace),
            involved_object=client.V1ObjectReference(
                kind="Pod", name=md.name, namespace=md.namespace, uid=md.uid, api_version="v1"
            ),
            reason=reason,
            message=message[:1000],
            type=type_,
            source=client.V1EventSource(component=COMPONENT, host=self.node),
            reporting_component=COMPONENT,
            reporting_instance=self.node,
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        try:
            self.api.create_namespaced_event(md.namespace, ev, _request_timeout=self.request_timeout_s)
        except Exception as e:
            log.warning("event %s on %s/%s: %s", reason, md.namespace, md.name, e)

    # -- health ---------------------------------------------------------------------------------

    def healthy(self) -> bool:
        """Live: the loop completed a pass recently (within three intervals, and at least 60 s)."""
        return self.clock() - self.last_pass_end <= max(3 * self.opt.interval, 60.0) or self.passes == 0

    def ready(self) -> bool:
        """Ready: a pass has completed (pods listed, the node reconciled)."""
        return self.passes > 0

    # -- exit -----------------------------------------------------------------------------------

    def cleanup(self) -> RestoreReport:
        """Undo every change recorded in the journal (SIGTERM, ``qosmos sidecar cleanup``)."""
        nic = self.opt.tc_dev != VETH  # per-pod veths are in the journal when they were touched
        devices = [self.opt.tc_dev] if nic and self.opt.tc_dev and self.net is not None and self.opt.net_shaping else []
        return restore(self.journal, self.fs, self.tc, devices)

    # -- loop -----------------------------------------------------------------------------------

    def run(
        self,
        stop: Callable[[], bool],
        max_passes: int | None = None,
        restore_on_exit: bool = True,
        wait: Callable[[float], Any] | None = None,
    ) -> RestoreReport | None:
        """Pass after pass until ``stop()`` (SIGTERM) or ``max_passes``; then restore the node when
        ``restore_on_exit``. ``wait``: sleeps between passes (an Event's ``wait`` wakes on SIGTERM)."""
        n = 0
        while not stop() and (max_passes is None or n < max_passes):
            t0 = self.clock()
            try:
                self.reconcile()
            except Exception as e:  # keep the node agent alive through API hiccups
                log.warning("pass failed: %s", e)
            n += 1
            (wait or time.sleep)(max(0.0, self.opt.interval - (self.clock() - t0)))
        if not restore_on_exit:
            return None
        report = self.cleanup()
        log.info("exit: %d changes restored, %d not", len(report.restored), len(report.failed))
        return report


def build_agent(
    node: str,
    api: Any,
    cgroup_root: Path,
    driver: str = "auto",
    cgroup_parent: str = "",
    gpu_source: GpuSource | None = None,
    bandwidth: BandwidthSource | None = None,
    resctrl_root: Path = Path("/sys/fs/resctrl"),
    dry_run: bool = False,
    options: AgentOptions | None = None,
    owner_history: Mapping[str, Sequence[tuple[str, int]]] | None = None,
    metrics: Metrics | None = None,
    journal: Journal | None = None,
    pod_source: Callable[[], list[Any]] | None = None,
    pod_gpus: PodGpus | None = None,
) -> NodeAgent:
    """Wire layout detection, actuators from the registry (writing through the journal) and sources."""
    from qosmos.sidecar.cgroups import detect_layout

    layout = detect_layout(cgroup_root, driver, cgroup_parent)
    opt = options or AgentOptions()
    journal = journal if journal is not None else Journal()
    rdt = detect_resctrl(resctrl_root)
    has_mba = rdt.mba
    if rdt.mounted and not rdt.mba:
        log.info("resctrl: %s: halving cores instead of MBA", rdt.reason)
    if has_mba and rdt.mode != MBA_PERCENT_MODE and not opt.mb_peak:
        log.info("resctrl: MBA in %s is absolute and needs --membw-peak: halving cores instead", rdt.mode)
        has_mba = False
    net_on = bool(opt.tc_dev) and opt.net_shaping
    host = HostFS()
    if dry_run:
        cpu = make_actuator("cpu", "dry-run")
        mba = make_actuator("mba", "dry-run") if has_mba else None
        net = make_actuator("net", "dry-run") if net_on else None
    else:
        cpu = make_actuator("cpu", f"cgroup-v{layout.version}", fs=JournalFS(host, journal))
        mba = ResctrlMba(resctrl_root, host, journal, rdt) if has_mba else None
        net = (
            (TcVeth(run_tc, journal) if opt.tc_dev == VETH else TcHtb(opt.tc_dev, run_tc, journal)) if net_on else None
        )
    return NodeAgent(node, api, layout, cpu, gpu_source, bandwidth, mba, net, opt, owner_history, metrics,
                     has_mba=has_mba, journal=journal, fs=host, pod_source=pod_source,
                     pod_gpus=pod_gpus)  # fmt: skip
