"""The ``qosmos.io/v1alpha1`` custom resources as pydantic models, and the CRDs generated from them.

A cluster admin defines **VirtualCluster** objects (cluster-scoped partitions: their nodes, ordering
policy, placer, backfilling and GPU quota, AnalySIM §3.1); users submit **DLJob** objects (a gang of
pods with GENIE's task ⟨type, b, iters⟩, seed 001 Eq. 2, and a QoS class, §5.2.1).

The models are the single source: ``qosmos crds generate`` renders them into ``crds/*.yaml`` as
structural OpenAPI v3 schemas. Allowed values come from the core's registries (ordering policies,
placers, backfilling modes, QoS classes, job kinds), so the CRD enums cannot drift from the code that
acts on them. Rules spanning fields are CEL (``x-kubernetes-validations``) and live only here, in the
CRD: the apiserver is the one place that refuses bad objects, naming the field.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict
from qosmos.extender.cache import parse_quantity
from qosmos.extender.core import genie
from qosmos.extender.core.admission import DEFAULT_ARRAY_SPLIT, Partition
from qosmos.extender.core.backfill import MODES
from qosmos.extender.core.cohorts import RECLAIM_WITHIN_COHORT, WITHIN_PARTITION, PreemptionPolicy
from qosmos.extender.core.failures import DEFAULT_BACKOFF_LIMIT, DEFAULT_NODE_LOST_S
from qosmos.extender.core.inference import (
    DEFAULT_HYSTERESIS,
    DEFAULT_SCALE_IN_AFTER_S,
    DEFAULT_SCALE_OUT_AFTER_S,
    DEFAULT_SCALE_OUT_THRESHOLD,
    DEFAULT_SWITCH_COOLDOWN_S,
    SODA_CPU_CORES,
    SODA_QOS_TARGET_S,
    Mode,
)
from qosmos.extender.core.ordering import POLICIES, get_policy
from qosmos.extender.core.placement import PLACERS
from qosmos.extender.core.types import JobKind, QoSClass

GROUP = "qosmos.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
CATEGORY = "qosmos"  # `kubectl get qosmos` lists both kinds
LABEL_VC = "qosmos.io/vc"  # the node label the operator keeps in sync and the extender reads
LABEL_JOB = "qosmos.io/job"  # the pod label naming its DLJob
LABEL_INFERENCE = "qosmos.io/inference"  # the pod label naming its InferenceService
# on a finished DLJob with nothing left to do (no live pod, no TTL): out of the operator's working set
# (where the apiserver cannot select DLJobs by status.retired: Kubernetes 1.30, or an older CRD)
LABEL_FINISHED = "qosmos.io/finished"
# the same, as the DLJob's selectable status field: set in the status write that finishes the job, no
# extra write; the operator's DLJob watch selects ``status.retired!=true`` (an absent field reads "")
RETIRED_FIELD = "status.retired"
ANN_QPS = "qosmos.io/qps"  # an InferenceService's query rate when it has no spec.load.prometheus
MAX_INFERENCE_REPLICAS = 256
DEFAULT_PROMETHEUS_INTERVAL_S = 10.0
DEFAULT_FORECAST_PERIOD_S = 60.0  # an InferenceService's rate-history slot (the GenAI trace samples every 57 s)
DEFAULT_READY_S = 30.0  # a replica's start-up time, as `qosmos simulate inference --ready-s` assumes

# Allowed values, read from the core's registries.
POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)
PLACEMENT_NAMES: tuple[str, ...] = tuple(PLACERS)
BACKFILL_MODES: tuple[str, ...] = tuple(MODES)
QOS_CLASSES: tuple[str, ...] = tuple(q.name.capitalize() for q in QoSClass)  # Urgent, Prior, Normal
JOB_KINDS: tuple[str, ...] = tuple(k.value for k in JobKind)
DEFAULT_POLICY = "swaf"
DEFAULT_PLACEMENT = "cer"
DEFAULT_BACKFILL = "none"
DEFAULT_START_TIMEOUT_S = 600  # a gang not all Running after 10 minutes is stuck (image pull, taint, lost node)

PolicyName = Literal[POLICY_NAMES]  # type: ignore[valid-type]
PlacementName = Literal[PLACEMENT_NAMES]  # type: ignore[valid-type]
BackfillMode = Literal[BACKFILL_MODES]  # type: ignore[valid-type]
QoSClassName = Literal[QOS_CLASSES]  # type: ignore[valid-type]
JobKindName = Literal[JOB_KINDS]  # type: ignore[valid-type]
WithinVirtualCluster = Literal[WITHIN_PARTITION]  # type: ignore[valid-type]
ReclaimWithinCohort = Literal[RECLAIM_WITHIN_COHORT]  # type: ignore[valid-type]

# A DNS-1123 name that is also a label value (≤ 63): VirtualCluster names become the node label
# qosmos.io/vc=<name>, DLJob names the pod label qosmos.io/job=<name>.
LABEL_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"  # RFC 1123 label: a cohort's name
LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$"
# resource.Quantity as Kubernetes' own CRDs spell it (controller-gen's schema for resource.Quantity).
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
MAX_LIST = 64  # bounds lists and maps so the apiserver can bound the cost of CEL rules over them

for _name, _default, _allowed in (
    ("policy", DEFAULT_POLICY, POLICY_NAMES),
    ("placement", DEFAULT_PLACEMENT, PLACEMENT_NAMES),
    ("backfill", DEFAULT_BACKFILL, BACKFILL_MODES),
):
    if _default not in _allowed:  # a renamed registry entry must fail loudly, not ship a bad default
        raise ImportError(f"default {_name} {_default!r} is not in the core registry {_allowed}")


def cel(rule: str, message: str, field_path: str | None = None, reason: str | None = None) -> JsonDict:
    """One ``x-kubernetes-validations`` entry; ``field_path`` is what the apiserver's error names."""
    out: JsonDict = {"rule": rule, "message": message}
    if field_path:
        out["fieldPath"] = field_path
    if reason:
        out["reason"] = reason
    return out


def _validations(*rules: JsonDict) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


Quantity = Annotated[
    int | str,
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
            "x-kubernetes-validations": [
                cel(  # a malformed quantity is the pattern's to refuse, not a CEL evaluation error
                    "!isQuantity(string(self)) || quantity(string(self)).isGreaterThan(quantity('0'))",
                    "must be a quantity > 0, e.g. 4, 500m, 16Gi",
                )
            ],
        }
    ),
]


class _Model(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are the apiserver's to prune."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class Condition(_Model):
    """A condition as metav1.Condition defines it."""

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
    )
    status: Literal["True", "False", "Unknown"]
    observed_generation: int | None = Field(None, ge=0)
    last_transition_time: datetime
    reason: str = Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    message: str = Field(max_length=32768)


Conditions = Annotated[
    list[Condition],
    Field(
        max_length=MAX_LIST,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    ),
]


# --------------------------------------------------------------------------- VirtualCluster


