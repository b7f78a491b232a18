"""CLI commands of the operator component: ``qosmos crds generate``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from qosmos.operator import crds

from qosmos.clitools import clean_errors

crds_app = typer.Typer(
    help="The qosmos.io/v1alpha1 CustomResourceDefinitions (VirtualCluster, DLJob).", no_args_is_help=True
)


@crds_app.command("generate")
@clean_errors(OSError)
def generate(
    out: Annotated[Path, typer.Option(help="folder the CRD YAML files are written to (created)")] = Path("crds"),
    check: Annotated[
        bool,
        typer.Option("--check", help="write nothing; exit 1 when a file in --out is missing or differs (for CI)"),
    ] = False,
) -> None:
    """Render the CRDs from the pydantic models in qosmos.operator.crds."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out} is not a folder")
    if check:
        bad = crds.stale(out)
        for path in bad:
            typer.echo(f"stale: {path} (run `qosmos crds generate --out {out}`)", err=True)
        if bad:
            raise typer.Exit(1)
        typer.echo(f"up to date: {len(crds.RESOURCES)} CRDs in {out}")
        return
    for path in crds.write(out):
        typer.echo(f"wrote {path}")


def register(app: typer.Typer) -> None:
    app.add_typer(crds_app, name="crds")
