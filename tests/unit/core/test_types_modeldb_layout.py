"""Domain-type validation, the model database, and the design card's dependency rules."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.types import Job, Node, PlacementRequest, Platform, QoSClass, Shape
from qosmos.testing.generated import generated_apart

ROOT = Path(__file__).resolve().parents[3]
SHARED = Path(os.environ.get("QOSMOS_SHARED", ROOT.parent / "shared"))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"gpus": -1}, "gpus"),
        ({"batch": -5}, "batch"),
        ({"qos": "vip"}, "qos"),
        ({"kind": "quantum"}, "kind"),
        ({"gpu_milli": 0}, "gpu_milli"),
        ({"gpu_milli": 500, "gpus": 2}, "gpu_milli"),
        ({"kind": "cpu", "gpus": 1}, "gpus"),
        ({"duration": float("nan")}, "duration"),
        ({"submit_time": float("inf")}, "submit_time"),
    ],
)
def test_job_rejects_bad_fields(kwargs: dict, field: str) -> None:
    args = {"id": "j", "submit_time": 0.0, **kwargs}
    with pytest.raises(InvalidInput) as exc:
        Job(**args)
    assert exc.value.field == field
    assert field in str(exc.value)


def test_other_types_validate() -> None:
    with pytest.raises(InvalidInput, match="d_node"):
        Shape(0, 1)
    with pytest.raises(InvalidInput, match="nodes"):
        Platform(0, 4)
    with pytest.raises(InvalidInput, match="gpus"):
        Node("n", -1)
    with pytest.raises(InvalidInput, match="shape"):
        PlacementRequest(3, shape=Shape(2, 2))
    assert QoSClass.parse("Prior") is QoSClass.PRIOR and QoSClass.parse(0) is QoSClass.URGENT


def test_modeldb_lookup_exact_alias_similar_unknown() -> None:
    db = ModelDB.builtin()
    assert db.lookup("resnet-50").how == "exact"
    for model in ("AlexNet", "GoogleNet", "Inception-v3", "Seq2seq", "Regularized LSTM"):
        assert db.lookup(model).how in ("alias", "exact"), model
    assert db.lookup("ResNet-18x").matched == "ResNet18"
    with pytest.raises(InvalidInput) as exc:
        db.lookup("zzzz-unknown")
    assert exc.value.field == "model"


def test_builtin_profiles_match_a_fresh_fit_of_the_lucid_data() -> None:
    """extender/core/profiles_builtin.py is generated; this fails when it is stale."""
    from qosmos.predictors.genie_profiles import fit_lucid, render_builtin_module

    lucid = SHARED / "data" / "lucid-profiles" / "single_gpu_throughput.csv"
    if not lucid.exists():
        pytest.skip(f"real Lucid profiles not found at {lucid}")
    committed = (ROOT / "extender" / "core" / "profiles_builtin.py").read_text()
    assert generated_apart(committed, render_builtin_module(fit_lucid(lucid))) == []


CORE_ALLOWED = {"numpy", "qosmos", "__future__"}
STDLIB_BANNED = {"socket", "http", "urllib", "subprocess", "time", "datetime", "os", "pathlib", "io", "open"}


def test_core_imports_only_stdlib_numpy_and_itself() -> None:
    """DESIGN.md dependency rules: no kubernetes, kopf, grpc, HTTP, files or clocks in the core."""
    import sys

    for path in (ROOT / "extender" / "core").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module.split(".")[0]]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
                pytest.fail(f"{path.name} opens a file")
            for name in names:
                assert name not in STDLIB_BANNED, f"{path.name} imports {name}"
                assert name in CORE_ALLOWED or name in sys.stdlib_module_names, f"{path.name} imports {name}"
        if path.name != "__init__.py":
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("qosmos."):
                    assert node.module.startswith("qosmos.extender.core"), f"{path.name} imports {node.module}"


def test_no_bare_operator_package_is_installed() -> None:
    import operator

    assert operator.__file__ is not None and "site-packages" not in operator.__file__
    assert Path(operator.__file__).parent != ROOT / "operator"
    import qosmos.operator

    assert Path(qosmos.operator.__file__).resolve().parent == (ROOT / "operator").resolve()


class _Growing:
    """Predicts each job the number of finishes it has observed (None before any)."""

    name = "growing"

    def __init__(self) -> None:
        self.finished = 0
        self.asked: list[str] = []

    def predict(self, job: Job, now: float) -> float | None:
        self.asked.append(job.id)
        return float(self.finished) if self.finished else None

    def observe(self, job: Job, duration: float, end: float) -> None:
        self.finished += 1


def test_a_prediction_is_made_once_and_kept_a_job_without_one_is_asked_again() -> None:
    from qosmos.extender.core.types import SubmissionPredictions

    pred = _Growing()
    preds = SubmissionPredictions(pred)
    a, b = Job("a", 0.0, 1), Job("b", 0.0, 1)
    assert preds.predict(a, 0.0) is None  # no history: nothing yet, asked again later
    pred.observe(Job("x", 0.0, 1), 10.0, 1.0)
    assert preds.predict(a, 2.0) == 1.0
    pred.observe(Job("y", 0.0, 1), 10.0, 3.0)
    assert preds.predict(a, 4.0) == 1.0  # kept: what it was ranked by from then on
    assert preds.predict(b, 4.0) == 2.0
    assert pred.asked == ["a", "a", "b"]
    # a key other than the id (a DLJob's uid): a re-created job of the same name is predicted anew
    assert preds.predict(a, 5.0, key="uid-2") == 2.0
    preds.seed("uid-3", 7.0)  # read back from a status after a restart
    assert preds.predict(a, 5.0, key="uid-3") == 7.0
    preds.retain({"a", "uid-3"})
    assert set(preds.known) == {"a", "uid-3"}
    preds.forget("a")
    assert preds.predict(a, 6.0) == 2.0
