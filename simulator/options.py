"""The options ``qosmos simulate`` and ``qosmos sweep`` share, declared once (type, bounds, help): a sweep's
cell is a replay, so an option both take means the same in both and cannot drift apart. Each command
names the parameter (hence the flag) and its default."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DB_HELP = (
    "model database with the GENIE throughput profiles of genie jobs, e.g. from qosmos profile fit "
    "(default: $QOSMOS_MODELDB, else ~/.config/qosmos/models.json when present; built-in profiles otherwise)"
)

Nodes = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="replace the trace's cluster by N identical nodes in one partition (genie: the platform's node "
        "count, default 4)",
    ),
]
GpusPerNode = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="GPUs per node: with --nodes (default 8; genie 4), or alone for helios/philly/genie traces that size "
        "their own nodes",
    ),
]
Scale = Annotated[
    float | None,
    typer.Option(
        help="shrink the cluster to this fraction (keeps every round(1/F)-th node of each partition) so that "
        "queues form (default: the whole cluster)",
    ),
]
Density = Annotated[float, typer.Option(help="genie traces: jobs arriving per hour")]
Hours = Annotated[float, typer.Option(help="genie traces: length of the arrival window (hours)")]
SynthJobs = Annotated[int, typer.Option(min=1, help="helios-synth traces: number of jobs to generate")]
RelaxFactor = Annotated[
    float, typer.Option(min=0.0, help="relaxed/adaptive backfilling: how much the blocked job may be delayed")
]
TruthNoise = Annotated[
    float,
    typer.Option(
        min=0.0,
        help="spread (sigma of a log-normal factor, seeded per job) of real GPU throughput around the model's "
        "prediction; 0 = the model is exact",
    ),
]
ModelDb = Annotated[str | None, typer.Option(help=DB_HELP)]

# failures and lost nodes: the simulator's twins of a DLJob's restarts and a VirtualCluster's nodeLostSeconds
MtbfGpuHours = Annotated[
    float | None,
    typer.Option(
        help="running jobs fail once per this many GPU-hours of run on average (seeded by --seed, the same "
        "failures in every policy's run of a job); a failed job restarts as a DLJob's gang does: after a "
        "back-off, from its last checkpoint, up to --backoff-limit times (default: no failures)",
    ),
]
CheckpointInterval = Annotated[
    float | None,
    typer.Option(
        min=0.0,
        help="seconds of run between a job's periodic checkpoints, for jobs whose trace gives none: a failed run "
        "keeps its whole intervals only (0: none; default: a failed run keeps all it ran)",
    ),
]
BackoffLimit = Annotated[
    int, typer.Option(min=0, help="restarts after failures before a job fails for good (a DLJob's default)")
]
NodeMtbfHours = Annotated[
    float | None,
    typer.Option(
        help="each node goes down once per this many hours up on average (seeded by --seed and the node's name: "
        "the same outages for every policy); nothing is placed on it until it is back, and a gang there is "
        "requeued as a DLJob on a lost node is (NodeLost) (default: no outages)",
    ),
]
NodeMttrHours = Annotated[
    float, typer.Option(help="with --node-mtbf-hours: hours a down node takes to come back, on average")
]
NodeOutages = Annotated[
    Path | None,
    typer.Option(
        help="CSV of node outages instead of --node-mtbf-hours: node,down,up[,kind] rows, seconds from the trace's "
        "first submission (up empty: it never comes back; kind drain: kubectl drain, its gangs requeued at once; "
        "default down: the node fails)",
    ),
]
NodeLostSeconds = Annotated[
    float,
    typer.Option(
        min=0.0,
        help="a gang on a down node is requeued after this long, or when the node is back if sooner "
        "(a VirtualCluster's nodeLostSeconds)",
    ),
]
