"""Helpers shared by the component CLIs."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from qosmos.extender.core.errors import InvalidInput

F = TypeVar("F", bound=Callable[..., Any])


def clean_errors(*also: type[BaseException]) -> Callable[[F], F]:
    """Bad input (InvalidInput, plus ``also``) becomes a one-line message and exit code 2, no traceback."""
    caught: tuple[type[BaseException], ...] = (InvalidInput, *also)

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except caught as exc:
                typer.echo(f"error: {exc}", err=True)
                raise typer.Exit(2) from None

        return wrapper  # type: ignore[return-value]

    return decorate
