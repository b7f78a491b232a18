"""The operator deletes a gang pod with the pod's own grace period (issue 20 §2), on a real apiserver:
a bound pod is then only marked for deletion, with its terminationGracePeriodSeconds, until its kubelet
is done (here there is none, so it stays); a force delete would have removed it at once."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from qosmos.operator.kube import Kube


def test_delete_pod_keeps_the_pods_grace_period(k8s_api: Any, k8s_namespace: str) -> None:
    v1 = client.CoreV1Api(k8s_api)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gang-0", "labels": {"qosmos.io/job": "j"}},
        "spec": {
            "nodeName": "qosmos-no-kubelet",  # bound: deletion waits for a kubelet that never answers
            "terminationGracePeriodSeconds": 77,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    v1.create_namespaced_pod(k8s_namespace, pod)
    kube = Kube(k8s_api, k8s_namespace)
    kube.delete_pod(k8s_namespace, "gang-0")
    got = v1.read_namespaced_pod("gang-0", k8s_namespace)
    assert got.metadata.deletion_timestamp is not None and got.metadata.deletion_grace_period_seconds == 77
    kube.delete_pod(k8s_namespace, "gang-0", grace_seconds=0)  # what only a caller that means it asks
    with pytest.raises(ApiException) as e:
        v1.read_namespaced_pod("gang-0", k8s_namespace)
    assert e.value.status == 404
    kube.delete_pod(k8s_namespace, "gang-0")  # gone already: no error


def test_a_dry_run_returns_the_apiservers_refusal_and_stores_nothing(k8s_api: Any, k8s_namespace: str) -> None:
    """Issue 20 §2: the operator's dry run of a gang pod, on a real apiserver."""
    v1 = client.CoreV1Api(k8s_api)
    kube = Kube(k8s_api, k8s_namespace)

    def pod(container: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "probe-0", "namespace": k8s_namespace},
            "spec": {"containers": [{"name": container, "image": "registry.k8s.io/pause:3.10"}]},
        }

    assert kube.dry_run_pod(pod("main")) is None
    refusal = kube.dry_run_pod(pod("Not_A_DNS_Label"))
    assert refusal is not None and "spec.containers[0].name" in refusal and "Invalid value" in refusal
    assert v1.list_namespaced_pod(k8s_namespace).items == []  # a dry run stores nothing
