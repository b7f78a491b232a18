"""The production scheduler profile (qosmos.extender.schedconfig), plain and over HTTPS."""

from __future__ import annotations

import pytest
import yaml
from qosmos.extender.schedconfig import ExtenderClientTLS, qosmos_scheduler_config, scheduler_config


def test_qosmos_scheduler_config_shape() -> None:
    cfg = yaml.safe_load(qosmos_scheduler_config("http://127.0.0.1:8888/qosmos", ignorable=False))
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert cfg["leaderElection"] == {"leaderElect": False}
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["qosmos-scheduler"]
    assert cfg["profiles"][0]["percentageOfNodesToScore"] == 20
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == "http://127.0.0.1:8888/qosmos"
    assert ext["ignorable"] is False and ext["nodeCacheCapable"] is True and ext["weight"] == 10
    assert ext["managedResources"] == [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]
    assert ext["enableHTTPS"] is False and "tlsConfig" not in ext
    assert "extenders" not in yaml.safe_load(scheduler_config("plain"))


def test_https_extender_carries_the_schedulers_client_certificate() -> None:
    tls = ExtenderClientTLS("/etc/qosmos/sched.crt", "/etc/qosmos/sched.key", "/etc/qosmos/ca.crt", "qosmos-extender")
    cfg = yaml.safe_load(qosmos_scheduler_config("https://10.0.0.7:8888", tls=tls, kubeconfig="/kc"))
    (ext,) = cfg["extenders"]
    assert ext["enableHTTPS"] is True
    assert ext["tlsConfig"] == {
        "certFile": "/etc/qosmos/sched.crt",
        "keyFile": "/etc/qosmos/sched.key",
        "caFile": "/etc/qosmos/ca.crt",
        "serverName": "qosmos-extender",
    }
    assert cfg["clientConnection"] == {"kubeconfig": "/kc"}
    with pytest.raises(ValueError, match="https"):
        qosmos_scheduler_config("https://10.0.0.7:8888")
    with pytest.raises(ValueError, match="https"):
        qosmos_scheduler_config("http://10.0.0.7:8888", tls=tls)


def test_production_modules_never_import_the_test_control_plane() -> None:
    import subprocess
    import sys

    code = (
        "import sys, qosmos.extender.cli, qosmos.extender.runner, qosmos.extender.grpc_service, "
        "qosmos.extender.schedconfig, qosmos.extender.bench; "
        "print(sorted(m for m in sys.modules if m.startswith('qosmos.testing')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
