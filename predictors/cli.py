"""``qosmos predict ...`` and ``qosmos profile ...`` (registered by qosmos/cli.py)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast

import typer
from qosmos.extender.core.errors import InvalidInput
from rich.console import Console
from rich.table import Table

from qosmos.clitools import clean_errors

predict_app = typer.Typer(
    help="Predictors: QSSF durations, CES node forecasts, elapsed-time run times.", no_args_is_help=True
)
profile_app = typer.Typer(
    help="GENIE lightweight profiling (seed 001 §5.1.5) and the model database.", no_args_is_help=True
)
console = Console()
F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_SIGMAS = tuple(range(0, 65, 5))
DEFAULT_XIS = (0.0, 2.0, 5.0, 10.0)


# OSError: a folder, an unreadable file or an occupied path where a file was expected
_clean_errors = clean_errors(OSError)


def _data_file(given: Path | None, *relative: str) -> Path:
    if given is not None:
        return given
    from qosmos.predictors.data import shared_data_dir

    base = shared_data_dir()
    if base is None:
        raise InvalidInput("data", "../shared/data", "not found; pass the file explicitly or set QOSMOS_SHARED")
    return base.joinpath(*relative)


def _json_default(o: object) -> object:
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return str(o)


def _dump(obj: object) -> str:
    def clean(x: object) -> object:
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        if hasattr(x, "item"):
            return clean(x.item())  # numpy scalars
        return x

    return json.dumps(clean(obj), indent=2, default=_json_default)


# ---- predict ----------------------------------------------------------------------------------


@predict_app.command("ces")
@_clean_errors
def predict_ces(
    series: Annotated[Path, typer.Option(help="per-minute CSV of running nodes: time,active,total")],
    train_until: Annotated[str, typer.Option(help="train the forecaster on data before this date (UTC)")],
    eval_from: Annotated[str, typer.Option(help="start of the evaluation window (UTC, YYYY-MM-DD[ HH:MM])")],
    eval_to: Annotated[str, typer.Option(help="end of the evaluation window; a bare date includes that whole day")],
    out: Annotated[Path, typer.Option(help="output folder for ces.json and ces.png")],
    sigma: Annotated[
        str,
        typer.Option(
            help="buffer nodes kept awake above demand: a whole number, or 'auto' to choose it on a "
            "validation window that ends where training ends (never on the evaluation window)"
        ),
    ] = "auto",
    sigmas: Annotated[str, typer.Option(help="candidates for --sigma auto (comma-separated)")] = ",".join(
        str(x) for x in DEFAULT_SIGMAS
    ),
    validation_days: Annotated[
        int, typer.Option(min=1, help="--sigma auto: days before --train-until used for validation")
    ] = 14,
    max_wakeups: Annotated[
        float, typer.Option(min=0.0, help="--sigma auto: most wake-ups per day accepted (Helios: 0.5)")
    ] = 1.0,
    xi_h: Annotated[
        str,
        typer.Option(
            help="ξ_H: sleep only when running nodes fell by at least this over the past hour; a number, or "
            "'auto' to choose it with σ on the validation window among --xis"
        ),
    ] = "auto",
    xi_p: Annotated[
        str,
        typer.Option(
            help="ξ_P: sleep only when the forecast falls by at least this over the next 3 hours; a number, or "
            "'auto' (among --xis)"
        ),
    ] = "auto",
    xis: Annotated[str, typer.Option(help="candidates for --xi-h/--xi-p auto (comma-separated)")] = ",".join(
        f"{x:g}" for x in DEFAULT_XIS
    ),
    boot_delay: Annotated[int, typer.Option(min=0, help="minutes for a woken node to serve")] = 5,
    rounds: Annotated[int, typer.Option(min=1, help="LightGBM boosting rounds of the forecaster")] = 150,
) -> None:
    """Forecast running nodes and replay Cluster Energy Saving (Helios §4.3): idle nodes sleep when
    demand is forecast to stay low. Writes ces.json and ces.png."""
    from dataclasses import asdict

    from qosmos.predictors.ces import CESConfig, choose_knobs, parse_when, plot_ces, run_ces, sigma_tradeoff
    from qosmos.predictors.data import load_node_series

    t_until, e_from, e_to = parse_when(train_until), parse_when(eval_from), parse_when(eval_to, end_of_day=True)
    fixed = _auto_int(sigma, "--sigma")
    if fixed is not None and fixed < 0:
        raise InvalidInput("--sigma", sigma, "must be >= 0")
    fixed_h = _auto_float(xi_h, "--xi-h")
    fixed_p = _auto_float(xi_p, "--xi-p")
    base = CESConfig(sigma=0, xi_h=fixed_h or 0.0, xi_p=fixed_p or 0.0, boot_delay=boot_delay)
    if not t_until <= e_from < e_to:
        raise InvalidInput(
            "dates", f"--train-until {train_until} --eval-from {eval_from} --eval-to {eval_to}",
            "need train_until <= eval_from < eval_to",
        )  # fmt: skip
    if out.exists() and not out.is_dir():
        raise InvalidInput("--out", str(out), "exists and is not a folder")
    minutes, active, total = load_node_series(series)
    selection: dict[str, object] | None = None
    chosen, chosen_h, chosen_p = fixed or 0, base.xi_h, base.xi_p
    if fixed is None or fixed_h is None or fixed_p is None:
        cand_s = _int_list(sigmas, "--sigmas") if fixed is None else [fixed]
        cand_xi = _float_list(xis, "--xis") if fixed_h is None or fixed_p is None else []
        val_from = t_until - validation_days * 1440
        rows = sigma_tradeoff(
            minutes, active, total, val_from, t_until, cand_s, base, num_rounds=rounds,
            xis_h=cand_xi if fixed_h is None else None, xis_p=cand_xi if fixed_p is None else None,
        )  # fmt: skip
        best, why = choose_knobs(rows, max_wakeups)
        chosen, chosen_h, chosen_p = int(best["sigma"]), float(best["xi_h"]), float(best["xi_p"])
        per_sigma = [r for r in rows if (r["xi_h"], r["xi_p"]) == (chosen_h, chosen_p)]  # σ at the chosen ξ
        selection = {
            "validation_window": [_day(val_from), _day(t_until)],
            "rule": why,
            "max_wakeups_per_day": max_wakeups,
            "chosen_sigma": chosen,
            "chosen_xi_h": chosen_h,
            "chosen_xi_p": chosen_p,
            "tradeoff": per_sigma,
            "tradeoff_all": rows,
        }
        what = "σ" if fixed is None else f"σ = {fixed}"
        if fixed_h is None or fixed_p is None:
            what += ", ξ_H, ξ_P" if fixed_h is None and fixed_p is None else (", ξ_H" if fixed_h is None else ", ξ_P")
        t = Table(title=f"{what} chosen on the validation window {_day(val_from)} … {_day(t_until)} ({why})")
        for c in ("σ", "ξ_H", "ξ_P", "node utilisation", "wake-ups/day", "sleeping nodes", "nodes/wake-up",
                  "delayed node-min"):  # fmt: skip
            t.add_column(c, justify="right")
        for r in per_sigma:
            mark = " ←" if r is best else ""
            t.add_row(
                f"{r['sigma']}{mark}",
                f"{r['xi_h']:g}",
                f"{r['xi_p']:g}",
                f"{100 * r['node_util']:.1f} %",
                f"{r['daily_wakeups']:.2f}",
                f"{r['avg_sleep_nodes']:.1f}",
                f"{r['nodes_per_wakeup']:.1f}",
                f"{r['delayed_node_minutes']:.0f}",
            )
        console.print(t)
    cfg = CESConfig(**{**asdict(base), "sigma": chosen, "xi_h": chosen_h, "xi_p": chosen_p})
    summary, arrays = run_ces(minutes, active, total, t_until, e_from, e_to, cfg, num_rounds=rounds)
    summary["series"] = str(series)
    summary["train_until"], summary["eval_from"], summary["eval_to"] = train_until, eval_from, eval_to
    summary["sigma_selection"] = selection or {
        "chosen_sigma": chosen,
        "chosen_xi_h": chosen_h,
        "chosen_xi_p": chosen_p,
        "rule": "given with --sigma, --xi-h, --xi-p",
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "ces.json").write_text(_dump(summary))
    plot_ces(
        arrays,
        out / "ces.png",
        f"CES on {series.name}: {eval_from} … {eval_to}, σ = {chosen}, ξ_H = {chosen_h:g}, ξ_P = {chosen_p:g}",
    )
    t = Table(
        title=f"Cluster Energy Saving on the evaluation window, σ = {chosen}, ξ_H = {chosen_h:g}, ξ_P = {chosen_p:g} "
        "(Helios Table 5 quantities)"
    )
    t.add_column("metric")
    t.add_column("value", justify="right")
    labels = {
        "smape": "forecast error, SMAPE % (all horizons)",
        "smape_10min": "SMAPE % 10 min ahead",
        "smape_3h": "SMAPE % 3 h ahead",
        "smape_persistence": "SMAPE % of 'no change' forecast",
        "avg_sleep_nodes": "average sleeping nodes",
        "daily_wakeups": "wake-ups per day",
        "nodes_per_wakeup": "nodes per wake-up",
        "node_util_before": "node utilisation without CES",
        "node_util_after": "node utilisation with CES",
        "node_util_before_per_minute": "… without CES, raw per-minute series",
        "node_util_after_per_minute": "… with CES, raw per-minute series",
        "delayed_node_minutes": "node-minutes of demand waiting for a boot",
    }
    for k, label in labels.items():
        v = float(summary[k])  # type: ignore[arg-type]
        t.add_row(label, f"{100 * v:.1f} %" if k.startswith("node_util") else f"{v:.2f}")
    console.print(t)
    console.print(f"wrote {out / 'ces.json'} and {out / 'ces.png'}")


class Blend(StrEnum):
    linear = "linear"
    log = "log"


@predict_app.command("qssf")
@_clean_errors
def predict_qssf(
    pods: Annotated[
        Path | None, typer.Option(help="openb pod list CSV (default: the shared data's openb_pod_list_default.csv)")
    ] = None,
    train_frac: Annotated[
        float, typer.Option(help="share of pods (by creation time) that only warm the history up; the rest are scored")
    ] = 0.7,
    lam: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="weight of the rolling estimate against the LightGBM estimate")
    ] = 0.5,
    blend: Annotated[
        Blend, typer.Option(help="linear: λ·rolling + (1−λ)·model (Helios); log: the same average of log durations")
    ] = Blend.linear,
    train_after: Annotated[
        int, typer.Option(min=1, help="finished jobs before the LightGBM model is first trained")
    ] = 1000,
    retrain_every: Annotated[int, typer.Option(min=1, help="finished jobs between retrainings")] = 1000,
    rounds: Annotated[int, typer.Option(min=1, help="LightGBM boosting rounds")] = 150,
    save: Annotated[
        Path | None,
        typer.Option(
            help="save the predictor as trained at the end of the replay into this folder (default: not saved)"
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="let --save overwrite a predictor saved there before")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """Replay openb pods through the online QSSF duration predictor (Helios §4.2) and score it
    (rank correlation with the true durations, typical error factor)."""
    from qosmos.predictors.data import load_openb_pods
    from qosmos.predictors.qssf import OnlineQSSF, evaluate_qssf

    if save is not None:
        _check_save_dir(save, force)
    path = _data_file(pods, "alibaba-openb-2023", "openb_pod_list_default.csv")
    jobs = load_openb_pods(path)
    q = OnlineQSSF(lam, blend.value, train_after=train_after, retrain_every=retrain_every, num_rounds=rounds)
    result = evaluate_qssf(jobs, train_frac=train_frac, lam=lam, blend=blend.value, predictor=q)
    result["pods"] = str(path)
    if save is not None:
        q.q.save(save)
        result["saved"] = str(save)
    if as_json:
        print(_dump(result))
        return
    t = Table(
        title=f"QSSF on {path.name} ({blend.value} blend): warm-up {result['n_train']}, scored {result['n_test']}, "
        f"{result['us_per_job']} µs/job"
    )
    for c in ("λ", "Spearman (duration)", "Spearman (GPU time)", "median |log err|"):
        t.add_column(c, justify="right")
    by_lambda = cast("dict[str, dict[str, float]]", result["by_lambda"])  # evaluate_qssf's metrics per λ
    for k, v in by_lambda.items():
        t.add_row(k, f"{v['spearman']:.3f}", f"{v['spearman_gpu_time']:.3f}", f"{v['median_abs_log_error']:.3f}")
    console.print(t)
    if save is not None:
        console.print(f"saved the predictor to {save}")


def _check_save_dir(save: Path, force: bool) -> None:
    if save.exists() and not save.is_dir():
        raise InvalidInput("--save", str(save), "exists and is not a folder")
    if save.is_dir() and any((save / f).exists() for f in ("qssf_state.json", "qssf_pm.txt")) and not force:
        raise InvalidInput("--save", str(save), "already holds a saved predictor; pass --force to overwrite it")


def _auto_int(text: str, option: str) -> int | None:
    """None for 'auto', else a whole number."""
    if text.strip().lower() == "auto":
        return None
    try:
        return int(text)
    except ValueError:
        raise InvalidInput(option, text, "expected a whole number of nodes or 'auto'") from None


def _auto_float(text: str, option: str) -> float | None:
    """None for 'auto', else a number."""
    if text.strip().lower() == "auto":
        return None
    try:
        return float(text)
    except ValueError:
        raise InvalidInput(option, text, "expected a number of nodes or 'auto'") from None


def _float_list(text: str, option: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InvalidInput(option, text, "expected comma-separated numbers") from None
    if not values:
        raise InvalidInput(option, text, "expected one or more numbers")
    return values


def _int_list(text: str, option: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InvalidInput(option, text, "expected comma-separated whole numbers") from None
    if not values or min(values) < 0:
        raise InvalidInput(option, text, "expected one or more whole numbers >= 0")
    return values


def _day(minute: int) -> str:
    from qosmos.predictors.ces import format_minute

    return format_minute(minute).removesuffix(" 00:00")


class RuntimeData(StrEnum):
    openb = "openb"
    philly = "philly"


@predict_app.command("runtime")
@_clean_errors
def predict_runtime(
    data: Annotated[
        RuntimeData, typer.Option(help="which shared data set: openb pods or Philly run times")
    ] = RuntimeData.openb,
    path: Annotated[Path | None, typer.Option(help="read this file instead of the shared data's")] = None,
    seed: Annotated[int, typer.Option(help="shuffle seed for philly (its file is sorted by run time)")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """How well run times are predicted with and without the time a job has already run (seed 004 §VI-A)."""
    import numpy as np
    from qosmos.predictors.data import load_openb_pods, load_runtimes
    from qosmos.predictors.runtime import evaluate_runtime

    if data is RuntimeData.openb:
        f = _data_file(path, "alibaba-openb-2023", "openb_pod_list_default.csv")
        jobs = load_openb_pods(f)
        result = evaluate_runtime(np.array([j.duration for j in jobs], float), jobs)
    else:
        f = _data_file(path, "philly", "philly_runtime.csv")
        result = evaluate_runtime(load_runtimes(f), shuffle_seed=seed)
    result["data"], result["file"] = data.value, str(f)
    if as_json:
        print(_dump(result))
        return
    t = Table(title=f"Run-time prediction on {data.value} (accuracy / underestimation rate)")
    t.add_column("elapsed")
    t.add_column("jobs", justify="right")
    methods = ("last2", "last2_elapsed", "lgbm", "lgbm_elapsed")
    for m in methods:
        t.add_column(m, justify="right")
    thresholds = cast("list[dict[str, Any]]", result["thresholds"])  # evaluate_runtime's rows, scores per method
    for row in thresholds:
        t.add_row(
            f"{row['fraction']:.3g}×mean ({row['elapsed_s']:.0f}s)",
            str(row["jobs"]),
            *(f"{row[m]['accuracy']:.3f} / {row[m]['underestimation_rate']:.3f}" for m in methods),
        )
    console.print(t)


# ---- profile ----------------------------------------------------------------------------------


@profile_app.command("fit")
@_clean_errors
def profile_fit(
    samples: Annotated[
        list[Path],
        typer.Argument(
            help="CSV of measured runs with columns model,batch,d_node,d_gpn,rate; several files (repeated "
            "sessions) are fitted together, a batch size measured more than once at its median rate"
        ),
    ],
    db: Annotated[
        Path | None,
        typer.Option(
            help="model database to update (default: $QOSMOS_MODELDB, else ~/.config/qosmos/models.json); "
            "qosmos explain, simulate, the extender and the operator read the same file"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """Fit each model's single-GPU throughput against batch size in three forms (GENIE's Eq. 7 quadratic,
    an affine iteration time, a monotone interpolation of the measured iteration times), keep the form
    with the lowest leave-one-out error, fit the multi-GPU communication cost (Eq. 8) on top, and store
    the profiles in the model database."""
    from qosmos.extender.core.throughput import FORMS
    from qosmos.predictors.profiler import fit_file, modeldb_path, profile_json, upsert_profiles

    target = modeldb_path(db)
    reports = fit_file(samples)
    upsert_profiles(target, [r.profile for r in reports])
    rows: list[dict[str, Any]] = [
        {
            **profile_json(r.profile),
            "fit_mape_pct": r.mape,
            "single_gpu_runs": r.single_gpu_runs,
            "multi_gpu_runs": r.multi_gpu_runs,
            "comm_fitted": r.comm_fitted,
            "candidates": r.candidates,
        }
        for r in reports
    ]
    if as_json:
        print(_dump({"db": str(target), "profiles": rows}))
        return
    t = Table(title=f"profiles written to {target}")
    t.add_column("model", no_wrap=True)
    t.add_column("form", no_wrap=True)
    t.add_column("held-out %", justify="right", no_wrap=True)
    for c in ("γ/λ", "runs", "fit %"):
        t.add_column(c, justify="right", no_wrap=True)
    fallback = False
    for r in rows:
        cands: dict[str, float | None] = r["candidates"]
        chosen = r["form"]
        if r["heldout_error"] is None:
            chosen, fallback = chosen + "*", True
        t.add_row(
            r["model"],
            chosen,
            " / ".join("—" if cands.get(f) is None else f"{cands[f]:.2f}" for f in FORMS),
            f"{r['gamma']:.3g}/{r['lam']:.3g}",
            f"{r['single_gpu_runs']}/{r['multi_gpu_runs']}",
            f"{r['fit_mape_pct']:.2f}",
        )
    console.print(t)
    console.print(
        "held-out %: leave-one-out error of sPR per form, " + " / ".join(FORMS) + "; — not fitted "
        "(too few batch sizes: the quadratic's held-out error needs 4, the others 3); "
        "form: the lowest, ties to the simpler; runs: single-GPU/multi-GPU; fit %: error over all runs in the form"
        + ("; * no form could be compared: Eq. 7 as fitted" if fallback else "")
    )


@profile_app.command("run")
@_clean_errors
def profile_run(
    out: Annotated[Path, typer.Option(help="samples CSV to write")] = Path("samples.csv"),
    model: Annotated[
        str, typer.Option(help="torchvision model name, or 'mlp' for a small built-in network")
    ] = "resnet18",
    batches: Annotated[str, typer.Option(help="comma-separated batch sizes")] = "16,32,64",
    steps: Annotated[int, typer.Option(min=1, help="timed steps per measured window")] = 10,
    windows: Annotated[
        int, typer.Option(min=1, help="measured windows per batch size (their rates' spread is reported)")
    ] = 5,
    warmup: Annotated[
        int, typer.Option(min=0, help="warm-up steps at least; warm-up goes on until the step time is stable")
    ] = 3,
    precision: Annotated[
        str, typer.Option(help="fp32 (TF32 off) | tf32 | bf16 | fp16 (autocast, AMP training)")
    ] = "fp32",
    inference: Annotated[
        bool,
        typer.Option(
            "--inference",
            help="time forward passes under torch.inference_mode instead: C(b) on the GPU at --batches and "
            "on --cores CPU cores; writes inference samples for `qosmos profile inference`",
        ),
    ] = False,
    cores: Annotated[
        str, typer.Option(help="with --inference: comma-separated CPU core counts (torch.set_num_threads)")
    ] = "16",
    cpu_batches: Annotated[
        str, typer.Option(help="with --inference: comma-separated batch sizes on the CPU")
    ] = "1,2,4,8,16",
    gpu_model: Annotated[
        str | None,
        typer.Option(help="with --inference: the GPU model's name in the profile (default: CUDA's device name)"),
    ] = None,
    gpus: Annotated[
        int,
        typer.Option(
            min=1,
            help="data-parallel processes on this node, one per GPU (DistributedDataParallel; gloo processes on a "
            "machine without CUDA), meeting through a file and talking over loopback: multi-GPU samples, d_gpn = gpus, "
            "for GENIE Eq. 8; --batches are global. Under your own torchrun (several nodes too) leave it out: the "
            "world is torchrun's",
        ),
    ] = 1,
    interleave: Annotated[
        bool,
        typer.Option(
            "--interleave/--sequential",
            help="take the windows in rounds over all batch sizes, so a drift of the host moves every size alike "
            "(holds every size's model on the device at once); --sequential: one batch size after another",
        ),
    ] = True,
    cpus: Annotated[
        str | None,
        typer.Option(
            help="run on these CPUs only (cpu-list: '8', '0-3,8'; one per process with --gpus): a launch-bound step "
            "is the host thread's speed, steadier on a core of its own (recorded as host_cpus); default: not pinned",
        ),
    ] = None,
) -> None:
    """Time real PyTorch training steps on this machine's GPU (or CPU); writes single-GPU samples
    (the batch over the lower quartile of the step times, the windows' spread, the GPU, driver,
    CUDA, torch, precision and host CPUs) for `qosmos profile fit`. With --inference: forward
    passes, for `qosmos profile inference`. Started by torchrun (`torchrun --nnodes N
    --nproc-per-node G -m qosmos profile run ...`), each process is one rank and rank 0 writes
    d_node = N, d_gpn = G samples."""
    from qosmos.predictors.timing import cpu_list, cpu_share, parse_cpu_list

    chosen = None if cpus is None else parse_cpu_list(cpus)
    if chosen is not None:
        allowed = os.sched_getaffinity(0)
        if not chosen <= allowed:
            raise InvalidInput("cpus", cpus, f"not CPUs this process may use (it may use {cpu_list(allowed)})")
        if inference:
            raise InvalidInput("cpus", cpus, "pins training steps only")
        cpu_share(chosen, 0, gpus)  # one CPU per process at least
    if inference:
        from qosmos.predictors.inference_profiles import run_inference_profile

        run_inference_profile(out, model, batches, cores, cpu_batches, gpu_model, precision, steps, windows, warmup)
        return
    from qosmos.predictors.profiler import measure_torch, write_samples
    from qosmos.predictors.timing import parse_precision, process_world

    precision = parse_precision(precision)
    world = process_world(os.environ)  # started by torchrun: one rank of its world
    try:
        sizes = [int(b) for b in batches.split(",") if b.strip()]
    except ValueError:
        raise InvalidInput("batches", batches, "comma-separated integers") from None
    if not sizes or min(sizes) <= 0:
        raise InvalidInput("batches", batches, "one or more batch sizes > 0")
    if importlib.util.find_spec("torch") is None:
        typer.echo("error: PyTorch is not installed; `pip install torch` to profile on this machine", err=True)
        raise typer.Exit(2) from None
    samples = measure_torch(
        model,
        sizes,
        steps=steps,
        warmup=warmup,
        windows=windows,
        precision=precision,
        gpus=gpus,
        interleave=interleave,
        cpus=chosen,
    )
    if world is not None and world.rank != 0:
        return  # one of torchrun's workers: rank 0 writes the samples
    write_samples(out, samples)
    for s in samples:
        console.print(
            f"{s.model} batch {s.batch}: {s.rate:.1f} samples/s ({s.windows} windows, spread {s.spread_pct:.1f} %)"
        )
    env = dict(samples[0].env) if samples else {}
    console.print("measured on " + ", ".join(f"{k} {v}" for k, v in env.items()))
    console.print(f"wrote {out}")


@profile_app.command("builtin")
@_clean_errors
def profile_builtin(
    out: Annotated[
        Path,
        typer.Option(
            help="Python module to write; to refresh the package's own built-ins pass "
            "extender/core/profiles_builtin.py (with --lucid) or extender/core/profiles_measured.py "
            "(with --measured) explicitly"
        ),
    ],
    lucid: Annotated[Path | None, typer.Option(help="Lucid single_gpu_throughput.csv (or --measured instead)")] = None,
    measured: Annotated[
        Path | None,
        typer.Option(
            help="folder of GPU measurements, one subfolder per GPU run of hack/gpu/run.sh "
            "(the package's: predictors/measured), instead of --lucid"
        ),
    ] = None,
) -> None:
    """Regenerate a built-in profiles module: from the Lucid single-GPU measurements (--lucid), or
    from the GPU runs of hack/gpu/run.sh (--measured: throughput profiles and inference curves)."""
    from qosmos.predictors.genie_profiles import fit_lucid, fit_measured, render_builtin_module, render_measured_module

    if (lucid is None) == (measured is None):
        raise InvalidInput("--lucid/--measured", (lucid, measured), "give exactly one")
    if out.is_dir():
        raise InvalidInput("--out", str(out), "is a folder, expected a .py file to write")
    if lucid is not None:
        profiles = fit_lucid(lucid)
        if not profiles:
            raise InvalidInput("--lucid", str(lucid), "no full-precision (amp = 0) rows: no profiles to write")
        out.write_text(render_builtin_module(profiles))
        console.print(f"wrote {len(profiles)} profiles to {out}")
        return
    assert measured is not None
    profiles, curves = fit_measured(measured)
    if not profiles and not curves:
        raise InvalidInput("--measured", str(measured), "no training.csv or inference.csv under it")
    out.write_text(render_measured_module(profiles, curves))
    console.print(f"wrote {len(profiles)} throughput profiles and {len(curves)} inference curves to {out}")


@profile_app.command("inference")
@_clean_errors
def profile_inference(
    samples: Annotated[
        Path,
        typer.Argument(help="CSV of measured compute times: model,device,gpu_model,cores,batch,compute_s[,torch,...]"),
    ],
    db: Annotated[
        Path | None,
        typer.Option(
            help="model database to update (default: $QOSMOS_MODELDB, else ~/.config/qosmos/models.json); "
            "the inference placer (simulate inference, explain inference, the operator) reads the same file"
        ),
    ] = None,
) -> None:
    """Store measured inference compute times C(b) (`qosmos profile run --inference`) in the model
    database, beside the throughput profiles; SODA's placer derives its thresholds from them."""
    from qosmos.predictors.inference_profiles import (
        curves_from_samples,
        read_inference_samples,
        upsert_inference_profiles,
    )
    from qosmos.predictors.profiler import modeldb_path

    target = modeldb_path(db)
    curves = curves_from_samples(read_inference_samples(samples), source=f"measured, {samples.name}")
    upsert_inference_profiles(target, curves)
    t = Table(title=f"inference profiles written to {target}")
    for name in ("model", "device", "batch: compute ms"):
        t.add_column(name)
    for c in curves:
        points = ", ".join(f"{b}: {s * 1000:.4g}" for b, s in zip(c.batches, c.seconds, strict=True))
        t.add_row(c.model, c.where, points)
    console.print(t)


def register(app: typer.Typer) -> None:
    """Add ``predict`` and ``profile`` to the top-level ``qosmos`` app."""
    app.add_typer(predict_app, name="predict")
    app.add_typer(profile_app, name="profile")
