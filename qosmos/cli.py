"""The ``qosmos`` command. Each component registers its own sub-commands.

A component module ``qosmos.<component>.cli`` exposes ``register(app)``; this file only
assembles them, so the CLI contract lives next to the code it drives.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

# click's UsageError, wherever this typer takes click from (its own copy since 0.2x, else click): no one
# static class covers both, hence type[Any]
UsageError: type[Any] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
NoArgsIsHelpError = getattr(sys.modules[UsageError.__module__], "NoArgsIsHelpError", ())  # () catches nothing


@contextmanager
def _usage_error_in_one_line() -> Iterator[None]:
    """A bad option or argument (``--tick -1``, a missing ``--out``) as one ``error:`` line, exit 2,
    like every other bad input; typer would draw a five-line box with the usage around it."""
    try:
        yield
    except NoArgsIsHelpError:  # `qosmos extender` alone: the help, as asked for
        raise
    except UsageError as exc:
        hint = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
        typer.echo(f"error: {exc.format_message()}{hint}", err=True)
        raise typer.Exit(2) from None


class QosmosGroup(TyperGroup):
    """The root command: usage errors of every sub-command (parsed inside ``invoke``) in one line."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        with _usage_error_in_one_line():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        with _usage_error_in_one_line():
            return super().invoke(ctx)


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # 15 ms: only for --version

    try:
        return version("qosmos")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"qosmos {package_version()}")
        raise typer.Exit()


def _root(
    _version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="print the qosmos version and exit"),
    ] = False,
) -> None:
    """QoS-aware, prediction-driven scheduling for multi-tenant GPU clusters."""


COMPONENTS = ("extender", "predictors", "simulator", "operator", "sidecar", "dev")
# The top-level commands each component registers (tests/unit/test_cli_lazy.py checks it against the
# registrations): the ``qosmos`` script imports only the component that runs, since importing all of
# them costs ~0.7 s of CPU (kubernetes, grpc, kopf) that ``qosmos simulate`` never uses.
COMMANDS: dict[str, str | tuple[str, ...]] = {
    "explain": "extender",
    "extender": "extender",
    "bench": ("extender", "dev"),  # a group both extend (see ``group``): extender, scheduling / operator, fidelity
    "predict": "predictors",
    "profile": "predictors",
    "simulate": "simulator",
    "sweep": "simulator",
    "crds": "operator",
    "operator": "operator",
    "sidecar": "sidecar",
    "dev": "dev",
}


SHARED_GROUPS = {"bench": "Benchmarks: the extender, scheduling through it, the operator, simulator fidelity."}


def extend_group(app: typer.Typer, name: str, commands: typer.Typer) -> None:
    """Add the commands of ``commands`` to the group ``name`` of ``app`` (created on first use), so
    that several components fill one group (``qosmos bench``) without importing each other."""
    sub = next((g.typer_instance for g in app.registered_groups if g.name == name and g.typer_instance), None)
    if sub is None:
        sub = typer.Typer(help=SHARED_GROUPS[name], no_args_is_help=True)
        app.add_typer(sub, name=name)
    sub.registered_commands += commands.registered_commands


def owners(command: str) -> tuple[str, ...]:
    """The components registering ``command`` (none for an unknown one)."""
    found = COMMANDS.get(command, ())
    return (found,) if isinstance(found, str) else found


def build(components: Sequence[str] = COMPONENTS) -> typer.Typer:
    """The ``qosmos`` app with the sub-commands of ``components``."""
    app = typer.Typer(
        name="qosmos",
        cls=QosmosGroup,
        help="QoS-aware, prediction-driven scheduling for multi-tenant GPU clusters.",
        no_args_is_help=True,
        pretty_exceptions_show_locals=False,
    )
    app.callback()(_root)
    for component in components:
        try:
            module = importlib.import_module(f"qosmos.{component}.cli")
        except ModuleNotFoundError as exc:  # a component without a CLI yet
            if exc.name != f"qosmos.{component}.cli":
                raise
            continue
        module.register(app)
    return app


def __getattr__(name: str) -> typer.Typer:
    """``qosmos.cli.app``: the whole CLI (every component), built on first use."""
    if name == "app":
        app = globals()["app"] = build()
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: Sequence[str] | None = None) -> None:
    """The ``qosmos`` script: only the component providing the command is imported (every one for
    ``--help``, no command or an unknown one, so that those list every command)."""
    args = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in args if not a.startswith("-")), "")
    build(owners(command) or COMPONENTS)(args=args, prog_name="qosmos")
