from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PodSpec(_message.Message):
    __slots__ = ("uid", "namespace", "name", "gpus", "cpu_milli", "memory_mib", "vc", "gpu_models", "placement", "nodes", "job")
    UID_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    VC_FIELD_NUMBER: _ClassVar[int]
    GPU_MODELS_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    uid: str
    namespace: str
    name: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    vc: str
    gpu_models: _containers.RepeatedScalarFieldContainer[str]
    placement: str
    nodes: _containers.RepeatedScalarFieldContainer[str]
    job: str
    def __init__(self, uid: _Optional[str] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ..., gpus: _Optional[int] = ..., cpu_milli: _Optional[int] = ..., memory_mib: _Optional[int] = ..., vc: _Optional[str] = ..., gpu_models: _Optional[_Iterable[str]] = ..., placement: _Optional[str] = ..., nodes: _Optional[_Iterable[str]] = ..., job: _Optional[str] = ...) -> None: ...

class ScoreRequest(_message.Message):
    __slots__ = ("pod", "node_names", "pod_json")
    POD_FIELD_NUMBER: _ClassVar[int]
    NODE_NAMES_FIELD_NUMBER: _ClassVar[int]
    POD_JSON_FIELD_NUMBER: _ClassVar[int]
    pod: PodSpec
    node_names: _containers.RepeatedScalarFieldContainer[str]
    pod_json: str
    def __init__(self, pod: _Optional[_Union[PodSpec, _Mapping]] = ..., node_names: _Optional[_Iterable[str]] = ..., pod_json: _Optional[str] = ...) -> None: ...

class NodeScore(_message.Message):
    __slots__ = ("node", "score", "reason")
    NODE_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    node: str
    score: int
    reason: str
    def __init__(self, node: _Optional[str] = ..., score: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("scores", "planned_nodes")
    SCORES_FIELD_NUMBER: _ClassVar[int]
    PLANNED_NODES_FIELD_NUMBER: _ClassVar[int]
    scores: _containers.RepeatedCompositeFieldContainer[NodeScore]
    planned_nodes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, scores: _Optional[_Iterable[_Union[NodeScore, _Mapping]]] = ..., planned_nodes: _Optional[_Iterable[str]] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("id", "submit_time", "gpus", "kind", "user", "vc", "model", "batch", "iters", "qos", "predicted_duration", "duration", "attained", "executed", "cpu_milli", "memory_mib", "requested_duration", "gpus_per_node", "gpu_models", "enqueued")
    ID_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    VC_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    ITERS_FIELD_NUMBER: _ClassVar[int]
    QOS_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_DURATION_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    ATTAINED_FIELD_NUMBER: _ClassVar[int]
    EXECUTED_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_DURATION_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    GPU_MODELS_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_FIELD_NUMBER: _ClassVar[int]
    id: str
    submit_time: float
    gpus: int
    kind: str
    user: str
    vc: str
    model: str
    batch: int
    iters: int
    qos: str
    predicted_duration: float
    duration: float
    attained: float
    executed: float
    cpu_milli: int
    memory_mib: int
    requested_duration: float
    gpus_per_node: int
    gpu_models: _containers.RepeatedScalarFieldContainer[str]
    enqueued: float
    def __init__(self, id: _Optional[str] = ..., submit_time: _Optional[float] = ..., gpus: _Optional[int] = ..., kind: _Optional[str] = ..., user: _Optional[str] = ..., vc: _Optional[str] = ..., model: _Optional[str] = ..., batch: _Optional[int] = ..., iters: _Optional[int] = ..., qos: _Optional[str] = ..., predicted_duration: _Optional[float] = ..., duration: _Optional[float] = ..., attained: _Optional[float] = ..., executed: _Optional[float] = ..., cpu_milli: _Optional[int] = ..., memory_mib: _Optional[int] = ..., requested_duration: _Optional[float] = ..., gpus_per_node: _Optional[int] = ..., gpu_models: _Optional[_Iterable[str]] = ..., enqueued: _Optional[float] = ...) -> None: ...

class RankRequest(_message.Message):
    __slots__ = ("jobs", "policy", "now", "nodes", "gpus_per_node", "theta", "total_gpus", "total_cpu_milli")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    THETA_FIELD_NUMBER: _ClassVar[int]
    TOTAL_GPUS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobSpec]
    policy: str
    now: float
    nodes: int
    gpus_per_node: int
    theta: float
    total_gpus: int
    total_cpu_milli: int
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobSpec, _Mapping]]] = ..., policy: _Optional[str] = ..., now: _Optional[float] = ..., nodes: _Optional[int] = ..., gpus_per_node: _Optional[int] = ..., theta: _Optional[float] = ..., total_gpus: _Optional[int] = ..., total_cpu_milli: _Optional[int] = ...) -> None: ...

