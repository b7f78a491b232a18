"""The core scoring hook on hand-built cluster states."""

from __future__ import annotations

import numpy as np
import pytest
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.placement import get_placer
from qosmos.extender.core.scoring import (
    PLAN_SCORE,
    FilterResult,
    PodAsk,
    filter_nodes,
    format_shape,
    parse_gpu_models,
    parse_shape,
    plan,
    plan_nodes,
    score_nodes,
    shortlist,
)
from qosmos.extender.core.types import Allocation, NodeGrant, Shape

from .conftest import small_nodes


@pytest.fixture
def cluster() -> ClusterState:
    return ClusterState(small_nodes())


def test_parse_shape_roundtrip() -> None:
    assert parse_shape(" 2x4 ") == Shape(2, 4)
    assert format_shape(Shape(3, 8)) == "3x8"
    for bad in ("", "2", "x4", "2x", "0x4", "2x-1", "axb", "2x4x1", "1x99999"):
        with pytest.raises(InvalidInput):
            parse_shape(bad)


def test_parse_gpu_models() -> None:
    assert parse_gpu_models("V100M32|V100M16| ") == ("V100M16", "V100M32")
    assert parse_gpu_models("") == ()


def test_gpu_model_constraint_is_unresolvable(cluster: ClusterState) -> None:
    ask = PodAsk(gpus=1, gpu_models=("T4",))
    res = filter_nodes(cluster, ask, np.arange(len(cluster.nodes)))
    fits = {cluster.nodes[i].name for i in res.fits}
    assert fits == {"a4", "b3"}
    un = FilterResult.reasons(res.unresolvable)
    assert "not one of T4" in un[cluster.index["a1"]]
    assert "V100M32" in un[cluster.index["a1"]]
    assert cluster.index["c1"] in un  # no GPU model at all


def test_vc_and_capacity_reasons(cluster: ClusterState) -> None:
    ask = PodAsk(gpus=8, vc="vc-a")
    res = filter_nodes(cluster, ask, np.arange(len(cluster.nodes)))
    assert {cluster.nodes[i].name for i in res.fits} == {"a1", "a2"}
    un = FilterResult.reasons(res.unresolvable)
    assert "virtual cluster" in un[cluster.index["b1"]]
    assert "has 4 GPUs" in un[cluster.index["a3"]]


def test_busy_node_is_resolvable(cluster: ClusterState) -> None:
    i = cluster.index["a1"]
    cluster.allocate(Allocation((NodeGrant(i, tuple(range(7))),)))
    res = filter_nodes(cluster, PodAsk(gpus=2, vc="vc-a"), np.arange(len(cluster.nodes)))
    failed = FilterResult.reasons(res.failed)
    assert failed[i] == "1 of 8 GPUs free; the pod needs 2"
    assert i not in FilterResult.reasons(res.unresolvable)


def test_plan_node_scores_highest_and_best_fit(cluster: ClusterState) -> None:
    # a2 has 3 free GPUs: the best fit for a 2-GPU pod in vc-a on V100s.
    cluster.allocate(Allocation((NodeGrant(cluster.index["a2"], tuple(range(5))),)))
    ask = PodAsk(gpus=2, vc="vc-a", gpu_models=("V100M32",))
    alloc = plan(cluster, ask, get_placer("cer"))
    assert alloc is not None and alloc.nodes == (cluster.index["a2"],)
    planned = plan_nodes(cluster, ask, alloc)
    cand = np.arange(len(cluster.nodes))
    scores = score_nodes(cluster, ask, cand, planned)
    assert scores[cluster.index["a2"]] == PLAN_SCORE
    others = np.delete(scores, cluster.index["a2"])
    assert others.max() < PLAN_SCORE
    assert scores.min() >= 0 and scores.max() <= 10
    # consolidation: an exact fit (a4: 2 of 2 free) outscores a3 (2 spare), both off the plan's switch
    assert scores[cluster.index["a4"]] > scores[cluster.index["a3"]]


