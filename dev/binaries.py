"""Where the Kubernetes binaries built by ``hack/k8s/build.sh`` live.

Cached under ``$QOSMOS_K8S_CACHE`` (default ``~/.cache/qosmos/k8s``) in ``<k8s-version>/bin``.
``QOSMOS_K8S_BIN_DIR`` (or ``qosmos dev up --bin-dir``) points at another directory instead;
``QOSMOS_K8S_NO_BUILD=1`` forbids building from the tests.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

DEFAULT_K8S_VERSION = "v1.34.4"
# What a kubelet-less control plane needs (the test tier); `qosmos dev up` also runs kwok.
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
DEV_BINARIES = (*BINARIES, "kwok")
BIN_DIR_ENV = "QOSMOS_K8S_BIN_DIR"


class ControlPlaneError(RuntimeError):
    """A component failed to build, start or become ready."""


class BinariesMissing(ControlPlaneError):
    """Some binaries are not in the directory searched; the message says how to build them."""


def repo_root() -> Path | None:
    """The qosmos checkout holding ``hack/k8s/build.sh`` (env ``QOSMOS_REPO`` first)."""
    candidates = [Path(os.environ["QOSMOS_REPO"])] if os.environ.get("QOSMOS_REPO") else []
    candidates += list(Path(__file__).resolve().parents)
    for c in candidates:
        if (c / "hack" / "k8s" / "build.sh").is_file():
            return c
    return None


def build_script() -> Path | None:
    """Path of ``hack/k8s/build.sh`` or None outside a checkout."""
    root = repo_root()
    return root / "hack" / "k8s" / "build.sh" if root else None


def k8s_version() -> str:
    """The Kubernetes version pinned in build.sh."""
    script = build_script()
    if script:
        m = re.search(r"^K8S_VERSION=(\S+)", script.read_text(), re.M)
        if m:
            return m.group(1)
    return DEFAULT_K8S_VERSION


def cache_bin_dir() -> Path:
    """``$QOSMOS_K8S_BIN_DIR`` when set, else the build cache's ``<version>/bin``."""
    if os.environ.get(BIN_DIR_ENV):
        return Path(os.environ[BIN_DIR_ENV])
    cache = Path(os.environ.get("QOSMOS_K8S_CACHE", Path.home() / ".cache" / "qosmos" / "k8s"))
    return cache / k8s_version() / "bin"


def missing_binaries(bin_dir: Path, names: Sequence[str] = BINARIES) -> list[str]:
    """The names in ``names`` that are not executable files in ``bin_dir``."""
    return [b for b in names if not os.access(bin_dir / b, os.X_OK)]


def binaries_present(bin_dir: Path | None = None, names: Sequence[str] = BINARIES) -> bool:
    """True when every binary in ``names`` is in ``bin_dir`` (default: the cache)."""
    return not missing_binaries(bin_dir or cache_bin_dir(), names)


def require_binaries(bin_dir: Path | None = None, names: Sequence[str] = DEV_BINARIES) -> Path:
    """``bin_dir`` (default: the cache) when it holds ``names``; else BinariesMissing saying how to build them."""
    d = Path(bin_dir) if bin_dir else cache_bin_dir()
    missing = missing_binaries(d, names)
    if missing:
        how = "run `bash hack/k8s/build.sh` (about 13 min the first time)"
        if bin_dir or os.environ.get(BIN_DIR_ENV):
            how += f", or point --bin-dir/{BIN_DIR_ENV} at a directory that has them"
        raise BinariesMissing(f"Kubernetes binaries missing in {d}: {', '.join(missing)}; {how}")
    return d


def k8s_bin_dir(build: bool = True) -> Path:
    """Directory with the control-plane binaries, running build.sh when they are missing.

    Building is skipped when ``build`` is false or ``QOSMOS_K8S_NO_BUILD=1``.
    """
    d = cache_bin_dir()
    if binaries_present(d):
        return d
    script = build_script()
    if os.environ.get(BIN_DIR_ENV) or not build or os.environ.get("QOSMOS_K8S_NO_BUILD") == "1" or script is None:
        raise BinariesMissing(f"Kubernetes binaries missing in {d}; run hack/k8s/build.sh")
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    if proc.returncode != 0 or not binaries_present(d):
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise ControlPlaneError(f"hack/k8s/build.sh failed (rc={proc.returncode}):\n{tail}")
    return d
