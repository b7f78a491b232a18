"""The ``qosmos`` script imports only the component whose command runs (issue 9 §4: importing every
component costs ~0.7 s of CPU that ``qosmos simulate`` never uses); ``qosmos.cli.COMMANDS`` must
therefore name exactly what each component registers."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
import typer

from qosmos import cli


def _registered(component: str) -> set[str]:
    app = typer.Typer()
    importlib.import_module(f"qosmos.{component}.cli").register(app)
    names = {c.name or c.callback.__name__ for c in app.registered_commands}  # type: ignore[union-attr]
    return names | {g.name for g in app.registered_groups if g.name}


@pytest.mark.parametrize("component", cli.COMPONENTS)
def test_commands_table_matches_registrations(component: str) -> None:
    table = {name for name in cli.COMMANDS if component in cli.owners(name)}
    assert _registered(component) == table


def _modules_after(argv: list[str]) -> set[str]:
    code = (
        "import sys\n"
        "from qosmos.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    return set(out.stdout.split())


def test_simulate_imports_only_the_simulator() -> None:
    mods = _modules_after(["simulate", "--help"])
    assert "qosmos.simulator.cli" in mods
    assert not {"qosmos.operator.cli", "qosmos.extender.cli", "qosmos.sidecar.cli", "kubernetes"} & mods


def test_help_lists_every_command() -> None:
    code = "from qosmos.cli import main\nmain(['--help'])\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=None)
    assert out.returncode == 0, out.stderr
    for name in cli.COMMANDS:
        assert name in out.stdout
