"""``qosmos dev``: options, node sets, KWOK Stages, the state file and stopping by pid, CLI refusals.

No cluster here (tests/integration/test_dev.py runs one); processes are ``sleep`` children.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from qosmos.dev import cluster
from qosmos.dev.cli import register
from qosmos.dev.cluster import DevError, DevOptions, DevState
from qosmos.dev.fakenodes import KWOK_NODE_ANNOTATION, KWOK_NODE_VALUE
from qosmos.dev.kwok import CONFIG_FILE, RUN_DURATION_ANNOTATION, STAGES_FILE, stages, start_kwok
from qosmos.dev.process import Component, ProcessRef, start_ticks, stop_all
from qosmos.extender.core.errors import InvalidInput
from qosmos.testing.node import wait_for
from typer.testing import CliRunner

app = typer.Typer()
register(app)
runner = CliRunner()


# --------------------------------------------------------------------------- options and nodes


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"nodes": 0}, "nodes"),
        ({"nodes": 5001}, "nodes"),
        ({"gpus_per_node": -1}, "gpus_per_node"),
        ({"gpus_per_node": 65}, "gpus_per_node"),
        ({"gpu_model": "A 100"}, "gpu_model"),
        ({"gpu_model": ""}, "gpu_model"),
        ({"api_port": 80}, "api_port"),
        ({"pools": ("a", "b c")}, "pools"),
        ({"node_list": Path("/nonexistent/nodes.csv")}, "node_list"),
    ],
)
def test_bad_options_name_the_field(tmp_path: Path, kw: dict, field: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        DevOptions(dir=tmp_path, **kw).validate()
    assert exc.value.field == field


def test_synthetic_nodes_are_named_and_labelled(tmp_path: Path) -> None:
    opts = DevOptions(dir=tmp_path, nodes=3, gpus_per_node=4, gpu_model="T4")
    manifests = opts.node_manifests(opts.node_rows())
    assert [m["metadata"]["name"] for m in manifests] == ["node-0", "node-1", "node-2"]
    for m in manifests:
        assert m["status"]["allocatable"]["nvidia.com/gpu"] == "4"
        assert m["metadata"]["labels"]["qosmos.io/gpu-model"] == "T4"
        assert m["metadata"]["annotations"][KWOK_NODE_ANNOTATION] == KWOK_NODE_VALUE  # KWOK manages it
    # The examples' VirtualClusters select pools a and b: the nodes alternate between them.
    assert [m["metadata"]["labels"][cluster.POOL_LABEL] for m in manifests] == ["a", "b", "a"]
    bare = DevOptions(dir=tmp_path, nodes=1, pools=()).node_manifests(opts.node_rows()[:1])
    assert cluster.POOL_LABEL not in bare[0]["metadata"]["labels"]


def test_default_is_four_nodes_of_eight_gpus(tmp_path: Path) -> None:
    rows = DevOptions(dir=tmp_path).node_rows()
    assert len(rows) == cluster.DEFAULT_NODES == 4
    assert {r["gpu"] for r in rows} == {8}


def _node_csv(path: Path, rows: list[str]) -> Path:
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "\n".join(rows) + "\n")
    return path


def test_node_list_names_the_nodes_and_nodes_samples_it(tmp_path: Path) -> None:
    csv = _node_csv(tmp_path / "n.csv", [f"openb-node-{i:04d},64000,262144,{2 + i % 3},P100" for i in range(10)])
    rows = DevOptions(dir=tmp_path, node_list=csv).node_rows()
    assert [r["sn"] for r in rows] == [f"openb-node-{i:04d}" for i in range(10)]
    assert rows[1]["gpu"] == 3 and rows[1]["model"] == "P100"
    sample = DevOptions(dir=tmp_path, node_list=csv, nodes=5).node_rows()
    assert [r["sn"] for r in sample] == [f"openb-node-{i:04d}" for i in (0, 2, 4, 6, 8)]


def test_node_list_refuses_names_kubernetes_refuses(tmp_path: Path) -> None:
    csv = _node_csv(tmp_path / "n.csv", ["bad_name!,64000,262144,2,P100"])
    with pytest.raises(InvalidInput, match="DNS-1123"):
        DevOptions(dir=tmp_path, node_list=csv).node_rows()


# --------------------------------------------------------------------------- KWOK stages


def test_stages_play_run_duration_from_start_time() -> None:
    by_name = {s["metadata"]["name"]: s for s in stages()}
    assert set(by_name) == {
        "node-initialize",
        "node-heartbeat-with-lease",
        "pod-ready",
        "qosmos-pod-complete",
        "pod-delete",
    }
    complete = by_name["qosmos-pod-complete"]["spec"]
    keys = {e["key"]: e["operator"] for e in complete["selector"]["matchExpressions"]}
    assert keys[f'.metadata.annotations["{RUN_DURATION_ANNOTATION}"]'] == "Exists"
    expr = complete["delay"]["durationFrom"]["cel"]["expression"]
    assert "self.status.startTime" in expr and RUN_DURATION_ANNOTATION in expr
    assert "phase: Succeeded" in complete["next"]["statusTemplate"]
    # No KWOK stage completes pods by owner (Jobs): without the annotation a pod runs until deleted.
    assert all("ownerReferences" not in json.dumps(s) for s in stages())
    # kwok reads this file as its --config: Stages only (its options are kwok-config.yaml's).
    assert {s["kind"] for s in stages()} == {"Stage"}


def test_kwok_options_are_all_set_with_pod_stages_played_side_by_side() -> None:
    (conf,) = [d for d in yaml.safe_load_all(CONFIG_FILE.read_text()) if d]
    assert (conf["apiVersion"], conf["kind"]) == ("config.kwok.x-k8s.io/v1alpha1", "KwokConfiguration")
    opts = conf["options"]
    # KWOK v0.8.0 defaults nothing in a KwokConfiguration it loads from a file: every option its
    # SetObjectDefaults_KwokConfiguration sets is set here, each worker count at least 1
    workers = [
        "podPlayStageParallelism",
        "nodePlayStageParallelism",
        "nodeLeaseParallelism",
        "podsOnNodeSyncParallelism",
    ]
    flags = ["manageAllNodes", "enableDebuggingHandlers", "enableContentionProfiling", "enableProfilingHandler",
             "enablePodsOnNodeSyncListPager", "enablePodsOnNodeSyncStreamWatch"]  # fmt: skip
    assert all(isinstance(opts[k], int) and opts[k] >= 1 for k in workers)
    assert all(isinstance(opts[k], bool) for k in flags) and opts["manageAllNodes"] is False
    assert opts["podPlayStageParallelism"] > 4  # KWOK's default of 4 held pods of 0.2 s jobs ~24 s
    # both files go to kwok, the options first; hack/kind/up.sh mounts the same two
    up = (Path(__file__).parents[3] / "hack" / "kind" / "up.sh").read_text()
    assert up.index("--config=/qosmos/kwok-config.yaml") < up.index("--config=/qosmos/kwok-stages.yaml")


def test_kwok_is_started_with_its_options_then_its_stages(tmp_path: Path) -> None:
    started: list[list[str]] = []

    class Plane:  # what start_kwok asks of the ControlPlane
        workdir = tmp_path
        kubeconfig_path = tmp_path / "admin.kubeconfig"

        def bin(self, name: str) -> str:
            return name

        def spawn(self, name: str, args: list[str], *_: Any, **__: Any) -> None:
            started.append(args)

        def wait_ready(self, *_: Any) -> None:
            pass

    start_kwok(Plane(), timeout=1)  # type: ignore[arg-type]
    (args,) = started
    configs = [a.split("=", 1)[1] for a in args if a.startswith("--config=")]
    assert configs == [str(CONFIG_FILE), str(STAGES_FILE)]


# --------------------------------------------------------------------------- processes and state


def _sleeper(tmp_path: Path, name: str, ignore_term: bool = False) -> Component:
    script = "trap '' TERM; echo trapped; sleep 60 & wait; sleep 60" if ignore_term else "exec sleep 60"
    return Component(name, ["sh", "-c", script], tmp_path / f"{name}.log", None, detached=True)


def _gone(pid: int) -> bool:
    return start_ticks(pid) is None


def test_process_ref_never_signals_a_recycled_pid(tmp_path: Path) -> None:
    comp = _sleeper(tmp_path, "a")
    try:
        assert comp.ref.alive()
        impostor = ProcessRef("a", comp.pid, comp.ref.ticks + 1)  # same pid, another start time
        assert not impostor.alive()
        impostor.signal_group(signal.SIGKILL)
        time.sleep(0.2)
        assert comp.running
    finally:
        comp.stop(1)


def test_stop_all_terms_then_kills_and_is_idempotent(tmp_path: Path) -> None:
    polite, stubborn = _sleeper(tmp_path, "polite"), _sleeper(tmp_path, "stubborn", ignore_term=True)
    wait_for(lambda: "trapped" in (tmp_path / "stubborn.log").read_text(), 30, "the shell's TERM trap", every=0.05)
    refs = [polite.ref, stubborn.ref]
    killed = stop_all(refs, grace=1.0)
    for c in (polite, stubborn):
        c.proc.wait(5)
    assert killed == ["stubborn"]
    assert not any(r.alive() for r in refs)
    assert stop_all(refs, grace=1.0) == []


def _write_state(tmp_path: Path, comps: list[Component], phase: str = "up") -> DevState:
    (tmp_path / cluster.MARKER_FILE).write_text("")
    state = DevState(tmp_path, phase=phase, components=[c.ref for c in comps], kubeconfig=str(tmp_path / "kubeconfig"))
    state.save()
    return state


def test_down_stops_what_the_state_names_and_says_so_twice(tmp_path: Path) -> None:
    comps = [_sleeper(tmp_path, "etcd"), _sleeper(tmp_path, "kube-apiserver")]
    _write_state(tmp_path, comps)
    result = cluster.down(tmp_path, grace=2)
    for c in comps:
        c.proc.wait(5)
        assert _gone(c.pid)
    assert result["was_running"] and sorted(result["stopped"]) == ["etcd", "kube-apiserver"]
    assert not (tmp_path / cluster.STATE_FILE).exists()
    again = cluster.down(tmp_path, grace=2)
    assert again["was_running"] is False and again["stopped"] == []


def test_check_dir_already_up_partly_up_stale_and_foreign(tmp_path: Path) -> None:
    a, b = _sleeper(tmp_path, "etcd"), _sleeper(tmp_path, "kube-apiserver")
    try:
        _write_state(tmp_path, [a, b])
        running = cluster.check_dir(tmp_path)
        assert running is not None and running.pids() == {"etcd": a.pid, "kube-apiserver": b.pid}
        b.stop(2)
        with pytest.raises(DevError, match=r"partly running.*kube-apiserver exited.*dev down"):
            cluster.check_dir(tmp_path)
        a.stop(2)
        assert cluster.check_dir(tmp_path) is None  # stale: nothing of it runs, start afresh
    finally:
        a.stop(1)
        b.stop(1)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(InvalidInput, match="not made by `qosmos dev up`"):
        cluster.check_dir(foreign)


def test_unreadable_state_is_a_one_line_refusal(tmp_path: Path) -> None:
    (tmp_path / cluster.MARKER_FILE).write_text("")
    (tmp_path / cluster.STATE_FILE).write_text("{not json")
    with pytest.raises(DevError, match="unreadable"):
        cluster.check_dir(tmp_path)


def test_operator_detection_matches_the_cli() -> None:
    """`up` starts the operator exactly when `qosmos operator run` exists."""
    from qosmos.cli import app as qosmos_app

    exists, reason = cluster.operator_command()
    help_rc = CliRunner().invoke(qosmos_app, ["operator", "run", "--help"]).exit_code
    assert exists == (help_rc == 0)
    assert exists or "operator run" in reason


# --------------------------------------------------------------------------- CLI refusals (exit 2, one line)


def _one_line_error(result: object) -> str:
    out = result.output.strip()  # type: ignore[attr-defined]
    assert result.exit_code == 2, out  # type: ignore[attr-defined]
    assert out.startswith("error: ") and "\n" not in out and "Traceback" not in out, out
    return out


def test_cli_refuses_zero_nodes(tmp_path: Path) -> None:
    out = _one_line_error(runner.invoke(app, ["dev", "up", "--dir", str(tmp_path / "c"), "--nodes", "0"]))
    assert "nodes=0" in out
    assert not (tmp_path / "c").exists()  # refused before touching anything


def test_cli_missing_binaries_says_how_to_build(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    out = _one_line_error(runner.invoke(app, ["dev", "up", "--dir", str(tmp_path / "c"), "--bin-dir", str(empty)]))
    assert "hack/k8s/build.sh" in out and "kwok" in out


def test_cli_port_in_use(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for b in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok"):
        (bin_dir / b).write_text("#!/bin/sh\nexit 1\n")
        (bin_dir / b).chmod(0o755)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        args = ["dev", "up", "--dir", str(tmp_path / "c"), "--bin-dir", str(bin_dir), "--api-port", str(port)]
        out = _one_line_error(runner.invoke(app, args))
    assert f"port {port}" in out and "in use" in out


def test_cli_refuses_a_foreign_folder(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("")
    _one_line_error(runner.invoke(app, ["dev", "up", "--dir", str(tmp_path)]))
    assert (tmp_path / "x.txt").exists()


def test_cli_down_on_nothing_is_fine(tmp_path: Path) -> None:
    result = runner.invoke(app, ["dev", "down", "--dir", str(tmp_path / "none"), "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["was_running"] is False


def test_cli_down_json_reports_what_it_stopped(tmp_path: Path) -> None:
    comps = [_sleeper(tmp_path, "kwok")]
    _write_state(tmp_path, comps)
    result = runner.invoke(app, ["dev", "down", "--dir", str(tmp_path), "--json"])
    comps[0].proc.wait(5)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["stopped"] == ["kwok"]


def test_detached_component_survives_its_parent(tmp_path: Path) -> None:
    """What `up` relies on: a detached child outlives the Python process that started it."""
    code = (
        "import sys; from pathlib import Path; from qosmos.dev.process import Component; "
        f"c = Component('s', ['sleep', '30'], Path({str(tmp_path / 's.log')!r}), None, detached=True); "
        "print(c.pid, c.ref.ticks)"
    )
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, check=True).stdout.split()
    ref = ProcessRef("s", int(out[0]), int(out[1]))
    try:
        assert ref.alive()
        assert os.getpgid(ref.pid) == ref.pid  # its own process group: `down` stops its children too
    finally:
        stop_all([ref], grace=2)
    assert not ref.alive()


def test_attached_component_dies_with_its_parent(tmp_path: Path) -> None:
    """`DevOptions(detached=False)` (tests calling up() in-process): a SIGKILLed parent leaves no orphan."""
    code = (
        "import time; from pathlib import Path; from qosmos.dev.process import Component; "
        f"c = Component('s', ['sleep', '30'], Path({str(tmp_path / 's.log')!r}), None, detached=False); "
        "print(c.pid, c.ref.ticks, flush=True); time.sleep(30)"
    )
    parent = subprocess.Popen([sys.executable, "-P", "-c", code], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pid, ticks = (int(x) for x in parent.stdout.readline().split())
    ref = ProcessRef("s", pid, ticks)
    try:
        assert ref.alive()
        parent.kill()
        parent.wait(5)
        deadline = time.monotonic() + 5
        while ref.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not ref.alive()
    finally:
        stop_all([ref], grace=1)
