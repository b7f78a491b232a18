"""The node tier: a real control plane plus one real kubelet node (containerd, runc, CNI bridge).

Skips only where the host cannot run a node (not root, no cgroup cpuset, no overlayfs) or the
Go toolchain needed to build the binaries is absent, and says so; in CI those fail instead.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from qosmos.testing.controlplane import ControlPlane, binaries_present
from qosmos.testing.node import APISERVER_ARGS, Node, artefacts_missing, host_unsupported
from qosmos.testing.skips import skip_or_fail

pytestmark = pytest.mark.node


@pytest.fixture(scope="session")
def node_cluster() -> Iterator[tuple[ControlPlane, Node]]:
    why = host_unsupported()
    if why:
        skip_or_fail(f"host cannot run a kubelet node: {why}")
    have_go = shutil.which("go") is not None or os.path.exists("/usr/local/go/bin/go")
    if not have_go and (not binaries_present() or any("kubelet" in m or ".oci.tar" in m for m in artefacts_missing())):
        skip_or_fail("Go toolchain absent: cannot build the kubelet/control plane (hack/node/build.sh)")
    with ControlPlane(extra_apiserver_args=APISERVER_ARGS, start_default_scheduler=False) as cp, Node(cp) as node:
        print(f"\nnode timings: {json.dumps({k: round(v, 1) for k, v in node.timings.items()})}")
        yield cp, node
    # the node is stopped: sysctls, iptables, routes, addresses, links, netns and cgroups as before it
    assert node.leftovers == [], f"the node left the host changed: {node.leftovers}"
    print("\nhost state after the node: as before it (sysctls, iptables, routes, addresses, links)")


@pytest.fixture
def node(node_cluster: tuple[ControlPlane, Node]) -> Iterator[Node]:
    """The node, with every pod created by the test deleted afterwards."""
    _, n = node_cluster
    yield n
    n.cp.kubectl("delete", "pods", "--all", "-n", "default", "--grace-period=0", "--force", "--wait=true",
                 check=False, timeout=60)  # fmt: skip


class Agent:
    """``qosmos sidecar run`` as a subprocess (so it can be SIGKILLed like a real DaemonSet pod)."""

    def __init__(self, node: Node, workdir: Path, *args: str) -> None:
        self.node, self.args, self.log_path = node, list(args), workdir / "agent.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Agent:
        argv = [sys.executable, "-m", "qosmos", "sidecar", "run", "--node", self.node.name,
                "--kubeconfig", str(self.node.cp.kubeconfig_path), *self.args]  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            self.proc.wait(20)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.is_file() else ""


@pytest.fixture
def agent(node: Node, tmp_path: Path) -> Iterator[Callable[..., Agent]]:
    started: list[Agent] = []

    def start(*args: str) -> Agent:
        a = Agent(node, tmp_path, *args).start()
        started.append(a)
        return a

    yield start
    for a in started:
        a.kill(signal.SIGTERM)
