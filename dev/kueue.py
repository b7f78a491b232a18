"""Kueue (sigs.k8s.io/kueue v0.17.0), built by ``hack/kueue/build.sh``, measured beside qosmos (issue 21 §4).

- ``kueue_baseline``: Kueue's own scalability scenario. Its runner starts etcd and kube-apiserver
  (envtest, ours from hack/k8s/build.sh through KUBEBUILDER_ASSETS, all on loopback) and minimalkueue,
  creates the generator file's cohorts, ClusterQueues and Workloads, plays their runtimes, and writes
  ``summary.yaml`` and ``minimalkueue.stats.yaml``; Kueue's checker (``checker.test``) then judges them
  against a rangespec. Reported: wall time, per-class average time to admission, cohort usage (the
  checker's formula), minimalkueue's CPU seconds and peak RSS.
- ``load_generator`` / ``translate``: the same generator file as qosmos objects. Each ClusterQueue
  becomes a VirtualCluster owning nodes with its nominal quota in GPUs (one GPU per unit of request),
  each Workload a DLJob created at the generator's time, running the generator's runtime on KWOK.
- ``KueueManager``: the full Kueue manager (job integration) on a ``qosmos dev`` cluster, bound to
  loopback, admitting suspended batch/v1 Jobs (``bench operator --against kueue``).

Kueue's code stays in the cache (``~/.cache/qosmos/kueue/v0.17.0``); nothing of it is in this repository.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from qosmos.dev.bench import GROUP, NAMESPACE, VERSION, DLJobWatch, wait_service_account
from qosmos.dev.binaries import BinariesMissing, ControlPlaneError, repo_root
from qosmos.extender.core.cohorts import RECLAIM_WITHIN_COHORT, WITHIN_PARTITION
from qosmos.extender.core.errors import InvalidInput

KUEUE_VERSION = "v0.17.0"
CACHE_ENV = "QOSMOS_KUEUE_CACHE"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # the job controller's label on a Job's pods
CLASS_LABEL = "qosmos.io/scenario-class"  # the generator's workload class, on every DLJob
# Kueue's generator names (test/performance/scheduler/runner/generator): cohort "<class>-<i>",
# ClusterQueue "<class>-<set>-<i>-<cohort>", Workload "<class>-<set>-<si>-<i>".
DLJOB_NAME_MAX = 58  # the DLJob CRD's metadata.name maxLength
MAX_NODE_GPUS = 64  # qosmos.dev.cluster.MAX_GPUS_PER_NODE
QOS_BY_RANK = ("Urgent", "Prior", "Normal")  # GENIE's user priority classes (seed 001 §5.2.1), most urgent first
_UNIT = re.compile(r"^\s*\d+\s*$")


# --------------------------------------------------------------------------- the build


@dataclass(frozen=True, slots=True)
class KueueBuild:
    """The binaries and source tree ``hack/kueue/build.sh`` leaves in the cache."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def src(self) -> Path:
        return self.root / "src"

    @property
    def manager(self) -> Path:
        return self.bin / "kueue"

    @property
    def runner(self) -> Path:
        return self.bin / "performance-scheduler-runner"

    @property
    def minimalkueue(self) -> Path:
        return self.bin / "minimalkueue"

    @property
    def checker(self) -> Path:
        return self.bin / "checker.test"

    @property
    def crds(self) -> Path:
        return self.src / "config" / "components" / "crd" / "bases"

    @property
    def scheduler_dir(self) -> Path:
        return self.src / "test" / "performance" / "scheduler"

    @property
    def baseline_generator(self) -> Path:
        return self.scheduler_dir / "configs" / "baseline" / "generator.yaml"

    @property
    def baseline_range(self) -> Path:
        return self.scheduler_dir / "configs" / "baseline" / "rangespec.yaml"

    def missing(self) -> list[str]:
        out = [
            p.name for p in (self.manager, self.runner, self.minimalkueue, self.checker) if not os.access(p, os.X_OK)
        ]
        if not (self.src / "Makefile").is_file():
            out.append("src/Makefile")
        if not self.crds.is_dir():
            out.append("src/config/components/crd/bases")
        return out


class KueueMissing(BinariesMissing):
    """The Kueue build is not in the cache; the message says how to make it."""

    hint = ""  # the CLI adds nothing: the message names hack/kueue/build.sh


def kueue_build() -> KueueBuild:
    """Where the build is: ``$QOSMOS_KUEUE_CACHE`` (default ``~/.cache/qosmos/kueue``) / v0.17.0."""
    cache = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "qosmos" / "kueue")
    return KueueBuild(cache / KUEUE_VERSION)


def require_kueue() -> KueueBuild:
    """The build, or KueueMissing naming what is missing and the command that builds it."""
    b = kueue_build()
    missing = b.missing()
    if missing:
        root = repo_root()
        script = root / "hack" / "kueue" / "build.sh" if root else Path("hack/kueue/build.sh")
        raise KueueMissing(
            f"Kueue {KUEUE_VERSION} build missing in {b.root}: {', '.join(missing)}; run `bash {script}` "
            "(needs the Go toolchain and the module proxy; about 10 min on 2 cores)"
        )
    return b


# --------------------------------------------------------------------------- the generator file


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _units(value: Any, what: str) -> int:
    """A whole number of units (GPUs here; CPUs in Kueue): 3 or "3", not "500m"."""
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and _UNIT.match(value))):
        raise ValueError(f"{what} must be a whole number of units (one GPU each), got {value!r}")
    return int(value)


class WorkloadTemplate(_Strict):
    class_name: str = Field(alias="className", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=20)
    runtime_ms: int = Field(alias="runtimeMs", ge=0)
    priority: int = 0
    request: int

    @field_validator("request", mode="before")
    @classmethod
    def _request(cls, v: Any) -> int:
        n = _units(v, "request")
        if n < 1:
            raise ValueError("request must be >= 1")
        return n


class WorkloadsSet(_Strict):
    count: int = Field(ge=0)
    creation_interval_ms: int = Field(alias="creationIntervalMs", ge=0)
    workloads: list[WorkloadTemplate] = Field(min_length=1)


