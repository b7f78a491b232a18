"""Settings every tier shares."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from qosmos.testing.egress import EgressCounter, uplinks
from qosmos.testing.listeners import ListenerAudit


@pytest.fixture(autouse=True)
def _no_user_modeldb(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never read or write the developer's ~/.config/qosmos/models.json: the model database
    (explain, simulate, profile fit, the extender) resolves to a per-test path that does not exist."""
    monkeypatch.setenv("QOSMOS_MODELDB", str(tmp_path_factory.mktemp("db") / "absent.json"))


def _audits_off() -> bool:
    return os.environ.get("QOSMOS_NETWORK_AUDIT") == "0"


@pytest.fixture(scope="session")
def listener_audit() -> Iterator[ListenerAudit | None]:
    """The run's listening sockets, sampled (``testing/listeners.py``); QOSMOS_NETWORK_AUDIT=0: off."""
    if _audits_off():
        yield None
        return
    audit = ListenerAudit()
    audit.start()
    try:
        yield audit
    finally:
        audit.stop()


@pytest.fixture(autouse=True)
def _servers_bind_loopback(listener_audit: ListenerAudit | None) -> Iterator[None]:
    """Nothing may leave this machine: a test whose processes listen on an address reachable from
    outside (a wildcard, the uplink's address) fails at its teardown, naming the process."""
    yield
    if listener_audit is None:
        return
    found = listener_audit.take()
    if found:
        lines = "\n".join(f"  {f}" for f in found)
        pytest.fail(
            "servers reachable from outside this machine (bind them to loopback, or start them under the "
            f"private_network fixture):\n{lines}",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def egress_counter() -> Iterator[EgressCounter | None]:
    """Packets leaving through the uplink, counted by iptables (``testing/egress.py``; root). Off with
    QOSMOS_NETWORK_AUDIT=0, for other users, without iptables or without a default route."""
    interfaces = uplinks() if EgressCounter.available() and os.geteuid() == 0 and not _audits_off() else set()
    if not interfaces:
        yield None
        return
    counter = EgressCounter(interfaces)
    counter.install()
    try:
        yield counter
    finally:
        counter.remove()


@pytest.fixture(autouse=True)
def _nothing_leaves(egress_counter: EgressCounter | None) -> Iterator[None]:
    """Nothing may leave this machine: a test during which TCP or UDP packets went out of the uplink
    (a connection, a DNS query, a pod's packet the host forwards) fails at its teardown."""
    yield
    if egress_counter is None:
        return
    sent = egress_counter.take()
    if sent:
        lines = "\n".join(f"  {e}" for e in sent)
        pytest.fail(
            f"packets left this machine during this test (keep its traffic on loopback):\n{lines}", pytrace=False
        )


@pytest.fixture
def private_network() -> Iterator[None]:
    """The test's thread, and the processes it starts, in a network namespace whose only interface is
    ``lo`` (``testing/network.py``): for programs that bind every address (torchrun's store, Ray)."""
    from qosmos.testing.network import PrivateNetworkUnavailable
    from qosmos.testing.network import private_network as enter
    from qosmos.testing.skips import skip_or_fail

    ctx = enter()
    try:
        ctx.__enter__()
    except PrivateNetworkUnavailable as exc:
        skip_or_fail(f"no network namespace of its own for this test ({exc}): run as root")
    try:
        yield
    finally:
        ctx.__exit__(None, None, None)
