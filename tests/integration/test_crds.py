"""The qosmos.io CRDs on a real apiserver: accepted by server-side apply, examples apply, every invalid
example refused naming its field, spec frozen after admission, printer columns in `kubectl get`."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from qosmos.testing.controlplane import ControlPlane

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
INVALID = sorted((EXAMPLES / "invalid").glob("*.yaml"))
FIELD_MANAGER = "qosmos-crds"


def expectation(path: Path) -> tuple[str, str]:
    text = path.read_text()
    field = re.search(r"^# expect-field: (\S+)$", text, re.M)
    message = re.search(r"^# expect-message: (.+)$", text, re.M)
    assert field and message, path
    return field.group(1), message.group(1)


def names_field(message: str, field: str) -> bool:
    """The apiserver's error names ``field`` as an error path: ``spec.x: ...``, ``spec.x[1]: ...`` or, from
    server-side apply's typed-patch check, ``.spec.x: ...``."""
    return re.search(rf"(^|[\s*.]){re.escape(field)}(\[\d+\])?: ", message, re.M) is not None


def test_crds_accepted_by_server_side_apply(control_plane: ControlPlane, crds_applied: str) -> None:
    assert "customresourcedefinition.apiextensions.k8s.io/dljobs.qosmos.io serverside-applied" in crds_applied
    assert "customresourcedefinition.apiextensions.k8s.io/virtualclusters.qosmos.io serverside-applied" in crds_applied
    assert (
        "customresourcedefinition.apiextensions.k8s.io/inferenceservices.qosmos.io serverside-applied" in crds_applied
    )
    for name in ("dljobs.qosmos.io", "virtualclusters.qosmos.io", "inferenceservices.qosmos.io"):
        crd = json.loads(control_plane.kubectl("get", "crd", name, "-o", "json").stdout)
        conds = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conds["Established"] == "True" and conds["NamesAccepted"] == "True", conds
        assert conds.get("NonStructuralSchema", "False") == "False"
    out = control_plane.kubectl("api-resources", "--api-group=qosmos.io", "--no-headers").stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines()}
    assert rows["dljobs"][1] == "dlj" and "true" in rows["dljobs"]  # short name, namespaced
    assert rows["virtualclusters"][1] == "qvc" and "false" in rows["virtualclusters"]
    assert rows["inferenceservices"][1] == "qinf" and "true" in rows["inferenceservices"]
    # a second apply of the same files is a no-op, not a conflict
    again = control_plane.kubectl(
        "apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "-f", str(REPO / "crds")
    )
    assert again.returncode == 0


def test_every_example_applies(control_plane: ControlPlane, crds_applied: str, k8s_namespace: str) -> None:
    ns = k8s_namespace
    try:
        res = control_plane.kubectl("apply", "-n", ns, "-f", str(EXAMPLES), check=False)  # the README's command
        assert res.returncode == 0, res.stderr
        objs = [yaml.safe_load(p.read_text()) for p in sorted(EXAMPLES.glob("*.yaml"))]
        for o in objs:
            assert f"{o['kind'].lower()}.qosmos.io/{o['metadata']['name']} created" in res.stdout, res.stdout
        jobs = json.loads(control_plane.kubectl("get", "dljobs", "-n", ns, "-o", "json").stdout)["items"]
        assert len(jobs) == sum(o["kind"] == "DLJob" for o in objs)
        sent = {o["metadata"]["name"]: o for o in objs}
        for j in jobs:
            # defaults filled in by the apiserver; the pod template kept whole (not pruned)
            assert j["spec"]["qosClass"] in ("Urgent", "Prior", "Normal") and j["spec"]["backoffLimit"] >= 0
            assert j["spec"]["template"] == sent[j["metadata"]["name"]]["spec"]["template"]
        vca = json.loads(control_plane.kubectl("get", "qvc", "vc-a", "-o", "json").stdout)
        assert vca["spec"]["theta"] == 0.4 and vca["spec"]["policy"] == "swaf"
        # server-side apply of each file too (dry run: they exist now)
        for p in sorted(EXAMPLES.glob("*.yaml")):
            ssa = control_plane.kubectl(
                "apply", "--server-side", "--dry-run=server", "--force-conflicts", "-n", ns, "-f", str(p), check=False
            )
            assert ssa.returncode == 0, (p.name, ssa.stderr)
    finally:
        control_plane.kubectl("delete", "qvc", "vc-a", "vc-b", "--ignore-not-found", "--wait=false", check=False)


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
@pytest.mark.parametrize("mode", ["apply", "server-side"])
def test_invalid_example_refused(
    control_plane: ControlPlane, crds_applied: str, k8s_namespace: str, path: Path, mode: str
) -> None:
    field, message = expectation(path)
    args = ["apply", "-n", k8s_namespace, "-f", str(path)]
    if mode == "server-side":
        args.insert(1, "--server-side")
    res = control_plane.kubectl(*args, check=False)
    assert res.returncode != 0, res.stdout
    assert names_field(res.stderr, field), res.stderr
    if mode == "apply":  # server-side apply words the list checks its own way ("duplicate entries", ...)
        assert message in res.stderr, res.stderr
    obj = yaml.safe_load(path.read_text())
    got = control_plane.kubectl(
        "get", f"{obj['kind'].lower()}.qosmos.io", obj["metadata"]["name"], "-n", k8s_namespace, check=False
    )
    assert got.returncode != 0 and "NotFound" in got.stderr  # nothing was stored