class QueuesSet(_Strict):
    class_name: str = Field(alias="className", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=20)
    count: int = Field(ge=1)
    nominal_quota: int = Field(alias="nominalQuota")
    borrowing_limit: int | None = Field(default=None, alias="borrowingLimit")
    # the values qosmos implements (core.cohorts); Kueue's reclaimWithinCohort LowerPriority is refused
    reclaim_within_cohort: Literal[RECLAIM_WITHIN_COHORT] | None = Field(  # type: ignore[valid-type]
        default=None, alias="reclaimWithinCohort"
    )
    within_cluster_queue: Literal[WITHIN_PARTITION] | None = Field(  # type: ignore[valid-type]
        default=None, alias="withinClusterQueue"
    )
    workloads_sets: list[WorkloadsSet] = Field(alias="workloadsSets", min_length=1)

    @field_validator("nominal_quota", "borrowing_limit", mode="before")
    @classmethod
    def _quota(cls, v: Any) -> int | None:
        return None if v is None else _units(v, "quota")


class CohortSet(_Strict):
    class_name: str = Field(alias="className", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=20)
    count: int = Field(ge=1)
    queues_sets: list[QueuesSet] = Field(alias="queuesSets", min_length=1)


class Generator(_Strict):
    """Kueue's generator config (test/performance/scheduler/runner/generator.Config) without its TAS
    parts (topology, resourceFlavor, podCount, tasConstraint...): those are refused, not ignored."""

    cohorts: list[CohortSet] = Field(min_length=1)


def load_generator(path: Path) -> Generator:
    """The generator file; InvalidInput naming the file and the field (cohorts.0.queuesSets.0...)."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise InvalidInput("kueue_generator", str(path), f"cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise InvalidInput("kueue_generator", str(path), f"not YAML{where}: {exc}") from None
    if not isinstance(raw, dict):
        raise InvalidInput("kueue_generator", str(path), "must be a mapping with a 'cohorts' list")
    try:
        return Generator.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise InvalidInput("kueue_generator", str(path), f"{loc}: {first['msg']}") from None


def write_generator(gen: Generator, path: Path) -> Path:
    """The generator as Kueue's runner reads it (e.g. a scaled copy)."""
    path.write_text(yaml.safe_dump(gen.model_dump(by_alias=True, exclude_none=True), sort_keys=False))
    return path


def scaled(gen: Generator, scale: float) -> Generator:
    """Every workload set's count × ``scale`` (at least one), the rest unchanged."""
    if not 0 < scale <= 1:
        raise InvalidInput("scale", scale, "must be in (0, 1]")
    out = gen.model_copy(deep=True)
    for c in out.cohorts:
        for q in c.queues_sets:
            for ws in q.workloads_sets:
                if ws.count:
                    ws.count = max(1, round(ws.count * scale))
    return out


# --------------------------------------------------------------------------- the translation


@dataclass(frozen=True, slots=True)
class ScenarioQueue:
    """One Kueue ClusterQueue as a VirtualCluster owning ``nodes`` nodes of ``gpus_per_node`` GPUs."""

    name: str
    cohort: str
    class_name: str
    nominal_gpus: int
    borrowing_limit: int | None
    nodes: int
    gpus_per_node: int
    reclaim_within_cohort: str = "Never"  # Kueue's defaults for an unset field
    within_cluster_queue: str = "Never"


@dataclass(frozen=True, slots=True)
class ScenarioJob:
    """One Kueue Workload as a DLJob: created ``submit_s`` after the start, runs ``run_s`` once started."""

    name: str
    vc: str
    class_name: str
    gpus: int
    run_s: float
    priority: int
    qos_class: str
    submit_s: float


@dataclass(slots=True)
class Scenario:
    queues: list[ScenarioQueue]
    jobs: list[ScenarioJob]
    gpus_per_node: int
    notes: list[str] = field(default_factory=list)

    @property
    def total_gpus(self) -> int:
        return sum(q.nominal_gpus for q in self.queues)

    def pools(self) -> tuple[str, ...]:
        """The pool label of node i, in order: each queue's nodes in a row (``DevOptions.pools``)."""
        return tuple(q.name for q in self.queues for _ in range(q.nodes))


def node_gpus(quotas: list[int]) -> int:
    """GPUs per node: the largest divisor of every quota that a node may hold (<= 64), so each queue's
    quota is a whole number of identical nodes."""
    g = math.gcd(*quotas)
    return max(d for d in range(1, min(g, MAX_NODE_GPUS) + 1) if g % d == 0)


def translate(gen: Generator, scale: float = 1.0) -> Scenario:
    """Cohorts, queues, quotas, priorities, classes, request sizes, runtimes and creation intervals of
    Kueue's generator as VirtualClusters and DLJobs. Creation times follow the generator: within a
    workload set, the k-th workload (k from 0, templates in turn) is created at (k + 1) × interval;
    all sets, queues and cohorts run at once."""
    gen = scaled(gen, scale) if scale != 1.0 else gen
    priorities = sorted(
        {w.priority for c in gen.cohorts for q in c.queues_sets for ws in q.workloads_sets for w in ws.workloads},
        reverse=True,
    )
    qos = {p: QOS_BY_RANK[min(i, len(QOS_BY_RANK) - 1)] for i, p in enumerate(priorities)}
    quotas = [q.nominal_quota for c in gen.cohorts for q in c.queues_sets]
    if min(quotas) < 1:
        raise InvalidInput("nominalQuota", min(quotas), "each queue needs >= 1 unit (its VirtualCluster's GPUs)")
    g = node_gpus(quotas)
    queues: list[ScenarioQueue] = []
    jobs: list[ScenarioJob] = []
    for c in gen.cohorts:
        cohort_gpus = sum(q.nominal_quota * q.count for q in c.queues_sets)
        for ci in range(c.count):
            cohort = f"{c.class_name}-{ci}"
            for qsi, qs in enumerate(c.queues_sets):
                # Kueue admits a workload up to nominal + borrowingLimit, within what the cohort has
                most = min(
                    cohort_gpus, qs.nominal_quota + (cohort_gpus if qs.borrowing_limit is None else qs.borrowing_limit)
                )
                for qi in range(qs.count):
                    vc = f"{qs.class_name}-{qsi}-{qi}-{cohort}"
                    queues.append(
                        ScenarioQueue(
                            vc,
                            cohort,
                            qs.class_name,
                            qs.nominal_quota,
                            qs.borrowing_limit,
                            qs.nominal_quota // g,
                            g,
                            qs.reclaim_within_cohort or "Never",
                            qs.within_cluster_queue or "Never",
                        )
                    )
                    for wsi, ws in enumerate(qs.workloads_sets):
                        for si in range(ws.count):
                            for wi, w in enumerate(ws.workloads):
                                if w.request > most:
                                    raise InvalidInput(
                                        "request",
                                        w.request,
                                        f"class {w.class_name} asks for more than queue {vc} may hold "
                                        f"(nominal quota {qs.nominal_quota} + borrowing limit within its cohort's "
                                        f"{cohort_gpus}: {most}): it could never run",
                                    )
                                k = si * len(ws.workloads) + wi
                                name = f"{vc}-{w.class_name}-{wsi}-{si}-{wi}"
                                if len(name) > DLJOB_NAME_MAX:
                                    raise InvalidInput(
                                        "className",
                                        name,
                                        f"DLJob names are <= {DLJOB_NAME_MAX} characters; use shorter class names",
                                    )
                                jobs.append(
                                    ScenarioJob(
                                        name,
                                        vc,
                                        w.class_name,
                                        w.request,
                                        w.runtime_ms / 1000.0,
                                        w.priority,
                                        qos[w.priority],
                                        (k + 1) * ws.creation_interval_ms / 1000.0,
                                    )
                                )
    jobs.sort(key=lambda j: (j.submit_s, j.name))
    notes = [
        "one VirtualCluster per Kueue ClusterQueue, owning nodes with its nominal quota in GPUs (one GPU per unit "
        "of request); a Kueue cohort is a VirtualCluster cohort (spec.cohort: its members share their nodes), "
        "nominalQuota -> quota.gpus, borrowingLimit -> quota.borrowingLimit, reclaimWithinCohort and "
        "withinClusterQueue -> spec.preemption",
        "a Workload's priority -> DLJob spec.priority (the 'priority' policy orders by it, then creation, as a "
        "ClusterQueue does) and its qosClass by rank (" + ", ".join(f"{p}: {qos[p]}" for p in priorities) + ")",
        "a Kueue workload's runtime starts at admission; a DLJob's pods run it on KWOK after the operator "
        "admits it and kube-scheduler binds them, so qosmos holds each unit of quota longer",
    ]
    return Scenario(queues, jobs, g, notes)


