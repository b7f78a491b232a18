#!/usr/bin/env python3
"""Check that the tests bite: apply each known-fault mutation to a copy of the tree, run the
unit tests there, and report whether some test failed ("caught") or all passed ("survived").

    python hack/mutate.py [--only NAME] [--keep] [-- PYTEST_ARGS]

Exit 0 only when the unmutated copy passes and every mutation is caught. The copy imports as
``qosmos`` ahead of the editable install (a package directory of symlinks on PYTHONPATH), so the
working tree is never touched.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPONENTS = ("extender", "predictors", "simulator", "operator", "sidecar", "testing")
DEFAULT_TESTS = ["tests/unit/core", "tests/unit/simulator"]


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str
    old: str
    new: str


MUTATIONS = (
    Mutation(
        "capacity-block-ignored",
        "extender/core/ordering.py",
        "            if used.get(model, 0) + gpus > cap:",
        "            if False:",
    ),
    Mutation(
        "relax-factor-forced-0",
        "extender/core/backfill.py",
        '    if mode not in MODES:\n        raise InvalidInput("backfill"',
        '    return 0.0\n    if mode not in MODES:\n        raise InvalidInput("backfill"',
    ),
    Mutation(
        "preemptive-fill-dropped",
        "extender/core/admission.py",
        "    for d in ds:\n        if d.job.id not in by_id and d.job.id not in started:",
        "    for d in ds:\n        if False:",
    ),
    Mutation(
        "swaf-shape-dropped",
        "extender/core/ordering.py",
        "out.append(Decision(job, row.shape, ",
        "out.append(Decision(job, None, ",
    ),
    Mutation(
        "predictor-errors-swallowed",
        "simulator/engine.py",
        "    if not isinstance(spec, str):\n        return spec\n",
        "    if not isinstance(spec, str):\n"
        "        class _Quiet:\n"
        "            name = spec.name\n"
        "            def predict(self, job, now):\n"
        "                try:\n"
        "                    return spec.predict(job, now)\n"
        "                except Exception:\n"
        "                    return None\n"
        "            def observe(self, job, duration, end):\n"
        "                try:\n"
        "                    spec.observe(job, duration, end)\n"
        "                except Exception:\n"
        "                    pass\n"
        "        return _Quiet()\n",
    ),
)


def make_copy(dest: Path) -> Path:
    """Copy the components and tests; return a PYTHONPATH entry where ``qosmos`` is the copy."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", ".pytest_cache")
    for part in (*COMPONENTS, "tests", "pyproject.toml"):
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, dest / part, ignore=ignore)
        elif src.exists():
            shutil.copy2(src, dest / part)
    # not at the copy's root: ``python -m pytest`` puts the cwd first on sys.path
    pkg = dest / "_path" / "qosmos"
    shutil.copytree(ROOT / "qosmos", pkg, ignore=ignore)
    for comp in COMPONENTS:
        if (dest / comp).exists():
            (pkg / comp).symlink_to(dest / comp)
    return dest / "_path"


def run_tests(tree: Path, path_entry: Path, tests: list[str], extra: list[str]) -> tuple[bool, str]:
    env = dict(os.environ, PYTHONPATH=str(path_entry), PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests, *extra]
    out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    tail = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr.strip()[-300:]
    return out.returncode == 0, (lines[0] if lines else tail)


def check_import(tree: Path, path_entry: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(path_entry))
    probe = "import qosmos.extender.core.admission as m; print(m.__file__)"
    where = subprocess.run([sys.executable, "-c", probe], cwd=tree, env=env, capture_output=True, text=True)
    if not where.stdout.strip().startswith(str(tree)):
        sys.exit(f"mutate: the copy does not shadow the installed package ({where.stdout or where.stderr})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", help="run only this mutation (repeatable)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copies")
    ap.add_argument("--tests", nargs="*", default=DEFAULT_TESTS, help="test paths (default: core + simulator units)")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = ap.parse_args()
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    if args.only and len(chosen) != len(set(args.only)):
        known = ", ".join(m.name for m in MUTATIONS)
        sys.exit(f"mutate: unknown mutation in {args.only}; known: {known}")

    work = Path(tempfile.mkdtemp(prefix="qosmos-mutate-"))
    try:
        base = work / "baseline"
        entry = make_copy(base)
        check_import(base, entry)
        t0 = time.monotonic()
        ok, why = run_tests(base, entry, args.tests, args.pytest_args)
        print(f"baseline: {'passes' if ok else 'FAILS'} ({time.monotonic() - t0:.0f} s) {'' if ok else why}")
        if not ok:
            return 1
        survived = []
        for m in chosen:
            tree = work / m.name
            entry = make_copy(tree)
            target = tree / m.path
            text = target.read_text()
            if text.count(m.old) != 1:
                print(f"{m.name}: cannot apply (the guarded code changed: update hack/mutate.py)")
                survived.append(m.name)
                continue
            target.write_text(text.replace(m.old, m.new))
            t0 = time.monotonic()
            ok, why = run_tests(tree, entry, args.tests, args.pytest_args)
            verdict = "SURVIVED" if ok else "caught"
            print(f"{m.name}: {verdict} ({time.monotonic() - t0:.0f} s) {why if not ok else ''}")
            if ok:
                survived.append(m.name)
        print(f"{len(chosen) - len(survived)} of {len(chosen)} mutations caught")
        return 1 if survived else 0
    finally:
        if args.keep:
            print(f"copies kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
