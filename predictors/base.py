"""The one predictor interface, LightGBM persistence, a model registry and the Model Update Engine.

Seed 000 §4.1 (Fig. 10): every prediction service owns one model; the *Model Update
Engine* collects run-time data (completed jobs) and refits the model periodically; the
*Resource Orchestrator* asks it for predictions. Here that is:

- :class:`Predictor` — fit / predict / save / load / evaluate;
- :class:`GBDTModel` — a LightGBM booster plus the metadata that makes it safe to reload:
  saved as ``<path>`` (LightGBM text model) and ``<path>.json`` (feature names, categorical
  features, training window, metrics, library versions). Loading it for other features
  raises :class:`InvalidInput` naming the mismatch;
- :data:`REGISTRY` / :func:`register` / :func:`get_predictor` — named predictor classes;
- :class:`ModelUpdateEngine` — pure (the caller passes ``now``): keeps a sliding window
  of completed samples and refits on a fixed schedule.
"""

from __future__ import annotations

import ctypes
import heapq
import json
import math
import platform
import time
import weakref
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import lightgbm as lgb
import numpy as np
from qosmos.extender.core.errors import InvalidInput

SIDECAR_SUFFIX = ".json"
FORMAT_VERSION = 1


def library_versions() -> dict[str, str]:
    """Versions recorded in every sidecar so a reload can be audited."""
    import rapidfuzz

    return {
        "python": platform.python_version(),
        "lightgbm": lgb.__version__,
        "numpy": np.__version__,
        "rapidfuzz": rapidfuzz.__version__,
    }


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + SIDECAR_SUFFIX)


# ---- metrics shared by the predictors ---------------------------------------------------------


def smape(actual: np.ndarray, predicted: np.ndarray) -> float:
    """Symmetric MAPE in % (seed 000 §4.3.2): mean 2|F-A| / (|A|+|F|), 0/0 counted as 0."""
    a = np.asarray(actual, float)
    f = np.asarray(predicted, float)
    den = np.abs(a) + np.abs(f)
    ratio = np.divide(2 * np.abs(f - a), den, out=np.zeros_like(den), where=den > 0)
    return float(100.0 * ratio.mean()) if ratio.size else float("nan")


def rankdata(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean rank), 1-based."""
    x = np.asarray(x, float)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(x.size, float)
    sx = x[order]
    i = 0
    while i < x.size:
        j = i
        while j + 1 < x.size and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation (Pearson on average ranks)."""
    ra, rb = rankdata(a), rankdata(b)
    if ra.size < 2 or ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def median_abs_log_error(actual: np.ndarray, predicted: np.ndarray) -> float:
    """median |ln((pred+1)/(actual+1))| — a factor-of-e error reads 1.0."""
    a = np.asarray(actual, float)
    p = np.asarray(predicted, float)
    return float(np.median(np.abs(np.log1p(np.maximum(p, 0)) - np.log1p(np.maximum(a, 0)))))


# ---- the interface ---------------------------------------------------------------------------


