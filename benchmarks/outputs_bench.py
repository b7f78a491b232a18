"""Where a `qosmos simulate` run spends its time, phase by phase (wall and CPU seconds).

    python benchmarks/outputs_bench.py --jobs 20000
    python benchmarks/outputs_bench.py --trace PATH/openb_pod_list_default.csv --format openb --scale 0.02

Prints one JSON object: seconds per phase (load, simulate, summarize, each artefact) and peak
RSS. CPU seconds are the steadier figure on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def timed(out: dict[str, dict[str, float]], name: str, fn: Callable[[], Any]) -> Any:
    w, c = time.perf_counter(), time.process_time()
    r = fn()
    out[name] = {"wall_s": round(time.perf_counter() - w, 3), "cpu_s": round(time.process_time() - c, 3)}
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default="builtin:helios-synth")
    ap.add_argument("--format", default=None)
    ap.add_argument("--jobs", type=int, default=20000, help="helios-synth jobs")
    ap.add_argument("--scale", type=float, default=None)
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--placement", default="consolidate")
    a = ap.parse_args()
    phases: dict[str, dict[str, float]] = {}
    mods = timed(phases, "import", lambda: __import__("qosmos.simulator.cli", fromlist=["x"]))
    from qosmos.simulator import outputs
    from qosmos.simulator.engine import SimConfig, simulate
    from qosmos.simulator.metrics import summarize

    tr, _ = timed(phases, "load", lambda: mods.load(a.trace, a.format, scale=a.scale, jobs=a.jobs))
    res = timed(phases, "simulate", lambda: simulate(tr, SimConfig(policy=a.policy, placement=a.placement)))
    summary = timed(phases, "summarize", lambda: summarize(res))
    with tempfile.TemporaryDirectory() as d:
        out = Path(d)
        timed(phases, "summary.json", lambda: outputs.write_summary(out / "summary.json", summary))
        timed(phases, "jobs.csv", lambda: outputs.write_jobs_csv(out / "jobs.csv", res))
        trace = timed(phases, "trace input", lambda: outputs.TraceInput.of(res))
        timed(phases, "trace.json", lambda: outputs.write_chrome_trace(out / "trace.json", trace))
        data = timed(phases, "plot input", lambda: outputs.PlotInput.of(res))
        for name, fn in outputs.PLOTS:
            timed(phases, name, lambda fn=fn, name=name: fn(out / name, data))
    print(
        json.dumps(
            {
                "trace": tr.name,
                "jobs": len(tr.jobs),
                "segments": len(res.segments),
                "phases": phases,
                "total_cpu_s": round(sum(p["cpu_s"] for p in phases.values()), 3),
                "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
