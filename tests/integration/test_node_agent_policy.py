"""The node agent's least privilege, enforced by the apiserver (issue 22 §2): the chart's
ValidatingAdmissionPolicy, applied to the real control plane as `helm template` renders it, lets the
agent's token (bound to its pod, so it carries its node's name) change only pods bound to that node,
and only the annotation the agent writes. Its ClusterRole alone would let it patch any pod."""

from __future__ import annotations

import contextlib
import copy
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from qosmos.sidecar.state import BEST_CORES_ANNOTATION
from qosmos.testing.controlplane import ControlPlane
from qosmos.testing.node import wait_for
from qosmos.testing.skips import helm_binary

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RELEASE, NAMESPACE = "vap", "qosmos-vap"
AGENT = f"{RELEASE}-qosmos-node-agent"
KINDS = {
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


def _rendered() -> list[dict[str, Any]]:
    proc = subprocess.run(
        [helm_binary(), "template", RELEASE, str(ROOT / "helm" / "qosmos"), "--namespace", NAMESPACE,
         "--kube-version", "1.34.4", "--show-only", "templates/nodeagent.yaml",
         "--show-only", "templates/nodeagent-policy.yaml"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] in KINDS]


def _pod(name: str, node: str, sa: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}, "annotations": {"keep": "me"}},
        "spec": {
            "nodeName": node,  # bound without a scheduler; no kubelet runs it, which changes nothing here
            "serviceAccountName": sa,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


class Policy:
    def __init__(self, cp: ControlPlane, api: Any) -> None:
        from kubernetes import client

        self.cp, self.api = cp, api
        self.v1 = client.CoreV1Api(api)
        self.ns = f"t-{uuid.uuid4().hex[:8]}"
        self.nodes = [f"vap-node-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)]

    def token(self, bound_to: str | None) -> str:
        spec: dict[str, Any] = {"expirationSeconds": 600}
        if bound_to is not None:
            pod = self.v1.read_namespaced_pod(bound_to, NAMESPACE)
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": bound_to, "uid": pod.metadata.uid}
        req = self.v1.create_namespaced_service_account_token(AGENT, NAMESPACE, {"spec": spec})
        return str(req.status.token)

    def as_agent(self, token: str) -> Any:
        from kubernetes import client

        cfg = copy.copy(self.api.configuration)
        cfg.cert_file = cfg.key_file = None
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        return client.CoreV1Api(client.ApiClient(cfg))

    @staticmethod
    def patch(v1: Any, ns: str, name: str, body: dict[str, Any]) -> tuple[int, str]:
        from kubernetes.client.rest import ApiException

        try:
            v1.patch_namespaced_pod(name, ns, body)
            return 200, ""
        except ApiException as exc:
            return exc.status, json.loads(exc.body or "{}").get("message", str(exc))


@pytest.fixture(scope="module")
def policy(control_plane: ControlPlane) -> Iterator[Policy]:
    from kubernetes.client.rest import ApiException

    p = Policy(control_plane, control_plane.api_client())
    docs = _rendered()
    assert {d["kind"] for d in docs} == KINDS
    f = Path(control_plane.workdir) / "vap.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    for ns in (NAMESPACE, p.ns):
        p.v1.create_namespace({"metadata": {"name": ns}})
    for n in p.nodes:
        p.v1.create_node({"metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}}})
    control_plane.kubectl("apply", "-f", str(f))
    wait_for(lambda: _sa_ready(p), 30, what="the agent's and default ServiceAccounts")
    p.v1.create_namespaced_pod(NAMESPACE, _pod("agent", p.nodes[0], AGENT))
    for i, n in enumerate(p.nodes):
        p.v1.create_namespaced_pod(p.ns, _pod(f"work-{i}", n))
    try:
        yield p
    finally:
        control_plane.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", str(f), check=False)
        for ns in (NAMESPACE, p.ns):
            try:
                p.v1.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
                p.v1.delete_namespace(ns)
            except ApiException:
                pass
        for n in p.nodes:
            with contextlib.suppress(ApiException):
                p.v1.delete_node(n)


def _sa_ready(p: Policy) -> bool:
    from kubernetes.client.rest import ApiException

    try:
        p.v1.read_namespaced_service_account(AGENT, NAMESPACE)
        p.v1.read_namespaced_service_account("default", p.ns)
        return True
    except ApiException:
        return False


def _refused(v1: Any, ns: str, name: str, body: dict[str, Any]) -> tuple[int, str] | None:
    """The refusal of a patch, or None while it is admitted (before the apiserver has loaded the policy;
    a patch admitted then is harmless here: each test asserts on its own later patches)."""
    status, msg = Policy.patch(v1, ns, name, body)
    return None if status == 200 else (status, msg)


def test_the_agent_changes_only_its_own_nodes_pods_and_only_its_annotation(policy: Policy) -> None:
    agent = policy.as_agent(policy.token(bound_to="agent"))
    mine, other = "work-0", "work-1"  # work-0 is on the agent pod's node
    ours = {"metadata": {"annotations": {BEST_CORES_ANNOTATION: "4"}}}
    # RBAC alone allows all of it: the policy takes effect once the apiserver has loaded it
    status, msg = wait_for(lambda: _refused(agent, policy.ns, other, ours), 30, what="the policy refusing")
    assert status == 403 and "may change only pods bound to that node" in msg and policy.nodes[0] in msg, msg
    assert Policy.patch(agent, policy.ns, mine, ours) == (200, "")
    got = policy.v1.read_namespaced_pod(mine, policy.ns).metadata.annotations
    assert got == {"keep": "me", BEST_CORES_ANNOTATION: "4"}
    for body in (
        {"metadata": {"annotations": {"keep": "changed"}}},
        {"metadata": {"annotations": {"qosmos.io/other": "x"}}},
        {"metadata": {"labels": {"app": "moved"}}},
        {"spec": {"activeDeadlineSeconds": 5}},
    ):
        status, msg = Policy.patch(agent, policy.ns, mine, body)
        assert status == 403 and f"only the {BEST_CORES_ANNOTATION} annotation" in msg, (body, msg)


def test_a_token_without_a_node_is_refused_and_others_are_untouched(policy: Policy) -> None:
    unbound = policy.as_agent(policy.token(bound_to=None))
    ours = {"metadata": {"annotations": {BEST_CORES_ANNOTATION: "2"}}}
    status, msg = wait_for(lambda: _refused(unbound, policy.ns, "work-0", ours), 30, what="the policy refusing")
    assert status == 403 and "no node name in its credentials" in msg, msg
    # the policy matches the agent's identity only: an admin still patches any pod
    admin = policy.v1
    assert Policy.patch(admin, policy.ns, "work-1", {"metadata": {"labels": {"app": "admin"}}}) == (200, "")
