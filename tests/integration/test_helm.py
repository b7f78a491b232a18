"""The chart's rendered manifests against a real apiserver: ``kubectl apply --dry-run=server`` runs
every object through decoding, defaulting, OpenAPI and CEL validation and admission (RBAC
escalation checks included) without keeping any of it. The e2e tier installs the chart for real."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from qosmos.testing.controlplane import ControlPlane
from qosmos.testing.skips import helm_binary

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "qosmos"
NAMESPACE = "qosmos-dry-run"
# API groups the test control plane does not serve (cert-manager, Prometheus Operator): their objects
# are checked by the unit tests' rendering only.
NOT_SERVED = {"cert-manager.io", "monitoring.coreos.com"}


def _render(values: dict[str, Any], tmp: Path) -> list[dict[str, Any]]:
    f = tmp / "values.yaml"
    f.write_text(yaml.safe_dump(values))
    out = subprocess.run(
        [
            helm_binary(),
            "template",
            "qs",
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--kube-version",
            "1.34.4",
            "-f",
            str(f),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.fixture(scope="module")
def namespaces(control_plane: ControlPlane) -> Any:
    for ns in (NAMESPACE, "ml-history"):
        control_plane.kubectl("create", "namespace", ns, check=False)
    yield
    for ns in (NAMESPACE, "ml-history"):
        control_plane.kubectl("delete", "namespace", ns, "--wait=false", check=False)


@pytest.mark.parametrize(
    "values",
    [
        {},
        {
            "operator": {
                "replicas": 1,
                "peering": {"enabled": False, "installCRD": False},
                "historyNamespace": "ml-history",
            },
            "extender": {"replicas": 2, "grpc": {"enabled": True}, "clients": {"api": ["ml-portal"]}},
            "scheduler": {"replicas": 1, "percentageOfNodesToScore": 0},
            "crds": {"keep": False},
            "modelDB": '{"models": {}}',
            "nodeAgent": {"resctrl": {"enabled": True}, "tc": {"device": "eth0", "linkMbit": 10000}},
            "networkPolicy": {"extenderFrom": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}]},
            "tls": {"mode": "cert-manager"},
            "metrics": {"serviceMonitor": {"enabled": True}, "dashboard": {"enabled": True}},
        },
    ],
    ids=["default", "non-default"],
)
def test_every_rendered_object_passes_server_side_dry_run(
    control_plane: ControlPlane, namespaces: Any, tmp_path: Path, values: dict[str, Any]
) -> None:
    docs = _render(values, tmp_path)
    served = [d for d in docs if d["apiVersion"].split("/")[0] not in NOT_SERVED]
    assert len(served) > 20
    f = tmp_path / "rendered.yaml"
    f.write_text(yaml.safe_dump_all(served))
    res = control_plane.kubectl("apply", "--dry-run=server", "-f", str(f), check=False, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    assert len(lines) == len(served) and all(ln.endswith("(server dry run)") for ln in lines), res.stdout
