"""The QSSF history: observations kept as rows, replayed into a fresh predictor after a restart."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from qosmos.extender.core.types import Job
from qosmos.operator.durations import KEY, Durations


class ConfigMaps:
    """The ConfigMap calls Durations makes, held in a dict (the real API is the integration tier's:
    ``tests/integration/test_crds.py`` runs ``Kube.update_config_map`` against the apiserver)."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, str], dict[str, str]] = {}
        self.versions: dict[tuple[str, str], int] = {}

    def read_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        return self.data.get((namespace, name))

    def write_config_map(self, namespace: str, name: str, data: dict[str, str]) -> None:
        self.data[(namespace, name)] = dict(data)
        self.versions[(namespace, name)] = self.versions.get((namespace, name), 0) + 1

    def update_config_map(
        self, namespace: str, name: str, update: Callable[[dict[str, str] | None], dict[str, str]]
    ) -> dict[str, str]:
        """As ``Kube.update_config_map``: a write between the read and the write makes it read again."""
        for _ in range(5):
            version = self.versions.get((namespace, name))
            data = update(self.read_config_map(namespace, name))
            if self.versions.get((namespace, name)) == version:
                self.write_config_map(namespace, name, data)
                return data
        raise RuntimeError("409 Conflict")


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


def replicas(store: Any) -> tuple[Durations, Durations]:
    """Two peering replicas, both active (each has loaded the history)."""
    a, b = Durations(store, "ns"), Durations(store, "ns")
    a.load()
    b.load()
    return a, b


def names(store: Any) -> list[str]:
    return [r["name"] for r in json.loads(store.data[("ns", "qosmos-operator-durations")][KEY])]


def test_a_replica_back_from_standby_replays_what_the_other_wrote() -> None:
    """Two peering replicas share the ConfigMap: the one that stood by and is active again reads the
    rows the other added meanwhile, instead of writing its own older copy over them."""
    store: Any = ConfigMaps()
    a, b = Durations(store, "ns"), Durations(store, "ns")
    a.load()
    a.observe(job("train-a", 0.0), 100.0, 100.0)
    a.stand_by(110.0)  # held back by nothing: written at the stand-by
    assert names(store) == ["train-a"] and not a.loaded and a.rows == []
    a.stand_by(111.0)  # each pass standing by: no read, no write
    assert not a.loaded
    b.load()
    b.observe(job("train-b", 0.0), 900.0, 1000.0)
    assert b.save(1000.0) and names(store) == ["train-a", "train-b"]
    b.stand_by(1001.0)
    a.load()  # active again (the pass loads first)
    assert [r["name"] for r in a.rows] == ["train-a", "train-b"]
    assert b.predict(job("train-c", 2000.0), 2000.0) is None  # standing by, b holds no history
    fresh = Durations(store, "ns")
    fresh.load()
    assert a.predict(job("train-c", 2000.0), 2000.0) == fresh.predict(job("train-c", 2000.0), 2000.0) > 100.0
    a.observe(job("train-d", 0.0), 50.0, 2000.0)
    assert a.save(2000.0) and names(store) == ["train-a", "train-b", "train-d"]


def test_rows_a_refused_write_held_are_merged_not_lost_nor_written_over() -> None:
    store: Any = ConfigMaps()

    class Flaky(ConfigMaps):
        refuse = True

        def read_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
            if self.refuse:
                raise RuntimeError("503 Service Unavailable")
            return store.read_config_map(namespace, name)

        def write_config_map(self, namespace: str, name: str, data: dict[str, str]) -> None:
            if self.refuse:
                raise RuntimeError("503 Service Unavailable")
            store.write_config_map(namespace, name, data)

    flaky: Any = Flaky()
    flaky.refuse = False
    a, b = Durations(flaky, "ns", save_interval_s=30.0), Durations(store, "ns")
    a.load()
    a.observe(job("train-a", 0.0), 100.0, 100.0)
    assert a.save(100.0)
    a.observe(job("train-x", 0.0), 40.0, 150.0)
    flaky.refuse = True
    a.stand_by(150.0)  # the write is refused: train-x stays with this replica only
    assert not a.loaded and [r["name"] for r in a.unsaved] == ["train-x"]
    a.stand_by(170.0, force=False)  # standing by: tried again after the interval, not every pass
    b.load()
    b.observe(job("train-b", 0.0), 80.0, 160.0)
    assert b.save(160.0) and names(store) == ["train-a", "train-b"]
    flaky.refuse = False
    a.stand_by(175.0)  # still inside the interval of the refused write
    assert names(store) == ["train-a", "train-b"] and not a.save(175.0, force=True)  # never its forgotten copy
    a.stand_by(181.0)  # merged into what the ConfigMap holds now, in the order they ended
    assert names(store) == ["train-a", "train-x", "train-b"] and a.unsaved == [] and not a.loaded
    store.data.clear()  # nothing is held now: a stop writes nothing
    a.stand_by(200.0, force=True)
    assert store.data == {}


