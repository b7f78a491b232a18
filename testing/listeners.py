"""The test suite's own check of its network rule: servers bind to loopback.

:class:`ListenerAudit` samples this host's listening TCP sockets (``/proc/thread-self/net/tcp`` and
``tcp6``, read by its own thread, which stays in the host's network namespace even while a test's
thread is in a private one) and reports each one that a process of this test run opened on an address
reachable from outside: a wildcard (``0.0.0.0``, ``::``) or an address of an interface other than
``lo`` that was there when the audit began (the machine's own uplink). Addresses on ``lo`` (the test
node's ``NODE_IP``) and on interfaces a test created (the pods' bridge, where the e2e tier's Service
VIPs live) are local by construction. A process is this run's when it descends from the test process
or runs in a ``kubepods`` cgroup (the test node's pods: their shims leave the process tree).
Listeners already there when the audit began and other users' processes are not reported.

A listener that lives shorter than the sampling interval may be missed; UDP is not checked (a bound
UDP client socket looks like a server)."""

from __future__ import annotations

import ipaddress
import json
import os
import queue
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from qosmos.dev.process import stat_fields

LISTEN = "0A"
LOOPBACK_IFACE = "lo"


@dataclass(frozen=True)
class Listener:
    address: str  # as written: 0.0.0.0, ::, 192.0.2.2, ...
    port: int
    inode: int


@dataclass(frozen=True)
class Finding:
    listener: Listener
    pid: int | None
    command: str
    why: str  # "every address" or "the address of <iface>"

    def __str__(self) -> str:
        who = f"pid {self.pid} ({self.command})" if self.pid else "a process that has exited"
        return f"{who} listens on {self.listener.address}:{self.listener.port}, {self.why}"


def _ipv4(hex8: str) -> str:
    return str(ipaddress.IPv4Address(bytes.fromhex(hex8)[::-1]))  # one 32-bit word in host (little-endian) order


def _ipv6(hex32: str) -> str:
    raw = b"".join(bytes.fromhex(hex32[i : i + 8])[::-1] for i in range(0, 32, 8))
    ip = ipaddress.IPv6Address(raw)
    return f"::ffff:{ip.ipv4_mapped}" if ip.ipv4_mapped is not None else str(ip)  # as ss writes it


def parse_proc_net_tcp(text: str, v6: bool) -> list[Listener]:
    """The LISTEN rows of a ``/proc/net/tcp`` (``tcp6`` with ``v6``) table."""
    out = []
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 10 or cols[3] != LISTEN:
            continue
        addr, port = cols[1].split(":")
        out.append(Listener(_ipv6(addr) if v6 else _ipv4(addr), int(port, 16), int(cols[9])))
    return out


def _unmapped(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address, an IPv4-mapped IPv6 one (``::ffff:a.b.c.d``, a v6 socket's v4 side) as IPv4."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def is_loopback(address: str) -> bool:
    return _unmapped(address).is_loopback


def is_wildcard(address: str) -> bool:
    return _unmapped(address).is_unspecified


def interface_addresses() -> dict[str, set[str]]:
    """Each interface's addresses (``ip -j addr``); {} where iproute2 is missing."""
    try:
        out = subprocess.run(["ip", "-j", "addr", "show"], capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return {}
    return {i["ifname"]: {a["local"] for a in i.get("addr_info", []) if "local" in a} for i in json.loads(out.stdout)}


def socket_owner(inode: int, proc: Path = Path("/proc")) -> int | None:
    """The pid of a process holding socket ``inode`` (None when none does any more)."""
    target = f"socket:[{inode}]"
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:  # gone, or not ours to read
            continue
        for fd in fds:
            try:
                if os.readlink(fd) == target:
                    return int(entry.name)
            except OSError:  # closed since the listing (the listing's own descriptor, in this process)
                continue
    return None


def _ppid(pid: int) -> int | None:
    fields = stat_fields(pid)
    return None if fields is None else int(fields[1])  # field 4


def is_ours(pid: int, root: int) -> bool:
    """``pid`` descends from ``root`` or runs in a ``kubepods`` cgroup (the test node's pods)."""
    try:
        if "/kubepods" in Path(f"/proc/{pid}/cgroup").read_text():
            return True
    except OSError:
        return False
    seen = 0
    p: int | None = pid
    while p and p > 1 and seen < 256:
        if p == root:
            return True
        p, seen = _ppid(p), seen + 1
    return False


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    except OSError:
        return "?"


class ListenerAudit:
    def __init__(self, interval_s: float = 0.25, root: int | None = None) -> None:
        self.interval_s = interval_s
        self.root = os.getpid() if root is None else root
        self.uplinks = {name for name in interface_addresses() if name != LOOPBACK_IFACE}
        self._seen: set[int] = set()  # inodes judged already (found, or fine)
        self._found: list[Finding] = []
        self._lock = threading.Lock()
        self._sampled = threading.Condition(self._lock)
        self._samples = 0  # completed by the audit's thread
        self._stop = threading.Event()
        self._asked: queue.Queue[threading.Event] = queue.Queue()  # take(): sample now, in the audit's thread
        self._thread: threading.Thread | None = None
        self._error: Exception | None = None
        self._seen.update(listener.inode for listener in self.listeners())  # there before: not this run's

    def listeners(self) -> list[Listener]:
        out: list[Listener] = []
        for name, v6 in (("tcp", False), ("tcp6", True)):
            try:
                out += parse_proc_net_tcp(Path(f"/proc/thread-self/net/{name}").read_text(), v6)
            except OSError:  # no IPv6
                continue
        return out

    def _why(self, address: str) -> str | None:
        """Why ``address`` is reachable from outside, or None when it is local."""
        if is_loopback(address):
            return None
        if is_wildcard(address):
            return "every address"
        for name, addrs in interface_addresses().items():
            if name in self.uplinks and address in addrs:
                return f"the address of {name}"
        return None

    def sample(self) -> None:
        for listener in self.listeners():
            with self._lock:
                if listener.inode in self._seen:
                    continue
                self._seen.add(listener.inode)
            why = self._why(listener.address)
            if why is None:
                continue
            pid = socket_owner(listener.inode)
            if pid is None or not is_ours(pid, self.root):
                continue
            with self._lock:
                self._found.append(Finding(listener, pid, _command(pid), why))

    def take(self) -> list[Finding]:
        """What was found since the last call, after one more sample (by the audit's thread, in the
        host's network namespace, whichever namespace the caller's thread is in)."""
        if self._thread is not None and self._thread.is_alive():
            done = threading.Event()
            self._asked.put(done)
            done.wait(timeout=30)
        else:
            self.sample()
        if self._error is not None:
            raise RuntimeError(f"the listener audit failed: {self._error!r}") from self._error
        with self._lock:
            found, self._found = self._found, []
        return found

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                done = self._asked.get(timeout=self.interval_s)
            except queue.Empty:
                done = None
            try:
                self.sample()
            except Exception as exc:  # raised by the next take(): a broken audit must not pass quietly
                self._error = exc
            finally:
                with self._sampled:
                    self._samples += 1
                    self._sampled.notify_all()
                if done is not None:
                    done.set()

    def wait_sampled(self, timeout_s: float = 30.0) -> bool:
        """Block until the audit's thread has finished a sample that began after this call (the one
        running now may have read the tables before); False when ``timeout_s`` passed first."""
        with self._sampled:
            target = self._samples + 2
            return self._sampled.wait_for(lambda: self._samples >= target, timeout=timeout_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="listener-audit", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
