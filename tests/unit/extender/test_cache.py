"""The watch-fed cache: translation of Kubernetes objects, the assumed ledger, no double allocation."""

from __future__ import annotations

from decimal import Decimal

import pytest
from qosmos.extender.cache import ClusterCache, node_from_object, parse_quantity, pod_info
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Node
from qosmos.extender.service import ExtenderService

from .conftest import make_pod


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", "0.5"),
        ("2", "2"),
        ("16Gi", str(16 * 2**30)),
        ("1k", "1000"),
        ("1e3", "1000"),
        ("1.5", "1.5"),
        ("3M", "3000000"),
    ],
)
def test_parse_quantity(text: str, value: str) -> None:
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize("bad", ["", "abc", "-1", "1Xi", "NaN", "inf", None, [], True, "9" * 80, "1e400"])
def test_parse_quantity_rejects(bad: object) -> None:
    with pytest.raises(InvalidInput):
        parse_quantity(bad)


def test_pod_info_sums_containers_and_reads_annotations() -> None:
    pod = make_pod(
        "w-0",
        gpus=4,
        labels={"qosmos.io/vc": "vc-a", "qosmos.io/job": "train"},
        annotations={
            "qosmos.io/placement": "2x4",
            "qosmos.io/gpu-models": "V100M32|V100M16",
            "qosmos.io/nodes": "a1, a2",
        },
        cpu="1500m",
        memory="2Gi",
    )
    pod["spec"]["containers"].append({"name": "side", "resources": {"requests": {"cpu": "500m"}}})
    info = pod_info(pod)
    assert (info.gpus, info.cpu_milli, info.memory_mib) == (4, 2000, 2048)
    assert info.vc == "vc-a" and info.job == "ns/train" and info.placement == "2x4"
    assert info.gpu_models == ("V100M16", "V100M32") and info.nodes == ("a1", "a2")


def test_node_from_object() -> None:
    obj = {
        "metadata": {
            "name": "n1",
            "labels": {"qosmos.io/gpu-model": "T4", "qosmos.io/vc": "v", "qosmos.io/switch": "s"},
        },
        "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": "2"}},
    }
    assert node_from_object(obj) == Node("n1", 2, "T4", 32000, 131072, "v", "s", "")


def test_assumed_pod_blocks_its_gpus_until_seen(cache: ClusterCache, names: list[str]) -> None:
    """A stale cache (the bind not yet seen by the watch) never hands the same GPUs out twice."""
    svc = ExtenderService(cache)
    first = make_pod("first", gpus=2, labels={"qosmos.io/vc": "vc-a"}, annotations={"qosmos.io/gpu-models": "T4"})
    scores = svc.prioritize({"Pod": first, "NodeNames": names})
    assert max(scores, key=lambda s: s["Score"])["Host"] == "a4"  # the only vc-a T4 node
    # the scheduler binds "first" to a4; the watch has not reported it yet
    second = make_pod("second", gpus=2, labels={"qosmos.io/vc": "vc-a"}, annotations={"qosmos.io/gpu-models": "T4"})
    res = svc.filter({"Pod": second, "NodeNames": names})
    assert res["NodeNames"] == []
    assert res["FailedNodes"]["a4"] == "0 of 2 GPUs free; the pod needs 2"
    # the watch now shows "first" bound: the assumed entry turns into the real pod, counted once
    cache.upsert_pod(pod_info(make_pod("first", gpus=2, node="a4")))
    assert cache.stats()["assumed"] == 0 and cache.stats()["gpus_used"] == 2
    assert svc.filter({"Pod": second, "NodeNames": names})["NodeNames"] == []
    # deleted: the GPUs come back
    cache.delete_pod("uid-first")
    assert svc.filter({"Pod": second, "NodeNames": names})["NodeNames"] == ["a4"]


def test_assumed_entries_expire() -> None:
    now = [0.0]
    cache = ClusterCache(assume_ttl=5.0, clock=lambda: now[0])
    cache.replace_nodes([Node("n", 2, "T4")])
    assert cache.assume(pod_info(make_pod("x", gpus=2)), "n")
    assert not cache.assume(pod_info(make_pod("y", gpus=1)), "n")  # refused: no double allocation
    now[0] = 6.0
    assert cache.expire() == 1
    assert cache.assume(pod_info(make_pod("y", gpus=1)), "n")


def test_rescheduled_pod_releases_its_own_assumption(cache: ClusterCache, names: list[str]) -> None:
    svc = ExtenderService(cache)
    pod = make_pod("again", gpus=2, labels={"qosmos.io/vc": "vc-a"}, annotations={"qosmos.io/gpu-models": "T4"})
    svc.prioritize({"Pod": pod, "NodeNames": names})
    # binding failed and the scheduler retries the same pod: it may use its own GPUs again
    assert svc.filter({"Pod": pod, "NodeNames": names})["NodeNames"] == ["a4"]


def test_bound_pod_wins_over_assumed(cache: ClusterCache) -> None:
    assert cache.assume(pod_info(make_pod("guess", gpus=2)), "a4")
    cache.upsert_pod(pod_info(make_pod("real", gpus=2, node="a4")))  # the truth from the API
    st = cache.stats()
    assert st["pods"] == 1 and st["assumed"] == 0 and st["gpus_used"] == 2 and st["conflicts"] == 0


def test_node_change_rebuilds_and_keeps_pods(cache: ClusterCache) -> None:
    cache.upsert_pod(pod_info(make_pod("held", gpus=4, node="a3")))
    cache.upsert_node(Node("a5", 8, "A100", 96000, 512000, "vc-a", "sw-1", "r1"))
    st = cache.state()
    assert st is not None and "a5" in st.index
    assert int(st.free_gpus[st.index["a3"]]) == 0
    cache.delete_node("a5")
    assert "a5" not in cache.state().index  # type: ignore[union-attr]


def test_restart_rebuilds_from_list(names: list[str]) -> None:
    """A fresh cache fed the listed bound pods does not hand their GPUs out again."""
    from .conftest import small_nodes

    fresh = ClusterCache()
    fresh.replace_nodes(small_nodes())
    fresh.replace_pods([pod_info(make_pod("old", gpus=2, node="a4"))])
    svc = ExtenderService(fresh)
    pod = make_pod("new", gpus=2, labels={"qosmos.io/vc": "vc-a"}, annotations={"qosmos.io/gpu-models": "T4"})
    assert svc.filter({"Pod": pod, "NodeNames": names})["NodeNames"] == []


def test_ready_after_initial_lists() -> None:
    c = ClusterCache()
    assert not c.ready
    c.replace_nodes([Node("n", 1)])
    assert not c.ready
    c.replace_pods([])
    assert c.ready


def test_assumed_where_it_landed_keeps_state(cache: ClusterCache) -> None:
    pod = pod_info(make_pod("g", gpus=2))
    assert cache.assume(pod, "a4")
    gen = cache.generation
    cache.upsert_pod(pod_info(make_pod("g", gpus=2, node="a4")))
    assert cache.generation == gen  # same GPUs, nothing to recompute
    assert cache.stats()["assumed"] == 0 and cache.stats()["pods"] == 1 and cache.stats()["gpus_used"] == 2


def test_assumed_elsewhere_moves_the_gpus(cache: ClusterCache) -> None:
    assert cache.assume(pod_info(make_pod("m", gpus=2)), "a4")
    cache.upsert_pod(pod_info(make_pod("m", gpus=2, node="b3")))
    st = cache.state()
    assert st is not None
    assert int(st.free_gpus[st.index["a4"]]) == 2 and int(st.free_gpus[st.index["b3"]]) == 2
