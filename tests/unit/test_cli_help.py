"""Help texts of every ``qosmos`` command in user language (issue 10, "What a person looks at"):
each option explains itself, says its default when it has no fixed one, names no bare equation or
paper section, and shows on screen exactly as written (rich markup does not eat brackets)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from qosmos.cli import app

runner = CliRunner()


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if hasattr(cmd, "commands"):
        if path and getattr(cmd, "invoke_without_command", False):
            yield path, cmd  # a group that also runs by itself (`simulate --trace ...` beside `simulate inference`)
        for name, sub in cmd.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield path, cmd


COMMANDS = dict(_commands(typer.main.get_command(app)))
# an option without a fixed default says what happens without it
STATES_DEFAULT = re.compile(r"\bdefault\b|\binstead of\b|\bor (use )?--|when left out", re.IGNORECASE)


def test_the_whole_cli_is_covered() -> None:
    names = {" ".join(p) for p in COMMANDS}
    assert {"simulate", "simulate inference", "sweep", "extender serve", "predict qssf", "profile fit"} <= names
    assert "sidecar run" in names
    assert any(n.split()[0] == "explain" for n in names)


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_every_option_explains_itself(path: tuple[str, ...]) -> None:
    cmd = COMMANDS[path]
    assert cmd.help and len(cmd.help) >= 20, path
    for param in cmd.params:
        if param.name == "help":
            continue
        text = getattr(param, "help", "") or ""
        where = (" ".join(path), param.name, text)
        assert len(text) >= 15, where
        assert not re.search(r"(?<!GENIE )\bEq\. ?\d+", text), where  # equations named with their paper
        assert "§" not in text, where  # paper sections are not user language
        unset = param.param_type_name == "option" and param.default is None and not param.required
        if unset and not getattr(param, "is_flag", False):
            assert STATES_DEFAULT.search(text), where


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_help_shows_what_was_written(path: tuple[str, ...]) -> None:
    """Square brackets in a help text are markup to rich unless escaped: ``[[a, b]]`` showed as ``[]``."""
    res = runner.invoke(app, [*path, "--help"], terminal_width=3000, env={"COLUMNS": "3000"})
    assert res.exit_code == 0, res.output
    shown = " ".join(res.output.split())
    for param in COMMANDS[path].params:
        text = (getattr(param, "help", "") or "").replace("\\[", "[")
        if "[" in text:
            assert " ".join(text.split()) in shown, (" ".join(path), param.name, text)
