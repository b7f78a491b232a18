"""The qosmos.io CRDs: generated from the pydantic models, structural, enums from the core's registries,
checked-in files fresh, examples parse, and every validation rule has an invalid example."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from qosmos.extender.core.backfill import MODES
from qosmos.extender.core.ordering import POLICIES, get_policy
from qosmos.extender.core.placement import PLACERS
from qosmos.extender.core.types import JobKind, QoSClass
from qosmos.operator import crds
from typer.testing import CliRunner

from qosmos.cli import app

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
runner = CliRunner()

# Short names in common use: Kubernetes built-ins, KServe, Volcano, Kubeflow, Kueue, the multi-tenancy
# VirtualCluster, Argo.
TAKEN_SHORT_NAMES = {
    "po", "svc", "deploy", "ds", "rs", "sts", "cj", "cm", "ns", "no", "pv", "pvc", "sa", "ep", "ing", "hpa", "pdb",
    "pc", "sc", "crd", "crds", "csr", "netpol", "limits", "quota", "rc", "ev", "cs", "ingclass", "csinode",
    "isvc", "ig", "tm", "sr",  # KServe
    "vcjob", "vj", "vc", "queue", "q", "pg", "podgroup", "jobflow", "jf", "jt",  # Volcano
    "tfjob", "pytorchjob", "mpijob", "xgboostjob", "mxjob", "paddlejob", "jaxjob",  # Kubeflow
    "cq", "lq", "wl", "rf", "wp", "ac", "pw",  # Kueue
    "vcs", "wf", "cwf", "wftmpl", "cwft", "cronwf",  # multi-tenancy VirtualCluster, Argo
}  # fmt: skip


def walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its dotted path; list items as ``[]``, map values as ``{}``."""
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}" if path else name)
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def schema(resource: crds.Resource) -> dict[str, Any]:
    return crds.crd(resource)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def at(root: dict[str, Any], dotted: str) -> dict[str, Any]:
    node = root
    for part in dotted.split("."):
        node = node["properties"][part]
    return node


def structural_problems(root: dict[str, Any]) -> list[str]:
    """Violations of the apiextensions.k8s.io/v1 structural-schema rules (and of what we rely on)."""
    bad: list[str] = []
    for path, node in walk(root):
        where = path or "<root>"
        for key in ("$ref", "$defs", "definitions", "title", "allOf", "oneOf", "not", "const", "nullable"):
            if key in node:
                bad.append(f"{where}: {key}")
        if node.get("uniqueItems") is True:
            bad.append(f"{where}: uniqueItems true is forbidden")
        if "additionalProperties" in node and not isinstance(node["additionalProperties"], dict):
            bad.append(f"{where}: additionalProperties must be a schema")
        if "properties" in node and "additionalProperties" in node:
            bad.append(f"{where}: properties with additionalProperties")
        loose = node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
        if "type" not in node and not loose:
            bad.append(f"{where}: no type")
        if ("properties" in node or "additionalProperties" in node) and node.get("type") != "object":
            bad.append(f"{where}: properties on a non-object")
        if "anyOf" in node:
            branches = node["anyOf"]
            if not node.get("x-kubernetes-int-or-string") or branches != [{"type": "integer"}, {"type": "string"}]:
                bad.append(f"{where}: anyOf other than int-or-string")
        for key in ("exclusiveMinimum", "exclusiveMaximum"):
            if key in node and not isinstance(node[key], bool):
                bad.append(f"{where}: {key} must be a boolean in OpenAPI v3.0")
        for rule in node.get("x-kubernetes-validations", []):
            if (
                set(rule) - {"rule", "message", "messageExpression", "fieldPath", "reason"}
                or not rule.get("rule")
                or not rule.get("message")
            ):
                bad.append(f"{where}: malformed rule {rule}")
            if "fieldPath" in rule:
                try:
                    at(node, rule["fieldPath"].lstrip("."))
                except KeyError:
                    bad.append(f"{where}: fieldPath {rule['fieldPath']} names no property")
    meta = root["properties"]["metadata"]
    if set(meta.get("properties", {})) - {"name", "generateName"}:
        bad.append("metadata: a CRD may only narrow name and generateName")
    return bad


@pytest.mark.parametrize("resource", crds.RESOURCES, ids=lambda r: r.kind)
def test_schema_is_structural(resource: crds.Resource) -> None:
    assert structural_problems(schema(resource)) == []


