"""Desired node state: what the strategies produce and the actuators apply (plain values, no I/O)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Pod metadata the agent reads. Only pods carrying MANAGED_LABEL=MANAGED_VALUE are touched.
MANAGED_LABEL = "qosmos.io/node-agent"
MANAGED_VALUE = "managed"
ROLE_ANNOTATION = "qosmos.io/job-kind"  # training | cpu | inference
CATEGORY_ANNOTATION = "qosmos.io/model-category"  # CV | NLP | SPEECH (seed 002 §V-B-1)
OWNER_ANNOTATION = "qosmos.io/owner"
MULTI_NODE_ANNOTATION = "qosmos.io/multi-node"  # "true": a GPU job spanning nodes (§V-E, tc)
CORES_ANNOTATION = "qosmos.io/cores"  # a CPU job's full core count (else its CPU limit, else the node)
BEST_CORES_ANNOTATION = "qosmos.io/soda-cores"  # written by the agent when a search finishes
HINTS_ANNOTATION = "qosmos.io/soda-hints"  # comma list: pipeline, large-weights, complex-iterations
ROLES = ("training", "cpu", "inference")


@dataclass(frozen=True)
class PodInfo:
    """A managed pod as the strategies see it."""

    uid: str
    namespace: str
    name: str
    role: str
    category: str = ""
    owner: str = ""
    multi_node: bool = False
    ip: str = ""
    limit_cores: float | None = None  # sum of container CPU limits, None when unlimited
    request_cores: float = 0.0  # sum of container CPU requests: never fewer cores than this
    ips: tuple[str, ...] = ()  # every pod IP (IPv4 and IPv6; status.podIPs), ``ip`` first
    full_cores: int | None = None  # CORES_ANNOTATION
    best_cores: int | None = None  # BEST_CORES_ANNOTATION
    hints: frozenset[str] = frozenset()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def all_ips(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(ip for ip in (self.ip, *self.ips) if ip))

    @property
    def min_cores(self) -> int:
        """The CPU request rounded up: the floor of every core count the agent gives the pod."""
        return max(1, math.ceil(self.request_cores - 1e-9))


@dataclass(frozen=True)
class CpuTarget:
    """A pod's CPUs: the cpuset and a CFS quota of ``quota_cores`` CPUs (None: no quota)."""

    uid: str
    key: str
    cpus: tuple[int, ...]
    quota_cores: float | None
    reason: str = ""


@dataclass(frozen=True)
class MbaTarget:
    """One shared resctrl group for CPU jobs at ``percent`` of memory bandwidth (§V-E); the node's
    peak bandwidth converts it for MBA units that are absolute (AMD, mba_MBps)."""

    group: str
    percent: int
    pids: tuple[int, ...]
    peak_bytes_per_second: float | None = None


@dataclass(frozen=True)
class HtbTarget:
    """tc HTB on ``dev``: GPU jobs get ``gpu_share`` of ``link_mbit``, CPU jobs the rest; both may borrow.
    Pod IPs may be IPv4 or IPv6; every other packet (the host, unmanaged pods) is not shaped."""

    dev: str
    link_mbit: int
    gpu_ips: tuple[str, ...]
    cpu_ips: tuple[str, ...]
    gpu_share: float = 0.75


@dataclass(frozen=True)
class VethTarget:
    """Per-pod shaping on host-side veths (``--tc-dev veth``): each device's cap in Mbit/s, both ways
    (a tbf root towards the pod, an ingress police from it). Devices not listed are not shaped."""

    caps: tuple[tuple[str, int], ...]  # (host veth, Mbit/s), sorted


@dataclass
class DesiredState:
    cpu: list[CpuTarget] = field(default_factory=list)
    mba: MbaTarget | None = None
    htb: HtbTarget | None = None
    veth: VethTarget | None = None
