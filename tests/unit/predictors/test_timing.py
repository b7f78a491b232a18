"""Warm-up, window statistics and environment metadata of `qosmos profile run`, without torch."""

from __future__ import annotations

import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.predictors import timing


def test_warm_up_ends_when_the_step_time_is_stable() -> None:
    # cuDNN autotuning and allocation: slow first steps, then steady at 0.1 s (within 1 %)
    times = iter([2.0, 0.9, 0.5, 0.2, 0.101, 0.1, 0.1, 0.099, 0.1, 0.1, 0.1, 0.1])
    steps, stable = timing.warm_up(lambda: next(times), min_steps=3, max_steps=50, k=5, threshold=0.05)
    assert (steps, stable) == (9, True)  # steps 5..9 are 0.101, 0.1, 0.1, 0.099, 0.1: stable


def test_warm_up_is_capped_and_runs_its_minimum() -> None:
    alternating = iter([0.1, 0.2] * 50)
    assert timing.warm_up(lambda: next(alternating), min_steps=3, max_steps=20) == (20, False)
    steady = iter([0.1] * 50)
    assert timing.warm_up(lambda: next(steady), min_steps=12, max_steps=20, k=5) == (12, True)
    with pytest.raises(InvalidInput):
        timing.warm_up(lambda: 0.1, min_steps=5, max_steps=2)


def test_is_stable_looks_at_the_last_k_only() -> None:
    assert timing.is_stable([9.0, 1.0, 1.0, 1.02], k=3, threshold=0.05)
    assert not timing.is_stable([1.0, 1.0, 1.2], k=3, threshold=0.05)
    assert not timing.is_stable([1.0, 1.0], k=3)  # too few steps yet


def test_window_stats_rate_is_the_lower_quartile_step_and_spread_the_windows() -> None:
    # batch 32, three windows of four steps; the third window is a slow stretch of the host
    steps = [[0.010, 0.011, 0.010, 0.012], [0.010, 0.010, 0.011, 0.010], [0.020, 0.018, 0.022, 0.020]]
    st = timing.window_stats(32, steps)
    assert st.rates == pytest.approx((32 * 4 / 0.043, 32 * 4 / 0.041, 32 * 4 / 0.080))
    assert st.rate == pytest.approx(32 / 0.010)  # the lower quartile of the 12 steps, not a window's mean
    assert st.spread_pct == pytest.approx(100.0 * (st.rates[1] - st.rates[2]) / st.rates[0])
    assert st.windows == 3
    # the median of the window rates would have been the first window's (32 * 4 / 0.043 = 2977/s)
    assert st.rate > 1.05 * sorted(st.rates)[1]


def test_window_stats_is_steady_where_the_median_of_windows_is_not() -> None:
    # the same launch-bound size in two stretches of a run: 5 ms steps, with 1 window of 5 (first)
    # or 3 of 5 (second) slowed to 7.5 ms by the host: the windows' median moves 50 %, the quartile not
    fast, slow = [0.005] * 40, [0.0075] * 40
    first = timing.window_stats(64, [slow, fast, fast, fast, fast])
    second = timing.window_stats(64, [slow, slow, fast, slow, fast])
    assert first.rate == second.rate == pytest.approx(64 / 0.005)
    assert sorted(second.rates)[2] == pytest.approx(sorted(first.rates)[2] / 1.5)


def test_window_stats_refuses_empty_or_non_positive_windows() -> None:
    for bad in ([], [[]], [[0.01, 0.0]], [[0.01], [-1.0]]):
        with pytest.raises(InvalidInput, match="window_steps"):
            timing.window_stats(32, bad)
    with pytest.raises(InvalidInput, match="batch"):
        timing.window_stats(0, [[0.01]])


def test_cpu_lists_both_ways() -> None:
    assert timing.cpu_list([8]) == "8"
    assert timing.cpu_list({3, 0, 1, 2, 8, 10, 11}) == "0-3,8,10-11"
    assert timing.parse_cpu_list("0-3,8, 10-11") == {0, 1, 2, 3, 8, 10, 11}
    assert timing.parse_cpu_list(timing.cpu_list(range(16))) == set(range(16))
    for bad in ("", "a", "3-1", "-2", "1,,2"):
        with pytest.raises(InvalidInput, match="cpus"):
            timing.parse_cpu_list(bad)
    with pytest.raises(InvalidInput, match="cpus"):
        timing.cpu_list([])


