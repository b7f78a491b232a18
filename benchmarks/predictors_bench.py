"""Predictor benchmarks: QSSF P_M training time on 1,000,000 synthetic jobs and prediction latency.

    python benchmarks/predictors_bench.py [--rows 1000000] [--json]

Targets (issue): training ≤ 60 s with num_threads = 2; batched prediction ≤ 1 ms per job.
The synthetic jobs have the QSSF feature layout (user, VC, name bucket, category, demands,
time); durations are log-normal around per-user × per-bucket × GPU effects.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import lightgbm as lgb
import numpy as np
from qosmos.extender.core.types import Job
from qosmos.predictors.qssf import FEATURES, RAW, QSSFPredictor


def synthetic_rows(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    user = rng.integers(0, 2000, n)
    vc = rng.integers(0, 30, n)
    bucket = rng.integers(0, 5000, n)
    cat = rng.integers(0, 4, n)
    gpus = rng.choice([0, 1, 2, 4, 8, 16, 32], n, p=[0.1, 0.5, 0.15, 0.1, 0.1, 0.03, 0.02])
    gpu_milli = np.where(gpus == 1, rng.choice([250, 500, 1000], n), 1000)
    cpu = rng.integers(1, 64, n) * 1000
    mem = rng.integers(1, 256, n) * 1024
    t = np.sort(rng.uniform(0, 180 * 86400, n))
    hour, weekday, day = (t // 3600) % 24, (t // 86400 + 3) % 7, (t // 86400) % 31
    u_eff = rng.normal(0, 1.0, 2000)[user]
    b_eff = rng.normal(0, 1.5, 5000)[bucket]
    y = 6 + u_eff + b_eff + 0.3 * np.log2(gpus + 1) + 0.1 * np.sin(hour / 24 * 2 * np.pi) + rng.normal(0, 0.7, n)
    x = np.column_stack([user, vc, bucket, cat, gpus, gpu_milli, cpu, mem, hour, weekday, day]).astype(float)
    assert x.shape[1] == len(RAW)
    return x, y


def bench(rows: int) -> dict[str, object]:
    x, y = synthetic_rows(rows)
    q = QSSFPredictor()
    t0, c0 = time.perf_counter(), time.process_time()
    model = q.fit_arrays(x, y)  # target statistics + LightGBM, as QSSFPredictor.fit does
    train_s, train_cpu = time.perf_counter() - t0, time.process_time() - c0
    # batched latency: encoding + LightGBM on 10,000 raw rows
    xb = x[-10_000:]
    model.predict(q.encode(xb[:100]))  # warm
    t1 = time.perf_counter()
    model.predict(q.encode(xb))
    batch_ms = 1000 * (time.perf_counter() - t1) / len(xb)
    # end to end through QSSFPredictor: feature extraction from Job objects + P_R + P_M
    jobs = [
        Job(id=f"b{i}", submit_time=float(i * 60), gpus=1 + i % 4, user=f"u{i % 97}", name=f"train_net_{i % 13}_{i}")
        for i in range(2000)
    ]
    q.annotate(jobs[:10])
    t2 = time.perf_counter()
    q.annotate(jobs)
    e2e_ms = 1000 * (time.perf_counter() - t2) / len(jobs)
    t3 = time.perf_counter()
    for j in jobs[:200]:
        q.annotate([j])
    single_ms = 1000 * (time.perf_counter() - t3) / 200
    return {
        "rows": rows,
        "features": len(FEATURES),
        "num_rounds": q.num_rounds,
        "num_threads": model.params["num_threads"],
        "train_seconds": round(train_s, 2),
        "train_cpu_seconds": round(train_cpu, 2),
        "predict_ms_per_job_batched": round(batch_ms, 5),
        "annotate_ms_per_job_batched": round(e2e_ms, 4),
        "annotate_ms_single_job": round(single_ms, 4),
        "cpus": os.cpu_count(),
        "lightgbm": lgb.__version__,
        "python": platform.python_version(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = bench(args.rows)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k:40s} {v}")


if __name__ == "__main__":
    main()
