"""The built-in model list as real PyTorch workloads (runs where torch is installed; CI has none)."""

from __future__ import annotations

import pytest
from qosmos.extender.core.errors import InvalidInput

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

from qosmos.predictors.torch_models import canonical_name, dataset, model_names, workload  # noqa: E402


@pytest.mark.parametrize("model", [m for m in model_names() if m not in ("BERT", "Transformer")])
def test_every_model_trains_and_infers_on_the_cpu(model: str) -> None:
    w = workload(model, 2, "cpu")
    params = [p.detach().clone() for m in w.modules for p in m.parameters()]
    w.step(lambda: torch.autocast("cpu", enabled=False), None)
    after = [p.detach() for m in w.modules for p in m.parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(params, after, strict=True))  # the optimiser stepped
    with torch.inference_mode():
        out = workload(model, 2, "cpu", train=False).forward()
    assert out.shape[0] == 2


def test_names_and_errors() -> None:
    assert canonical_name("resnet-50".replace("-", "")) == "ResNet50" and canonical_name("dcgan") == "DCGAN"
    assert dataset("ResNet18") == "CIFAR-10" and dataset("ResNet50") == "ImageNet"
    with pytest.raises(InvalidInput, match="environment"):
        canonical_name("PPO")
    with pytest.raises(InvalidInput, match="expected one of"):
        canonical_name("resnet151")
    with pytest.raises(InvalidInput, match="batch"):
        workload("mlp", 0, "cpu")


def test_data_parallel_samples_on_two_gloo_processes() -> None:
    from qosmos.predictors.profiler import measure_torch

    two = measure_torch("mlp", [8], steps=2, warmup=1, windows=2, max_warmup=3, min_window_s=0.01, gpus=2)
    assert len(two) == 1 and two[0].shape.d_gpn == 2 and two[0].rate > 0
    with pytest.raises(InvalidInput, match="split evenly"):
        measure_torch("mlp", [7], gpus=2)
