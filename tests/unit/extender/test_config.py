"""``qosmos extender serve`` configuration and logging."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from qosmos.extender.config import ExtenderConfig, JSONFormatter
from qosmos.extender.core.errors import InvalidInput

LOCAL = {"insecure": True}


def test_precedence_file_env_flags(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("http_port: 1000\ngrpc-port: 2000\nplacer: best-fit\nassume_ttl_s: 5\ninsecure: true\n")
    env = {"QOSMOS_EXTENDER_GRPC_PORT": "3000", "QOSMOS_EXTENDER_PLACER": "consolidate", "OTHER": "x"}
    cfg = ExtenderConfig.load(f, env=env, placer="first-fit", http_host=None)
    assert (cfg.http_port, cfg.grpc_port, cfg.placer, cfg.assume_ttl_s) == (1000, 3000, "first-fit", 5.0)
    # loopback by default, for HTTP and gRPC
    assert cfg.http_host == "127.0.0.1" and cfg.grpc_host == "127.0.0.1" and cfg.tls is None


def test_bad_config(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("insecure: true\nnope: 1\n")
    with pytest.raises(InvalidInput, match=r"unknown keys") as exc:
        ExtenderConfig.load(f, env={})
    assert "line 2" in str(exc.value) and str(f) in str(exc.value)
    with pytest.raises(InvalidInput, match="http_port"):
        ExtenderConfig.load(None, env={"QOSMOS_EXTENDER_HTTP_PORT": "eighty"}, **LOCAL)
    with pytest.raises(InvalidInput, match="shortlist"):
        ExtenderConfig.load(None, env={}, shortlist=-1, **LOCAL)
    assert ExtenderConfig.load(None, env={"QOSMOS_EXTENDER_SHORTLIST": "0"}, **LOCAL).shortlist == 0


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        ({"placer": "bogus"}, "placer"),
        ({"log_level": "bogus"}, "log_level"),
        ({"http_port": 70000}, "http_port"),
        ({"http_port": -1}, "http_port"),
        ({"grpc_port": 65536}, "grpc_port"),
        ({"grpc_port": -2}, "grpc_port"),
        ({"assume_ttl_s": -5}, "assume_ttl_s"),
        ({"assume_ttl_s": 0}, "assume_ttl_s"),
        ({"assume_ttl_s": "nan"}, "assume_ttl_s"),
        ({"max_assumed_gpus": -1}, "max_assumed_gpus"),
        ({"request_timeout_s": 0}, "request_timeout_s"),
        ({"shutdown_grace_s": -1}, "shutdown_grace_s"),
        ({"http_host": "0.0.0.0"}, "http_host"),  # plaintext off loopback
        ({"grpc_host": "10.1.2.3"}, "grpc_host"),
        ({"node_list": "n.csv", "kubeconfig": "k"}, "node_list"),
    ],
)
def test_bad_values_are_refused_naming_the_setting(flags: dict, field: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        ExtenderConfig.load(None, env={}, **{**LOCAL, **flags})
    assert exc.value.field == field


def test_tls_or_an_explicit_insecure_mode(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="--insecure") as exc:
        ExtenderConfig.load(None, env={})
    assert exc.value.field == "tls"
    with pytest.raises(InvalidInput, match="all three"):
        ExtenderConfig.load(None, env={}, tls_cert_file="c.pem")
    with pytest.raises(InvalidInput, match="exclude"):
        ExtenderConfig.load(None, env={}, insecure=True, tls_cert_file="c", tls_key_file="k", tls_client_ca_file="a")
    cfg = ExtenderConfig.load(
        None, env={}, http_host="0.0.0.0", tls_cert_file="c", tls_key_file="k", tls_client_ca_file="a"
    )
    assert cfg.tls is not None and cfg.tls.client_ca_file == "a"
    assert ExtenderConfig.load(None, env={"QOSMOS_EXTENDER_INSECURE": "yes"}).insecure


def test_yaml_problems_name_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="no such file"):
        ExtenderConfig.load(tmp_path / "missing.yaml", env={})
    broken = tmp_path / "broken.yaml"
    broken.write_text("insecure: true\nhttp_port: [1,\n")
    with pytest.raises(InvalidInput, match=r"broken YAML") as exc:
        ExtenderConfig.load(broken, env={})
    assert "broken.yaml line 3" in str(exc.value)
    typed = tmp_path / "typed.yaml"
    typed.write_text("insecure: true\n\nassume_ttl_s: -5\n")
    with pytest.raises(InvalidInput) as exc:
        ExtenderConfig.load(typed, env={})
    assert "assume_ttl_s" in str(exc.value) and "typed.yaml line 3" in str(exc.value)
    listy = tmp_path / "list.yaml"
    listy.write_text("- a\n- b\n")
    with pytest.raises(InvalidInput, match="mapping"):
        ExtenderConfig.load(listy, env={})
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InvalidInput, match="UTF-8"):
        ExtenderConfig.load(binary, env={})


def test_json_logs() -> None:
    rec = logging.LogRecord("qosmos.extender", logging.INFO, __file__, 1, "hello %s", ("x",), None)
    rec.url = "http://h:1"
    out = json.loads(JSONFormatter().format(rec))
    assert out["msg"] == "hello x" and out["level"] == "info" and out["url"] == "http://h:1"


def test_cli_commands_registered() -> None:
    from typer.testing import CliRunner

    from .conftest import extender_cli

    app = extender_cli()
    runner = CliRunner()
    for args in (["extender", "serve", "--help"], ["bench", "extender", "--help"], ["bench", "scheduling", "--help"]):
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["extender", "serve", "--grpc-port", "x"])
    assert res.exit_code != 0
    res = runner.invoke(app, ["extender", "serve", "--insecure", "--shortlist", "-3"])
    assert res.exit_code == 2 and "shortlist" in res.output
    res = runner.invoke(app, ["bench", "scheduling", "--percentage-of-nodes-to-score", "101"])
    assert res.exit_code == 2 and "[0, 100]" in res.output


def test_every_option_has_help_with_its_default() -> None:
    """Help in user language: every option explains itself, and one without a fixed default says
    what it defaults to; equations are named with the paper, never bare."""
    import re

    import typer.main

    from .conftest import extender_cli

    root = typer.main.get_command(extender_cli())
    commands = {
        "explain": root.commands["explain"],  # type: ignore[attr-defined]
        "explain queue": root.commands["explain"].commands["queue"],  # type: ignore[attr-defined]
        **{f"extender {k}": c for k, c in root.commands["extender"].commands.items()},  # type: ignore[attr-defined]
        **{f"bench {k}": c for k, c in root.commands["bench"].commands.items()},  # type: ignore[attr-defined]
    }
    assert {"explain", "explain queue", "extender serve", "bench extender", "bench scheduling"} <= set(commands)
    for name, cmd in commands.items():
        assert cmd.help and len(cmd.help) > 20, name
        for param in cmd.params:
            if param.name == "help":
                continue
            text = getattr(param, "help", "") or ""
            assert len(text) >= 15, (name, param.name, text)
            assert not re.search(r"(?<!GENIE )\bEq\. \d+", text), (name, param.name, text)
            if param.default is None and not param.required and not getattr(param, "is_flag", False):
                # either a stated default, or one of two alternatives (--model / --coeffs)
                assert "(default:" in text or re.search(r"\bor (use )?--", text), (name, param.name, text)
