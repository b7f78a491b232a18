"""The Helm chart helm/qosmos, rendered by the real ``helm`` (built by hack/k8s/build.sh): lint, the
values schema, the copies it ships (CRDs, the scheduler profile), least-privilege RBAC derived from
the code that makes the calls, images, the node agent's privileges, and the TLS it generates."""

from __future__ import annotations

import ast
import base64
import importlib
import inspect
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from qosmos.testing.scripts import load_script
from qosmos.testing.skips import helm_binary

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "helm" / "qosmos"
KUBE_VERSION = "1.34.4"
RELEASE, NAMESPACE = "qs", "qosmos-system"
Perm = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)


sync = load_script(ROOT / "hack" / "helm" / "sync.py", "helm_sync")


# --------------------------------------------------------------------------- helm


@pytest.fixture(scope="module")
def helm() -> str:
    """The helm binary hack/k8s/build.sh builds; skipped (failed under CI=1) when it is not there."""
    return helm_binary()


def _flags(values: dict[str, Any] | None, tmp: Path) -> list[str]:
    if not values:
        return []
    f = tmp / f"values-{len(list(tmp.glob('values-*')))}.yaml"
    f.write_text(yaml.safe_dump(values))
    return ["-f", str(f)]


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=120, check=False)


def render(helm: str, tmp: Path, values: dict[str, Any] | None = None, *extra: str) -> list[dict[str, Any]]:
    proc = run_helm(
        helm,
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        KUBE_VERSION,
        *_flags(values, tmp),
        *extra,
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


# Every optional part switched on or to its other mode.
NON_DEFAULT: dict[str, Any] = {
    "fullnameOverride": "gpu-sched",
    "image": {"registry": "reg.example.com/ml", "repository": "qosmos", "tag": "1.2.3", "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "regcred"}],
    "crds": {"install": True, "keep": False},
    "modelDB": '{"models": {}}',
    "operator": {
        "replicas": 1,
        "peering": {"enabled": False, "installCRD": False},
        "historyNamespace": "ml-history",
        "image": {"registry": "reg.example.com", "repository": "qosmos-operator", "digest": "sha256:" + "a" * 64},
    },
    "extender": {
        "replicas": 2,
        "grpc": {"enabled": True, "port": 9443},
        "clients": {"scheduler": ["qosmos-scheduler", "sched-b"], "metrics": [], "api": ["ml-portal"]},
        "placer": "best-fit",
        "extraArgs": ["--assume-ttl-s", "10"],
    },
    "scheduler": {
        "replicas": 1,
        "percentageOfNodesToScore": 0,
        "image": {"registry": "mirror.example.com", "repository": "k8s/kube-scheduler", "tag": "v1.33.2"},
    },
    "tls": {"mode": "cert-manager", "certManager": {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}}},
    "nodeAgent": {
        "image": {"repository": "qosmos-agent", "tag": "9"},
        "resctrl": {"enabled": True},
        "membwPeak": 1.0e11,
        "tc": {"device": "eth0", "linkMbit": 100000},
        "cgroupVersion": 1,
        "cgroupDriver": "cgroupfs",
        "cgroupParent": "/kubelet",
        "podResources": {"socketDir": ""},
        "nvidiaVisibleDevices": "all",
    },
    "networkPolicy": {
        "extenderFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
        "grpcFrom": [{"podSelector": {"matchLabels": {"app": "client"}}}],
    },
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}, "dashboard": {"enabled": True}},
}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm")


@pytest.fixture(scope="module")
def default(helm: str, tmp: Path) -> list[dict[str, Any]]:
    return render(helm, tmp)


@pytest.fixture(scope="module")
def custom(helm: str, tmp: Path) -> list[dict[str, Any]]:
    return render(helm, tmp, NON_DEFAULT)


def kinds(docs: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def named(docs: Iterable[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    found = [d for d in kinds(docs, kind) if d["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, (kind, suffix, [d["metadata"]["name"] for d in kinds(docs, kind)])
    return found[0]


def pod_specs(docs: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for d in docs:
        if d.get("kind") in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
            yield d["spec"]["template"]["spec"]


# --------------------------------------------------------------------------- lint, schema


@pytest.mark.parametrize("values", [None, NON_DEFAULT], ids=["default", "non-default"])
def test_helm_lint_strict(helm: str, tmp: Path, values: dict[str, Any] | None) -> None:
    proc = run_helm(helm, "lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION, *_flags(values, tmp))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize(
    ("values", "needles"),
    [
        ({"operator": {"replicas": 0}}, ["/operator/replicas", "minimum"]),
        ({"operator": {"replcas": 2}}, ["/operator", "replcas"]),
        ({"tls": {"mode": "self"}}, ["/tls/mode"]),
        ({"tls": {"mode": "secrets"}}, ["/tls/secrets"]),
        ({"image": {"tag": 5}}, ["/image/tag"]),
        ({"image": {"digest": "latest"}}, ["/image/digest"]),
        ({"scheduler": {"percentageOfNodesToScore": 101}}, ["/scheduler/percentageOfNodesToScore"]),
        ({"extender": {"placer": "random"}}, ["/extender/placer"]),
        ({"nodeAgent": {"cgroupDriver": "cgroupv3"}}, ["/nodeAgent/cgroupDriver"]),
        ({"nodeAgent": {"cgroupDriver": "auto"}}, ["/nodeAgent/cgroupDriver"]),  # the mounts need to know
        ({"nodeAgent": {"cgroupVersion": 3}}, ["/nodeAgent/cgroupVersion"]),
        ({"nodeAgent": {"cgroupParent": "../.."}}, ["/nodeAgent/cgroupParent"]),
        ({"nodeAgent": {"podResources": {"socketDir": "var/lib"}}}, ["/nodeAgent/podResources/socketDir"]),
        ({"nodeAgent": {"tc": {"device": "eth0; rm -rf /", "linkMbit": 1}}}, ["/nodeAgent/tc/device"]),
        ({"metrics": {"serviceMonitor": {"enabled": True, "interval": "often"}}}, ["/metrics/serviceMonitor/interval"]),
        ({"unknownTopLevel": 1}, ["unknownTopLevel"]),
    ],
)
def test_schema_refuses_bad_values_naming_them(
    helm: str, tmp: Path, values: dict[str, Any], needles: list[str]
) -> None:
    proc = run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION, *_flags(values, tmp))
    assert proc.returncode != 0, proc.stdout[:500]
    for n in needles:
        assert n in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"operator": {"replicas": 2, "peering": {"enabled": False, "installCRD": False}}}, "peering"),
        ({"nodeAgent": {"tc": {"device": "eth0", "linkMbit": 0}}}, "linkMbit"),
    ],
)
def test_contradictory_values_fail_with_a_reason(helm: str, tmp: Path, values: dict[str, Any], needle: str) -> None:
    proc = run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION, *_flags(values, tmp))
    assert proc.returncode != 0 and needle in proc.stderr, proc.stderr


