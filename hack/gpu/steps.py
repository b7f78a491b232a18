"""Per-step times of launch-bound training steps, to see what shape their noise has (issue 23 §2).

    python hack/gpu/steps.py --out DIR [--seconds 12] [--cpus CORE] [--tag NAME]

For each (model, batch) below: build, warm up, then run steps for ``--seconds`` recording, per step,
the host's clock when the step's Python call returned (no synchronisation) and a CUDA event
recorded after the step (the GPU's timeline). Writes ``DIR/steps-<tag>.csv`` (model, batch, step,
host_s, gpu_ms) so the spread of window medians, per-step medians and minima can be compared
offline: spikes (a few slow steps) call for another estimator than a slow drift does.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

CASES = (("ResNet18", 64), ("ResNet18", 256), ("MobileNetV2", 64), ("NeuMF", 1024))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--cpus", default=None, help="cpu-list to pin to (default: not pinned)")
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)
    import importlib.util  # hack/gpu/profile.py (a stdlib module has its name): imports qosmos from this checkout

    spec = importlib.util.spec_from_file_location("gpu_profile", Path(__file__).with_name("profile.py"))
    assert spec is not None and spec.loader is not None
    gpu_profile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_profile)
    gpu_profile.import_qosmos()
    from qosmos.predictors.timing import parse_cpu_list

    if args.cpus is not None:  # before torch starts its threads, so they inherit it
        os.sched_setaffinity(0, parse_cpu_list(args.cpus))
    import torch
    from qosmos.predictors.torch_models import workload

    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    args.out.mkdir(parents=True, exist_ok=True)
    tag = args.tag or ("pinned" if args.cpus is not None else "free")
    path = args.out / f"steps-{tag}.csv"
    import contextlib
    import gc

    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["model", "batch", "step", "host_s", "gpu_ms"])
        for model, batch in CASES:
            step = workload(model, batch, "cuda").step
            for _ in range(30):
                step(contextlib.nullcontext, None)
            torch.cuda.synchronize()
            n = 0
            host: list[float] = []
            events = []
            t0 = time.perf_counter()
            first = torch.cuda.Event(enable_timing=True)
            first.record()
            gc.disable()
            while time.perf_counter() - t0 < args.seconds:
                step(contextlib.nullcontext, None)
                host.append(time.perf_counter() - t0)
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                events.append(e)
                n += 1
            gc.enable()
            torch.cuda.synchronize()
            prev = first
            for i, (h, e) in enumerate(zip(host, events, strict=True)):
                w.writerow([model, batch, i, f"{h:.6f}", f"{prev.elapsed_time(e):.4f}"])
                prev = e
            print(f"{tag} {model} {batch}: {n} steps in {args.seconds} s", flush=True)
            del step
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
