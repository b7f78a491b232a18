"""Throw-away certificates for the TLS tests: a CA, the extender's server certificate, a
client certificate it signed, another identity it signed, and a client certificate from another CA."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PKIFiles:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    rogue_cert: Path  # signed by another CA
    rogue_key: Path
    metrics_cert: Path  # signed by the same CA, another identity (CN qosmos-metrics): trusted, not the scheduler
    metrics_key: Path


def write_pki(directory: Path, client_cn: str = "kube-scheduler") -> PKIFiles:
    from cryptography.hazmat.primitives import serialization
    from qosmos.testing.controlplane import _PKI

    pki, other = _PKI(), _PKI()
    server_cert, server_key = pki.issue("qosmos-extender", dns=["localhost"], ips=["127.0.0.1"])
    client_cert, client_key = pki.issue(client_cn)
    rogue_cert, rogue_key = other.issue(client_cn)
    metrics_cert, metrics_key = pki.issue("qosmos-metrics")
    files = {
        "ca": pki.ca_cert.public_bytes(serialization.Encoding.PEM),
        "server_cert": server_cert,
        "server_key": server_key,
        "client_cert": client_cert,
        "client_key": client_key,
        "rogue_cert": rogue_cert,
        "rogue_key": rogue_key,
        "metrics_cert": metrics_cert,
        "metrics_key": metrics_key,
    }
    paths = {}
    for name, data in files.items():
        paths[name] = directory / f"{name}.pem"
        paths[name].write_bytes(data)
    return PKIFiles(**paths)
