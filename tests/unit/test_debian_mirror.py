"""hack/debian_mirror.py: the image and node builds take the Debian mirror from the machine's own apt
sources (issue 22 §3), read here from apt directories the tests build."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from qosmos.testing.scripts import ROOT, load_script

SCRIPT = ROOT / "hack" / "debian_mirror.py"
dm = load_script(SCRIPT)

DEB822 = """Types: deb
# a comment between fields
URIs: http://mirror.one.invalid/debian-security
Suites: bookworm-security
Components: main

Types: deb-src
URIs: http://src.invalid/debian
Suites: bookworm

Types: deb
URIs: http://disabled.invalid/debian
Suites: bookworm
Enabled: no

Types: deb
URIs: http://mirror.one.invalid/debian/ http://mirror.two.invalid/debian
Suites: bookworm bookworm-updates
Components: main
"""


def apt(tmp: Path, sources: str = "", one_line: str = "", legacy: str = "") -> Path:
    (tmp / "sources.list.d").mkdir(parents=True)
    if sources:
        (tmp / "sources.list.d" / "debian.sources").write_text(sources)
    if one_line:
        (tmp / "sources.list.d" / "extra.list").write_text(one_line)
    if legacy:
        (tmp / "sources.list").write_text(legacy)
    return tmp


def test_deb822_picks_the_enabled_binary_source_of_the_exact_suite(tmp_path: Path) -> None:
    # not -security (another suite), not deb-src, not the disabled stanza; the first URI, no trailing slash
    assert dm.mirror("bookworm", apt(tmp_path, DEB822)) == "http://mirror.one.invalid/debian"
    assert dm.mirror("bookworm-security", tmp_path) == "http://mirror.one.invalid/debian-security"


def test_one_line_format_with_options_and_the_legacy_file(tmp_path: Path) -> None:
    one = "# deb http://commented.invalid/debian bookworm main\ndeb [arch=amd64 signed-by=/k.gpg] http://opts.invalid/debian bookworm main\n"
    assert dm.mirror("bookworm", apt(tmp_path / "a", one_line=one)) == "http://opts.invalid/debian"
    legacy = "deb-src http://src.invalid/debian bookworm main\ndeb http://legacy.invalid/debian/ bookworm main\n"
    assert dm.mirror("bookworm", apt(tmp_path / "b", legacy=legacy)) == "http://legacy.invalid/debian"


def test_no_source_for_the_suite_names_what_was_read(tmp_path: Path) -> None:
    d = apt(tmp_path, DEB822)
    with pytest.raises(LookupError, match=r"trixie.*debian\.sources"):
        dm.mirror("trixie", d)
    proc = subprocess.run([sys.executable, str(SCRIPT), "trixie", "--apt-dir", str(d)], capture_output=True, text=True)
    assert proc.returncode == 1 and "QOSMOS_DEBIAN_MIRROR" in proc.stderr and not proc.stdout


def test_the_environment_overrides_the_sources(tmp_path: Path) -> None:
    d = apt(tmp_path, DEB822)
    env = {"QOSMOS_DEBIAN_MIRROR": "http://override.invalid/debian", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--apt-dir", str(d)], capture_output=True, text=True, env=env)
    assert proc.stdout.strip() == "http://override.invalid/debian"


def test_the_build_scripts_name_no_mirror_host() -> None:
    for script in ("hack/node/build.sh", "hack/image/build.sh"):
        text = (SCRIPT.parents[1] / script).read_text()
        assert "debian_mirror.py" in text and "deb.debian.org" not in text, script
