"""Data-parallel samples (issue 23 §1): `measure_torch(gpus=N)` starts N processes on this node that
meet through a file and listen on loopback only; `qosmos profile run` started by torchrun (several
nodes too) is one rank of its world. The checks before torch is imported run everywhere; the runs
need torch (gloo on the CPU)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from qosmos.extender.core.errors import InvalidInput
from qosmos.predictors.profiler import MeasureFailed, measure_torch
from typer.testing import CliRunner

runner = CliRunner()
TORCHRUN_ENV = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}


@pytest.fixture
def in_torchrun_world(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in TORCHRUN_ENV.items():
        monkeypatch.setenv(key, value)


@pytest.mark.usefixtures("in_torchrun_world")
def test_a_torchrun_worker_checks_its_world_before_torch() -> None:
    # the world is torchrun's (2 processes per node, 4 in all): --gpus may only repeat it
    with pytest.raises(InvalidInput, match="2 processes on this node already"):
        measure_torch("mlp", [8], gpus=4)
    with pytest.raises(InvalidInput, match="split evenly over 4"):
        measure_torch("mlp", [6], gpus=2)  # global batches split over the whole world, not the node
    with pytest.raises(InvalidInput, match="one CPU per process, 2"):
        measure_torch("mlp", [8], cpus={0})


def test_profile_run_names_a_broken_world(app: typer.Typer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "0")  # WORLD_SIZE missing: a half-set env:// world
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    res = runner.invoke(app, ["profile", "run", "--out", str(tmp_path / "s.csv"), "--model", "mlp"])
    assert res.exit_code == 2 and "WORLD_SIZE" in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "s.csv").exists()


def _profiler_processes() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if b"-m qosmos.predictors.profiler" in cmdline:
                pids.append(int(entry.name))
    return pids


def test_two_processes_each_pinned_to_its_share() -> None:
    pytest.importorskip("torch")
    mine = os.sched_getaffinity(0)
    if len(mine) < 2:
        pytest.skip("needs two CPUs")
    first, second = sorted(mine)[:2]
    (sample,) = measure_torch(
        "mlp", [8], steps=2, warmup=1, windows=2, max_warmup=3, min_window_s=0.01, gpus=2, cpus={first, second}
    )
    assert (sample.shape.d_node, sample.shape.d_gpn) == (1, 2) and sample.rate > 0
    assert dict(sample.env)["host_cpus"] == str(first)  # rank 0 ran on its own share, not on both
    assert os.sched_getaffinity(0) == mine  # the caller is not pinned: its workers are


def test_a_failing_worker_is_reported_with_its_error() -> None:
    pytest.importorskip("torch")
    from qosmos.predictors.profiler import _local_world

    spec = {"model": "resnet151", "batches": [8], "steps": 1, "warmup": 1, "windows": 1, "precision": "fp32"}
    spec |= {"max_warmup": 2, "min_window_s": 0.01, "interleave": True, "cpus": None}
    with pytest.raises(MeasureFailed, match="exited with status 1") as failed:
        _local_world(2, spec, timeout_s=120)
    assert "resnet151" in str(failed.value)  # the worker's own message, not only its exit status


def test_ranks_that_exit_0_without_samples_are_not_reported_as_a_failed_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    from qosmos.predictors.profiler import _local_world

    monkeypatch.setattr(sys, "executable", shutil.which("true"))  # every rank exits 0 and writes nothing
    with pytest.raises(MeasureFailed, match="all 2 data-parallel processes exited with status 0 but rank 0 wrote no"):
        _local_world(2, {"model": "mlp", "batches": [8]}, timeout_s=30)


def test_no_batch_size_is_refused_before_any_process_starts() -> None:
    with pytest.raises(InvalidInput, match="batches"):
        measure_torch("mlp", [], gpus=2)
    with pytest.raises(InvalidInput, match="batches"):
        measure_torch("mlp", [8, 0])


def test_a_timeout_stops_every_rank() -> None:
    pytest.importorskip("torch")
    before = set(_profiler_processes())
    with pytest.raises(MeasureFailed, match="did not finish within 2 s"):
        measure_torch("mlp", [8], steps=50, warmup=1, windows=50, max_warmup=3, min_window_s=1.0, gpus=2, timeout_s=2)
    deadline = time.monotonic() + 10
    while set(_profiler_processes()) - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not set(_profiler_processes()) - before


WARM_UP = """
import sys
import torch.distributed as dist
from qosmos.predictors.profiler import slowest
from qosmos.predictors.timing import warm_up