class Quota(_Model):
    """GPUs the VirtualCluster's running jobs may hold; in a cohort, its nominal share of the cohort's
    GPUs and what it borrows and lends (Kueue's ClusterQueue quotas, ``core.cohorts``)."""

    gpus: int = Field(
        ge=0, description="nominal GPU quota: GPUs its own running jobs may hold (in a cohort: its nominal share)"
    )
    borrowing_limit: int | None = Field(
        None,
        ge=0,
        description="cohort only: GPUs it may hold beyond its quota from the cohort's idle share (unset: no limit); "
        "a lender whose blocked job needs them back reclaims them by preempting borrowed jobs",
    )
    lending_limit: int | None = Field(
        None, ge=0, description="cohort only: GPUs of its idle quota it lends to the cohort at most (unset: all)"
    )


class Preemption(_Model):
    """Who may preempt whom for this VirtualCluster's jobs (Kueue's ClusterQueue preemption)."""

    within_virtual_cluster: WithinVirtualCluster = Field(
        PreemptionPolicy().within_partition,
        description="LowerPriority: a blocked job preempts running jobs of its own VirtualCluster with a lower "
        "spec.priority; Never: it does not",
    )
    reclaim_within_cohort: ReclaimWithinCohort = Field(
        PreemptionPolicy().reclaim_within_cohort,
        description="Any: a blocked job within its nominal quota takes lent GPUs back from the cohort's borrowers "
        "(least lost work first); Never: it waits for them",
    )

    def policy(self) -> PreemptionPolicy:
        return PreemptionPolicy(self.within_virtual_cluster, self.reclaim_within_cohort)


COHORT_LIMITS = ("borrowingLimit", "lendingLimit")  # quota fields that only a cohort member may set
# policies whose job arrays split a VC's own nodes into pools (SODA): the core gives them no cohort
ARRAY_POLICIES = tuple(p for p in POLICY_NAMES if get_policy(p).arrays)


def _snake(camel: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)


class VirtualClusterSpec(_Model):
    """A partition of the cluster with its own queue, ordering policy, placer, backfilling and quota."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            cel(
                "!has(self.relaxFactor) || self.backfill in ['relaxed', 'adaptive']",
                "relaxFactor applies only to backfill relaxed or adaptive",
                ".relaxFactor",
            ),
            *(
                cel(
                    f"!has(self.quota) || !has(self.quota.{f}) || has(self.cohort)",
                    f"quota.{f} needs a cohort: only VirtualClusters of one cohort borrow and lend",
                    f".quota.{f}",
                )
                for f in COHORT_LIMITS
            ),
            cel(
                f"!has(self.cohort) || !(self.policy in {list(ARRAY_POLICIES)})",
                "a policy with job arrays (soda) splits the VirtualCluster's own nodes: it takes no cohort",
                ".cohort",
            ),
            cel(
                f"!has(self.arraySplit) || self.policy in {list(ARRAY_POLICIES)}",
                "arraySplit applies only to a policy with job arrays (soda)",
                ".arraySplit",
            ),
        )
    )

    node_selector: dict[str, Annotated[str, Field(max_length=63, pattern=LABEL_VALUE_PATTERN)]] = Field(
        default_factory=dict,
        max_length=MAX_LIST,
        description=f"labels choosing its nodes (all nodes when empty); the operator keeps the label {LABEL_VC}=<name> "
        "in sync on them for the extender",
        json_schema_extra=_validations(
            cel(f"!('{LABEL_VC}' in self)", f"must not select on {LABEL_VC}: the operator writes that label"),
        ),
    )
    policy: PolicyName = Field(default=DEFAULT_POLICY, description="ordering policy of its queue (the core's registry)")
    placement: PlacementName = Field(
        default=DEFAULT_PLACEMENT, description="placer choosing a starting job's nodes and GPUs"
    )
    backfill: BackfillMode = Field(
        default=DEFAULT_BACKFILL,
        description="backfilling behind a blocked head: none, easy, relaxed (slack = relaxFactor x the head's "
        "expected wait) or adaptive (slack scaled by the queue length)",
    )
    relax_factor: float | None = Field(
        default=None, ge=0, description="relaxed/adaptive backfilling factor (the core's default when unset)"
    )
    theta: float = Field(
        default=genie.DEFAULT_THETA,
        ge=0,
        description="weight of the nodes used against the GPUs used in a placement's cost",
    )
    array_split: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="policy soda: the share of its GPUs in the 4-GPU resource array, its largest nodes first; the "
        "rest is the 1-GPU array (seed 002 §V-C: set it from the share of GPUs that jobs of 4 GPUs and more ask, "
        f"as qosmos simulate derives it from a trace); unset: {DEFAULT_ARRAY_SPLIT}",
    )
    quota: Quota | None = Field(
        default=None,
        description="GPU quota; without one its nodes are its limit (in a cohort: its nodes' GPUs its share)",
    )
    cohort: str | None = Field(
        default=None,
        max_length=63,
        pattern=DNS_LABEL_PATTERN,
        description="VirtualClusters of one cohort place on the union of their nodes, each within its quota plus "
        "what it borrows from the others' idle quota (issue 21 §3); unset: its own nodes only",
    )
    preemption: Preemption = Field(
        default_factory=Preemption,  # type: ignore[arg-type]
        description="who may preempt whom for its jobs: reclaim within the cohort, lower priority within it",
        json_schema_extra={"default": {}},  # the apiserver fills in the fields' defaults
    )
    start_timeout_seconds: int = Field(
        default=DEFAULT_START_TIMEOUT_S,
        ge=1,
        description="its DLJobs' default start deadline: an admitted gang not all Running this long after its pods "
        "were created is stopped and requeued at the head of the queue (reason StartTimeout, with its pods' "
        "waiting reasons), avoiding the nodes it did not start on; Failed after backoffLimit such requeues",
    )
    node_lost_seconds: int = Field(
        default=DEFAULT_NODE_LOST_S,
        ge=0,
        description="its DLJobs' default grace for a node that stops being Ready: a gang on it longer than this "
        "is requeued (reason NodeLost, not counted as a failure)",
    )

    @model_validator(mode="after")
    def _limits_need_a_cohort(self) -> VirtualClusterSpec:
        """The CRD's rule, for objects stored before it (the operator skips them, saying why). Except
        ``borrowingLimit: 0`` without a cohort: the default the CRD stored before cohorts, which
        borrows nothing (dropped here, so such a VirtualCluster keeps running as it did)."""
        q = self.quota
        if q is not None and self.cohort is None and q.borrowing_limit == 0:
            q.borrowing_limit = None
        for f in COHORT_LIMITS:
            if q is not None and getattr(q, _snake(f)) is not None and self.cohort is None:
                raise ValueError(
                    f"spec.quota.{f} needs spec.cohort: only VirtualClusters of one cohort borrow and lend"
                )
        if self.cohort is not None and self.policy in ARRAY_POLICIES:
            raise ValueError(
                f"spec.cohort: policy {self.policy} splits the VirtualCluster's own nodes; it takes no cohort"
            )
        if self.array_split is not None and self.policy not in ARRAY_POLICIES:
            raise ValueError(f"spec.arraySplit applies only to a policy with job arrays (soda), not {self.policy}")
        return self

    def partition(self, name: str) -> Partition:
        """The core's view of this VirtualCluster (its cohort, share, limits and preemption included)."""
        kw: dict[str, Any] = {} if self.relax_factor is None else {"relax_factor": self.relax_factor}
        if self.array_split is not None:
            kw["array_split"] = self.array_split
        q = self.quota
        return Partition(
            name=name,
            policy=self.policy,
            placement=self.placement,
            backfill=self.backfill,
            gpu_quota=q.gpus if q else None,
            theta=self.theta,
            cohort=self.cohort,
            borrowing_limit=q.borrowing_limit if q else None,
            lending_limit=q.lending_limit if q else None,
            preemption=self.preemption.policy(),
            **kw,
        )