class Predictor(ABC):
    """fit on features + targets, predict, save/load, evaluate. Subclasses document units."""

    name: ClassVar[str] = ""

    @abstractmethod
    def fit(self, x: np.ndarray, y: np.ndarray) -> Predictor: ...

    @abstractmethod
    def predict(self, x: np.ndarray) -> np.ndarray: ...

    @abstractmethod
    def save(self, path: Path) -> None: ...

    @classmethod
    @abstractmethod
    def load(cls, path: Path) -> Predictor: ...

    def evaluate(self, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
        """Default report: SMAPE, Spearman and median |log error|."""
        p = self.predict(x)
        return {
            "smape": smape(y, p),
            "spearman": spearman(y, p),
            "median_abs_log_error": median_abs_log_error(y, p),
            "n": float(len(y)),
        }


REGISTRY: dict[str, type[Predictor]] = {}
P = TypeVar("P", bound=type[Predictor])
S = TypeVar("S")


def register(name: str) -> Callable[[P], P]:
    """Class decorator: ``@register("qssf")`` makes ``get_predictor("qssf")`` return the class."""

    def deco(cls: P) -> P:
        if name in REGISTRY and REGISTRY[name] is not cls:
            raise InvalidInput("predictor", name, "already registered")
        cls.name = name
        REGISTRY[name] = cls
        return cls

    return deco


def get_predictor(name: str) -> type[Predictor]:
    if name not in REGISTRY:
        raise InvalidInput("predictor", name, f"unknown; registered: {', '.join(sorted(REGISTRY)) or 'none'}")
    return REGISTRY[name]


DEFAULT_PARAMS: dict[str, Any] = {
    "objective": "regression",
    "learning_rate": 0.08,
    "num_leaves": 63,
    "min_data_in_leaf": 20,
    "feature_fraction": 0.9,
    "bagging_fraction": 0.9,
    "bagging_freq": 1,
    "max_bin": 255,
    "num_threads": 2,
    "verbose": -1,
    "seed": 7,
    "deterministic": True,
}


@register("gbdt")
class GBDTModel(Predictor):
    """A LightGBM regressor with named features; the building block of QSSF, CES and runtime.

    ``categorical`` names features holding non-negative integer codes (NaN = unknown).
    """

    def __init__(
        self,
        feature_names: Sequence[str],
        categorical: Sequence[str] = (),
        params: Mapping[str, Any] | None = None,
        num_rounds: int = 200,
    ) -> None:
        if len(set(feature_names)) != len(feature_names) or not feature_names:
            raise InvalidInput("feature_names", list(feature_names), "must be non-empty and unique")
        unknown = set(categorical) - set(feature_names)
        if unknown:
            raise InvalidInput("categorical", sorted(unknown), "not among feature_names")
        self.feature_names = list(feature_names)
        self.categorical = list(categorical)
        self.params = {**DEFAULT_PARAMS, **(params or {})}
        self.num_rounds = num_rounds
        self.booster: lgb.Booster | None = None
        self.meta: dict[str, Any] = {}

    def _check(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != len(self.feature_names):
            raise InvalidInput("x", x.shape, f"expected (n, {len(self.feature_names)}) for {self.feature_names}")
        return x

    def fit(
        self,
        x: np.ndarray,
        y: np.ndarray,
        *,
        window: tuple[float, float] | None = None,
        weight: np.ndarray | None = None,
    ) -> GBDTModel:
        x = self._check(x)
        y = np.asarray(y, dtype=np.float64)
        if y.shape != (x.shape[0],) or x.shape[0] == 0:
            raise InvalidInput("y", y.shape, f"need one target per row of x ({x.shape[0]} rows, > 0)")
        t0 = time.perf_counter()
        ds = lgb.Dataset(
            x,
            y,
            weight=weight,
            feature_name=self.feature_names,
            categorical_feature=self.categorical or "auto",
            free_raw_data=True,
            params={"max_bin": self.params["max_bin"], "verbose": -1},
        )
        self.booster = lgb.train(self.params, ds, num_boost_round=self.num_rounds)
        self.meta = {
            "format": FORMAT_VERSION,
            "kind": self.name,
            "feature_names": self.feature_names,
            "categorical": self.categorical,
            "params": self.params,
            "num_rounds": self.num_rounds,
            "training_window": list(window) if window else None,
            "training_rows": int(x.shape[0]),
            "fit_seconds": round(time.perf_counter() - t0, 3),
            "metrics": {},
            "versions": library_versions(),
            "extra": self.meta.get("extra", {}),
        }
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        if self.booster is None:
            raise InvalidInput("model", None, "not fitted")
        return np.asarray(self.booster.predict(self._check(x), num_threads=self.params.get("num_threads", 2)))

    def row_predictor(self) -> SingleRowPredictor:
        """A one-row predictor ~10x cheaper per call than :meth:`predict` (online use)."""
        if self.booster is None:
            raise InvalidInput("model", None, "not fitted")
        return SingleRowPredictor(self.booster, len(self.feature_names))

    def save(self, path: Path) -> None:
        if self.booster is None:
            raise InvalidInput("model", None, "not fitted")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.booster.save_model(str(path))
        sidecar_path(path).write_text(json.dumps(self.meta, indent=2, sort_keys=True, default=float))

    @classmethod
    def load(cls, path: Path, expected_features: Sequence[str] | None = None) -> GBDTModel:
        """Reload; with ``expected_features`` a model trained on other features is refused."""
        path = Path(path)
        side = sidecar_path(path)
        if not path.exists() or not side.exists():
            raise InvalidInput("model_path", str(path), f"needs both {path.name} and {side.name}")
        meta = json.loads(side.read_text())
        names = list(meta.get("feature_names", []))
        if expected_features is not None and list(expected_features) != names:
            missing = [f for f in expected_features if f not in names]
            extra = [f for f in names if f not in expected_features]
            raise InvalidInput(
                "feature_names",
                names,
                f"model at {path} was trained on other features: missing {missing}, unexpected {extra}"
                + ("" if missing or extra else " (same names, different order)"),
            )
        booster = lgb.Booster(model_file=str(path))
        if booster.feature_name() != names:
            raise InvalidInput("feature_names", booster.feature_name(), f"sidecar {side} disagrees with the model file")
        model = cls(names, meta.get("categorical", []), meta.get("params"), meta.get("num_rounds", 200))
        model.booster = booster
        model.meta = meta
        return model


class SingleRowPredictor:
    """Raw score of one feature row through LightGBM's C API fast path.

    ``Booster.predict`` converts arrays and starts threads on every call (~250 µs for one
    row); an online predictor asked once per job needs the C API's prepared single-row call
    (``LGBM_BoosterPredictForMatSingleRowFast``, documented in LightGBM's c_api.h), which
    the Python package does not wrap. Same result as ``Booster.predict`` (raw score).
    """

    def __init__(self, booster: lgb.Booster, n_features: int) -> None:
        # _LIB (the loaded C library) is no explicit export of lightgbm.basic (newer versions import it there
        # from lightgbm.libpath, older ones define it there): basic is where every supported version has it
        from lightgbm.basic import _LIB, _c_str, _safe_call  # type: ignore[attr-defined]

        self._booster = booster  # the prepared config points into the booster: keep it alive
        self._row = np.zeros(n_features, dtype=np.float64)
        self._out = np.zeros(1, dtype=np.float64)
        self._len = ctypes.c_int64(0)
        handle = ctypes.c_void_p()
        _safe_call(
            _LIB.LGBM_BoosterPredictForMatSingleRowFastInit(
                booster._handle,
                ctypes.c_int(0),  # C_API_PREDICT_NORMAL
                ctypes.c_int(0),  # start iteration
                ctypes.c_int(-1),  # all iterations
                ctypes.c_int(1),  # C_API_DTYPE_FLOAT64
                ctypes.c_int32(n_features),
                _c_str("num_threads=1"),
                ctypes.byref(handle),
            )
        )
        self._handle = handle
        self._fn = _LIB.LGBM_BoosterPredictForMatSingleRowFast
        self._row_ptr = self._row.ctypes.data_as(ctypes.c_void_p)
        self._out_ptr = self._out.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
        self._safe_call = _safe_call
        weakref.finalize(self, _LIB.LGBM_FastConfigFree, handle)

    def __call__(self, row: Sequence[float] | np.ndarray) -> float:
        self._row[:] = row
        self._safe_call(self._fn(self._handle, self._row_ptr, ctypes.byref(self._len), self._out_ptr))
        return float(self._out[0])


class CompletionQueue(Generic[S]):
    """Observed completions held back until the clock passes their end (causality by construction).

    ``push(end, item)`` in any order; ``release(now)`` returns, in (end, arrival) order, the
    items with ``end <= now`` not yet released, and refuses a ``now`` earlier than the last
    one (a prediction must never see a job that ends after it).
    """

    def __init__(self) -> None:
        self.clock = -math.inf
        self._heap: list[tuple[float, int, S]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, end: float, item: S, what: str = "") -> None:
        if not (isinstance(end, int | float) and math.isfinite(end)):
            raise InvalidInput("end", end, f"{what}: must be a finite time".lstrip(": "))
        heapq.heappush(self._heap, (float(end), self._seq, item))
        self._seq += 1

    def release(self, now: float) -> list[S]:
        if not now >= self.clock:  # also refuses NaN
            raise InvalidInput("now", now, f"before an earlier call's time {self.clock}: calls must come in time order")
        self.clock = now
        heap = self._heap
        out: list[S] = []
        while heap and heap[0][0] <= now:
            out.append(heapq.heappop(heap)[2])
        return out


# ---- Model Update Engine (seed 000 Fig. 10) -----------------------------------------------------


@dataclass
class ModelUpdateEngine(Generic[S]):
    """Refits a model on completed samples on a schedule; pure, the caller supplies ``now``.

    ``refit`` receives the samples completed in the last ``window_s`` seconds and returns
    the new model (or anything); ``maybe_refit(now)`` calls it when ``interval_s`` has
    passed since the last fit and at least ``min_samples`` are in the window.
    """

    refit: Callable[[list[S]], object]
    interval_s: float = 86_400.0
    window_s: float = 90 * 86_400.0
    min_samples: int = 50
    last_fit: float | None = None
    fits: int = 0
    model: object | None = None
    _window: deque[tuple[float, S]] = field(default_factory=deque)

    def observe(self, completed_at: float, sample: S) -> None:
        """Record one completed job (samples must arrive in completion order)."""
        if self._window and completed_at < self._window[-1][0]:
            raise InvalidInput("completed_at", completed_at, "samples must arrive in completion order")
        self._window.append((completed_at, sample))

    def due(self, now: float) -> bool:
        return self.last_fit is None or now - self.last_fit >= self.interval_s

    def window(self, now: float) -> list[S]:
        while self._window and self._window[0][0] < now - self.window_s:
            self._window.popleft()
        return [s for t, s in self._window if t <= now]

    def maybe_refit(self, now: float) -> bool:
        if not self.due(now):
            return False
        samples = self.window(now)
        if len(samples) < self.min_samples:
            return False
        self.model = self.refit(samples)
        self.last_fit = now
        self.fits += 1
        return True


__all__ = [
    "REGISTRY",
    "CompletionQueue",
    "GBDTModel",
    "ModelUpdateEngine",
    "Predictor",
    "SingleRowPredictor",
    "get_predictor",
    "library_versions",
    "median_abs_log_error",
    "rankdata",
    "register",
    "sidecar_path",
    "smape",
    "spearman",
]
