"""A gym-style environment over the simulator's engine (AnalySIM §3.2, learning-based scheduling).

``reset() -> obs``; ``step(action) -> (obs, reward, done, info)``. The action picks which
waiting job to start next: an index into the observation's queue rows, or ``-1`` (or any
index >= the queue length) to let time advance to the next event. Reward is minus the
number of jobs in the system integrated over the elapsed time, in job-hours (the signal
Decima uses: maximising it minimises average JCT). Starting a job that does not fit
gives a reward of ``invalid_penalty`` and changes nothing. No gym dependency.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from qosmos.extender.core.modeldb import ModelDB
from qosmos.simulator.engine import SimConfig, Simulator
from qosmos.simulator.traces import Trace

FEATURES = ("gpus", "wait_s", "expected_s", "fits_now")


class SchedulingEnv:
    """Observation: {"queue": float array (max_queue, 4) of FEATURES, "n_waiting", "free_gpus", "now"}."""

    def __init__(
        self,
        trace_factory: Any,
        config: SimConfig | None = None,
        max_queue: int = 32,
        invalid_penalty: float = -1.0,
        modeldb: ModelDB | None = None,
    ) -> None:
        self.trace_factory = trace_factory
        self.config = config or SimConfig(record_segments=False)
        self.max_queue = max_queue
        self.invalid_penalty = invalid_penalty
        self.modeldb = modeldb
        self.sim: Simulator | None = None
        self._gen: Any = None
        self.done = True

    def reset(self) -> dict[str, Any]:
        trace: Trace = self.trace_factory() if callable(self.trace_factory) else self.trace_factory
        self.sim = Simulator(trace, self.config, self.modeldb)
        self.sim.external = True
        self._gen = self.sim.loop()
        self.done = False
        self._last_job_time = 0.0
        self._advance()
        return self._obs()

    def _advance(self) -> None:
        try:
            next(self._gen)
        except StopIteration:
            self.done = True

    def _queue(self) -> list[int]:
        assert self.sim is not None
        return self.sim.waiting_jobs()[: self.max_queue]

    def _obs(self) -> dict[str, Any]:
        sim = self.sim
        assert sim is not None
        rows = np.zeros((self.max_queue, len(FEATURES)), dtype=np.float64)
        for k, i in enumerate(self._queue()):
            j = sim.jobs[i]
            exp = j.predicted_duration if j.predicted_duration is not None else (j.duration or 0.0)
            fits = sim._place_now(i) is not None
            rows[k] = (j.gpus, sim.now - j.submit_time, exp, float(fits))
        return {
            "queue": rows,
            "n_waiting": sim.n_waiting,
            "free_gpus": int(sim.cluster.free_gpus.sum()),
            "now": sim.now,
        }

    def step(self, action: int) -> tuple[dict[str, Any], float, bool, dict[str, Any]]:
        if self.done or self.sim is None:
            raise RuntimeError("call reset() first")
        sim = self.sim
        queue = self._queue()
        info: dict[str, Any] = {}
        if 0 <= action < len(queue):
            if not sim.try_start(queue[action]):
                return self._obs(), self.invalid_penalty, False, {"invalid": True}
            info["started"] = sim.jobs[queue[action]].id
            if sim.n_waiting:  # more decisions at this instant
                return self._obs(), 0.0, False, info
        self._advance()
        reward = -(sim.job_time - self._last_job_time) / 3600.0
        self._last_job_time = sim.job_time
        if self.done:
            info["result"] = sim.result
        return self._obs(), reward, self.done, info
