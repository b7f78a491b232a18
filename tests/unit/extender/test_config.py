"""``qosmos extender serve`` configuration and logging."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from qosmos.extender.config import ExtenderConfig, JSONFormatter
from qosmos.extender.core.errors import InvalidInput


def test_precedence_file_env_flags(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("http_port: 1000\ngrpc-port: 2000\nplacer: best-fit\nassume_ttl_s: 5\n")
    env = {"QOSMOS_EXTENDER_GRPC_PORT": "3000", "QOSMOS_EXTENDER_PLACER": "consolidate", "OTHER": "x"}
    cfg = ExtenderConfig.load(f, env=env, placer="first-fit", http_host=None)
    assert (cfg.http_port, cfg.grpc_port, cfg.placer, cfg.assume_ttl_s) == (1000, 3000, "first-fit", 5.0)
    assert cfg.http_host == "0.0.0.0"


def test_bad_config(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("nope: 1\n")
    with pytest.raises(InvalidInput, match="unknown keys"):
        ExtenderConfig.load(f, env={})
    with pytest.raises(InvalidInput, match="http_port"):
        ExtenderConfig.load(None, env={"QOSMOS_EXTENDER_HTTP_PORT": "eighty"})
    with pytest.raises(InvalidInput, match="shortlist"):
        ExtenderConfig.load(None, env={}, shortlist=-1)
    assert ExtenderConfig.load(None, env={"QOSMOS_EXTENDER_SHORTLIST": "0"}).shortlist == 0


def test_json_logs() -> None:
    rec = logging.LogRecord("qosmos.extender", logging.INFO, __file__, 1, "hello %s", ("x",), None)
    rec.url = "http://h:1"
    out = json.loads(JSONFormatter().format(rec))
    assert out["msg"] == "hello x" and out["level"] == "info" and out["url"] == "http://h:1"


def test_cli_commands_registered() -> None:
    from typer.testing import CliRunner

    from qosmos.cli import app

    runner = CliRunner()
    for args in (["extender", "serve", "--help"], ["bench", "extender", "--help"], ["bench", "scheduling", "--help"]):
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["extender", "serve", "--grpc-port", "x"])
    assert res.exit_code != 0
    res = runner.invoke(app, ["extender", "serve", "--shortlist", "-3"])
    assert res.exit_code == 2 and "shortlist" in res.output
    res = runner.invoke(app, ["bench", "scheduling", "--percentage-of-nodes-to-score", "101"])
    assert res.exit_code == 2 and "[0, 100]" in res.output
