"""Simulator speed: jobs/s and peak RSS on the Helios-shaped synthetic trace (not a timed test).

    python benchmarks/sim_bench.py --jobs 100000 1000000 --policy fifo --placement consolidate

1,000 GPUs in 10 VCs of 8-GPU nodes (simulator.traces.generate_helios_synth). Reports the
generation time and the simulation time separately; jobs/s = jobs / simulation wall seconds;
jobs_per_cpu_s uses process CPU time (robust when the machine is shared).
Target (the brief): >= 13,600 jobs/s (20x the Helios artifact's 680 jobs/s), < 2 GB for 1M jobs.
Each size runs in a fresh process so peak RSS (resource.getrusage) is per size.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def one(n: int, policy: str, placement: str, seed: int) -> dict[str, object]:
    from qosmos.simulator.engine import SimConfig, simulate
    from qosmos.simulator.metrics import summarize
    from qosmos.simulator.traces import generate_helios_synth

    t0 = time.perf_counter()
    trace = generate_helios_synth(n, seed=seed)
    gen_s = time.perf_counter() - t0
    c0 = time.process_time()
    res = simulate(trace, SimConfig(policy=policy, placement=placement, record_segments=False, seed=seed))
    cpu_s = time.process_time() - c0
    t1 = time.perf_counter()
    s = summarize(res)
    metrics_s = time.perf_counter() - t1
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "jobs": n,
        "policy": policy,
        "placement": placement,
        "generate_s": round(gen_s, 2),
        "simulate_s": round(res.wall_s, 2),
        "jobs_per_s": round(n / res.wall_s),
        "simulate_cpu_s": round(cpu_s, 2),
        "jobs_per_cpu_s": round(n / cpu_s),
        "metrics_s": round(metrics_s, 2),
        "peak_rss_mb": round(rss_mb),
        "avg_jct_s": round(s["avg_jct_s"], 1),
        "avg_queue_s": round(s["avg_queue_s"], 1),
        "gpu_utilization": round(s["gpu_utilization"], 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--placement", default="consolidate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true", help="pyinstrument profile of the first size")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(one(a.child, a.policy, a.placement, a.seed)))
        return
    if a.profile:
        from pyinstrument import Profiler

        p = Profiler()
        p.start()
        one(a.jobs[0], a.policy, a.placement, a.seed)
        p.stop()
        print(p.output_text(unicode=False, color=False, show_all=False))
        return
    for n in a.jobs:
        cmd = [
            sys.executable,
            __file__,
            "--child",
            str(n),
            "--policy",
            a.policy,
            "--placement",
            a.placement,
            "--seed",
            str(a.seed),
        ]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        print(out, flush=True)


if __name__ == "__main__":
    main()
