"""The ``qosmos`` command. Each component registers its own sub-commands.

A component module ``qosmos.<component>.cli`` exposes ``register(app)``; this file only
assembles them, so the CLI contract lives next to the code it drives.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="qosmos",
    help="QoS-aware, prediction-driven scheduling for multi-tenant GPU clusters.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def _root() -> None:
    """QoS-aware, prediction-driven scheduling for multi-tenant GPU clusters."""


COMPONENTS = ("extender", "predictors", "simulator", "operator", "sidecar")

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
