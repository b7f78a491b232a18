"""The operator's passes in lockstep with a job trace, for comparing its decisions with the simulator's.

:class:`Passes` runs the operator itself (``Reconciler``: its plan and its applier) on an in-memory
apiserver (:class:`~qosmos.testing.fakekube.FakeKube`) and plays the rest of the cluster: DLJobs are
created at their submission, kube-scheduler binds each gang pod where the operator pinned it, the kubelet
runs it for the rest of its job's run time (a preempted job resumes where it stopped, as the simulator's
do; a GENIE task's run time is GENIE's latency at the shape it was placed with, Eq. 4, as the simulator's,
and one resumed on another shape runs the rest of its work there)
and ends a deleted pod at once (preemption overhead 0). Nodes go down and come back at ``outages``' times
(the simulator's ``ScriptedOutages``): a down node's Ready condition is False, the gangs with a pod there
stall (none of their pods finishes; new pods there stay Pending), and when it is back its pods have failed
(the machine restarted). At every event it runs a pass, then passes
again as a live operator does after its own writes (pods Running, status echoes) until they write
nothing, and once between two events (the operator's timer). The passes after an event's may decide
what the first could not see (a cohort member's pass ran before another's start left it GPUs to lend; a
job stopped for its GPUs starts on others, or preempts one of lower priority there), as the simulator
passes a partition again at the same instant; none may stop a job twice at one instant (a thrash), and
the pass between events decides nothing. Run
segments are read from the DLJobs' status writes, to compare with ``SimResult.segments``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from qosmos.extender.core import genie
from qosmos.extender.core.failures import kept_run
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.types import Job, JobKind, QoSClass
from qosmos.operator.durations import Durations
from qosmos.operator.reconcile import Reconciler
from qosmos.operator.translate import Gang, parse_time, rfc3339
from qosmos.testing.fakekube import NODE_CORES, NODE_MEMORY_GI, FakeKube, gpu_node, pinned

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z: trace time 0
FINISHED = ("Succeeded", "Failed")
MAX_QUIET_PASSES = 6  # passes after an event's until one writes nothing
VC_LABEL = "qosmos.test/vc"
GPU_MODEL = "V100M32"  # fakekube's nodes'
NODE_CPU_MILLI, NODE_MEMORY_MIB = NODE_CORES * 1000, NODE_MEMORY_GI * 1024  # fakekube's nodes', for the simulator


@dataclass(frozen=True, slots=True)
class TraceJob:
    """A DLJob of the trace: created ``submit`` s after T0, asking ``gpus`` GPUs, running ``duration`` s;
    ``gpus_per_node`` > 0 fixes its shape (``spec.gpusPerNode``), ``priority`` is ``spec.priority``; deleted
    at ``withdraw`` (the simulator's ``Trace.withdraw_at``). With ``model``, ``batch`` and ``iters`` it is a
    GENIE task of QoS class ``qos`` (its run time then follows from its shape, not ``duration``). With
    ``cpus`` (and no GPUs) it is a CPU job (``kind: cpu``) of that many cores. At each of ``fail_at`` (s
    after T0) at which its gang runs, a pod of it fails (exit code 1; the simulator's ``ScriptedFailures``);
    ``checkpoint`` is its ``spec.checkpointIntervalSeconds``, ``backoff_limit`` its ``spec.backoffLimit``."""

    name: str
    submit: int
    gpus: int
    duration: int
    vc: str = "default"
    priority: int = 0
    gpus_per_node: int = 0
    withdraw: int | None = None  # deleted this many s after T0 (kubectl delete), if not finished by then
    model: str = ""
    batch: int = 0
    iters: int = 0
    qos: str = "Normal"
    cpus: int = 0
    fail_at: tuple[int, ...] = ()
    checkpoint: int | None = None
    backoff_limit: int | None = None

    def job(self) -> Job:
        """The simulator's Job of this DLJob (namespace ``ns``: its user, as the operator translates it)."""
        nodes = self.gpus // self.gpus_per_node if self.gpus_per_node else 0
        return Job(
            f"ns/{self.name}",
            float(self.submit),
            self.gpus,
            duration=float(self.duration),
            user="ns",
            name=self.name,
            model=self.model,
            batch=self.batch,
            iters=self.iters,
            qos=QoSClass[self.qos.upper()],
            category=self.model,
            vc=self.vc,
            priority=self.priority,
            nodes=nodes,
            kind=JobKind.CPU if self.cpus else JobKind.TRAINING,
            cpu_milli=self.cpus * 1000,
            checkpoint_interval=self.checkpoint,
        )


class Oracle(Durations):
    """Every job's run time is known (the simulator's ``duration``): SJF's and SRTF's keys, and
    backfilling's estimates, are the simulator's."""

    def __init__(self, duration: dict[str, float]) -> None:
        super().__init__(None)
        self.duration = duration

    def predict(self, job: Job, now: float) -> float | None:
        return self.duration[job.id]

    def predict_run(self, job: Job, now: float, elapsed: float) -> float | None:
        return None  # no ETAs: not what is compared


class Passes:
    """The operator's passes over ``jobs`` (in namespace ``ns``) on nodes of ``node_gpus`` GPUs (``n0``,
    ``n1``, ...), all in one VirtualCluster ``default`` of ``vc_spec``; or, with ``vcs`` (name -> spec),
    node i in VirtualCluster ``node_vc[i]`` (selected by the label ``qosmos.test/vc``)."""

    def __init__(
        self,
        vc_spec: dict[str, Any],
        node_gpus: Sequence[int],
        jobs: Sequence[TraceJob],
        predict: bool = True,
        *,
        vcs: Mapping[str, dict[str, Any]] | None = None,
        node_vc: Sequence[str] = (),
        restarts: bool = False,
        outages: Mapping[str, Sequence[tuple[int, int | None] | tuple[int, int | None, bool]]] | None = None,
    ) -> None:
        if vcs is None:
            vcs, node_vc = {"default": vc_spec}, ["default"] * len(node_gpus)
            objs = [{"metadata": {"name": "default"}, "spec": vc_spec}]
        else:
            objs = [
                {"metadata": {"name": n}, "spec": {**spec, "nodeSelector": {VC_LABEL: n}}} for n, spec in vcs.items()
            ]
        nodes = [
            gpu_node(f"n{i}", g, taints=None, **{VC_LABEL: v})
            for i, (g, v) in enumerate(zip(node_gpus, node_vc, strict=True))
        ]
        self.kube = FakeKube(nodes, vcs=objs)
        self.now = T0
        self.jobs = {j.name: j for j in jobs}
        self.duration = {f"ns/{j.name}": float(j.duration) for j in jobs}
        self.durations = Oracle(self.duration) if predict else Durations(None)
        self.restarts = restarts  # a new operator (nothing in memory) before every pass
        self.rec = self.operator()
        self.arrivals = sorted((T0 + j.submit, j.name) for j in jobs)
        self.ends: dict[str, float] = {}  # pod -> when it finishes its run
        self.open: dict[str, float] = {}  # job -> start of its current segment
        self.work_left: dict[str, float] = {}  # GENIE task -> the fraction of its work left (the truth here)
        self.latency: dict[str, float] = {}  # GENIE task -> its whole run at its current segment's shape
        self.segments: list[tuple[str, float, float]] = []  # (job id, start, end) in trace time
        self.wake: float | None = None
        self.passes = 0
        self.deleted: set[str] = set()
        self.failures: set[tuple[str, float]] = set()  # (job, time) of the failures that came
        self.modeldb = ModelDB.builtin()
        # node changes (time, node, back after, a drain's), in time order; ``up`` None: never back
        spans = [(n, o[0], o[1], len(o) > 2 and bool(o[2])) for n, os in (outages or {}).items() for o in os]
        changes = [(T0 + d, n, False, drain) for n, d, _, drain in spans]
        changes += [(T0 + u, n, True, drain) for n, _, u, drain in spans if u is not None]
        self.node_changes = sorted(changes)
        self.stalled: dict[str, float] = {}  # job -> status.stalledSince of its current segment

    def operator(self) -> Reconciler:
        return Reconciler(self.kube, durations=self.durations, clock=lambda: self.now)  # type: ignore[arg-type]

    def dljob(self, j: TraceJob) -> dict[str, Any]:
        return {
            "metadata": {
                "name": j.name,
                "namespace": "ns",
                "uid": f"uid-{j.name}",
                "creationTimestamp": rfc3339(T0 + j.submit),
            },
            "spec": {
                "virtualCluster": j.vc,
                "gpus": j.gpus,
                **({"priority": j.priority} if j.priority else {}),
                **({"gpusPerNode": j.gpus_per_node} if j.gpus_per_node else {}),
                **({"modelType": j.model} if j.model else {}),
                **({"globalBatchSize": j.batch, "iterations": j.iters} if j.batch else {}),
                **({"qosClass": j.qos} if j.qos != "Normal" else {}),
                **({"kind": "cpu", "cpus": str(j.cpus)} if j.cpus else {}),
                **({"checkpointIntervalSeconds": j.checkpoint} if j.checkpoint is not None else {}),
                **({"backoffLimit": j.backoff_limit} if j.backoff_limit is not None else {}),
            },
            "status": {},
        }

    def next_event(self) -> float | None:
        times = [t for t, n in self.arrivals if n not in self.kube.jobs and n not in self.deleted]
        times += [T0 + j.withdraw for n, j in self.jobs.items() if j.withdraw is not None and n not in self.deleted]
        times += [T0 + f for n, j in self.jobs.items() for f in j.fail_at if T0 + f > self.now]
        times += list(self.ends.values())
        times += [self.wake] if self.wake is not None else []
        times += [t for t, *_ in self.node_changes if t > self.now]
        return min(times, default=None)

    def node_change(self, node: str, ready: bool, now: float, drain: bool = False) -> None:
        """The node goes down (Ready False since now: the gangs with a pod there stall) or is back (Ready:
        its pods have failed, the machine restarted). A drain (``kubectl drain``) cordons the node and
        evicts its pods (their DisruptionTarget, then gone), and its end uncordons it."""
        obj = next(n for n in self.kube._nodes if n["metadata"]["name"] == node)
        if drain:
            obj["spec"]["unschedulable"] = not ready
            for name, pod in list(self.kube.pods.items()):
                running = (pod.get("status") or {}).get("phase") not in FINISHED
                if not ready and running and pod["spec"].get("nodeName") == node:
                    self.kube.evict(name, rfc3339(now))
                    self.ends.pop(name, None)
            return
        obj["status"]["conditions"] = [
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": rfc3339(now)}
        ]
        for name, pod in self.kube.pods.items():
            if pod["spec"].get("nodeName") != node or (pod.get("status") or {}).get("phase") in FINISHED:
                continue
            if ready:
                pod["status"]["phase"] = "Failed"
                pod["status"]["containerStatuses"] = [
                    {"name": "main", "state": {"terminated": {"exitCode": 137, "finishedAt": rfc3339(now)}}}
                ]
                self.ends.pop(name, None)
        if not ready:
            self.stall()

    def node_changes_until(self, now: float, ready: bool) -> None:
        """The node changes before ``now``, in their order, then those at ``now`` that bring a node back
        (``ready``) or take one down."""
        for change in [c for c in self.node_changes if c[0] < now or (c[0] == now and c[2] is ready)]:
            self.node_changes.remove(change)
            self.node_change(change[1], change[2], change[0], change[3])

    def down(self) -> set[str]:
        return {
            n["metadata"]["name"]
            for n in self.kube._nodes
            if any(c.get("type") == "Ready" and c.get("status") != "True" for c in n["status"].get("conditions", []))
        }

    def stall(self) -> None:
        """No pod of a gang with a pod on a down node finishes (its collectives wait for that pod)."""
        down = self.down()
        stuck = {
            p["metadata"]["labels"]["qosmos.io/job"]
            for p in self.kube.pods.values()
            if p["spec"].get("nodeName") in down and (p.get("status") or {}).get("phase") not in FINISHED
        }
        for pod in [
            n
            for n in self.ends
            if n in self.kube.pods and self.kube.pods[n]["metadata"]["labels"]["qosmos.io/job"] in stuck
        ]:
            del self.ends[pod]

    def step(self, now: float) -> tuple[list[str], list[str]]:
        """One pass at ``now``, then the scheduler and kubelet; (preempted, admitted)."""
        self.now = now
        self.passes += 1
        self.node_changes_until(now, ready=True)  # a node back first, its gangs' grace then (the simulator's order)
        for t, n in self.arrivals:
            if t <= now and n not in self.kube.jobs and n not in self.deleted:
                self.kube.add(self.dljob(self.jobs[n]))
        for n, j in self.jobs.items():
            if j.withdraw is not None and T0 + j.withdraw <= now and n not in self.deleted:
                self.deleted.add(n)
                if n in self.kube.jobs and (self.kube.jobs[n].get("status") or {}).get("phase") not in FINISHED:
                    self.kube.delete_dljob("ns", n)  # its pods go with it (the garbage collector)
                    self.kube.terminate()  # at once, before the pass: the simulator's withdrawal frees them
                    self.ends = {pod: end for pod, end in self.ends.items() if pod in self.kube.pods}
                    if f"ns/{n}" in self.open:  # (its run ended when a node of it went down)
                        start, until = self.open.pop(f"ns/{n}"), self.stalled.pop(f"ns/{n}", now)
                        self.segments.append((f"ns/{n}", start - T0, max(min(now, until), start) - T0))
        for pod, end in list(self.ends.items()):
            if end <= now:
                st = self.kube.pods[pod]["status"]
                st["phase"] = "Succeeded"
                st["containerStatuses"] = [{"name": "main", "state": {"terminated": {"finishedAt": rfc3339(end)}}}]
                del self.ends[pod]
        for n, j in self.jobs.items():  # a failure at this instant (its first pass): a pod of its running gang fails
            if any(T0 + f == now for f in j.fail_at) and (n, now) not in self.failures:
                self.failures.add((n, now))
                running = sorted(p for p in self.ends if self.kube.pods[p]["metadata"]["labels"]["qosmos.io/job"] == n)
                if running:
                    st = self.kube.pods[running[0]]["status"]
                    st["phase"] = "Failed"
                    st["containerStatuses"] = [
                        {"name": "main", "state": {"terminated": {"exitCode": 1, "finishedAt": rfc3339(now)}}}
                    ]
                    del self.ends[running[0]]
        self.node_changes_until(now, ready=False)  # a node down after what finished or failed at that instant
        seen = len(self.kube.status_patches)
        if self.restarts:
            self.rec = self.operator()
        rep = self.rec.run_pass()
        self.wake = rep.wake_at
        for name, patch in self.kube.status_patches[seen:]:
            key = f"ns/{name}"
            if patch.get("stalledSince"):
                self.stalled[key] = parse_time(patch["stalledSince"]) or now
            if patch.get("phase") == "Running":
                self.open[key] = parse_time(patch["startTime"]) or now
            elif patch.get("phase") in ("Queued", "Succeeded", "Admitted", "Failed") and key in self.open:
                # (Admitted again: its gang failed and is recreated after a back-off)
                end = parse_time(patch.get("completionTime")) or now
                stalled = self.stalled.pop(key, None)  # its run ended when a node of it went down
                end = end if stalled is None else max(min(end, stalled), self.open[key])
                start = self.open.pop(key)
                self.segments.append((key, start - T0, end - T0))
                kept = end - start
                if patch["phase"] in ("Admitted", "Failed") or stalled is not None:
                    kept = kept_run(kept, self.jobs[name].checkpoint)  # a failed or stalled run: its checkpoints
                if key in self.latency:  # a GENIE task stopped: the rest of its work is left (0 when it finished)
                    self.work_left[key] = genie.work_left_after(self.work_left.get(key, 1.0), kept, self.latency[key])
            if "stalledSince" in patch and patch["stalledSince"] is None:
                self.stalled.pop(key, None)  # its nodes are back, or the segment ended without running
        self.kube.terminate()  # preempted pods leave at once
        for obj in [p for p in self.kube.pods.values() if not p["spec"].get("nodeName")]:
            name = obj["metadata"]["name"]
            job = self.kube.jobs[obj["metadata"]["labels"]["qosmos.io/job"]]
            obj["spec"].pop("schedulingGates", None)
            node = pinned(obj)
            if node in self.down():  # its kubelet is gone: it never starts there
                self.kube.bind(name, node, "Pending")
                continue
            self.kube.bind(name, node)
            self.ends[name] = now + self.run_left(job)
        self.stall()
        for pod in [n for n in self.ends if n not in self.kube.pods]:
            del self.ends[pod]  # deleted (preempted): its run stopped
        return rep.preempted, rep.admitted

    def run_left(self, dljob: dict[str, Any]) -> float:
        """What the job runs from now: the rest of its trace duration (after the seconds its earlier segments
        ran), or the rest of a GENIE task's work at the shape the operator placed it with
        (``status.placement``; GENIE Eq. 4, the simulator's ``_full_runtime`` times its ``frac_left``)."""
        tj = self.jobs[dljob["metadata"]["name"]]
        key = f"ns/{tj.name}"
        if not (tj.model and tj.batch and tj.iters):
            return self.duration[key] - float(dljob["status"].get("executedSeconds") or 0.0)
        gang = Gang.of_status(dljob["status"])
        assert gang is not None, f"{tj.name} runs without a placement"
        task = genie.Task.from_job(tj.job())
        lat = genie.latency(task, genie.run_shape(gang.per_node()), self.modeldb.get(tj.model, GPU_MODEL))
        self.latency[key] = lat
        return lat * self.work_left.get(key, 1.0)

    def run(self, max_events: int = 1000) -> None:
        """Every event's pass, then the passes after it until they write nothing (asserting that
        they decide nothing), until no event is left."""
        t = self.next_event()
        events = 0
        while t is not None:
            events += 1
            assert events <= max_events, f"more than {max_events} events: the passes do not settle"
            stopped = Counter(self.step(t)[0])
            for _ in range(MAX_QUIET_PASSES):
                # (the pods by name: a pass may delete one pod and create another)
                before = (len(self.kube.status_patches), set(self.kube.pods))
                # A later pass may decide what an earlier one could not see (a cohort member's pass ran
                # before another's start lent it GPUs; a job stopped for its GPUs starts on others, or
                # preempts one of lower priority there); no job is stopped twice at one instant.
                stopped.update(self.step(t)[0])
                twice = [j for j, n in stopped.items() if n > 1]
                assert not twice, f"passes at {t - T0:g} s stopped {twice} again after starting them"
                if (len(self.kube.status_patches), set(self.kube.pods)) == before:
                    break
            nxt = self.next_event()
            if nxt is not None and nxt > t + 2:  # a pass of the operator's timer between two events
                mid = (t + nxt) / 2
                decided = self.step(mid)
                assert decided == ([], []), f"a pass at {mid - T0:g} s, between events, decided {decided}"
            t = nxt


def same_segments(
    a: Sequence[tuple[str, float, float]], b: Sequence[tuple[str, float, float]], tolerance: float = 1e-3
) -> bool:
    """The same run segments, each start and end within ``tolerance`` s (status times are written to the
    microsecond; this kubelet writes a pod's exact finish, where a real one writes whole seconds). A job
    started and stopped at one instant ran nothing: the operator's status never says Running then."""
    a, b = (sorted(x for x in s if x[2] - x[1] > tolerance) for s in (a, b))
    return len(a) == len(b) and all(
        x[0] == y[0] and abs(x[1] - y[1]) <= tolerance and abs(x[2] - y[2]) <= tolerance
        for x, y in zip(a, b, strict=True)
    )


__all__ = ["T0", "Oracle", "Passes", "TraceJob", "same_segments"]
