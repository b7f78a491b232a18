"""Fixtures and helpers for the extender's integration tests (imported by test_extender*.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from qosmos.extender.bench import start_extender_process
from qosmos.extender.cache import ClusterCache, node_from_object, pod_info
from qosmos.extender.schedconfig import ExtenderClientTLS, qosmos_scheduler_config
from qosmos.testing.controlplane import ControlPlane, free_port
from qosmos.testing.fakenodes import gpu_pod_manifest

SCHEDULER = "qosmos-scheduler"
TLS_SCHEDULER = "qosmos-scheduler-tls"


@dataclass(frozen=True)
class PKI:
    """A CA, the extender's server certificate (127.0.0.1) and kube-scheduler's client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    @classmethod
    def write(cls, directory: Path) -> PKI:
        from cryptography.hazmat.primitives import serialization
        from qosmos.testing.controlplane import _PKI

        pki = _PKI()
        server = pki.issue("qosmos-extender", dns=["localhost"], ips=["127.0.0.1"])
        client_ = pki.issue("kube-scheduler")
        files = {
            "ca": pki.ca_cert.public_bytes(serialization.Encoding.PEM),
            "server_cert": server[0],
            "server_key": server[1],
            "client_cert": client_[0],
            "client_key": client_[1],
        }
        for name, data in files.items():
            (directory / f"{name}.pem").write_bytes(data)
        return cls(**{name: directory / f"{name}.pem" for name in files})

    def client_context(self, with_cert: bool = True) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        if with_cert:
            ctx.load_cert_chain(str(self.client_cert), str(self.client_key))
        return ctx

    def scheduler_tls(self) -> ExtenderClientTLS:
        return ExtenderClientTLS(str(self.client_cert), str(self.client_key), str(self.ca))

    def serve_args(self) -> list[str]:
        return [
            "--tls-cert-file",
            str(self.server_cert),
            "--tls-key-file",
            str(self.server_key),
            "--tls-client-ca-file",
            str(self.ca),
        ]


class ExtenderProcess:
    """``qosmos extender serve`` against the control plane, restartable on the same port;
    over HTTPS with client certificates when given a PKI, else plaintext on loopback."""

    def __init__(self, cp: ControlPlane, log_dir: Path, pki: PKI | None = None) -> None:
        self.cp = cp
        self.port = free_port()
        self.log = log_dir / "extender.log"
        self.pki = pki
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.pki else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> None:
        extra = self.pki.serve_args() if self.pki else []
        self.proc = start_extender_process(self.cp.kubeconfig_path, self.log, self.port, grpc_port=-1, extra_args=extra)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"extender exited {self.proc.returncode}; log:\n{self.log_tail()}")
            try:
                if self.get("readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"extender not ready; log:\n{self.log_tail()}")

    def kill(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            self.proc = None

    def terminate(self, timeout: float = 20) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout)
        self.proc = None
        return rc

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "<no log>"

    def _open(self, req: urllib.request.Request) -> tuple[int, bytes]:
        ctx = self.pki.client_context() if self.pki else None
        try:
            with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def get(self, path: str) -> tuple[int, bytes]:
        return self._open(urllib.request.Request(f"{self.url}/{path}"))

    def post(self, verb: str, body: Any) -> tuple[int, Any]:
        status, data = self._open(urllib.request.Request(f"{self.url}/{verb}", data=orjson.dumps(body), method="POST"))
        return status, orjson.loads(data)


@pytest.fixture(scope="module")
def extender(
    control_plane: ControlPlane, fake_gpu_nodes: list[dict], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ExtenderProcess]:
    ext = ExtenderProcess(control_plane, tmp_path_factory.mktemp("extender"))
    ext.start()
    yield ext
    ext.kill()


@pytest.fixture(scope="module")
def qosmos_scheduler(control_plane: ControlPlane, extender: ExtenderProcess) -> Iterator[Any]:
    comp = control_plane.start_scheduler(SCHEDULER, qosmos_scheduler_config(extender.url))
    yield comp
    comp.stop()
    control_plane.schedulers.pop(SCHEDULER, None)


@pytest.fixture(scope="module")
def tls_extender(
    control_plane: ControlPlane, fake_gpu_nodes: list[dict], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ExtenderProcess]:
    """A second extender serving HTTPS that accepts only kube-scheduler's client certificate."""
    pki = PKI.write(tmp_path_factory.mktemp("pki"))
    ext = ExtenderProcess(control_plane, tmp_path_factory.mktemp("tls-extender"), pki)
    ext.start()
    yield ext
    ext.kill()


@pytest.fixture(scope="module")
def tls_scheduler(control_plane: ControlPlane, tls_extender: ExtenderProcess) -> Iterator[Any]:
    """kube-scheduler calling ``tls_extender`` over HTTPS with its client certificate (not ignorable)."""
    assert tls_extender.pki is not None
    config = qosmos_scheduler_config(
        tls_extender.url, ignorable=False, scheduler_name=TLS_SCHEDULER, tls=tls_extender.pki.scheduler_tls()
    )
    comp = control_plane.start_scheduler(TLS_SCHEDULER, config)
    yield comp
    comp.stop()
    control_plane.schedulers.pop(TLS_SCHEDULER, None)


def gpu_pod(
    name: str,
    gpus: int,
    annotations: dict[str, str] | None = None,
    node: str | None = None,
    scheduler: str = SCHEDULER,
    cpu: str = "1",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return gpu_pod_manifest(
        name, gpus, scheduler, cpu_milli=int(float(cpu) * 1000), annotations=annotations, labels=labels, node=node
    )


def snapshot_cache(api: Any) -> ClusterCache:
    """A ClusterCache built from a fresh list of nodes and bound pods (what the extender should hold)."""
    from kubernetes import client

    v1 = client.CoreV1Api(api)
    nodes = orjson.loads(v1.list_node(_preload_content=False).data)["items"]
    pods = orjson.loads(
        v1.list_pod_for_all_namespaces(
            field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed", _preload_content=False
        ).data
    )["items"]
    cache = ClusterCache()
    cache.replace_nodes(node_from_object(n) for n in nodes)
    cache.replace_pods(pod_info(p) for p in pods)
    return cache
