"""The production scheduler profile: a ``KubeSchedulerConfiguration`` whose ``qosmos-scheduler``
profile calls the qosmos HTTP extender (see extender/README.md, "Kubernetes contract").

Plain data, no cluster access: the test control plane (``qosmos.testing``), the scheduling
benchmark and a deployment all build the same profile here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

GPU_RESOURCE = "nvidia.com/gpu"
SCHEDULER_NAME = "qosmos-scheduler"
# kube-scheduler multiplies an extender's 0-10 score by weight x 10: a planned node then leads
# by >= 400, more than its own plugin scores can move (<= 200).
EXTENDER_WEIGHT = 10
# kube-scheduler stops filtering once this share of nodes is feasible (0: its adaptive default,
# 38% at 1,523 nodes). The extender adds a round trip per pod, and its shortlist makes a wide
# window matter less: at 20% openb pods bind ~1.5x faster for slightly looser packing
# (extender/README.md, "Throughput").
PERCENTAGE_OF_NODES_TO_SCORE = 20


@dataclass(frozen=True, slots=True)
class ExtenderClientTLS:
    """kube-scheduler's side of an HTTPS extender (``tlsConfig``): its client certificate and key,
    and the CA that signed the extender's certificate."""

    cert_file: str
    key_file: str
    ca_file: str
    server_name: str | None = None  # when the URL's host is not in the extender's certificate

    def as_tls_config(self) -> dict[str, Any]:
        out: dict[str, Any] = {"certFile": self.cert_file, "keyFile": self.key_file, "caFile": self.ca_file}
        if self.server_name:
            out["serverName"] = self.server_name
        return out


def scheduler_config(
    scheduler_name: str = "default-scheduler",
    extenders: list[dict[str, Any]] | None = None,
    kubeconfig: str | None = None,
    percentage_of_nodes_to_score: int | None = None,
    leader_election: dict[str, Any] | None = None,
) -> str:
    """A ``kubescheduler.config.k8s.io/v1`` config with one profile; leader election off unless
    ``leader_election`` (its ``leaderElection`` block: replicas of a Deployment, the Helm chart)."""
    profile: dict[str, Any] = {"schedulerName": scheduler_name}
    if percentage_of_nodes_to_score is not None:
        profile["percentageOfNodesToScore"] = percentage_of_nodes_to_score
    cfg: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": dict(leader_election) if leader_election else {"leaderElect": False},
        "profiles": [profile],
    }
    if kubeconfig:
        cfg["clientConnection"] = {"kubeconfig": kubeconfig}
    if extenders:
        cfg["extenders"] = extenders
    return yaml.safe_dump(cfg, sort_keys=False)


def extender_entry(
    extender_url: str,
    ignorable: bool = True,
    weight: int = EXTENDER_WEIGHT,
    tls: ExtenderClientTLS | None = None,
    http_timeout: str = "5s",
) -> dict[str, Any]:
    """The ``extenders`` entry for the qosmos extender at ``extender_url`` (https:// needs ``tls``)."""
    https = extender_url.startswith("https://")
    if https and tls is None:
        raise ValueError("an https:// extender needs the scheduler's client certificate (tls)")
    if tls is not None and not https:
        raise ValueError("client certificates need an https:// extender URL")
    ext: dict[str, Any] = {
        "urlPrefix": extender_url,
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "weight": weight,
        "nodeCacheCapable": True,
        "ignorable": ignorable,
        "enableHTTPS": https,
        "httpTimeout": http_timeout,
        "managedResources": [{"name": GPU_RESOURCE, "ignoredByScheduler": False}],
    }
    if tls is not None:
        ext["tlsConfig"] = tls.as_tls_config()
    return ext


def qosmos_scheduler_config(
    extender_url: str,
    ignorable: bool = True,
    weight: int = EXTENDER_WEIGHT,
    percentage_of_nodes_to_score: int | None = PERCENTAGE_OF_NODES_TO_SCORE,
    scheduler_name: str = SCHEDULER_NAME,
    tls: ExtenderClientTLS | None = None,
    kubeconfig: str | None = None,
    leader_election: dict[str, Any] | None = None,
) -> str:
    """Config for a second scheduler ``qosmos-scheduler`` calling the qosmos HTTP(S) extender."""
    return scheduler_config(
        scheduler_name,
        [extender_entry(extender_url, ignorable, weight, tls)],
        kubeconfig=kubeconfig,
        percentage_of_nodes_to_score=percentage_of_nodes_to_score,
        leader_election=leader_election,
    )


def leader_election(name: str, namespace: str) -> dict[str, Any]:
    """The ``leaderElection`` block of replicated schedulers: a Lease ``name`` in ``namespace``."""
    return {"leaderElect": True, "resourceLock": "leases", "resourceName": name, "resourceNamespace": namespace}
