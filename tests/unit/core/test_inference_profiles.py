"""Inference profiles (issue 23 §3): C(b) from measured points, the nearest GPU model, thresholds derived
from a tiny profile by hand, overrides, and where every threshold came from."""

from __future__ import annotations

import itertools

import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.inference import resolve_spec
from qosmos.extender.core.inference_profiles import ComputeCurve, Device, InferenceProfiles, MeasuredCompute
from qosmos.extender.core.modeldb import ModelDB

META = {"measured": "2026-11", "precision": "fp32", "torch": "2.11"}
# toy GPU: 10 ms at batch 10, 30 ms at batch 50 (slope 0.5 ms/query above 10); toy CPU: 8 cores, 40 ms at 4
GPU = ComputeCurve("Toy", Device.GPU, "A100", 0, (50, 10), (0.030, 0.010), META)
CPU = ComputeCurve("Toy", Device.CPU, "A100", 8, (4,), (0.040,), META)
DB = ModelDB.builtin()


def toy_profiles(*more: ComputeCurve) -> InferenceProfiles:
    return InferenceProfiles([GPU, CPU, *more])


def test_interpolation_between_below_and_above_the_points() -> None:
    c = MeasuredCompute(GPU)
    assert GPU.batches == (10, 50)  # sorted
    assert c.seconds(5) == pytest.approx(0.005)  # towards C(0) = 0
    assert c.seconds(10) == pytest.approx(0.010)
    assert c.seconds(30) == pytest.approx(0.020)  # halfway between 10 and 30 ms
    assert c.seconds(90) == pytest.approx(0.050)  # the last segment's slope, 0.5 ms a query
    one = MeasuredCompute(CPU)  # one point: the line through the origin
    assert one.seconds(2) == pytest.approx(0.020) and one.seconds(8) == pytest.approx(0.080)


def test_a_noisy_point_never_makes_a_larger_batch_faster() -> None:
    noisy = ComputeCurve("Toy", Device.GPU, "A100", 0, (10, 20, 40), (0.010, 0.008, 0.020))
    c = MeasuredCompute(noisy)
    times = [c.seconds(b) for b in range(1, 60)]
    assert all(b >= a for a, b in itertools.pairwise(times))
    assert c.seconds(20) == pytest.approx(0.010)  # the running maximum


def test_the_own_gpu_model_first_then_the_nearest() -> None:
    v100 = ComputeCurve("Toy", Device.GPU, "V100", 0, (10,), (0.02,))
    h200 = ComputeCurve("Toy", Device.GPU, "NVIDIA H200", 0, (10,), (0.004,))
    db = toy_profiles(v100, h200)
    own = db.gpu("toy", "a100")  # names compared without case or punctuation
    assert own is not None and own.curve is GPU and own.match == "own"
    variant = db.gpu("Toy", "Tesla V100-SXM2-32GB")  # vendor prefix dropped: v100sxm232gb, a V100 variant
    assert variant is not None and variant.curve is v100 and variant.match == "own"
    near = db.gpu("Toy", "NVIDIA A10G")  # a10g: not an A100, but nearest by prefix ("a10")
    assert near is not None and near.curve is GPU and near.match == "nearest"
    assert "no NVIDIA A10G profile" in near.source and "A100" in near.how
    h100 = db.gpu("Toy", "H100")  # the common prefix "h" of H200, then the generation list
    assert h100 is not None and h100.curve is h200
    l40s = db.gpu("Toy", "L40S")  # no common prefix: the nearest generation, A100 (one step) before H200 (two)
    assert l40s is not None and l40s.curve is GPU
    newest = db.gpu("Toy", None)
    assert newest is not None and newest.curve is h200 and newest.match == "any"
    assert db.gpu("Other", "A100") is None


def test_cpu_cores_scale_linearly_from_the_nearest_measured() -> None:
    c16 = ComputeCurve("Toy", Device.CPU, "", 16, (4,), (0.030,))
    db = toy_profiles(c16)
    same = db.cpu("Toy", 8)
    assert same is not None and same.curve is CPU and same.scale == 1 and same.match == "own"
    twelve = db.cpu("Toy", 12)  # 8 and 16 both 4 away: the larger, scaled 16/12
    assert twelve is not None and twelve.curve is c16 and twelve.scale == pytest.approx(16 / 12)
    assert "scaled linearly from 16 to 12 cores" in twelve.source
    assert twelve.compute.seconds(4) == pytest.approx(0.030 * 16 / 12)
    on_a100 = db.cpu("Toy", 16, "A100")  # a curve of the node's own GPU model first, though it has 8 cores
    assert on_a100 is not None and on_a100.curve is CPU and on_a100.scale == pytest.approx(0.5)
    with pytest.raises(InvalidInput, match="cores"):
        db.cpu("Toy", 0)