def test_gang_plan_on_one_switch_and_peers(cluster: ClusterState) -> None:
    ask = PodAsk(gpus=8, shape=Shape(2, 8))
    alloc = plan(cluster, ask, get_placer("cer"))
    assert alloc is not None and len(alloc.nodes) == 2 and not alloc.cross_switch
    # one member already on a1 (sw-0): the rest goes to another node of sw-0, never a1 again
    peer = cluster.index["a1"]
    cluster.allocate(Allocation((NodeGrant(peer, tuple(range(8))),)))
    ask2 = PodAsk(gpus=8, shape=Shape(2, 8), peer_nodes=(peer,))
    assert ask2.remaining() == 1
    alloc2 = plan(cluster, ask2, get_placer("cer"))
    planned = plan_nodes(cluster, ask2, alloc2)
    assert peer not in planned and len(planned) == 1
    scores = score_nodes(cluster, ask2, np.arange(len(cluster.nodes)), planned)
    sw0 = [cluster.index[n] for n in ("a2", "b1")]
    sw1 = [cluster.index["b2"]]
    assert max(scores[sw0]) == PLAN_SCORE
    assert min(scores[sw0]) > max(scores[sw1])  # the peer's switch first
    assert scores[peer] == 0


def test_topology_bonus_for_peer_switch(cluster: ClusterState) -> None:
    peer = cluster.index["b1"]  # sw-0
    ask = PodAsk(gpus=8, shape=Shape(3, 8), peer_nodes=(peer,), nodes=())
    cand = np.array([cluster.index["a2"], cluster.index["b2"]])
    scores = score_nodes(cluster, ask, cand, planned=())
    assert scores[0] > scores[1]  # a2 shares b1's switch


def test_operator_nodes_win(cluster: ClusterState) -> None:
    ask = PodAsk(gpus=2, nodes=(cluster.index["b2"],))
    planned = plan_nodes(cluster, ask, plan(cluster, ask))
    assert planned == (cluster.index["b2"],)
    scores = score_nodes(cluster, ask, np.arange(len(cluster.nodes)), planned)
    assert int(np.argmax(scores)) == cluster.index["b2"]


def test_shortlist_is_the_plan_or_the_tightest_fit(cluster: ClusterState) -> None:
    i2, i4 = cluster.index["a2"], cluster.index["b2"]
    cluster.allocate(Allocation((NodeGrant(i2, tuple(range(5))), NodeGrant(i4, tuple(range(5))))))
    ask = PodAsk(gpus=2)
    fits = filter_nodes(cluster, ask, np.arange(len(cluster.nodes))).fits
    planned = plan_nodes(cluster, ask, plan(cluster, ask, get_placer("best-fit")))
    assert shortlist(cluster, ask, fits, planned, 8).tolist() == list(planned)
    # no plan: the exact fit (a4, 2 of 2 free) beats 3 free (a2, b2) and 4 free (a3, b3)
    assert shortlist(cluster, ask, fits, (), 8).tolist() == [cluster.index["a4"]]
    ask3 = PodAsk(gpus=3)
    fits3 = filter_nodes(cluster, ask3, np.arange(len(cluster.nodes))).fits
    tier = shortlist(cluster, ask3, fits3, (), 8).tolist()
    assert tier == [i2, i4]  # both exact fits, in candidate order
    assert shortlist(cluster, ask3, fits3, (), 1).tolist() == [i2]  # capped
    assert shortlist(cluster, ask3, fits3, (), 0).tolist() == fits3.tolist()  # 0 keeps every fit
    assert shortlist(cluster, ask3, fits3[:0], (), 8).size == 0


def test_shape_must_match_pod_request() -> None:
    with pytest.raises(InvalidInput, match="GPUs per node"):
        PodAsk(gpus=2, shape=Shape(2, 4))


def test_scoring_is_pure() -> None:
    import ast
    import inspect

    import qosmos.extender.core.scoring as mod

    tree = ast.parse(inspect.getsource(mod))
    imported = {n.names[0].name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__", "collections", "dataclasses", "numpy", "qosmos"}
