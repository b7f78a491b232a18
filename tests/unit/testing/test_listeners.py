"""The suite's check of its network rule (``qosmos.testing.listeners``) and the private network it
offers programs that bind every address (``qosmos.testing.network``). The audits here run inside a
private network namespace (``private_network``), so the wildcard and "uplink" sockets they must catch
are never reachable from outside; the suite's own audit, in the host's namespace, does not see them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from qosmos.testing.listeners import (
    ListenerAudit,
    is_loopback,
    is_ours,
    is_wildcard,
    parse_proc_net_tcp,
    socket_owner,
)

TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0
   1: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 222 1 0 100 0 0 10 0
   2: 020200C0:0016 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0 100 0 0 10 0
"""
TCP6 = """  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 444 1 0 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:0051 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 555 1 0 100 0 0 10 0
   2: 00000000000000000000000000000000:0052 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 666 1 0 100 0 0 10 0
"""


def test_the_kernels_tables_are_read_as_written() -> None:
    v4 = parse_proc_net_tcp(TCP, v6=False)
    assert [(x.address, x.port, x.inode) for x in v4] == [("127.0.0.1", 8080, 111), ("0.0.0.0", 2024, 222)]  # not ESTAB
    v6 = parse_proc_net_tcp(TCP6, v6=True)
    assert [(x.address, x.port) for x in v6] == [("::1", 80), ("::ffff:127.0.0.1", 81), ("::", 82)]
    assert [is_loopback(x.address) for x in v6] == [True, True, False]
    assert [is_wildcard(x.address) for x in v4 + v6] == [False, True, False, False, True]
    assert not is_loopback("192.0.2.2") and not is_wildcard("192.0.2.2") and is_wildcard("::ffff:0.0.0.0")


def test_ours_are_this_runs_descendants() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert is_ours(child.pid, os.getpid()) and not is_ours(os.getpid(), child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_socket_above_a_free_descriptor_is_still_named_with_its_process() -> None:
    """The listing of /proc/PID/fd shows its own descriptor (in this process, the lowest free number),
    closed by the time it is read: that entry is passed over, not the process (which would hide the
    owner of every socket numbered above a free descriptor: pytest's own, as in CI)."""
    spare = [os.open(os.devnull, os.O_RDONLY) for _ in range(4)]
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            os.close(spare.pop(0))  # a free number below the socket's
            port = s.getsockname()[1]
            tcp = parse_proc_net_tcp(Path("/proc/thread-self/net/tcp").read_text(), v6=False)
            (mine,) = [x for x in tcp if x.port == port]
            assert socket_owner(mine.inode) == os.getpid()
    finally:
        for fd in spare:
            os.close(fd)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def uplink(private_network: None) -> Iterator[str]:
    """In the test's private namespace, an interface with an address that stands for the machine's
    uplink (there when the audit starts)."""
    _ip("link", "add", "uplink0", "type", "bridge")
    _ip("addr", "add", "192.0.2.77/32", "dev", "uplink0")
    _ip("link", "set", "uplink0", "up")
    yield "192.0.2.77"


LISTEN = "import socket, sys, time; s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(60)"


def _listen_in_child(address: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", LISTEN, address], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip().isdigit()
    return child


def test_the_audit_names_what_listens_beyond_loopback(uplink: str) -> None:
    before = _listen_in_child("0.0.0.0")  # there before the run: not the run's to answer for
    audit = ListenerAudit(interval_s=0.05)  # created in this thread: its own thread samples this namespace
    assert audit.uplinks == {"uplink0"}
    audit.start()
    children = [before]
    try:
        children.append(_listen_in_child("127.0.0.1"))
        assert audit.take() == []  # loopback is fine
        _ip("link", "add", "pods0", "type", "bridge")  # one a test creates (the pods' bridge): local
        _ip("addr", "add", "10.244.9.1/24", "dev", "pods0")
        children.append(_listen_in_child("10.244.9.1"))
        assert audit.take() == []
        children.append(_listen_in_child("0.0.0.0"))
        children.append(_listen_in_child(uplink))
        found = audit.take()
        assert sorted((f.listener.address, f.pid, f.why) for f in found) == sorted(
            [("0.0.0.0", children[3].pid, "every address"), (uplink, children[4].pid, "the address of uplink0")]
        )
        assert "sleep(60)" in found[0].command and f"pid {found[0].pid}" in str(found[0])
        assert audit.take() == []  # each once
        with socket.socket(socket.AF_INET6) as own:  # this process too, and IPv6's wildcard
            own.bind(("::", 0))
            own.listen()
            assert audit.wait_sampled()  # a whole sample while it listens, however loaded the machine
        (mine,) = audit.take()  # closed already: found by the audit's thread sampling, not at take()
        assert mine.listener.address == "::" and mine.why == "every address"
    finally:
        audit.stop()
        for child in children:
            child.kill()
            child.wait()


def _interfaces(dev: str) -> set[str]:
    return {line.split(":")[0].strip() for line in dev.splitlines()[2:]}


def test_a_private_network_has_only_loopback_and_is_left_on_exit() -> None:
    from qosmos.testing.network import PrivateNetworkUnavailable, private_network
    from qosmos.testing.skips import skip_or_fail

    def here() -> set[str]:
        with open("/proc/thread-self/net/dev") as f:
            return _interfaces(f.read())

    host = here()
    assert host != {"lo"}
    try:
        with private_network():
            assert here() == {"lo"}
            with socket.socket() as s:  # loopback is up: what programs there bind, they reach
                s.bind(("0.0.0.0", 0))
                s.listen()
                socket.create_connection(("127.0.0.1", s.getsockname()[1]), timeout=2).close()
            out = subprocess.run(["cat", "/proc/self/net/dev"], capture_output=True, text=True, check=True).stdout
            assert _interfaces(out) == {"lo"}  # the processes it starts are in it too
    except PrivateNetworkUnavailable as exc:
        skip_or_fail(f"no private network namespace: {exc}")
    assert here() == host


def test_the_suite_fails_a_test_that_listens_beyond_loopback(
    private_network: None, inner_suite: Callable[[str], tuple[int, str]]
) -> None:
    """tests/conftest.py's check, run on a test that opens a wildcard listener (in this test's private
    namespace: the inner run and its listener never touch the host's network)."""
    rc, out = inner_suite(
        "import socket\n"
        "def test_wide(listener_audit):\n"
        "    with socket.socket() as s:\n"
        "        s.bind(('0.0.0.0', 0)); s.listen(); assert listener_audit.wait_sampled()\n"
        "def test_narrow(listener_audit):\n"
        "    with socket.socket() as s:\n"
        "        s.bind(('127.0.0.1', 0)); s.listen(); assert listener_audit.wait_sampled()\n"
    )
    assert rc == 1, out
    assert "2 passed, 1 error" in out and "ERROR at teardown of test_wide" in out, out
    assert "listens on 0.0.0.0:" in out and "every address" in out, out