def test_structural_check_catches_violations() -> None:
    """The checker above is what the other tests trust: it must see each kind of violation."""
    root = schema(crds.DL_JOB)
    spec = root["properties"]["spec"]["properties"]
    spec["template"].pop("type")
    spec["template"].pop("x-kubernetes-preserve-unknown-fields")
    spec["gpus"]["$ref"] = "#/$defs/X"
    spec["kind"]["anyOf"] = [{"type": "string"}, {"type": "null"}]
    spec["gpuModels"]["uniqueItems"] = True
    spec["virtualCluster"]["exclusiveMinimum"] = 0
    root["properties"]["spec"]["x-kubernetes-validations"][0]["fieldPath"] = ".nope"
    root["properties"]["metadata"]["properties"]["labels"] = {"type": "object"}
    problems = structural_problems(root)
    for expected in (
        "spec.template: no type",
        "spec.gpus: $ref",
        "spec.kind: anyOf other than int-or-string",
        "spec.gpuModels: uniqueItems true is forbidden",
        "spec.virtualCluster: exclusiveMinimum must be a boolean in OpenAPI v3.0",
        "spec: fieldPath .nope names no property",
        "metadata: a CRD may only narrow name and generateName",
    ):
        assert expected in problems


def test_generator_refuses_untranslatable_unions() -> None:
    with pytest.raises(crds.SchemaError, match="union"):
        crds._structural({"anyOf": [{"type": "integer"}, {"type": "string"}]}, {}, "spec.x")


def test_enums_come_from_the_core_registries() -> None:
    vc = at(schema(crds.VIRTUAL_CLUSTER), "spec")
    assert vc["properties"]["policy"]["enum"] == list(POLICIES)
    assert vc["properties"]["placement"]["enum"] == list(PLACERS)
    assert vc["properties"]["backfill"]["enum"] == list(MODES)
    job = at(schema(crds.DL_JOB), "spec")
    assert [QoSClass.parse(q) for q in job["properties"]["qosClass"]["enum"]] == list(QoSClass)
    assert job["properties"]["qosClass"]["enum"] == ["Urgent", "Prior", "Normal"]
    assert job["properties"]["kind"]["enum"] == [k.value for k in JobKind]
    assert at(schema(crds.DL_JOB), "status.phase")["enum"] == ["Queued", "Admitted", "Running", "Succeeded", "Failed"]


def test_defaults_are_the_issues() -> None:
    vc = at(schema(crds.VIRTUAL_CLUSTER), "spec")["properties"]
    assert (vc["policy"]["default"], vc["placement"]["default"], vc["backfill"]["default"]) == ("swaf", "cer", "none")
    # Kueue's: no borrowing limit (the cohort's idle share), lend all; reclaim Any is the core's default
    assert "default" not in vc["quota"]["properties"]["borrowingLimit"]
    assert vc["quota"]["properties"]["borrowingLimit"]["minimum"] == 0
    assert vc["quota"]["properties"]["lendingLimit"]["minimum"] == 0
    pre = vc["preemption"]["properties"]
    assert (pre["withinVirtualCluster"]["default"], pre["reclaimWithinCohort"]["default"]) == ("Never", "Any")
    assert pre["withinVirtualCluster"]["enum"] == ["Never", "LowerPriority"]
    assert (vc["startTimeoutSeconds"]["default"], vc["nodeLostSeconds"]["default"]) == (600, 300)
    job = at(schema(crds.DL_JOB), "spec")["properties"]
    assert (job["qosClass"]["default"], job["kind"]["default"]) == ("Normal", "training")
    assert "default" not in job["startTimeoutSeconds"] and "default" not in job["nodeLostSeconds"]  # the VC's


