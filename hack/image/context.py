#!/usr/bin/env python3
"""The qosmos image's build context, its content hash and its offline wheel list (hack/image/build.sh).

``files``: the repository files ``docker build .`` would send (git's tracked and untracked, not
ignored, files; then the root ``.dockerignore``). ``hash``: a sha256 over their paths, modes and
contents, so the image is rebuilt only when something the Dockerfile copies changed.
``stage DEST``: those files hard-linked (or copied) into DEST. ``requirements``: pyproject's
dependencies, the ``gpu`` extra and the build-system requirements, for ``pip download``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pattern(p: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go's filepath.Match plus ``**``) as a regex on a slash path."""
    out, i = "", 0
    while i < len(p):
        if p.startswith("**", i):
            out += ".*"
            i += 2
            if i < len(p) and p[i] == "/":
                out = out[:-2] + "(?:.*/)?"
                i += 1
        elif p[i] == "*":
            out += "[^/]*"
            i += 1
        elif p[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(p[i])
            i += 1
    return re.compile(out + r"\Z")


def ignore_rules(root: Path) -> list[tuple[bool, re.Pattern[str]]]:
    """(is_exception, pattern) in file order: the last matching rule decides, as in Docker."""
    f = root / ".dockerignore"
    rules = []
    for line in f.read_text().splitlines() if f.is_file() else []:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        neg = line.startswith("!")
        line = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        rules.append((neg, _pattern(line)))
    return rules


def ignored(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """A path is left out when it or one of its parent directories matches (last rule wins)."""
    parts = path.split("/")
    out = False
    for neg, rx in rules:
        if any(rx.match("/".join(parts[: i + 1])) for i in range(len(parts))):
            out = not neg
    return out


def files(root: Path = ROOT) -> list[str]:
    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "-co", "--exclude-standard"],
            capture_output=True,
            check=True,
        ).stdout.decode()
        names = [n for n in listed.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):  # not a checkout: every file
        names = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink()]
    rules = ignore_rules(root)
    return sorted(n for n in set(names) if (root / n).exists() and not ignored(n, rules))


def tree_hash(root: Path = ROOT) -> str:
    h = hashlib.sha256()
    for n in files(root):
        p = root / n
        h.update(n.encode() + b"\0")
        if p.is_symlink():
            h.update(b"l" + os.readlink(p).encode())
        else:
            h.update(b"x" if os.access(p, os.X_OK) else b"f")
            h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def stage(dest: Path, root: Path = ROOT) -> int:
    """The context in ``dest`` (emptied first): the files and the .dockerignore itself."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    names = files(root)
    for n in [*names, ".dockerignore"]:
        src, dst = root / n, dest / n
        if not src.exists():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst, follow_symlinks=False)
    return len(names)


def requirements(root: Path = ROOT, extras: tuple[str, ...] = ("gpu",)) -> list[str]:
    doc = tomllib.loads((root / "pyproject.toml").read_text())
    reqs = list(doc["project"]["dependencies"])
    for e in extras:
        reqs += doc["project"]["optional-dependencies"][e]
    return reqs + list(doc["build-system"]["requires"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("files")
    sub.add_parser("hash")
    sub.add_parser("requirements")
    s = sub.add_parser("stage")
    s.add_argument("dest", type=Path)
    a = p.parse_args()
    if a.cmd == "files":
        print("\n".join(files()))
    elif a.cmd == "hash":
        print(tree_hash())
    elif a.cmd == "requirements":
        print("\n".join(requirements()))
    else:
        print(stage(a.dest), file=sys.stderr)


if __name__ == "__main__":
    main()
