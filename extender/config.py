"""Configuration of ``qosmos extender serve``: defaults < YAML file < env ``QOSMOS_EXTENDER_*`` < flags."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.scoring import DEFAULT_PLACER, DEFAULT_SHORTLIST
from qosmos.extender.tls import CLIENT_GROUPS, ClientPolicy, TLSFiles, is_loopback

ENV_PREFIX = "QOSMOS_EXTENDER_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


@dataclass(slots=True)
class ExtenderConfig:
    """Every setting of ``qosmos extender serve``; ``__post_init__`` refuses bad values (InvalidInput)."""

    http_host: str = "127.0.0.1"
    http_port: int = 8888
    grpc_host: str = "127.0.0.1"
    grpc_port: int = 9090  # 0 picks a free port; -1 disables gRPC
    kubeconfig: str | None = None  # None: in-cluster, else KUBECONFIG / ~/.kube/config
    node_list: str | None = None  # an openb node list: serve a static node set, no cluster
    db: str | None = None  # model database file (default: $QOSMOS_MODELDB, ~/.config/qosmos/models.json)
    placer: str = DEFAULT_PLACER
    shortlist: int = DEFAULT_SHORTLIST  # /filter keeps the top tier of at most this many feasible nodes; 0 keeps all
    assume_ttl_s: float = 30.0
    max_assumed_gpus: int = 1024  # GPUs one caller may hold in the assumed ledger; 0: no cap
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_client_ca_file: str | None = None
    insecure: bool = False  # plaintext without client authentication, loopback addresses only
    # Client certificate CNs allowed per route group (comma-separated; unset: any client the CA signed)
    scheduler_clients: str | None = None  # POST /filter, /prioritize, /bind
    metrics_clients: str | None = None  # GET /metrics
    api_clients: str | None = None  # every gRPC method
    request_timeout_s: float = 5.0  # server-side deadline of one gRPC call
    max_body_bytes: int = 8 * 1024 * 1024
    shutdown_grace_s: float = 10.0
    watch_timeout_s: int = 60
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        from qosmos.extender.core.placement import PLACERS

        def need(ok: bool, field: str, reason: str) -> None:
            if not ok:
                raise InvalidInput(field, getattr(self, field), reason)

        need(0 <= self.http_port <= 65535, "http_port", "must be a port in [0, 65535] (0: any free port)")
        need(-1 <= self.grpc_port <= 65535, "grpc_port", "must be a port in [0, 65535], or -1 to disable gRPC")
        need(self.placer in PLACERS, "placer", f"expected one of {', '.join(PLACERS)}")
        need(self.shortlist >= 0, "shortlist", "must be >= 0 (0 keeps every feasible node)")
        need(0 < self.assume_ttl_s <= 3600, "assume_ttl_s", "must be in (0, 3600] seconds")
        need(self.max_assumed_gpus >= 0, "max_assumed_gpus", "must be >= 0 (0: no cap)")
        need(0 < self.request_timeout_s <= 600, "request_timeout_s", "must be in (0, 600] seconds")
        need(self.max_body_bytes >= 1024, "max_body_bytes", "must be >= 1024")
        need(0 <= self.shutdown_grace_s <= 600, "shutdown_grace_s", "must be in [0, 600] seconds")
        need(1 <= self.watch_timeout_s <= 3600, "watch_timeout_s", "must be in [1, 3600] seconds")
        need(self.log_level.upper() in LOG_LEVELS, "log_level", f"expected one of {', '.join(LOG_LEVELS)}")
        self.log_level = self.log_level.upper()
        need(
            not (self.node_list and self.kubeconfig),
            "node_list",
            "give either --node-list (a static node set) or --kubeconfig (a cluster), not both",
        )
        tls = (self.tls_cert_file, self.tls_key_file, self.tls_client_ca_file)
        if any(tls) and not all(tls):
            raise InvalidInput(
                "tls", tls, "TLS needs all three of --tls-cert-file, --tls-key-file and --tls-client-ca-file"
            )
        _ = self.clients  # refuses an empty list, naming the setting
        if self.insecure:
            need(not any(tls), "insecure", "--insecure (plaintext) and TLS files exclude each other")
            for group in CLIENT_GROUPS:
                field = f"{group}_clients"
                need(
                    getattr(self, field) is None,
                    field,
                    "client identities need TLS client certificates, not --insecure",
                )
            for field in ("http_host", "grpc_host"):
                need(is_loopback(getattr(self, field)), field, "--insecure serves plaintext on loopback only")
        elif not any(tls):
            raise InvalidInput(
                "tls",
                None,
                "give --tls-cert-file, --tls-key-file and --tls-client-ca-file (HTTPS and gRPC with client "
                "certificates), or --insecure for plaintext on loopback (local use only)",
            )

    @property
    def clients(self) -> ClientPolicy:
        return ClientPolicy.parse(scheduler=self.scheduler_clients, metrics=self.metrics_clients, api=self.api_clients)

    @property
    def tls(self) -> TLSFiles | None:
        if self.tls_cert_file and self.tls_key_file and self.tls_client_ca_file:
            return TLSFiles(self.tls_cert_file, self.tls_key_file, self.tls_client_ca_file)
        return None

    @classmethod
    def load(cls, file: str | Path | None = None, env: Mapping[str, str] | None = None, **flags: Any) -> ExtenderConfig:
        """Merge the sources; unknown keys and badly typed values raise InvalidInput naming the source."""
        values: dict[str, Any] = {}
        where: dict[str, str] = {}  # field -> "file line N" for values read from the file
        if file:
            data, lines = _read_yaml(Path(file))
            for k, v in data.items():
                key = str(k).replace("-", "_")
                values[key] = v
                where[key] = f"{file} line {lines[k]}"
        env = os.environ if env is None else env
        for f in dataclasses.fields(cls):
            key = ENV_PREFIX + f.name.upper()
            if key in env:
                values[f.name] = env[key]
                where[f.name] = f"${key}"
        for k, v in flags.items():
            if v is not None:
                values[k] = v
                where.pop(k, None)
        names = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(names))
        if unknown:
            source = where.get(unknown[0], "flags")
            raise InvalidInput(f"config ({source})", unknown, f"unknown keys; expected some of {', '.join(names)}")
        out = {}
        for k, v in values.items():
            try:
                out[k] = _convert(v, str(names[k].type))
            except (TypeError, ValueError):
                field = f"{k} ({where[k]})" if k in where else k
                raise InvalidInput(field, v, f"expected {names[k].type}") from None
        try:
            return cls(**out)
        except InvalidInput as exc:
            if exc.field in where:
                raise InvalidInput(f"{exc.field} ({where[exc.field]})", exc.value, exc.reason) from None
            raise


def _convert(v: Any, typ: str) -> Any:
    if typ == "bool":
        if isinstance(v, bool):
            return v
        text = str(v).strip().lower()
        if text in _TRUE | _FALSE:
            return text in _TRUE
        raise ValueError(v)
    if isinstance(v, bool):
        raise TypeError(v)
    if typ.startswith("int"):
        if isinstance(v, float) and not v.is_integer():
            raise ValueError(v)
        return int(v)
    if typ.startswith("float"):
        out = float(v)
        if not math.isfinite(out):
            raise ValueError(v)
        return out
    if isinstance(v, dict | list):
        raise TypeError(v)
    return None if v in (None, "") else str(v)


def _read_yaml(path: Path) -> tuple[dict[Any, Any], dict[Any, int]]:
    """A YAML mapping and the line of each top-level key; InvalidInput naming file and line on any problem."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInput("config", str(path), "no such file") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise InvalidInput("config", str(path), f"cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise InvalidInput("config", str(path), f"not UTF-8 text (byte {exc.start})") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InvalidInput("config", f"{path}{at}", f"broken YAML: {problem}") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict) or not isinstance(node, yaml.MappingNode):
        raise InvalidInput("config", str(path), "expected a YAML mapping of settings")
    lines: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = yaml.safe_load(yaml.serialize(key_node)) if not isinstance(key_node, yaml.ScalarNode) else None
        lines[key if key is not None else key_node.value] = key_node.start_mark.line + 1
    for k in data:
        lines.setdefault(k, 0)
    return data, lines


class JSONFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg and any ``extra`` fields."""

    _skip = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update({k: v for k, v in record.__dict__.items() if k not in self._skip})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JSONFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