def test_spec_fields_are_the_issues() -> None:
    vc = at(schema(crds.VIRTUAL_CLUSTER), "spec")["properties"]
    assert set(vc) == {
        "nodeSelector", "policy", "placement", "backfill", "relaxFactor", "theta", "quota", "cohort", "preemption",
        "startTimeoutSeconds", "nodeLostSeconds", "arraySplit",
    }  # fmt: skip
    assert set(vc["quota"]["properties"]) == {"gpus", "borrowingLimit", "lendingLimit"}
    vcs = at(schema(crds.VIRTUAL_CLUSTER), "status")["properties"]
    assert set(vcs["gpus"]["properties"]) == {"total", "used", "borrowed", "lent"}
    assert {"queued", "running", "oldestWaitSeconds", "conditions"} <= set(vcs)
    job = at(schema(crds.DL_JOB), "spec")
    assert set(job["properties"]) == {
        "virtualCluster", "kind", "modelType", "globalBatchSize", "iterations", "gpus", "gpusPerNode", "cpus",
        "memory", "qosClass", "gpuModels", "template", "backoffLimit", "rendezvous", "priority",
        "podFailurePolicy", "cleanPodPolicy", "suspend", "activeDeadlineSeconds", "ttlSecondsAfterFinished",
        "startTimeoutSeconds", "nodeLostSeconds", "gpusPerPod", "checkpointIntervalSeconds",
    }  # fmt: skip
    assert job["required"] == ["virtualCluster"]
    template = job["properties"]["template"]
    assert template["type"] == "object" and template["x-kubernetes-preserve-unknown-fields"] is True
    status = at(schema(crds.DL_JOB), "status")["properties"]
    assert {
        "phase", "placement", "waitingAllowanceSeconds", "deadline", "predictedDurationSeconds", "eta",
        "queuePosition", "admittedAt", "startTime", "completionTime", "restarts", "conditions",
    } <= set(status)  # fmt: skip
    assert {"nodes", "gpusPerNode", "nodeNames"} <= set(status["placement"]["properties"])
    for t in ("deadline", "eta", "admittedAt", "startTime", "completionTime"):
        assert status[t]["format"] == "date-time"
    assert status["conditions"]["x-kubernetes-list-map-keys"] == ["type"]


def test_every_spec_field_is_immutable_after_admission() -> None:
    """One root rule guards the whole spec (root rules run on every write, status patches included); its
    message names whichever field changed, every spec field having its own branch."""
    rules = [r for r in schema(crds.DL_JOB)["x-kubernetes-validations"] if "oldSelf" in r["rule"]]
    assert len(rules) == 1
    (r,) = rules
    # the cheap phase test first (most status patches are of DLJobs not yet admitted), then the spec's
    assert r["rule"].startswith(
        "!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase == 'Queued' || "
        "self.spec == oldSelf.spec ||"
    )
    assert (r["fieldPath"], r["reason"]) == (".spec", "FieldValueForbidden")
    for f in at(schema(crds.DL_JOB), "spec")["properties"]:
        frozen = f not in ("suspend", "activeDeadlineSeconds", "ttlSecondsAfterFinished")  # the run policy
        assert (f"self.spec.{f} != oldSelf.spec.{f}" in r["rule"]) is frozen, f
        assert (f"'spec.{f} cannot change once the DLJob is admitted'" in r["messageExpression"]) is frozen, f


@pytest.mark.parametrize("resource", crds.RESOURCES, ids=lambda r: r.kind)
def test_crd_shell(resource: crds.Resource) -> None:
    doc = crds.crd(resource)
    spec = doc["spec"]
    assert doc["metadata"]["name"] == f"{resource.plural}.qosmos.io" and spec["group"] == "qosmos.io"
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    names = spec["names"]
    assert not set(names["shortNames"]) & TAKEN_SHORT_NAMES
    root = version["schema"]["openAPIV3Schema"]
    for col in version["additionalPrinterColumns"]:  # every column reads a field the schema declares
        path = col["jsonPath"].lstrip(".")
        if path == "metadata.creationTimestamp":
            assert col["type"] == "date"
            continue
        node = at(root, path)
        assert col["type"] == ("string" if node["type"] == "string" else node["type"]), col
    assert at(root, "metadata.name")["maxLength"] == resource.name_max <= 63


def test_printer_columns_are_the_issues() -> None:
    def shown(r: crds.Resource) -> list[str]:
        cols = crds.crd(r)["spec"]["versions"][0]["additionalPrinterColumns"]
        return [c["name"] for c in cols if not c.get("priority")]

    assert shown(crds.DL_JOB) == ["Phase", "VC", "QoS", "GPUs", "Placement", "Allowance", "ETA", "Age"]
    assert shown(crds.VIRTUAL_CLUSTER)[:2] == ["Policy", "Placement"] and shown(crds.VIRTUAL_CLUSTER)[-1] == "Age"


def test_checked_in_crds_are_fresh() -> None:
    stale = crds.stale(REPO / "crds")
    assert stale == [], f"regenerate with `qosmos crds generate`: {stale}"
    for r in crds.RESOURCES:
        assert yaml.safe_load((REPO / "crds" / r.file_name).read_text()) == crds.crd(r)