class VirtualClusterGPUs(_Model):
    """GPU accounting of the VirtualCluster."""

    total: int = Field(0, ge=0, description="GPUs on its nodes")
    used: int = Field(0, ge=0, description="GPUs held by its running jobs")
    borrowed: int = Field(0, ge=0, description="GPUs its running jobs hold beyond its quota")
    lent: int = Field(0, ge=0, description="GPUs of its quota other VirtualClusters hold")


class VirtualClusterStatus(_Model):
    """Observed state, written by the operator."""

    gpus: VirtualClusterGPUs | None = None
    queued: int | None = Field(None, ge=0, description="DLJobs waiting in its queue")
    running: int | None = Field(None, ge=0, description="DLJobs admitted and not finished")
    oldest_wait_seconds: int | None = Field(None, ge=0, description="wait so far of its longest-queued DLJob")
    last_event_time: datetime | None = Field(
        None,
        description="its latest scheduling event (a DLJob's creation or finish, a turn end; in a cohort, any "
        "member's): preemptive policies (SRTF, LAS, RR, MLFQ) read running jobs' service as of it; kept here "
        "because a finished DLJob retired from the working set no longer shows its finish",
    )
    active_jobs: int | None = Field(
        None,
        ge=0,
        description="its DLJobs not finished as of activeJobsTime: one of them gone since was deleted before it "
        "finished, a scheduling event (the simulator's withdrawal) that an operator restarted since still sees",
    )
    active_jobs_time: datetime | None = Field(None, description="the pass that counted activeJobs")
    observed_generation: int | None = Field(None, ge=0)
    conditions: Conditions | None = None


class VirtualCluster(_Model):
    """A partition of the cluster's nodes with its own queue of DLJobs, ordering policy, placer,
    backfilling and GPU quota."""

    api_version: Literal["qosmos.io/v1alpha1"] = "qosmos.io/v1alpha1"
    kind: Literal["VirtualCluster"] = "VirtualCluster"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: VirtualClusterSpec
    status: VirtualClusterStatus | None = None


# --------------------------------------------------------------------------- DLJob


class DLJobPhase(StrEnum):
    QUEUED = "Queued"
    ADMITTED = "Admitted"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class FailureAction(StrEnum):
    FAIL_JOB = "FailJob"  # the DLJob fails at once: no restart
    IGNORE = "Ignore"  # the gang is recreated without counting towards backoffLimit
    COUNT = "Count"  # the default: recreated, counted towards backoffLimit


class CleanPodPolicy(StrEnum):
    NONE = "None"  # every pod of the last attempt is kept
    RUNNING = "Running"  # the default: pods still running are deleted, finished ones kept (kubectl logs)
    ALL = "All"


class ExitCodes(_Model):
    container_name: str | None = Field(None, description="only this container's exit code (default: any container)")
    operator: Literal["In", "NotIn"] = Field(
        "In", description="In: the rule matches an exit code in values; NotIn: one not in values"
    )
    values: list[Annotated[int, Field(ge=1, le=255)]] = Field(
        ..., min_length=1, max_length=255, description="exit codes, 1 to 255"
    )


class PodFailureRule(_Model):
    action: FailureAction = Field(..., description="FailJob | Ignore | Count")
    on_exit_codes: ExitCodes = Field(..., description="which terminated containers' exit codes match")


class PodFailurePolicy(_Model):
    rules: list[PodFailureRule] = Field(
        ..., min_length=1, max_length=20, description="the first rule a failed container matches decides"
    )


DEFAULT_RENDEZVOUS_PORT = 29500  # torchrun's and PyTorchJob's MASTER_PORT
# What a gang pod may do when its container exits: not restart in place (Never), or only on failure
# (OnFailure); Always would never let the pod, and so the gang, finish.
POD_RESTART_POLICIES = ("Never", "OnFailure")
# A DLJob's name names its headless Service (a DNS-1035 label) and its pods' hostnames <name>-<index>
# (DNS-1123 labels of at most 63 characters): 58 leaves room for indexes below 10,000.
DLJOB_NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DLJOB_NAME_MAX = 58


class Rendezvous(_Model):
    """How the gang's processes find each other: rank 0's address and port, processes per pod."""

    port: int = Field(
        DEFAULT_RENDEZVOUS_PORT,
        ge=1,
        le=65535,
        description="rendezvous port on rank 0 (MASTER_PORT, PET_MASTER_PORT, the JAX coordinator's port), "
        "also the port of the DLJob's headless Service",
    )
    procs_per_pod: int | None = Field(
        None,
        ge=1,
        description="processes each pod runs (torchrun's PET_NPROC_PER_NODE); unset: the pod's GPUs (1 without GPUs)",
    )