def _create(cp: ControlPlane, ns: str, obj: dict) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [cp.bin("kubectl"), "--kubeconfig", str(cp.kubeconfig_path), "create", "-n", ns, "-f", "-"],
        input=yaml.safe_dump(obj),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_restart_policy_refused_unless_never_or_on_failure(
    control_plane: ControlPlane, crds_applied: str, k8s_namespace: str
) -> None:
    """Issue 20 §2: a template restarting Always is refused naming spec.template.spec.restartPolicy; Never and
    OnFailure pass, and the rest of the template (undeclared fields) is stored whole; the rendezvous
    defaults are filled in."""
    cp, ns = control_plane, k8s_namespace

    def job(name: str, policy: str) -> dict:
        tmpl = {
            "metadata": {"labels": {"team": "x"}},
            "spec": {
                "restartPolicy": policy,
                "hostNetwork": False,
                "containers": [
                    {"name": "c", "image": "registry.k8s.io/pause:3.10", "env": [{"name": "A", "value": "1"}]}
                ],
            },
        }
        return {
            "apiVersion": "qosmos.io/v1alpha1",
            "kind": "DLJob",
            "metadata": {"name": name},
            "spec": {"virtualCluster": "vc-a", "gpus": 2, "template": tmpl},
        }

    res = _create(cp, ns, job("restarts-always", "Always"))
    assert res.returncode != 0 and names_field(res.stderr, "spec.template.spec.restartPolicy"), res.stderr
    assert "must be Never or OnFailure" in res.stderr
    for name, policy in (("restarts-never", "Never"), ("restarts-on-failure", "OnFailure")):
        sent = job(name, policy)
        res = _create(cp, ns, sent)
        assert res.returncode == 0, res.stderr
        got = json.loads(cp.kubectl("get", "dljob", name, "-n", ns, "-o", "json").stdout)
        assert got["spec"]["template"] == sent["spec"]["template"]
        assert got["spec"]["rendezvous"] == {"port": 29500}


def _patch(cp: ControlPlane, ns: str, body: dict, *extra: str) -> tuple[int, str]:
    res = cp.kubectl("patch", "dljob", "job-a", "-n", ns, "--type=merge", "-p", json.dumps(body), *extra, check=False)
    return res.returncode, res.stderr


def _set_phase(cp: ControlPlane, ns: str, phase: str) -> None:
    rc, err = _patch(cp, ns, {"status": {"phase": phase}}, "--subresource=status")
    assert rc == 0, err