def test_cli_generate_and_check(tmp_path: Path) -> None:
    out = tmp_path / "crds"
    res = runner.invoke(app, ["crds", "generate", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == [
        "dljobs.qosmos.io.yaml",
        "inferenceservices.qosmos.io.yaml",
        "virtualclusters.qosmos.io.yaml",
    ]
    assert (out / "dljobs.qosmos.io.yaml").read_text() == (REPO / "crds" / "dljobs.qosmos.io.yaml").read_text()
    assert runner.invoke(app, ["crds", "generate", "--out", str(out), "--check"]).exit_code == 0
    path = out / "virtualclusters.qosmos.io.yaml"
    path.write_text(path.read_text().replace("default: swaf", "default: fifo"))
    res = runner.invoke(app, ["crds", "generate", "--out", str(out), "--check"])
    assert res.exit_code == 1 and f"stale: {path}" in res.output
    (out / "dljobs.qosmos.io.yaml").unlink()
    res = runner.invoke(app, ["crds", "generate", "--out", str(out), "--check"])
    assert res.exit_code == 1 and "dljobs.qosmos.io.yaml" in res.output


def test_cli_out_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    for extra in ([], ["--check"]):
        res = runner.invoke(app, ["crds", "generate", "--out", str(f), *extra])
        assert res.exit_code == 2
        assert res.output.strip().splitlines() == [f"error: --out {f} is not a folder"]


# --------------------------------------------------------------------------- examples


def examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))


def invalid_examples() -> list[Path]:
    return sorted((EXAMPLES / "invalid").glob("*.yaml"))


def expectation(path: Path) -> tuple[str, str]:
    """The field and message an invalid example's header says the apiserver names."""
    text = path.read_text()
    field = re.search(r"^# expect-field: (\S+)$", text, re.M)
    message = re.search(r"^# expect-message: (.+)$", text, re.M)
    assert field and message, f"{path.name}: header lacks expect-field / expect-message"
    return field.group(1), message.group(1)


MODELS = {"DLJob": crds.DLJob, "VirtualCluster": crds.VirtualCluster, "InferenceService": crds.InferenceService}


def test_examples_are_the_issues() -> None:
    objs = [yaml.safe_load(p.read_text()) for p in examples()]
    vcs = [crds.VirtualCluster.model_validate(o) for o in objs if o["kind"] == "VirtualCluster"]
    jobs = [crds.DLJob.model_validate(o) for o in objs if o["kind"] == "DLJob"]
    assert sorted(v.spec.policy for v in vcs) == ["qssf", "swaf"]
    assert {j.spec.qos for j in jobs if j.spec.kind != "cpu"} == set(QoSClass)
    assert [j.spec.kind for j in jobs].count("cpu") == 1
    names = {v.metadata["name"] for v in vcs}
    for j in jobs:
        assert j.spec.virtual_cluster in names
        assert j.spec.cpu_milli > 0 and j.spec.memory_mib > 0
        assert "qosmos.io/run-duration" in j.spec.template["metadata"]["annotations"]  # KWOK ends them
        if j.spec.gpus_per_node:
            assert j.spec.gpus % j.spec.gpus_per_node == 0
    for v in vcs:
        part = v.spec.partition(v.metadata["name"])
        get_policy(part.policy)  # the core accepts it
        assert part.gpu_quota == v.spec.quota.gpus


def test_the_inference_service_example_switches_modes() -> None:
    """The README's example: CPU at its annotated load, GPU above the switching point (issue 12 §1)."""
    from qosmos.extender.core.inference import Mode, decide
    from qosmos.operator.inference import annotation_load, spec_of

    (obj,) = [o for o in map(yaml.safe_load, map(Path.read_text, examples())) if o["kind"] == "InferenceService"]
    svc = crds.InferenceService.model_validate(obj)
    spec = spec_of(svc.spec, crds_db())
    qps = annotation_load(obj).qps
    assert qps is not None and spec.cpu is not None
    first = decide(spec, None, qps, 0.0)
    assert first.mode is Mode.CPU
    high = decide(spec, first.state, 2 * spec.gpu.capacity_qps, 1.0)  # overload: at once, cooldown or not
    assert high.mode is Mode.GPU and high.replicas >= 2
    # no typed thresholds: they come from the measured inference profile of the example's GPU model
    assert svc.spec.gpu_switch_batch is None and svc.spec.cpu.max_batch is None
    assert spec.source("gpu_switch_batch").startswith("profile NVIDIA H200")
    assert spec.source("cpu_max_batch").startswith("profile 16 cores")


def crds_db() -> Any:
    from qosmos.extender.core.modeldb import ModelDB

    return ModelDB.builtin()


