"""Settings every tier shares."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_user_modeldb(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never read or write the developer's ~/.config/qosmos/models.json: the model database
    (explain, simulate, profile fit, the extender) resolves to a per-test path that does not exist."""
    monkeypatch.setenv("QOSMOS_MODELDB", str(tmp_path_factory.mktemp("db") / "absent.json"))