def test_schema_enums_are_the_codes_registries() -> None:
    from qosmos.extender.config import LOG_LEVELS
    from qosmos.extender.core.placement import PLACERS

    props = json.loads((CHART / "values.schema.json").read_text())["properties"]
    assert set(props["extender"]["properties"]["placer"]["enum"]) == set(PLACERS)
    assert set(props["extender"]["properties"]["logLevel"]["enum"]) == set(LOG_LEVELS)
    # the CLI also takes auto (it looks); the chart must name the driver: it mounts kubepods or kubepods.slice
    assert set(props["nodeAgent"]["properties"]["cgroupDriver"]["enum"]) == {"cgroupfs", "systemd"}
    assert set(props["nodeAgent"]["properties"]["cgroupVersion"]["enum"]) == {1, 2}


# --------------------------------------------------------------------------- the copies the chart ships


def test_chart_copies_are_in_sync() -> None:
    """files/crds/ equals crds/ and files/scheduler-config.yaml equals a fresh generation."""
    assert sync.stale() == [], "run `python hack/helm/sync.py`"


def test_rendered_crds_are_the_repositorys(default: list[dict[str, Any]], custom: list[dict[str, Any]]) -> None:
    want = {
        yaml.safe_load(p.read_text())["metadata"]["name"]: yaml.safe_load(p.read_text())
        for p in (ROOT / "crds").glob("*.yaml")
    }
    for docs, keep in ((default, True), (custom, False)):
        got = {
            d["metadata"]["name"]: d
            for d in kinds(docs, "CustomResourceDefinition")
            if d["spec"]["group"] == "qosmos.io"
        }
        assert set(got) == set(want)
        for name, crd in got.items():
            meta = crd["metadata"]
            assert (meta.get("annotations") or {}).get("helm.sh/resource-policy") == ("keep" if keep else None)
            assert meta["labels"]["app.kubernetes.io/part-of"] == "qosmos"
            stripped = {**crd, "metadata": {k: v for k, v in meta.items() if k not in ("labels", "annotations")}}
            assert stripped == want[name], name  # the template's YAML round trip changed nothing
    assert [
        d["metadata"]["name"] for d in kinds(default, "CustomResourceDefinition") if d["spec"]["group"] == "kopf.dev"
    ] == ["clusterkopfpeerings.kopf.dev"]


def test_scheduler_config_is_the_generated_profile(helm: str, tmp: Path) -> None:
    """The ConfigMap kube-scheduler reads is qosmos_scheduler_config() with the release's URL, the TLS
    files where the Deployment mounts them and leader election for its replicas."""
    from qosmos.extender.schedconfig import leader_election, qosmos_scheduler_config

    url = f"https://{RELEASE}-qosmos-extender.{NAMESPACE}.svc:8888"
    for values, kw in (
        (None, {"leader_election": leader_election("qosmos-scheduler", NAMESPACE)}),
        ({"scheduler": {"replicas": 1, "percentageOfNodesToScore": 0}}, {"percentage_of_nodes_to_score": 0}),
    ):
        docs = render(helm, tmp, values)
        cm = named(docs, "ConfigMap", "-scheduler")
        got = yaml.safe_load(cm["data"]["config.yaml"])
        assert got == yaml.safe_load(qosmos_scheduler_config(url, tls=sync.SCHEDULER_TLS, **kw))
        dep = named(docs, "Deployment", "-scheduler")
        pod = dep["spec"]["template"]["spec"]
        mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
        assert mounts[sync.SCHEDULER_TLS_DIR] == "tls"
        vols = {v["name"]: v for v in pod["volumes"]}
        assert vols["tls"]["secret"]["secretName"] == f"{RELEASE}-qosmos-scheduler-tls"
        assert vols["config"]["configMap"]["name"] == cm["metadata"]["name"]
        assert "--config=/etc/qosmos/scheduler/config.yaml" in pod["containers"][0]["command"]
        assert "config.yaml" in cm["data"]


# --------------------------------------------------------------------------- RBAC


