"""The built-in model list as real PyTorch workloads, for ``qosmos profile run`` and ``hack/gpu``.

The model database names its workloads as the Lucid measurements do (model + dataset,
``../shared/data/lucid-profiles``); each name here builds that network at that dataset's input size,
so a profile measured on a GPU replaces the Lucid-derived one for the same job. Networks that
torchvision has come from torchvision; the others are the reference designs of their papers at the
sizes of their usual example code (BERT-base on SQuAD, the PyTorch word-language-model LSTM on
WikiText-2, the PyTorch translation Transformer on Multi30k, DCGAN on 64×64 LSUN, NeuMF on
MovieLens-1M, PointNet on ShapeNet). PPO and TD3 are not here: their step time is the environment's
simulation, which a forward/backward pass on random tensors does not measure.

Imported lazily (torch is optional): nothing here runs without PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from qosmos.extender.core.errors import InvalidInput
from torch import nn


@dataclass(frozen=True)
class Workload:
    """One model at one batch size on one device: a training step and a forward pass.

    ``step(autocast, scaler)`` runs one optimiser step (``autocast`` a context-manager factory, the
    fp16 ``scaler`` or None); ``forward()`` one inference pass (call under ``torch.inference_mode``).
    """

    name: str
    dataset: str
    step: Callable[[Callable[[], Any], Any], None]
    forward: Callable[[], Any]
    modules: tuple[nn.Module, ...]


@dataclass(frozen=True)
class _Spec:
    dataset: str
    build: Callable[[], nn.Module]
    inputs: Callable[[int, str], tuple[tuple[Any, ...], Any]]  # (batch, device) -> (inputs, targets)
    loss: Callable[[Any, Any], Any]


def _images(size: int, classes: int) -> Callable[[int, str], tuple[tuple[Any, ...], Any]]:
    def make(b: int, device: str) -> tuple[tuple[Any, ...], Any]:
        return (torch.randn(b, 3, size, size, device=device),), torch.randint(0, classes, (b,), device=device)

    return make


def _tv(name: str, **kw: Any) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision

        model: nn.Module = getattr(torchvision.models, name)(weights=None, **kw)
        return model

    return build


def _cifar_vgg16() -> nn.Module:
    import torchvision

    # VGG-16's convolutions with the 512 -> 10 classifier CIFAR code uses (torchvision's 25088-wide
    # head assumes 224×224 inputs).
    return nn.Sequential(torchvision.models.vgg16(weights=None).features, nn.Flatten(), nn.Linear(512, 10))


class _Bert(nn.Module):
    """BERT-base (12 layers, 768 wide, 12 heads) with SQuAD's span head: start/end logits per token."""

    def __init__(self, vocab: int = 30522, width: int = 768, layers: int = 12, seq: int = 384) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(seq, width)
        layer = nn.TransformerEncoderLayer(width, 12, 4 * width, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.span = nn.Linear(width, 2)

    def forward(self, ids: Any) -> Any:
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.span(self.encoder(self.tokens(ids) + self.positions(pos)))  # (b, seq, 2)


def _bert_inputs(b: int, device: str) -> tuple[tuple[Any, ...], Any]:
    return (torch.randint(0, 30522, (b, 384), device=device),), torch.randint(0, 384, (b, 2), device=device)


def _span_loss(out: Any, y: Any) -> Any:
    ce = nn.functional.cross_entropy
    return ce(out[..., 0], y[:, 0]) + ce(out[..., 1], y[:, 1])


class _WordLSTM(nn.Module):
    """PyTorch's word_language_model defaults: 2-layer LSTM, 200 wide, WikiText-2's 33,278 words."""

    def __init__(self, vocab: int = 33278, width: int = 200) -> None:
        super().__init__()
        self.embed, self.lstm = nn.Embedding(vocab, width), nn.LSTM(width, width, 2, dropout=0.2, batch_first=True)
        self.decode = nn.Linear(width, vocab)

    def forward(self, ids: Any) -> Any:
        return self.decode(self.lstm(self.embed(ids))[0])


def _tokens(vocab: int, seq: int) -> Callable[[int, str], tuple[tuple[Any, ...], Any]]:
    def make(b: int, device: str) -> tuple[tuple[Any, ...], Any]:
        return (torch.randint(0, vocab, (b, seq), device=device),), torch.randint(0, vocab, (b, seq), device=device)

    return make


def _token_loss(out: Any, y: Any) -> Any:
    return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


class _Translator(nn.Module):
    """The PyTorch translation tutorial's Transformer on Multi30k (de -> en): 3+3 layers, 512 wide."""

    def __init__(self, src_vocab: int = 19215, tgt_vocab: int = 10838, width: int = 512) -> None:
        super().__init__()
        self.src, self.tgt = nn.Embedding(src_vocab, width), nn.Embedding(tgt_vocab, width)
        self.body = nn.Transformer(width, 8, 3, 3, 512, batch_first=True)
        self.out = nn.Linear(width, tgt_vocab)

    def forward(self, src: Any, tgt: Any) -> Any:
        mask = self.body.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device)
        return self.out(self.body(self.src(src), self.tgt(tgt), tgt_mask=mask))


