"""``qosmos extender serve`` as a user runs it: clean one-line errors (exit 2), a static node set
without a cluster (``--node-list``), and SIGTERM that stops the server even mid-request."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import orjson
import pytest
from qosmos.extender.proto import qosmos_pb2 as pb
from qosmos.extender.proto import qosmos_pb2_grpc as pb_grpc

from .conftest import make_pod

# `qosmos extender serve` with the extender's commands alone (independent of other components' CLIs)
LAUNCH = (
    "import typer; from qosmos.extender.cli import register; "
    "app = typer.Typer(); register(app); app(prog_name='qosmos')"
)

NODES_CSV = """sn,cpu_milli,memory_mib,gpu,model
n0,64000,262144,8,V100M32
n1,64000,262144,8,V100M32
n2,32000,131072,2,T4
n3,32000,131072,0,
"""


def serve_cmd(*args: str) -> list[str]:
    return [sys.executable, "-c", LAUNCH, "extender", "serve", *args]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def user_env(tmp_path: Path) -> dict[str, str]:
    """A user without a kubeconfig or model database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "QOSMOS_", "KUBERNETES_"))}
    env["HOME"] = str(tmp_path)
    env["QOSMOS_MODELDB"] = str(tmp_path / "absent.json")
    return env


@pytest.fixture
def node_list(tmp_path: Path) -> Path:
    p = tmp_path / "nodes.csv"
    p.write_text(NODES_CSV)
    return p


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(serve_cmd(*args), env=env, capture_output=True, text=True, timeout=60)


def _clean(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    # one line in all: no traceback, and no library log lines (e.g. gRPC's C core) around the error
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_no_kubeconfig_is_one_line(user_env: dict[str, str]) -> None:
    _clean(_run(["--insecure"], user_env), "kubeconfig", "--node-list")
    _clean(_run(["--insecure", "--kubeconfig", "/nonexistent/kc"], user_env), "/nonexistent/kc", "no such file")


def test_tls_or_insecure_must_be_chosen(user_env: dict[str, str], node_list: Path) -> None:
    _clean(_run(["--node-list", str(node_list)], user_env), "tls", "--insecure")


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--placer", "bogus"], ("placer", "cer")),
        (["--log-level", "bogus"], ("log_level", "DEBUG")),
        (["--http-port", "70000"], ("http_port", "65535")),
        (["--grpc-port", "-7"], ("grpc_port",)),
        (["--assume-ttl-s", "-5"], ("assume_ttl_s",)),
        (["--max-assumed-gpus", "-1"], ("max_assumed_gpus",)),
        (["--http-host", "0.0.0.0"], ("http_host", "loopback")),
    ],
)
def test_bad_settings_are_one_line(user_env: dict[str, str], node_list: Path, args: list[str], needles: tuple) -> None:
    _clean(_run(["--insecure", "--node-list", str(node_list), *args], user_env), *needles)


def test_bad_files_are_one_line(user_env: dict[str, str], node_list: Path, tmp_path: Path) -> None:
    _clean(_run(["--insecure", "--config", str(tmp_path / "nope.yaml")], user_env), "nope.yaml", "no such file")
    broken = tmp_path / "broken.yaml"
    broken.write_text("insecure: true\nplacer: [cer\n")
    _clean(_run(["--config", str(broken)], user_env), "broken.yaml line 3", "broken YAML")
    _clean(_run(["--insecure", "--node-list", str(tmp_path / "none.csv")], user_env), "none.csv", "no such file")
    _clean(_run(["--insecure", "--node-list", str(node_list), "--db", str(tmp_path / "no.json")], user_env), "no.json")


