"""The repository's scripts (``benchmarks/``, ``hack/``) as modules for tests: they are files, not a package."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def load_script(path: Path, name: str | None = None) -> ModuleType:
    """``path`` imported as a module named ``name`` (its stem by default)."""
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module."""
    return load_script(BENCHMARKS / f"{name}.py")
