"""``qosmos predict ...`` and ``qosmos profile ...`` (registered by qosmos/cli.py)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

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


_clean_errors = clean_errors(FileNotFoundError)


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
    series: Annotated[Path, typer.Option(help="per-minute CSV: time,active,total")],
    train_until: Annotated[str, typer.Option(help="train on slots before this date (UTC)")],
    eval_from: Annotated[str, typer.Option(help="evaluation start (UTC)")],
    eval_to: Annotated[str, typer.Option(help="evaluation end; a bare date includes that whole day")],
    out: Annotated[Path, typer.Option(help="output folder for ces.json and ces.png")],
    sigma: Annotated[int, typer.Option(help="buffer nodes σ")] = 20,
    xi_h: Annotated[float, typer.Option(help="ξ_H: past-hour fall threshold")] = 0.0,
    xi_p: Annotated[float, typer.Option(help="ξ_P: predicted 3-hour fall threshold")] = 0.0,
    boot_delay: Annotated[int, typer.Option(help="minutes for a node to boot")] = 5,
    rounds: Annotated[int, typer.Option(help="LightGBM boosting rounds")] = 150,
) -> None:
    """Train the CES node forecaster, replay Alg. 2 and write ces.json + ces.png (Helios §4.3)."""
    from qosmos.predictors.ces import CESConfig, parse_when, plot_ces, run_ces
    from qosmos.predictors.data import load_node_series

    minutes, active, total = load_node_series(series)
    cfg = CESConfig(sigma=sigma, xi_h=xi_h, xi_p=xi_p, boot_delay=boot_delay)
    summary, arrays = run_ces(
        minutes,
        active,
        total,
        parse_when(train_until),
        parse_when(eval_from),
        parse_when(eval_to, end_of_day=True),
        cfg,
        num_rounds=rounds,
    )
    summary["series"] = str(series)
    summary["train_until"], summary["eval_from"], summary["eval_to"] = train_until, eval_from, eval_to
    out.mkdir(parents=True, exist_ok=True)
    (out / "ces.json").write_text(_dump(summary))
    plot_ces(arrays, out / "ces.png", f"CES on {series.name}: {eval_from} … {eval_to}")
    t = Table(title="Cluster Energy Saving (Helios Table 5 quantities)")
    t.add_column("metric")
    t.add_column("value", justify="right")
    for k in (
        "smape",
        "smape_10min",
        "smape_3h",
        "smape_persistence",
        "avg_sleep_nodes",
        "daily_wakeups",
        "nodes_per_wakeup",
        "node_util_before",
        "node_util_after",
        "delayed_node_minutes",
    ):
        t.add_row(k, f"{summary[k]:.3f}")
    console.print(t)
    console.print(f"wrote {out / 'ces.json'} and {out / 'ces.png'}")


@predict_app.command("qssf")
@_clean_errors
def predict_qssf(
    pods: Annotated[Path | None, typer.Option(help="openb pod list CSV (default: shared data)")] = None,
    train_frac: Annotated[float, typer.Option(help="first fraction by creation time used for training")] = 0.7,
    lam: Annotated[float, typer.Option(help="merge coefficient λ")] = 0.5,
    save: Annotated[Path | None, typer.Option(help="save the fitted predictor to this folder")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Evaluate the QSSF duration predictor on real openb pods (Spearman, median |log error|)."""
    from qosmos.predictors.data import load_openb_pods
    from qosmos.predictors.qssf import QSSFPredictor, evaluate_qssf

    path = _data_file(pods, "alibaba-openb-2023", "openb_pod_list_default.csv")
    jobs = load_openb_pods(path)
    result = evaluate_qssf(jobs, train_frac=train_frac, lam=lam)
    result["pods"] = str(path)
    if save is not None:
        QSSFPredictor(lam=lam).fit(jobs[: int(len(jobs) * train_frac)]).save(save)
        result["saved"] = str(save)
    if as_json:
        print(_dump(result))
        return
    t = Table(title=f"QSSF on {path.name}: train {result['n_train']}, test {result['n_test']}")
    for c in ("λ", "Spearman (duration)", "Spearman (GPU time)", "median |log err|"):
        t.add_column(c, justify="right")
    for k, v in result["by_lambda"].items():  # type: ignore[union-attr]
        t.add_row(k, f"{v['spearman']:.3f}", f"{v['spearman_gpu_time']:.3f}", f"{v['median_abs_log_error']:.3f}")
    console.print(t)