class DLJobSpec(_Model):
    """A gang of pods (one per node of its placement, or gpusPerNode/gpusPerPod per node) admitted together by
    its VirtualCluster's queue."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            cel("self.kind == 'cpu' || self.gpus > 0", "a training or inference DLJob needs gpus > 0", ".gpus"),
            cel("self.kind != 'cpu' || self.gpus == 0", "a cpu DLJob requests no GPUs", ".gpus"),
            cel(
                "!has(self.gpusPerNode) || self.gpusPerNode < 1 || self.gpus % self.gpusPerNode == 0",
                "gpusPerNode must divide gpus",
                ".gpusPerNode",
            ),
            cel("self.kind != 'cpu' || !has(self.gpusPerNode)", "a cpu DLJob has no gpusPerNode", ".gpusPerNode"),
            cel("!has(self.gpusPerPod) || has(self.gpusPerNode)", "gpusPerPod needs gpusPerNode", ".gpusPerPod"),
            cel(
                "!has(self.gpusPerPod) || !has(self.gpusPerNode) || self.gpusPerNode % self.gpusPerPod == 0",
                "gpusPerPod must divide gpusPerNode",
                ".gpusPerPod",
            ),
            cel("self.kind != 'cpu' || has(self.cpus)", "a cpu DLJob needs cpus", ".cpus"),
            cel(
                "has(self.globalBatchSize) == has(self.iterations)",
                "globalBatchSize and iterations are given together (GENIE's task <modelType, batch, iterations>)",
                ".iterations",
            ),
            cel(
                "!has(self.iterations) || has(self.modelType)",
                "globalBatchSize and iterations need modelType (GENIE's task <modelType, batch, iterations>)",
                ".modelType",
            ),
        )
    )

    virtual_cluster: str = Field(
        max_length=63, pattern=LABEL_NAME_PATTERN, description="name of the VirtualCluster whose queue admits it"
    )
    kind: JobKindName = Field(
        JobKind.TRAINING.value,
        description="training, batch inference, or cpu (no GPUs); online serving is an InferenceService",
    )
    model_type: str | None = Field(
        None, min_length=1, max_length=253, description="model type, looked up in the model database (GENIE profile)"
    )
    global_batch_size: int | None = Field(None, ge=1, description="samples per iteration over all GPUs")
    iterations: int | None = Field(None, ge=1, description="training iterations (or inference batches) it runs")
    gpus: int = Field(0, ge=0, description="GPUs of the whole gang (0 for a cpu job)")
    gpus_per_node: int | None = Field(
        None, ge=1, description="GPUs of each pod (one pod per node); the placer chooses when unset"
    )
    gpus_per_pod: int | None = Field(
        None,
        ge=1,
        description="GPUs of each pod when a node's GPUs go to several pods (as PyTorchJob's one pod per GPU): "
        "gpusPerNode/gpusPerPod pods on each node of the placement; unset: one pod per node",
    )
    cpus: Quantity | None = Field(None, description="CPU request of each pod")
    memory: Quantity | None = Field(None, description="memory request of each pod")
    qos_class: QoSClassName = Field(
        QoSClass.NORMAL.name.capitalize(),
        description="GENIE QoS class (Eq. 9): Urgent (expected done at once: no waiting allowance), Prior (done "
        "within 1x its single-GPU run time) or Normal (within 2x)",
    )
    gpu_models: (
        Annotated[
            list[Annotated[str, Field(min_length=1, max_length=63, pattern=LABEL_VALUE_PATTERN)]],
            Field(max_length=MAX_LIST, json_schema_extra={"x-kubernetes-list-type": "set"}),
        ]
        | None
    ) = Field(None, description="GPU models it may run on (node label qosmos.io/gpu-model); any when unset")
    template: dict[str, Any] | None = Field(
        None,
        description="PodTemplateSpec of each pod; its labels and annotations are copied to the pods",
        json_schema_extra={
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            # only what a rule reads is declared; the rest of the PodTemplateSpec is kept as it is
            "properties": {
                "spec": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {
                        "restartPolicy": {
                            "type": "string",
                            "x-kubernetes-validations": [
                                cel(
                                    f"self in {list(POD_RESTART_POLICIES)}",
                                    "must be Never or OnFailure: a gang pod that restarts Always never finishes "
                                    "(the operator recreates a failed gang, up to backoffLimit)",
                                )
                            ],
                        }
                    },
                }
            },
        },
    )
    priority: int = Field(
        0,
        ge=-(2**31),
        le=2**31 - 1,
        description="priority within its VirtualCluster (higher first, Kueue's workload priority): breaks ties of "
        "the VirtualCluster's policy, and with preemption.withinVirtualCluster LowerPriority lets it preempt "
        "lower-priority jobs",
    )
    backoff_limit: int = Field(
        DEFAULT_BACKOFF_LIMIT, ge=0, description="times the whole gang is recreated after a failed pod"
    )
    pod_failure_policy: PodFailurePolicy | None = Field(
        None,
        description="exit-code rules, as batch/v1 Job's podFailurePolicy: FailJob fails the DLJob at once, "
        "Ignore recreates the gang without counting it, Count (also when no rule matches) counts it",
    )
    suspend: bool = Field(
        False,
        description="true: held out of its queue; if admitted, stopped (pods get their grace period) and requeued; "
        "false again: queued as before",
    )
    active_deadline_seconds: int | None = Field(
        None,
        ge=1,
        description="seconds from creation (time in the queue counts, as the training operator's runPolicy) "
        "after which the DLJob is Failed with reason DeadlineExceeded and its pods stopped",
    )
    start_timeout_seconds: int | None = Field(
        None,
        ge=1,
        description="seconds its admitted gang may take to be all Running (image pulls included) before it is "
        "stopped and requeued (reason StartTimeout); unset: its VirtualCluster's startTimeoutSeconds (600)",
    )
    node_lost_seconds: int | None = Field(
        None,
        ge=0,
        description="seconds a node of its running gang may be NotReady before the gang is requeued elsewhere "
        "(reason NodeLost); unset: its VirtualCluster's nodeLostSeconds (300)",
    )
    checkpoint_interval_seconds: int | None = Field(
        None,
        ge=0,
        description="seconds of run between the job's own periodic checkpoints. A run segment that ends without "
        "a grace period (a failed pod, a lost node) keeps the progress of its whole checkpoint intervals only: "
        "the rest is lost (status.lostRunSeconds) and the job's remaining time says so (SRTF, backfilling, ETA, "
        "a GENIE task's work left); 0: no periodic checkpoints (such a segment keeps nothing); unset: every run "
        "counts whole. A preemption, suspension or requeue stops the pods with their grace period "
        "(SIGTERM: time to checkpoint) and keeps the whole segment",
    )
    ttl_seconds_after_finished: int | None = Field(
        None, ge=0, description="the finished DLJob (and, through ownership, its pods) is deleted this long after"
    )
    clean_pod_policy: CleanPodPolicy = Field(
        CleanPodPolicy.RUNNING,
        description="which pods of the last attempt go when the DLJob finishes: Running (the default: finished "
        "pods stay for kubectl logs), All or None; a restart keeps the failed attempt's failed pods too",
    )
    rendezvous: Rendezvous = Field(
        default_factory=Rendezvous,  # type: ignore[arg-type]
        description="rank 0's rendezvous port and the processes per pod, given to every pod as MASTER_ADDR/PORT, "
        "WORLD_SIZE/RANK, torchrun's PET_* and JAX's coordinator variables",
        json_schema_extra={"default": {}},  # the apiserver fills in the port
    )

    @field_validator("template")
    @classmethod
    def _restart_policy(cls, template: dict[str, Any] | None) -> dict[str, Any] | None:
        """The CRD's rule, for objects stored before it (the operator skips them, saying why)."""
        policy = ((template or {}).get("spec") or {}).get("restartPolicy")
        if policy is not None and policy not in POD_RESTART_POLICIES:
            raise ValueError(f"spec.template.spec.restartPolicy {policy!r} must be Never or OnFailure")
        return template

    @property
    def qos(self) -> QoSClass:
        return QoSClass.parse(self.qos_class, "spec.qosClass")

    @property
    def cpu_milli(self) -> int:
        return (
            0
            if self.cpus is None
            else int((parse_quantity(self.cpus, "spec.cpus") * 1000).to_integral_value("ROUND_CEILING"))
        )

    @property
    def memory_mib(self) -> int:
        if self.memory is None:
            return 0
        return int((parse_quantity(self.memory, "spec.memory") / Decimal(2**20)).to_integral_value("ROUND_CEILING"))


