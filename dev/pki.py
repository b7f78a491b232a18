"""A tiny certificate authority (RSA-2048 CA, EC P-256 leaves) and kubeconfig files for a loopback cluster."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
    from cryptography.x509 import Certificate, GeneralName


def pem_key(key: PrivateKeyTypes) -> bytes:
    """A private key as unencrypted PKCS#8 PEM."""
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def pem_cert(cert: Certificate) -> bytes:
    """A certificate as PEM."""
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


class PKI:
    """A CA issuing EC P-256 certificates valid for ``days`` days.

    The CA's own key is RSA-2048 (kubeadm's default): the apiserver checks the CA's signature on the
    client certificate of every request, and an ECDSA P-256 check there was 7 % of its CPU under
    ``qosmos bench operator`` (pprof); an RSA check costs a fraction of that. Leaf keys stay EC P-256
    (one handshake per connection).
    """

    def __init__(self, name: str = "qosmos-test-ca", days: int = 7) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        from cryptography.x509.oid import NameOID

        self._x509, self._hashes, self._ec, self._oid = x509, hashes, ec, NameOID
        self.days = days
        self.ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = dt.datetime.now(dt.UTC)
        self.ca_cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
            .sign(self.ca_key, hashes.SHA256())
        )

    @property
    def ca_pem(self) -> bytes:
        return pem_cert(self.ca_cert)

    def issue(
        self, cn: str, orgs: Sequence[str] = (), dns: Sequence[str] = (), ips: Sequence[str] = ()
    ) -> tuple[bytes, bytes]:
        """Return (cert PEM, key PEM) for a client (no SANs) or server certificate."""
        x509, oid = self._x509, self._oid
        key = self._ec.generate_private_key(self._ec.SECP256R1())
        attrs = [x509.NameAttribute(oid.ORGANIZATION_NAME, o) for o in orgs]
        attrs.append(x509.NameAttribute(oid.COMMON_NAME, cn))
        now = dt.datetime.now(dt.UTC)
        server = bool(dns or ips)
        usage = x509.ExtendedKeyUsageOID.SERVER_AUTH if server else x509.ExtendedKeyUsageOID.CLIENT_AUTH
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self.ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=self.days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            sans: list[GeneralName] = [x509.DNSName(d) for d in dns]
            sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return pem_cert(b.sign(self.ca_key, self._hashes.SHA256())), pem_key(key)


def kubeconfig(server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str) -> str:
    """A kubeconfig (context ``qosmos``) authenticating with a client certificate."""

    def b64(b: bytes) -> str:
        return base64.b64encode(b).decode()

    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "qosmos", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)}}],
        "contexts": [{"name": "qosmos", "context": {"cluster": "qosmos", "user": user}}],
        "current-context": "qosmos",
    }
    return yaml.safe_dump(cfg, sort_keys=False)


def write_private(path: Path, data: bytes) -> None:
    """Write a key or kubeconfig readable by its owner only."""
    path.write_bytes(data)
    path.chmod(0o600)
