"""The chart rendered the way GitOps users render it (issue 22 §3): the `helm template` command that
helm/README.md gives, run as written there (from the repository root), and the bare command whose
refusal the README explains."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from qosmos.testing.skips import helm_binary

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "helm" / "README.md"


@pytest.fixture(scope="module")
def helm() -> str:
    return helm_binary()


def readme_command() -> list[str]:
    """The indented `helm template ...` line of the README's GitOps section, without its redirection."""
    section = README.read_text().split("## Render without a cluster", 1)[1].split("\n## ", 1)[0]
    (line,) = re.findall(r"^    (helm template .*)$", section, flags=re.M)
    return shlex.split(line.split(">", 1)[0])


def test_the_readme_command_renders_every_component(helm: str) -> None:
    argv = readme_command()
    assert "--kube-version" in argv
    proc = subprocess.run([helm, *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for kind in ("CustomResourceDefinition", "Deployment", "DaemonSet", "Service", "ClusterRole"):
        assert any(k == kind for k, _ in kinds), kind
    namespaced = [d for d in docs if d["kind"] in ("Deployment", "DaemonSet", "Service")]
    assert {d["metadata"].get("namespace") for d in namespaced} == {argv[argv.index("--namespace") + 1]}
    version = argv[argv.index("--kube-version") + 1]
    images = [
        c["image"]
        for d in docs
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
        if "kube-scheduler" in c["image"]
    ]
    # the scheduler image follows the version the user rendered for
    assert images and all(i.endswith(f":v{version}") for i in images), images


def test_without_a_kube_version_helm_refuses_as_the_readme_says(helm: str) -> None:
    proc = subprocess.run(
        [helm, "template", "qosmos", "helm/qosmos"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode != 0
    said = re.search(r"chart requires kubeVersion: (\S+) which is incompatible with Kubernetes (\S+)", proc.stderr)
    assert said, proc.stderr
    assert f"chart requires kubeVersion: {said[1]} which is incompatible with Kubernetes {said[2]}" in " ".join(
        README.read_text().split()
    )