def test_inference_service_schema() -> None:
    root = schema(crds.INFERENCE_SERVICE)
    spec = at(root, "spec")
    assert set(spec["properties"]) == {
        "modelType", "qosTargetMs", "gpuSwitchBatch", "cpu", "minReplicas", "maxReplicas", "scaleOutThreshold",
        "hysteresis", "switchCooldownSeconds", "scaleInAfterSeconds", "scaleOutAfterSeconds", "template", "load",
        "gpuModel", "forecast",
    }  # fmt: skip
    forecast = spec["properties"]["forecast"]
    assert set(forecast["properties"]) == {"enabled", "periodSeconds", "readySeconds", "quantile"}
    assert forecast["default"] == {} and forecast["properties"]["enabled"]["default"] is True
    assert set(spec["properties"]["cpu"]["properties"]) == {"coresPerReplica", "maxBatch", "maxReplicas"}
    assert spec["properties"]["scaleOutThreshold"]["default"] == 0.8
    assert spec["required"] == ["modelType"]
    prom = at(root, "spec.load.prometheus")
    assert set(prom["properties"]) == {"url", "query", "intervalSeconds"} and prom["required"] == ["url", "query"]
    status = at(root, "status")["properties"]
    assert {
        "mode", "replicas", "readyReplicas", "observedQPS", "observedAt", "lastSwitchTime", "switches", "conditions",
    } <= set(status)  # fmt: skip
    assert status["mode"]["enum"] == ["GPU", "CPU"]
    names = crds.crd(crds.INFERENCE_SERVICE)["spec"]["names"]
    assert names["shortNames"] == ["qinf"] and crds.INFERENCE_SERVICE.scope == "Namespaced"
    cols = crds.crd(crds.INFERENCE_SERVICE)["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in cols if not c.get("priority")] == [
        "Model", "Mode", "Replicas", "Ready", "QPS", "Switches", "Age",
    ]  # fmt: skip


def test_model_helpers() -> None:
    spec = crds.DLJobSpec.model_validate({"virtualCluster": "a", "gpus": 2, "cpus": "1500m", "memory": "1Gi"})
    assert (spec.cpu_milli, spec.memory_mib, spec.qos) == (1500, 1024, QoSClass.NORMAL)
    assert crds.DLJobSpec.model_validate({"virtualCluster": "a", "cpus": 3}).cpu_milli == 3000
    job = crds.DLJob.model_validate({"spec": {"virtualCluster": "a"}, "status": {"phase": "Queued"}})
    assert not job.admitted()
    job = crds.DLJob.model_validate({"spec": {"virtualCluster": "a"}, "status": {"phase": "Running"}})
    assert job.admitted()
    p = crds.VirtualClusterSpec.model_validate({"backfill": "relaxed", "relaxFactor": 0.3}).partition("x")
    assert (p.policy, p.placement, p.backfill, p.relax_factor, p.gpu_quota) == ("swaf", "cer", "relaxed", 0.3, None)


def test_invalid_examples_are_well_formed() -> None:
    assert invalid_examples()
    for p in invalid_examples():
        field, _ = expectation(p)
        obj = yaml.safe_load(p.read_text())
        assert obj["apiVersion"] == "qosmos.io/v1alpha1" and obj["kind"] in MODELS, p.name
        assert field.startswith(("spec.", "metadata.name")), p.name


def validated_paths(root: dict[str, Any]) -> set[str]:
    """Spec fields (and metadata.name) that carry a value validation of their own or are required."""
    keys = {"enum", "minimum", "maximum", "pattern", "minLength", "maxLength", "minItems", "maxItems"}
    keys |= {"maxProperties", "x-kubernetes-validations"}
    out = set()
    for path, node in walk(root):
        if not path.startswith(("spec.", "metadata.name")):
            continue
        if keys & set(node) or (node.get("type") == "object" and node.get("x-kubernetes-preserve-unknown-fields")):
            out.add(path.split("[]")[0].split("{}")[0])
        for req in node.get("required", []):
            out.add(f"{path}.{req}".replace("[]", "[0]"))  # as the apiserver names the first item's field
    return out


@pytest.mark.parametrize("resource", crds.RESOURCES, ids=lambda r: r.kind)
def test_every_validation_rule_has_an_invalid_example(resource: crds.Resource) -> None:
    mine = [expectation(p) for p in invalid_examples() if yaml.safe_load(p.read_text())["kind"] == resource.kind]
    root = schema(resource)
    missing_fields = [
        f for f in sorted(validated_paths(root)) if not any(re.match(rf"{re.escape(f)}($|[.\[])", e[0]) for e in mine)
    ]
    assert missing_fields == []
    rules = [
        r for _, node in walk(root) for r in node.get("x-kubernetes-validations", []) if "oldSelf" not in r["rule"]
    ]
    missing_rules = [r["message"] for r in rules if not any(e[1] in r["message"] for e in mine)]
    assert missing_rules == []
