"""GENIE's model database: throughput profiles per model type, with a similarity fallback.

Seed 001 §6: when a task's model type has no profile, GENIE uses the most similar
profiled model until the lightweight profiler has measured it. We match in order:
exact name (case/punctuation-insensitive), a documented alias (a model of the same
family whose profile stands in), then the closest name (difflib ratio >= 0.6).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.genie import ThroughputProfile
from qosmos.extender.core.profiles_builtin import BUILTIN_PROFILES, PROFILE_ASSUMPTIONS

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


class ModelDB:
    """Profiles by model type. Pure: built from data, never reads files itself."""

    def __init__(self, profiles: Iterable[ThroughputProfile]) -> None:
        self._by_key: dict[str, ThroughputProfile] = {}
        for p in profiles:
            self.add(p)

    @classmethod
    def builtin(cls) -> ModelDB:
        return cls(BUILTIN_PROFILES)

    def add(self, profile: ThroughputProfile) -> None:
        self._by_key[_key(profile.model)] = profile

    def names(self) -> list[str]:
        return sorted(p.model for p in self._by_key.values())

    def __contains__(self, name: str) -> bool:
        return _key(name) in self._by_key

    def lookup(self, name: str) -> Lookup:
        if not name:
            raise InvalidInput("model", name, "a model type is needed to predict throughput")
        key = _key(name)
        if key in self._by_key:
            return Lookup(self._by_key[key], self._by_key[key].model, "exact")
        alias = ALIASES.get(key)
        if alias is not None and _key(alias) in self._by_key:
            p = self._by_key[_key(alias)]
            return Lookup(p, p.model, "alias")
        close = difflib.get_close_matches(key, list(self._by_key), n=1, cutoff=0.6)
        if close:
            p = self._by_key[close[0]]
            return Lookup(p, p.model, "similar")
        raise InvalidInput("model", name, f"no profile and nothing similar; known: {', '.join(self.names())}")

    def get(self, name: str) -> ThroughputProfile:
        return self.lookup(name).profile


__all__ = ["ALIASES", "PROFILE_ASSUMPTIONS", "Lookup", "ModelDB"]
