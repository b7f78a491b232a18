"""The ``qosmos`` command. Each component registers its own sub-commands.

A component module ``qosmos.<component>.cli`` exposes ``register(app)``; this file only
assembles them, so the CLI contract lives next to the code it drives.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

app = typer.Typer(
    name="qosmos",
    help="QoS-aware, prediction-driven scheduling for multi-tenant GPU clusters.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def package_version() -> str:
    try:
        return version("qosmos")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"qosmos {package_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    _version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="print the qosmos version and exit"),
    ] = False,
) -> None:
    """QoS-aware, prediction-driven scheduling for multi-tenant GPU clusters."""


COMPONENTS = ("extender", "predictors", "simulator", "operator", "sidecar", "dev")

for _component in COMPONENTS:
    try:
        _module = importlib.import_module(f"qosmos.{_component}.cli")
    except ModuleNotFoundError as exc:  # a component without a CLI yet
        if exc.name != f"qosmos.{_component}.cli":
            raise
        continue
    _module.register(app)


def main() -> None:
    app()