def test_cpu_share_splits_in_cpu_order_as_evenly_as_it_goes() -> None:
    cpus = {8, 0, 1, 2, 3, 9, 10}  # 0-3,8-10
    shares = [timing.cpu_share(cpus, i, 3) for i in range(3)]
    assert shares == [{0, 1, 2}, {3, 8}, {9, 10}]  # the first takes the remainder
    assert set().union(*shares) == cpus
    assert [timing.cpu_share({4, 5}, i, 2) for i in range(2)] == [{4}, {5}]
    with pytest.raises(InvalidInput, match="one CPU per process, 3"):
        timing.cpu_share({0, 1}, 0, 3)
    with pytest.raises(InvalidInput, match="index"):
        timing.cpu_share({0, 1}, 2, 2)


def test_process_world_reads_torchrun_and_env_init_variables() -> None:
    assert timing.process_world({}) is None
    assert timing.process_world({"PATH": "/bin", "RANK": " "}) is None  # blank counts as unset
    torchrun = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}
    world = timing.process_world(torchrun)
    assert world == timing.World(rank=5, size=8, local_rank=1, local_size=4) and world.nodes == 2
    # a DLJob's pods are told RANK and WORLD_SIZE only: one process per node
    pods = timing.process_world({"RANK": "2", "WORLD_SIZE": "3"})
    assert pods == timing.World(rank=2, size=3) and pods.nodes == 3
    assert timing.process_world({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}) is None


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"RANK": "0"}, "WORLD_SIZE"),
        ({"WORLD_SIZE": "2"}, "RANK"),
        ({"LOCAL_RANK": "0"}, "LOCAL_RANK"),
        ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK"),
        ({"RANK": "0", "WORLD_SIZE": "0"}, "RANK"),
        ({"RANK": "0", "WORLD_SIZE": "6", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4"}, "LOCAL_RANK"),
        ({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"}, "LOCAL_RANK"),
    ],
)
def test_process_world_names_what_is_inconsistent(env: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidInput, match=named):
        timing.process_world(env)


def test_parse_nvidia_smi() -> None:
    out = "NVIDIA H200, 143771, 570.124.06\nNVIDIA H200, 143771, 570.124.06\n"
    assert timing.parse_nvidia_smi(out) == {
        "device": "NVIDIA H200",
        "device_memory_mib": "143771",
        "driver": "570.124.06",
    }
    with pytest.raises(InvalidInput, match="memory"):
        timing.parse_nvidia_smi("NVIDIA H200, [N/A], 570\n")
    with pytest.raises(InvalidInput, match="no GPU"):
        timing.parse_nvidia_smi("\n")


def test_parse_precision() -> None:
    assert [timing.parse_precision(p) for p in ("fp32", "TF32", " bf16", "fp16")] == ["fp32", "tf32", "bf16", "fp16"]
    with pytest.raises(InvalidInput, match="precision"):
        timing.parse_precision("int8")


def test_common_environment() -> None:
    envs = [
        {"device": "NVIDIA H200", "torch": "2.11.0", "precision": "bf16", "measured_at": "2026-01-02T10:00:00Z"},
        {"device": "NVIDIA H200", "torch": "2.11.0", "precision": "bf16", "measured_at": "2026-01-02T10:05:00Z"},
        {"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "precision": "bf16", "measured_at": ""},
    ]
    env = dict(timing.common_environment(envs))
    assert env == {
        "device": "NVIDIA H100 80GB HBM3 | NVIDIA H200",
        "torch": "2.11.0",
        "precision": "bf16",
        "measured_at": "2026-01-02T10:00:00Z .. 2026-01-02T10:05:00Z",
    }
    assert timing.common_environment([{}]) == ()


def test_window_rounds_interleave_and_keep_the_collector_off() -> None:
    """One window of every measurement per round, in order, with the garbage collector off inside."""
    import gc

    calls: list[tuple[str, bool]] = []

    def window(name: str, seconds: float):  # type: ignore[no-untyped-def]
        def run() -> float:
            calls.append((name, gc.isenabled()))
            return seconds

        return run

    assert gc.isenabled()
    times = timing.window_rounds([window("a", 1.0), window("b", 2.0), window("c", 3.0)], 3)
    assert [n for n, _ in calls] == ["a", "b", "c"] * 3  # rounds, not one batch size after another
    assert not any(on for _, on in calls)
    assert gc.isenabled()
    assert times == [[1.0] * 3, [2.0] * 3, [3.0] * 3]


def test_window_rounds_restore_the_collector_on_error_and_refuse_no_rounds() -> None:
    import gc

    def broken() -> float:
        raise RuntimeError("CUDA error")

    with pytest.raises(RuntimeError):
        timing.window_rounds([broken], 2)
    assert gc.isenabled()
    gc.disable()
    try:  # a caller that had it off keeps it off
        timing.window_rounds([lambda: 1.0], 1)
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(InvalidInput):
        timing.window_rounds([lambda: 1.0], 0)
