"""TLS with client-certificate verification for the extender's HTTP and gRPC listeners.

kube-scheduler calls an HTTPS extender with ``enableHTTPS: true`` and ``tlsConfig``
(``certFile``/``keyFile``: its client certificate, ``caFile``: the CA that signed the
extender's certificate). The extender presents ``cert_file``/``key_file`` and accepts only
clients whose certificate chains to ``client_ca_file``.
"""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qosmos.extender.core.errors import InvalidInput


def _read(field: str, path: str) -> bytes:
    p = Path(path).expanduser()
    try:
        data = p.read_bytes()
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        raise InvalidInput(field, path, f"cannot read it ({exc.strerror or type(exc).__name__})") from None
    if b"-----BEGIN " not in data:
        raise InvalidInput(field, path, "not a PEM file")
    return data


@dataclass(frozen=True, slots=True)
class TLSFiles:
    """PEM files: the server's certificate and key, and the CA that client certificates must chain to."""

    cert_file: str
    key_file: str
    client_ca_file: str

    def read(self) -> tuple[bytes, bytes, bytes]:
        return (
            _read("tls_cert_file", self.cert_file),
            _read("tls_key_file", self.key_file),
            _read("tls_client_ca_file", self.client_ca_file),
        )

    def server_context(self) -> ssl.SSLContext:
        """An SSLContext for the HTTP server that requires a verified client certificate."""
        self.read()  # clear errors naming the file
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        except ssl.SSLError as exc:
            raise InvalidInput("tls_cert_file/tls_key_file", (self.cert_file, self.key_file), str(exc)) from None
        try:
            ctx.load_verify_locations(cafile=self.client_ca_file)
        except ssl.SSLError as exc:
            raise InvalidInput("tls_client_ca_file", self.client_ca_file, str(exc)) from None
        ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def grpc_credentials(self) -> Any:
        import grpc

        cert, key, ca = self.read()
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)


CLIENT_GROUPS = ("scheduler", "metrics", "api")


@dataclass(frozen=True, slots=True)
class ClientPolicy:
    """Which client identities (certificate CNs) may call which routes: TLS authenticates, this
    authorises. ``scheduler``: POST /filter, /prioritize, /bind (kube-scheduler); ``metrics``: GET
    /metrics (Prometheus); ``api``: every gRPC method (Admit, ExplainQueue, Explain, Score, Rank).
    None for a group: any client the CA signed (the behaviour without a policy). /healthz and
    /readyz answer any client that completed the handshake (kubelet probes, load balancers)."""

    scheduler: frozenset[str] | None = None
    metrics: frozenset[str] | None = None
    api: frozenset[str] | None = None

    @classmethod
    def parse(cls, **groups: str | None) -> ClientPolicy:
        """From comma-separated CN lists (``--scheduler-clients a,b``); an empty list is refused."""
        out: dict[str, frozenset[str] | None] = {}
        for group, text in groups.items():
            if group not in CLIENT_GROUPS:
                raise InvalidInput(f"{group}_clients", text, f"unknown client group; expected {CLIENT_GROUPS}")
            if text is None:
                out[group] = None
                continue
            names = frozenset(n.strip() for n in text.split(",") if n.strip())
            if not names:
                raise InvalidInput(
                    f"{group}_clients", text, "names no client; leave it unset to allow any CA-signed one"
                )
            out[group] = names
        return cls(**out)

    def allows(self, group: str, caller: str | None) -> bool:
        """``caller``: the client's CN (None: no certificate, e.g. plaintext on loopback)."""
        allowed: frozenset[str] | None = getattr(self, group)
        return allowed is None or (caller is not None and caller in allowed)

    def open_groups(self) -> list[str]:
        """Groups any CA-signed client may call (logged at start-up: the policy is not configured)."""
        return [g for g in CLIENT_GROUPS if getattr(self, g) is None]


def peer_common_name(cert: dict[str, Any] | None) -> str | None:
    """The subject CN of a peer certificate as ``ssl.SSLSocket.getpeercert()`` returns it."""
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def is_loopback(host: str) -> bool:
    """True for a loopback address or ``localhost``."""
    h = host.strip("[]")
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False
