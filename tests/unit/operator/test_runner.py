"""Which node events make the operator run a pass (operator/runner.py)."""

from __future__ import annotations

import copy
from typing import Any

from qosmos.dev.fakenodes import fake_node_manifest
from qosmos.operator.runner import NodeChanges


def node() -> dict[str, Any]:
    return fake_node_manifest({"sn": "n0", "cpu_milli": 96000, "memory_mib": 786432, "gpu": 8, "model": "V100M32"}, 0)


def test_a_heartbeat_is_not_a_change_but_what_the_pass_reads_is() -> None:
    nc = NodeChanges()
    n = node()
    assert nc.changed("ADDED", n)
    beat = copy.deepcopy(n)
    for c in beat["status"]["conditions"]:
        c["lastHeartbeatTime"] = "2026-11-23T15:00:00Z"
    beat["metadata"]["resourceVersion"] = "99"
    beat["metadata"]["annotations"]["kwok.x-k8s.io/last-beat"] = "x"  # not the operator's
    assert not nc.changed("MODIFIED", beat)
    for edit in (
        lambda m: m["metadata"]["labels"].update({"qosmos.io/pool": "a"}),
        lambda m: m["metadata"]["annotations"].update({"qosmos.io/vc-managed": "true"}),
        lambda m: m["spec"].update({"unschedulable": True}),
        lambda m: m["spec"].update({"taints": [{"key": "qosmos.io/power", "value": "asleep", "effect": "NoSchedule"}]}),
        lambda m: m["status"]["allocatable"].update({"nvidia.com/gpu": "4"}),
        lambda m: next(c for c in m["status"]["conditions"] if c["type"] == "Ready").update({"status": "False"}),
    ):
        changed = copy.deepcopy(beat)
        edit(changed)
        assert nc.changed("MODIFIED", changed)
        assert not nc.changed("MODIFIED", changed)  # seen now
        assert nc.changed("MODIFIED", beat)  # and back
    assert nc.changed("DELETED", beat)
    assert nc.changed("ADDED", beat)  # forgotten on deletion


def test_the_echo_of_a_passs_own_status_write_does_not_ask_for_a_pass() -> None:
    """Issue 21 §1: the operator's own status-only writes do not trigger a pass; another writer's
    change after them does (it has a new resourceVersion), and the memory is bounded."""
    from qosmos.operator.kube import OwnWrites
    from qosmos.operator.runner import echo

    own = OwnWrites(keep=3)
    for rv in ("11", "12", "13"):
        own.add(rv)
    own.add(None)
    assert echo({"metadata": {"resourceVersion": "12"}}, own)
    assert not echo({"metadata": {"resourceVersion": "14"}}, own)  # kubectl edit after it
    assert not echo({"metadata": {}}, own)
    own.add("15")
    assert "11" not in own and "15" in own  # the oldest went


def test_which_watch_events_ask_for_a_pass() -> None:
    """The informers' events (operator/informers.py) through ``Changes``: a DLJob or VirtualCluster
    change by anyone else, a deletion, a relist, a node change the pass reads, a DLJob or replica pod;
    not the echo of a pass's own status write, not a heartbeat, not another workload's pod."""
    from qosmos.operator.kube import OwnWrites
    from qosmos.operator.runner import Changes

    own = OwnWrites()
    own.add("50")
    c = Changes(own)
    echo_ = {"metadata": {"resourceVersion": "50"}}
    other = {"metadata": {"resourceVersion": "51"}}
    for store in ("dljobs", "virtualclusters"):
        assert not c.worth_a_pass(store, "MODIFIED", echo_)
        assert c.worth_a_pass(store, "MODIFIED", other)
        assert c.worth_a_pass(store, "DELETED", echo_)
    assert c.worth_a_pass("other-pods", "RELIST", {})
    n = node()
    assert c.worth_a_pass("nodes", "ADDED", n)
    assert not c.worth_a_pass("nodes", "MODIFIED", copy.deepcopy(n))  # nothing the pass reads moved
    assert c.worth_a_pass("pods", "MODIFIED", other) and c.worth_a_pass("replica-pods", "ADDED", other)
    for store in ("pods", "replica-pods"):  # a pod the pass created, ungated or labelled: it has the reply
        assert not c.worth_a_pass(store, "ADDED", echo_) and not c.worth_a_pass(store, "MODIFIED", echo_)
        assert not c.worth_a_pass(store, "DELETED", echo_)  # its label took it out of the selection
    assert not c.worth_a_pass("other-pods", "ADDED", other)  # the timer's pass counts them
