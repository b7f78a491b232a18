"""SODA's inference placer (seed 002 §V-D): the latency model and decide(), on hand-computed cases.

The toy service: a GPU computing b queries in b / 100 s (a constant 100 queries/s, explicit
coefficients), so bs_gpu = 10 within 200 ms (window C(10) = 0.1 s + C(10) = 0.2 s) and one GPU
replica serves 100 queries/s; a CPU replica of 4 cores at 5 queries/s per core computes b in
b / 20 s, so its max batch is 2 (0.1 + 0.1 s) and it serves 20 queries/s.
Switching point: q × C(bs_gpu) < bs_gpu, i.e. q < 100; with the 0.2 band, to CPU only below 80
and when 4 CPU replicas carry q under 0.8 × 0.8 of their 80 queries/s (q <= 51.2).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.genie import ThroughputProfile
from qosmos.extender.core.inference import (
    MAX_BATCH,
    CpuCompute,
    GpuCompute,
    InferenceSpec,
    InferenceState,
    Mode,
    Reason,
    Serving,
    decide,
    resolve_spec,
    serving_batch,
)
from qosmos.extender.core.inference_profiles import InferenceProfiles
from qosmos.extender.core.modeldb import ModelDB

GPU = GpuCompute(ThroughputProfile(model="toy", k0=100.0, k1=0.0, k2=0.0))
CPU = CpuCompute(cores=4, per_core_qps=5.0)


def toy(**kw: object) -> InferenceSpec:
    base = InferenceSpec(
        model="toy",
        qos_target_ms=200.0,
        gpu=Serving(Mode.GPU, 10, GPU, gpus=1),
        cpu=Serving(Mode.CPU, 2, CPU, cores=4),
        min_replicas=1,
        max_replicas=4,
        cpu_max_replicas=4,
        scale_out_threshold=0.8,
        hysteresis=0.2,
        switch_cooldown_s=300.0,
        scale_out_after_s=0.0,
        scale_in_after_s=300.0,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


# ---- the latency model ---------------------------------------------------------------------------


def test_toy_serving_numbers() -> None:
    assert serving_batch(GPU, 0.2) == 10  # 2 C(10) = 0.2; 2 C(11) = 0.22
    assert serving_batch(CPU, 0.2) == 2  # 2 C(2) = 0.2; 2 C(3) = 0.3
    gpu = toy().gpu
    assert gpu.window_s == pytest.approx(0.1) and gpu.compute_s == pytest.approx(0.1)
    assert gpu.capacity_qps == pytest.approx(100.0)
    assert toy().cpu.capacity_qps == pytest.approx(20.0)  # type: ignore[union-attr]


def test_latency_window_plus_compute() -> None:
    gpu = toy().gpu
    assert gpu.latency_s(0.0) == pytest.approx(0.1 + 0.01)  # a lone query waits the window, computes alone
    assert gpu.latency_s(50.0) == pytest.approx(0.1 + 0.05)  # 5 queries arrive in the window
    assert gpu.latency_s(100.0) == pytest.approx(0.1 + 0.1)  # the batch fills as the window ends
    assert gpu.latency_s(200.0) == pytest.approx(10 / 200 + 0.1)  # fills early (queueing is the replay's)


def test_a_batch_of_one_needs_no_window() -> None:
    # SODA Table III: VGG16 computes batch 1 within 200 ms on 16 cores and counts among the CPU-able models
    vgg16 = CpuCompute(cores=16, per_core_qps=1 / 3.2)  # C(1) = 0.2 s
    assert serving_batch(vgg16, 0.2) == 1
    assert Serving(Mode.CPU, 1, vgg16, cores=16).latency_s(0.0) == pytest.approx(0.2)
    assert serving_batch(vgg16, 0.199) == 0


@pytest.mark.parametrize("target_ms", [60, 200, 500])
def test_every_partial_batch_fits_the_target(target_ms: int) -> None:
    """C(b) is not monotone on a GPU (EfficientNet computes 64 faster than 32): the window of B plus any
    smaller batch's compute time must stay within the target, and B + 1 must not."""
    db, t = ModelDB.builtin(), target_ms / 1000
    for name in db.names():
        c = GpuCompute(db.get(name))
        b = serving_batch(c, t)
        if b == 0:
            continue
        w = 0.0 if b == 1 else c.seconds(b)
        assert max(c.seconds(x) for x in range(1, b + 1)) + w <= t + 1e-9, name
        if b == MAX_BATCH:  # the search bound (NeuMF at 500 ms)
            continue
        nxt = b + 1
        assert c.seconds(nxt) + max(c.seconds(x) for x in range(1, nxt + 1)) > t, name


