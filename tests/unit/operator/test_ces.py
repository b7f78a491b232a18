"""Cluster Energy Saving in the operator (operator/ces.py): objects -> node counts, Alg. 2's decisions
through the predictors' functions, the recorded history, the power drivers (a real command, a real
HTTP server)."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.operator import ces as ces_mod
from qosmos.operator.ces import (
    ASLEEP,
    AWAKE,
    LABEL_POWER,
    WAKING,
    CESOptions,
    History,
    PowerDriver,
    PowerError,
    PowerNode,
    default_sigma,
    lacking_gangs,
    options,
    placed_nodes,
    plan_sleep,
    plan_wakes,
    power_view,
    sooner,
    train,
    trend_inputs,
)
from qosmos.predictors.ces import HORIZON, CESConfig


def node(name: str, gpus: int = 8, power: str | None = None, cordoned: bool = False, **labels: str) -> dict[str, Any]:
    lab = dict(labels)
    if power:
        lab[LABEL_POWER] = power
    return {
        "metadata": {"name": name, "labels": lab},
        "spec": {"unschedulable": True} if cordoned or power else {},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64"} if gpus else {"cpu": "4"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(name: str, on: str, phase: str = "Running", owner: str | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name, "namespace": "t"}
    if owner:
        m["ownerReferences"] = [{"kind": owner, "name": "x"}]
    return {"metadata": m, "spec": {"nodeName": on}, "status": {"phase": phase}}


def vc(name: str, **selector: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"nodeSelector": selector}}


def dljob(
    name: str, vc: str = "a", gpus: int = 8, phase: str | None = None, reason: str | None = None, **spec: Any
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if phase:
        status["phase"] = phase
    if reason:
        status["conditions"] = [{"type": "Admitted", "status": "False", "reason": reason, "message": "…"}]
    return {
        "metadata": {"name": name, "namespace": "t"},
        "spec": {"virtualCluster": vc, "gpus": gpus, "template": {"spec": {"containers": [{"name": "c"}]}}, **spec},
        "status": status,
    }


def placed(name: str, nodes: list[str], phase: str = "Admitted") -> dict[str, Any]:
    obj = dljob(name, phase=phase)
    obj["status"]["placement"] = {"nodes": len(nodes), "gpusPerNode": 8, "nodeNames": nodes}
    return obj


# --------------------------------------------------------------------------- objects -> counts


def test_power_view_counts_gpu_nodes_and_their_busyness() -> None:
    nodes = [
        node("n0", pool="x"),
        node("n1", pool="x", power=ASLEEP),
        node("n2", pool="y"),
        node("n3"),
        node("cpu", gpus=0),  # not a GPU node: not managed
        node("cordoned", cordoned=True),  # someone else's cordon: left alone
    ]
    pods = [
        pod("p0", "n0"),
        pod("ds", "n2", owner="DaemonSet"),  # a DaemonSet pod does not keep a node awake
        pod("done", "n3", phase="Succeeded"),
    ]
    dljobs = [placed("g", ["n3"]), placed("old", ["n2"], phase="Succeeded")]
    view = power_view(nodes, [vc("a", pool="x"), vc("b", pool="y")], dljobs, pods)
    assert [(n.name, n.state, n.busy, n.partition) for n in view] == [
        ("n0", AWAKE, True, "a"),
        ("n1", ASLEEP, False, "a"),
        ("n2", AWAKE, False, "b"),
        ("n3", AWAKE, True, ""),  # an admitted gang is placed on it
    ]
    assert placed_nodes(dljobs) == {"n3": ["t/g"]}


def test_lacking_gangs_read_the_admitted_condition() -> None:
    view = [PowerNode("n0", AWAKE, True, "a", 8), PowerNode("n1", ASLEEP, False, "a", 4)]
    dljobs = [
        dljob("nofit", gpus=12, reason="NoFit"),  # ceil(12 / the largest node's 8 GPUs) = 2 nodes
        dljob("fixed", gpus=12, gpusPerNode=4, reason="Head"),  # its own shape: 3 nodes
        dljob("behind", gpus=8, reason="BehindHead"),
        dljob("quota", gpus=8, reason="Quota"),  # waking nodes would not help it
        dljob("never", gpus=64, reason="Inadmissible"),  # nor this one: it asks more than the nodes have
        dljob("policy", gpus=8, reason="Policy"),
        dljob("admitted", gpus=8, phase="Admitted", reason="NoFit"),
        dljob("new", gpus=8),  # no condition yet
    ]
    assert lacking_gangs(dljobs, view) == {"a": [("t/nofit", 2), ("t/fixed", 3), ("t/behind", 1)]}


# --------------------------------------------------------------------------- Alg. 2's decisions


def test_plan_wakes_is_r_minus_ca_plus_sigma_per_partition() -> None:
    view = [
        PowerNode("a0", AWAKE, True, "a", 8),
        PowerNode("a1", ASLEEP, False, "a", 8),
        PowerNode("a2", ASLEEP, False, "a", 8),
        PowerNode("a3", ASLEEP, False, "a", 8),
        PowerNode("a4", ASLEEP, False, "a", 8),
        PowerNode("b0", AWAKE, False, "b", 8),
        PowerNode("b1", ASLEEP, False, "b", 8),
    ]
    # a: R = 1 busy + 2 lacking = 3 > C_A = 1 -> wake 3 - 1 + σ(1) = 3; b: nothing lacks
    wakes = plan_wakes(view, {"a": [("t/g", 2)]}, {}, sigma=1)
    assert [(w.partition, w.nodes, w.request, w.active, w.jobs) for w in wakes] == [
        ("a", ("a1", "a2", "a3"), 3, 1, ("t/g",))
    ]
    # an idle awake node covers a one-node gang: R = 1 + 1 = 2 = C_A (b0 busy now) -> no wake
    view_b = [PowerNode("b0", AWAKE, True, "b", 8), PowerNode("b1", AWAKE, False, "b", 8), view[-1]]
    assert plan_wakes(view_b, {"b": [("t/h", 1)]}, {}, sigma=1) == []
    # σ = 0 wakes exactly the gap; never more nodes than sleep
    assert plan_wakes(view, {"a": [("t/g", 2)]}, {}, sigma=0)[0].nodes == ("a1", "a2")
    assert plan_wakes(view, {"a": [("t/g", 9)]}, {}, sigma=1)[0].nodes == ("a1", "a2", "a3", "a4")
    # a sleeping node an admitted gang is placed on always wakes, first
    wakes = plan_wakes(view, {}, {"a4": ["t/pinned"]}, sigma=0)
    assert [(w.nodes, w.jobs) for w in wakes] == [(("a4",), ("t/pinned",))]


def test_plan_sleep_is_nodes_to_sleep_over_idle_awake_nodes() -> None:
    view = [
        PowerNode("n0", AWAKE, True, "", 8),
        PowerNode("n1", AWAKE, False, "", 8),
        PowerNode("n2", AWAKE, False, "", 8),
        PowerNode("n3", AWAKE, False, "", 8),
        PowerNode("n4", WAKING, False, "", 8),  # active, but never put back to sleep while waking
        PowerNode("n5", ASLEEP, False, "", 8),
    ]
    cfg = CESConfig(sigma=1)
    # C_A = 5, C_R = 1: DRS(C_R + σ = 2) puts 3 to sleep, of the 3 idle awake nodes, the last by name first
    assert plan_sleep(view, [3.0, 1.0], [1.0, 1.0], running=1, config=cfg) == ["n3", "n2", "n1"]
    assert plan_sleep(view, [3.0, 1.0], [1.0, 1.0], running=2, config=cfg) == ["n3", "n2"]
    assert plan_sleep(view, [1.0, 3.0], [1.0, 1.0], running=1, config=cfg) == []  # demand rose: T_H < 0
    assert plan_sleep(view, [3.0, 1.0], [1.0, 2.0], running=1, config=cfg) == []  # forecast rises: T_P < 0


# --------------------------------------------------------------------------- the recorded history


def test_history_records_minutes_fills_gaps_and_round_trips() -> None:
    h = History(60.0)
    assert h.record(100, 3, 4) and h.first == 100
    assert not h.record(100, 2, 4)  # the most in a minute counts
    assert h.record(103, 1, 4)  # minutes 101, 102 carry 3 forward
    assert (h.running, h.total) == ([3, 3, 3, 1], [4, 4, 4, 4])
    assert not h.record(99, 9, 9)  # before the history: ignored
    assert h.busy(103, 3) == 3 and h.busy(103, 1) == 1
    back = History.from_json(h.to_json(), 60.0)
    assert (back.first, back.running, back.total) == (100, [3, 3, 3, 1], [4, 4, 4, 4])
    assert History.from_json(h.to_json(), 1.0).running == []  # other minutes: not mixed in
    assert History.from_json("{not json", 60.0).running == []


def test_history_merge_keeps_a_peers_minutes_and_prefers_a_seen_count_to_a_carried_one() -> None:
    """Peering replicas share the history: one that stood by lacks the minutes the other recorded; one
    paused past its keep-alive carried its last count over minutes the other saw."""
    a = History(60.0)
    for m, r in ((100, 5), (101, 5), (102, 5)):
        a.record(m, r, 8)
    b = History.from_json(a.to_json(), 60.0)  # the peer took over at 102 and saw the load fall
    for m, r in ((103, 2), (104, 2), (105, 3), (106, 1)):
        b.record(m, r, 8)
    assert a.record(106, 1, 8) and a.filled == {103, 104, 105}  # a, paused, carried 5 over 103-105
    assert a.running == [5, 5, 5, 5, 5, 5, 1]
    for merged in (a.merge(b), b.merge(a), b.merge(History.from_json(a.to_json(), 60.0))):
        assert (merged.first, merged.running, merged.filled) == (100, [5, 5, 5, 2, 2, 3, 1], set())
    stored = History.from_json(a.merge(History(60.0)).to_json(), 60.0)
    assert stored.filled == {103, 104, 105} and '"filled":[[103,105]]' in a.to_json()  # runs, not minutes

    # both saw a minute: the most counts (busy at any time of it); only one has it: its count
    c = History(60.0, 104, [4, 0, 0, 0], [9, 8, 8, 8])
    assert b.merge(c).running == [5, 5, 5, 2, 4, 3, 1, 0] and b.merge(c).total[4] == 9
    # minutes neither has are carried forward from the earlier, as record() fills them
    late = History(60.0, 110, [7], [8])
    gap = b.merge(late)
    assert gap.running[-5:] == [1, 1, 1, 1, 7] and gap.filled == {107, 108, 109}
    assert late.merge(b) == gap
    # a history older than MAX_MINUTES before this one is not mixed in; an empty or other-minute one neither
    ancient = History(60.0, 100 - ces_mod.MAX_MINUTES - 10, [9], [9])
    assert late.merge(ancient) is late and ancient.merge(late) == late
    assert b.merge(History(60.0)) is b and b.merge(History(1.0, 0, [9], [9])) is b
    assert History(60.0).merge(b) == b


def test_history_merge_keeps_the_newest_four_weeks_and_a_seen_minute_replaces_a_carried_one() -> None:
    a = History(60.0, 0, [1] * ces_mod.MAX_MINUTES, [2] * ces_mod.MAX_MINUTES)
    b = History(60.0, 10, [3] * ces_mod.MAX_MINUTES, [2] * ces_mod.MAX_MINUTES, {10, 20})
    m = a.merge(b)
    assert (m.first, len(m.running), m.filled) == (10, ces_mod.MAX_MINUTES, set())  # the newest four weeks
    assert m.running[:12] == [1] + [3] * 9 + [1, 3]  # 10 and 20: b carried them, a saw them
    h = History(60.0)
    h.record(0, 5, 8)
    h.record(3, 1, 8)
    assert not h.record(1, 0, 8) and h.running == [5, 0, 5, 1] and h.filled == {2}  # seen at last: not max(5, 0)
    for bad in ('"filled":[[2,9]]', '"filled":[[-1,1]]', '"filled":[[2,1]]', '"filled":[["x",2]]'):
        text = h.to_json().replace('"filled":[[2,2]]', bad)
        assert bad in text and History.from_json(text, 60.0).running == []  # unreadable: starting afresh


def test_trend_inputs_wait_for_an_hour_and_hold_the_last_slot_without_a_forecaster() -> None:
    h = History(60.0)
    cfg = CESConfig(sigma=1)
    for m in range(0, 65):
        h.record(m, 4 if m < 30 else 1, 4)
    assert trend_inputs(h, 65, None, cfg) is None  # six slots are complete: not yet an hour
    for m in range(65, 71):
        h.record(m, 1, 4)
    inputs = trend_inputs(h, 70, None, cfg)
    assert inputs is not None
    hist, pred = inputs
    assert list(hist) == [4, 4, 4, 1, 1, 1, 1]  # the 7 slots 0…60 (the past hour)
    assert list(pred) == [1.0] * HORIZON  # persistence: no predicted fall


def test_train_fits_the_forecaster_and_chooses_sigma_on_the_later_half() -> None:
    rng = np.random.default_rng(1)
    h = History(60.0)
    first = 27_000_000
    for i in range(3 * 1440):
        day = np.sin(2 * np.pi * (i % 1440) / 1440)
        h.record(first + i, int(np.clip(round(6 + 3 * day + rng.normal(0, 0.5)), 0, 12)), 12)
    out = train(h, CESOptions(min_train_minutes=1440), total=12)
    assert out.forecaster is not None and out.forecaster.model is not None
    assert out.sigma is not None and 0 <= out.sigma <= 3  # candidates 0 … total / 4
    assert out.xi_h in (0.0, 2.0, 5.0, 10.0) and out.xi_p in (0.0, 2.0, 5.0, 10.0)
    inputs = trend_inputs(h, first + 3 * 1440, out.forecaster, CESConfig(sigma=out.sigma))
    assert inputs is not None and inputs[1].shape == (HORIZON,)
    fixed = train(h, CESOptions(sigma=2), total=12)
    assert fixed.sigma is None  # σ given: only the forecaster trains
    assert default_sigma(4) == 1 and default_sigma(420) == 21


# --------------------------------------------------------------------------- configuration, drivers


def test_options_and_sooner() -> None:
    assert options(False) is None
    opts = options(True, minute_s=1.0, interval=10, sigma="2", wake_latency_s=4.0)
    assert opts is not None and (opts.sigma, opts.minute_s, opts.config(2).boot_delay) == (2, 1.0, 4)
    assert options(True, sigma="auto") == CESOptions()
    with pytest.raises(InvalidInput):
        options(True, sigma="lots")
    with pytest.raises(InvalidInput):
        options(True, minute_s=0)
    with pytest.raises(InvalidInput):
        options(True, driver="ipmi")
    with pytest.raises(InvalidInput):
        options(True, driver="webhook", webhook="ftp://x")
    assert sooner(None, 3.0) == 3.0 and sooner(2.0, None) == 2.0 and sooner(2.0, 3.0) == 2.0


def test_command_driver_runs_the_template_without_a_shell(tmp_path: Path) -> None:
    drv = PowerDriver("command", command=f"touch {tmp_path}/{{node}}.{{action}}.{{power}}")
    drv("node-1", "sleep")
    drv("node-1", "wake")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["node-1.sleep.off", "node-1.wake.on"]
    assert PowerDriver("command", command="echo {node};rm").argv("a b", "wake") == ["echo", "a b;rm"]
    with pytest.raises(PowerError, match="exited 1"):
        PowerDriver("command", command="false {node}")("n", "wake")
    with pytest.raises(InvalidInput):
        PowerDriver("command", command="ipmitool {host}")


def test_webhook_driver_posts_node_and_action() -> None:
    got: list[dict[str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(500 if got[-1]["node"] == "bad" else 204)
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        drv = PowerDriver("webhook", webhook=f"http://127.0.0.1:{srv.server_address[1]}/power")
        drv("node-2", "wake")
        with pytest.raises(PowerError):
            drv("bad", "sleep")
    finally:
        srv.shutdown()
        srv.server_close()
    assert got == [{"node": "node-2", "action": "wake"}, {"node": "bad", "action": "sleep"}]
