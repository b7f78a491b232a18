"""Where launch-bound training samples get their noise, and which step-time statistic reproduces (issue 23 §2).

    python benchmarks/launch_noise.py                       # the committed H200 study
    python benchmarks/launch_noise.py --data DIR [--json]

The data (``benchmarks/data/launch-noise-h200-2026-11-27``, README there) are per-step GPU times of
launch-bound training steps (``hack/gpu/steps.py``: ResNet-18 at 64 and 256, MobileNetV2 at 64,
NeuMF at 1024; 10 s each; one process per run, two runs free to use all 16 cores and two pinned to
one) and six ``hack/gpu/noise.sh`` profiling sessions of the same GPU.

Per run and case, the 10 s are cut into five 2 s stretches, each holding ten 0.2 s windows, and a
sample's step time is estimated in each stretch as ``qosmos profile run`` did (the median of the
windows' mean step) and as it does now (the lower quartile of all steps, ``timing.window_stats``);
"stretch spread" is (max - min) / median of the five estimates: how far two measurements of the same
size taken seconds apart disagree. "runs" compares the two processes of the same kind (free, pinned).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from qosmos.predictors.timing import STEP_QUANTILE

DATA = Path(__file__).resolve().parent / "data" / "launch-noise-h200-2026-11-27"
STRETCH_S, WINDOW_S = 2.0, 0.2


def read_steps(path: Path) -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]:
    """(model, batch) -> (host seconds since the case began, GPU step time in s), first step dropped."""
    rows: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
    with gzip.open(path, "rt", newline="") as fh:
        for r in csv.DictReader(fh):
            rows[(r["model"], int(r["batch"]))].append((float(r["host_s"]), float(r["gpu_ms"]) / 1000.0))
    return {k: (np.array([h for h, _ in v[1:]]), np.array([g for _, g in v[1:]])) for k, v in rows.items()}


def spread_pct(values: list[float]) -> float:
    return 100.0 * (max(values) - min(values)) / statistics.median(values)


def estimates(host: np.ndarray, step: np.ndarray) -> dict[str, list[float]]:
    """Per 2 s stretch: the median of its 0.2 s windows' mean step, and the lower quartile of its steps."""
    out: dict[str, list[float]] = {"median_of_windows": [], "lower_quartile": []}
    stretch = (host // STRETCH_S).astype(int)
    for s in sorted(set(stretch.tolist()) - {int(stretch.max())}):  # the last stretch may be short
        h, t = host[stretch == s], step[stretch == s]
        window = (h // WINDOW_S).astype(int)
        means = [float(t[window == w].mean()) for w in np.unique(window) if (window == w).sum() >= 3]
        out["median_of_windows"].append(statistics.median(means))
        out["lower_quartile"].append(float(np.quantile(t, STEP_QUANTILE)))
    return out


def study(data: Path) -> dict[str, Any]:
    runs = {
        p.name.removeprefix("steps-").removesuffix(".csv.gz"): read_steps(p)
        for p in sorted(data.glob("steps-*.csv.gz"))
    }
    cases: dict[str, Any] = {}
    for run, by_case in runs.items():
        for (model, batch), (host, step) in by_case.items():
            est = estimates(host, step)
            cases[f"{run} {model} {batch}"] = {
                "steps": int(step.size),
                "median_step_ms": 1000 * float(np.median(step)),
                "p90_step_ms": 1000 * float(np.quantile(step, 0.9)),
                **{f"{k}_ms": 1000 * statistics.median(v) for k, v in est.items()},
                **{f"{k}_stretch_spread_pct": spread_pct(v) for k, v in est.items()},
            }
    between: dict[str, Any] = {}
    for kind, (a, b) in {"free": ("free", "free2"), "pinned": ("pinned", "pinned2")}.items():
        if a in runs and b in runs:
            for model, batch in runs[a]:
                pair = [cases[f"{r} {model} {batch}"] for r in (a, b)]
                between[f"{kind} {model} {batch}"] = {
                    k: spread_pct([p[f"{k}_ms"] for p in pair]) for k in ("median_of_windows", "lower_quartile")
                }
    summary = {
        kind: {
            k: statistics.fmean(
                v[f"{k}_stretch_spread_pct"] for n, v in cases.items() if n.split()[0].rstrip("2") == kind
            )
            for k in ("median_of_windows", "lower_quartile")
        }
        for kind in ("free", "pinned")
    }
    return {
        "cases": cases,
        "runs_disagree_pct": between,
        "mean_stretch_spread_pct": summary,
        "sessions": sessions(data),
    }


def sessions(data: Path) -> dict[str, Any]:
    """Per hack/gpu/noise.sh session: the median and worst window spread of its launch-bound samples."""
    out = {}
    for f in sorted(data.glob("sessions/*/training.csv")):
        spreads = [
            float(r["rate_spread_pct"])
            for r in csv.DictReader(f.open())
            if float(r["batch"]) / float(r["rate"]) < 0.025
        ]
        if spreads:
            out[f.parent.name] = {
                "samples": len(spreads),
                "median_spread_pct": statistics.median(spreads),
                "max_spread_pct": max(spreads),
            }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = study(args.data)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{'run model batch':26} {'steps':>6} {'p50 ms':>7} {'p90 ms':>7} | stretch spread %: median of windows / lower quartile"
    )
    for name, c in result["cases"].items():
        print(f"{name:26} {c['steps']:6d} {c['median_step_ms']:7.2f} {c['p90_step_ms']:7.2f} | "
              f"{c['median_of_windows_stretch_spread_pct']:6.1f} / {c['lower_quartile_stretch_spread_pct']:5.1f}")  # fmt: skip
    print("\ntwo processes of the same kind disagree by (%): median of windows / lower quartile")
    for name, d in result["runs_disagree_pct"].items():
        print(f"  {name:24} {d['median_of_windows']:6.1f} / {d['lower_quartile']:5.1f}")
    print("\nmean stretch spread (%): median of windows / lower quartile")
    for kind, d in result["mean_stretch_spread_pct"].items():
        print(f"  {kind:8} {d['median_of_windows']:6.1f} / {d['lower_quartile']:5.1f}")
    print("\nprofiling sessions (hack/gpu/noise.sh), samples with steps under 25 ms: window spread median / max %")
    for name, s in result["sessions"].items():
        print(f"  {name:26} {s['samples']:3d} samples  {s['median_spread_pct']:5.1f} / {s['max_spread_pct']:5.1f}")


if __name__ == "__main__":
    main()
