"""Fail-open made safe (issue 22 §2): the extender's hard rules (VirtualCluster nodes, GPU models) are
written into the pods the operator creates as required node affinity, so that kube-scheduler keeps
them when an ignorable extender is down; the template's own affinity is ANDed, never dropped."""

from __future__ import annotations

from typing import Any

import pytest
from qosmos.extender.cache import (
    ANN_GPU_MODELS,
    LABEL_GPU_MODEL,
    LABEL_VC,
    hard_rule_terms,
    node_from_object,
    pod_info,
    require_node_terms,
)
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.inference import Mode
from qosmos.operator.crds import InferenceServiceSpec
from qosmos.operator.inference import GPU_NODE_LABELS, replica_pod
from qosmos.operator.translate import template_allows

ZONE = "topology.kubernetes.io/zone"


def node(name: str, vc: str | None, model: str, zone: str = "z1") -> dict[str, Any]:
    labels = {LABEL_GPU_MODEL: model, ZONE: zone, GPU_NODE_LABELS[0]: "true"}
    if vc is not None:
        labels[LABEL_VC] = vc
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "256Gi"}},
    }


NODES = [
    node("a-v100", "a", "V100M32"),
    node("a-a100", "a", "A100"),
    node("a-a100-z2", "a", "A100", zone="z2"),
    node("b-a100", "b", "A100"),
    node("free-a100", None, "A100"),  # no VC label: VC "default"
    node("free-v100", None, "V100M32"),
]


def allowed_by_affinity(pspec: dict[str, Any]) -> set[str]:
    return {n["metadata"]["name"] for n in NODES if template_allows(pspec, n, gpus=False)}


def allowed_by_extender(labels: dict[str, str], annotations: dict[str, str]) -> set[str]:
    """The extender's own eligibility for such a pod: what the affinity must reproduce exactly."""
    pod = {"metadata": {"name": "p", "namespace": "ns", "labels": labels, "annotations": annotations}, "spec": {}}
    info = pod_info(pod)
    cluster = ClusterState([node_from_object(n) for n in NODES])
    mask = cluster.eligible(info.vc, info.gpu_models)
    return {n["metadata"]["name"] for n, ok in zip(NODES, mask, strict=True) if ok}


@pytest.mark.parametrize(
    ("labels", "annotations"),
    [
        ({LABEL_VC: "a"}, {}),
        ({LABEL_VC: "a"}, {ANN_GPU_MODELS: "A100|H100"}),
        ({LABEL_VC: "default"}, {ANN_GPU_MODELS: "A100"}),
        ({LABEL_VC: "default"}, {}),
        ({}, {ANN_GPU_MODELS: "V100M32"}),
    ],
)
def test_the_written_affinity_allows_exactly_the_nodes_the_extender_would(
    labels: dict[str, str], annotations: dict[str, str]
) -> None:
    pspec = {"affinity": require_node_terms(None, hard_rule_terms(labels, annotations))}
    assert allowed_by_affinity(pspec) == allowed_by_extender(labels, annotations)


def test_no_rule_writes_nothing() -> None:
    assert hard_rule_terms({}, {}) == []
    assert require_node_terms({"podAntiAffinity": {"x": 1}}, []) == {"podAntiAffinity": {"x": 1}}


def test_the_templates_own_terms_are_anded_with_the_rules_not_dropped() -> None:
    zone_or_v100 = [
        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z2"]}]},
        {"matchExpressions": [{"key": LABEL_GPU_MODEL, "operator": "In", "values": ["V100M32"]}]},
    ]
    own = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": zone_or_v100},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": zone_or_v100[0]}],
        },
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
    }
    out = require_node_terms(own, hard_rule_terms({LABEL_VC: "a"}, {}))
    # (z2 OR V100) AND VC a: a-a100-z2 and a-v100; not b's or the unlabelled V100
    assert allowed_by_affinity({"affinity": out}) == {"a-a100-z2", "a-v100"}
    assert out["podAntiAffinity"] == own["podAntiAffinity"]
    assert (
        out["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        == own["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    )
    assert own["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == zone_or_v100


def _service(template: dict[str, Any]) -> tuple[dict[str, Any], InferenceServiceSpec]:
    obj = {"metadata": {"name": "svc", "namespace": "ns", "uid": "u"}, "spec": {"modelType": "ResNet50"}}
    spec = InferenceServiceSpec.model_validate({"modelType": "ResNet50", "template": template})
    return obj, spec


def test_replicas_carry_the_rules_of_their_template_in_both_modes() -> None:
    template = {
        "metadata": {"labels": {LABEL_VC: "a"}, "annotations": {ANN_GPU_MODELS: "A100"}},
        "spec": {
            "containers": [{"name": "serve", "image": "srv"}],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["z1"]}]}]
                    }
                }
            },
        },
    }
    obj, spec = _service(template)
    gpu = replica_pod(obj, spec, Mode.GPU, 0)
    assert allowed_by_affinity(gpu["spec"]) == {"a-a100"}  # VC a, A100, the template's zone z1
    cpu = replica_pod(obj, spec, Mode.CPU, 0)
    # a CPU replica: also confined to GPU nodes (SODA), which the template's own affinity used to drop
    assert allowed_by_affinity(cpu["spec"]) == {"a-a100"}
    # without a GPU-model rule: the CPU replica still keeps to GPU nodes (either GPU label), the GPU one
    # goes wherever the template and the VC allow (kube-scheduler's resource fit does the rest)
    template["metadata"]["annotations"] = {}
    obj, spec = _service(template)
    cpu_only = {"metadata": {"name": "a-cpu", "labels": {LABEL_VC: "a", ZONE: "z1"}}, "status": {}}
    cpu = replica_pod(obj, spec, Mode.CPU, 0)
    assert not template_allows(cpu["spec"], cpu_only, gpus=False)
    assert allowed_by_affinity(cpu["spec"]) == {"a-a100", "a-v100"}
    assert template_allows(replica_pod(obj, spec, Mode.GPU, 0)["spec"], cpu_only, gpus=False)
