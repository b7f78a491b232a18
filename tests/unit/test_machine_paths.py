"""No absolute machine paths in the package (issue 9 §2): data is found via $QOSMOS_SHARED, package
data or an explicit argument, never a folder that exists only on the machine the code was written on.

Kernel and system interfaces (/proc, /sys/fs/cgroup, /var/run/netns) are not machine paths and pass.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# home, scratch and mount folders: present on one machine, absent on a fresh clone elsewhere
MACHINE_PATH = re.compile(r"(?<![\w./~-])/(?:work|root|home|Users|tmp|mnt|scratch|data)(?:/|\b)")


def package_folders() -> list[Path]:
    """The folders setup.py maps to qosmos.<component> (read, not executed)."""
    for node in ast.parse((ROOT / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "COMPONENTS" for t in node.targets):
            return [ROOT / folder for folder in ast.literal_eval(node.value).values()]
    raise AssertionError("setup.py has no COMPONENTS mapping")


def machine_paths(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string literal in ``source`` naming a machine path."""
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and MACHINE_PATH.search(node.value)
    ]


def test_the_pattern_tells_machine_paths_from_system_interfaces() -> None:
    hits = machine_paths('A = "/work/shared/data"\nB = f"/tmp/{x}"\nC = "/home/u"\nD = Path("/root")\n')
    assert sorted(line for line, _ in hits) == [1, 2, 3, 4]
    assert machine_paths('A = "/proc/self/mounts"\nB = "/var/tmp"\nC = "../shared/data"\nD = "/filter"\n') == []


def test_no_absolute_machine_paths_in_the_package() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for folder in package_folders()
        for path in sorted(folder.rglob("*.py"))
        if "__pycache__" not in path.parts
        for line, text in machine_paths(path.read_text())
    ]
    assert not found, "absolute machine paths (use $QOSMOS_SHARED, package data or an argument):\n" + "\n".join(found)