# --------------------------------------------------------------------------- Kueue's own scenario


def _summary_stats(summary: dict[str, Any], stats: dict[str, Any]) -> dict[str, Any]:
    """What Kueue's checker reads (test/performance/scheduler/checker/checker_test.go)."""
    usage: dict[str, float | None] = {}
    for cls, s in (summary.get("clusterQueueClasses") or {}).items():
        t0, t1 = _rfc3339(s.get("firstEventTime")), _rfc3339(s.get("lastEventTime"))
        elapsed_ms = (t1 - t0) * 1000 if t0 is not None and t1 is not None else 0.0
        quota = float(s.get("nominalQuota") or 0)  # milli-units
        # usage% = used (milli-units × ms) × 100 / (nominal quota (milli-units) × elapsed ms)
        usage[cls] = (
            round(float(s.get("cpuUsed") or 0) * 100 / (quota * elapsed_ms), 2) if quota and elapsed_ms else None
        )
    classes = {
        cls: {
            "count": int(s.get("count") or 0),
            "avg_time_to_admission_s": round(int(s.get("averageTimeToAdmissionMs") or 0) / 1000, 3),
            "avg_time_to_finish_s": round(int(s.get("averageTimeToFinishMs") or 0) / 1000, 3),
            "evictions": int(s.get("totalEvictions") or 0),
        }
        for cls, s in sorted((summary.get("workloadClasses") or {}).items())
    }
    return {
        "wall_s": round(int(stats.get("wallMs") or 0) / 1000, 1),
        "classes": classes,
        "cohort_usage_pct": usage,
        "workloads": sum(c["count"] for c in classes.values()),
        "dropped_workload_events": int(summary.get("droppedWorkloadEvents") or 0),
        "minimalkueue": {
            "cpu_s": round((int(stats.get("userMs") or 0) + int(stats.get("sysMs") or 0)) / 1000, 1),
            "peak_rss_mb": round(int(stats.get("maxrss") or 0) / 1024, 1),  # getrusage ru_maxrss: KiB on Linux
        },
    }


def _rfc3339(text: Any) -> float | None:
    import datetime as dt

    if not text:
        return None
    s = str(text).replace("Z", "+00:00")
    m = re.match(r"^(.*\.\d{6})\d*(.*)$", s)  # Python takes microseconds, Go writes nanoseconds
    if m:
        s = m.group(1) + m.group(2)
    return dt.datetime.fromisoformat(s).timestamp()


