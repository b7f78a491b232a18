"""The test suite's check that nothing leaves this machine, the other half of :mod:`.listeners`.

:class:`EgressCounter` counts the TCP and UDP packets that go out of the machine's uplink (each
interface a default route leaves by, IPv4 and IPv6) with iptables rules in ``mangle POSTROUTING``,
which every packet passes after routing and NAT: the host's own and those it forwards for the test
node's pods. Unlike sampling sockets it misses nothing short (a DNS query, a refused connection).
Counting rules only (no target): nothing is dropped or changed, and :meth:`EgressCounter.remove`
takes them away again. Packets are not attributed to a process: run nothing else that talks to the
network beside the suite (``QOSMOS_NETWORK_AUDIT=0`` turns the checks off while debugging). Kernel
chatter (ARP, IPv6 neighbour discovery) is neither TCP nor UDP and is not counted."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

CHAIN = "QOSMOS-EGRESS"  # in mangle, jumped to from POSTROUTING: its counters are this module's alone
COMMENT = "qosmos-test-egress"
FAMILIES = {"iptables": "IPv4", "ip6tables": "IPv6"}
PROTOCOLS = ("tcp", "udp")


@dataclass(frozen=True)
class Egress:
    interface: str
    family: str  # IPv4 | IPv6
    protocol: str
    packets: int
    bytes: int

    def __str__(self) -> str:
        return (
            f"{self.packets} {self.protocol.upper()}/{self.family} packets ({self.bytes} bytes) out of {self.interface}"
        )


def uplinks() -> set[str]:
    """The interfaces a default route leaves by (IPv4 and IPv6): where a packet leaves the machine."""
    out: set[str] = set()
    for family in ("-4", "-6"):
        run = subprocess.run(["ip", family, "route", "show", "default"], capture_output=True, text=True, check=False)
        for line in run.stdout.splitlines():
            words = line.split()
            if "dev" in words[:-1]:
                out.add(words[words.index("dev") + 1])
    return out


def _iptables(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool, "-w", "-t", "mangle", *args], capture_output=True, text=True, check=False)


def counted(rules: str) -> dict[tuple[str, str], tuple[int, int]]:
    """(interface, protocol) -> (packets, bytes) of the counting rules in ``iptables -S CHAIN -v``
    output (``-A QOSMOS-EGRESS -o eth0 -p tcp -m comment --comment qosmos-test-egress -c 3 180``);
    a rule that is there twice is summed."""
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for line in rules.splitlines():
        if not line.startswith(f"-A {CHAIN} "):
            continue  # (also "Zeroing chain `...'", which -Z writes to the same output)
        words = shlex.split(line)
        if not {"-c", "-o", "-p"} <= set(words):
            continue
        c = words.index("-c")
        key = (words[words.index("-o") + 1], words[words.index("-p") + 1])
        packets, size = out.get(key, (0, 0))
        out[key] = (packets + int(words[c + 1]), size + int(words[c + 2]))
    return out


class EgressCounter:
    def __init__(self, interfaces: Iterable[str], tools: Iterable[str] = tuple(FAMILIES)) -> None:
        self.interfaces = sorted(interfaces)
        self.tools = [t for t in tools if shutil.which(t)]

    @classmethod
    def available(cls) -> bool:
        return shutil.which("iptables") is not None and shutil.which("ip") is not None

    def install(self) -> None:
        """Add the chain and its counting rules (first removing what a crashed run left); counting
        starts now."""
        self.remove()
        for tool in self.tools:
            steps = [["-N", CHAIN], ["-I", "POSTROUTING", "-m", "comment", "--comment", COMMENT, "-j", CHAIN]]
            steps += [["-A", CHAIN, "-o", i, "-p", p] for i in self.interfaces for p in PROTOCOLS]
            for step in steps:
                run = _iptables(tool, *step)
                if run.returncode != 0:
                    self.remove()
                    raise OSError(f"{tool} -t mangle {' '.join(step)}: {run.stderr.strip()}")

    def take(self) -> list[Egress]:
        """The packets counted since the last call (read and zeroed at once). The test node's
        teardown may restore the rules it saved, with counters at 0: what was counted since the
        last call before that is lost."""
        out: list[Egress] = []
        for tool in self.tools:
            run = _iptables(tool, "-S", CHAIN, "-v", "-Z")
            if run.returncode != 0:  # gone (a snapshot from before the run restored): count again
                self.install()
                return out
            for (interface, protocol), (packets, size) in sorted(counted(run.stdout).items()):
                if packets:
                    out.append(Egress(interface, FAMILIES[tool], protocol, packets, size))
        return out

    def remove(self) -> None:
        """Delete the chain and the jump to it (also those of an earlier run)."""
        for tool in self.tools:
            for line in _iptables(tool, "-S", "POSTROUTING").stdout.splitlines():
                words = shlex.split(line) if line.startswith("-A POSTROUTING ") else []
                if words[-2:] == ["-j", CHAIN]:
                    _iptables(tool, "-D", *words[1:])
            _iptables(tool, "-F", CHAIN)
            _iptables(tool, "-X", CHAIN)