def _translation_inputs(b: int, device: str) -> tuple[tuple[Any, ...], Any]:
    src = torch.randint(0, 19215, (b, 30), device=device)
    tgt = torch.randint(0, 10838, (b, 30), device=device)
    return (src, tgt), torch.randint(0, 10838, (b, 30), device=device)


class _NeuMF(nn.Module):
    """NeuMF (GMF + MLP) with the NCF paper's MovieLens-1M sizes: factor 8, MLP 64-32-16-8."""

    def __init__(self, users: int = 6040, items: int = 3706, factor: int = 8) -> None:
        super().__init__()
        self.gmf_u, self.gmf_i = nn.Embedding(users, factor), nn.Embedding(items, factor)
        self.mlp_u, self.mlp_i = nn.Embedding(users, 32), nn.Embedding(items, 32)
        self.mlp = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 8))
        self.out = nn.Linear(factor + 8, 1)

    def forward(self, u: Any, i: Any) -> Any:
        gmf = self.gmf_u(u) * self.gmf_i(i)
        mlp = self.mlp(torch.cat([self.mlp_u(u), self.mlp_i(i)], dim=-1))
        return self.out(torch.cat([gmf, mlp], dim=-1)).squeeze(-1)


def _ncf_inputs(b: int, device: str) -> tuple[tuple[Any, ...], Any]:
    u, i = torch.randint(0, 6040, (b,), device=device), torch.randint(0, 3706, (b,), device=device)
    return (u, i), torch.randint(0, 2, (b,), device=device).float()


def _bce(out: Any, y: Any) -> Any:
    return nn.functional.binary_cross_entropy_with_logits(out, y)


