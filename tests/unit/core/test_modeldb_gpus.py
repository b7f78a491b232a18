"""Throughput profiles per GPU model (issue 23 §4): own GPU first, then the reference, then the nearest."""

from __future__ import annotations

import numpy as np
import pytest
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.genie import ThroughputProfile
from qosmos.extender.core.gpus import distance, family, generation, gpu_key, same_model
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.ordering import OrderContext, get_policy
from qosmos.extender.core.types import Job, Node, Platform


def profile(model: str, k0: float, gpu: str = "") -> ThroughputProfile:
    on = (("device", gpu), ("precision", "fp32")) if gpu else ()
    return ThroughputProfile(model, k0, 1.0, 0.0, source=f"test {gpu or 'reference'}", measured_on=on)


REF, H200, A100 = profile("ResNet50", 10.0), profile("ResNet50", 30.0, "NVIDIA H200"), profile("ResNet50", 20.0, "A100")


def test_own_gpu_then_reference_then_nearest() -> None:
    db = ModelDB([REF, H200, A100])
    own = db.lookup("resnet-50", "H200")
    assert own.profile is H200 and own.gpu == "own" and own.how == "exact" and "NVIDIA H200" in own.gpu_note
    assert db.lookup("ResNet50", "NVIDIA A100").profile is A100
    ref = db.lookup("ResNet50", "V100")  # another generation: the reference, not a several-fold faster GPU
    assert ref.profile is REF and ref.gpu == "reference" and "no V100 profile" in ref.gpu_note
    plain = db.lookup("ResNet50")
    assert plain.profile is REF and "A100" in plain.gpu_note and "NVIDIA H200" in plain.gpu_note
    measured_only = ModelDB([H200, A100])
    near = measured_only.lookup("ResNet50", "H100")  # common prefix "h" beats A100
    assert near.profile is H200 and near.gpu == "nearest"
    assert measured_only.lookup("ResNet50", "L40S").profile is A100  # one generation away, H200 two
    newest = measured_only.lookup("ResNet50")
    assert newest.profile is H200 and newest.gpu == "newest"
    assert measured_only.get("inceptionv3", "A100") is A100  # the alias, then the GPU rule


def test_add_replaces_only_the_same_model_and_gpu() -> None:
    db = ModelDB([REF, H200])
    newer = profile("resnet50", 40.0, "H200")  # same model (any spelling), same GPU (any vendor prefix)
    db.add(newer)
    assert db.get("ResNet50", "H200") is newer and db.get("ResNet50") is REF
    assert db.names() == ["ResNet50"] and len(db.profiles()) == 2
    with pytest.raises(InvalidInput, match="no profile"):
        db.lookup("Wav2Letter", "H200")


def test_gpu_names_compare_without_vendor_and_punctuation() -> None:
    assert gpu_key("NVIDIA H200") == gpu_key("h200") == "h200" and gpu_key("Tesla V100-SXM2") == "v100sxm2"
    assert distance("v100m32", "v100", "V100") < distance("v100m32", "a100", "A100")


def test_a_node_label_of_the_gpu_family_finds_the_variant_cuda_named() -> None:
    """CUDA names the device "NVIDIA H100 80GB HBM3"; a node's label may say "H100" or the product string."""
    hbm3 = profile("ResNet50", 25.0, "NVIDIA H100 80GB HBM3")
    db = ModelDB([REF, H200, hbm3])
    for label in ("H100", "NVIDIA-H100-80GB-HBM3", "nvidia h100 80gb hbm3"):
        found = db.lookup("ResNet50", label)
        assert found.profile is hbm3 and found.gpu == "own", label
    nvl = db.lookup("ResNet50", "H100 NVL")  # another variant (94 GB, other clocks): not the same GPU
    assert nvl.gpu == "reference"
    assert ModelDB([H200, hbm3]).lookup("ResNet50", "H100 NVL").profile is hbm3  # but the nearest
    assert ModelDB([H200, hbm3]).lookup("ResNet50").profile is H200  # newest: the family's generation
    assert family("h10080gbhbm3") == "h100" and family("a10") == "a10" and family("a100sxm4") == "a100"
    assert same_model("h100", "h10080gbhbm3") and not same_model("h100nvl", "h10080gbhbm3")
    assert generation("h10080gbhbm3") == generation("h100") >= 0 and generation("mi300x") == -1


def test_a_cpu_measured_profile_is_not_a_gpu_profile() -> None:
    cpu = ThroughputProfile("Toy", 1.0, 0.0, 0.0, measured_on=(("device", "cpu x86_64"),))
    assert cpu.gpu_model == "" and ModelDB([cpu]).lookup("Toy", "H200").gpu == "reference"


def test_the_platforms_gpu_model_picks_the_profile_genie_ranks_with() -> None:
    db = ModelDB([REF, H200])
    job = Job("j", 0.0, 1, model="ResNet50", batch=64, iters=100)
    policy = get_policy("swaf")
    on_h200 = OrderContext(platform=Platform(2, 4, "H200"), modeldb=db)
    on_v100 = OrderContext(platform=Platform(2, 4, "V100"), modeldb=db)
    assert policy.table(job, on_h200).profile is H200 and policy.table(job, on_v100).profile is REF


def test_a_partitions_main_gpu_model_has_the_most_gpus() -> None:
    nodes = [Node("a", 8, "A100"), Node("b", 2, "H200"), Node("c", 2, "H200"), Node("d", 4, "")]
    cl = ClusterState(nodes)
    assert cl.main_gpu_model(np.ones(4, dtype=bool)) == "A100"
    assert cl.main_gpu_model(np.array([False, True, True, True])) == ""  # a tie (4 and 4): the first name
    assert cl.main_gpu_model(np.array([False, True, True, False])) == "H200"
    assert cl.main_gpu_model(np.zeros(4, dtype=bool)) == ""