@predict_app.command("runtime")
@_clean_errors
def predict_runtime(
    data: Annotated[str, typer.Option(help="openb | philly")] = "openb",
    path: Annotated[Path | None, typer.Option(help="override the data file")] = None,
    seed: Annotated[int, typer.Option(help="shuffle seed for philly (its file is sorted by run time)")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Remaining-run-time prediction with vs without elapsed time (seed 004 §VI-A)."""
    import numpy as np
    from qosmos.predictors.data import load_openb_pods, load_runtimes
    from qosmos.predictors.runtime import evaluate_runtime

    if data == "openb":
        f = _data_file(path, "alibaba-openb-2023", "openb_pod_list_default.csv")
        jobs = load_openb_pods(f)
        result = evaluate_runtime(np.array([j.duration for j in jobs], float), jobs)
    elif data == "philly":
        f = _data_file(path, "philly", "philly_runtime.csv")
        result = evaluate_runtime(load_runtimes(f), shuffle_seed=seed)
    else:
        raise InvalidInput("data", data, "expected openb or philly")
    result["data"], result["file"] = data, str(f)
    if as_json:
        print(_dump(result))
        return
    t = Table(title=f"Run-time prediction on {data} (accuracy / underestimation rate)")
    t.add_column("elapsed")
    t.add_column("jobs", justify="right")
    methods = ("last2", "last2_elapsed", "lgbm", "lgbm_elapsed")
    for m in methods:
        t.add_column(m, justify="right")
    for row in result["thresholds"]:  # type: ignore[union-attr]
        t.add_row(
            f"{row['fraction']:.3g}×mean ({row['elapsed_s']:.0f}s)",
            str(row["jobs"]),
            *(f"{row[m]['accuracy']:.3f} / {row[m]['underestimation_rate']:.3f}" for m in methods),
        )
    console.print(t)


# ---- profile ----------------------------------------------------------------------------------

DB_OPTION = typer.Option(help="model database (JSON file of profiles)")


@profile_app.command("fit")
@_clean_errors
def profile_fit(
    samples: Annotated[Path, typer.Argument(help="CSV with columns model,batch,d_node,d_gpn,rate")],
    db: Annotated[Path, DB_OPTION] = Path("~/.config/qosmos/models.json"),
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Fit k_i (Eq. 7) and γ, λ (Eq. 8) from measured runs and store the profiles in the DB."""
    from dataclasses import asdict

    from qosmos.predictors.profiler import fit_file, upsert_profiles

    reports = fit_file(samples)
    upsert_profiles(db, [r.profile for r in reports])
    rows = [
        {
            **asdict(r.profile),
            "fit_mape_pct": r.mape,
            "single_gpu_runs": r.single_gpu_runs,
            "multi_gpu_runs": r.multi_gpu_runs,
            "comm_fitted": r.comm_fitted,
        }
        for r in reports
    ]
    if as_json:
        print(_dump({"db": str(db.expanduser()), "profiles": rows}))
        return
    t = Table(title=f"profiles written to {db.expanduser()}")
    for c in ("model", "k0", "k1", "k2", "γ", "λ", "runs 1-GPU/multi", "fit error %"):
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(
            r["model"],
            f"{r['k0']:.4g}",
            f"{r['k1']:.4g}",
            f"{r['k2']:.4g}",
            f"{r['gamma']:.4g}",
            f"{r['lam']:.4g}",
            f"{r['single_gpu_runs']}/{r['multi_gpu_runs']}",
            f"{r['fit_mape_pct']:.2f}",
        )
    console.print(t)


@profile_app.command("run")
@_clean_errors
def profile_run(
    out: Annotated[Path, typer.Option(help="samples CSV to write")] = Path("samples.csv"),
    model: Annotated[str, typer.Option(help="torchvision model name (else a small MLP)")] = "resnet18",
    batches: Annotated[str, typer.Option(help="comma-separated batch sizes")] = "16,32,64",
    steps: Annotated[int, typer.Option(help="timed steps per batch size")] = 10,
) -> None:
    """Time real PyTorch training steps on the local device; writes single-GPU samples."""
    from qosmos.predictors.profiler import measure_torch, write_samples

    try:
        import torch  # noqa: F401
    except ImportError:
        typer.echo("error: PyTorch is not installed; `pip install torch` to profile on this machine", err=True)
        raise typer.Exit(2) from None
    try:
        sizes = [int(b) for b in batches.split(",") if b.strip()]
    except ValueError:
        raise InvalidInput("batches", batches, "comma-separated integers") from None
    samples = measure_torch(model, sizes, steps=steps)
    write_samples(out, samples)
    for s in samples:
        console.print(f"{s.model} batch {s.batch}: {s.rate:.1f} samples/s")
    console.print(f"wrote {out}")


@profile_app.command("builtin")
@_clean_errors
def profile_builtin(
    lucid: Annotated[Path, typer.Option(help="Lucid single_gpu_throughput.csv")],
    out: Annotated[
        Path | None, typer.Option(help="module to write (default: extender/core/profiles_builtin.py)")
    ] = None,
) -> None:
    """Regenerate the built-in profiles module from the Lucid measurements."""
    import qosmos.extender.core as core
    from qosmos.predictors.genie_profiles import fit_lucid, render_builtin_module

    target = out or Path(core.__file__).parent / "profiles_builtin.py"
    profiles = fit_lucid(lucid)
    target.write_text(render_builtin_module(profiles))
    console.print(f"wrote {len(profiles)} profiles to {target}")


def register(app: typer.Typer) -> None:
    """Add ``predict`` and ``profile`` to the top-level ``qosmos`` app."""
    app.add_typer(predict_app, name="predict")
    app.add_typer(profile_app, name="profile")
