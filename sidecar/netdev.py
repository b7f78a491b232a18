"""The host side of a pod's network: which host interface is the veth peer of the pod's interface.

A CNI that plugs pods in with veth pairs (bridge, ptp, Calico, Cilium in veth mode) leaves one end
in the pod's network namespace (``eth0@ifN``: its peer has index N) and the other on the host. The
agent (hostNetwork, hostPID) enters the namespace of one of the pod's processes to read N, then
finds the host interface with index N. A pod without such a pair (host network, macvlan, SR-IOV)
has none: per-pod shaping then skips it.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

Runner = Callable[[Sequence[str]], Any]  # argv -> CompletedProcess-like (stdout, returncode)

_LINK = re.compile(r"^(\d+):\s+([^:@\s]+)(?:@([^:\s]+))?:")


def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=10)


def parse_links(text: str) -> list[tuple[int, str, str]]:
    """``ip -o link show`` lines -> (index, name, peer) with peer '' or e.g. 'if12'."""
    out = []
    for line in text.splitlines():
        m = _LINK.match(line.strip())
        if m:
            out.append((int(m.group(1)), m.group(2), m.group(3) or ""))
    return out


def peer_index(pid: int | str, runner: Runner = run) -> int | None:
    """Index, in the host's namespace, of the veth peer of the pod's first non-loopback interface."""
    r = runner(["nsenter", "-t", str(pid), "-n", "ip", "-o", "link", "show"])
    if getattr(r, "returncode", 0):
        return None
    for _idx, name, peer in parse_links(getattr(r, "stdout", "") or ""):
        if name != "lo" and peer.startswith("if") and peer[2:].isdigit():
            return int(peer[2:])
    return None


def host_veth(pid: int | str, runner: Runner = run) -> str | None:
    """The host interface paired with the pod of process ``pid`` (None: no veth pair, or gone)."""
    idx = peer_index(pid, runner)
    if idx is None:
        return None
    r = runner(["ip", "-o", "link", "show"])
    if getattr(r, "returncode", 0):
        return None
    return next((name for i, name, _ in parse_links(getattr(r, "stdout", "") or "") if i == idx), None)


__all__ = ["host_veth", "parse_links", "peer_index", "run"]
