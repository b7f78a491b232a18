"""GPU models compared by name: which measured GPU is "nearest" the node's own (issue 23 §4).

Used by the inference profiles (C(b) per GPU model) and the model database (throughput profiles
per GPU model). Nearest is, in order: the longest common prefix of the normalised names
(``V100M32`` is nearer ``V100`` than ``A100``), then the smallest distance in
:data:`GPU_GENERATIONS` (known models, oldest first; unknown ones rank after), then the name.
"""

from __future__ import annotations

import re

# Known GPU models, oldest first: the tie-break of "nearest" (names normalised as by ``gpu_key``).
GPU_GENERATIONS: tuple[str, ...] = (
    "k80",
    "p100",
    "v100",
    "v100m32",
    "t4",
    "a10",
    "a100",
    "l40s",
    "h100",
    "h200",
    "b200",
)


def gpu_key(name: str) -> str:
    """A GPU model's name compared: lower case, alphanumerics only, without a vendor prefix."""
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    for prefix in ("nvidia", "tesla", "geforce"):
        key = key.removeprefix(prefix)
    return key


def family(key: str) -> str:
    """The known GPU model a normalised name is a variant of (the longest of GPU_GENERATIONS it begins
    with: ``h10080gbhbm3`` -> ``h100``, as CUDA names the device and a node's product label spells it);
    the name itself when none."""
    known = [g for g in GPU_GENERATIONS if key.startswith(g)]
    return max(known, key=len) if known else key


def generation(key: str) -> int:
    """Position of a normalised name's family in GPU_GENERATIONS; -1 when unknown."""
    f = family(key)
    return GPU_GENERATIONS.index(f) if f in GPU_GENERATIONS else -1


def same_model(want: str, have: str) -> bool:
    """Whether two normalised names are one GPU model: equal, or one is the bare family name of the
    other (a node labelled ``H100`` and a profile of the ``NVIDIA H100 80GB HBM3``). Two different
    variants (``h100nvl``, ``h10080gbhbm3``) are not: their memory and clocks differ."""
    return want == have or (family(want) == family(have) and family(want) in (want, have))


def distance(want: str, have: str, name: str) -> tuple[int, int, str]:
    """Sort key, smaller is nearer: (−common prefix, generation distance, name) of normalised names."""
    common = 0
    for a, b in zip(want, have, strict=False):
        if a != b:
            break
        common += 1
    gw, gh = generation(want), generation(have)
    gen = abs(gw - gh) if gw >= 0 and gh >= 0 else len(GPU_GENERATIONS)
    return (-common, gen, name)


__all__ = ["GPU_GENERATIONS", "distance", "family", "generation", "gpu_key", "same_model"]
