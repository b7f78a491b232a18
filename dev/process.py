"""Server processes of a loopback cluster: start, wait for health, stop (also from another process).

Each process runs in its own session (process group = its pid), so stopping it also stops any
children. A process started *attached* dies with its parent (``PR_SET_PDEATHSIG``: the tests
never leave orphans); a *detached* one outlives it (``qosmos dev up`` returns, the cluster runs),
and is later identified by pid plus its kernel start time, so a recycled pid is never signalled.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from qosmos.dev.binaries import ControlPlaneError

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = LOOPBACK) -> bool:
    """True when ``host:port`` cannot be bound now (another server listens there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            return exc.errno in (errno.EADDRINUSE, errno.EACCES)
    return False


def _pdeathsig() -> None:  # pragma: no cover - runs in the child
    """Ask Linux to SIGKILL the child when its parent dies (no orphans on a hard crash)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def tail(path: Path, n: int = 40) -> str:
    """The last ``n`` lines of a log file."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "<no log>"


# --------------------------------------------------------------------------- identity by pid


def stat_fields(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` from field 3 (state) on, so ``[0]`` is field 3; None when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    return stat[stat.rfind(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22); None when gone."""
    fields = stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):  # a zombie has exited, only its parent has not reaped it
        return None
    return int(fields[19])


@dataclass(frozen=True, slots=True)
class ProcessRef:
    """A process started earlier, possibly by another qosmos process."""

    name: str
    pid: int
    ticks: int  # start time, tells the process from a later one that got the same pid
    log: str = ""

    def alive(self) -> bool:
        """True while this very process runs (not a zombie, not a newer process with the pid)."""
        return start_ticks(self.pid) == self.ticks

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the process group the process leads (it was started in its own session)."""
        if not self.alive():
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(self.pid) == self.pid:
                os.killpg(self.pid, sig)
            else:
                os.kill(self.pid, sig)


def stop_all(refs: list[ProcessRef], grace: float = 10.0, poll: float = 0.1) -> list[str]:
    """SIGTERM every process group, wait up to ``grace`` seconds, SIGKILL what is left.

    Returns the names that needed SIGKILL. Safe to call on processes already gone.
    """
    for r in refs:
        r.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(r.alive() for r in refs):
        time.sleep(poll)
    killed = [r.name for r in refs if r.alive()]
    for r in refs:
        r.signal_group(signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(r.alive() for r in refs):
        time.sleep(poll)
    return killed


# --------------------------------------------------------------------------- a started process


class Component:
    """One server process in its own process group, logging to a file.

    ``detached=False`` (the tests): SIGKILLed by the kernel when the parent dies.
    ``detached=True`` (``qosmos dev up``): survives the parent; stop it through ``ref``.
    """

    def __init__(
        self,
        name: str,
        argv: list[str],
        log_path: Path,
        health_url: str | None,
        *,
        detached: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name, self.argv, self.log_path, self.health_url = name, argv, log_path, health_url
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        in_main = threading.current_thread() is threading.main_thread()
        try:
            self.proc = subprocess.Popen(
                argv,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=dict(env) if env is not None else None,
                preexec_fn=_pdeathsig if in_main and not detached and os.name == "posix" else None,
            )
        except OSError:
            self._log.close()
            raise
        ticks = start_ticks(self.proc.pid)
        self.ref = ProcessRef(name, self.proc.pid, ticks if ticks is not None else -1, str(log_path))

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        """True while the process has not exited."""
        return self.proc.poll() is None

    def log_tail(self, n: int = 40) -> str:
        """The last ``n`` lines of the component's log."""
        return tail(self.log_path, n)

    def wait_ready(self, ctx: ssl.SSLContext | None, timeout: float = 60.0) -> None:
        """Poll ``health_url`` until it answers 200; raise with the log tail otherwise."""
        if not self.health_url:
            return
        deadline, last = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            if not self.running:
                raise ControlPlaneError(
                    f"{self.name} exited with code {self.proc.returncode} (log: {self.log_path}); "
                    f"last log lines:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.health_url, timeout=2, context=ctx) as r:
                    if r.status == 200:
                        return
                    last = f"HTTP {r.status}"
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}"
            except (OSError, urllib.error.URLError) as e:
                last = str(e)
            time.sleep(0.25)
        raise ControlPlaneError(
            f"{self.name} not ready after {timeout:.0f}s at {self.health_url} ({last}; log: {self.log_path}); "
            f"last log lines:\n{self.log_tail()}"
        )

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``timeout`` seconds."""
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # stray children, if any
        self._log.close()
