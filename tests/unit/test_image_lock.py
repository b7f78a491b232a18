"""The image installs from requirements.lock with hashes and a base pinned by digest (issue 22 §2):
the lock must cover what pyproject asks the image for, at versions pyproject allows, every pin with
its sha256; a dependency added to pyproject without re-running hack/image/lock.sh fails here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def locked() -> dict[str, tuple[Version, list[str]]]:
    """name -> (pinned version, its hashes), from the lock's `name==version \\` + `--hash=` lines."""
    out: dict[str, tuple[Version, list[str]]] = {}
    current = None
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if m := re.match(r"^([A-Za-z0-9_.\-]+)==([^\s\\;]+)", line):
            current = canonicalize_name(m[1])
            out[current] = (Version(m[2]), [])
        elif (h := re.match(r"^\s+--hash=sha256:([0-9a-f]{64})", line)) and current:
            out[current][1].append(h[1])
    return out


def image_requirements() -> list[Requirement]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = doc["project"]["dependencies"] + doc["project"]["optional-dependencies"]["gpu"]
    return [Requirement(r) for r in reqs + doc["build-system"]["requires"]]


def test_every_image_requirement_is_locked_at_an_allowed_version_with_hashes() -> None:
    lock = locked()
    assert lock, "requirements.lock pins nothing"
    for req in image_requirements():
        name = canonicalize_name(req.name)
        assert name in lock, f"{req.name} is not in requirements.lock: run bash hack/image/lock.sh"
        version, _ = lock[name]
        assert req.specifier.contains(version, prereleases=True), f"{name}=={version} is outside {req}"
    for name, (version, hashes) in lock.items():
        assert hashes, f"{name}=={version} has no --hash (pip --require-hashes refuses the whole file)"


def test_the_dockerfile_installs_only_the_lock_and_pins_its_base() -> None:
    text = (ROOT / "Dockerfile").read_text()
    base = re.search(r"^ARG BASE=(\S+)$", text, re.M)
    assert base and re.fullmatch(r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", base[1]), base
    assert "--require-hashes --no-deps -r requirements.lock" in text
    # qosmos itself brings no unlocked dependency in
    installs = re.findall(r"pip install [^\n]*", text)
    assert all("--no-deps" in i for i in installs), installs
    assert "requirements.lock" not in (ROOT / ".dockerignore").read_text()
    assert '"$ROOT/requirements.lock"' in (ROOT / "hack" / "image" / "build.sh").read_text()