class _TNet(nn.Module):
    """PointNet's k×k input/feature transform network."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k
        self.conv = nn.Sequential(
            nn.Conv1d(k, 64, 1), nn.BatchNorm1d(64), nn.ReLU(),
            nn.Conv1d(64, 128, 1), nn.BatchNorm1d(128), nn.ReLU(),
            nn.Conv1d(128, 1024, 1), nn.BatchNorm1d(1024), nn.ReLU(),
        )  # fmt: skip
        self.fc = nn.Sequential(nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, k * k))

    def forward(self, x: Any) -> Any:
        m = self.fc(self.conv(x).amax(dim=2)).view(-1, self.k, self.k)
        return m + torch.eye(self.k, device=x.device)


class _PointNet(nn.Module):
    """PointNet classification with input and feature transforms; 2,500 points, 16 ShapeNet classes."""

    def __init__(self, classes: int = 16) -> None:
        super().__init__()
        self.t3, self.t64 = _TNet(3), _TNet(64)
        self.conv1 = nn.Sequential(nn.Conv1d(3, 64, 1), nn.BatchNorm1d(64), nn.ReLU())
        self.conv2 = nn.Sequential(
            nn.Conv1d(64, 128, 1), nn.BatchNorm1d(128), nn.ReLU(), nn.Conv1d(128, 1024, 1), nn.BatchNorm1d(1024)
        )
        self.head = nn.Sequential(
            nn.Linear(1024, 512), nn.BatchNorm1d(512), nn.ReLU(),
            nn.Linear(512, 256), nn.Dropout(0.3), nn.BatchNorm1d(256), nn.ReLU(), nn.Linear(256, classes),
        )  # fmt: skip

    def forward(self, pts: Any) -> Any:
        x = torch.bmm(self.t3(pts).transpose(1, 2), pts)
        x = self.conv1(x)
        x = torch.bmm(self.t64(x).transpose(1, 2), x)
        return self.head(self.conv2(x).amax(dim=2))


def _points(b: int, device: str) -> tuple[tuple[Any, ...], Any]:
    return (torch.randn(b, 3, 2500, device=device),), torch.randint(0, 16, (b,), device=device)


def _ce(out: Any, y: Any) -> Any:
    return nn.functional.cross_entropy(out, y)


_SPECS: dict[str, _Spec] = {
    "ResNet50": _Spec("ImageNet", _tv("resnet50"), _images(224, 1000), _ce),
    "MobileNetV3": _Spec("ImageNet", _tv("mobilenet_v3_large"), _images(224, 1000), _ce),
    "ResNet18": _Spec("CIFAR-10", _tv("resnet18", num_classes=10), _images(32, 10), _ce),
    "MobileNetV2": _Spec("CIFAR-10", _tv("mobilenet_v2", num_classes=10), _images(32, 10), _ce),
    "EfficientNet": _Spec("CIFAR-10", _tv("efficientnet_b0", num_classes=10), _images(32, 10), _ce),
    "VGG": _Spec("CIFAR-10", _cifar_vgg16, _images(32, 10), _ce),
    "BERT": _Spec("SQuAD", _Bert, _bert_inputs, _span_loss),
    "LSTM": _Spec("Wikitext2", _WordLSTM, _tokens(33278, 35), _token_loss),
    "Transformer": _Spec("Multi30k", _Translator, _translation_inputs, _token_loss),
    "NeuMF": _Spec("MovieLens", _NeuMF, _ncf_inputs, _bce),
    "PointNet": _Spec("ShapeNet", _PointNet, _points, _ce),
    # A small network for smoke tests on any machine; not a model of the database.
    "mlp": _Spec(
        "random",
        lambda: nn.Sequential(nn.Flatten(), nn.Linear(3 * 64 * 64, 512), nn.ReLU(), nn.Linear(512, 1000)),
        _images(64, 1000),
        _ce,
    ),
}
NOT_MEASURABLE = {"PPO": "LunarLander", "TD3": "BipedalWalker"}  # reinforcement learning: the step is the env


def model_names() -> list[str]:
    """The names ``workload`` builds, the database's models first."""
    return [*sorted([*(n for n in _SPECS if n != "mlp"), "DCGAN"]), "mlp"]


def canonical_name(model: str) -> str:
    """The database's spelling of ``model`` (case-insensitive); a clear error for unknown names."""
    by_lower = {n.lower(): n for n in model_names()}
    if model.lower() in by_lower:
        return by_lower[model.lower()]
    if model in NOT_MEASURABLE or model.lower() in {n.lower() for n in NOT_MEASURABLE}:
        raise InvalidInput("model", model, "reinforcement learning: its step time is the environment's, not measured")
    raise InvalidInput("model", model, "expected one of " + ", ".join(model_names()))


def _backward(loss: Any, opt: Any, scaler: Any) -> None:
    """Backward and an optimiser step; through the fp16 gradient scaler when there is one."""
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt)


