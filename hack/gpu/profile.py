"""Measure the built-in model list on this machine's GPU (and its CPU cores), for the model database.

    python hack/gpu/profile.py --out DIR [--deadline 420] [--smoke]

Runs from a checkout without installing qosmos (a GPU machine may have PyTorch and numpy but no
PyPI): the package is imported through a symlink view of setup.py's mapping (hack/layers.py).
The measuring code is ``qosmos profile run``'s own (``measure_torch`` and, with ``--inference``,
``measure_inference_torch``), called per model and batch size so that a deadline leaves every
finished sample on disk. Writes to DIR:

- ``training.csv``: single-GPU training samples for ``qosmos profile fit`` (fp32, TF32 off);
- ``inference.csv``: C(b) on the GPU per batch size and on 2..16 CPU cores, for
  ``qosmos profile inference``;
- ``env.json``: GPU, driver, CUDA, cuDNN, torch, torchvision, Python, CPU count, date, command;
- ``log.txt``: progress, every skipped model or batch size and why.

Commit DIR under ``predictors/measured/<gpu>-<date>/``; ``hack/gpu/README.md`` says how the
database picks the samples up. ``--smoke`` runs a few tiny sizes on whatever device is there
(for checking this script on a CPU machine).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Priority order: the deadline drops the tail. Training sizes are twelve points per model so a fit on
# six can be checked on the other six (issue 23 §2); the ranges stay within what each job trains at.
IMAGENET = (8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256)
CIFAR = (16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
TRAINING: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("ResNet50", IMAGENET),
    ("ResNet18", CIFAR),
    ("MobileNetV3", IMAGENET),
    ("MobileNetV2", CIFAR),
    ("EfficientNet", CIFAR),
    ("VGG", CIFAR),
    ("BERT", (1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 32)),
    ("Transformer", (16, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512)),
    ("LSTM", (8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320)),
    ("DCGAN", (16, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512)),
    ("PointNet", (8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320)),
    ("NeuMF", (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)),
)
INFERENCE_GPU: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("ResNet50", (1, 2, 4, 8, 16, 20, 32, 64, 128, 256)),
    ("MobileNetV3", (1, 2, 4, 8, 16, 32, 64, 128, 256)),
    ("ResNet18", (1, 8, 32, 128, 512)),
    ("BERT", (1, 2, 4, 8, 16, 32)),
)
INFERENCE_CPU: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...] = (
    ("ResNet50", (2, 4, 8, 16), (1, 2, 4, 8)),
    ("MobileNetV3", (2, 4, 8, 16), (1, 2, 4, 8)),
)
# Multi-GPU (d_gpn > 1, one node, DistributedDataParallel) at one global batch per model: Eq. 8's
# γ, λ need two or more shapes of one global batch. Only on a machine with several GPUs.
MULTI_GPU: tuple[tuple[str, int], ...] = (("ResNet50", 256), ("BERT", 32), ("ResNet18", 1024), ("VGG", 1024))
SMOKE_TRAINING = (("ResNet18", (2, 4)), ("BERT", (1,)), ("DCGAN", (2,)), ("NeuMF", (8,)), ("PointNet", (2,)),
                  ("LSTM", (2,)), ("Transformer", (2,)), ("VGG", (2,)))  # fmt: skip
SMOKE_INFERENCE_GPU = (("ResNet50", (1, 2)),)
SMOKE_INFERENCE_CPU = (("ResNet50", (1, 2), (1, 2)),)


def import_qosmos() -> None:
    """Make ``import qosmos.<component>`` work from this checkout without installing it."""
    try:
        import qosmos.predictors  # noqa: F401  (installed: nothing to do)

        return
    except ImportError:
        pass
    sys.path.insert(0, str(REPO / "hack"))
    import layers

    view = Path(tempfile.mkdtemp(prefix="qosmos-view-"))
    layers.build_view(view, layers.components())
    sys.path.insert(0, str(view))
    # multi-GPU runs start one process per GPU: they import qosmos through the same view
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(view), os.environ.get("PYTHONPATH", "")]))


def environment(argv: list[str]) -> dict[str, object]:
    import torch

    env: dict[str, object] = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(["python", "hack/gpu/profile.py", *argv]),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cpu_count": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
    }
    try:
        import torchvision

        env["torchvision"] = torchvision.__version__
    except ImportError:
        env["torchvision"] = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env |= {"gpu": p.name, "gpu_memory_mib": p.total_memory // 2**20, "capability": f"{p.major}.{p.minor}"}
        try:
            q = "--query-gpu=name,memory.total,driver_version,power.limit,clocks.max.sm"
            env["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", q, "--format=csv,noheader"], capture_output=True, text=True, timeout=20
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError) as e:
            env["nvidia_smi"] = f"unavailable: {e}"
    try:
        with open("/proc/cpuinfo") as fh:
            env["cpu"] = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), env["cpu"])
    except OSError:
        pass
    return env


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--deadline", type=float, default=420.0, help="seconds; later measurements are skipped")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, any device: checks this script")
    ap.add_argument("--steps", type=int, default=2, help="steps per measured window at least (training)")
    ap.add_argument("--windows", type=int, default=5, help="measured windows per batch size")
    ap.add_argument("--min-window", type=float, default=0.2, help="seconds a measured window lasts at least")
    ap.add_argument("--model-budget", type=float, default=15.0,
                    help="seconds left below which no further model's training is started")  # fmt: skip
    ap.add_argument("--models", default="", help="comma-separated: measure only these (default: the whole list)")
    ap.add_argument("--no-inference", action="store_true", help="training samples only")
    ap.add_argument("--sequential", action="store_true",
                    help="one batch size after another instead of interleaved windows (to compare the two)")  # fmt: skip
    ap.add_argument("--cpus", default="",
                    help="cpu-list to run on (default: one core, the middle one; 'all': no pinning). A launch-bound "
                         "step is the host thread's speed: pinned, it ran 40 %% faster and far steadier on an H200 VM")  # fmt: skip
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    log_fh = open(args.out / "log.txt", "a", buffering=1)  # noqa: SIM115 (open for the whole run)

    def log(msg: str) -> None:
        line = f"[{time.monotonic() - t0:7.1f}s] {msg}"
        print(line, flush=True)
        log_fh.write(line + "\n")

    def left() -> float:
        return args.deadline - (time.monotonic() - t0)

    import_qosmos()
    from qosmos.predictors.timing import parse_cpu_list

    if args.cpus != "all":  # before torch starts its threads, so they inherit the core
        os.sched_setaffinity(0, parse_cpu_list(args.cpus or str((os.cpu_count() or 2) // 2)))
    import torch
    from qosmos.predictors.inference_profiles import measure_inference_torch, write_inference_samples
    from qosmos.predictors.profiler import measure_torch, write_samples

    env = environment(argv)
    (args.out / "env.json").write_text(json.dumps(env, indent=2) + "\n")
    log("environment: " + json.dumps(env))
    training_plan = SMOKE_TRAINING if args.smoke else TRAINING
    gpu_plan = SMOKE_INFERENCE_GPU if args.smoke else INFERENCE_GPU
    cpu_plan = SMOKE_INFERENCE_CPU if args.smoke else INFERENCE_CPU
    steps, windows = (1, 2) if args.smoke else (args.steps, args.windows)
    training: list = []
    inference: list = []

    def attempt(what: str, fn, *a, **kw) -> list:  # type: ignore[no-untyped-def]
        try:
            return fn(*a, **kw)
        except torch.cuda.OutOfMemoryError:
            log(f"{what}: out of GPU memory, skipped")
        except Exception:  # one model's failure must not cost the others' measurements
            log(f"{what}: failed, skipped\n" + traceback.format_exc())
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return []

    # Training first (GENIE's held-out target is over every model), then inference (SODA's
    # thresholds); the deadline cuts from the end.
    order: list[tuple] = [("train", m, b) for m, b in training_plan]
    if not args.no_inference:
        order += [("gpu", m, b) for m, b in gpu_plan] + [("cpu", m, b, c) for m, c, b in cpu_plan]
    gpu_count = int(env.get("gpu_count") or 0)
    shapes = [g for g in (2, 4, 8) if g <= gpu_count]
    if args.smoke and not shapes:
        shapes = [2]  # smoke: gloo processes on the CPU
    multi_plan = (("ResNet18", 4),) if args.smoke else MULTI_GPU
    order += [("multi", m, [b], shapes) for m, b in multi_plan if shapes]
    if args.models:  # in the order asked (within training, inference, multi-GPU): the deadline cuts the tail
        wanted = [m.strip().lower() for m in args.models.split(",") if m.strip()]
        kinds = {"train": 0, "gpu": 1, "cpu": 2, "multi": 3}
        order = [o for o in order if o[1].lower() in wanted]
        order.sort(key=lambda o: (kinds[o[0]], wanted.index(o[1].lower())))
    for item in order:
        kind, model, sizes = item[0], item[1], item[2]
        if kind == "gpu" and not torch.cuda.is_available():
            continue
        if kind == "train":  # all batch sizes of a model at once: their windows are interleaved
            if left() < args.model_budget:
                log(f"deadline: train {model} and later not measured")
                break
            got = attempt(
                f"train {model}", measure_torch, model, list(sizes), steps=steps, warmup=3, windows=windows,
                max_warmup=20, min_window_s=0.01 if args.smoke else args.min_window, interleave=not args.sequential,
            )  # fmt: skip
            training += got
            if got:
                write_samples(args.out / "training.csv", training)
            for g in got:
                log(f"train {model} batch {g.batch}: {g.rate:.1f} samples/s (spread {g.spread_pct:.1f} %)")
            continue
        for b in sizes:
            if left() < 5:
                log(f"deadline: {kind} {model} batch {b} and later not measured")
                break
            what = f"{kind} {model} batch {b}"
            need = max(item[3]) if kind in ("multi", "cpu") else 1  # a process per GPU; threads per CPU core count
            if len(os.sched_getaffinity(0)) < need:
                os.sched_setaffinity(0, range(os.cpu_count() or 1))
                log(f"{kind}: unpinned (needs {need} cores)")
            if kind == "multi":
                for g in item[3]:
                    if b % g or left() < 5:
                        continue
                    got = attempt(
                        f"{what} on {g} GPUs", measure_torch, model, [b], steps=steps, warmup=3, windows=windows,
                        max_warmup=20, min_window_s=0.01 if args.smoke else args.min_window, gpus=g, timeout_s=left(),
                        cpus=os.sched_getaffinity(0),  # each rank pinned to its own share of the cores
                    )  # fmt: skip
                    training += got
                    if got:
                        write_samples(args.out / "training.csv", training)
                        log(f"{what} on {g} GPUs: {got[0].rate:.1f} samples/s (spread {got[0].spread_pct:.1f} %)")
            else:
                cores = item[3] if kind == "cpu" else ()
                gpu_batches = [b] if kind == "gpu" else []
                got = attempt(
                    what, _inference, measure_inference_torch, model, gpu_batches, cores, [b], smoke=args.smoke
                )
                inference += got
                if got:
                    write_inference_samples(args.out / "inference.csv", inference)
                    log(what + ": " + ", ".join(f"{g.cores or 'gpu'}: {g.compute_s * 1000:.3f} ms" for g in got))
        else:
            continue
        break  # the deadline ended the plan
    log(f"done: {len(training)} training and {len(inference)} inference samples in {time.monotonic() - t0:.0f} s")
    return 0 if training or inference else 1


def _inference(measure, model: str, gpu_batches: list[int], cores: tuple[int, ...], cpu_batches: list[int],  # type: ignore[no-untyped-def]
               *, smoke: bool) -> list:  # fmt: skip
    if gpu_batches:  # the GPU alone: this call measures no CPU cores
        return measure(model, gpu_batches, (), warmup=5, passes=2 if smoke else 10, windows=2 if smoke else 5)
    return measure(model, [], cores, cpu_batches, warmup=2, passes=5, windows=3, gpu=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