class DLJobPlacement(_Model):
    """Where the admitted gang runs."""

    nodes: int = Field(ge=0, description="distinct nodes of the gang")
    gpus_per_node: int = Field(ge=0, description="GPUs of each pod")
    node_names: Annotated[list[str], Field(max_length=4096)] | None = Field(
        None, description="the node of each pod, in pod index order (a node twice: two of its pods there)"
    )
    gpus_by_node: Annotated[list[Annotated[int, Field(ge=0)]], Field(max_length=4096)] | None = Field(
        None, description="GPUs of each pod, in nodeNames order, when they differ (gpusPerNode is then the largest)"
    )
    shape: str | None = Field(None, max_length=32, description="pods x GPUs per pod, e.g. 2x8, for kubectl get")


class DLJobStatus(_Model):
    """Observed state, written by the operator."""

    phase: DLJobPhase | None = Field(None, description="Queued, Admitted (gang ungated), Running, Succeeded, Failed")
    placement: DLJobPlacement | None = None
    waiting_allowance_seconds: int | None = Field(
        None, description="GENIE's waiting allowance (Eq. 13): how long it may still wait; negative when overdue"
    )
    deadline: datetime | None = Field(None, description="latest finish its QoS class allows (GENIE Eq. 12)")
    predicted_duration_seconds: float | None = Field(None, ge=0, description="predicted run time")
    eta: datetime | None = Field(None, description="predicted start, from a forward simulation of its VirtualCluster")
    queue_position: int | None = Field(None, ge=0, description="0-based position in its VirtualCluster's order")
    admitted_at: datetime | None = None
    start_time: datetime | None = Field(None, description="when all its pods were Running")
    completion_time: datetime | None = None
    restarts: int | None = Field(None, ge=0, description="times the gang was recreated after a failed pod")
    preemptions: int | None = Field(
        None, ge=0, description="times it was preempted (or reclaimed) and went back to its queue"
    )
    attained_service_gpu_seconds: float | None = Field(
        None,
        ge=0,
        description="GPU-seconds of service its finished run segments received (LAS, MLFQ and RR order by it); "
        "the current segment, since startTime, is not included",
    )
    executed_seconds: float | None = Field(
        None,
        ge=0,
        description="seconds of its finished run segments its progress keeps (SRTF: predicted duration minus "
        "this): their run, less what failures lost since the last checkpoint (spec.checkpointIntervalSeconds)",
    )
    lost_run_seconds: float | None = Field(
        None,
        ge=0,
        description="seconds of run lost since the last checkpoint when segments ended without a grace period "
        "(a failed pod, a lost node), in all; run again after the restart",
    )
    work_left: float | None = Field(
        None,
        ge=0,
        le=1,
        description="fraction of a GENIE task's work its finished run segments left to do, as GENIE's model "
        "counts it (Eq. 4 at each segment's shape): its expected run on its next shape; unset: all of it",
    )
    queued_since: datetime | None = Field(
        None, description="when it last went back to its queue (preempted or reclaimed); unset: its creation"
    )
    queue_head: bool | None = Field(
        None,
        description="preempted for an InferenceService's replica (SODA): it waits at the head of its queue "
        "until admitted again",
    )
    observed_generation: int | None = Field(None, ge=0)
    ignored_failures: int | None = Field(
        None, ge=0, description="gang restarts its podFailurePolicy's Ignore rules did not count"
    )
    consecutive_failures: int | None = Field(
        None, ge=0, description="failed runs in a row (a run longer than 10 minutes resets it): the back-off"
    )
    start_timeouts: int | None = Field(
        None, ge=0, description="times its gang did not start within its start timeout and was requeued"
    )
    avoid_nodes: Annotated[list[str], Field(max_length=4096)] | None = Field(
        None, description="nodes its gang did not start on: not placed there again while other nodes fit it"
    )
    restart_after: datetime | None = Field(
        None, description="a failed gang is recreated at this time (back-off: 10 s doubling up to 6 min)"
    )
    last_failure_time: datetime | None = Field(
        None, description="when a pod of its gang last failed (an event of its VirtualCluster's queue)"
    )
    stalled_since: datetime | None = Field(
        None,
        description="since when a node of its admitted gang has not been Ready (its pods there make no "
        "progress): its run is counted to here when the gang is requeued (NodeLost), preempted or restarted "
        "before that node is back with its pods running; unset while every node of it is Ready",
    )
    retired: bool | None = Field(
        None,
        description="finished with nothing left to do (no pod running, no ttlSecondsAfterFinished): out of the "
        "operator's working set (a selectable field: its watch selects status.retired!=true)",
    )
    conditions: Conditions | None = None


class DLJob(_Model):
    """A deep-learning (or CPU) job: a gang of pods admitted at once by its VirtualCluster's queue,
    with a QoS class and GENIE's task <modelType, globalBatchSize, iterations>."""

    api_version: Literal["qosmos.io/v1alpha1"] = "qosmos.io/v1alpha1"
    kind: Literal["DLJob"] = "DLJob"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: DLJobSpec
    status: DLJobStatus | None = None

    def admitted(self) -> bool:
        """True once the spec is frozen: any phase after Queued."""
        return self.status is not None and self.status.phase not in (None, DLJobPhase.QUEUED)


# --------------------------------------------------------------------------- InferenceService


class InferenceCPU(_Model):
    """How a CPU replica serves: its cores and the largest batch they serve within the QoS target."""

    cores_per_replica: int = Field(
        SODA_CPU_CORES,
        ge=1,
        description="CPU cores each CPU replica requests, on the spare CPU of GPU nodes (SODA: the 16 a GPU node "
        "leaves after its GPU jobs' cores)",
    )
    max_batch: int | None = Field(
        None,
        ge=0,
        description="optional override: the largest batch those cores serve within qosTargetMs; below 1 the service "
        "never runs on CPU; unset: derived from the model's CPU inference profile (`qosmos profile inference`), "
        "else from SODA's measured per-core rate of the model (seed 002 Table III), else never on CPU",
    )
    max_replicas: int | None = Field(
        None, ge=1, le=MAX_INFERENCE_REPLICAS, description="most CPU replicas (default: maxReplicas)"
    )


class PrometheusLoad(_Model):
    """The query rate as a Prometheus instant query."""

    url: str = Field(
        max_length=2048,
        pattern=r"^https?://[^\s]+$",
        description="Prometheus base URL; the operator GETs <url>/api/v1/query?query=<query>",
    )
    query: str = Field(
        min_length=1,
        max_length=4096,
        description="PromQL expression giving the service's queries per second (several series are summed), "
        'e.g. sum(rate(http_requests_total{service="resnet"}[1m]))',
    )
    interval_seconds: float = Field(
        DEFAULT_PROMETHEUS_INTERVAL_S, ge=1, description="seconds between two samples of the query"
    )


class InferenceLoad(_Model):
    """Where the query rate comes from."""

    prometheus: PrometheusLoad | None = Field(
        None, description=f"a Prometheus instant query; unset: the annotation {ANN_QPS} (queries per second)"
    )