def kueue_baseline(
    generator: Path | None = None,
    out: Path | None = None,
    *,
    range_file: Path | None = None,
    timeout_s: float = 900.0,
    k8s_bin: Path | None = None,
) -> dict[str, Any]:
    """Kueue's runner with minimalkueue in its envtest mode (our etcd and kube-apiserver), as
    ``make run-performance-scheduler`` starts it (logs to files; metrics scraping off: it would bind
    minimalkueue's metrics on every interface), from the module's own directory; then Kueue's checker
    against ``range_file`` (default: the baseline rangespec when the generator is the baseline)."""
    import tempfile

    from qosmos.dev.binaries import require_binaries

    b = require_kueue()
    assets = require_binaries(k8s_bin, ("etcd", "kube-apiserver", "kubectl"))
    gen = Path(generator) if generator is not None else b.baseline_generator
    load_generator(gen)  # refuse a bad file before starting anything
    if range_file is None and gen.resolve() == b.baseline_generator.resolve():
        range_file = b.baseline_range
    work = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="qosmos-kueue-baseline-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(work),  # nothing of the user's (~/.kube/config) is read
        "KUBEBUILDER_ASSETS": str(assets),
        "TMPDIR": str(work),
    }
    cmd = [
        str(b.runner),
        "--o",
        str(work),
        f"--crds={b.crds}",
        f"--generatorConfig={gen}",
        f"--minimalKueue={b.minimalkueue}",
        "--withLogs=true",
        "--logToFile=true",
        f"--timeout={int(timeout_s)}s",
    ]
    t0 = time.monotonic()
    with open(work / "runner.log", "wb") as log:
        try:
            proc = subprocess.run(
                cmd, cwd=b.src, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s + 120
            )
        except subprocess.TimeoutExpired:
            raise ControlPlaneError(
                f"Kueue's runner did not finish in {timeout_s + 120:.0f} s (log: {work / 'runner.log'})"
            ) from None
    runner_wall = time.monotonic() - t0
    if proc.returncode != 0:
        text = (work / "runner.log").read_text(errors="replace")
        if '"Recorder run"' in text and "context deadline exceeded" in text:  # runner/main.go: recorder timeout
            raise ControlPlaneError(
                f"Kueue's runner stopped recording after --timeout {timeout_s:.0f} s before every workload finished "
                f"(it writes no summary then; log: {work / 'runner.log'}); give it a longer --timeout"
            )
        tail = "\n".join(text.splitlines()[-15:])
        raise ControlPlaneError(f"Kueue's runner exited with {proc.returncode} (log: {work / 'runner.log'}):\n{tail}")
    summary = yaml.safe_load((work / "summary.yaml").read_text())
    stats = yaml.safe_load((work / "minimalkueue.stats.yaml").read_text())
    res = _summary_stats(summary, stats)
    res |= {"generator": str(gen), "runner_wall_s": round(runner_wall, 1), "out": str(work), "command": cmd}
    if range_file is not None:
        chk = subprocess.run(
            [
                str(b.checker),
                "-test.v",
                f"--summary={work / 'summary.yaml'}",
                f"--cmdStats={work / 'minimalkueue.stats.yaml'}",
                f"--range={range_file}",
            ],
            cwd=b.scheduler_dir / "checker",
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        (work / "checker.log").write_text(chk.stdout + chk.stderr)
        res["checker"] = {
            "range": str(range_file),
            "passed": chk.returncode == 0,
            "failures": [
                ln.strip() for ln in chk.stdout.splitlines() if ln.strip().startswith(("checker_test.go", "--- FAIL"))
            ],
        }
    res["machine_cores"] = os.cpu_count()
    return res


# --------------------------------------------------------------------------- the full manager


Phase = Literal["Admitted", "Running", "Succeeded", "Failed"]


def job_phases(obj: dict[str, Any]) -> list[str]:
    """A batch/v1 Job's phases in the bench's words: Admitted once Kueue unsuspended it, Running once a
    pod is Ready, Succeeded/Failed from its Complete/Failed condition."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    out: list[str] = []
    if spec.get("suspend") is False:
        out.append("Admitted")
    if int(status.get("ready") or 0) >= 1:
        out.append("Running")
    for c in status.get("conditions") or []:
        if c.get("status") == "True" and c.get("type") in ("Complete", "Failed"):
            out.append("Succeeded" if c["type"] == "Complete" else "Failed")
    return out


def kueue_configuration(health_port: int, metrics_port: int, webhook_port: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's shipped controller_manager_config.yaml with every listener on 127.0.0.1, only the
    batch/job integration, no leader election, no internal cert management (the webhook server
    serves our self-signed loopback certificate; no webhook configuration is registered, so Jobs
    are created suspended with the queue-name label), and no visibility server (it would listen on
    every interface)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 5,
                "LocalQueue.kueue.x-k8s.io": 1,
                "Cohort.kueue.x-k8s.io": 1,
                "ClusterQueue.kueue.x-k8s.io": 1,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": ["batch/job"]},
        "featureGates": {"VisibilityOnDemand": False},
    }


# cmd/kueue reads its metrics certificate from this fixed path when internal cert management is off
# (v0.17.0 main.go: metricsCertPath); no flag or field moves it.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")


def _self_signed(directory: Path, name: str) -> None:
    from qosmos.dev.pki import PKI, write_private

    pki = PKI(f"{name}-ca", days=30)
    cert, key = pki.issue(name, dns=["localhost"], ips=["127.0.0.1"])
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(cert + pki.ca_pem)
    write_private(directory / "tls.key", key)


def ensure_metrics_cert() -> tuple[str, Path | None]:
    """A self-signed loopback certificate at METRICS_CERT_DIR unless one is there: (what was done, the
    topmost folder this created, for :func:`remove_metrics_cert` to take away after the run, or None)."""
    if (METRICS_CERT_DIR / "tls.crt").is_file() and (METRICS_CERT_DIR / "tls.key").is_file():
        return f"Kueue's metrics certificate in {METRICS_CERT_DIR} was already there (left as it was)", None
    created = next((p for p in reversed([METRICS_CERT_DIR, *METRICS_CERT_DIR.parents]) if not p.exists()), None)
    try:
        _self_signed(METRICS_CERT_DIR, "kueue-metrics")
    except OSError as exc:
        raise ControlPlaneError(
            f"Kueue {KUEUE_VERSION} reads its metrics certificate from {METRICS_CERT_DIR} (fixed in cmd/kueue) and "
            f"it could not be written there ({exc.strerror}); create tls.crt and tls.key there once"
        ) from None
    return (
        f"wrote a self-signed loopback certificate to {METRICS_CERT_DIR} for the run (cmd/kueue reads it from "
        "that fixed path), removed afterwards",
        created,
    )


def remove_metrics_cert(created: Path | None) -> None:
    """Take away what :func:`ensure_metrics_cert` created: the host's /etc as it was before the run."""
    if created is not None:
        shutil.rmtree(created, ignore_errors=True)


def kueue_objects(namespace: str, cpu_milli: int, memory_mib: int, gpus: int) -> list[dict[str, Any]]:
    """One ResourceFlavor, one ClusterQueue whose nominal quota is every node's CPU, memory and GPUs, and
    a LocalQueue ``bench`` in ``namespace`` (v1beta2, the version v0.17.0 stores)."""
    api = "kueue.x-k8s.io/v1beta2"
    return [
        {"apiVersion": api, "kind": "ResourceFlavor", "metadata": {"name": "default"}, "spec": {}},
        {
            "apiVersion": api,
            "kind": "ClusterQueue",
            "metadata": {"name": "bench"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "default",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": f"{cpu_milli}m"},
                                    {"name": "memory", "nominalQuota": f"{memory_mib}Mi"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": gpus},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": api,
            "kind": "LocalQueue",
            "metadata": {"name": "bench", "namespace": namespace},
            "spec": {"clusterQueue": "bench"},
        },
    ]


def job_manifest(
    name: str, *, namespace: str, gpus: int, cpu_milli: int, memory_mib: int, run_s: float, image: str, annotation: str
) -> dict[str, Any]:
    """A one-pod batch/v1 Job, suspended, labelled for the LocalQueue: what Kueue's webhook would have
    made of it; its pod runs ``run_s`` on KWOK (``annotation``)."""
    requests: dict[str, str] = {}
    if cpu_milli:
        requests["cpu"] = f"{cpu_milli}m"
    if memory_mib:
        requests["memory"] = f"{memory_mib}Mi"
    resources: dict[str, Any] = {"requests": requests}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_NAME_LABEL: "bench"}},
        "spec": {
            "suspend": True,
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {annotation: f"{run_s:.3f}s"}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "main", "image": image, "resources": resources}],
                },
            },
        },
    }


