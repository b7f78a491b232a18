"""The reconcile pass's small rules: conditions, what counts as a change, the carry comparison."""

from __future__ import annotations

import dataclasses
import json

from qosmos.extender.core.types import Job
from qosmos.operator.reconcile import _copy_job, _same_carry, _words, condition


def test_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    first = condition("False", "Head", "needs 8 GPUs", 100.0, None)
    assert first["lastTransitionTime"] == "1970-01-01T00:01:40Z"
    again = condition("False", "NoFit", "other words", 200.0, [first])
    assert again["lastTransitionTime"] == first["lastTransitionTime"]  # still not admitted
    admitted = condition("True", "Admitted", "admitted", 300.0, [again])
    assert admitted["lastTransitionTime"] == "1970-01-01T00:05:00Z"


def test_words_masks_counts_but_not_names() -> None:
    a = "needs 1 node(s) × 4 GPUs of V100M32 in vc-a; 0 GPUs free in vc-a; behind ns/r-010; waiting allowance -41 s"
    b = "needs 1 node(s) × 4 GPUs of V100M32 in vc-a; 8 GPUs free in vc-a; behind ns/r-010; waiting allowance -52 s"
    c = "needs 1 node(s) × 4 GPUs of V100M32 in vc-a; 8 GPUs free in vc-a; behind ns/r-011; waiting allowance -52 s"
    assert _words(a) == _words(b)  # only numbers drifted
    assert _words(b) != _words(c)  # another job blocks it


def test_carry_comparison_ignores_the_projected_start_only() -> None:
    def carry(start: float | None, latest: float) -> str:
        res = {"job": "ns/h", "start": start, "latest": latest, "grants": None, "backfilled": []}
        return json.dumps({"maxQueueLen": 3, "reservation": res})

    assert _same_carry(carry(100.0, 150.0), carry(101.0, 150.0))
    assert not _same_carry(carry(100.0, 150.0), carry(100.0, 151.0))
    assert not _same_carry(None, carry(100.0, 150.0))
    assert not _same_carry("{broken", carry(100.0, 150.0))


def test_the_plans_job_copy_has_every_field_and_is_its_own() -> None:
    """The plan copies each DLJob's Job (compiled from the dataclass's fields): a field it missed
    would read as unset in every decision."""
    job = Job("ns/a", 12.5)
    marks = {f.name: object() for f in dataclasses.fields(Job)}  # a value of its own in every field
    for name, mark in marks.items():
        setattr(job, name, mark)
    copy = _copy_job(job)
    assert copy is not job and all(getattr(copy, name) is mark for name, mark in marks.items())
    copy.predicted_duration = 1.0
    assert job.predicted_duration is marks["predicted_duration"]
