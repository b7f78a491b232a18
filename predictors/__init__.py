"""qosmos component: prediction services (QSSF durations, CES, run times, GENIE profiles).

:func:`make_duration_predictor` is the one entry point the simulator and the operator use.
"""

from __future__ import annotations

import inspect
from typing import Any

from qosmos.extender.core.types import DurationPredictor

DURATION_PREDICTORS = ("qssf", "qssf-log", "runtime")


def make_duration_predictor(name: str, **options: Any) -> DurationPredictor:
    """A fresh :class:`DurationPredictor` by name.

    - ``"qssf"``: :class:`qosmos.predictors.qssf.OnlineQSSF` — options ``lam`` (0.5),
      ``blend`` ("linear" | "log"), ``alpha``, ``name_threshold``, ``train_after`` (1000),
      ``retrain_every`` (20000), ``max_train_jobs`` (50000), ``num_rounds`` (150), ``params``;
    - ``"qssf-log"``: the same with ``blend="log"`` (the blend in log space; README: its measured effect);
    - ``"runtime"``: :class:`qosmos.predictors.runtime.Last2Elapsed` — option ``keep`` (10000).

    Unknown names or options raise ``InvalidInput``; nothing falls back silently.
    """
    from qosmos.extender.core.errors import InvalidInput

    if name in ("qssf", "qssf-log"):
        from qosmos.predictors.qssf import OnlineQSSF

        cls: Any = OnlineQSSF
        if name == "qssf-log":
            if "blend" in options:
                raise InvalidInput("options", ["blend"], "qssf-log fixes blend='log'")
            options = {**options, "blend": "log"}
    elif name == "runtime":
        from qosmos.predictors.runtime import Last2Elapsed

        cls = Last2Elapsed
    else:
        raise InvalidInput("predictor", name, f"expected one of {', '.join(DURATION_PREDICTORS)}")
    allowed = inspect.signature(cls).parameters
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise InvalidInput("options", unknown, f"not options of the {name} predictor ({', '.join(allowed)})")
    return cls(**options)  # type: ignore[no-any-return]


__all__ = ["DURATION_PREDICTORS", "make_duration_predictor"]