def _rules(docs: Iterable[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for d in docs:
        if d.get("kind") in ("Role", "ClusterRole"):
            for r in d.get("rules") or []:
                yield d, r


@pytest.mark.parametrize("which", ["default", "custom"])
def test_no_wildcards_and_only_known_builtin_roles(which: str, request: pytest.FixtureRequest) -> None:
    docs = request.getfixturevalue(which)
    assert list(_rules(docs))
    for role, rule in _rules(docs):
        for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            assert not any("*" in str(v) for v in rule.get(key) or []), (role["metadata"]["name"], rule)
        assert not rule.get("nonResourceURLs"), rule
    rendered = {(d["kind"], d["metadata"]["name"]) for d in docs if d.get("kind") in ("Role", "ClusterRole")}
    builtin = set()
    for b in docs:
        if b.get("kind") in ("RoleBinding", "ClusterRoleBinding"):
            ref = (b["roleRef"]["kind"], b["roleRef"]["name"])
            if ref not in rendered:
                builtin.add(ref[1])
    # the roles Kubernetes gives its own kube-scheduler, bound to the second one; nothing else
    assert builtin == {"system:kube-scheduler", "system:volume-scheduler", "extension-apiserver-authentication-reader"}


def _http(api: type, name: str) -> tuple[str, str]:
    """(HTTP verb, path) of a kubernetes client API method, read from its generated source."""
    serialize = getattr(api, f"_{name}_serialize", None)  # kubernetes >= 32: param_serialize(method=, resource_path=)
    if serialize is not None:
        m = re.search(r"method='([A-Z]+)',\s*resource_path='([^']+)'", inspect.getsource(serialize))
        assert m, name
        return m.group(1), m.group(2)
    m = re.search(r"call_api\(\s*'([^']+)',\s*'([A-Z]+)'", inspect.getsource(getattr(api, f"{name}_with_http_info")))
    assert m, name
    return m.group(2), m.group(1)


def _rbac_of(method: str, path: str, plural: str | None, group: str | None, watched: bool) -> set[Perm]:
    """The permissions one API call needs: /api/v1[/namespaces/{ns}]/res[/{name}[/sub]] or /apis/g/v/..."""
    parts = [p for p in path.split("/") if p]
    if parts[0] == "api":
        g, rest = "", parts[2:]
    else:
        g, rest = parts[1], parts[3:]
    if g == "{group}":
        assert group is not None, path
        g = group
    if rest[:2] == ["namespaces", "{namespace}"]:
        rest = rest[2:]
    res = plural if rest[0] == "{plural}" else rest[0]
    assert res, path
    named_ = len(rest) > 1 and rest[1] == "{name}"
    sub = rest[2] if len(rest) > 2 else None
    resource = f"{res}/{sub}" if sub else res
    verb = {
        ("GET", True): "get",
        ("GET", False): "list",
        ("POST", False): "create",
        ("POST", True): "create",
        ("PUT", True): "update",
        ("PATCH", True): "patch",
        ("DELETE", True): "delete",
        ("DELETE", False): "deletecollection",
    }[(method, named_)]
    out = {(g, resource, verb)}
    if verb == "list" and watched:
        out.add((g, resource, "watch"))
    return out


def _tree(module_name: str) -> tuple[ModuleType, ast.Module]:
    mod = importlib.import_module(module_name)
    return mod, ast.parse(Path(inspect.getfile(mod)).read_text())


def _api_classes() -> dict[str, type]:
    from kubernetes import client

    return {"CoreV1Api": client.CoreV1Api, "CustomObjectsApi": client.CustomObjectsApi}


def api_receivers(module_names: Iterable[str]) -> dict[str, type]:
    """Names that hold an API client: targets of ``x = client.CoreV1Api(...)`` (``self.core``: core)."""
    out: dict[str, type] = {}
    for name in module_names:
        _, tree = _tree(name)
        for n in ast.walk(tree):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
                func = ast.unparse(n.value.func)
                for cls_name, cls in _api_classes().items():
                    if func.endswith(cls_name):
                        for t in n.targets:
                            out[t.attr if isinstance(t, ast.Attribute) else ast.unparse(t)] = cls
    return out


def derive_calls(module_names: Iterable[str], extra: dict[str, type] | None = None) -> set[Perm]:
    """Every kubernetes client call the modules make (CoreV1Api / CustomObjectsApi methods, called or
    passed on, on a name that holds a client), as RBAC permissions. A custom object's group and plural
    are the call's arguments, resolved from literals and the module's constants; ``watch=True`` in a
    module means its lists are watched."""
    from kubernetes import client

    names = list(module_names)
    receivers = {**api_receivers(names), **(extra or {})}
    perms: set[Perm] = set()
    for module_name in names:
        mod, tree = _tree(module_name)
        watched = any(isinstance(n, ast.keyword) and n.arg == "watch" for n in ast.walk(tree))

        def value(node: ast.expr, mod: ModuleType = mod) -> str | None:
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                return node.value
            if isinstance(node, ast.Name) and isinstance(getattr(mod, node.id, None), str):
                return str(getattr(mod, node.id))
            return None

        calls: dict[int, ast.Call] = {id(n.func): n for n in ast.walk(tree) if isinstance(n, ast.Call)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            recv = node.value
            if isinstance(recv, ast.Call):
                api = next((c for n, c in _api_classes().items() if ast.unparse(recv.func).endswith(n)), None)
            elif isinstance(recv, ast.Attribute):
                api = receivers.get(recv.attr)
            elif isinstance(recv, ast.Name):
                api = receivers.get(recv.id)
            else:
                api = None
            if api is None or not hasattr(api, f"{node.attr}_with_http_info"):
                continue
            method, path = _http(api, node.attr)
            group = plural = None
            if api is client.CustomObjectsApi:
                call = calls.get(id(node))
                assert call is not None, f"{module_name}: {node.attr} passed on, its plural unknown"
                params = [p for p in inspect.signature(getattr(api, node.attr)).parameters if p != "self"]
                args = dict(zip(params, call.args, strict=False))
                group, plural = value(args["group"]), value(args["plural"])
                assert group and plural, f"{module_name}: {node.attr} with a group/plural it cannot resolve"
            perms |= _rbac_of(method, path, plural, group, watched)
    return perms


def operator_modules() -> list[str]:
    """The operator's modules (operator/*.py) but the kubectl plugin, which runs as the user."""
    return [
        f"qosmos.operator.{p.stem}"
        for p in sorted((ROOT / "operator").glob("*.py"))
        if p.stem not in ("__init__", "kubectl")
    ]


def granted(docs: Iterable[dict[str, Any]], name: str) -> dict[tuple[str, str], set[Perm]]:
    """{(kind, namespace): permissions} of the Roles/ClusterRoles bound to ServiceAccount ``name``,
    resourceNames noted as resource@name."""
    roles = {
        (d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")): d
        for d in docs
        if d.get("kind") in ("Role", "ClusterRole")
    }
    out: dict[tuple[str, str], set[Perm]] = {}
    for b in docs:
        if b.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and s["name"] == name for s in b["subjects"]):
            continue
        ns = b["metadata"].get("namespace")
        role = roles.get((b["roleRef"]["kind"], b["roleRef"]["name"], ns if b["roleRef"]["kind"] == "Role" else None))
        if role is None:
            continue  # a built-in role (checked above)
        perms = out.setdefault((role["kind"], ns or ""), set())
        for r in role["rules"]:
            for g in r["apiGroups"]:
                for res in r["resources"]:
                    for v in r["verbs"]:
                        for rn in r.get("resourceNames") or [None]:
                            perms.add((g, f"{res}@{rn}" if rn else res, v))
    return out


def _plain(perms: Iterable[Perm]) -> set[Perm]:
    return {(g, r.split("@")[0], v) for g, r, v in perms}


def _plural(selector: Any) -> str:
    name = selector.plural or selector.any_name  # the selectors here are built from plurals
    assert name and name.endswith("s"), selector
    return str(name)


def kopf_needs(peering: bool) -> set[Perm]:
    """What kopf itself asks of the API for the operator's registry: list+watch of every resource a
    handler watches (runner.build_registry), list+watch of CRDs (its resource observer), and with
    peering list+watch+patch of the ClusterKopfPeering (its peering watcher and keep-alives)."""
    from kopf._cogs.structs import references
    from qosmos.operator.runner import RunOptions, Trigger, build_registry

    reg = build_registry(Trigger(), RunOptions())
    out: set[Perm] = set()
    for h in reg._watching.get_all_handlers():
        sel = h.selector
        assert sel is not None
        out |= {(sel.group or "", _plural(sel), "list"), (sel.group or "", _plural(sel), "watch")}
    crds = references.CRDS
    out |= {(crds.group or "", _plural(crds), "list"), (crds.group or "", _plural(crds), "watch")}
    if peering:
        p = references.CLUSTER_PEERINGS_K
        out |= {(p.group or "", _plural(p), v) for v in ("list", "watch", "patch")}
    return out


def test_operator_rbac_is_what_it_calls(default: list[dict[str, Any]], custom: list[dict[str, Any]]) -> None:
    from qosmos.operator.ces import CONFIG_MAP as CES_CONFIG_MAP
    from qosmos.operator.durations import CONFIG_MAP
    from qosmos.operator.peering import CLUSTER_PLURAL, NAMESPACED_PLURAL

    # --namespace (KopfPeering) is not a mode the chart runs
    calls = {p for p in derive_calls(operator_modules()) if not p[1].startswith(NAMESPACED_PLURAL)}
    peering = {p for p in calls if p[0] == "kopf.dev"}
    calls -= peering
    configmaps = {p for p in calls if p[1] == "configmaps"}
    assert configmaps == {("", "configmaps", v) for v in ("get", "patch", "create")}  # the QSSF and CES histories
    for docs, with_peering, history_ns in ((default, True, NAMESPACE), (custom, False, "ml-history")):
        got = granted(docs, f"{RELEASE}-qosmos-operator" if docs is default else "gpu-sched-operator")
        cluster = got.pop(("ClusterRole", ""))
        local = got.pop(("Role", history_ns))
        assert not got, got
        need = (calls - configmaps) | kopf_needs(with_peering) | (peering if with_peering else set())
        assert _plain(cluster) == need, (sorted(_plain(cluster) - need), sorted(need - _plain(cluster)))
        # the history ConfigMaps only, in one namespace: create cannot name them, get and patch do
        assert local == {
            ("", "configmaps", "create"),
            *(("", f"configmaps@{cm}", verb) for cm in (CONFIG_MAP, CES_CONFIG_MAP) for verb in ("get", "patch")),
        }
        if with_peering:  # get/patch of its own peering object only
            name = f"{RELEASE}-qosmos-operator"
            assert {p for p in cluster if p[1].startswith(CLUSTER_PLURAL) and p[2] in ("get", "patch")} == {
                ("kopf.dev", f"{CLUSTER_PLURAL}@{name}", "get"),
                ("kopf.dev", f"{CLUSTER_PLURAL}@{name}", "patch"),
            }


def test_extender_and_node_agent_rbac_are_what_they_call(default: list[dict[str, Any]]) -> None:
    from qosmos.extender.schedconfig import extender_entry

    ext = derive_calls(["qosmos.extender.cache", "qosmos.extender.runner"])
    # /bind (pods/binding) is only called by a profile with a bindVerb; the chart's has none
    assert "bindVerb" not in extender_entry("https://x:1", tls=sync.SCHEDULER_TLS)
    ext -= {("", "pods/binding", "create")}
    got = granted(default, f"{RELEASE}-qosmos-extender")
    assert list(got) == [("ClusterRole", "")] and got[("ClusterRole", "")] == ext == {
        ("", "nodes", "list"),
        ("", "nodes", "watch"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
    }
    from kubernetes import client

    # the agent's api is the CoreV1Api sidecar/cli.py passes in (NodeAgent's and PodCache's docstrings)
    agent = derive_calls(["qosmos.sidecar.agent", "qosmos.sidecar.podwatch"], {"api": client.CoreV1Api})
    assert ("", "pods", "watch") in agent  # issue 22: a watch on its node's pods, not a list every pass
    got = granted(default, f"{RELEASE}-qosmos-node-agent")
    assert list(got) == [("ClusterRole", "")] and got[("ClusterRole", "")] == agent


def test_scheduler_may_hold_only_its_own_lease(default: list[dict[str, Any]], custom: list[dict[str, Any]]) -> None:
    cfg = yaml.safe_load(named(default, "ConfigMap", "-scheduler")["data"]["config.yaml"])["leaderElection"]
    got = granted(default, f"{RELEASE}-qosmos-scheduler")
    assert got == {
        ("Role", NAMESPACE): {
            ("coordination.k8s.io", "leases", "create"),
            ("coordination.k8s.io", f"leases@{cfg['resourceName']}", "get"),
            ("coordination.k8s.io", f"leases@{cfg['resourceName']}", "update"),
        }
    }
    assert cfg["resourceNamespace"] == NAMESPACE
    # one replica: no leader election, no lease
    assert yaml.safe_load(named(custom, "ConfigMap", "-scheduler")["data"]["config.yaml"])["leaderElection"] == {
        "leaderElect": False
    }
    assert granted(custom, "gpu-sched-scheduler") == {}


# --------------------------------------------------------------------------- images, pods


def _images(docs: Iterable[dict[str, Any]]) -> list[str]:
    return [c["image"] for p in pod_specs(docs) for c in [*p.get("initContainers", []), *p["containers"]]]


def test_every_image_comes_from_values(default: list[dict[str, Any]], custom: list[dict[str, Any]]) -> None:
    assert sorted(set(_images(default))) == ["qosmos:0.1.0", f"registry.k8s.io/kube-scheduler:v{KUBE_VERSION}"]
    assert sorted(set(_images(custom))) == [
        "mirror.example.com/k8s/kube-scheduler:v1.33.2",
        "qosmos-agent:9",
        "reg.example.com/ml/qosmos:1.2.3",
        "reg.example.com/qosmos-operator@sha256:" + "a" * 64,
    ]
    for p in pod_specs(custom):
        assert p["imagePullSecrets"] == [{"name": "regcred"}]


@pytest.mark.parametrize("which", ["default", "custom"])
def test_pods_are_restricted_but_the_node_agent(which: str, request: pytest.FixtureRequest) -> None:
    docs = request.getfixturevalue(which)
    for d in docs:
        if d.get("kind") not in ("Deployment", "DaemonSet"):
            continue
        spec = d["spec"]["template"]["spec"]
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
            assert sc["capabilities"]["drop"] == ["ALL"] and not sc.get("privileged")
            if d["kind"] == "Deployment":
                assert sc["runAsNonRoot"] is True and not sc["capabilities"].get("add")
                assert not spec.get("hostPID") and not spec.get("hostNetwork")
                assert not any("hostPath" in v for v in spec.get("volumes", []))


def _agent_host_access(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str], dict[str, str], set[str]]:
    """The node agent's pod spec, args, hostPath -> mountPath, and the read-only mountPaths."""
    spec = kinds(docs, "DaemonSet")[0]["spec"]["template"]["spec"]
    c = spec["containers"][0]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    host = {v["hostPath"]["path"]: mounts[v["name"]]["mountPath"] for v in spec["volumes"] if "hostPath" in v}
    assert all(v["hostPath"]["type"] in ("Directory", "DirectoryOrCreate") for v in spec["volumes"] if "hostPath" in v)
    return spec, c["args"], host, {m["mountPath"] for m in c["volumeMounts"] if m.get("readOnly")}


def test_node_agent_gets_only_the_host_access_its_options_use(
    default: list[dict[str, Any]], custom: list[dict[str, Any]]
) -> None:
    """hostPaths are the kubepods subtrees below its --cgroup-root, its --resctrl-root / --state-dir, the
    folders of its --cpu-manager-state and --pod-resources-socket (read-only); each at its host path under
    /host (the journal names those paths, and ``kubectl debug node`` has the host there too); never the
    whole /sys/fs/cgroup. hostNetwork and NET_ADMIN only with --tc-dev; hostPID (resctrl's tasks and /proc
    take host PIDs)."""
    for docs, tc, resctrl in ((default, False, False), (custom, True, True)):
        spec, args, host, read_only = _agent_host_access(docs)
        c = spec["containers"][0]
        arg = {a: args[i + 1] for i, a in enumerate(args) if a.startswith("--") and i + 1 < len(args)}
        assert all(m == f"/host{h}" for h, m in host.items()), host
        cgroups = {h for h in host if h.startswith("/sys/fs/cgroup")}
        assert "/sys/fs/cgroup" not in host and all(h.rsplit("/", 1)[-1].startswith("kubepods") for h in cgroups)
        assert all(m.startswith(arg["--cgroup-root"] + "/") for h, m in host.items() if h in cgroups)
        others = {m for h, m in host.items() if h not in cgroups}
        used = {arg[f] for f in ("--resctrl-root", "--state-dir") if f in arg}
        used |= {str(Path(arg[f]).parent) for f in ("--cpu-manager-state", "--pod-resources-socket") if arg.get(f)}
        assert others == used
        assert {str(Path(arg[f]).parent) for f in ("--cpu-manager-state", "--pod-resources-socket") if arg.get(f)} <= (
            read_only
        )  # only read
        assert ("/sys/fs/resctrl" in host) is resctrl
        assert ("--membw" in args) is (not resctrl)  # no resctrl: no bandwidth source
        assert spec["hostPID"] is True
        assert bool(spec.get("hostNetwork")) is tc and ("--tc-dev" in args) is tc
        assert c["securityContext"]["capabilities"].get("add", []) == (["NET_ADMIN"] if tc else [])
        assert c["securityContext"]["runAsUser"] == 0


@pytest.mark.parametrize(
    ("agent", "cgroups", "pod_resources", "nvidia"),
    [
        ({}, ["/sys/fs/cgroup/kubepods.slice"], "/var/lib/kubelet/pod-resources", None),  # the defaults: v2, systemd
        ({"cgroupDriver": "cgroupfs"}, ["/sys/fs/cgroup/kubepods"], "/var/lib/kubelet/pod-resources", None),
        (
            {"cgroupVersion": 1, "cgroupDriver": "cgroupfs", "resctrl": {"enabled": True}},
            ["/sys/fs/cgroup/cpuset/kubepods", "/sys/fs/cgroup/cpu/kubepods", "/sys/fs/cgroup/cpuacct/kubepods"],
            "/var/lib/kubelet/pod-resources",
            None,
        ),
        (
            {
                "cgroupVersion": 1,
                "cgroupDriver": "systemd",
                "cgroupParent": "/kubelet.slice/",
                "podResources": {"socketDir": ""},
                "nvidiaVisibleDevices": "all",
            },
            [f"/sys/fs/cgroup/{c}/kubelet.slice/kubepods.slice" for c in ("cpuset", "cpu", "cpuacct")],
            None,
            "all",
        ),
        (
            {"cgroupParent": "k8s/pods", "podResources": {"socketDir": "/data/kubelet/pod-resources"}},
            ["/sys/fs/cgroup/k8s/pods/kubepods.slice"],
            "/data/kubelet/pod-resources",
            None,
        ),
    ],
    ids=["v2-systemd", "v2-cgroupfs", "v1-cgroupfs-resctrl", "v1-systemd-parent-no-podresources", "v2-parent"],
)
def test_node_agent_mounts_only_the_kubepods_subtrees(
    helm: str,
    tmp: Path,
    agent: dict[str, Any],
    cgroups: list[str],
    pod_resources: str | None,
    nvidia: str | None,
) -> None:
    """Each cgroup controller the agent uses, only below the kubelet's kubepods[.slice] (v1: cpuset, cpu,
    cpuacct; v2: the unified tree); resctrl only when enabled; the kubelet's pod-resources folder
    read-only (its socket the agent's --pod-resources-socket), and NVIDIA_VISIBLE_DEVICES only when set."""
    from qosmos.sidecar.cgroups import CgroupLayout

    docs = render(helm, tmp, {"nodeAgent": agent})
    spec, args, host, read_only = _agent_host_access(docs)
    assert sorted(h for h in host if h.startswith("/sys/fs/cgroup")) == sorted(cgroups)
    # the agent's own layout resolves exactly to those mounts
    version, driver = agent.get("cgroupVersion", 2), agent.get("cgroupDriver", "systemd")
    layout = CgroupLayout(Path(args[args.index("--cgroup-root") + 1]), version, driver, agent.get("cgroupParent", ""))
    ctrls = ("cpuset", "cpu", "cpuacct") if version == 1 else ("cpu",)
    assert sorted(str(layout.kubepods(c)) for c in ctrls) == sorted(f"/host{c}" for c in cgroups)
    assert args[args.index("--cgroup-driver") + 1] == driver
    assert ("/sys/fs/resctrl" in host) is bool(agent.get("resctrl", {}).get("enabled"))
    sock = args[args.index("--pod-resources-socket") + 1]
    if pod_resources:
        assert host[pod_resources] in read_only and sock == f"/host{pod_resources}/kubelet.sock"
    else:
        assert sock == "" and not [h for h in host if "pod-resources" in h]
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env.get("NVIDIA_VISIBLE_DEVICES") == nvidia


def test_network_policy_lets_only_the_scheduler_reach_the_extender(
    default: list[dict[str, Any]], custom: list[dict[str, Any]]
) -> None:
    for docs in (default, custom):
        pol = kinds(docs, "NetworkPolicy")[0]
        ext = named(docs, "Deployment", "-extender")
        sched = named(docs, "Deployment", "-scheduler")
        ext_labels = ext["spec"]["template"]["metadata"]["labels"]
        assert all(ext_labels[k] == v for k, v in pol["spec"]["podSelector"]["matchLabels"].items())
        first = pol["spec"]["ingress"][0]
        sel = first["from"][0]["podSelector"]["matchLabels"]
        assert all(sched["spec"]["template"]["metadata"]["labels"][k] == v for k, v in sel.items())
        assert not any(
            ext["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in sel.items() if k.endswith("component")
        )
        assert first["ports"] == [{"port": "https", "protocol": "TCP"}]
        assert "https" in [p["name"] for p in ext["spec"]["template"]["spec"]["containers"][0]["ports"]]
    pol = kinds(custom, "NetworkPolicy")[0]
    assert pol["spec"]["ingress"][0]["from"][1] == NON_DEFAULT["networkPolicy"]["extenderFrom"][0]
    assert pol["spec"]["ingress"][1] == {
        "from": NON_DEFAULT["networkPolicy"]["grpcFrom"],
        "ports": [{"port": "grpc", "protocol": "TCP"}],
    }
    assert len(kinds(default, "NetworkPolicy")[0]["spec"]["ingress"]) == 1  # gRPC off: no port opened


def test_pdbs_cover_replicated_components(default: list[dict[str, Any]], custom: list[dict[str, Any]]) -> None:
    assert sorted(p["metadata"]["name"] for p in kinds(default, "PodDisruptionBudget")) == [
        f"{RELEASE}-qosmos-operator",
        f"{RELEASE}-qosmos-scheduler",
    ]
    assert [p["metadata"]["name"] for p in kinds(custom, "PodDisruptionBudget")] == ["gpu-sched-extender"]
    for docs in (default, custom):
        for pdb in kinds(docs, "PodDisruptionBudget"):
            dep = named(docs, "Deployment", pdb["metadata"]["name"].rsplit("-", 1)[1])
            assert dep["spec"]["selector"]["matchLabels"] == pdb["spec"]["selector"]["matchLabels"]
            assert dep["spec"]["replicas"] > 1


def test_operator_runs_with_peering(default: list[dict[str, Any]], custom: list[dict[str, Any]]) -> None:
    dep = named(default, "Deployment", "-operator")
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--peering") + 1] == dep["metadata"]["name"]
    assert args[args.index("--metrics-host") + 1] == "0.0.0.0"
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["POD_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    args = named(custom, "Deployment", "-operator")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--peering" not in args and args[args.index("--history-namespace") + 1] == "ml-history"
    assert args[args.index("--db") + 1] == "/etc/qosmos/models/models.json"


def test_service_monitors_and_dashboard(custom: list[dict[str, Any]], default: list[dict[str, Any]]) -> None:
    assert not kinds(default, "ServiceMonitor")
    sms = {s["metadata"]["name"]: s for s in kinds(custom, "ServiceMonitor")}
    assert set(sms) == {"gpu-sched-operator", "gpu-sched-extender"}
    ext = sms["gpu-sched-extender"]["spec"]["endpoints"][0]
    assert ext["scheme"] == "https" and ext["tlsConfig"]["keySecret"]["name"] == "gpu-sched-metrics-tls"
    assert ext["tlsConfig"]["serverName"] == f"gpu-sched-extender.{NAMESPACE}.svc"
    svc_ports = {s["metadata"]["name"]: [p["name"] for p in s["spec"]["ports"]] for s in kinds(custom, "Service")}
    assert "https" in svc_ports["gpu-sched-extender"] and "metrics" in svc_ports["gpu-sched-operator-metrics"]
    cms = [c for c in kinds(custom, "ConfigMap") if "qosmos.json" in c.get("data", {})]
    assert len(cms) == 1 and cms[0]["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cms[0]["data"]["qosmos.json"]) == json.loads((CHART / "files" / "dashboard.json").read_text())


def _metric_names() -> set[str]:
    """Every series name the operator's modules and the extender's Metrics define (their metric
    families: labelled metrics have no samples until used)."""
    from prometheus_client.metrics import MetricWrapperBase
    from qosmos.extender.service import Metrics

    suffixes = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}
    objs = {id(m): m for name in operator_modules() for m in vars(importlib.import_module(name)).values()}
    families = [f for m in objs.values() if isinstance(m, MetricWrapperBase) for f in m.describe()]
    families += list(Metrics().registry.collect())
    names: set[str] = set()
    for fam in families:
        names |= {fam.name + suffix for suffix in suffixes.get(fam.type, ())}
    return {n for n in names if n.startswith("qosmos_")}


def test_dashboard_queries_only_metrics_that_exist() -> None:
    dash = json.loads((CHART / "files" / "dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    used = {m for e in exprs for m in re.findall(r"\bqosmos_[a-z_]+\b", e)}
    names = _metric_names()
    assert used <= names, sorted(used - names)
    # every operator and extender metric family is on the dashboard
    families = {re.sub(r"_(bucket|count|sum|total)$", "", n) for n in names}
    shown = {re.sub(r"_(bucket|count|sum|total)$", "", n) for n in used}
    assert families <= shown, sorted(families - shown)


# --------------------------------------------------------------------------- TLS


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_generated_tls_connects_scheduler_and_extender(default: list[dict[str, Any]], tmp_path: Path) -> None:
    """The extender started with the chart's Secrets: the scheduler's certificate reaches it under the
    Service's DNS name, the readiness probe command of the Deployment passes, a client without a
    certificate is refused at the handshake."""
    dirs = {}
    for kind in ("extender", "scheduler", "metrics"):
        sec = named(default, "Secret", f"-{kind}-tls")
        d = tmp_path / kind
        d.mkdir()
        for k, v in sec["data"].items():
            (d / k).write_bytes(base64.b64decode(v))
        dirs[kind] = d
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,V100M32\n")
    port = _free_port()
    e = dirs["extender"]
    env = {**os.environ, "QOSMOS_MODELDB": str(tmp_path / "absent.json")}
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "qosmos", "extender", "serve", "--node-list", str(nodes), "--http-port", str(port)),
            *("--grpc-port", "-1", "--tls-cert-file", str(e / "tls.crt"), "--tls-key-file", str(e / "tls.key")),
            *("--tls-client-ca-file", str(e / "ca.crt")),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        host = f"{RELEASE}-qosmos-extender.{NAMESPACE}.svc"

        def get(client: Path | None) -> int:
            ctx = ssl.create_default_context(cafile=str(dirs["scheduler"] / "ca.crt"))
            if client is not None:
                ctx.load_cert_chain(str(client / "tls.crt"), str(client / "tls.key"))
            with (
                socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
                ctx.wrap_socket(raw, server_hostname=host) as s,
            ):
                s.sendall(f"GET /readyz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
                head = s.recv(64)
                return int(head.split()[1]) if head else -1  # TLS 1.3: a refusal may come as a closed stream

        deadline = time.monotonic() + 60
        while True:
            try:
                status = get(dirs["scheduler"])
                break
            except (ConnectionRefusedError, ssl.SSLEOFError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    pytest.fail(f"the extender did not answer: {proc.communicate()[0].decode()}")
                time.sleep(0.3)
        assert status == 200
        assert get(dirs["metrics"]) == 200  # Prometheus' certificate
        try:
            refused = get(None) == -1
        except (ssl.SSLError, OSError):
            refused = True
        assert refused, "a client without a certificate got an answer"
        # the Deployment's readiness probe, with the Secret mounted here instead of /etc/qosmos/tls
        c = named(default, "Deployment", "-extender")["spec"]["template"]["spec"]["containers"][0]
        script = c["readinessProbe"]["exec"]["command"][2]
        script = script.replace("/etc/qosmos/tls", str(e)).replace(":8888/", f":{port}/")
        assert subprocess.run([sys.executable, "-c", script], timeout=30, check=False).returncode == 0
    finally:
        proc.terminate()
        proc.wait(20)


def test_secrets_are_kept_on_upgrade_through_lookup() -> None:
    """mode helm reuses the three Secrets it finds (lookup), so an upgrade rotates nothing."""
    text = (CHART / "templates" / "tls.yaml").read_text()
    assert 'lookup "v1" "Secret"' in text and "lt (len $found) 3" in text


def test_schema_has_every_value() -> None:
    """values.yaml and values.schema.json name the same keys (additionalProperties false everywhere)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(v: Any, s: dict[str, Any], path: str) -> None:
        if isinstance(v, dict) and s.get("type") == "object" and "properties" in s:
            assert s.get("additionalProperties") is False, path
            assert set(v) <= set(s["properties"]), (path, set(v) - set(s["properties"]))
            for k, sub in v.items():
                walk(sub, s["properties"][k], f"{path}.{k}")

    walk(values, schema, "")
    assert set(schema["properties"]) - {"global"} == set(values)


# --------------------------------------------------------------------------- node agent (issue 22 §1)


def test_node_agent_health_metrics_priority_and_shutdown(
    helm: str, tmp: Path, default: list[dict[str, Any]], custom: list[dict[str, Any]]
) -> None:
    """Probes on /healthz and /readyz, /metrics on a named port behind a headless Service (a ServiceMonitor
    when asked), system-node-critical by default, time to restore the node on SIGTERM, and tc shaping
    only where the admin set a device (``--net-shaping``)."""
    import typer.main
    from qosmos.sidecar.cli import sidecar_app

    run = typer.main.get_command(sidecar_app).commands["run"]  # type: ignore[attr-defined]
    run_flags = {o for p in run.params for o in [*p.opts, *p.secondary_opts]}
    for docs, tc in ((default, False), (custom, True)):
        ds = kinds(docs, "DaemonSet")[0]
        spec = ds["spec"]["template"]["spec"]
        c = spec["containers"][0]
        args = c["args"]
        assert {a for a in args if a.startswith("--")} <= run_flags  # every flag exists
        port = int(args[args.index("--metrics-port") + 1])
        assert args[args.index("--metrics-address") + 1] == "0.0.0.0"
        assert c["ports"] == [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert spec["priorityClassName"] == "system-node-critical"
        assert spec["terminationGracePeriodSeconds"] >= 10
        assert ("--net-shaping" in args) is tc
        svc = named(docs, "Service", "-node-agent-metrics")
        assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["ports"][0]["targetPort"] == "metrics"
        assert all(ds["spec"]["template"]["metadata"]["labels"][k] == v for k, v in svc["spec"]["selector"].items())
    assert not [s for s in kinds(custom, "ServiceMonitor") if s["metadata"]["name"].endswith("node-agent")]
    docs = render(helm, tmp, {**NON_DEFAULT, "nodeAgent": {**NON_DEFAULT["nodeAgent"],
                                                           "metrics": {"port": 9200, "address": "0.0.0.0",
                                                                       "serviceMonitor": {"enabled": True}}}})  # fmt: skip
    sm = named(docs, "ServiceMonitor", "-node-agent")
    assert sm["spec"]["endpoints"][0]["port"] == "metrics" and sm["metadata"]["labels"]["release"] == "prom"
    svc = named(docs, "Service", "-node-agent-metrics")
    assert all(svc["metadata"]["labels"][k] == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
    assert kinds(docs, "DaemonSet")[0]["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] == 9200


def test_node_agent_metrics_can_bind_the_pods_address_only(helm: str, tmp: Path) -> None:
    """``metrics.address: $(POD_IP)``: the kubelet expands it from the container's POD_IP (the pod's
    status.podIP; with hostNetwork the node's InternalIP), so the agent does not listen on every
    interface of the node."""
    agent = {"metrics": {"port": 9102, "address": "$(POD_IP)"}, "tc": {"device": "eth0", "linkMbit": 100}}
    spec, args, _, _ = _agent_host_access(render(helm, tmp, {"nodeAgent": agent}))
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert args[args.index("--metrics-address") + 1] == "$(POD_IP)" and spec["hostNetwork"] is True