def test_a_faster_large_batch_does_not_hide_a_slow_small_one() -> None:
    """EfficientNet (Lucid): 39.3 ms for any batch up to 32, 33.3 ms for 64. Within 68 ms, batch 92
    computes in about 34 ms, but a window of 34 ms plus a partial batch of 2..32 (39.3 ms) is 73 ms:
    only batch 1 (no window) fits."""
    c = GpuCompute(ModelDB.builtin().get("EfficientNet"))
    assert c.seconds(1) == pytest.approx(c.seconds(32)) and c.seconds(64) < c.seconds(32)
    assert 2 * c.seconds(92) <= 0.068 < c.seconds(92) + c.seconds(32)
    assert serving_batch(c, 0.068) == 1


def test_the_switching_point_is_bs_gpu() -> None:
    """With 8 CPU replicas (160 queries/s) the CPU could carry 110/s, but 110 × C(bs_gpu) = 11 > bs_gpu."""
    spec = toy(cpu_max_replicas=8)
    assert (decide(spec, None, 90.0, 0.0).mode, decide(spec, None, 90.0, 0.0).replicas) == (Mode.CPU, 6)
    assert decide(spec, None, 110.0, 0.0).mode is Mode.GPU
    st = InferenceState(Mode.CPU, 7, last_switch_s=0.0)  # 140/s of CPU, not overloaded at 110
    d = decide(spec, st, 110.0, 1000.0)
    assert (d.mode, d.replicas, d.reason) == (Mode.GPU, 2, Reason.SWITCH_TO_GPU)


def test_resolve_spec_from_the_seed_and_the_database() -> None:
    spec = resolve_spec("ResNet50", 200, db=ModelDB.builtin(), inference_profiles=InferenceProfiles())
    # SODA §VI-E: ResNet50 on 16 cores, batch 2 in 95.96 ms, window 95.96 ms
    assert spec.cpu is not None and spec.cpu.batch == 2 and spec.cpu.cores == 16
    assert spec.cpu.compute_s * 1000 == pytest.approx(95.96)
    assert spec.cpu.window_s * 1000 == pytest.approx(95.96)
    # bs_gpu from the Lucid ResNet50 profile: the largest batch whose window + compute fit 200 ms
    b = spec.gpu_switch_batch
    assert b == serving_batch(spec.gpu.compute, 0.2) and b > 1
    assert 2 * spec.gpu.compute_s <= 0.2 < 2 * spec.gpu.compute.seconds(b + 1)


def test_resolve_spec_with_profiled_numbers() -> None:
    db = ModelDB.builtin()
    spec = resolve_spec("ResNet50", 200, db=db, gpu_switch_batch=20, cpu_cores_per_replica=8, cpu_max_batch=4)
    assert spec.gpu_switch_batch == 20 and spec.gpu.compute_s == pytest.approx(0.1)  # rescaled: 2 C(20) = T
    assert spec.gpu.capacity_qps == pytest.approx(200.0)
    assert spec.cpu is not None and spec.cpu.batch == 4 and spec.cpu.compute_s == pytest.approx(0.1)
    assert spec.cpu.capacity_qps == pytest.approx(40.0)


@pytest.mark.parametrize("kwargs", [{"cpu_max_batch": 0}, {"cpu_per_core_qps": 0.01}], ids=["max-batch-0", "too-slow"])
def test_max_batch_below_one_is_never_cpu(kwargs: dict[str, object]) -> None:
    spec = resolve_spec("ResNet50", 200, db=ModelDB.builtin(), **kwargs)  # type: ignore[arg-type]
    assert spec.cpu is None
    for q in (0.0, 1.0):
        assert decide(spec, None, q, 0.0).mode is Mode.GPU
    assert decide(spec, InferenceState(Mode.GPU, 1), 0.0, 1e6).mode is Mode.GPU
    # a service carried on CPU whose spec lost the CPU goes back to GPU at once
    back = decide(spec, InferenceState(Mode.CPU, 3, last_switch_s=0.0), 0.0, 1.0)
    assert back.mode is Mode.GPU and back.switched and back.state.switches == 1


def test_models_without_cpu_data_never_run_on_cpu() -> None:
    spec = resolve_spec("ResNet18", 200, db=ModelDB.builtin())  # not in SODA's CPU measurements
    assert spec.cpu is None and any("never on CPU" in n for n in spec.notes)