class RankedJob(_message.Message):
    __slots__ = ("id", "position", "d_node", "d_gpn", "waiting_allowance", "blocked", "queue")
    ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    D_NODE_FIELD_NUMBER: _ClassVar[int]
    D_GPN_FIELD_NUMBER: _ClassVar[int]
    WAITING_ALLOWANCE_FIELD_NUMBER: _ClassVar[int]
    BLOCKED_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    id: str
    position: int
    d_node: int
    d_gpn: int
    waiting_allowance: float
    blocked: str
    queue: str
    def __init__(self, id: _Optional[str] = ..., position: _Optional[int] = ..., d_node: _Optional[int] = ..., d_gpn: _Optional[int] = ..., waiting_allowance: _Optional[float] = ..., blocked: _Optional[str] = ..., queue: _Optional[str] = ...) -> None: ...

class RankResponse(_message.Message):
    __slots__ = ("jobs", "policy")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[RankedJob]
    policy: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[RankedJob, _Mapping]]] = ..., policy: _Optional[str] = ...) -> None: ...

class ExplainRequest(_message.Message):
    __slots__ = ("batch", "iters", "model", "coeffs", "gamma", "lam", "nu", "kind", "qos", "nodes", "gpus_per_node", "theta", "submit", "now", "gpu_model")
    BATCH_FIELD_NUMBER: _ClassVar[int]
    ITERS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    COEFFS_FIELD_NUMBER: _ClassVar[int]
    GAMMA_FIELD_NUMBER: _ClassVar[int]
    LAM_FIELD_NUMBER: _ClassVar[int]
    NU_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    QOS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    THETA_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    GPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    batch: int
    iters: int
    model: str
    coeffs: _containers.RepeatedScalarFieldContainer[float]
    gamma: float
    lam: float
    nu: float
    kind: str
    qos: str
    nodes: int
    gpus_per_node: int
    theta: float
    submit: float
    now: float
    gpu_model: str
    def __init__(self, batch: _Optional[int] = ..., iters: _Optional[int] = ..., model: _Optional[str] = ..., coeffs: _Optional[_Iterable[float]] = ..., gamma: _Optional[float] = ..., lam: _Optional[float] = ..., nu: _Optional[float] = ..., kind: _Optional[str] = ..., qos: _Optional[str] = ..., nodes: _Optional[int] = ..., gpus_per_node: _Optional[int] = ..., theta: _Optional[float] = ..., submit: _Optional[float] = ..., now: _Optional[float] = ..., gpu_model: _Optional[str] = ...) -> None: ...

class Placement(_message.Message):
    __slots__ = ("d_node", "d_gpn", "pr", "lat", "cost", "cer", "feasible", "extrapolated")
    D_NODE_FIELD_NUMBER: _ClassVar[int]
    D_GPN_FIELD_NUMBER: _ClassVar[int]
    PR_FIELD_NUMBER: _ClassVar[int]
    LAT_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    CER_FIELD_NUMBER: _ClassVar[int]
    FEASIBLE_FIELD_NUMBER: _ClassVar[int]
    EXTRAPOLATED_FIELD_NUMBER: _ClassVar[int]
    d_node: int
    d_gpn: int
    pr: float
    lat: float
    cost: float
    cer: float
    feasible: bool
    extrapolated: bool
    def __init__(self, d_node: _Optional[int] = ..., d_gpn: _Optional[int] = ..., pr: _Optional[float] = ..., lat: _Optional[float] = ..., cost: _Optional[float] = ..., cer: _Optional[float] = ..., feasible: _Optional[bool] = ..., extrapolated: _Optional[bool] = ...) -> None: ...