def test_spec_frozen_after_admission(control_plane: ControlPlane, crds_applied: str, k8s_namespace: str) -> None:
    cp, ns = control_plane, k8s_namespace
    job = yaml.safe_load((EXAMPLES / "dljob-urgent.yaml").read_text())
    job["metadata"]["name"] = "job-a"
    created = _create(cp, ns, job)
    assert created.returncode == 0, created.stderr

    assert _patch(cp, ns, {"spec": {"gpus": 8}}) == (0, "")  # no status yet: still editable
    _set_phase(cp, ns, "Queued")
    assert _patch(cp, ns, {"spec": {"gpus": 4, "qosClass": "Prior"}}) == (0, "")  # queued: editable

    for phase in ("Admitted", "Running", "Succeeded", "Failed"):
        _set_phase(cp, ns, phase)
        rc, err = _patch(cp, ns, {"spec": {"gpus": 8}})
        assert rc != 0 and "spec: Forbidden: spec.gpus cannot change once the DLJob is admitted" in err, err
    _set_phase(cp, ns, "Running")
    for body, field in (
        ({"spec": {"virtualCluster": "vc-b"}}, "spec.virtualCluster"),
        ({"spec": {"template": {"metadata": {"labels": {"x": "y"}}}}}, "spec.template"),
        ({"spec": {"gpusPerNode": None}}, "spec.gpusPerNode"),  # removing a field is a change too
        ({"spec": {"backoffLimit": 9}}, "spec.backoffLimit"),
    ):
        rc, err = _patch(cp, ns, body)
        assert rc != 0 and f"Forbidden: {field} cannot change once the DLJob is admitted" in err, err
    # the run policy stays writable (suspend stops and requeues an admitted job; deadlines move)
    assert _patch(cp, ns, {"spec": {"suspend": True, "activeDeadlineSeconds": 600}}) == (0, "")
    assert _patch(cp, ns, {"spec": {"suspend": True, "gpus": 8}})[0] != 0  # but nothing else with it
    # metadata and status stay writable
    assert cp.kubectl("label", "dljob", "job-a", "-n", ns, "team=x").returncode == 0
    # a preempted, requeued job (phase back to Queued) may be edited again
    _set_phase(cp, ns, "Queued")
    assert _patch(cp, ns, {"spec": {"gpus": 2, "gpusPerNode": 1}}) == (0, "")
    got = json.loads(cp.kubectl("get", "dljob", "job-a", "-n", ns, "-o", "json").stdout)
    assert (got["spec"]["gpus"], got["spec"]["gpusPerNode"], got["spec"]["qosClass"]) == (2, 1, "Prior")
    # status is validated too
    rc, err = _patch(cp, ns, {"status": {"phase": "Pending"}}, "--subresource=status")
    assert rc != 0 and 'status.phase: Unsupported value: "Pending"' in err, err