rank, store = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", init_method=store, rank=rank, world_size=2)
times = [[1.0] * 8, [1.0, 1.5, 1.0, 1.5, 1.0, 1.0, 1.0, 1.0]][rank]  # rank 0 alone: stable after 3 steps
print(warm_up(lambda: slowest(dist, times.pop(0), "cpu"), min_steps=1, max_steps=8, k=3, threshold=0.05)[0])
dist.destroy_process_group()
"""


def test_every_rank_ends_its_warm_up_at_the_same_step(tmp_path: Path) -> None:
    """The warm-up stops when the step time is stable: each rank decides on the slowest rank's times
    (``slowest``), so all stop together. On its own times, rank 0 would stop after 3 steps and wait
    in a barrier while rank 1 ran its fourth step's all-reduces (a deadlock seen in CI)."""
    pytest.importorskip("torch")
    env = os.environ | {"PYTHONSAFEPATH": "1", "GLOO_SOCKET_IFNAME": "lo"}
    store = f"file://{tmp_path / 'store'}"
    ranks = [
        subprocess.Popen([sys.executable, "-c", WARM_UP, str(r), store], stdout=subprocess.PIPE, text=True, env=env)
        for r in range(2)
    ]
    try:
        steps = [rank.communicate(timeout=120)[0].strip() for rank in ranks]
    finally:
        for rank in ranks:
            rank.kill()
            rank.wait()
    assert steps == ["7", "7"]  # 1, 1.5, 1, 1.5, then three of 1.0


# Run in namespaces of its own (network, hostname, mounts): a "node" whose hostname resolves to the
# address of its uplink (up0), as on most cloud VMs and Kubernetes nodes, where gloo binds by default.
_NODE = """
set -e
ip link set lo up
ip link add up0 type bridge
ip addr add 192.0.2.77/24 dev up0
ip link set up0 up
hostname rank-node
echo "192.0.2.77 rank-node" > "$HOSTS"
mount --bind "$HOSTS" /etc/hosts
exec "$PYTHON" -P -c "$CODE"
"""
_RANKS = """
import json
from qosmos.predictors.profiler import measure_torch
from qosmos.testing.listeners import ListenerAudit

class EveryListener(ListenerAudit):
    def _why(self, address):
        return address  # each of this run's listeners a finding, loopback ones too

audit = EveryListener(interval_s=0.02)  # up0, there before: the uplink
audit.start()
measure_torch("mlp", [8], steps=2, warmup=1, windows=3, max_warmup=3, min_window_s=0.5, gpus=2)
print(json.dumps([[f.listener.address, f.command] for f in audit.take()]))
"""


def test_the_ranks_listen_on_loopback_only_where_the_hostname_names_the_uplink(tmp_path: Path) -> None:
    """The ranks meet through a file (no TCP store: torchrun's listened on ``::``) and gloo's sockets
    are on ``lo`` (by default gloo binds the address the hostname resolves to: here the uplink's).
    Every listener they open, sampled while they run, is a loopback one."""
    pytest.importorskip("torch")
    from qosmos.testing.listeners import is_loopback
    from qosmos.testing.skips import skip_or_fail

    env = os.environ | {"HOSTS": str(tmp_path / "hosts"), "PYTHON": sys.executable, "CODE": _RANKS}
    cmd = ["unshare", "--net", "--uts", "--mount", "--propagation", "private", "sh", "-c", _NODE]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    if run.returncode != 0 and "Operation not permitted" in run.stderr:
        skip_or_fail(f"no namespaces of its own for this test ({run.stderr.strip()}): run as root")
    assert run.returncode == 0, run.stderr[-3000:]
    opened = json.loads(run.stdout.strip().splitlines()[-1])
    ranks = [address for address, command in opened if "qosmos.predictors.profiler" in command]
    assert len(ranks) >= 2, opened  # gloo's listeners, one per rank at least, were seen
    assert all(is_loopback(address) for address in ranks), opened


@pytest.mark.usefixtures("private_network")  # torchrun's stores listen on every address
def test_profile_run_as_two_nodes_of_a_torchrun_world(tmp_path: Path) -> None:
    """Two torchrun agents (two "nodes" of one process each) rendezvous on loopback and run `qosmos
    profile run`; rank 0 writes d_node = 2 samples, rank 1 writes nothing."""
    pytest.importorskip("torch")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = os.environ | {"PYTHONSAFEPATH": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(key, None)
    outs = [tmp_path / f"node{i}.csv" for i in range(2)]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", "--max-restarts=0"]
    torchrun += ["--rdzv-backend=static", "--master-addr=127.0.0.1", f"--master-port={port}"]
    profile = ["-m", "qosmos", "profile", "run", "--model", "mlp", "--batches", "8,16", "--steps", "2"]
    profile += ["--windows", "2"]
    agents = [
        subprocess.Popen(
            [*torchrun, f"--node-rank={i}", *profile, "--out", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=tmp_path,
            start_new_session=True,  # with its workers: killed together
        )
        for i, out in enumerate(outs)
    ]
    try:
        logs = [agent.communicate(timeout=300)[0] for agent in agents]
    finally:  # a hung world is not left running
        for agent in agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
    assert [agent.returncode for agent in agents] == [0, 0], logs
    rows = list(csv.DictReader(outs[0].open()))
    assert [(r["batch"], r["d_node"], r["d_gpn"]) for r in rows] == [("8", "2", "1"), ("16", "2", "1")]
    assert not outs[1].exists() and "wrote" in logs[0] and "wrote" not in logs[1]