class ExplainResponse(_message.Message):
    __slots__ = ("placements", "chosen", "ect", "deadline", "waiting_allowance", "profile", "json", "notes", "max_placement_gpus", "provenance", "throughput")
    PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    CHOSEN_FIELD_NUMBER: _ClassVar[int]
    ECT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    WAITING_ALLOWANCE_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    MAX_PLACEMENT_GPUS_FIELD_NUMBER: _ClassVar[int]
    PROVENANCE_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    placements: _containers.RepeatedCompositeFieldContainer[Placement]
    chosen: Placement
    ect: float
    deadline: float
    waiting_allowance: float
    profile: str
    json: str
    notes: _containers.RepeatedScalarFieldContainer[str]
    max_placement_gpus: int
    provenance: ProfileProvenance
    throughput: ThroughputInfo
    def __init__(self, placements: _Optional[_Iterable[_Union[Placement, _Mapping]]] = ..., chosen: _Optional[_Union[Placement, _Mapping]] = ..., ect: _Optional[float] = ..., deadline: _Optional[float] = ..., waiting_allowance: _Optional[float] = ..., profile: _Optional[str] = ..., json: _Optional[str] = ..., notes: _Optional[_Iterable[str]] = ..., max_placement_gpus: _Optional[int] = ..., provenance: _Optional[_Union[ProfileProvenance, _Mapping]] = ..., throughput: _Optional[_Union[ThroughputInfo, _Mapping]] = ...) -> None: ...