class InferenceForecast(_Model):
    """Switching ahead of the load (issue 23 §3): the operator keeps the observed rates (per period, in
    memory), forecasts the upper band over the replicas' start-up plus one period and plans for it."""

    enabled: bool = Field(default=True, description="plan for the forecast band; false: the observed rate alone")
    period_seconds: float = Field(
        default=DEFAULT_FORECAST_PERIOD_S, gt=0, description="slot of the rate history the forecaster learns from"
    )
    ready_seconds: float = Field(
        default=DEFAULT_READY_S,
        ge=0,
        description="seconds from asking for a replica until it is Ready (its start-up time)",
    )
    quantile: float = Field(default=0.95, ge=0.5, lt=1, description="the band's quantile")


class InferenceServiceSpec(_Model):
    """An online inference service whose replicas SODA's placer runs on CPU below the GPU switching batch
    and on GPUs above it, scaled with the query load (seed 002 §V-D)."""

    model_config = ConfigDict(
        json_schema_extra=_validations(
            cel("self.minReplicas <= self.maxReplicas", "minReplicas must not exceed maxReplicas", ".minReplicas"),
            cel(
                "!has(self.cpu) || !has(self.cpu.maxReplicas) || self.cpu.maxReplicas >= self.minReplicas",
                "cpu.maxReplicas must not be below minReplicas",
                ".cpu.maxReplicas",
            ),
        )
    )

    model_type: str = Field(
        min_length=1,
        max_length=253,
        description="model type served, looked up in the model database (GPU throughput profile) and in SODA's "
        "CPU measurements",
    )
    qos_target_ms: float = Field(
        SODA_QOS_TARGET_S * 1000,
        gt=0,
        description="latency target of every query in milliseconds: batch window plus compute (SODA: 200)",
    )
    gpu_switch_batch: int | None = Field(
        None,
        ge=1,
        description="optional override of bs_gpu, the largest batch one GPU serves within qosTargetMs (the CPU/GPU "
        "switching point); unset: derived from the model's GPU inference profile (`qosmos profile inference`), "
        "else from its training throughput profile",
    )
    gpu_model: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        description="GPU model of the serving nodes (e.g. H200): its inference profile is used, else the nearest "
        "measured GPU model's; unset: the newest measured",
    )
    cpu: InferenceCPU = Field(
        default_factory=InferenceCPU,  # type: ignore[arg-type]
        description="CPU replicas",
        json_schema_extra={"default": {}},  # the apiserver fills in coresPerReplica
    )
    min_replicas: int = Field(1, ge=1, le=MAX_INFERENCE_REPLICAS, description="fewest replicas, in either mode")
    max_replicas: int = Field(8, ge=1, le=MAX_INFERENCE_REPLICAS, description="most GPU replicas")
    scale_out_threshold: float = Field(
        DEFAULT_SCALE_OUT_THRESHOLD,
        gt=0,
        le=1,
        description="add a replica when the load passes this share of the replicas' maximum load (SODA: 0.8)",
    )
    hysteresis: float = Field(
        DEFAULT_HYSTERESIS,
        ge=0,
        lt=1,
        description="a step down (to CPU, fewer replicas) needs the load this share below the point it crosses",
    )
    switch_cooldown_seconds: float = Field(
        DEFAULT_SWITCH_COOLDOWN_S,
        ge=0,
        description="seconds between two CPU/GPU switches, unless the replicas are overloaded",
    )
    scale_in_after_seconds: float = Field(
        DEFAULT_SCALE_IN_AFTER_S,
        ge=0,
        description="seconds the load must ask for less (fewer replicas, CPU) without a break before it gets it",
    )
    scale_out_after_seconds: float = Field(
        DEFAULT_SCALE_OUT_AFTER_S,
        ge=0,
        description="seconds the load must ask for more before it gets it (0: at once; overload never waits)",
    )
    template: dict[str, Any] | None = Field(
        None,
        description="PodTemplateSpec of the serving pod; the operator adds one GPU (GPU replicas) or the cores "
        "(CPU replicas) to its first container",
        json_schema_extra={"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    )
    load: InferenceLoad | None = Field(
        None, description=f"where the query rate comes from; unset: the annotation {ANN_QPS}"
    )
    forecast: InferenceForecast = Field(
        default_factory=lambda: InferenceForecast(),
        description="switching ahead of the load: plan for the forecast upper band of the query rate",
        json_schema_extra={"default": {}},
    )


INFERENCE_MODES: tuple[str, ...] = tuple(m.value for m in Mode)  # GPU, CPU
InferenceModeName = Literal[INFERENCE_MODES]  # type: ignore[valid-type]


class InferenceServing(_Model):
    """The numbers the placer works with, resolved from the spec and the model database."""

    gpu_switch_batch: int | None = Field(None, ge=1, description="bs_gpu, the CPU/GPU switching point")
    gpu_replica_qps: float | None = Field(
        None, ge=0, alias="gpuReplicaQPS", description="queries/s one GPU replica serves at most"
    )
    cpu_max_batch: int | None = Field(None, ge=0, description="batch a CPU replica serves (0: never on CPU)")
    cpu_replica_qps: float | None = Field(
        None, ge=0, alias="cpuReplicaQPS", description="queries/s one CPU replica serves at most"
    )


class InferenceServiceStatus(_Model):
    """Observed state and the placer's carried state, written by the operator (a restarted operator
    continues from it)."""

    mode: InferenceModeName | None = Field(None, description="GPU or CPU: the mode its replicas are to serve in")
    replicas: int | None = Field(None, ge=0, description="replicas wanted in that mode")
    ready_replicas: int | None = Field(None, ge=0, description="Ready replica pods serving now (either mode)")
    observed_qps: float | None = Field(
        None, ge=0, alias="observedQPS", description="the query rate of the last decision, queries per second"
    )
    observed_at: datetime | None = Field(None, description="when that rate was sampled (the decision's time)")
    forecast_qps: float | None = Field(
        None,
        ge=0,
        alias="forecastQPS",
        description="the forecast upper band of the rate the last decision planned for (unset: none)",
    )
    last_switch_time: datetime | None = Field(None, description="the last CPU/GPU switch")
    switches: int | None = Field(None, ge=0, description="CPU/GPU switches so far")
    load_up_since: datetime | None = Field(
        None, description="since when the load has asked for more (scale out, to GPU) without a break"
    )
    load_down_since: datetime | None = Field(
        None, description="since when the load has asked for less (scale in, to CPU) without a break"
    )
    target_mode: InferenceModeName | None = Field(None, description="what the load asks for (differs while waiting)")
    target_replicas: int | None = Field(None, ge=0, description="replicas the load asks for")
    reason: str | None = Field(None, max_length=64, description="why the placer decided as it did")
    message: str | None = Field(None, max_length=1024, description="the placer's decision in words")
    serving: InferenceServing | None = None
    observed_generation: int | None = Field(None, ge=0)
    conditions: Conditions | None = None


class InferenceService(_Model):
    """An online inference service: SODA's hardware-aware placer runs its replicas on the spare CPU of GPU
    nodes while the query load is below the GPU switching batch, on GPUs above it (seed 002 §V-D)."""

    api_version: Literal["qosmos.io/v1alpha1"] = "qosmos.io/v1alpha1"
    kind: Literal["InferenceService"] = "InferenceService"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: InferenceServiceSpec
    status: InferenceServiceStatus | None = None


# --------------------------------------------------------------------------- CRD rendering


# the run policy a user may still change on an admitted DLJob, as on a batch/v1 Job: the operator reads
# them afresh at every pass (suspend stops and requeues it; a deadline or TTL is re-evaluated)
MUTABLE_AFTER_ADMISSION = ("suspend", "activeDeadlineSeconds", "ttlSecondsAfterFinished")


def _immutable_after_admission(fields: list[str]) -> list[JsonDict]:
    """One root transition rule: the spec may change only while the DLJob has no phase or is Queued,
    but for its run policy (``MUTABLE_AFTER_ADMISSION``).

    On the root, a rule sees status; a spec update keeps the stored status (status subresource), so
    ``oldSelf.status.phase`` is the phase the change is judged against. One rule, not one per field:
    root rules run on every write, the operator's status patches included, and fourteen of them were
    a twelfth of the apiserver's CPU under a burst of admissions (pprof, ``qosmos bench operator``).
    The phase comes first: a DLJob not yet admitted (most of the operator's status patches: a waiting
    reason, an ETA, the admission itself) is judged on it alone, without comparing two specs, template
    included (1.6 ms of apiserver CPU less per such patch, 7.8 -> 6.2 ms, four alternating rounds of
    1,500 patches on this machine); then ``self.spec == oldSelf.spec``, so an admitted DLJob's status
    patch costs one comparison; the per-field terms run only when the spec changed. The message names
    the field that changed; it is evaluated only when the rule fails.
    """
    frozen = [f for f in fields if f not in MUTABLE_AFTER_ADMISSION]
    queued = f"!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase == '{DLJobPhase.QUEUED}'"
    message = "'spec cannot change once the DLJob is admitted'"
    same = []
    for f in reversed(frozen):
        changed = (
            f"has(self.spec.{f}) != has(oldSelf.spec.{f}) || (has(self.spec.{f}) && self.spec.{f} != oldSelf.spec.{f})"
        )
        message = f"({changed}) ? 'spec.{f} cannot change once the DLJob is admitted' : {message}"
        same.append(f"!({changed})")
    rule = cel(
        f"{queued} || self.spec == oldSelf.spec || ({' && '.join(reversed(same))})",
        "spec cannot change once the DLJob is admitted",
        ".spec",
        "FieldValueForbidden",
    )
    return [{**rule, "messageExpression": message}]


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            out["description"] = self.description
        if self.priority:
            out["priority"] = self.priority
        return out


AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp")


@dataclass(frozen=True)
class Resource:
    """One custom resource: its names, scope, models, root rules and printer columns."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    scope: Literal["Namespaced", "Cluster"]
    model: type[_Model]
    columns: tuple[PrinterColumn, ...]
    name_label: str  # the label whose value is the object's name, so names are at most 63 characters
    root_rules: tuple[JsonDict, ...] = field(default=())
    selectable_fields: tuple[str, ...] = ()  # JSON paths list and watch requests may select on
    name_max: int = 63
    name_pattern: str | None = None  # what else the name names asks of it (a Service, hostnames)
    name_why: str = ""

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{GROUP}"

    @property
    def file_name(self) -> str:
        return f"{self.crd_name}.yaml"


VIRTUAL_CLUSTER = Resource(
    kind="VirtualCluster",
    plural="virtualclusters",
    short_names=("qvc",),  # not "vc": Volcano's vcjob and the multi-tenancy VirtualCluster use it
    scope="Cluster",
    model=VirtualCluster,
    columns=(
        PrinterColumn("Policy", "string", ".spec.policy", "ordering policy"),
        PrinterColumn("Placement", "string", ".spec.placement", "placer"),
        PrinterColumn("Quota", "integer", ".spec.quota.gpus", "nominal GPU quota"),
        PrinterColumn("GPUs", "integer", ".status.gpus.total", "GPUs on its nodes"),
        PrinterColumn("Used", "integer", ".status.gpus.used", "GPUs held by its running jobs"),
        PrinterColumn("Queued", "integer", ".status.queued", "DLJobs waiting"),
        PrinterColumn("Running", "integer", ".status.running", "DLJobs admitted and not finished"),
        PrinterColumn("Oldest-Wait", "integer", ".status.oldestWaitSeconds", "seconds its oldest DLJob has waited"),
        PrinterColumn("Backfill", "string", ".spec.backfill", "backfilling mode", priority=1),
        PrinterColumn("Borrowed", "integer", ".status.gpus.borrowed", "GPUs borrowed", priority=1),
        PrinterColumn("Lent", "integer", ".status.gpus.lent", "GPUs lent", priority=1),
        AGE,
    ),
    name_label=LABEL_VC,
)

DL_JOB = Resource(
    kind="DLJob",
    plural="dljobs",
    short_names=("dlj",),
    scope="Namespaced",
    model=DLJob,
    columns=(
        PrinterColumn("Phase", "string", ".status.phase", "Queued, Admitted, Running, Succeeded or Failed"),
        PrinterColumn("VC", "string", ".spec.virtualCluster", "VirtualCluster"),
        PrinterColumn("QoS", "string", ".spec.qosClass", "QoS class"),
        PrinterColumn("GPUs", "integer", ".spec.gpus", "GPUs of the gang"),
        PrinterColumn("Placement", "string", ".status.placement.shape", "nodes x GPUs per node"),
        PrinterColumn("Allowance", "integer", ".status.waitingAllowanceSeconds", "waiting allowance, seconds"),
        # a string, not a date: kubectl prints a future date as <invalid>
        PrinterColumn("ETA", "string", ".status.eta", "predicted start"),
        PrinterColumn("Position", "integer", ".status.queuePosition", "position in its queue", priority=1),
        PrinterColumn("Restarts", "integer", ".status.restarts", "gang restarts", priority=1),
        AGE,
    ),
    name_label=LABEL_JOB,
    name_max=DLJOB_NAME_MAX,
    name_pattern=DLJOB_NAME_PATTERN,
    name_why="a DNS-1035 label (it names the DLJob's headless Service and its pods' hostnames <name>-<index>)",
    root_rules=tuple(
        _immutable_after_admission([DLJobSpec.model_fields[f].alias or f for f in DLJobSpec.model_fields])
    ),
    selectable_fields=(f".{RETIRED_FIELD}",),
)

INFERENCE_SERVICE = Resource(
    kind="InferenceService",
    plural="inferenceservices",
    short_names=("qinf",),  # not "isvc": KServe's InferenceService
    scope="Namespaced",
    model=InferenceService,
    columns=(
        PrinterColumn("Model", "string", ".spec.modelType", "model type served"),
        PrinterColumn("Mode", "string", ".status.mode", "GPU or CPU"),
        PrinterColumn("Replicas", "integer", ".status.replicas", "replicas wanted in that mode"),
        PrinterColumn("Ready", "integer", ".status.readyReplicas", "Ready replicas serving now"),
        PrinterColumn("QPS", "number", ".status.observedQPS", "query rate of the last decision"),
        PrinterColumn("Switches", "integer", ".status.switches", "CPU/GPU switches so far"),
        PrinterColumn("Reason", "string", ".status.reason", "why the placer decided as it did", priority=1),
        PrinterColumn("Last-Switch", "string", ".status.lastSwitchTime", "the last CPU/GPU switch", priority=1),
        AGE,
    ),
    name_label=LABEL_INFERENCE,
)

RESOURCES: tuple[Resource, ...] = (VIRTUAL_CLUSTER, DL_JOB, INFERENCE_SERVICE)

# Keys a structural schema node may carry (apiextensions.k8s.io/v1 JSONSchemaProps we use).
_ALLOWED_KEYS = frozenset(
    {
        "type",
        "format",
        "description",
        "default",
        "enum",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "items",
        "properties",
        "required",
        "additionalProperties",
        "anyOf",
    }
)


class SchemaError(ValueError):
    """The pydantic schema has a construct the CRD generator does not translate."""


def _structural(node: dict[str, Any], defs: dict[str, Any], where: str) -> dict[str, Any]:
    """Translate one pydantic JSON-schema node into a structural OpenAPI v3 node (no $ref, no null)."""
    node = dict(node)
    ref = node.pop("$ref", None)
    if ref is None and "allOf" in node and len(node["allOf"]) == 1 and "$ref" in node["allOf"][0]:
        ref = node.pop("allOf")[0]["$ref"]
    if ref is not None:
        target = dict(defs[ref.rsplit("/", 1)[-1]])
        target.update(node)  # the field's own description, default and rules win over the model's
        node = target
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        branches = [b for b in node.pop("anyOf") if b != {"type": "null"}]
        if len(branches) != 1:
            raise SchemaError(f"{where}: a union other than Optional[X] has no structural form")
        inner = dict(branches[0])
        inner.update(node)
        return _structural(inner, defs, where)
    node.pop("title", None)
    if "description" in node:  # docstrings wrap; one line reads better in kubectl explain
        node["description"] = " ".join(node["description"].split())
    if node.get("default", 0) is None:
        del node["default"]
    if "const" in node:
        node["enum"] = [node.pop("const")]
    for key in ("exclusiveMinimum", "exclusiveMaximum"):  # JSON Schema 2020 numbers -> OpenAPI v3.0 booleans
        if key in node and not isinstance(node[key], bool):
            node["minimum" if key == "exclusiveMinimum" else "maximum"] = node[key]
            node[key] = True
    if node.get("additionalProperties") in (True, False):
        del node["additionalProperties"]
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-"):
            out[key] = copy.deepcopy(value)
        elif key not in _ALLOWED_KEYS:
            raise SchemaError(f"{where}: {key!r} has no structural translation")
        elif key == "properties":
            out[key] = {name: _structural(sub, defs, f"{where}.{name}") for name, sub in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _structural(value, defs, f"{where}[]")
        else:
            out[key] = copy.deepcopy(value)
    if "properties" in out or "additionalProperties" in out:
        out.setdefault("type", "object")
    if "type" not in out and not (
        out.get("x-kubernetes-int-or-string") or out.get("x-kubernetes-preserve-unknown-fields")
    ):
        raise SchemaError(f"{where}: no type")
    return out


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    """Keys in a fixed reading order (description first), recursively: stable, reviewable diffs."""
    first = ("description", "type", "format")
    keys = [k for k in first if k in node] + sorted(k for k in node if k not in first)
    out: dict[str, Any] = {}
    for k in keys:
        v = node[k]
        if k == "properties":
            v = {name: _ordered(sub) for name, sub in v.items()}
        elif k in ("items", "additionalProperties") and isinstance(v, dict):
            v = _ordered(v)
        elif k == "anyOf":
            v = [_ordered(b) for b in v]
        elif k == "x-kubernetes-validations":  # pydantic sorts keys; rule first reads better (none dropped)
            order = ("rule", "message", "messageExpression", "fieldPath", "reason")
            v = [{key: r[key] for key in (*order, *sorted(set(r) - set(order))) if key in r} for r in v]
        out[k] = v
    return out


def _name_schema(resource: Resource) -> dict[str, Any]:
    """``metadata.name``: a label value (at most 63 characters), and what else the name names asks."""
    why = f"it is the label value {resource.name_label}=<name>"
    if resource.name_why:
        why = f"{resource.name_why}; {why}"
    out: dict[str, Any] = {
        "description": f"at most {resource.name_max} characters: {why}",
        "type": "string",
        "maxLength": resource.name_max,
    }
    if resource.name_pattern:
        out["pattern"] = resource.name_pattern
    return out


def open_api_schema(resource: Resource) -> dict[str, Any]:
    """The structural ``openAPIV3Schema`` of a resource, from its pydantic model."""
    schema = resource.model.model_json_schema(by_alias=True, mode="validation")
    defs = schema.get("$defs", {})
    props = schema["properties"]
    spec = _structural(props["spec"], defs, "spec")
    status = _structural(props["status"], defs, "status")
    root: dict[str, Any] = {
        "description": " ".join((resource.model.__doc__ or "").split()),
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {  # the apiserver owns ObjectMeta's schema; a CRD may only narrow name
                "type": "object",
                "properties": {"name": _name_schema(resource)},
            },
            "spec": spec,
            "status": status,
        },
        "required": ["spec"],
    }
    if resource.root_rules:
        root["x-kubernetes-validations"] = [dict(r) for r in resource.root_rules]
    return _ordered(root)


def crd(resource: Resource) -> dict[str, Any]:
    """The CustomResourceDefinition object of a resource. ``selectableFields`` needs Kubernetes 1.31
    (beta, on by default); a 1.30 apiserver drops it, and the operator then retires DLJobs by label."""
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "subresources": {"status": {}},
        "additionalPrinterColumns": [c.to_dict() for c in resource.columns],
    }
    if resource.selectable_fields:
        version["selectableFields"] = [{"jsonPath": p} for p in resource.selectable_fields]
    version["schema"] = {"openAPIV3Schema": open_api_schema(resource)}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": resource.crd_name},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": resource.kind,
                "listKind": f"{resource.kind}List",
                "plural": resource.plural,
                "singular": resource.kind.lower(),
                "shortNames": list(resource.short_names),
                "categories": [CATEGORY],
            },
            "scope": resource.scope,
            "versions": [version],
        },
    }


HEADER = "# Generated by `qosmos crds generate` from qosmos.operator.crds: do not edit by hand.\n"


def render(resource: Resource) -> str:
    """The CRD as the YAML text checked in under crds/."""
    return HEADER + str(yaml.safe_dump(crd(resource), sort_keys=False, width=4096, allow_unicode=True))


def render_all() -> dict[str, str]:
    """File name -> YAML text of every CRD."""
    return {r.file_name: render(r) for r in RESOURCES}


def write(out: Path) -> list[Path]:
    """Write every CRD into ``out`` (created); returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_all().items():
        path = out / name
        path.write_text(text)
        written.append(path)
    return written


def stale(out: Path) -> list[Path]:
    """CRD files in ``out`` that are missing or differ from a fresh generation."""
    return [
        out / name
        for name, text in render_all().items()
        if not (out / name).is_file() or (out / name).read_text() != text
    ]
