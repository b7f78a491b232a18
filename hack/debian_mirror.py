#!/usr/bin/env python3
"""Print the Debian archive URI this machine's apt uses for a suite (default bookworm).

The image and node builds debootstrap from the mirror the machine is already configured for,
never a host written into this repository. Read in order: /etc/apt/sources.list.d/*.sources
(deb822: ``Types``, ``URIs``, ``Suites``) and *.list, then /etc/apt/sources.list (one-line ``deb
[options] URI SUITE COMPONENTS``); the first ``deb`` entry whose suites include SUITE exactly
wins (``bookworm``, not ``bookworm-security``). ``$QOSMOS_DEBIAN_MIRROR`` overrides everything.

    python3 hack/debian_mirror.py [SUITE] [--apt-dir DIR]   # DIR defaults to /etc/apt
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from pathlib import Path


def _deb822(text: str) -> Iterator[tuple[list[str], list[str], list[str]]]:
    """(types, uris, suites) per stanza; comments and continuation lines are skipped."""
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or line.startswith((" ", "\t")) or ":" not in line:
                continue
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.strip()
        if fields.get("enabled", "yes").lower() == "no":
            continue
        yield fields.get("types", "").split(), fields.get("uris", "").split(), fields.get("suites", "").split()


def _one_line(text: str) -> Iterator[tuple[list[str], list[str], list[str]]]:
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) < 3:
            continue
        kind, rest = words[0], words[1:]
        if rest[0].startswith("["):  # [arch=amd64 signed-by=...]
            while rest and not rest[0].endswith("]"):
                rest = rest[1:]
            rest = rest[1:]
        if len(rest) >= 2:
            yield [kind], [rest[0]], [rest[1]]


def mirror(suite: str = "bookworm", apt_dir: Path = Path("/etc/apt")) -> str:
    """The URI of the first enabled ``deb`` source for ``suite``; LookupError naming what was read."""
    files = sorted((apt_dir / "sources.list.d").glob("*.sources")) + sorted((apt_dir / "sources.list.d").glob("*.list"))
    files.append(apt_dir / "sources.list")
    read = []
    for f in files:
        if not f.is_file():
            continue
        read.append(str(f))
        entries = _deb822 if f.suffix == ".sources" else _one_line
        for types, uris, suites in entries(f.read_text(errors="replace")):
            if "deb" in types and suite in suites and uris:
                return uris[0].rstrip("/")
    raise LookupError(f"no enabled 'deb' source for suite {suite} in {', '.join(read) or apt_dir}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", nargs="?", default="bookworm")
    parser.add_argument("--apt-dir", type=Path, default=Path("/etc/apt"))
    args = parser.parse_args(argv)
    if os.environ.get("QOSMOS_DEBIAN_MIRROR"):
        print(os.environ["QOSMOS_DEBIAN_MIRROR"])
        return 0
    try:
        print(mirror(args.suite, args.apt_dir))
    except LookupError as exc:
        print(f"debian_mirror: {exc}; set QOSMOS_DEBIAN_MIRROR", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
