"""``qosmos simulate inference``: the QPS reader, the replay of decide() with its latency and cost
books (exact numbers on hand-made series), and the command end to end.

The toy service (as in tests/unit/core/test_inference.py): one GPU replica serves 100 queries/s
(bs_gpu 10, window 0.1 s, C(b) = b / 100 s); one CPU replica of 4 cores serves 20 queries/s (max
batch 2, window 0.1 s, C(b) = b / 20 s).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.genie import ThroughputProfile
from qosmos.extender.core.inference import CpuCompute, GpuCompute, InferenceSpec, Mode, Serving
from qosmos.predictors.readers import TraceFormatError
from qosmos.simulator.inference import read_qps, replay, summarize
from typer.testing import CliRunner

from qosmos.cli import app

runner = CliRunner()
SHARED = Path(__file__).resolve().parents[3].parent / "shared"
GENAI = SHARED / "data" / "alibaba-genai-2026" / "qps.csv"

TOY = InferenceSpec(
    model="toy",
    qos_target_ms=200.0,
    gpu=Serving(Mode.GPU, 10, GpuCompute(ThroughputProfile(model="toy", k0=100.0, k1=0.0, k2=0.0)), gpus=1),
    cpu=Serving(Mode.CPU, 2, CpuCompute(cores=4, per_core_qps=5.0), cores=4),
    min_replicas=1,
    max_replicas=4,
    cpu_min_replicas=4,
    cpu_max_replicas=4,
    scale_out_threshold=0.8,
    hysteresis=0.2,
    switch_cooldown_s=0.0,
    scale_out_after_s=0.0,
    scale_in_after_s=0.0,
)

# GenAI-shaped: per-container rows of two request types; the generative load is 10, 70, 70, 10, 10
# queries/s a minute (container c2 has no row at 180 s: it served nothing then).
GENAI_LIKE = """timestamp_anon,value,container_ip,request_type
1000,6,c1,Generative Requests
1000,4,c2,Generative Requests
1000,1,,API Requests
1060,35,c1,Generative Requests
1060,35,c2,Generative Requests
1060,1,,API Requests
1120,35,c1,Generative Requests
1120,35,c2,Generative Requests
1180,10,c1,Generative Requests
1180,1,,API Requests
1240,10,c2,Generative Requests
"""


def write(tmp_path: Path, text: str, name: str = "qps.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_reader_sums_containers_per_slot_and_fills_zeros(tmp_path: Path) -> None:
    s = read_qps(write(tmp_path, GENAI_LIKE))
    assert s.name == "Generative Requests" and s.step_s == 60.0 and s.start == 1000.0
    assert s.qps.tolist() == [10.0, 70.0, 70.0, 10.0, 10.0]
    assert s.available == ("API Requests", "Generative Requests")
    assert read_qps(write(tmp_path, GENAI_LIKE), "api").qps.tolist() == [1.0, 1.0, 0.0, 1.0, 0.0]
    assert read_qps(write(tmp_path, GENAI_LIKE), "all").qps.tolist() == [11.0, 71.0, 70.0, 11.0, 10.0]
    one = read_qps(write(tmp_path, GENAI_LIKE), "container:c2")
    assert one.name == "container:c2" and one.qps.tolist() == [4.0, 35.0, 35.0, 0.0, 10.0]
    with pytest.raises(InvalidInput, match=r"no such request type; the file has: API Requests, Generative"):
        read_qps(write(tmp_path, GENAI_LIKE), "batch")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("timestamp_anon,value\n0,1\n60,x\n", r"qps\.csv:3: field value: not a number \(got 'x'\)"),
        ("timestamp_anon,value\n0,1\n60,-2\n", r"qps\.csv:3: field value: must be >= 0 \(got '-2'\)"),
        ("timestamp_anon,value\n0,1\nsoon,2\n", r"qps\.csv:3: field timestamp_anon: expected 'YYYY"),
        ("when,value\n0,1\n", r"qps\.csv:1: field timestamp_anon: missing column \(one of timestamp_anon"),
        ("timestamp_anon,value\n0,1\n60\n", r"qps\.csv:3: field value: truncated row"),
    ],
)
def test_reader_names_the_bad_line_and_field(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(TraceFormatError, match=message):
        read_qps(write(tmp_path, text))


def test_replay_books_exact_hours_latency_and_switches(tmp_path: Path) -> None:
    """Slot by slot (decisions see the previous slot's rate; new replicas serve 30 s later):
    0 s: 10/s -> CPU, 4 replicas (the CPU floor); 60 s: 70/s on 4 CPU replicas (80/s max);
    120 s: sees 70 -> needs 5 CPU replicas > 4: GPU x1, Ready at 150 (CPU serves till then);
    180 s: 10/s on the GPU (70 above the band: hold); 240 s: sees 10 -> CPU x4, Ready at 270."""
    series = read_qps(write(tmp_path, GENAI_LIKE))
    soda = replay(TOY, series, ready_s=30.0)
    base = replay(TOY.gpu_only(), series, ready_s=30.0)
    assert soda.mode.tolist() == [1, 1, 0, 0, 1] and soda.replicas.tolist() == [4, 4, 1, 1, 4]
    assert soda.gpu_seconds == pytest.approx(30 + 30 + 60 + 30)  # starting at 120, serving 150-270
    assert soda.core_seconds == pytest.approx(16 * (60 + 60 + 30 + 30 + 30))  # CPU till 150, from 240
    assert base.gpu_seconds == pytest.approx(300.0) and base.replicas.tolist() == [1] * 5
    out = summarize(soda, base)
    assert out["gpu_hours"] == pytest.approx(150 / 3600, abs=1e-6)
    assert out["gpu_hours_always_gpu"] == pytest.approx(300 / 3600, abs=1e-6)
    assert out["gpu_hours_saved_fraction"] == pytest.approx(0.5)
    assert out["cpu_core_hours"] == pytest.approx(3360 / 3600, abs=1e-6)
    assert out["qos_violation_fraction"] == 0.0
    assert out["switches"] == 2 and out["switches_per_day"] == pytest.approx(2 * 86400 / 300)
    # queries by latency: 900 at 110 ms (GPU, 1 a batch), 900 at 150 (CPU, 1 a batch),
    # 2100 at 170 (GPU, 7 a batch), 6300 at 187.5 (CPU, 1.75 a batch)
    assert out["p99_latency_ms"] == pytest.approx(187.5)
    assert out["mean_latency_ms"] == pytest.approx((110 * 900 + 150 * 900 + 170 * 2100 + 187.5 * 6300) / 10200)
    assert out["gpu_utilization"] == pytest.approx(30 / 150)  # 2100 + 600 + 300 queries at 100/s
    assert out["always_gpu"]["gpu_utilization"] == pytest.approx(102 / 300)


def test_replay_queues_an_overload_and_drains_it(tmp_path: Path) -> None:
    """One GPU replica at most (100/s): 150/s for 10 s builds 500 queued queries, all late (base
    latency 10/150 + 0.1 s plus the wait); 50/s drains them in 10 s, all late too; 2000 of 2500."""
    spec = replace(TOY.gpu_only(), max_replicas=1)
    series = read_qps(write(tmp_path, "time,qps\n0,50\n10,150\n20,50\n"))
    res = replay(spec, series, ready_s=0.0)
    out = summarize(res, res)
    assert res.latencies.total() == pytest.approx(2500.0)
    assert out["qos_violation_fraction"] == pytest.approx(0.8)
    assert out["max_latency_ms"] == pytest.approx((10 / 150 + 0.1 + 19 / 4) * 1000)  # the last second at 150/s
    assert res.reasons["saturated"] == 1  # 20 s: sees 150 + 500 / 10 queued = 200/s, stays at 1


def test_the_command_end_to_end(tmp_path: Path) -> None:
    """The replay scenario above through the CLI, with the toy's capacities given as profiled numbers:
    bs_gpu 10 (ResNet50's profile rescaled: 100/s), 4-core CPU replicas with max batch 2 (20/s)."""
    qps = write(tmp_path, GENAI_LIKE)
    out = tmp_path / "out"
    args = ["simulate", "inference", "--qps", str(qps), "--model", "ResNet50", "--out", str(out)]
    args += ["--gpu-switch-batch", "10", "--cpu-cores", "4", "--cpu-max-batch", "2", "--max-replicas", "4"]
    args += ["--cpu-min-replicas", "4", "--cpu-max-replicas", "4", "--switch-cooldown-s", "0"]
    args += ["--scale-in-after-s", "0", "--ready-s", "30", "--no-forecast"]  # the reactive placer's hours
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    for key in ("gpu_hours", "gpu_hours_always_gpu", "cpu_core_hours", "qos_violation_fraction"):
        assert key in summary
    assert summary["gpu_hours"] == pytest.approx(150 / 3600, abs=1e-6)
    assert summary["gpu_hours_always_gpu"] == pytest.approx(300 / 3600, abs=1e-6)
    assert summary["cpu_core_hours"] == pytest.approx(3360 / 3600, abs=1e-6)
    assert summary["qos_violation_fraction"] == 0.0 and summary["switches"] == 2
    assert summary["switches_per_day"] == pytest.approx(576.0) and summary["p99_latency_ms"] <= 200.0
    assert summary["series"] == "Generative Requests" and summary["serving"]["gpu_switch_batch"] == 10
    assert (out / "inference.png").stat().st_size > 10_000


def test_peak_gpus_scales_the_series(tmp_path: Path) -> None:
    qps = write(tmp_path, GENAI_LIKE)
    out = tmp_path / "o"
    args = ["simulate", "inference", "--qps", str(qps), "--model", "ResNet50", "--gpu-switch-batch", "10"]
    res = runner.invoke(app, [*args, "--peak-gpus", "2", "--out", str(out), "--no-plots", "--quiet"])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["peak_qps"] == pytest.approx(200.0) and summary["config"]["qps_scale"] == pytest.approx(200 / 70)
    assert not (out / "inference.png").exists()


@pytest.mark.parametrize(
    ("extra", "text", "needle"),
    [
        ([], "timestamp_anon,value\n0,1\n60,x\n", "qps.csv:3: field value: not a number (got 'x')"),
        (["--series", "batch"], GENAI_LIKE, "invalid series='batch': no such request type"),
        (["--qps-scale", "2", "--peak-gpus", "1"], GENAI_LIKE, "not both"),
        (["--model", "zzzz-unknown"], GENAI_LIKE, "invalid model='zzzz-unknown'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, extra: list[str], text: str, needle: str) -> None:
    qps = write(tmp_path, text)
    args = ["simulate", "inference", "--qps", str(qps), "--model", "ResNet50", "--out", str(tmp_path / "o")]
    res = runner.invoke(app, [*args, *extra])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], res.output
    assert not (tmp_path / "o" / "summary.json").exists()


def test_simulate_keeps_its_trace_replay_beside_the_sub_command() -> None:
    res = runner.invoke(app, ["simulate", "--help"], terminal_width=200)
    assert res.exit_code == 0 and "--trace" in res.output and "inference" in res.output
    mixed = runner.invoke(app, ["simulate", "--trace", "builtin:genie", "--out", "o", "inference"])
    assert mixed.exit_code == 2 and "go without a sub-command" in mixed.output
    missing = runner.invoke(app, ["simulate", "inference", "--model", "ResNet50", "--out", "o"])
    assert missing.exit_code == 2 and "Missing option '--qps'" in missing.output


@pytest.mark.skipif(not GENAI.is_file(), reason="the shared GenAI trace is not here")
def test_the_real_genai_series_reads_as_22_hours() -> None:
    s = read_qps(GENAI)
    assert s.name == "Generative Requests" and s.step_s == 57.0 and s.qps.size == 1410
    assert 22.0 < s.hours < 22.4 and s.qps.max() == pytest.approx(6.84)
