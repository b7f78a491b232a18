"""What a test does when a built part it needs is missing: skip on a developer's machine, fail in
CI (``CI`` set), where a missing part means a broken build, not an optional one."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest
from qosmos.dev.binaries import cache_bin_dir


def skip_or_fail(msg: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


def helm_binary() -> str:
    """The helm binary hack/k8s/build.sh builds (skipped, or failed under CI, when it is not there)."""
    path = cache_bin_dir() / "helm"
    if not os.access(path, os.X_OK):
        skip_or_fail(f"helm missing ({path}): run hack/k8s/build.sh")
    return str(path)