# ---- decide ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("qps", "mode", "replicas"),
    [
        (10.0, Mode.CPU, 1),  # below bs_gpu: ceil(10 / (0.8 × 20)) = 1 CPU replica
        (40.0, Mode.CPU, 3),  # ceil(40 / 16) = 3
        (70.0, Mode.GPU, 1),  # below bs_gpu, but 5 CPU replicas > the 4 allowed
        (150.0, Mode.GPU, 2),  # above bs_gpu: ceil(150 / 80) = 2 GPU replicas
    ],
)
def test_initial_cpu_below_bs_gpu_gpu_above(qps: float, mode: Mode, replicas: int) -> None:
    d = decide(toy(), None, qps, 0.0)
    assert (d.mode, d.replicas, d.reason) == (mode, replicas, Reason.INITIAL)
    assert d.state == InferenceState(mode, replicas)
    assert d.load_batch == pytest.approx(qps * 0.1)


def test_scale_out_at_the_threshold() -> None:
    spec, st = toy(), InferenceState(Mode.CPU, 1)
    assert decide(spec, st, 16.0, 0.0).reason is Reason.HOLD  # exactly 0.8 × 20
    d = decide(spec, st, 17.0, 0.0)
    assert (d.mode, d.replicas, d.reason) == (Mode.CPU, 2, Reason.SCALE_OUT)
    gpu = decide(spec, InferenceState(Mode.GPU, 1), 81.0, 0.0)  # past 0.8 × 100
    assert (gpu.mode, gpu.replicas, gpu.reason) == (Mode.GPU, 2, Reason.SCALE_OUT)


def test_scale_out_waits_for_a_sustained_load_unless_overloaded() -> None:
    spec, st = toy(scale_out_after_s=60.0), InferenceState(Mode.CPU, 1)
    d = decide(spec, st, 17.0, 0.0)
    assert (d.replicas, d.reason, d.retry_at, d.target_replicas) == (1, Reason.WAITING, 60.0, 2)
    d = decide(spec, d.state, 17.0, 30.0)
    assert d.reason is Reason.WAITING and d.state.up_since == 0.0
    d = decide(spec, d.state, 17.0, 60.0)
    assert (d.replicas, d.reason) == (2, Reason.SCALE_OUT) and d.state.up_since is None
    # above the replicas' maximum load itself: at once (the seed's "directly launches")
    over = decide(spec, st, 25.0, 0.0)
    assert (over.replicas, over.reason) == (2, Reason.SCALE_OUT)
    # a dip resets the clock
    d = decide(spec, st, 17.0, 0.0)
    d = decide(spec, d.state, 10.0, 30.0)
    assert d.reason is Reason.HOLD and d.state.up_since is None


def test_down_steps_wait_then_switch_to_cpu() -> None:
    spec, st = toy(), InferenceState(Mode.GPU, 1, last_switch_s=0.0)
    d = decide(spec, st, 40.0, 1000.0)
    # 40 < 0.8 × 100, and 4 CPU replicas carry it under 0.64 of their load: CPU, ceil(40 / 12.8) = 4
    assert (d.mode, d.reason, d.target_mode, d.target_replicas, d.retry_at) == (
        Mode.GPU,
        Reason.WAITING,
        Mode.CPU,
        4,
        1300.0,
    )
    d = decide(spec, d.state, 40.0, 1300.0)
    assert (d.mode, d.replicas, d.reason) == (Mode.CPU, 4, Reason.SWITCH_TO_CPU) and d.switched
    assert d.state == InferenceState(Mode.CPU, 4, last_switch_s=1300.0, switches=1)


def test_hysteresis_band() -> None:
    """At 60 queries/s a GPU service stays on GPU (60 > 51.2, the band), a CPU one stays on CPU
    (60 <= 64: 4 replicas carry it under the plain threshold); with no band, GPU goes to CPU."""
    spec = toy(scale_in_after_s=0.0, switch_cooldown_s=0.0)
    assert decide(spec, InferenceState(Mode.GPU, 1), 60.0, 0.0).reason is Reason.HOLD
    assert decide(spec, InferenceState(Mode.CPU, 4), 60.0, 0.0).reason is Reason.HOLD
    no_band = decide(replace(spec, hysteresis=0.0), InferenceState(Mode.GPU, 1), 60.0, 0.0)
    assert (no_band.mode, no_band.reason) == (Mode.CPU, Reason.SWITCH_TO_CPU)
    # scale in only below the band: 2 GPU replicas hold at 60 (ceil(60 / 64) = 1 < 2 -> in), not at 70
    assert decide(spec, InferenceState(Mode.GPU, 2), 70.0, 0.0).reason is Reason.HOLD
    assert decide(spec, InferenceState(Mode.GPU, 2), 60.0, 0.0).reason is Reason.SCALE_IN