# --------------------------------------------------------------------------- live: the scenario on qosmos dev


def scenario_dljob(j: ScenarioJob) -> dict[str, Any]:
    """The Workload as a DLJob: its class as a label, its priority, pods KWOK runs for its runtime."""
    from qosmos.dev.bench import dljob_manifest

    body = dljob_manifest(j.name, gpus=j.gpus, run_s=j.run_s, vc=j.vc, namespace=NAMESPACE)
    body["metadata"]["labels"] = {CLASS_LABEL: j.class_name}
    body["spec"]["qosClass"] = j.qos_class
    body["spec"]["priority"] = j.priority
    body["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    return body


def vc_manifest(q: ScenarioQueue, policy: str, placement: str, backfill: str) -> dict[str, Any]:
    """The ClusterQueue as a VirtualCluster of its cohort: its own nodes, its nominal quota and borrowing
    limit, its preemption rules."""
    from qosmos.dev.cluster import POOL_LABEL

    quota: dict[str, int] = {"gpus": q.nominal_gpus}
    if q.borrowing_limit is not None:
        quota["borrowingLimit"] = q.borrowing_limit
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "VirtualCluster",
        "metadata": {"name": q.name, "labels": {CLASS_LABEL: q.class_name}},
        "spec": {
            "nodeSelector": {POOL_LABEL: q.name},
            "policy": policy,
            "placement": placement,
            "backfill": backfill,
            "cohort": q.cohort,
            "quota": quota,
            "preemption": {
                "withinVirtualCluster": q.within_cluster_queue,
                "reclaimWithinCohort": q.reclaim_within_cohort,
            },
        },
    }


def _wait_vcs_ready(api_client: Any, queues: list[ScenarioQueue], timeout: float) -> None:
    """Every VirtualCluster Ready with its nominal GPUs (the operator labelled its nodes)."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api_client)
    want = {q.name: q.nominal_gpus for q in queues}
    deadline = time.monotonic() + timeout
    pending: list[str] = list(want)
    while time.monotonic() < deadline:
        listed = cast("dict[str, Any]", custom.list_cluster_custom_object(GROUP, VERSION, "virtualclusters"))
        items = listed.get("items") or []
        ready = set()
        for vc in items:
            st = vc.get("status") or {}
            ok = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
            if ok and int((st.get("gpus") or {}).get("total") or 0) == want.get(vc["metadata"]["name"], -1):
                ready.add(vc["metadata"]["name"])
        pending = [n for n in want if n not in ready]
        if not pending:
            return
        time.sleep(1.0)
    raise RuntimeError(f"{len(pending)} VirtualClusters not Ready with their GPUs in {timeout:.0f} s: {pending[:5]}")


def scenario_stats(sc: Scenario, seen: dict[str, Any], t0: float, t_end: float) -> dict[str, Any]:
    """Per-class average time to admission (from creation, as Kueue's recorder counts from the first
    event of a workload), average time to finish, and cohort usage: GPU-seconds held by admitted jobs
    over nominal GPUs × the scenario's span (the checker's formula, GPUs for Kueue's CPUs)."""
    by_class: dict[str, list[tuple[float, float]]] = {}
    used: dict[str, float] = {}
    quota: dict[str, int] = {}
    for q in sc.queues:
        quota[q.class_name] = quota.get(q.class_name, 0) + q.nominal_gpus
    vc_class = {q.name: q.class_name for q in sc.queues}
    for j in sc.jobs:
        s = seen.get(j.name)
        if s is None or not math.isfinite(s.created):
            continue
        starts = [s.phases[p] for p in ("Admitted", "Running", "Succeeded") if p in s.phases]
        end = s.phases.get("Succeeded", s.phases.get("Failed", math.nan))
        if not starts:
            continue
        admitted = min(starts)
        by_class.setdefault(j.class_name, []).append((admitted - s.created, end - s.created))
        held_until = end if math.isfinite(end) else t_end
        used[vc_class[j.vc]] = used.get(vc_class[j.vc], 0.0) + j.gpus * max(0.0, held_until - admitted)
    span = t_end - t0
    return {
        "classes": {
            c: {
                "count": len(v),
                "avg_time_to_admission_s": round(sum(a for a, _ in v) / len(v), 3),
                "avg_time_to_finish_s": round(
                    sum(f for _, f in v if math.isfinite(f)) / max(1, sum(math.isfinite(f) for _, f in v)), 3
                ),
            }
            for c, v in sorted(by_class.items())
        },
        "cohort_usage_pct": {
            c: round(used.get(c, 0.0) * 100 / (quota[c] * span), 2) if span > 0 else None for c in sorted(quota)
        },
    }


# the steps of a job's hold on its GPUs after its admission, as its DLJob and its pods record them
POD_STEPS = (
    "admitted_to_pods_created",
    "created_to_bound",
    "bound_to_running",
    "running_to_finished",
    "finished_to_succeeded",
)


