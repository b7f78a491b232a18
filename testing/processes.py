"""Processes the tiers run as a user would: ``qosmos operator run`` as a subprocess, so a test can
``kill -9`` it (its log in a file)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from qosmos.dev.process import free_port

QOSMOS = [sys.executable, "-P", "-m", "qosmos"]


class OperatorProcess:
    """``qosmos operator run`` as a subprocess (its log in a file), with ``extra`` arguments."""

    def __init__(self, kubeconfig: str, log: Path, extra: Sequence[str] = ()) -> None:
        self.kubeconfig = kubeconfig
        self.log = log
        self.extra = list(extra)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        out = open(self.log, "ab")  # noqa: SIM115 - the child keeps it
        args = ["--kubeconfig", self.kubeconfig, "--metrics-port", str(self.port), "--interval", "2", *self.extra]
        self.proc = subprocess.Popen(
            [*QOSMOS, "operator", "run", *args], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def kill9(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def metric(self, name: str) -> float:
        """One unlabelled sample (0 when absent)."""
        for line in self.metrics().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0


__all__ = ["QOSMOS", "OperatorProcess"]
