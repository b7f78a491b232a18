"""The QSSF history: observations kept as rows, replayed into a fresh predictor after a restart."""

from __future__ import annotations

import json
from typing import Any

from qosmos.extender.core.types import Job
from qosmos.operator.durations import KEY, Durations


class ConfigMaps:
    """The two ConfigMap calls Durations makes, held in a dict (the real API is the integration tier's)."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, str], dict[str, str]] = {}

    def read_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        return self.data.get((namespace, name))

    def write_config_map(self, namespace: str, name: str, data: dict[str, str]) -> None:
        self.data[(namespace, name)] = dict(data)


def job(name: str, submit: float, gpus: int = 1) -> Job:
    return Job(f"team/{name}", submit, gpus, user="team", vc="vc-a", name=name, model="ResNet50", batch=64, iters=10)


def test_history_survives_a_restart() -> None:
    store: Any = ConfigMaps()
    first = Durations(store, "ns")
    first.load()
    assert first.predict(job("train-x", 0.0), 0.0) is None  # no history: QSSF orders it last
    first.observe(job("train-a", 0.0), 100.0, 100.0)
    first.observe(job("train-b", 10.0), 300.0, 310.0)
    first.save(0.0)
    rows = json.loads(store.data[("ns", "qosmos-operator-durations")][KEY])
    assert [r["name"] for r in rows] == ["train-a", "train-b"] and rows[1]["duration"] == 300.0
    before = first.predict(job("train-c", 400.0), 400.0)
    assert before is not None and 100.0 <= before <= 300.0
    again = Durations(store, "ns")  # a restarted operator
    again.load()
    assert again.predict(job("train-c", 400.0), 400.0) == before
    assert not again.dirty  # replaying writes nothing back
    assert again.predict(job("train-c", 400.0), 390.0) == before  # a clock stepped back is no error


def test_an_unreadable_history_starts_afresh() -> None:
    store: Any = ConfigMaps()
    store.data[("ns", "qosmos-operator-durations")] = {KEY: "[{broken"}
    d = Durations(store, "ns")
    d.load()
    assert d.rows == [] and d.predict(job("x", 0.0), 0.0) is None


def test_the_eta_run_times_condition_on_the_elapsed_time_and_survive_a_restart() -> None:
    store: Any = ConfigMaps()
    first = Durations(store, "ns")
    first.load()
    assert first.predict_run(job("train-x", 0.0), 0.0, 0.0) is None  # no history: no ETA
    for i, d in enumerate([15.0, 60.0, 15.0, 60.0]):
        first.observe(job(f"train-{i}", 0.0), d, 100.0 + i)
    first.save(0.0)
    qssf = first.predict(job("train-c", 400.0), 400.0)
    thin = first.predict_run(job("train-c", 400.0), 400.0, 0.0)
    assert thin is not None and qssf is not None and thin > 37.5 + 10  # the spread of 4 jobs, not their mean
    assert first.predict_run(job("train-c", 400.0), 400.0, 20.0) == 60.0  # it has outlived the 15 s jobs
    again = Durations(store, "ns")
    again.load()
    assert again.predict_run(job("train-c", 400.0), 400.0, 0.0) == thin
    assert again.predict_run(job("train-c", 400.0), 400.0, 70.0) > 70.0  # never "ends now"


def test_the_history_kept_fits_a_config_map_and_a_refused_write_keeps_the_pass() -> None:
    """Thousands of observations with long names: the newest that fit 1 MiB are saved (a ConfigMap
    over it is refused with 422), a restart replays exactly those, and a failed write does not raise."""
    from qosmos.operator import durations as mod

    store: Any = ConfigMaps()
    d = Durations(store, "ns")
    d.load()
    for i in range(mod.MAX_OBSERVATIONS):
        d.observe(job(f"team-{i:05d}-{'x' * 120}", float(i)), 60.0 + i % 7, float(i) + 60.0)
    d.save(0.0)
    text = store.data[("ns", "qosmos-operator-durations")][KEY]
    assert len(text) <= mod.MAX_BYTES < 1_048_576
    rows = json.loads(text)
    assert 1000 < len(rows) < mod.MAX_OBSERVATIONS and rows[-1]["name"].startswith(
        f"team-{mod.MAX_OBSERVATIONS - 1:05d}"
    )
    assert d.rows == rows  # what a restart replays
    again = Durations(store, "ns")
    again.load()
    assert len(again.rows) == len(rows)

    class Refusing(ConfigMaps):
        def write_config_map(self, namespace: str, name: str, data: dict[str, str]) -> None:
            raise RuntimeError("422 Unprocessable Entity")

    broken = Durations(Refusing(), "ns")
    broken.load()
    broken.observe(job("train-a", 0.0), 100.0, 100.0)
    assert not broken.save(0.0)  # logged, not raised
    assert broken.dirty  # tried again at the next pass
    two = '[{"a":1},{"b":2}]'
    assert mod.newest_that_fit([{"a": 1}, {"b": 2}], len(two)) == (two, 2)
    assert mod.newest_that_fit([{"a": 1}, {"b": 2}], len(two) - 1) == ('[{"b":2}]', 1)  # the newest
    assert mod.newest_that_fit([{"a": 1}], 8) == ("[]", 0)


def test_the_history_is_written_once_per_interval_and_whole_at_a_stop() -> None:
    """While jobs finish every pass would rewrite the whole ConfigMap (up to 1 MB): one write per
    ``save_interval_s`` at most; what the interval holds back goes with the next write or at a stop."""
    from qosmos.operator import metrics

    store: Any = ConfigMaps()
    d = Durations(store, "ns", save_interval_s=30.0)
    d.load()

    def stored() -> list[str]:
        return [r["name"] for r in json.loads(store.data[("ns", "qosmos-operator-durations")][KEY])]

    writes = metrics.HISTORY_WRITES._value.get()
    assert not d.save(0.0)  # nothing observed: nothing written
    d.observe(job("a", 0.0), 10.0, 10.0)
    assert d.save(10.0) and stored() == ["a"]  # the first at once
    d.observe(job("b", 0.0), 15.0, 15.0)
    assert not d.save(15.0) and not d.save(39.9) and stored() == ["a"] and d.dirty  # held back
    d.observe(job("c", 0.0), 30.0, 30.0)
    assert d.save(40.0) and stored() == ["a", "b", "c"]  # 30 s after the last write: both held rows
    assert metrics.HISTORY_WRITES._value.get() - writes == 2
    assert metrics.HISTORY_BYTES._value.get() == len(store.data[("ns", "qosmos-operator-durations")][KEY])
    d.observe(job("d", 0.0), 45.0, 45.0)
    assert not d.save(45.0) and d.save(45.0, force=True) and stored() == ["a", "b", "c", "d"]  # a stop
    assert not d.save(100.0, force=True)  # nothing new: no write, forced or not
    d.observe(job("e", 0.0), 50.0, 50.0)
    assert d.save(20.0) and stored()[-1] == "e"  # the clock stepped back (NTP): not held until it catches up

    class Refusing(ConfigMaps):
        calls = 0

        def write_config_map(self, namespace: str, name: str, data: dict[str, str]) -> None:
            Refusing.calls += 1
            raise RuntimeError("503 Service Unavailable")

    away = Durations(Refusing(), "ns", save_interval_s=30.0)
    away.load()
    away.observe(job("a", 0.0), 10.0, 10.0)
    assert not away.save(10.0) and not away.save(12.0) and Refusing.calls == 1  # an apiserver away: not every pass
    assert not away.save(40.0) and Refusing.calls == 2 and away.dirty