def _switches(spec: InferenceSpec, loads: list[float], every_s: float = 60.0) -> tuple[int, list[float]]:
    st, at = InferenceState(Mode.GPU, 1), []
    for i, q in enumerate(loads):
        d = decide(spec, st, q, i * every_s)
        if d.switched:
            at.append(i * every_s)
        st = d.state
    return st.switches, at


def test_cooldown_prevents_flapping() -> None:
    """A load alternating 60 / 70 each minute: 60 fits 4 CPU replicas, 70 does not (needs 5)."""
    loads = [60.0 if i % 2 == 0 else 70.0 for i in range(20)]
    free = toy(hysteresis=0.0, switch_cooldown_s=0.0, scale_in_after_s=0.0)
    assert _switches(free, loads)[0] == 20  # flaps at every sample
    cooled = replace(free, switch_cooldown_s=300.0)
    assert _switches(cooled, loads) == (4, [0.0, 300.0, 600.0, 900.0])
    assert _switches(replace(free, hysteresis=0.2), loads)[0] == 0  # the band alone: never leaves GPU


def test_cooldown_yields_to_overload() -> None:
    spec = toy()
    st = InferenceState(Mode.CPU, 4, last_switch_s=0.0)
    waiting = decide(spec, st, 70.0, 100.0)  # needs 5 CPU replicas: GPU wanted, 4 still carry 70 < 80
    assert (waiting.mode, waiting.reason, waiting.retry_at) == (Mode.CPU, Reason.COOLDOWN, 300.0)
    over = decide(spec, st, 90.0, 100.0)  # 90 > 80: the CPU replicas are overloaded, switch now
    assert (over.mode, over.replicas, over.reason) == (Mode.GPU, 2, Reason.SWITCH_TO_GPU)


def test_min_and_max_replicas() -> None:
    spec = toy(scale_in_after_s=0.0)
    d = decide(spec, InferenceState(Mode.GPU, 2), 1000.0, 0.0)
    assert (d.replicas, d.reason, d.capacity_qps) == (4, Reason.SCALE_OUT, 400.0)  # ceil(1000 / 80) = 13 -> 4
    sat = decide(spec, d.state, 1000.0, 1.0)
    assert (sat.replicas, sat.reason) == (4, Reason.SATURATED)
    assert decide(spec, InferenceState(Mode.GPU, 6), 10.0, 0.0).replicas == 4  # spec lowered: BOUNDS
    assert decide(spec, InferenceState(Mode.GPU, 6), 10.0, 0.0).reason is Reason.BOUNDS
    two = replace(spec, min_replicas=2, cpu=None)
    assert decide(two, InferenceState(Mode.GPU, 3), 0.0, 0.0).replicas == 2
    assert decide(two, None, 0.0, 0.0).replicas == 2
    cpu_floor = replace(spec, cpu_min_replicas=3)
    assert decide(cpu_floor, None, 1.0, 0.0).replicas == 3


def test_prefer_gpu_when_cpu_jobs_queue() -> None:
    spec = toy()
    assert decide(spec, None, 10.0, 0.0, prefer_gpu=True).mode is Mode.GPU
    d = decide(spec, InferenceState(Mode.CPU, 1, last_switch_s=0.0), 10.0, 400.0, prefer_gpu=True)
    assert (d.mode, d.reason) == (Mode.GPU, Reason.SWITCH_TO_GPU)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"scale_out_threshold": 0.0}, "scale_out_threshold"),
        ({"hysteresis": 1.0}, "hysteresis"),
        ({"min_replicas": 0}, "min_replicas"),
        ({"max_replicas": 0}, "max_replicas"),
        ({"switch_cooldown_s": -1.0}, "switch_cooldown_s"),
        ({"cpu_min_replicas": 5}, "cpu_max_replicas"),
    ],
)
def test_spec_rejects_bad_fields(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        toy(**kwargs)
    assert exc.value.field == field


def test_decide_rejects_bad_load() -> None:
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidInput, match="qps"):
            decide(toy(), None, bad, 0.0)
    with pytest.raises(InvalidInput, match="mode"):
        InferenceState("TPU", 1)  # type: ignore[arg-type]
    assert InferenceState("cpu", 1).mode is Mode.CPU  # type: ignore[arg-type]  # as a status holds it