def test_port_in_use_is_one_line(user_env: dict[str, str], node_list: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _run(
            ["--insecure", "--node-list", str(node_list), "--http-port", str(port), "--grpc-port", "-1"], user_env
        )
        _clean(proc, "http_port", f"127.0.0.1:{port}")
        proc = _run(
            ["--insecure", "--node-list", str(node_list), "--http-port", "0", "--grpc-port", str(port)], user_env
        )
        _clean(proc, "grpc_port", f"127.0.0.1:{port}")


def test_a_second_extender_on_the_same_grpc_port_is_refused(
    server: Server, user_env: dict[str, str], node_list: Path
) -> None:
    """gRPC binds with SO_REUSEPORT unless told not to: a second extender would silently take half the calls."""
    proc = _run(
        ["--insecure", "--node-list", str(node_list), "--http-port", "0", "--grpc-port", str(server.grpc_port)],
        user_env,
    )
    _clean(proc, "grpc_port", f"127.0.0.1:{server.grpc_port}", "in use")


class Server:
    def __init__(self, proc: subprocess.Popen[bytes], http_port: int, grpc_port: int) -> None:
        self.proc, self.http_port, self.grpc_port = proc, http_port, grpc_port

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.http_port}{path}"

    def post(self, verb: str, body: object) -> dict:
        req = urllib.request.Request(self.url(f"/{verb}"), data=orjson.dumps(body), method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            return orjson.loads(r.read())


@pytest.fixture
def server(user_env: dict[str, str], node_list: Path, tmp_path: Path) -> Iterator[Server]:
    from qosmos.extender.core.genie import ThroughputProfile
    from qosmos.predictors.profiler import write_db

    http_port, grpc_port = free_port(), free_port()
    db = tmp_path / "models.json"  # what `qosmos profile fit` writes
    write_db(db, [ThroughputProfile("mynet", 50.0, 1.0, 0.0, b_min=8, b_max=64, source="fit of my runs")])
    env = {**user_env, "QOSMOS_EXTENDER_SHUTDOWN_GRACE_S": "1", "QOSMOS_MODELDB": str(db)}
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        serve_cmd(
            "--insecure",
            "--node-list",
            str(node_list),
            "--http-port",
            str(http_port),
            "--grpc-port",
            str(grpc_port),
        ),
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    srv = Server(proc, http_port, grpc_port)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(srv.url("/readyz"), timeout=2) as r:
                if r.status == 200:
                    break
        except (urllib.error.URLError, OSError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError((tmp_path / "serve.log").read_text())
        time.sleep(0.2)
    yield srv
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    log.close()


def test_node_list_serves_a_static_node_set(server: Server) -> None:
    names = ["n0", "n1", "n2", "n3"]
    out = server.post("filter", {"Pod": make_pod("p", gpus=2), "NodeNames": names})
    assert out["NodeNames"] and set(out["NodeNames"]) <= {"n0", "n1", "n2"}
    assert "n3" in out["FailedNodes"] or "n3" in out["FailedAndUnresolvableNodes"]
    prio = server.post("prioritize", {"Pod": make_pod("p", gpus=2), "NodeNames": out["NodeNames"]})
    assert max(h["Score"] for h in prio) == 10
    bind = server.post("bind", {"PodName": "p", "PodNamespace": "ns", "PodUID": "uid-p", "Node": "n0"})
    assert "does not bind" in bind["Error"]
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
        scores = pb_grpc.ExtenderStub(ch).Score(pb.ScoreRequest(pod=pb.PodSpec(name="g", uid="g", gpus=8)), timeout=10)
        # the extender reads the one model database ($QOSMOS_MODELDB here)
        mine = pb_grpc.ExtenderStub(ch).Explain(pb.ExplainRequest(model="mynet", batch=64, iters=10), timeout=10)
    assert {s.node for s in scores.scores} == set(names)
    assert mine.provenance.origin == "file" and mine.provenance.source == "fit of my runs"
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(10) == 0


def test_sigterm_stops_the_server_mid_request(server: Server) -> None:
    big = pb.ExplainRequest(model="ResNet50", batch=1_000_000, iters=100, nodes=100_000, gpus_per_node=32)
    started = threading.Event()
    stop = threading.Event()
    codes: list[object] = []

    def hammer() -> None:
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as ch:
            stub = pb_grpc.ExtenderStub(ch)
            while not stop.is_set():
                started.set()
                try:
                    stub.Explain(big, timeout=30)
                    codes.append(grpc.StatusCode.OK)
                except grpc.RpcError as exc:
                    codes.append(exc.code())
                    return

    threads = [threading.Thread(target=hammer, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    started.wait(10)
    time.sleep(1.0)  # calls are in flight now
    t0 = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    rc = server.proc.wait(15)
    took = time.monotonic() - t0
    stop.set()
    assert rc == 0
    assert took < 1.0 + 4.0, took  # the grace period (1 s) plus start-up slack, not the length of the work
    assert codes, "no Explain call completed or failed"
