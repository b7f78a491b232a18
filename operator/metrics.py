"""The operator's Prometheus metrics (served on 127.0.0.1 by ``qosmos operator run --metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

QUEUE_LENGTH = Gauge("qosmos_operator_queue_length", "DLJobs waiting in a VirtualCluster's queue", ["vc"])
OLDEST_WAIT = Gauge("qosmos_operator_oldest_wait_seconds", "wait so far of a VirtualCluster's oldest DLJob", ["vc"])
ADMISSIONS = Counter("qosmos_operator_admissions_total", "DLJobs admitted", ["vc"])
FINISHED = Counter("qosmos_operator_finished_total", "DLJobs finished", ["vc", "phase"])
LOST_RUN = Counter(
    "qosmos_operator_lost_run_seconds_total",
    "run seconds of DLJobs lost since their last checkpoint to a failed pod or a lost node (run again)",
    ["vc"],
)
PODS_CREATED = Counter("qosmos_operator_pods_created_total", "gang pods created")
APPLY_TO_RUNNING = Histogram(
    "qosmos_operator_apply_to_running_seconds",
    "from a DLJob's creation to all its pods Running",
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600, float("inf")),
)
PASS_SECONDS = Histogram(
    "qosmos_operator_pass_seconds",
    "one reconcile pass (read, admit every VirtualCluster, write)",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, float("inf")),
)
ACTIVE = Gauge("qosmos_operator_active", "1 while this replica runs the passes; 0 while it stands by (kopf peering)")
ERRORS = Counter("qosmos_operator_errors_total", "operator errors", ["where"])
HISTORY_WRITES = Counter(
    "qosmos_operator_history_writes_total", "writes of the QSSF duration history ConfigMap (one per interval at most)"
)
HISTORY_BYTES = Gauge("qosmos_operator_history_bytes", "size of the QSSF duration history as last written")
ETA_ERROR = Histogram(
    "qosmos_operator_eta_error_seconds",
    "real start minus the last predicted start (ETA) of an admitted DLJob; negative: earlier than predicted",
    buckets=(-3600, -600, -120, -30, -10, -1, 1, 10, 30, 120, 600, 3600, float("inf")),
)