def _dcgan(b: int, device: str, wrap: Callable[[nn.Module], nn.Module] | None = None) -> Workload:
    """DCGAN (64×64 LSUN, nz 100, 64 feature maps): a discriminator step on real and generated
    images, then a generator step through the discriminator, each with its own Adam, as the
    reference training loop does."""
    nz, f = 100, 64

    def up(i: int, o: int, s: int = 2, p: int = 1) -> list[nn.Module]:
        return [nn.ConvTranspose2d(i, o, 4, s, p, bias=False), nn.BatchNorm2d(o), nn.ReLU(True)]

    def down(i: int, o: int, bn: bool = True) -> list[nn.Module]:
        return [nn.Conv2d(i, o, 4, 2, 1, bias=False), *([nn.BatchNorm2d(o)] if bn else []), nn.LeakyReLU(0.2, True)]

    gen: nn.Module = nn.Sequential(
        *up(nz, f * 8, 1, 0), *up(f * 8, f * 4), *up(f * 4, f * 2), *up(f * 2, f),
        nn.ConvTranspose2d(f, 3, 4, 2, 1, bias=False), nn.Tanh(),
    ).to(device)  # fmt: skip
    disc: nn.Module = nn.Sequential(
        *down(3, f, bn=False), *down(f, f * 2), *down(f * 2, f * 4), *down(f * 4, f * 8),
        nn.Conv2d(f * 8, 1, 4, 1, 0, bias=False), nn.Flatten(),
    ).to(device)  # fmt: skip
    if wrap is not None:
        gen, disc = wrap(gen), wrap(disc)
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    real = torch.randn(b, 3, 64, 64, device=device)
    noise = torch.randn(b, nz, 1, 1, device=device)
    ones, zeros = torch.ones(b, 1, device=device), torch.zeros(b, 1, device=device)

    def step(autocast: Callable[[], Any], scaler: Any) -> None:
        opt_d.zero_grad(set_to_none=True)
        with autocast():
            fake = gen(noise)
            d_loss = _bce(disc(real), ones) + _bce(disc(fake.detach()), zeros)
        _backward(d_loss, opt_d, scaler)
        opt_g.zero_grad(set_to_none=True)
        with autocast():
            g_loss = _bce(disc(fake), ones)
        _backward(g_loss, opt_g, scaler)
        if scaler is not None:
            scaler.update()

    return Workload("DCGAN", "LSUN", step, lambda: gen(noise), (gen, disc))


def workload(
    model: str,
    batch: int,
    device: str,
    *,
    dtype: Any = None,
    train: bool = True,
    wrap: Callable[[nn.Module], nn.Module] | None = None,
) -> Workload:
    """``model`` (a database name, any case) at ``batch`` on ``device``. ``dtype`` casts the network
    and its floating-point inputs for inference (training casts through autocast instead); ``wrap``
    wraps each network before its optimiser is made (DistributedDataParallel for multi-GPU runs)."""
    name = canonical_name(model)
    if batch < 1:
        raise InvalidInput("batch", batch, "must be >= 1")
    if name == "DCGAN":
        w = _dcgan(batch, device, wrap)
        if dtype is not None:
            for m in w.modules:
                m.to(dtype=dtype)
        return w
    spec = _SPECS[name]
    net = spec.build().to(device)
    inputs, targets = spec.inputs(batch, device)
    if dtype is not None:
        net = net.to(dtype=dtype)
        inputs = tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)
    net.train(train)
    if wrap is not None:
        net = wrap(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)

    def step(autocast: Callable[[], Any], scaler: Any) -> None:
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = spec.loss(net(*inputs), targets)
        _backward(loss, opt, scaler)
        if scaler is not None:
            scaler.update()

    return Workload(name, spec.dataset, step, lambda: net(*inputs), (net,))


def dataset(model: str) -> str:
    """The dataset (input size) the built-in ``model`` is measured at."""
    name = canonical_name(model)
    return "LSUN" if name == "DCGAN" else _SPECS[name].dataset


__all__ = ["NOT_MEASURABLE", "Workload", "canonical_name", "dataset", "model_names", "workload"]
