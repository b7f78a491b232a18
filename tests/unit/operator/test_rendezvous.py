"""Issue 20: gangs a distributed framework can run (rendezvous variables, hostnames under a headless
Service, rank 0's port), the template's constraints kept and told to the core (affinity merge, nodeSelector,
node affinity, tolerations), unhealthy nodes left alone, ``status.observedGeneration``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.placement import get_placer
from qosmos.extender.core.types import PlacementRequest
from qosmos.operator import crds
from qosmos.operator.crds import DLJobSpec
from qosmos.operator.durations import Durations
from qosmos.operator.reconcile import DL, Reconciler, confine
from qosmos.operator.translate import (
    LABEL_REPLICA_INDEX,
    Gang,
    allowed_nodes,
    assign_nodes,
    book_cordoned,
    core_nodes,
    gang_pods,
    headless_service,
    job_from_dljob,
    node_usable,
    parse_time,
    template_allows,
    tolerates,
    unusable_because,
)
from qosmos.testing.fakekube import FakeKube
from qosmos.testing.fakekube import gpu_node as node

T0 = parse_time("2026-01-02T03:04:05Z") or 0.0


def dljob(name: str = "j", ns: str = "team", **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"virtualCluster": "vc-a", "gpus": 4}
    base.update(spec)
    return {
        "apiVersion": "qosmos.io/v1alpha1",
        "kind": "DLJob",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"uid-{name}",
            "generation": 1,
            "creationTimestamp": "2026-01-02T03:04:05Z",
        },
        "spec": base,
    }


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env") or []}


# --------------------------------------------------------------------------- rendezvous


def test_every_container_is_told_the_rendezvous() -> None:
    obj = dljob(
        gpus=8,
        gpusPerNode=4,
        template={
            "spec": {
                "initContainers": [{"name": "wait", "image": "busybox"}],
                "containers": [{"name": "train", "image": "img"}, {"name": "sidecar", "image": "log"}],
            }
        },
    )
    pods = gang_pods(obj, Gang(("n0", "n1"), (4, 4)), attempt=2)
    for i, p in enumerate(pods):
        s = p["spec"]
        for c in [*s["containers"], *s["initContainers"]]:
            assert env_of(c) == {
                "MASTER_ADDR": "j-0.j.team.svc",
                "MASTER_PORT": "29500",
                "WORLD_SIZE": "2",
                "RANK": str(i),
                "PET_NNODES": "2",
                "PET_NPROC_PER_NODE": "4",
                "PET_NODE_RANK": str(i),
                "PET_MASTER_ADDR": "j-0.j.team.svc",
                "PET_MASTER_PORT": "29500",
                "JAX_COORDINATOR_ADDRESS": "j-0.j.team.svc:29500",
                "JAX_NUM_PROCESSES": "2",
                "JAX_PROCESS_ID": str(i),
                "QOSMOS_REPLICAS": "2",
                "QOSMOS_REPLICA_INDEX": str(i),
                "QOSMOS_ATTEMPT": "2",
            }, c["name"]


def test_rendezvous_port_and_procs_per_pod_come_from_the_spec() -> None:
    obj = dljob(gpus=2, gpusPerNode=1, rendezvous={"port": 23456, "procsPerPod": 3})
    pods = gang_pods(obj, Gang(("n0", "n1"), (1, 1)), attempt=0)
    env = env_of(pods[1]["spec"]["containers"][0])
    assert (env["MASTER_PORT"], env["PET_MASTER_PORT"], env["PET_NPROC_PER_NODE"]) == ("23456", "23456", "3")
    assert env["JAX_COORDINATOR_ADDRESS"] == "j-0.j.team.svc:23456"
    # uneven gangs: each pod runs one process per GPU of its own; a CPU pod one
    uneven = gang_pods(dljob(gpus=12), Gang(("n0", "n1"), (8, 4)), attempt=0)
    assert [env_of(p["spec"]["containers"][0])["PET_NPROC_PER_NODE"] for p in uneven] == ["8", "4"]
    (cpu,) = gang_pods(dljob(gpus=0, kind="cpu", cpus=4), Gang(("n0",), (0,)), attempt=0)
    assert env_of(cpu["spec"]["containers"][0])["PET_NPROC_PER_NODE"] == "1"


def test_a_value_the_template_sets_wins_and_may_refer_to_ours() -> None:
    own = [{"name": "MASTER_PORT", "value": "1234"}, {"name": "URL", "value": "tcp://$(MASTER_ADDR):$(MASTER_PORT)"}]
    obj = dljob(gpus=2, gpusPerNode=1, template={"spec": {"containers": [{"name": "c", "image": "i", "env": own}]}})
    env = gang_pods(obj, Gang(("n0", "n1"), (1, 1)), attempt=0)[0]["spec"]["containers"][0]["env"]
    names = [e["name"] for e in env]
    assert names.count("MASTER_PORT") == 1 and env_of({"env": env})["MASTER_PORT"] == "1234"
    assert names[-2:] == ["MASTER_PORT", "URL"]  # the template's after ours: $(MASTER_ADDR) expands
    assert env_of({"env": env})["MASTER_ADDR"] == "j-0.j.team.svc"
    assert obj["spec"]["template"]["spec"]["containers"][0]["env"] == own  # the DLJob is not mutated


def test_pods_have_hostnames_under_the_service_and_their_index_label() -> None:
    obj = dljob(gpus=6, gpusPerNode=2, template={"spec": {"hostname": "mine", "containers": [{"name": "c"}]}})
    pods = gang_pods(obj, Gang(("n0", "n1", "n2"), (2, 2, 2)), attempt=4)
    assert [p["metadata"]["name"] for p in pods] == ["j-4-0", "j-4-1", "j-4-2"]  # the name keeps its attempt
    assert [p["spec"]["hostname"] for p in pods] == ["j-0", "j-1", "j-2"]  # the hostname does not
    assert {p["spec"]["subdomain"] for p in pods} == {"j"}
    assert [p["metadata"]["labels"][LABEL_REPLICA_INDEX] for p in pods] == ["0", "1", "2"]


def test_the_headless_service_is_owned_and_publishes_pods_before_they_are_ready() -> None:
    obj = dljob(rendezvous={"port": 12345})
    svc = headless_service(obj)
    assert svc["metadata"]["name"] == "j" and svc["metadata"]["namespace"] == "team"
    (owner,) = svc["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("DLJob", "j", "uid-j", True)
    s = svc["spec"]
    assert s["clusterIP"] == "None" and s["publishNotReadyAddresses"] is True
    assert s["selector"] == {"qosmos.io/job": "j"}
    assert [(p["port"], p["targetPort"]) for p in s["ports"]] == [(12345, 12345)]
    # the pods it selects: every attempt's (it outlives them)
    pods = gang_pods(obj, Gang(("n0", "n1"), (2, 2)), attempt=1)
    assert all(p["metadata"]["labels"].items() >= s["selector"].items() for p in pods)
    assert headless_service(dljob())["spec"]["ports"][0]["port"] == 29500


def test_the_rendezvous_port_is_declared_on_rank_0_only_and_never_twice() -> None:
    obj = dljob(gpus=4, gpusPerNode=2, template={"spec": {"containers": [{"name": "a"}, {"name": "b"}]}})
    pods = gang_pods(obj, Gang(("n0", "n1"), (2, 2)), attempt=0)
    assert pods[0]["spec"]["containers"][0]["ports"] == [
        {"containerPort": 29500, "protocol": "TCP", "name": "rendezvous"}
    ]
    assert "ports" not in pods[0]["spec"]["containers"][1] and "ports" not in pods[1]["spec"]["containers"][0]
    declared = [{"name": "dist", "containerPort": 29500}, {"name": "rendezvous", "containerPort": 8080}]
    tmpl = {"spec": {"containers": [{"name": "a", "ports": declared}]}}
    (rank0, _) = gang_pods(dljob(gpus=4, gpusPerNode=2, template=tmpl), Gang(("n0", "n1"), (2, 2)), attempt=0)
    assert rank0["spec"]["containers"][0]["ports"] == declared  # the template's own 29500 is the one
    tmpl["spec"]["containers"][0]["ports"] = declared[1:]
    (rank0, _) = gang_pods(dljob(gpus=4, gpusPerNode=2, template=tmpl), Gang(("n0", "n1"), (2, 2)), attempt=0)
    assert rank0["spec"]["containers"][0]["ports"] == [*declared[1:], {"containerPort": 29500, "protocol": "TCP"}]


# --------------------------------------------------------------------------- the template's constraints


def test_the_node_pin_is_merged_into_the_templates_affinity() -> None:
    anti = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
    preferred = [{"weight": 1, "preference": {"matchExpressions": [{"key": "z", "operator": "Exists"}]}}]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": preferred,
        },
        "podAntiAffinity": anti,
    }
    obj = dljob(gpus=4, gpusPerNode=2, template={"spec": {"affinity": affinity, "containers": [{"name": "c"}]}})
    pods = gang_pods(obj, Gang(("n0", "n1"), (2, 2)), attempt=0)
    for i, p in enumerate(pods):
        a = p["spec"]["affinity"]
        assert a["podAntiAffinity"] == anti
        assert a["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == preferred
        terms = a["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        pin = {"key": "metadata.name", "operator": "In", "values": [f"n{i}"]}
        assert terms == [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": [z]}], "matchFields": [pin]}
            for z in ("a", "b")
        ]  # each OR-ed term ANDed with the pin: the template's zones, on the core's node
    assert obj["spec"]["template"]["spec"]["affinity"] == affinity  # the DLJob is not mutated
    only_pods = {"podAffinity": {"x": 1}}
    (pod,) = gang_pods(dljob(gpus=2, template={"spec": {"affinity": only_pods}}), Gang(("n5",), (2,)), 0)
    assert pod["spec"]["affinity"]["podAffinity"] == {"x": 1}
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n5"]}]}]
    }


def test_tolerations_match_as_kubernetes_matches_them() -> None:
    taint = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    assert tolerates([{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}], taint)
    assert tolerates([{"key": "dedicated", "value": "ml"}], taint)  # Equal by default, any effect
    assert not tolerates([{"key": "dedicated", "value": "web"}], taint)
    assert tolerates([{"key": "dedicated", "operator": "Exists"}], taint)
    assert not tolerates([{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}], taint)
    assert not tolerates([{"key": "other", "operator": "Exists"}], taint)
    assert tolerates([{"operator": "Exists"}], taint)  # empty key with Exists: every taint
    assert not tolerates([], taint)


def test_the_template_narrows_the_nodes_it_may_run_on() -> None:
    nodes = [
        node("a0", zone="a"),
        node("b0", zone="b", taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]),
        node("b1", zone="b", size="9"),
        node("c0", zone="c", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]),
        node("d0", taints=[{"key": "soft", "value": "x", "effect": "PreferNoSchedule"}]),
    ]

    def allowed(gpus: int = 4, **pspec: Any) -> list[str]:
        spec = DLJobSpec.model_validate({"virtualCluster": "v", "gpus": gpus, "template": {"spec": pspec}})
        return [n["metadata"]["name"] for n, ok in zip(nodes, allowed_nodes(spec, nodes), strict=True) if ok]

    # untolerated NoSchedule taints keep every pod off; a GPU pod tolerates nvidia.com/gpu (and says so)
    assert allowed() == ["a0", "b1", "c0", "d0"]
    assert allowed(gpus=0) == ["a0", "b1", "d0"]
    assert allowed(tolerations=[{"key": "dedicated", "operator": "Exists"}]) == ["a0", "b0", "b1", "c0", "d0"]
    assert allowed(nodeSelector={"zone": "b"}) == ["b1"]
    req = {"key": "zone", "operator": "In", "values": ["a", "c"]}

    def terms(*ts: dict[str, Any]) -> dict[str, Any]:
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(ts)}}}

    assert allowed(affinity=terms({"matchExpressions": [req]})) == ["a0", "c0"]
    assert allowed(affinity=terms({"matchExpressions": [{**req, "operator": "NotIn"}]})) == ["b1", "d0"]
    assert allowed(affinity=terms({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]})) == ["d0"]
    assert allowed(affinity=terms({"matchExpressions": [{"key": "size", "operator": "Gt", "values": ["8"]}]})) == ["b1"]
    assert allowed(affinity=terms({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["d0"]}]})) == [
        "d0"
    ]
    either = terms(  # terms are ORed, a term's requirements ANDed
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "Exists"}, {"key": "size", "operator": "Exists"}]},
    )
    assert allowed(affinity=either) == ["a0", "b1"]
    assert allowed(affinity=terms({})) == []  # an empty term matches no node
    gpu_pod = gang_pods(dljob(gpus=2), Gang(("c0",), (2,)), attempt=0)[0]["spec"]
    assert gpu_pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    assert template_allows({"tolerations": gpu_pod["tolerations"]}, nodes[3], False)  # what it carries is enough
    assert template_allows(gpu_pod, nodes[3], True) and not template_allows(gpu_pod, nodes[0], True)  # and its pin


def test_unhealthy_nodes_are_not_placed_on() -> None:
    ready, cordoned, not_ready, unknown, unreachable = (node(n) for n in ("ok", "cord", "nr", "unk", "unr"))
    cordoned["spec"]["unschedulable"] = True
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    unknown["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    unreachable["spec"]["taints"] = [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}]
    nodes = [ready, cordoned, not_ready, unknown, unreachable]
    assert [node_usable(n) for n in nodes] == [True, False, False, False, False]
    assert [unusable_because(n) for n in nodes] == [None, "cordoned", "not Ready", "not Ready", "tainted unreachable"]
    cluster = ClusterState(core_nodes(nodes, assign_nodes(nodes, [])))
    book_cordoned(cluster, nodes)
    assert cluster.free_gpus.tolist() == [8, 0, 0, 0, 0]
    req = PlacementRequest(8)
    alloc = get_placer("consolidate").place(req, cluster)
    assert alloc is not None and [cluster.nodes[g.node].name for g in alloc.grants] == ["ok"]
    assert node_usable({"metadata": {"name": "fresh"}})  # no Ready condition reported yet


def _dl(obj: dict[str, Any]) -> DL:
    return DL(obj, DLJobSpec.model_validate(obj["spec"]), job_from_dljob(obj))


def test_the_core_is_told_the_templates_nodes() -> None:
    nodes = [node("n0", zone="a"), node("n1", zone="b"), node("n2", zone="b"), node("n3", zone="c", gpus=4)]
    cluster = ClusterState(core_nodes(nodes, {n["metadata"]["name"]: "vc-a" for n in nodes}))
    free = _dl(dljob("free", gpus=8))
    zone_b = _dl(dljob("zb", gpus=8, template={"spec": {"nodeSelector": {"zone": "b"}}}))
    zone_b2 = _dl(dljob("zb2", gpus=16, template={"spec": {"nodeSelector": {"zone": "b"}}}))
    zone_c = _dl(dljob("zc", gpus=8, template={"spec": {"nodeSelector": {"zone": "d"}}}))
    confine([free, zone_b, zone_b2, zone_c], nodes, cluster)
    assert free.job.pool is None  # nothing narrows it: no pool, the core's fast path
    assert zone_b.job.pool == zone_b2.job.pool == "template:team/zb"  # one pool per distinct constraint
    assert cluster.pools["template:team/zb"].tolist() == [False, True, True, False]
    placer = get_placer("consolidate")
    for _ in range(2):  # the core places it only on zone b, whatever else is free
        alloc = placer.place(PlacementRequest.for_job(zone_b.job), cluster)
        assert alloc is not None and [cluster.nodes[g.node].name for g in alloc.grants] in (["n1"], ["n2"])
        cluster.allocate(alloc)
    assert placer.place(PlacementRequest.for_job(zone_b.job), cluster) is None  # zone b is full, n0 is not
    assert placer.place(PlacementRequest.for_job(free.job), cluster) is not None
    # a template no node satisfies: the core says it can never fit, naming the pool
    assert "template:team/zc" in (cluster.could_ever_fit(PlacementRequest.for_job(zone_c.job)) or "")
    # within a partition's own pool (SODA's arrays) the template's pool narrows further
    cluster.define_pool("vc-a/gpu-4", np.array([True, True, False, False]))
    req = PlacementRequest.for_job(zone_b.job, pool="vc-a/gpu-4")
    assert req.pool == "vc-a/gpu-4&template:team/zb" and cluster.eligible(None, (), req.pool).tolist() == [
        False,
        True,
        False,
        False,
    ]
    cluster.define_pool("vc-a/gpu-4", np.array([True, False, True, False]))  # redefined: the cache follows
    assert cluster.eligible(None, (), req.pool).tolist() == [False, False, True, False]


# --------------------------------------------------------------------------- a pass


def test_a_pass_places_on_allowed_nodes() -> None:
    tainted = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}
    nodes = [node("n0", taints=[tainted]), node("n1", zone="b"), node("n2", zone="b"), node("n3", zone="c")]
    nodes[1]["spec"]["unschedulable"] = True
    picky = dljob("picky", gpus=16, gpusPerNode=8, template={"spec": {"nodeSelector": {"zone": "b"}}})
    plain = dljob("plain", gpus=8, gpusPerNode=8)
    plain["metadata"]["creationTimestamp"] = "2026-01-02T03:04:00Z"  # first in line
    kube = FakeKube(nodes, [picky, plain])
    rec = Reconciler(kube, durations=Durations(None), clock=lambda: T0 + 10)  # type: ignore[arg-type]
    rep = rec.run_pass()
    # n0 is tainted, n1 cordoned: plain goes to n2 or n3; picky (zone b) cannot start on n2 alone
    assert rep.admitted == ["team/plain"]
    placed = kube.jobs["plain"]["status"]["placement"]["nodeNames"]
    assert placed in (["n2"], ["n3"])
    # one pod: its hostname, but no headless Service (its rank 0 is itself)
    assert not kube.services and {p["spec"]["hostname"] for p in kube.pods.values()} == {"plain-0"}
    cond = kube.jobs["picky"]["status"]["conditions"][0]
    assert cond["status"] == "False" and "its pod template allows 2 of the 4 nodes of vc-a" in cond["message"]
    # every status write names the generation it was decided on, once
    assert kube.jobs["plain"]["status"]["observedGeneration"] == kube.jobs["picky"]["status"]["observedGeneration"] == 1
    rec.run_pass()  # settled: the next pass writes only what changes
    kube.edit("picky", backoffLimit=5)  # generation 2, changed while queued, nothing else moved: said at once
    kube.status_patches.clear()
    rec.run_pass()
    assert kube.status_patches == [("picky", {"observedGeneration": 2})]
    kube.edit("picky", gpus=8)  # generation 3
    nodes[1]["spec"]["unschedulable"] = False
    rec.run_pass()
    assert kube.jobs["picky"]["status"]["observedGeneration"] == 3
    assert kube.jobs["picky"]["status"]["placement"]["nodeNames"] in (["n1"], ["n2"])
    assert not kube.services  # gangs of one pod


def test_a_gang_of_one_pod_is_told_localhost_and_gets_no_service() -> None:
    one = gang_pods(dljob("j", gpus=8), Gang(("n0",), (8,)), attempt=0)
    two = gang_pods(dljob("j", gpus=16, gpusPerNode=8), Gang(("n0", "n1"), (8, 8)), attempt=0)
    (solo,) = one
    env = env_of(solo["spec"]["containers"][0])
    assert (env["MASTER_ADDR"], env["PET_MASTER_ADDR"], env["JAX_COORDINATOR_ADDRESS"]) == (
        "localhost",
        "localhost",
        "localhost:29500",
    )
    assert (solo["spec"]["hostname"], solo["spec"]["subdomain"]) == ("j-0", "j")  # the same names as a gang's
    assert {env_of(p["spec"]["containers"][0])["MASTER_ADDR"] for p in two} == {"j-0.j.team.svc"}
    kube = FakeKube([node("n0"), node("n1")], [dljob("j", gpus=8)])
    rec = Reconciler(kube, durations=Durations(None), clock=lambda: T0 + 1)  # type: ignore[arg-type]
    assert rec.run_pass().admitted == ["team/j"] and len(kube.pods) == 1
    assert not kube.services and kube.service_creates == 0


def test_a_service_of_the_name_that_is_not_the_dljobs_is_said() -> None:
    kube = FakeKube([node("n0"), node("n1")], [dljob("j", gpus=16, gpusPerNode=8)])
    kube.services["j"] = {"metadata": {"name": "j", "ownerReferences": [{"uid": "someone-else"}]}}
    rep = Reconciler(kube, durations=Durations(None), clock=lambda: T0 + 1).run_pass()  # type: ignore[arg-type]
    assert rep.admitted == ["team/j"] and len(kube.pods) == 2  # the gang still starts
    assert [r for _, r, _ in kube.events if r == "ServiceConflict"] == ["ServiceConflict"]


# --------------------------------------------------------------------------- the CRD


def _schema() -> dict[str, Any]:
    return crds.crd(crds.DL_JOB)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_the_crd_refuses_a_template_restarting_always_naming_the_field() -> None:
    tmpl = _schema()["properties"]["spec"]["properties"]["template"]
    assert tmpl["x-kubernetes-preserve-unknown-fields"] is True  # the rest of the template is kept whole
    spec = tmpl["properties"]["spec"]
    assert spec["x-kubernetes-preserve-unknown-fields"] is True
    (rule,) = spec["properties"]["restartPolicy"]["x-kubernetes-validations"]  # on the field: the error names it
    assert rule["rule"] == "self in ['Never', 'OnFailure']" and "must be Never or OnFailure" in rule["message"]
    with pytest.raises(ValueError, match=r"spec\.template\.spec\.restartPolicy 'Always'"):
        DLJobSpec.model_validate({"virtualCluster": "v", "template": {"spec": {"restartPolicy": "Always"}}})
    for ok in ("Never", "OnFailure"):
        DLJobSpec.model_validate({"virtualCluster": "v", "template": {"spec": {"restartPolicy": ok}}})


def test_the_crd_keeps_dljob_names_fit_for_a_service_and_hostnames() -> None:
    import re

    name = _schema()["properties"]["metadata"]["properties"]["name"]
    assert name["maxLength"] + len("-9999") <= 63  # <name>-<index>: a DNS label for gangs below 10,000 pods
    ok = re.compile(name["pattern"])
    assert all(ok.match(n) for n in ("resnet", "bert-large-2", "a"))
    assert not any(ok.match(n) for n in ("7b-train", "bert.large", "Bert", "trailing-", "-lead"))
    rz = _schema()["properties"]["spec"]["properties"]["rendezvous"]
    assert rz["default"] == {} and rz["properties"]["port"]["default"] == 29500
    assert (rz["properties"]["port"]["minimum"], rz["properties"]["port"]["maximum"]) == (1, 65535)
    assert rz["properties"]["procsPerPod"]["minimum"] == 1 and "default" not in rz["properties"]["procsPerPod"]


def test_a_failed_service_create_is_retried_before_the_gang_is_ungated() -> None:
    kube = FakeKube([node("n0"), node("n1")], [dljob("j", gpus=16, gpusPerNode=8)])
    kube.fail_services = 1
    rec = Reconciler(kube, durations=Durations(None), clock=lambda: T0 + 1)  # type: ignore[arg-type]
    assert rec.run_pass().admitted == ["team/j"]
    assert not kube.services and all(p["spec"]["schedulingGates"] for p in kube.pods.values())  # held
    rec.run_pass()
    assert set(kube.services) == {"j"} and not any(p["spec"]["schedulingGates"] for p in kube.pods.values())
    creates = kube.service_creates
    rec.run_pass()  # known to exist: not asked for again while the pods start
    assert kube.service_creates == creates == 2