def test_thresholds_derived_by_hand_from_a_tiny_profile() -> None:
    """T = 200 ms: the largest B with C(B) <= 100 ms. GPU: 30 ms + 0.5 ms (B − 50) = 100 ms at B = 190,
    190 / 0.1 = 1900 queries/s. CPU on 8 cores: 10 ms a query, B = 10, 10 / 0.1 = 100 queries/s; on 4 cores
    (scaled 8/4): 20 ms a query, B = 5, 50 queries/s."""
    spec = resolve_spec("Toy", 200, db=DB, inference_profiles=toy_profiles(), gpu_model="A100", cpu_cores_per_replica=8)
    assert spec.gpu_switch_batch == 190 and spec.gpu.capacity_qps == pytest.approx(1900)
    assert spec.cpu is not None and spec.cpu.batch == 10 and spec.cpu.capacity_qps == pytest.approx(100)
    assert spec.source("gpu_switch_batch") == "profile A100 (measured 2026-11, fp32, PyTorch 2.11)"
    assert spec.source("cpu_max_batch") == "profile 8 cores of a A100 node (measured 2026-11, fp32, PyTorch 2.11)"
    four = resolve_spec("Toy", 200, db=DB, inference_profiles=toy_profiles(), cpu_cores_per_replica=4)
    assert four.cpu is not None and four.cpu.batch == 5 and four.cpu.capacity_qps == pytest.approx(50)
    assert "scaled linearly from 8 to 4 cores" in four.source("cpu_compute")
    th = spec.thresholds()
    assert th["gpu_replica_max_qps"] == {"value": 1900.0, "source": spec.source("gpu_compute")}
    assert th["cpu_max_batch"]["value"] == 10


def test_overrides_win_and_say_so() -> None:
    spec = resolve_spec(
        "Toy",
        200,
        db=DB,
        inference_profiles=toy_profiles(),
        gpu_switch_batch=20,
        cpu_max_batch=2,
        cpu_cores_per_replica=8,
    )
    assert spec.gpu_switch_batch == 20 and spec.gpu.compute_s == pytest.approx(0.1)  # rescaled: 2 C(20) = T
    assert spec.cpu is not None and spec.cpu.batch == 2 and spec.cpu.capacity_qps == pytest.approx(20)
    assert spec.source("gpu_switch_batch") == "override" and spec.source("cpu_max_batch") == "override"
    assert spec.source("gpu_compute").startswith("override") and "profile A100" in spec.source("gpu_compute")


def test_without_a_profile_the_database_and_the_seed() -> None:
    spec = resolve_spec("ResNet50", 200, db=DB, inference_profiles=InferenceProfiles())
    assert spec.source("gpu_switch_batch").startswith("model DB training rate (ResNet50")
    assert spec.source("cpu_max_batch").startswith("seed 002 Fig. 16")
    vgg = resolve_spec("VGG16", 200, db=DB, inference_profiles=InferenceProfiles())
    assert vgg.source("cpu_max_batch").startswith("seed 002 Table III (VGG16")


def test_the_builtin_resnet50_profile_is_the_h200_measurement() -> None:
    """Issue 23, measured by hack/gpu/run.sh on an H200 (predictors/measured/h200-2026-11-29, which
    supersedes 11-26's run): about 7,700 queries/s a GPU replica and about 50 a 16-core replica at
    T/2 = 100 ms."""
    spec = resolve_spec("ResNet50", 200, db=DB)
    # GPU: C(256) = 33.984 ms, last segment (128 -> 256) 16.323 ms / 128 queries; C(B) <= 100 ms at B = 773
    assert spec.gpu_switch_batch == 773 and 7700 < spec.gpu.capacity_qps < 7800
    # CPU, 16 cores: C(4) = 80.7 ms, C(8) = 140.4 ms; the largest batch within 100 ms is 5 (C(5) = 95.6 ms)
    assert spec.cpu is not None and spec.cpu.batch == 5
    assert spec.cpu.capacity_qps == pytest.approx(5 / (0.080695 + (0.140401 - 0.080695) / 4), rel=1e-3)
    curve = InferenceProfiles.builtin().gpu("ResNet50", "H200")
    assert curve is not None and curve.match == "own" and "hack/gpu" in curve.curve.meta["source"]


def test_bad_curves_are_refused() -> None:
    with pytest.raises(InvalidInput, match="gpu_model"):
        ComputeCurve("Toy", Device.GPU, "", 0, (1,), (0.1,))
    with pytest.raises(InvalidInput, match="cores"):
        ComputeCurve("Toy", Device.CPU, "", 0, (1,), (0.1,))
    with pytest.raises(InvalidInput, match="compute_s"):
        ComputeCurve("Toy", Device.GPU, "A100", 0, (1,), (0.0,))
    with pytest.raises(InvalidInput, match="batch"):
        ComputeCurve("Toy", Device.GPU, "A100", 0, (1, 1), (0.1, 0.2))
