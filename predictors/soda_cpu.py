"""SODA adaptive CPU allocation (seed 002 §V-B): start point + feedback search on GPU utilisation.

Pure: the node agent (or the simulator) measures GPU utilisation for ~60 s at the core
count the search asks for and feeds it back; no clocks, no I/O.

Start point N_start (§V-B-1): the largest core count the owner used before for a job of the
same model category; else CV 3 / NLP 5 / SPEECH 5; hints: pipeline −1, large weights −1,
high inter-iteration complexity +1 (applied in both cases, never below 1).

Tuning (§V-B-2) — :class:`CoreSearch`, ``next_cores(observation) -> int | None``:
measure N_start; try one core fewer; while utilisation holds (within ``tolerance``) or
increases keep decreasing; if the first decrease hurts, go up from N_start while each step
improves by more than ``tolerance``; stop when neither direction helps. ``best`` is the
smallest count reaching the best utilisation seen (the best-fit number of §III). ``max_steps``
bounds the profiling steps (Table V: four 60 s steps); at the bound the best count so far is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from qosmos.extender.core.errors import InvalidInput

CATEGORY_START: Mapping[str, int] = {"CV": 3, "NLP": 5, "SPEECH": 5}
DEFAULT_START = 4  # category unknown and no history: between CV and NLP/SPEECH


def start_cores(
    category: str,
    owner_history: Iterable[tuple[str, int]] = (),
    *,
    pipeline: bool = False,
    large_weights: bool = False,
    complex_iterations: bool = False,
    max_cores: int | None = None,
) -> int:
    """N_start of §V-B-1. ``owner_history``: (category, cores) of the owner's earlier jobs."""
    cat = category.strip().upper()
    used = [c for k, c in owner_history if k.strip().upper() == cat and c > 0]
    n = max(used) if used else CATEGORY_START.get(cat, DEFAULT_START)
    n += -int(pipeline) - int(large_weights) + int(complex_iterations)
    n = max(1, n)
    return min(n, max_cores) if max_cores else n


@dataclass
class CoreSearch:
    """The feedback search as a state machine; observations are GPU utilisation (%)."""

    start: int
    min_cores: int = 1
    max_cores: int = 64
    tolerance: float = 1.0  # utilisation points treated as "unchanged"
    max_steps: int | None = None  # profiling budget (None: until neither direction helps)
    phase: str = "start"  # start | down | up | done
    current: int = 0
    best: int = 0
    best_util: float = float("-inf")
    trace: list[tuple[int, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 1 <= self.min_cores <= self.start <= self.max_cores:
            raise InvalidInput("start", self.start, f"must be within [{self.min_cores}, {self.max_cores}]")
        if self.tolerance < 0:
            raise InvalidInput("tolerance", self.tolerance, "must be >= 0")
        if self.max_steps is not None and self.max_steps < 1:
            raise InvalidInput("max_steps", self.max_steps, "must be >= 1")
        self.current = self.best = self.start

    @property
    def steps(self) -> int:
        """Profiling steps so far (one per measured core count)."""
        return len(self.trace)

    @property
    def done(self) -> bool:
        return self.phase == "done"

    def _finish(self) -> None:
        self.phase = "done"

    def _go_up(self) -> int | None:
        if self.start + 1 > self.max_cores:
            self._finish()
            return None
        self.phase = "up"
        self.current = self.start + 1
        return self.current

    def next_cores(self, utilisation: float) -> int | None:
        """Feed the utilisation measured at ``current``; returns the next count to try, or None when done."""
        if self.done:
            return None
        self.trace.append((self.current, utilisation))
        nxt = self._advance(utilisation)
        if nxt is not None and self.max_steps is not None and self.steps >= self.max_steps:
            self._finish()  # budget spent: ``best`` already holds the best count measured
            self.current = self.best
            return None
        return nxt

    def _advance(self, utilisation: float) -> int | None:
        n = self.current
        if self.phase == "start":
            self.best_util = utilisation
            if n - 1 >= self.min_cores:
                self.phase = "down"
                self.current = n - 1
                return self.current
            return self._go_up()
        if self.phase == "down":
            if utilisation >= self.best_util - self.tolerance:  # holds or increases: fewer cores suffice
                self.best = n
                self.best_util = max(self.best_util, utilisation)
                if n - 1 >= self.min_cores:
                    self.current = n - 1
                    return self.current
                self._finish()
                return None
            if self.best < self.start:  # an earlier decrease held: the last held count is the best fit
                self._finish()
                return None
            return self._go_up()
        # phase "up"
        if utilisation > self.best_util + self.tolerance:
            self.best, self.best_util = n, utilisation
            if n + 1 <= self.max_cores:
                self.current = n + 1
                return self.current
        self._finish()
        return None


def run_search(search: CoreSearch, utilisation: Callable[[int], float], max_steps: int = 64) -> CoreSearch:
    """Drive a search against a utilisation function (simulator / tests)."""
    n: int | None = search.current
    while n is not None and search.steps < max_steps:
        n = search.next_cores(utilisation(n))
    return search


def plateau_curve(best_fit: int, peak: float = 95.0, slope: float = 12.0, droop: float = 0.2) -> Callable[[int], float]:
    """Synthetic GPU utilisation: rises ``slope`` points per core up to ``best_fit``, then a plateau
    that droops ``droop`` points per extra core (§III: "does not change or drop slightly")."""

    def u(n: int) -> float:
        if n < best_fit:
            return max(1.0, peak - slope * (best_fit - n))
        return peak - droop * (n - best_fit)

    return u


# SODA Table I models with their category. The best-fit core counts are NOT given in the seed's
# text (they are in its Fig. 6, an image); these are assumptions for the synthetic curves,
# chosen within the 2-6 core range the paper discusses.
TABLE_I: Mapping[str, tuple[str, int]] = {
    "Alexnet": ("CV", 4),
    "VGG16": ("CV", 4),
    "InceptionV3": ("CV", 3),
    "Resnet-50": ("CV", 2),
    "Bi-att-Flow": ("NLP", 6),
    "Transformer": ("NLP", 5),
    "Wavenet": ("SPEECH", 4),
    "DeepSpeech": ("SPEECH", 5),
}


def table_i_report(tolerance: float = 1.0) -> list[dict[str, object]]:
    """Steps and result of the search from the category start point for every Table I model."""
    rows = []
    for model, (cat, best_fit) in TABLE_I.items():
        s = run_search(CoreSearch(start_cores(cat), tolerance=tolerance), plateau_curve(best_fit))
        rows.append(
            {
                "model": model,
                "category": cat,
                "start": s.start,
                "assumed_best_fit": best_fit,
                "found": s.best,
                "steps": s.steps,
                "tried": [c for c, _ in s.trace],
            }
        )
    return rows