class ThroughputInfo(_message.Message):
    __slots__ = ("form", "heldout_error", "measured_range", "batch_outside_range", "measured_on")
    class MeasuredOnEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    FORM_FIELD_NUMBER: _ClassVar[int]
    HELDOUT_ERROR_FIELD_NUMBER: _ClassVar[int]
    MEASURED_RANGE_FIELD_NUMBER: _ClassVar[int]
    BATCH_OUTSIDE_RANGE_FIELD_NUMBER: _ClassVar[int]
    MEASURED_ON_FIELD_NUMBER: _ClassVar[int]
    form: str
    heldout_error: float
    measured_range: _containers.RepeatedScalarFieldContainer[float]
    batch_outside_range: bool
    measured_on: _containers.ScalarMap[str, str]
    def __init__(self, form: _Optional[str] = ..., heldout_error: _Optional[float] = ..., measured_range: _Optional[_Iterable[float]] = ..., batch_outside_range: _Optional[bool] = ..., measured_on: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ProfileProvenance(_message.Message):
    __slots__ = ("origin", "match", "requested", "matched", "source", "file", "overrides", "gpu_model", "gpu_match", "gpu_note")
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_FIELD_NUMBER: _ClassVar[int]
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    GPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    GPU_MATCH_FIELD_NUMBER: _ClassVar[int]
    GPU_NOTE_FIELD_NUMBER: _ClassVar[int]
    origin: str
    match: str
    requested: str
    matched: str
    source: str
    file: str
    overrides: _containers.RepeatedScalarFieldContainer[str]
    gpu_model: str
    gpu_match: str
    gpu_note: str
    def __init__(self, origin: _Optional[str] = ..., match: _Optional[str] = ..., requested: _Optional[str] = ..., matched: _Optional[str] = ..., source: _Optional[str] = ..., file: _Optional[str] = ..., overrides: _Optional[_Iterable[str]] = ..., gpu_model: _Optional[str] = ..., gpu_match: _Optional[str] = ..., gpu_note: _Optional[str] = ...) -> None: ...

class PartitionSpec(_message.Message):
    __slots__ = ("name", "policy", "placement", "backfill", "relax_factor", "gpu_quota", "theta")
    NAME_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    BACKFILL_FIELD_NUMBER: _ClassVar[int]
    RELAX_FACTOR_FIELD_NUMBER: _ClassVar[int]
    GPU_QUOTA_FIELD_NUMBER: _ClassVar[int]
    THETA_FIELD_NUMBER: _ClassVar[int]
    name: str
    policy: str
    placement: str
    backfill: str
    relax_factor: float
    gpu_quota: int
    theta: float
    def __init__(self, name: _Optional[str] = ..., policy: _Optional[str] = ..., placement: _Optional[str] = ..., backfill: _Optional[str] = ..., relax_factor: _Optional[float] = ..., gpu_quota: _Optional[int] = ..., theta: _Optional[float] = ...) -> None: ...

class NodeSpec(_message.Message):
    __slots__ = ("name", "gpus", "gpu_model", "cpu_milli", "memory_mib", "vc", "switch", "rack", "used_gpu_ids", "used_cpu_milli", "used_memory_mib")
    NAME_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GPU_MODEL_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    VC_FIELD_NUMBER: _ClassVar[int]
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    USED_GPU_IDS_FIELD_NUMBER: _ClassVar[int]
    USED_CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    USED_MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    name: str
    gpus: int
    gpu_model: str
    cpu_milli: int
    memory_mib: int
    vc: str
    switch: str
    rack: str
    used_gpu_ids: _containers.RepeatedScalarFieldContainer[int]
    used_cpu_milli: int
    used_memory_mib: int
    def __init__(self, name: _Optional[str] = ..., gpus: _Optional[int] = ..., gpu_model: _Optional[str] = ..., cpu_milli: _Optional[int] = ..., memory_mib: _Optional[int] = ..., vc: _Optional[str] = ..., switch: _Optional[str] = ..., rack: _Optional[str] = ..., used_gpu_ids: _Optional[_Iterable[int]] = ..., used_cpu_milli: _Optional[int] = ..., used_memory_mib: _Optional[int] = ...) -> None: ...

class GrantSpec(_message.Message):
    __slots__ = ("node", "gpu_ids", "cpu_milli", "memory_mib")
    NODE_FIELD_NUMBER: _ClassVar[int]
    GPU_IDS_FIELD_NUMBER: _ClassVar[int]
    CPU_MILLI_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MIB_FIELD_NUMBER: _ClassVar[int]
    node: str
    gpu_ids: _containers.RepeatedScalarFieldContainer[int]
    cpu_milli: int
    memory_mib: int
    def __init__(self, node: _Optional[str] = ..., gpu_ids: _Optional[_Iterable[int]] = ..., cpu_milli: _Optional[int] = ..., memory_mib: _Optional[int] = ...) -> None: ...

class AllocationSpec(_message.Message):
    __slots__ = ("grants",)
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    grants: _containers.RepeatedCompositeFieldContainer[GrantSpec]
    def __init__(self, grants: _Optional[_Iterable[_Union[GrantSpec, _Mapping]]] = ...) -> None: ...

class RunningJobSpec(_message.Message):
    __slots__ = ("job", "start", "expected_end", "allocation")
    JOB_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_END_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    job: JobSpec
    start: float
    expected_end: float
    allocation: AllocationSpec
    def __init__(self, job: _Optional[_Union[JobSpec, _Mapping]] = ..., start: _Optional[float] = ..., expected_end: _Optional[float] = ..., allocation: _Optional[_Union[AllocationSpec, _Mapping]] = ...) -> None: ...

class ReservationSpec(_message.Message):
    __slots__ = ("job_id", "start", "latest", "allocation", "backfilled")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    LATEST_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    BACKFILLED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    start: float
    latest: float
    allocation: AllocationSpec
    backfilled: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_id: _Optional[str] = ..., start: _Optional[float] = ..., latest: _Optional[float] = ..., allocation: _Optional[_Union[AllocationSpec, _Mapping]] = ..., backfilled: _Optional[_Iterable[str]] = ...) -> None: ...

class CarrySpec(_message.Message):
    __slots__ = ("reservation", "max_queue_len")
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    MAX_QUEUE_LEN_FIELD_NUMBER: _ClassVar[int]
    reservation: ReservationSpec
    max_queue_len: int
    def __init__(self, reservation: _Optional[_Union[ReservationSpec, _Mapping]] = ..., max_queue_len: _Optional[int] = ...) -> None: ...

class AdmitRequest(_message.Message):
    __slots__ = ("partition", "nodes", "waiting", "running", "now", "carry", "no_reasons")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    NOW_FIELD_NUMBER: _ClassVar[int]
    CARRY_FIELD_NUMBER: _ClassVar[int]
    NO_REASONS_FIELD_NUMBER: _ClassVar[int]
    partition: PartitionSpec
    nodes: _containers.RepeatedCompositeFieldContainer[NodeSpec]
    waiting: _containers.RepeatedCompositeFieldContainer[JobSpec]
    running: _containers.RepeatedCompositeFieldContainer[RunningJobSpec]
    now: float
    carry: CarrySpec
    no_reasons: bool
    def __init__(self, partition: _Optional[_Union[PartitionSpec, _Mapping]] = ..., nodes: _Optional[_Iterable[_Union[NodeSpec, _Mapping]]] = ..., waiting: _Optional[_Iterable[_Union[JobSpec, _Mapping]]] = ..., running: _Optional[_Iterable[_Union[RunningJobSpec, _Mapping]]] = ..., now: _Optional[float] = ..., carry: _Optional[_Union[CarrySpec, _Mapping]] = ..., no_reasons: _Optional[bool] = ...) -> None: ...