def pod_steps(sc: Scenario, seen: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per class, the mean seconds of each step in ``POD_STEPS`` over the jobs whose last gang recorded
    it: admission (the DLJob watch) -> the gang's pods created -> bound (PodScheduled) -> running
    (startTime) -> finished (containers' finishedAt) -> the DLJob Succeeded (the watch). A gang's step ends
    with its slowest pod. The pods' times have the apiserver's one-second resolution, so each step is
    within a second of the truth job by job, less on the mean; a Kueue workload has none of these steps
    (its runtime starts at admission)."""
    from qosmos.operator.crds import LABEL_JOB
    from qosmos.operator.translate import LABEL_ATTEMPT, parse_time

    gangs: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for p in pods:
        labels = (p.get("metadata") or {}).get("labels") or {}
        if LABEL_JOB in labels:
            attempt = int(labels.get(LABEL_ATTEMPT) or 0)
            gangs.setdefault(labels[LABEL_JOB], {}).setdefault(attempt, []).append(p)

    def latest(times: list[float | None]) -> float | None:
        return None if not times or any(t is None for t in times) else max(t for t in times if t is not None)

    def bound(p: dict[str, Any]) -> float | None:
        conds = (p.get("status") or {}).get("conditions") or []
        ok = [c for c in conds if c.get("type") == "PodScheduled" and c.get("status") == "True"]
        return parse_time(ok[0].get("lastTransitionTime")) if ok else None

    def finished(p: dict[str, Any]) -> float | None:
        states = [c.get("state") or {} for c in (p.get("status") or {}).get("containerStatuses") or []]
        return latest([parse_time((st.get("terminated") or {}).get("finishedAt")) for st in states])

    steps: dict[str, dict[str, list[float]]] = {}
    for j in sc.jobs:
        s, gang = seen.get(j.name), gangs.get(j.name)
        starts = [s.phases[p] for p in ("Admitted", "Running", "Succeeded") if p in s.phases] if s else []
        if s is None or not gang or not starts:
            continue
        last = gang[max(gang)]
        created = latest([parse_time(p["metadata"].get("creationTimestamp")) for p in last])
        running = latest([parse_time((p.get("status") or {}).get("startTime")) for p in last])
        marks = [
            min(starts),  # as scenario_stats counts the admission
            created,
            latest([bound(p) for p in last]),
            running,
            latest([finished(p) for p in last]),
            s.phases.get("Succeeded"),
        ]
        mine = steps.setdefault(j.class_name, {k: [] for k in POD_STEPS})
        for k, a, b in zip(POD_STEPS, marks, marks[1:], strict=False):
            if a is not None and b is not None and math.isfinite(a) and math.isfinite(b):
                mine[k].append(b - a)
    return {c: {k: round(sum(v) / len(v), 2) for k, v in by_step.items() if v} for c, by_step in sorted(steps.items())}


def create_on_clock(
    custom: Any,
    watch: DLJobWatch,
    jobs: list[ScenarioJob],
    created: Callable[[ScenarioJob, float], None] | None = None,
    clients: int = 16,
) -> dict[str, float] | None:
    """Each job's DLJob created ``submit_s`` after now, by ``clients`` side by side, told to ``watch`` (and
    to ``created``, with the time its create returned); returns how late the creates were (p50, max).
    A create the API refused raises: the run would never finish."""
    from concurrent.futures import ThreadPoolExecutor

    lag: list[float] = []

    def create(j: ScenarioJob, due: float) -> None:
        custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "dljobs", scenario_dljob(j))
        now = time.time()
        watch.created(j.name, now)
        lag.append(now - due)
        if created is not None:
            created(j, now)

    g0 = time.time()
    with ThreadPoolExecutor(clients) as pool:
        futures = []
        for j in jobs:
            due = g0 + j.submit_s
            delay = due - time.time()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(create, j, due))
    for f in futures:
        f.result()
    return {"p50": round(sorted(lag)[len(lag) // 2], 3), "max": round(max(lag), 3)} if lag else None


def bench_scenario(
    generator: Path,
    *,
    scale: float = 1.0,
    policy: str = "priority",
    placement: str = "consolidate",
    backfill: str = "easy",
    timeout: float = 3600.0,
    with_kueue: bool = False,
    out: Path | None = None,
    progress: Any = None,
    tick: Any = None,
) -> dict[str, Any]:
    """Kueue's generator file (scaled) on a ``qosmos dev`` cluster: one VirtualCluster per ClusterQueue
    over its own KWOK nodes, every Workload a DLJob created at its time; ``with_kueue``: Kueue's runner
    with minimalkueue on the same scaled file first, on the same machine, reported beside it."""
    import tempfile

    from kubernetes import client
    from qosmos.dev.bench import (
        ControlPlaneUse,
        DLJobWatch,
        ProcStats,
        _wait_done,
        labelled_pods,
    )
    from qosmos.dev.cluster import DevOptions, _Quiet, down, up
    from qosmos.extender.core.admission import Partition
    from qosmos.operator.crds import LABEL_JOB

    # the core's own check of a VirtualCluster's settings: a bad name fails before anything starts
    Partition("scenario", policy=policy, placement=placement, backfill=backfill)
    gen = load_generator(generator)
    sc = translate(gen, scale)
    work = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="qosmos-bench-scenario-"))
    work.mkdir(parents=True, exist_ok=True)
    kueue_res: dict[str, Any] | None = None
    if with_kueue:
        scaled_file = write_generator(scaled(gen, scale) if scale != 1.0 else gen, work / "generator.yaml")
        kueue_res = kueue_baseline(scaled_file, work / "kueue", timeout_s=timeout)
    nodes = len(sc.pools())
    opts = DevOptions(
        dir=work / "cluster",
        nodes=nodes,
        gpus_per_node=sc.gpus_per_node,
        pools=sc.pools(),
        detached=False,
        start_timeout=300.0,
    )
    try:
        state, _ = up(opts, progress or _Quiet())
        try:
            if not state.operator.get("started"):
                raise RuntimeError(f"the operator did not start: {state.operator.get('reason')}")
            from qosmos.dev.controlplane import new_api_client

            api_client = new_api_client(state.kubeconfig)
            core = client.CoreV1Api(api_client)
            custom = client.CustomObjectsApi(api_client)
            op, me = ProcStats(int(state.operator["pid"])), ProcStats(os.getpid())
            cpu0, me0 = op.cpu_s(), me.cpu_s()
            use = ControlPlaneUse(api_client, state.pids())
            # the client's validate_call turns the dict into the V1Namespace it is typed to take
            core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})  # type: ignore[arg-type]
            with DLJobWatch(api_client, NAMESPACE) as watch:
                t0 = time.time()  # Kueue's wall time runs from minimalkueue's start: queues are made in it
                for q in sc.queues:
                    custom.create_cluster_custom_object(
                        GROUP, VERSION, "virtualclusters", vc_manifest(q, policy, placement, backfill)
                    )
                _wait_vcs_ready(api_client, sc.queues, 300.0)
                vcs_ready = time.time() - t0
                # the generator's clock starts once the queues exist
                submit_lag = create_on_clock(custom, watch, sc.jobs)
                ok, bad = _wait_done(watch, len(sc.jobs), timeout, tick)
                t_end = time.time()
                seen = watch.snapshot()
            pods = list(labelled_pods(api_client, NAMESPACE, LABEL_JOB))  # once, after the run
            op_cpu, op_peak, bench_cpu = op.cpu_s() - cpu0, op.peak_rss_mb(), me.cpu_s() - me0
            control_plane = use.report(len(sc.jobs))
        finally:
            down(opts.dir, grace=5)
    finally:
        if out is None:
            shutil.rmtree(work, ignore_errors=True)
    stats = scenario_stats(sc, seen, t0, t_end)
    qosmos = {
        "wall_s": round(t_end - t0, 1),
        "vcs_ready_s": round(vcs_ready, 1),
        **stats,
        "pod_steps_s": pod_steps(sc, seen, pods),
        "workloads": len(sc.jobs),
        "succeeded": ok,
        "failed": bad,
        "submit_lag_s": submit_lag,
        "operator": {"cpu_s": round(op_cpu, 1), "peak_rss_mb": round(op_peak, 1)},
        # this process (16 clients creating the DLJobs, the watch): on the same 2 cores as the cluster
        "bench_client_cpu_s": round(bench_cpu, 1),
        "control_plane": control_plane,
    }
    res: dict[str, Any] = {
        "generator": str(generator),
        "scale": scale,
        "queues": len(sc.queues),
        "cohorts": len({q.cohort for q in sc.queues}),
        "nodes": nodes,
        "gpus_per_node": sc.gpus_per_node,
        "gpus": sc.total_gpus,
        "policy": policy,
        "placement": placement,
        "backfill": backfill,
        "qosmos": qosmos,
        "notes": sc.notes,
        "machine_cores": os.cpu_count(),
    }
    if kueue_res is not None:
        res["kueue"] = kueue_res
        res["targets_met"] = {
            "avg_time_to_admission_le_kueue": {
                c: qosmos["classes"].get(c, {}).get("avg_time_to_admission_s", math.inf) <= v["avg_time_to_admission_s"]
                for c, v in kueue_res["classes"].items()
            },
            "wall_le_kueue": qosmos["wall_s"] <= kueue_res["wall_s"],
        }
    return res


# --------------------------------------------------------------------------- live: bench operator --against kueue


class JobWatch(DLJobWatch):
    """DLJobWatch's machinery on batch/v1 Jobs (listed as dicts), phases from ``job_phases``."""

    def phases_of(self, obj: dict[str, Any]) -> list[str]:
        return job_phases(obj)

    def list_call(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return self.custom.list_namespaced_custom_object, ("batch", "v1", self.namespace, "jobs")


COMMON_KEYS = (
    "admissions_per_s",
    "apply_to_running_p50_s",
    "apply_to_running_p99_s",
    "cpu_s",
    "peak_rss_mb",
    "succeeded",
)


def bench_kueue_jobs(
    jobs: int,
    nodes: int,
    *,
    run_s: float = 30.0,
    spread_s: float = 0.5,
    timeout: float = 1200.0,
    seed: int = 0,
    workdir: Path | None = None,
    progress: Any = None,
    tick: Any = None,
) -> dict[str, Any]:
    """The jobs ``bench_operator`` applies as DLJobs (same openb rows, same run times), as suspended
    batch/v1 Jobs admitted by the full Kueue manager on a fresh ``qosmos dev`` cluster (operator off),
    run by the job controller, kube-scheduler and KWOK."""
    from concurrent.futures import ThreadPoolExecutor

    from kubernetes import client
    from qosmos.dev.bench import (
        PAUSE_IMAGE,
        ProcStats,
        _wait_done,
        admission_stats,
        bench_workload,
        gang_starts,
        start_latency,
    )
    from qosmos.dev.binaries import require_binaries
    from qosmos.dev.cluster import _Quiet, down, up
    from qosmos.dev.controlplane import new_api_client
    from qosmos.dev.kwok import RUN_DURATION_ANNOTATION
    from qosmos.dev.process import Component, free_port

    b = require_kueue()
    rows, runs, tmp, opts = bench_workload(jobs, nodes, run_s, spread_s, seed, "kueue", workdir, operator=False)
    node_rows = opts.node_rows()
    said, created_certs = ensure_metrics_cert()
    notes = [said]
    kdir = tmp / "kueue"
    kdir.mkdir(parents=True, exist_ok=True)
    _self_signed(kdir / "webhook-certs", "kueue-webhook")
    health, metrics, hook = free_port(), free_port(), free_port()
    (kdir / "config.yaml").write_text(
        yaml.safe_dump(kueue_configuration(health, metrics, hook, kdir / "webhook-certs"))
    )
    mgr: Component | None = None
    try:
        state, _ = up(opts, progress or _Quiet())
        try:
            api_client = new_api_client(state.kubeconfig)
            core = client.CoreV1Api(api_client)
            kc = [str(require_binaries(opts.bin_dir, ("kubectl",)) / "kubectl"), "--kubeconfig", state.kubeconfig]
            for cmd in (
                ["apply", "--server-side", "--force-conflicts", "-f", str(b.crds)],
                ["wait", "--for=condition=Established", "--timeout=120s", "-f", str(b.crds)],
            ):
                r = subprocess.run([*kc, *cmd], capture_output=True, text=True, timeout=180)
                if r.returncode != 0:
                    raise ControlPlaneError(f"kubectl {cmd[0]} of Kueue's CRDs failed: {r.stderr.strip()[-500:]}")
            for ns in ("kueue-system", NAMESPACE):
                # the client's validate_call turns the dict into the V1Namespace it is typed to take
                core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})  # type: ignore[arg-type]
            mgr = Component(
                "kueue",
                [str(b.manager), f"--config={kdir / 'config.yaml'}", f"--kubeconfig={state.kubeconfig}"],
                kdir / "kueue.log",
                f"http://127.0.0.1:{health}/readyz",
                env={"PATH": "/usr/bin:/bin", "HOME": str(kdir)},
            )
            mgr.wait_ready(None, 180.0)
            objs = kueue_objects(
                NAMESPACE,
                sum(r["cpu_milli"] for r in node_rows),
                sum(r["memory_mib"] for r in node_rows),
                sum(r["gpu"] for r in node_rows),
            )
            (kdir / "objects.yaml").write_text(yaml.safe_dump_all(objs))
            r = subprocess.run(
                [*kc, "apply", "--server-side", "-f", str(kdir / "objects.yaml")],
                capture_output=True,
                text=True,
                timeout=120,
            )
            if r.returncode != 0:
                raise ControlPlaneError(f"creating Kueue's queues failed: {r.stderr.strip()[-500:]}")
            _wait_cq_active(api_client, 120.0)
            wait_service_account(core, NAMESPACE, timeout=300.0)
            proc = ProcStats(mgr.pid)
            comps = {c.name: ProcStats(c.pid) for c in state.components} | {"kueue": proc}
            cpu0 = proc.cpu_s()
            comp0 = {k: p.cpu_s() for k, p in comps.items()}
            batch = client.BatchV1Api(api_client)
            with JobWatch(api_client, NAMESPACE) as watch:
                t0 = time.time()
                bodies = [
                    job_manifest(
                        r.name,
                        namespace=NAMESPACE,
                        gpus=r.gpus,
                        cpu_milli=r.cpu_milli,
                        memory_mib=r.memory_mib,
                        run_s=x,
                        image=PAUSE_IMAGE,
                        annotation=RUN_DURATION_ANNOTATION,
                    )
                    for r, x in zip(rows, runs, strict=True)
                ]

                def create(body: dict[str, Any]) -> None:
                    batch.create_namespaced_job(NAMESPACE, body)  # type: ignore[arg-type]  # validate_call: a V1Job
                    watch.created(body["metadata"]["name"], time.time())

                with ThreadPoolExecutor(16) as pool:
                    list(pool.map(create, bodies))
                applied = time.time() - t0
                ok, bad = _wait_done(watch, jobs, timeout, tick)
                cpu = proc.cpu_s() - cpu0
                peak = proc.peak_rss_mb()
                by_comp = {k: round(p.cpu_s() - comp0[k], 1) for k, p in comps.items()}
                seen = watch.snapshot()
                starts = gang_starts(api_client, NAMESPACE, JOB_NAME_LABEL)
        finally:
            if mgr is not None:
                mgr.stop(10)
            down(opts.dir, grace=5)
    finally:
        remove_metrics_cert(created_certs)
        if workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    stats = admission_stats(seen, t0)
    # a Job has no Running phase: its ``status.ready`` count, which the watch reads, lags under load (the
    # job controller batches status updates) or never shows a 30 s run at all; the pods' start times do
    gang = start_latency(seen, starts)
    stats["apply_to_ready_seen_s"] = stats.pop("apply_to_running_s")
    return {
        **stats,
        "apply_to_gang_start_s": gang,
        "apply_to_running_p50_s": gang["p50"],
        "apply_to_running_p99_s": gang["p99"],
        "cpu_s": round(cpu, 2),
        "peak_rss_mb": round(peak, 1),
        "succeeded": ok,
        "failed": bad,
        "apply_s": round(applied, 3),
        "cpu_s_by_component": by_comp,
        "controller": f"kueue {KUEUE_VERSION} (cmd/kueue, batch/job integration)",
        "notes": notes,
    }


