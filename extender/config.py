"""Configuration of ``qosmos extender serve``: defaults < YAML file < env ``QOSMOS_EXTENDER_*`` < flags."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.scoring import DEFAULT_PLACER, DEFAULT_SHORTLIST

ENV_PREFIX = "QOSMOS_EXTENDER_"


@dataclass(slots=True)
class ExtenderConfig:
    http_host: str = "0.0.0.0"
    http_port: int = 8888
    grpc_port: int = 9090  # 0 picks a free port; < 0 disables gRPC
    kubeconfig: str | None = None  # None: in-cluster, else KUBECONFIG / ~/.kube/config
    placer: str = DEFAULT_PLACER
    shortlist: int = DEFAULT_SHORTLIST  # /filter keeps the top tier of at most this many feasible nodes; 0 keeps all
    assume_ttl_s: float = 30.0
    max_body_bytes: int = 8 * 1024 * 1024
    shutdown_grace_s: float = 10.0
    watch_timeout_s: int = 60
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        if self.shortlist < 0:
            raise InvalidInput("shortlist", self.shortlist, "must be >= 0 (0 keeps every feasible node)")

    @classmethod
    def load(cls, file: str | Path | None = None, env: Mapping[str, str] | None = None, **flags: Any) -> ExtenderConfig:
        """Merge the sources; unknown keys and badly typed values raise InvalidInput."""
        values: dict[str, Any] = {}
        if file:
            import yaml

            data = yaml.safe_load(Path(file).read_text()) or {}
            if not isinstance(data, dict):
                raise InvalidInput("config", str(file), "expected a YAML mapping")
            values.update({k.replace("-", "_"): v for k, v in data.items()})
        env = os.environ if env is None else env
        for f in dataclasses.fields(cls):
            key = ENV_PREFIX + f.name.upper()
            if key in env:
                values[f.name] = env[key]
        values.update({k: v for k, v in flags.items() if v is not None})
        names = {f.name: f for f in dataclasses.fields(cls)}
        unknown = set(values) - set(names)
        if unknown:
            raise InvalidInput("config", sorted(unknown), f"unknown keys; expected some of {', '.join(names)}")
        out = {}
        for k, v in values.items():
            typ = names[k].type
            try:
                if "int" in typ and not isinstance(v, bool):
                    out[k] = int(v)
                elif "float" in typ and not isinstance(v, bool):
                    out[k] = float(v)
                else:
                    out[k] = None if v in (None, "") else str(v)
            except (TypeError, ValueError):
                raise InvalidInput(k, v, f"expected {typ}") from None
        return cls(**out)


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
