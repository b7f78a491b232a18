"""The suite's check that nothing leaves this machine (``qosmos.testing.egress``). The counters here
count in a private network namespace whose default route leaves by a bridge standing for the uplink
(``up0``): the packets they must catch go nowhere, and the host's rules are not touched."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable, Iterator

import pytest
from qosmos.testing.egress import CHAIN, Egress, EgressCounter, counted, uplinks

RULES = f"""-N {CHAIN}
Zeroing chain `{CHAIN}'
-A {CHAIN} -o eth0 -p tcp -c 3 180
-A {CHAIN} -o eth0 -p udp -c 0 0
-A {CHAIN} -o eth0 -p tcp -c 1 60
-A POSTROUTING -o eth0 -p tcp -c 9 900
-A {CHAIN} -o cni0 -j MARK --set-xmark 0x1/0xffffffff -c 5 500
"""


def test_the_rules_counters_are_read_per_interface_and_protocol() -> None:
    # a rule there twice (the test node's teardown restored a snapshot that held it) is summed
    assert counted(RULES) == {("eth0", "tcp"): (4, 240), ("eth0", "udp"): (0, 0)}
    assert str(Egress("eth0", "IPv6", "udp", 2, 140)) == "2 UDP/IPv6 packets (140 bytes) out of eth0"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def routed_uplink(private_network: None) -> Iterator[str]:
    """In the test's private namespace, an uplink the default route leaves by."""
    if not EgressCounter.available():
        from qosmos.testing.skips import skip_or_fail

        skip_or_fail("iptables is not installed")
    _ip("link", "add", "up0", "type", "bridge")
    _ip("addr", "add", "192.0.2.77/24", "dev", "up0")
    _ip("link", "set", "up0", "up")
    _ip("route", "add", "default", "via", "192.0.2.1", "dev", "up0")
    yield "up0"


def _ours() -> list[str]:
    rules = subprocess.run(["iptables", "-w", "-t", "mangle", "-S"], capture_output=True, text=True)
    return [line for line in rules.stdout.splitlines() if CHAIN in line]


def _udp(address: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"?", (address, 53))


def test_packets_out_of_the_uplink_are_counted_and_nothing_else(routed_uplink: str) -> None:
    assert uplinks() == {routed_uplink}
    EgressCounter({routed_uplink}).install()  # a crashed run's, left behind
    counter = EgressCounter({routed_uplink})
    counter.install()
    try:
        assert len(_ours()) == 4 and counter.take() == []  # chain, jump, tcp and udp: the leftover replaced
        _udp("198.51.100.7")  # a DNS query to a resolver outside
        (sent,) = counter.take()
        assert (sent.interface, sent.family, sent.protocol, sent.packets) == ("up0", "IPv4", "udp", 1)
        assert counter.take() == []  # counted once
        _udp("127.0.0.1")  # loopback, and the bridge's own address: local
        _udp("192.0.2.77")
        assert counter.take() == []
        with socket.socket() as s, pytest.raises(OSError):
            s.settimeout(0.3)
            s.connect(("198.51.100.8", 443))  # a connection attempt nobody answers
        assert {(e.protocol, e.packets >= 1) for e in counter.take()} == {("tcp", True)}
        _udp("198.51.100.7")  # as many packets as the last time: found again
        assert [(e.protocol, e.packets) for e in counter.take()] == [("udp", 1)]
        counter.remove()  # a snapshot from before the run restored over the rules: they come back
        assert counter.take() == [] and len(_ours()) == 4
        _udp("198.51.100.7")
        assert [(e.protocol, e.packets) for e in counter.take()] == [("udp", 1)]
    finally:
        counter.remove()
    assert _ours() == []


SEND_OUT = "    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'?', ('198.51.100.7', 53))\n"


@pytest.mark.parametrize(
    ("source", "summary", "where"),
    [
        (
            "import socket\ndef test_out():\n" + SEND_OUT + "def test_loopback():\n"
            "    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'?', ('127.0.0.1', 53))\n",
            "2 passed, 1 error",
            "ERROR at teardown of test_out",
        ),
        (
            "import socket, pytest\n@pytest.fixture(scope='session')\ndef cluster():\n    yield\n"
            + SEND_OUT
            + "def test_uses_it(cluster):\n    pass\n",
            "1 passed, 1 error",
            "during the session's teardown",
        ),
    ],
    ids=["a-test", "a-session-fixtures-teardown"],
)
def test_the_suite_fails_on_packets_that_leave(
    routed_uplink: str, inner_suite: Callable[[str], tuple[int, str]], source: str, summary: str, where: str
) -> None:
    """tests/conftest.py's check, run on an inner test file that sends a datagram out of the (private)
    uplink: from a test (and none from the one on loopback), and from the teardown of a session-scoped
    fixture (a control plane, a node) after the last test's check, which the counter, set up before
    and torn down after it, still counts."""
    rc, out = inner_suite(source)
    assert rc == 1, out
    assert summary in out and where in out, out
    assert "1 UDP/IPv4 packets (29 bytes) out of up0" in out, out
    assert _ours() == []  # the inner run removed its rules