class StartDecision(_message.Message):
    __slots__ = ("job_id", "allocation", "d_node", "d_gpn", "backfilled")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    D_NODE_FIELD_NUMBER: _ClassVar[int]
    D_GPN_FIELD_NUMBER: _ClassVar[int]
    BACKFILLED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    allocation: AllocationSpec
    d_node: int
    d_gpn: int
    backfilled: bool
    def __init__(self, job_id: _Optional[str] = ..., allocation: _Optional[_Union[AllocationSpec, _Mapping]] = ..., d_node: _Optional[int] = ..., d_gpn: _Optional[int] = ..., backfilled: _Optional[bool] = ...) -> None: ...

class PreemptDecision(_message.Message):
    __slots__ = ("job_id", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class WaitReason(_message.Message):
    __slots__ = ("job_id", "code", "message", "position", "needs", "blocking", "waiting_allowance")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    NEEDS_FIELD_NUMBER: _ClassVar[int]
    BLOCKING_FIELD_NUMBER: _ClassVar[int]
    WAITING_ALLOWANCE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    code: str
    message: str
    position: int
    needs: str
    blocking: str
    waiting_allowance: float
    def __init__(self, job_id: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ..., position: _Optional[int] = ..., needs: _Optional[str] = ..., blocking: _Optional[str] = ..., waiting_allowance: _Optional[float] = ...) -> None: ...

class AdmitResponse(_message.Message):
    __slots__ = ("starts", "preemptions", "waiting", "carry", "order", "policy")
    STARTS_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    CARRY_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    starts: _containers.RepeatedCompositeFieldContainer[StartDecision]
    preemptions: _containers.RepeatedCompositeFieldContainer[PreemptDecision]
    waiting: _containers.RepeatedCompositeFieldContainer[WaitReason]
    carry: CarrySpec
    order: _containers.RepeatedScalarFieldContainer[str]
    policy: str
    def __init__(self, starts: _Optional[_Iterable[_Union[StartDecision, _Mapping]]] = ..., preemptions: _Optional[_Iterable[_Union[PreemptDecision, _Mapping]]] = ..., waiting: _Optional[_Iterable[_Union[WaitReason, _Mapping]]] = ..., carry: _Optional[_Union[CarrySpec, _Mapping]] = ..., order: _Optional[_Iterable[str]] = ..., policy: _Optional[str] = ...) -> None: ...

class QueueEntry(_message.Message):
    __slots__ = ("job_id", "position", "decision", "code", "message", "allocation", "d_node", "d_gpn", "needs", "blocking", "waiting_allowance")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    D_NODE_FIELD_NUMBER: _ClassVar[int]
    D_GPN_FIELD_NUMBER: _ClassVar[int]
    NEEDS_FIELD_NUMBER: _ClassVar[int]
    BLOCKING_FIELD_NUMBER: _ClassVar[int]
    WAITING_ALLOWANCE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    position: int
    decision: str
    code: str
    message: str
    allocation: AllocationSpec
    d_node: int
    d_gpn: int
    needs: str
    blocking: str
    waiting_allowance: float
    def __init__(self, job_id: _Optional[str] = ..., position: _Optional[int] = ..., decision: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ..., allocation: _Optional[_Union[AllocationSpec, _Mapping]] = ..., d_node: _Optional[int] = ..., d_gpn: _Optional[int] = ..., needs: _Optional[str] = ..., blocking: _Optional[str] = ..., waiting_allowance: _Optional[float] = ...) -> None: ...

class ExplainQueueResponse(_message.Message):
    __slots__ = ("jobs", "carry", "policy")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    CARRY_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[QueueEntry]
    carry: CarrySpec
    policy: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[QueueEntry, _Mapping]]] = ..., carry: _Optional[_Union[CarrySpec, _Mapping]] = ..., policy: _Optional[str] = ...) -> None: ...
