"""Placement algorithms and cluster accounting."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qosmos.extender.core.cluster import FULL, ClusterState
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.placement import PLACERS, get_placer
from qosmos.extender.core.types import Allocation, Node, NodeGrant, PlacementRequest, Shape


def cluster(frees: list[int], cap: int = 8, **kw: object) -> ClusterState:
    """Nodes of ``cap`` GPUs with ``cap - free`` GPUs already taken."""
    state = ClusterState([Node(f"n{i}", cap, cpu_milli=64000, memory_mib=1 << 20, **kw) for i in range(len(frees))])  # type: ignore[arg-type]
    for i, free in enumerate(frees):
        if free < cap:
            state.allocate(Allocation((NodeGrant(i, tuple(range(cap - free))),)))
    return state


def test_consolidate_waits_for_two_idle_nodes_for_16_gpus() -> None:
    c = cluster([8, 7, 8])
    alloc = get_placer("consolidate").place(PlacementRequest(16), c)
    assert alloc is not None and sorted(alloc.nodes) == [0, 2] and alloc.gpus == 16
    c2 = cluster([8, 7, 7])
    assert get_placer("consolidate").place(PlacementRequest(16), c2) is None
    # free-GPU would take fragments instead (AnalySIM §4.3)
    frag = get_placer("free-gpu").place(PlacementRequest(16), c2)
    assert frag is not None and frag.gpus == 16 and len(frag.nodes) == 3


def test_single_node_best_fit_first_fit() -> None:
    c = cluster([6, 2, 3, 8])
    assert get_placer("first-fit").place(PlacementRequest(2), c).nodes == (0,)  # type: ignore[union-attr]
    assert get_placer("best-fit").place(PlacementRequest(2), c).nodes == (1,)  # type: ignore[union-attr]
    assert get_placer("consolidate").place(PlacementRequest(3), c).nodes == (2,)  # type: ignore[union-attr]


def test_free_gpu_uses_fewest_nodes_and_best_fits_the_last() -> None:
    c = cluster([5, 3, 2, 4])
    alloc = get_placer("free-gpu").place(PlacementRequest(7), c)
    assert alloc is not None
    # fewest nodes: 5 + (remaining 2 from the best-fitting node with >= 2 free: node 2)
    assert sorted((g.node, len(g.gpu_ids)) for g in alloc.grants) == [(0, 5), (2, 2)]


def test_shape_realised_on_one_switch_when_possible() -> None:
    nodes = [Node(f"n{i}", 4, switch=f"s{i // 2}") for i in range(6)]
    c = ClusterState(nodes)
    c.allocate(Allocation((NodeGrant(0, (0, 1, 2)),)))  # s0 has one usable node for d_gpn = 2
    alloc = get_placer("cer").place(PlacementRequest(4, shape=Shape(2, 2)), c)
    assert alloc is not None and not alloc.cross_switch
    assert {c.nodes[i].switch for i in alloc.nodes} == {"s1"}
    assert alloc.shape == Shape(2, 2)


def test_vc_and_gpu_model_constraints() -> None:
    nodes = [Node("a", 8, gpu_model="V100", vc="vc1"), Node("b", 8, gpu_model="T4", vc="vc1"), Node("c", 8, vc="vc2")]
    c = ClusterState(nodes)
    for name in PLACERS:
        alloc = get_placer(name).place(PlacementRequest(2, vc="vc1", gpu_models=("T4",)), c)
        assert alloc is not None and alloc.nodes == (1,), name
    req = PlacementRequest(2, vc="vc1", gpu_models=("A100",))
    assert get_placer("best-fit").place(req, c) is None
    assert "no node" in (c.could_ever_fit(req) or "")
    assert c.could_ever_fit(PlacementRequest(4, vc="vc2")) is None
    assert "needs 24 GPUs" in (c.could_ever_fit(PlacementRequest(24, vc="vc1")) or "")


def test_cpu_limits_per_node() -> None:
    nodes = [Node("small", 8, cpu_milli=4000), Node("big", 8, cpu_milli=64000)]
    c = ClusterState(nodes)
    alloc = get_placer("first-fit").place(PlacementRequest(1, cpu_milli=8000), c)
    assert alloc is not None and alloc.nodes == (1,)
    assert alloc.grants[0].cpu_milli == 8000


def test_a_request_whose_cpu_or_memory_share_no_node_holds_can_never_fit() -> None:
    # a node holds g of the request's GPUs only with their share, cpu × g / gpus, of its CPU:
    # small (4 cores) none of a 256-core, 16-GPU request, big (64 cores) 4 of them
    c = ClusterState([Node("small", 8, cpu_milli=4000), Node("big", 8, cpu_milli=64000)])
    req = PlacementRequest(16, cpu_milli=256000)
    assert c.could_ever_fit(req) == "needs 16 GPUs with 256000 milli-CPU; the eligible nodes could hold 4 of them"
    assert c.could_ever_fit(PlacementRequest(8, cpu_milli=64000)) is None  # big alone, all of its CPU
    gang = PlacementRequest(16, cpu_milli=100000, nodes=2)  # the user's 2 x 8: 50 cores a node, big only
    assert c.could_ever_fit(gang) == (
        "only 1 eligible nodes have 8 GPUs with their share of 100000 milli-CPU; placement needs 2"
    )
    assert "with their share of 8 MiB" in (
        ClusterState([Node("n", 8, memory_mib=4)]).could_ever_fit(PlacementRequest(8, memory_mib=8, nodes=1)) or ""
    )
    untracked = ClusterState([Node("n", 8)])  # a node that reports no CPU binds none
    assert untracked.could_ever_fit(PlacementRequest(8, cpu_milli=10**9)) is None
    for name in PLACERS:
        assert get_placer(name).place(req, c) is None and get_placer(name).place(gang, c) is None, name


def test_a_gpu_sharing_request_whose_cpu_no_gpu_node_holds_can_never_fit() -> None:
    # half a GPU with 20 cores: its CPU goes on the node of the GPU it shares; the GPU node has 8 cores
    # (the CPU node's 32 do not help). It waited for ever, blocking its queue (found by a simulator
    # property run: the job never started)
    c = ClusterState([Node("g", 4, cpu_milli=8000), Node("cpu", 0, cpu_milli=32000)])
    req = PlacementRequest(1, gpu_milli=500, cpu_milli=20000)
    assert c.could_ever_fit(req) == (
        "a GPU-sharing request needs 20000 milli-CPU on one node with GPUs; no eligible node has them"
    )
    assert c.could_ever_fit(PlacementRequest(1, gpu_milli=500, cpu_milli=8000)) is None
    assert ClusterState([Node("g", 4)]).could_ever_fit(req) is None  # a node that reports no CPU binds none
    for name in PLACERS:
        assert get_placer(name).place(req, c) is None


@pytest.mark.parametrize("name", ["consolidate", "cer"])
def test_whole_nodes_are_taken_only_with_the_cpu_share_of_all_their_gpus(name: str) -> None:
    # 3 GPUs with 6 cores: 2 cores a GPU. n1 (2 GPUs, 2 cores) holds the share of one of its GPUs, not
    # of both: it was taken whole, and the books refused the allocation ("CPU or memory is not free")
    c = ClusterState([Node("n0", 1), Node("n1", 2, cpu_milli=2000)])
    req = PlacementRequest(3, cpu_milli=6000)
    assert get_placer(name).place(req, c) is None
    assert c.could_ever_fit(req) == "needs 3 GPUs with 6000 milli-CPU; the eligible nodes could hold 2 of them"
    # with a second 2-GPU node that does not count its CPU, n1 gives the one GPU whose share it holds
    c = ClusterState([Node("n1", 2, cpu_milli=2000), Node("n0", 2)])
    alloc = get_placer(name).place(req, c)
    assert alloc is not None and [(g.node, len(g.gpu_ids), g.cpu_milli) for g in alloc.grants] == [
        (0, 1, 2000),
        (1, 2, 4000),
    ]
    c.allocate(alloc)


@pytest.mark.parametrize("name", ["first-fit", "best-fit"])
def test_an_uneven_split_gives_each_node_the_share_of_the_gpus_it_gets(name: str) -> None:
    # 5 GPUs over two 3-GPU nodes: 3 + 2. The first node's share of 64 cores is 3/5 (38.4 cores), not
    # 3/6 of the shape's six GPUs (32): the 32-core node was chosen, and the books refused it
    c = ClusterState([Node("n0", 3, cpu_milli=32000), Node("n1", 3)])
    req = PlacementRequest(5, cpu_milli=64000)
    assert get_placer(name).place(req, c) is None
    c = ClusterState([Node("n0", 3, cpu_milli=32000), Node("n1", 3), Node("n2", 3)])
    alloc = get_placer(name).place(req, c)
    assert alloc is not None and [(g.node, len(g.gpu_ids), g.cpu_milli) for g in alloc.grants] == [
        (1, 3, 38400),
        (2, 2, 25600),
    ]
    c.allocate(alloc)


@pytest.mark.parametrize("name", ["free-gpu", "consolidate"])
def test_a_node_holding_exactly_its_share_is_given_it(name: str) -> None:
    # 11 GPUs with 77 cores: 9 GPUs take 63000 milli-CPU exactly (in floats 77000 × (9/11) =
    # 63000.00000000001, rounded up to 63001: the grant asked more than n0 has, and the books refused it)
    c = ClusterState([Node("n0", 9, cpu_milli=63000), Node("n1", 2, cpu_milli=14000)])
    req = PlacementRequest(11, cpu_milli=77000)
    assert c.could_ever_fit(req) is None
    alloc = get_placer(name).place(req, c)
    assert alloc is not None and sorted((g.node, g.cpu_milli) for g in alloc.grants) == [(0, 63000), (1, 14000)]
    c.allocate(alloc)
    assert c.free_cpu.tolist() == [0, 0]


@settings(max_examples=1500, deadline=None)
@given(
    # nodes: GPUs, milli-CPU and MiB (0: not reported), switch, GPUs already held
    caps=st.lists(
        st.tuples(
            st.integers(0, 8),
            st.sampled_from([0, 2000, 4000, 8000, 12000, 32000]),
            st.sampled_from([0, 1000, 4000]),
            st.sampled_from(["s0", "s1"]),
            st.integers(0, 8),
        ),
        min_size=1,
        max_size=5,
    ),
    gpus=st.integers(1, 20),
    # the last: three containers of 2^62 cores each, as the extender may parse them (past int64)
    cpu=st.sampled_from([0, 1000, 3000, 6000, 10000, 40000, 64000, 3 * 2**62 * 1000]),
    mem=st.sampled_from([0, 500, 3000, 9000]),
    per_node=st.sampled_from([0, 0, 1, 2, 3, 4, 8]),
)
def test_what_can_never_fit_no_placer_places_and_every_placement_is_bookable(
    caps: list[tuple[int, int, int, str, int]], gpus: int, cpu: int, mem: int, per_node: int
) -> None:
    """could_ever_fit's "never" is a promise the pass relies on (an inadmissible job blocks nobody),
    for a request as the pass asks it: its GPUs, or the gang of nodes the user fixed. And what any
    placer returns, on an empty or a partly used cluster, the books take as it is."""

    def cluster() -> ClusterState:
        return ClusterState([Node(f"n{i}", g, cpu_milli=m, memory_mib=mm, switch=sw) for i, (g, m, mm, sw, _) in enumerate(caps)])  # fmt: skip

    empty, used = cluster(), cluster()
    for i, (g, m, _, _, held) in enumerate(caps):
        if min(held, g):
            used.allocate(Allocation((NodeGrant(i, tuple(range(min(held, g))), FULL, min(m, 1000 * held)),)))
    nodes = gpus // per_node if per_node and gpus % per_node == 0 else 0
    req = PlacementRequest(gpus, cpu_milli=cpu, memory_mib=mem, nodes=nodes)
    never = empty.could_ever_fit(req)
    for name in PLACERS:
        for c in (empty, used):
            alloc = get_placer(name).place(req, c)
            assert never is None or alloc is None, (name, never)
            if alloc is not None:  # their share of CPU and memory on every node, the user's gang as fixed
                c.copy().allocate(alloc)
                assert sum(len(g.gpu_ids) for g in alloc.grants) == gpus
                assert sum(g.cpu_milli for g in alloc.grants) >= cpu and sum(g.memory_mib for g in alloc.grants) >= mem
                assert not nodes or sorted(len(g.gpu_ids) for g in alloc.grants) == [gpus // nodes] * nodes, name


def test_gpu_sharing_and_cpu_jobs() -> None:
    c = ClusterState([Node("g", 2, cpu_milli=8000, memory_mib=1000), Node("cpu", 0, cpu_milli=8000, memory_mib=1000)])
    first = get_placer("best-fit").place(PlacementRequest(1, gpu_milli=300), c)
    assert first is not None
    c.allocate(first)
    second = get_placer("best-fit").place(PlacementRequest(1, gpu_milli=500), c)
    assert second is not None and second.grants[0].gpu_ids == first.grants[0].gpu_ids  # packs the shared GPU
    c.allocate(second)
    assert c.free_gpus[0] == 1  # one GPU still wholly free
    cpu_job = get_placer("consolidate").place(PlacementRequest(0, cpu_milli=2000, memory_mib=10), c)
    assert cpu_job is not None and cpu_job.nodes == (1,)  # GPU-less node first (SODA §V-C)


def test_allocation_refuses_double_booking_and_over_release() -> None:
    c = cluster([8])
    alloc = Allocation((NodeGrant(0, (0, 1)),))
    c.allocate(alloc)
    with pytest.raises(InvalidInput):
        c.allocate(alloc)
    c.release(alloc)
    with pytest.raises(InvalidInput):
        c.release(alloc)


def test_unknown_placer_is_invalid_input() -> None:
    with pytest.raises(InvalidInput) as exc:
        get_placer("random")
    assert exc.value.field == "placement"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 8), st.sampled_from(["vc1", "vc2"])), min_size=1, max_size=12),
    st.integers(1, 24),
    st.sampled_from(["vc1", "vc2"]),
    st.sampled_from(sorted(PLACERS)),
)
def test_placement_never_exceeds_free_gpus_or_crosses_vcs(
    layout: list[tuple[int, str]], gpus: int, vc: str, placer: str
) -> None:
    nodes = [Node(f"n{i}", 8, vc=v, switch=f"s{i % 3}") for i, (_, v) in enumerate(layout)]
    c = ClusterState(nodes)
    for i, (used, _) in enumerate(layout):
        if used:
            c.allocate(Allocation((NodeGrant(i, tuple(range(used))),)))
    before = c.free_gpus.copy()
    alloc = get_placer(placer).place(PlacementRequest(gpus, vc=vc), c)
    assert (c.free_gpus == before).all()  # placers never mutate
    if alloc is None:
        return
    assert alloc.gpus == gpus
    for g in alloc.grants:
        assert nodes[g.node].vc == vc
        assert len(g.gpu_ids) <= before[g.node]
    c.allocate(alloc)  # raises if any GPU was not free


def test_the_empty_books_ignore_allocations_and_follow_pools_and_cohorts() -> None:
    c = ClusterState([Node("a0", 4, cpu_milli=8000, vc="a"), Node("b0", 4, vc="b")])
    c.allocate(Allocation((NodeGrant(0, (0, 1, 2), FULL, 6000),)))
    empty = c.copy().emptied()
    assert empty.free_gpus.tolist() == [4, 4] and empty.free_cpu.tolist() == [8000, 0]
    assert (empty.gpu_free_milli[:, :4] == FULL).all() and c.free_gpus.tolist() == [1, 4]
    assert c.emptied() is empty  # made once, shared by copies
    asked: list[int] = []

    def ask(e: ClusterState) -> bool:
        asked.append(1)
        return get_placer("first-fit").place(PlacementRequest(8, vc="a"), e) is not None

    assert c.on_empty("8 in a", ask) is False and c.copy().on_empty("8 in a", ask) is False and len(asked) == 1
    c.share_nodes(["a", "b"])  # a's requests may now use b0 too: what was asked is asked again
    assert c.on_empty("8 in a", ask) is True and len(asked) == 2


@pytest.mark.parametrize("name", PLACERS)
def test_no_placer_places_on_an_unusable_node_even_where_room_is_freed_on_it(name: str) -> None:
    """A node not Ready or down: booked full (``book_free``) and unusable, so a gang released there within
    a pass (a preemption's) leaves room no placer takes; usable again, it counts as a release (FitMemo)."""
    cluster = ClusterState([Node("n0", 4, cpu_milli=32000), Node("n1", 4, cpu_milli=32000)])
    held = Allocation((NodeGrant(0, (0, 1), FULL, 2000, 0),))
    cluster.allocate(held)
    assert cluster.book_free(0) is not None and cluster.free_gpus.tolist() == [0, 4]
    cluster.allocate(Allocation((NodeGrant(1, (0, 1, 2), FULL, 0, 0),)))
    trial = cluster.copy()
    trial.release(held)
    ask = PlacementRequest(gpus=2, cpu_milli=1000)
    assert trial.free_gpus.tolist() == [2, 1] and get_placer(name).place(ask, trial) is None
    assert trial.could_ever_fit(ask) is None  # it may be usable again later
    before = int(cluster.vc_releases.sum())
    cluster.set_usable(0, True)
    assert cluster.unusable is None and int(cluster.vc_releases.sum()) == before + 1
    trial = cluster.copy()
    trial.release(held)
    got = get_placer(name).place(ask, trial)
    assert got is not None and got.nodes == (0,)
