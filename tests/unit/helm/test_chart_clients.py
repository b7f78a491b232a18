"""The extender's per-route client identities in the chart (issue 22 §2): the scheduler's and the
metrics client's certificates each reach only their routes; gRPC needs its allowed clients named."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID
from qosmos.testing.skips import helm_binary

from .test_chart import CHART, render, run_helm


@pytest.fixture(scope="module")
def helm() -> str:
    return helm_binary()


FLAGS = ("--scheduler-clients", "--metrics-clients", "--api-clients")


def _extender_args(docs: list[dict[str, Any]]) -> dict[str, str]:
    (dep,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-extender")]
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    return {a: args[i + 1] for i, a in enumerate(args) if a in FLAGS}


def _cns(docs: list[dict[str, Any]]) -> dict[str, str]:
    """The CN of each client certificate the chart generates (tls.mode helm)."""
    out = {}
    for d in docs:
        if d["kind"] == "Secret" and d["metadata"]["name"].endswith(("-scheduler-tls", "-metrics-tls")):
            cert = x509.load_pem_x509_certificate(base64.b64decode(d["data"]["tls.crt"]))
            out[d["metadata"]["name"].rsplit("-", 2)[-2]] = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[
                0
            ].value
    return out


def test_by_default_each_route_answers_the_certificate_the_chart_issues_for_it(helm: str, tmp_path: Path) -> None:
    docs = render(helm, tmp_path)
    args = _extender_args(docs)
    cns = _cns(docs)
    assert args == {"--scheduler-clients": cns["scheduler"], "--metrics-clients": cns["metrics"]}
    assert cns["scheduler"] != cns["metrics"]


def test_grpc_needs_its_clients_named(helm: str, tmp_path: Path) -> None:
    values = {"extender": {"grpc": {"enabled": True, "port": 9090}}}
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump(values))
    proc = run_helm(helm, "template", "qs", str(CHART), "--kube-version", "1.34.4", "-f", str(f))
    assert proc.returncode != 0 and "extender.clients.api" in proc.stderr, proc.stderr
    values["extender"]["clients"] = {"api": ["ml-portal", "ops"], "metrics": []}
    args = _extender_args(render(helm, tmp_path, values))
    assert args["--api-clients"] == "ml-portal,ops" and "--metrics-clients" not in args


@pytest.mark.parametrize("bad", [{"scheduler": []}, {"api": ["a,b"]}, {"other": ["x"]}])
def test_the_schema_refuses_lists_the_extender_would_misread(helm: str, tmp_path: Path, bad: dict[str, Any]) -> None:
    f = tmp_path / "v.yaml"
    f.write_text(yaml.safe_dump({"extender": {"clients": bad}}))
    proc = run_helm(helm, "template", "qs", str(CHART), "--kube-version", "1.34.4", "-f", str(f))
    assert proc.returncode != 0 and "clients" in proc.stderr, proc.stderr


def test_the_alert_rules_read_metrics_the_extender_exports(helm: str, tmp_path: Path) -> None:
    import re

    from prometheus_client import generate_latest
    from qosmos.extender.service import Metrics

    docs = render(helm, tmp_path, {"metrics": {"prometheusRule": {"enabled": True, "labels": {"release": "kps"}}}})
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["metadata"]["labels"]["release"] == "kps"
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(rules) == {"QosmosExtenderDown", "QosmosExtenderErrors", "QosmosExtenderClientRefused"}
    m = Metrics()
    m.decisions.labels("filter", "error")
    m.forbidden.labels("/filter")
    exported = set(re.findall(r"^(\w+?)(?:_total)?(?:\{| )", generate_latest(m.registry).decode(), re.M))
    for alert in ("QosmosExtenderErrors", "QosmosExtenderClientRefused"):
        (name,) = re.findall(r"(qosmos_\w+?)(?:_total)?\{", rules[alert]["expr"])
        assert name in exported, (alert, name)
    (ext,) = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-extender")]
    assert f'service="{ext["metadata"]["name"]}"' in rules["QosmosExtenderDown"]["expr"]
    assert not [d for d in render(helm, tmp_path) if d["kind"] == "PrometheusRule"]
