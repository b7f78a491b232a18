"""Trace loading speed: ``builtin:helios-synth`` and a Helios ``cluster_log.csv`` of the same jobs.

    python benchmarks/load_bench.py --jobs 20000 [--repeat 5] [--dir /tmp/helios-20k]

Writes the Helios-format log from the generator (times 'YYYY-MM-DD HH:MM:SS' from
2020-04-01), then times ``load_trace`` on both (best of ``--repeat``: wall and process CPU
seconds) and prints one JSON object. Loading only: simulation and outputs are not included.
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from qosmos.simulator.traces import generate_helios_synth, load_trace

HEADER = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue"


def write_helios_log(n_jobs: int, folder: Path, seed: int = 0) -> Path:
    """A Helios cluster_log.csv holding helios-synth's jobs (started on submission, completed)."""
    folder.mkdir(parents=True, exist_ok=True)
    t0 = datetime(2020, 4, 1)
    path = folder / "cluster_log.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(HEADER.split(","))
        for j in generate_helios_synth(n_jobs, seed=seed).jobs:
            s = t0 + timedelta(seconds=round(j.submit_time))
            e = s + timedelta(seconds=j.duration or 0.0)
            stamp = s.strftime("%Y-%m-%d %H:%M:%S")
            w.writerow([j.id, j.user, j.vc, j.gpus, j.gpus * 4, max(1, j.gpus // 8), "COMPLETED", stamp, stamp,
                        e.strftime("%Y-%m-%d %H:%M:%S"), int(j.duration or 0), 0])  # fmt: skip
    return path


def best(spec: str, repeat: int, **kw: object) -> dict[str, float]:
    wall = cpu = float("inf")
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        load_trace(spec, **kw)  # type: ignore[arg-type]
        wall, cpu = min(wall, time.perf_counter() - t), min(cpu, time.process_time() - c)
    return {"wall_s": round(wall, 4), "cpu_s": round(cpu, 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=None, help="folder for cluster_log.csv (default: a temp folder)")
    args = ap.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="qosmos-helios-"))
    log = write_helios_log(args.jobs, folder)
    out = {
        "jobs": args.jobs,
        "helios_synth": best("builtin:helios-synth", args.repeat, jobs=args.jobs),
        "helios_csv": best(str(folder), args.repeat),
        "csv_bytes": log.stat().st_size,
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
