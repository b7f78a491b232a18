"""Online QSSF per-call cost: predict at submission + observe at the end, one job at a time.

Replays a Helios-shaped synthetic trace (``qosmos.simulator.traces.generate_helios_synth``;
it has users and VCs but no job names, and its run times do not depend on the user, so this
measures speed, not accuracy) through ``make_duration_predictor("qssf")`` with ends at
submit + duration, and reports µs per job with and without the LightGBM (re)training.

    python benchmarks/qssf_online_bench.py --jobs 200000 [--json]
"""

from __future__ import annotations

import argparse
import json
import time

from qosmos.predictors import make_duration_predictor
from qosmos.predictors.qssf import OnlineQSSF, replay_online
from qosmos.simulator.traces import generate_helios_synth


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--blend", choices=("linear", "log"), default="linear")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    jobs = sorted(generate_helios_synth(args.jobs, args.seed).jobs, key=lambda j: j.submit_time)
    q = make_duration_predictor("qssf", blend=args.blend)
    assert isinstance(q, OnlineQSSF)
    t0 = time.perf_counter()
    preds, _ = replay_online(q, jobs)
    wall = time.perf_counter() - t0
    out = {
        "jobs": len(jobs),
        "blend": args.blend,
        "wall_s": round(wall, 2),
        "fits_at": q.fits,
        "fit_s": round(q.fit_seconds, 2),
        "us_per_job_total": round(1e6 * wall / len(jobs), 1),
        "us_per_job_without_training": round(1e6 * (wall - q.fit_seconds) / len(jobs), 1),
        "predicted": sum(p is not None for p in preds),
    }
    print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