def test_printer_columns(control_plane: ControlPlane, crds_applied: str, k8s_namespace: str) -> None:
    cp, ns = control_plane, k8s_namespace
    job = yaml.safe_load((EXAMPLES / "dljob-urgent.yaml").read_text())
    job["metadata"]["name"] = "job-a"
    assert _create(cp, ns, job).returncode == 0
    status = {
        "phase": "Running",
        "placement": {"nodes": 2, "gpusPerNode": 2, "nodeNames": ["node-0", "node-1"], "shape": "2x2"},
        "waitingAllowanceSeconds": -120,
        "eta": "2030-01-02T03:04:05Z",
        "queuePosition": 0,
        "restarts": 1,
    }
    rc, err = _patch(cp, ns, {"status": status}, "--subresource=status")
    assert rc == 0, err
    out = cp.kubectl("get", "dljobs", "-n", ns).stdout
    header, row = out.splitlines()
    assert header.split() == ["NAME", "PHASE", "VC", "QOS", "GPUS", "PLACEMENT", "ALLOWANCE", "ETA", "AGE"], out
    assert row.split()[:8] == ["job-a", "Running", "vc-a", "Urgent", "4", "2x2", "-120", "2030-01-02T03:04:05Z"], out
    wide = cp.kubectl("get", "dlj", "-n", ns, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[7:10] == ["ETA", "POSITION", "RESTARTS"], wide
    assert wide[1].split()[8:10] == ["0", "1"], wide

    vc = yaml.safe_load((EXAMPLES / "virtualcluster-swaf.yaml").read_text())
    vc["metadata"]["name"] = f"vc-{ns}"
    try:
        assert _create(cp, ns, vc).returncode == 0
        vstatus = {"gpus": {"total": 32, "used": 12, "borrowed": 0, "lent": 4}, "queued": 3, "running": 2}
        res = cp.kubectl(
            "patch", "qvc", vc["metadata"]["name"], "--type=merge", "--subresource=status", "-p",
            json.dumps({"status": vstatus | {"oldestWaitSeconds": 95}}),
        )  # fmt: skip
        assert res.returncode == 0
        lines = cp.kubectl("get", "virtualclusters", vc["metadata"]["name"]).stdout.splitlines()
        assert lines[0].split() == [
            "NAME", "POLICY", "PLACEMENT", "QUOTA", "GPUS", "USED", "QUEUED", "RUNNING", "OLDEST-WAIT", "AGE",
        ]  # fmt: skip
        assert lines[1].split()[:9] == [vc["metadata"]["name"], "swaf", "cer", "16", "32", "12", "3", "2", "95"]
        both = cp.kubectl("get", "qosmos", "-n", ns, "-o", "name").stdout.split()
        assert "dljob.qosmos.io/job-a" in both and f"virtualcluster.qosmos.io/{vc['metadata']['name']}" in both
    finally:
        cp.kubectl("delete", "qvc", vc["metadata"]["name"], "--ignore-not-found", check=False)


def test_inference_service_printer_columns(control_plane: ControlPlane, crds_applied: str, k8s_namespace: str) -> None:
    cp, ns = control_plane, k8s_namespace
    svc = yaml.safe_load((EXAMPLES / "inferenceservice-resnet50.yaml").read_text())
    assert _create(cp, ns, svc).returncode == 0
    name = svc["metadata"]["name"]
    got = json.loads(cp.kubectl("get", "qinf", name, "-n", ns, "-o", "json").stdout)
    # defaults filled in by the apiserver, the template kept whole
    assert got["spec"]["hysteresis"] == 0.2 and got["spec"]["scaleOutAfterSeconds"] == 0
    assert got["spec"]["template"] == svc["spec"]["template"]
    status = {"mode": "CPU", "replicas": 3, "readyReplicas": 2, "observedQPS": 41.5, "switches": 4, "reason": "hold"}
    res = cp.kubectl(
        "patch", "qinf", name, "-n", ns, "--type=merge", "--subresource=status", "-p", json.dumps({"status": status})
    )
    assert res.returncode == 0, res.stderr
    header, row = cp.kubectl("get", "inferenceservices", "-n", ns).stdout.splitlines()
    assert header.split() == ["NAME", "MODEL", "MODE", "REPLICAS", "READY", "QPS", "SWITCHES", "AGE"], header
    assert row.split()[:7] == [name, "ResNet50", "CPU", "3", "2", "41.5", "4"], row
    wide = cp.kubectl("get", "qinf", "-n", ns, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[7] == "REASON" and wide[1].split()[7] == "hold", wide
    rc = cp.kubectl(
        "patch", "qinf", name, "-n", ns, "--type=merge", "--subresource=status", "-p", '{"status": {"mode": "TPU"}}',
        check=False,
    )  # fmt: skip
    assert rc.returncode != 0 and 'status.mode: Unsupported value: "TPU"' in rc.stderr, rc.stderr


def test_an_admission_write_on_a_stale_version_is_refused(
    control_plane: ControlPlane, crds_applied: str, k8s_namespace: str, k8s_api: object
) -> None:
    """Issue 20 §2 (concurrent writers): the operator's admission patch carries the resourceVersion it
    decided on; after another writer's edit the apiserver refuses it (409), which ``Kube`` says as
    ``Stale``, and the status stays as the other writer left it."""
    from qosmos.operator.kube import Kube, Stale

    cp, ns = control_plane, k8s_namespace
    job = yaml.safe_load((EXAMPLES / "dljob-urgent.yaml").read_text())
    job["metadata"]["name"] = "job-a"
    assert _create(cp, ns, job).returncode == 0
    kube = Kube(k8s_api, ns)
    read = json.loads(cp.kubectl("get", "dljob", "job-a", "-n", ns, "-o", "json").stdout)["metadata"]["resourceVersion"]
    new = kube.patch_dljob_status(ns, "job-a", {"phase": "Queued"}, read)  # nobody wrote between: accepted
    assert new is not None and new != read
    assert _patch(cp, ns, {"spec": {"gpus": 8}}) == (0, "")  # another writer: kubectl edit
    with pytest.raises(Stale):
        kube.patch_dljob_status(ns, "job-a", {"phase": "Admitted"}, new)
    got = json.loads(cp.kubectl("get", "dljob", "job-a", "-n", ns, "-o", "json").stdout)
    assert got["status"]["phase"] == "Queued" and got["spec"]["gpus"] == 8
    assert kube.patch_dljob_status(ns, "job-a", {"phase": "Admitted"}) is not None  # no precondition: merged
