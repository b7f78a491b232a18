"""GENIE's model database: throughput profiles per model type and GPU model, with fallbacks.

Seed 001 §6: when a task's model type has no profile, GENIE uses the most similar
profiled model until the lightweight profiler has measured it. We match the model in order:
exact name (case/punctuation-insensitive), a documented alias (a model of the same
family whose profile stands in), then the closest name (difflib ratio >= 0.6).

A model may have several profiles: one per GPU model it was measured on (``measured_on``'s
device, e.g. the H200 runs of ``hack/gpu``) and one reference profile without a GPU model (the
Lucid-derived built-ins). Asked for a GPU model, the lookup takes that model's own profile, else
the reference, else the nearest measured GPU model (:mod:`qosmos.extender.core.gpus`): a profile
of another GPU generation is the last resort because rates differ several-fold across generations
(ResNet-50 fp32 at batch 128: 466 samples/s in Lucid's measurements, 1010 on an H200). Not asked
for one, the reference comes first, then the newest measured GPU. Every lookup says which it used.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.genie import ThroughputProfile
from qosmos.extender.core.gpus import distance, generation, gpu_key, same_model
from qosmos.extender.core.profiles_builtin import BUILTIN_PROFILES, PROFILE_ASSUMPTIONS
from qosmos.extender.core.profiles_measured import MEASURED_PROFILES

# Stand-ins for GENIE's Table 3 models that the real profiles (Lucid) do not cover.
# Chosen by architecture family and input size; documented in extender/core/README.md.
ALIASES: Mapping[str, str] = {
    "alexnet": "VGG",  # plain convolution stack
    "googlenet": "MobileNetV3",  # ImageNet CNN of a few GFLOPs with inception-like blocks
    "inceptionv3": "ResNet50",  # deep ImageNet CNN of ResNet50's cost
    "regularizedlstm": "LSTM",
    "seq2seq": "Transformer",  # Multi30k translation is a sequence-to-sequence task
    "bertbase": "BERT",
}


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


@dataclass(frozen=True, slots=True)
class Lookup:
    profile: ThroughputProfile
    matched: str
    how: str  # "exact" | "alias" | "similar"
    gpu: str = "reference"  # "own" | "reference" (no GPU model recorded) | "nearest" | "newest"
    gpu_note: str = ""


class ModelDB:
    """Profiles by model type and GPU model. Pure: built from data, never reads files itself."""

    def __init__(self, profiles: Iterable[ThroughputProfile]) -> None:
        self._by_key: dict[str, dict[str, ThroughputProfile]] = {}
        # lookups made, by (name, GPU model): GENIE's policies and estimates ask for every queued task at
        # every pass, and a name's match (normalised, alias, difflib) was most of a long SWAF queue's pass
        self._found: dict[tuple[str, str], Lookup] = {}
        self.version = 0  # changes with every add: what was derived from a lookup may be stale
        for p in profiles:
            self.add(p)

    @classmethod
    def builtin(cls) -> ModelDB:
        return cls((*BUILTIN_PROFILES, *MEASURED_PROFILES))

    def add(self, profile: ThroughputProfile) -> None:
        """Add, or replace the profile of the same model and GPU model."""
        self._by_key.setdefault(_key(profile.model), {})[gpu_key(profile.gpu_model)] = profile
        self._found.clear()
        self.version += 1

    def names(self) -> list[str]:
        # one name per model (the reference's spelling, else the first GPU's)
        return sorted((per.get("") or per[min(per)]).model for per in self._by_key.values())

    def profiles(self) -> list[ThroughputProfile]:
        return [p for k in sorted(self._by_key) for _, p in sorted(self._by_key[k].items())]

    def __contains__(self, name: str) -> bool:
        return _key(name) in self._by_key

    def _model(self, name: str) -> tuple[str, str]:
        """(model key, how) for a requested name."""
        if not name:
            raise InvalidInput("model", name, "a model type is needed to predict throughput")
        key = _key(name)
        if key in self._by_key:
            return key, "exact"
        alias = ALIASES.get(key)
        if alias is not None and _key(alias) in self._by_key:
            return _key(alias), "alias"
        close = difflib.get_close_matches(key, list(self._by_key), n=1, cutoff=0.6)
        if close:
            return close[0], "similar"
        raise InvalidInput("model", name, f"no profile and nothing similar; known: {', '.join(self.names())}")

    def lookup(self, name: str, gpu_model: str = "") -> Lookup:
        found = self._found.get((name, gpu_model))
        if found is None:
            found = self._found[(name, gpu_model)] = self._lookup(name, gpu_model)
        return found

    def _lookup(self, name: str, gpu_model: str) -> Lookup:
        key, how = self._model(name)
        per_gpu = self._by_key[key]
        want = gpu_key(gpu_model)
        reference = per_gpu.get("")
        measured = {g: p for g, p in per_gpu.items() if g}
        own = sorted((g for g in measured if want and same_model(want, g)), key=lambda g: g != want)
        if own:  # the exact name first, then the family's variant
            p = measured[own[0]]
            return Lookup(p, p.model, how, "own", f"measured on {p.gpu_model}")
        if reference is not None:
            note = f"no {gpu_model} profile: the reference profile" if want else "the reference profile"
            if measured and not want:
                note += " (measured on " + ", ".join(sorted(p.gpu_model for p in measured.values())) + ": ask for it)"
            return Lookup(reference, reference.model, how, "reference", note)
        if want:
            g = min(measured, key=lambda g: distance(want, g, g))
            p = measured[g]
            return Lookup(p, p.model, how, "nearest", f"no {gpu_model} profile: the nearest GPU model's, {p.gpu_model}")
        g = max(measured, key=lambda g: (generation(g), g))
        p = measured[g]
        return Lookup(p, p.model, how, "newest", f"no GPU model given: the {p.gpu_model} profile (the newest measured)")

    def get(self, name: str, gpu_model: str = "") -> ThroughputProfile:
        return self.lookup(name, gpu_model).profile


__all__ = ["ALIASES", "PROFILE_ASSUMPTIONS", "Lookup", "ModelDB"]