def test_a_half_readable_history_is_not_half_replayed() -> None:
    store: Any = ConfigMaps()
    from qosmos.operator.durations import _row

    good = _row(job("a", 0.0), 100.0, 100.0)
    negative = _row(job("b", 0.0), -5.0, 150.0)  # readable, but no predictor takes it
    for bad in ({"id": "team/b", "end": 150.0}, negative):
        store.data[("ns", "qosmos-operator-durations")] = {KEY: json.dumps([good, bad])}
        d = Durations(store, "ns")
        d.load()
        assert d.rows == [] and d.predict(job("x", 200.0), 200.0) is None
    store.data[("ns", "qosmos-operator-durations")] = {KEY: json.dumps([good])}
    again = Durations(store, "ns")
    again.load()
    assert again.predict(job("x", 200.0), 200.0) == 100.0  # the good row alone is readable


def test_two_replicas_active_at_once_write_each_others_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf's peering is not leader election: a replica paused past its keep-alive runs passes again
    beside the one that took over. Each write takes in the rows the other wrote, each row once."""
    from qosmos.operator import durations as mod

    store: Any = ConfigMaps()
    a, b = replicas(store)
    a.observe(job("train-a", 0.0), 100.0, 100.0)
    b.observe(job("train-b", 0.0), 200.0, 200.0)
    assert a.save(200.0) and b.save(200.0) and names(store) == ["train-a", "train-b"]
    assert [r["name"] for r in b.rows] == ["train-a", "train-b"]
    a.observe(job("train-c", 0.0), 300.0, 300.0)
    assert a.save(300.0) and names(store) == ["train-a", "train-b", "train-c"]
    assert not b.save(301.0, force=True)  # nothing new here: no read, no write
    b.observe(job("train-d", 0.0), 400.0, 400.0)
    assert b.save(400.0) and names(store) == ["train-a", "train-b", "train-c", "train-d"]
    a.observe(job("train-e", 0.0), 500.0, 500.0)
    assert a.save(500.0) and names(store) == ["train-a", "train-b", "train-c", "train-d", "train-e"]
    for d in (a, b):
        d.predict(job("x", 1000.0), 1000.0)
    assert a.predictor.observed == 5 and b.predictor.observed == 4  # type: ignore[attr-defined]

    # the oldest rows, dropped as the history outgrows its limit, are not taken in again from a
    # ConfigMap a peer wrote before it dropped them
    monkeypatch.setattr(mod, "MAX_OBSERVATIONS", 3)
    stale = dict(store.data[("ns", "qosmos-operator-durations")])
    a.observe(job("train-f", 0.0), 600.0, 600.0)
    assert [r["name"] for r in a.rows] == ["train-d", "train-e", "train-f"]
    store.data[("ns", "qosmos-operator-durations")] = stale
    assert a.save(600.0) and names(store) == ["train-d", "train-e", "train-f"]
    a.predict(job("x", 1000.0), 1000.0)
    assert a.predictor.observed == 6  # type: ignore[attr-defined]


def test_a_write_whose_answer_was_lost_is_not_written_twice() -> None:
    """The apiserver stored the history but the answer never came: at the replay the rows are found in
    the ConfigMap, so they are neither observed twice nor held as still to write."""
    store: Any = ConfigMaps()

    class Lost(ConfigMaps):
        def read_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
            return store.read_config_map(namespace, name)

        def write_config_map(self, namespace: str, name: str, data: dict[str, str]) -> None:
            store.write_config_map(namespace, name, data)
            raise TimeoutError("read timed out")

    d = Durations(Lost(), "ns")
    d.load()
    d.observe(job("train-a", 0.0), 100.0, 100.0)
    d.stand_by(100.0)
    assert names(store) == ["train-a"] and len(d.unsaved) == 1  # not known to be written
    d.load()  # active again
    assert [r["name"] for r in d.rows] == ["train-a"] and d.unsaved == [] and not d.dirty
    d.predict(job("x", 1000.0), 1000.0)
    assert d.predictor.observed == 1  # type: ignore[attr-defined]


def test_a_peer_write_between_the_read_and_the_write_is_taken_in_not_written_over() -> None:
    """The write is a compare-and-swap: a peer that writes after this replica read the ConfigMap
    makes it read again, so the peer's newest rows stay (each observed here once)."""
    store: Any = ConfigMaps()
    a, b = replicas(store)
    b.observe(job("train-b", 0.0), 200.0, 200.0)
    a.observe(job("train-a", 0.0), 100.0, 100.0)

    class Racing(ConfigMaps):
        def __init__(self) -> None:
            self.data, self.versions = store.data, store.versions  # the same ConfigMap
            self.reads = 0

        def read_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
            self.reads += 1
            data = store.read_config_map(namespace, name)
            if self.reads == 1:
                assert b.save(200.0)  # the peer writes after this replica's read
            return data

    a.kube = racing = Racing()
    assert a.save(200.0) and racing.reads == 2
    assert names(store) == ["train-a", "train-b"] and a.unsaved == [] and not a.dirty
    a.predict(job("x", 1000.0), 1000.0)
    assert a.predictor.observed == 2  # type: ignore[attr-defined]
