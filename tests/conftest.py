"""Settings every tier shares."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from qosmos.testing.egress import Egress, EgressCounter, uplinks
from qosmos.testing.listeners import Finding, ListenerAudit


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
        found = audit.take()  # while the session's fixtures were torn down (control planes, nodes)
    finally:
        audit.stop()
    _fail_if_it_left("the session's teardown", found, [])


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
        sent = counter.take()  # while the session's fixtures were torn down (control planes, nodes)
    finally:
        counter.remove()
    _fail_if_it_left("the session's teardown", [], sent)


@pytest.fixture(autouse=True)
def _nothing_leaves_this_machine(
    listener_audit: ListenerAudit | None, egress_counter: EgressCounter | None
) -> Iterator[None]:
    """Nothing may leave this machine: a test fails at its teardown when its processes listened on an
    address reachable from outside (a wildcard, the uplink's address; named with the process), or
    when TCP or UDP packets went out of the uplink meanwhile (a connection, a DNS query, a pod's
    packet the host forwards). What a session fixture (a control plane, a node) does after the last
    test is checked when the two session fixtures end: what an autouse fixture asks for pytest sets
    up before, and so tears down after, any fixture a test asks for."""
    yield
    found = listener_audit.take() if listener_audit is not None else []
    _fail_if_it_left("this test", found, egress_counter.take() if egress_counter is not None else [])


def _fail_if_it_left(during: str, found: list[Finding], sent: list[Egress]) -> None:
    why = []
    if found:
        why.append(
            f"servers reachable from outside this machine during {during} (bind them to loopback, or use private_network):"
        )
        why += [f"  {f}" for f in found]
    if sent:
        why += [f"packets left this machine during {during} (keep its traffic on loopback):", *(f"  {e}" for e in sent)]
    if why:
        pytest.fail("\n".join(why), pytrace=False)


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
