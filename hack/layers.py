"""Keeps the layers (issue 9 §6): import-linter contracts and mypy --strict on the whole package.

    python hack/layers.py imports [lint-imports options]   # pyproject.toml [tool.importlinter]
    python hack/layers.py types [mypy options]             # pyproject.toml [tool.mypy]

The components are top-level folders mapped to ``qosmos.<component>`` by setup.py's package_dir, so
``qosmos/`` on disk holds only the CLI, and the editable install reaches the rest through an import
hook. Neither tool can follow that: import-linter walks the root package's folder (run from the
repository it stops at "module qosmos.simulator does not exist") and mypy resolves modules by
directory ("Can't find package 'qosmos.extender.core'"). Both therefore run in a temporary folder
holding a symlink view of the mapping, where every module sits under its import name; mypy's
messages are mapped back to the repository's paths.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def components(setup_py: Path = REPO / "setup.py") -> dict[str, str]:
    """setup.py's COMPONENTS (import name -> folder), read without running setup()."""
    for node in ast.parse(setup_py.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "COMPONENTS" for t in node.targets):
            return dict(ast.literal_eval(node.value))
    raise SystemExit(f"error: no COMPONENTS mapping in {setup_py}")


def build_view(root: Path, mapping: dict[str, str]) -> None:
    """root/qosmos/... mirrors the installed package: qosmos/'s own files, then one link per component."""
    package = root / "qosmos"
    package.mkdir()
    for entry in (REPO / mapping["qosmos"]).iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in mapping.items():
        if name == "qosmos":
            continue
        parts = name.split(".")
        if parts[0] != "qosmos" or len(parts) != 2:
            raise SystemExit(f"error: setup.py maps {name!r}; this script handles qosmos.<component> only")
        (package / parts[1]).symlink_to(REPO / folder, target_is_directory=True)


def tool(name: str) -> str:
    sibling = Path(sys.executable).with_name(name)  # the environment of this interpreter first
    found = str(sibling) if sibling.exists() else shutil.which(name)
    if found is None:
        raise SystemExit(f"error: {name} not found; pip install -e '.[test]'")
    return found


def repo_paths(text: str, mapping: dict[str, str]) -> str:
    """View paths (qosmos/extender/core/x.py) back to the repository's (extender/core/x.py)."""
    prefixes = sorted(((name.replace(".", "/") + "/", folder + "/") for name, folder in mapping.items()), reverse=True)
    out = []
    for line in text.splitlines(keepends=True):
        for view, real in prefixes:
            if line.startswith(view):
                line = real + line[len(view) :]
                break
        out.append(line)
    return "".join(out)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("imports", "types"):
        print("usage:\n" + __doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    check, extra = argv[0], argv[1:]
    config = str(REPO / "pyproject.toml")
    mapping = components()
    with tempfile.TemporaryDirectory(prefix="qosmos-layers-") as tmp:
        build_view(Path(tmp), mapping)
        # Both tools search their working directory first: the view's qosmos wins over the import hook.
        if check == "imports":
            cmd = [tool("lint-imports"), "--config", config, "--no-cache", "--no-logo", *extra]
            return subprocess.run(cmd, cwd=tmp, check=False).returncode
        cmd = [tool("mypy"), "--config-file", config, "--cache-dir", str(REPO / ".mypy_cache"), *extra]
        done = subprocess.run(cmd, cwd=tmp, check=False, capture_output=True, text=True)
        sys.stdout.write(repo_paths(done.stdout, mapping))
        sys.stderr.write(repo_paths(done.stderr, mapping))
        return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