def _wait_cq_active(api_client: Any, timeout: float) -> None:
    from kubernetes import client

    custom = client.CustomObjectsApi(api_client)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cq = cast(
            "dict[str, Any]", custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", "bench")
        )
        conds = (cq.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Active" and c.get("status") == "True" for c in conds):
            return
        time.sleep(0.5)
    raise ControlPlaneError(f"Kueue's ClusterQueue bench was not Active within {timeout:.0f} s")


def bench_against_kueue(
    jobs: int = 1000,
    nodes: int = 1523,
    run_s: float = 30.0,
    policy: str = "fifo",
    placement: str = "consolidate",
    timeout: float = 1200.0,
    seed: int = 0,
    progress: Any = None,
    tick: Any = None,
) -> dict[str, Any]:
    """``bench_operator`` (DLJobs, the qosmos operator) and then the same jobs under Kueue, each on a
    fresh cluster of the same nodes, in one run: ``{"qosmos": {...}, "kueue": {...}}`` with COMMON_KEYS."""
    from qosmos.dev.bench import bench_operator

    if jobs < 1 or not 1 <= nodes <= 1523:
        raise InvalidInput("jobs/nodes", (jobs, nodes), "jobs >= 1 and nodes in [1, 1523] (the openb node list)")
    require_kueue()  # before the first cluster, not after it
    q = bench_operator(
        jobs, nodes, run_s, policy=policy, placement=placement, timeout=timeout, seed=seed, progress=progress, tick=tick
    )
    k = bench_kueue_jobs(jobs, nodes, run_s=run_s, timeout=timeout, seed=seed, progress=progress, tick=tick)
    qosmos = {
        "admissions_per_s": q["admissions_per_s"],
        # the same measure on both sides: job creation to the start of its gang's last pod
        "apply_to_running_p50_s": q["apply_to_gang_start_s"]["p50"],
        "apply_to_running_p99_s": q["apply_to_gang_start_s"]["p99"],
        "cpu_s": q["operator"]["cpu_s"],
        "peak_rss_mb": q["operator"]["peak_rss_mb"],
        "succeeded": q["succeeded"],
        "failed": q["failed"],
        "admissions": q["admissions"],
        "admission_window_s": q["admission_window_s"],
        "apply_s": q["apply_s"],
        "apply_to_admitted_s": q["apply_to_admitted_s"],
        "apply_to_gang_start_s": q["apply_to_gang_start_s"],
        "apply_to_running_phase_s": q["apply_to_running_s"],  # the DLJob's Running phase as the watch saw it
        "cpu_s_by_component": q["cpu_s_by_component"],
        "controller": f"qosmos operator (VirtualCluster policy {policy}, placement {placement})",
    }
    qa, ka = qosmos["admissions_per_s"], k["admissions_per_s"]
    qp, kp = qosmos["apply_to_running_p99_s"], k["apply_to_running_p99_s"]
    return {
        "jobs": jobs,
        "nodes": nodes,
        "run_s": run_s,
        "qosmos": qosmos,
        "kueue": k,
        "all_succeeded": qosmos["succeeded"] == jobs and k["succeeded"] == jobs,
        "targets_met": {
            "admissions_per_s_ge_kueue": qa is not None and ka is not None and qa >= ka,
            "apply_to_running_p99_le_kueue": qp is not None and kp is not None and qp <= kp,
        },
        "notes": [
            "each side on a fresh qosmos dev cluster of the same openb nodes, one after the other (qosmos first)",
            "Kueue: cmd/kueue with the batch/job integration, webhooks not registered (Jobs created suspended "
            "with the queue-name label), one ClusterQueue whose nominal quota is the nodes' CPU, memory and GPUs; "
            "its pods are created by kube-controller-manager's job controller and bound by kube-scheduler",
            "cpu_s and peak_rss_mb: the admitting controller's process (qosmos operator / Kueue manager) from /proc",
            "apply_to_running: from the job's creation to the latest status.startTime of its pods (written by KWOK "
            "when a pod starts; whole seconds), the same on both sides",
        ],
        "machine_cores": os.cpu_count(),
    }
