"""``helm install`` of helm/qosmos on a real kubelet node (issue 14): the operator, the extender, the
qosmos-scheduler (kube-scheduler) and the node agent run as real pods from the locally built images;
DLJobs from examples/ run to Succeeded on KWOK fake GPU nodes through them; ``helm upgrade`` rolls
every Deployment while a DLJob waits in its queue; ``helm uninstall`` leaves only what qosmos creates
at run time by design (helm/README.md, "What helm uninstall leaves").

The tests run in file order on one installation (module fixture ``e2e``, tests/e2e/conftest.py).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from qosmos.testing.controlplane import SERVICE_CIDR, SERVICE_IP
from qosmos.testing.node import BRIDGE, DNS_IP, GATEWAY_IP, POD_CIDR, wait_for

from .conftest import CHART, E2E, NAMESPACE, NODE, RELEASE, ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GROUP = "qosmos.io"
FULLNAME = f"{RELEASE}-qosmos"
COMPONENTS = {"operator": 2, "extender": 1, "scheduler": 2, "node-agent": 1}  # the chart's default replicas
EXTENDER_SVC = f"{NAMESPACE}/{FULLNAME}-extender"


def pods(env: E2E, component: str) -> list[dict[str, Any]]:
    """The component's pods that are not being deleted."""
    sel = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}"
    items = env.get("pods", "-n", NAMESPACE, "-l", sel)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    conds = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return pod["status"].get("phase") == "Running" and conds.get("Ready") == "True"


def exec_py(env: E2E, pod: str, code: str, check: bool = True) -> str:
    """Python in one of the chart's pods (the qosmos image), through the apiserver and the kubelet."""
    p = env.kubectl("exec", "-n", NAMESPACE, pod, "--", "python3", "-c", code, check=check, timeout=60)
    return p.stdout + (p.stderr if not check else "")


def dljob_phases(env: E2E, ns: str) -> dict[str, str | None]:
    return {j["metadata"]["name"]: (j.get("status") or {}).get("phase") for j in env.get("dljobs", "-n", ns)["items"]}


def new_namespace(env: E2E, name: str) -> str:
    env.kubectl("create", "namespace", name)
    wait_for(lambda: env.kubectl("get", "sa", "default", "-n", name, check=False).returncode == 0, 30,
             f"the default ServiceAccount of {name}")  # fmt: skip
    return name


def agent_values(env: E2E) -> dict[str, Any]:
    """The node agent on this node: cgroup v1 with the kubelet's cgroupfs driver (testing/node.py), the
    node's kubelet root dir (its cpu_manager_state and its PodResources socket; not the host's
    /var/lib/kubelet, which this machine does not have) and the journal in the test's folder."""
    kubelet = env.node.workdir / "kubelet"
    return {
        "cgroupVersion": 1,
        "cgroupDriver": "cgroupfs",
        "kubeletRootDir": str(kubelet),
        "podResources": {"socketDir": str(kubelet / "pod-resources")},
        "stateDir": str(env.workdir / "node-agent-state"),
        # with hostNetwork (tc) the node's address on lo, not every interface of this machine
        "metrics": {"port": 9102, "address": "$(POD_IP)"},
    }


@pytest.fixture(scope="module")
def values_file(e2e: E2E) -> Path:
    f = e2e.workdir / "values.yaml"
    values = e2e.values()
    values["nodeAgent"] = {**values["nodeAgent"], **agent_values(e2e)}
    f.write_text(yaml.safe_dump(values))
    return f


@pytest.fixture(scope="module")
def installed(e2e: E2E, values_file: Path) -> Iterator[E2E]:
    t = time.monotonic()
    e2e.helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", "-f", str(values_file),
             "--wait", "--timeout", "8m")  # fmt: skip
    e2e.timings["helm_install_s"] = time.monotonic() - t
    yield e2e
    # a failed test before the uninstall test: uninstall anyway, so the node stops with no chart pods
    if e2e.helm("status", RELEASE, "-n", NAMESPACE, check=False).returncode == 0:
        e2e.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "3m", check=False)


def test_install_runs_every_component_as_a_pod_on_the_node(installed: E2E) -> None:
    env = installed
    want = {
        "operator": env.images["qosmos"]["ref"],
        "extender": env.images["qosmos"]["ref"],
        "node-agent": env.images["qosmos"]["ref"],
        "scheduler": env.images["kube-scheduler"]["ref"],
    }

    def unready() -> list[str]:
        return [p["metadata"]["name"] for comp in COMPONENTS for p in pods(env, comp) if not ready(p)]

    # helm --wait does not wait for a one-pod DaemonSet (maxUnavailable 1): the node agent's readiness
    # probe (its first pod list) may still be pending here
    try:
        wait_for(lambda: not unready(), 120, "every chart pod Ready")
    except AssertionError:
        logs = {n: env.kubectl("logs", "-n", NAMESPACE, n, "--tail", "30", check=False).stdout for n in unready()}
        raise AssertionError(f"not Ready after 120 s; their logs: {logs}") from None
    for comp, n in COMPONENTS.items():
        ps = pods(env, comp)
        assert len(ps) == n, (comp, [p["metadata"]["name"] for p in ps])
        for p in ps:
            assert p["spec"]["nodeName"] == NODE and ready(p), (comp, p["status"])
            st = p["status"]["containerStatuses"][0]
            assert st["image"] == want[comp] and st["restartCount"] == 0, (comp, st)
    # the containers really run in the node's containerd, from the imported images
    running = env.node.ctr("containers", "ls").stdout
    assert running.count(want["operator"]) == 4 and running.count(want["scheduler"]) == 2, running
    # the node agent read the host's cgroups through its hostPaths (cgroupfs, the kubelet's driver here)
    agent = pods(env, "node-agent")[0]["metadata"]["name"]
    start_line = rf"node {NODE}: cgroup v1/cgroupfs, cpus [0-9,]+.* PodResources served at \S+"  # once read
    wait_for(lambda: re.search(start_line, env.kubectl("logs", "-n", NAMESPACE, agent).stdout), 60,
             "the node agent's start line (the kubelet's PodResources socket answering through the mount)")  # fmt: skip
    # ... and sees only the kubepods subtrees of cpuset, cpu and cpuacct, nothing else of /sys/fs/cgroup
    seen = exec_py(env, agent, "import os\nfor d in sorted(os.listdir('/host/sys/fs/cgroup')):\n"
                               "    print(d, sorted(os.listdir('/host/sys/fs/cgroup/' + d)))")  # fmt: skip
    assert seen.split("\n")[:3] == ["cpu ['kubepods']", "cpuacct ['kubepods']", "cpuset ['kubepods']"], seen
    assert len(seen.strip().splitlines()) == 3, seen
    # kopf peering: one operator replica runs the passes, the other stands by
    ips = [p["status"]["podIP"] for p in pods(env, "operator")]

    def active() -> list[float]:
        out = []
        for ip in ips:  # the host reaches pod IPs through its address on the bridge
            text = urllib.request.urlopen(f"http://{ip}:8080/metrics", timeout=5).read().decode()
            out += [float(m) for m in re.findall(r"^qosmos_operator_active ([0-9.]+)$", text, re.M)]
        return out

    wait_for(lambda: sorted(active()) == [0.0, 1.0], 90, "one active operator replica and one standing by")
    print(f"\nhelm install --wait: {env.timings['helm_install_s']:.1f} s; images {want['operator']} "
          f"({env.images['qosmos']['bytes'] / 1e6:.0f} MB archive), {want['scheduler']}")  # fmt: skip


def test_node_agent_pod_manages_a_pod_on_its_node(installed: E2E) -> None:
    """The DaemonSet's agent (root, hostPID, the host's /sys/fs/cgroup) finds a managed training pod's
    cgroups on the node, writes its start cores (SODA §V-B-1: no GPU source here, so it keeps them)
    and reports it as an Event through the apiserver."""
    env = installed
    ns = new_namespace(env, "e2e-agent")
    ann = {"qosmos.io/job-kind": "training", "qosmos.io/model-category": "CV"}
    manifest = env.node.pod_manifest("train", "sleep 3600", namespace=ns, labels={"qosmos.io/node-agent": "managed"},
                                     annotations=ann, cpu_request="100m")  # fmt: skip
    env.node.run_pod(manifest)

    def adjusted() -> list[str]:
        items = env.get("events", "-n", ns, "--field-selector", "involvedObject.name=train")["items"]
        return [e["message"] for e in items if e["reason"] == "CpuAdjusted" and e["source"].get("host") == NODE]

    msgs = wait_for(adjusted, 60, "the agent's CpuAdjusted Event on the managed pod", every=1)
    env.kubectl("delete", "pod", "-n", ns, "train", "--grace-period=0", "--force")
    print(f"\nnode agent pod on {NODE}: CpuAdjusted {msgs[0]!r}")


def test_pods_reach_the_apiserver_and_services_and_nothing_else(installed: E2E) -> None:
    """The node's network rule holds for the chart's pods: routes to the pod CIDR and the service
    CIDR only; Service names resolve to their VIPs; anything else is unreachable."""
    env = installed
    pod = pods(env, "extender")[0]["metadata"]["name"]
    table = exec_py(env, pod, "print(open('/proc/net/route').read())")
    rows = [ln.split() for ln in table.splitlines()[1:] if ln.strip()]

    def cidr(dest: str, mask: str) -> str:
        ip = ".".join(str(b) for b in bytes.fromhex(dest)[::-1])
        return f"{ip}/{bin(int(mask, 16)).count('1')}"

    assert sorted(cidr(r[1], r[7]) for r in rows) == sorted([SERVICE_CIDR, POD_CIDR])  # no default route
    svc = env.get("service", "-n", NAMESPACE, f"{FULLNAME}-extender")["spec"]["clusterIP"]
    got = exec_py(env, pod, f"import socket; print(socket.gethostbyname('{FULLNAME}-extender.{NAMESPACE}.svc'))")
    assert got.strip() == svc  # through the pod's resolv.conf (search path) and the DNS on DNS_IP
    out = exec_py(env, pod, "import socket\ntry: socket.create_connection(('198.51.100.1', 443), 3)\n"
                            "except OSError as e: print('errno', e.errno)", check=False)  # fmt: skip
    assert "errno 101" in out, out  # ENETUNREACH: no route off the machine
    out = exec_py(env, pod, "import socket\ntry: socket.gethostbyname('registry.qosmos.invalid')\n"
                            "except OSError as e: print('dns', e)", check=False)  # fmt: skip
    assert out.startswith("dns "), (
        out
    )  # no upstream resolver (a reserved name: RFC 6761 .invalid never resolves anywhere)
    print(f"\npod routes {sorted(cidr(r[1], r[7]) for r in rows)} (gateway {GATEWAY_IP}, DNS {DNS_IP}); "
          f"{FULLNAME}-extender.{NAMESPACE}.svc -> {svc}; 198.51.100.1:443 -> ENETUNREACH")  # fmt: skip


def _extender_metrics(env: E2E, client: str = "metrics") -> str:
    """The extender's /metrics over HTTPS, inside its pod, with the client certificate of the chart's
    Secret ``<fullname>-<client>-tls`` (the metrics client's is the one allowed; another one the same CA
    signed gets the HTTP status printed instead)."""
    pod = pods(env, "extender")[0]["metadata"]["name"]
    data = env.get("secret", "-n", NAMESPACE, f"{FULLNAME}-{client}-tls")["data"]
    return exec_py(env, pod, (
        "import base64, ssl, urllib.error, urllib.request\n"
        f"open('/tmp/c.crt', 'wb').write(base64.b64decode({data['tls.crt']!r}))\n"
        f"open('/tmp/c.key', 'wb').write(base64.b64decode({data['tls.key']!r}))\n"
        "c = ssl.create_default_context(cafile='/etc/qosmos/tls/ca.crt'); c.check_hostname = False\n"
        "c.load_cert_chain('/tmp/c.crt', '/tmp/c.key')\n"
        "try: print(urllib.request.urlopen('https://127.0.0.1:8888/metrics', context=c, timeout=10).read().decode())\n"
        "except urllib.error.HTTPError as e: print('HTTP', e.code, e.read().decode())"
    ))  # fmt: skip


def _decisions(metrics: str, verb: str) -> float:
    return sum(float(v) for v in re.findall(rf'^qosmos_extender_decisions_total{{[^}}]*verb="{verb}"[^}}]*}} (\S+)$',
                                            metrics, re.M))  # fmt: skip


def test_examples_run_to_succeeded_through_the_installed_components(installed: E2E) -> None:
    env = installed
    t = time.monotonic()
    ns = new_namespace(env, "e2e-examples")
    docs = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] in ("VirtualCluster", "DLJob")]
    f = env.workdir / "examples.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    names = {d["metadata"]["name"] for d in docs if d["kind"] == "DLJob"}
    assert len(names) == 6
    before = _decisions(_extender_metrics(env), "filter")
    # a certificate the chart's CA signed for another identity (the extender's own) reads no metrics
    refused = _extender_metrics(env, "extender")
    assert refused.startswith("HTTP 403") and "may not call /metrics" in refused, refused
    env.kubectl("apply", "-n", ns, "-f", str(f))
    last: dict[str, str | None] = {}

    def all_succeeded() -> bool:
        last.update(dljob_phases(env, ns))
        return set(last.values()) == {"Succeeded"}

    try:
        wait_for(all_succeeded, 400, "every example DLJob Succeeded", every=2)
    except AssertionError as e:
        raise AssertionError(f"{e}: {last}") from None
    assert set(last) == names, last
    env.timings["examples_s"] = time.monotonic() - t
    # placed by the installed qosmos-scheduler on the KWOK GPU nodes, with the extender's decisions
    gpu_pods = 0
    for p in env.get("pods", "-n", ns, "-l", "qosmos.io/job")["items"]:
        assert p["spec"]["schedulerName"] == "qosmos-scheduler" and p["spec"]["nodeName"] in env.fake_nodes
        gpu_pods += any(
            "nvidia.com/gpu" in (c.get("resources", {}).get("limits") or {}) for c in p["spec"]["containers"]
        )
    assert gpu_pods >= 4
    after = _decisions(_extender_metrics(env), "filter")
    assert after > before, (before, after)  # the scheduler pod called the extender pod's /filter
    assert env.services.connections[EXTENDER_SVC] > 0  # ... through the extender's Service
    print(f"\nexamples Succeeded in {env.timings['examples_s']:.0f} s: {sorted(names)}; extender filter "
          f"decisions {before:.0f} -> {after:.0f}; connections to {EXTENDER_SVC}: {env.services.connections[EXTENDER_SVC]}")  # fmt: skip


def test_upgrade_rolls_without_losing_a_queued_dljob(installed: E2E, values_file: Path) -> None:
    env = installed
    ns = new_namespace(env, "e2e-upgrade")
    vc = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "VirtualCluster", "metadata": {"name": "vc-up"},
          "spec": {"nodeSelector": {"qosmos.io/pool": "c"}}}  # fmt: skip  # one 8-GPU node

    def dljob(name: str, run: str | None) -> dict[str, Any]:
        tmpl: dict[str, Any] = {"spec": {"terminationGracePeriodSeconds": 0,
                                         "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}  # fmt: skip
        if run:
            tmpl["metadata"] = {"annotations": {"qosmos.io/run-duration": run}}
        return {"apiVersion": f"{GROUP}/v1alpha1", "kind": "DLJob", "metadata": {"name": name, "namespace": ns},
                "spec": {"virtualCluster": "vc-up", "gpus": 8, "template": tmpl}}  # fmt: skip

    f = env.workdir / "upgrade.yaml"
    f.write_text(yaml.safe_dump_all([vc, dljob("blocker", None)]))
    env.kubectl("apply", "-f", str(f))
    wait_for(lambda: dljob_phases(env, ns).get("blocker") == "Running", 120, "the blocker Running", every=1)
    f.write_text(yaml.safe_dump(dljob("waiting", "5s")))
    env.kubectl("apply", "-f", str(f))

    def queued() -> dict[str, Any] | None:
        j = env.get("dljob", "-n", ns, "waiting")
        st = j.get("status") or {}
        return j if st.get("phase") == "Queued" and st.get("queuePosition") == 0 else None

    job = wait_for(queued, 60, "the second DLJob Queued behind the blocker", every=1)
    old = {c: {p["metadata"]["uid"] for p in pods(env, c)} for c in ("operator", "extender", "scheduler")}
    t = time.monotonic()
    # changed values that touch every Deployment's pod template
    env.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(values_file),
             "--set", "operator.interval=5", "--set", "extender.shortlist=6", "--set", "scheduler.verbosity=3",
             "--wait", "--timeout", "8m")  # fmt: skip
    env.timings["helm_upgrade_s"] = time.monotonic() - t
    wait_for(lambda: all(len(pods(env, c)) == COMPONENTS[c] for c in old), 120, "the old pods gone")
    for comp, uids in old.items():
        now = pods(env, comp)
        assert all(ready(p) for p in now) and not uids & {p["metadata"]["uid"] for p in now}, comp
    op = pods(env, "operator")[0]["spec"]["containers"][0]["args"]
    assert op[op.index("--interval") + 1] == "5"
    after = env.get("dljob", "-n", ns, "waiting")
    assert after["metadata"]["uid"] == job["metadata"]["uid"]
    assert (after.get("status") or {}).get("phase") == "Queued"  # still waiting, never lost nor admitted
    env.kubectl("delete", "dljob", "-n", ns, "blocker")
    wait_for(lambda: dljob_phases(env, ns).get("waiting") == "Succeeded", 180,
             "the queued DLJob Succeeded after the upgrade", every=1)  # fmt: skip
    print(f"\nhelm upgrade --wait: {env.timings['helm_upgrade_s']:.1f} s; every operator, extender and "
          f"scheduler pod replaced; 'waiting' stayed Queued through it and then Succeeded")  # fmt: skip


# The node as it was before the agent acted on a pod kept alive across the uninstall (issue 22 §1):
# filled by test_node_agent_throttles_a_pod_and_shapes_its_veth, compared by the uninstall test.
RESTORE: dict[str, Any] = {}
RESTORE_NS = "e2e-restore"


def node_state(env: E2E, pod: dict[str, Any], dev: str) -> dict[str, bytes]:
    """What the agent may change for the pod, as bytes: cpuset.cpus of its pod and container cgroups and the
    kubepods levels above it, their CFS quota and period, and ``tc qdisc/class show`` of ``dev``."""
    out: dict[str, bytes] = {}
    for ctrl, names in (("cpuset", ("cpuset.cpus",)), ("cpu", ("cpu.cfs_quota_us", "cpu.cfs_period_us"))):
        d = env.node.pod_cgroup(pod, ctrl)
        dirs = [d, *sorted(c for c in d.iterdir() if c.is_dir())]
        dirs += [a for a in d.parents if "kubepods" in a.parts]  # burstable/, kubepods/
        for name in names:
            for x in dirs:
                out[str(x / name)] = (x / name).read_bytes()
    for what in ("qdisc", "class"):
        out[f"tc {what} show dev {dev}"] = subprocess.run(["tc", what, "show", "dev", dev], capture_output=True).stdout
    return out


def _differ(a: dict[str, bytes], b: dict[str, bytes]) -> dict[str, tuple[bytes | None, bytes | None]]:
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


def test_node_agent_throttles_a_pod_and_shapes_its_veth(installed: E2E) -> None:
    """A training pod (one core: §V-B-1 with two hints) asking for the §V-E network split, with the chart's
    tc switch on its host-side veth (``helm upgrade``: hostNetwork, NET_ADMIN): the agent narrows its
    cpusets, sets its containers' CFS quota and puts its HTB on the veth. The pod stays for the uninstall,
    which must put every byte back (test_uninstall_leaves_nothing_behind)."""
    env = installed
    ns = new_namespace(env, RESTORE_NS)
    ann = {"qosmos.io/job-kind": "training", "qosmos.io/model-category": "CV", "qosmos.io/multi-node": "true",
           "qosmos.io/soda-hints": "pipeline,large-weights"}  # fmt: skip  # N_start 3 - 2 = 1 core
    pod = env.node.run_pod(env.node.pod_manifest("keep", "sleep 3600", namespace=ns, annotations=ann,
                                                 cpu_request="100m"))  # fmt: skip  # not managed yet
    dev = env.node.host_veth(pod)
    before = node_state(env, pod, dev)
    assert b"htb" not in before[f"tc qdisc show dev {dev}"]
    t = time.monotonic()
    env.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values", "--set", f"nodeAgent.tc.device={dev}",
             "--set", "nodeAgent.tc.linkMbit=100", "--wait", "--timeout", "5m")  # fmt: skip
    env.timings["helm_upgrade_tc_s"] = time.monotonic() - t
    agent = wait_for(lambda: [p for p in pods(env, "node-agent") if p["spec"].get("hostNetwork") and ready(p)], 120,
                     "the node agent with hostNetwork (tc)")[0]["metadata"]["name"]  # fmt: skip
    wait_for(lambda: f"tc {dev} at 100 Mbit/s" in env.kubectl("logs", "-n", NAMESPACE, agent).stdout, 60,
             "the agent's start line with tc on")  # fmt: skip
    env.kubectl("label", "pod", "-n", ns, "keep", "qosmos.io/node-agent=managed")
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://")[-1]

    def acted() -> dict[str, bytes] | None:
        now = node_state(env, pod, dev)
        cpus = next(v for k, v in now.items() if k.endswith(f"{cid}/cpuset.cpus"))
        quota = next(v for k, v in now.items() if k.endswith(f"{cid}/cpu.cfs_quota_us"))
        shaped = b"htb 50:" in now[f"tc qdisc show dev {dev}"]
        return now if cpus.strip() == b"0" and quota.strip() == b"100000" and shaped else None

    try:
        changed = wait_for(acted, 60, "one core, its quota and the HTB on the pod's veth", every=1)
    except AssertionError as e:
        raise AssertionError(f"{e}; agent log:\n{env.kubectl('logs', '-n', NAMESPACE, agent).stdout[-3000:]}") from None
    journal = json.loads((Path(agent_values(env)["stateDir"]) / "state.json").read_text())
    assert journal["files"] and dev in journal["qdiscs"], journal  # recorded before the first write
    RESTORE.update(pod=pod, dev=dev, before=before, changed=changed, journal=journal)
    print(f"\nagent on {NODE} (hostNetwork, tc on {dev}): changed {len(_differ(before, changed))} of "
          f"{len(before)} recorded files and tc outputs; journal {len(journal['files'])} files")  # fmt: skip


# What may remain after `helm uninstall` by design (helm/README.md): the namespace's own
# ServiceAccount and root CA ConfigMap, the QSSF history, the scheduler's leader Lease, Events.
BY_DESIGN = {
    ("ConfigMap", "kube-root-ca.crt"),
    ("ServiceAccount", "default"),
    ("ConfigMap", "qosmos-operator-durations"),
    ("Lease", "qosmos-scheduler"),
}


def _left(env: E2E, namespaced: list[str], cluster: list[str]) -> list[str]:
    """Objects of the release anywhere (its instance label), anything in its namespace but BY_DESIGN,
    cluster roles and bindings named after it."""
    left = []
    for i in env.get(",".join(namespaced + cluster), "-A", "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]:
        left.append(f"{i['kind']} {i['metadata'].get('namespace', '')}/{i['metadata']['name']}")
    for i in env.get(",".join(namespaced), "-n", NAMESPACE)["items"]:
        if (i["kind"], i["metadata"]["name"]) not in BY_DESIGN:
            left.append(f"{i['kind']} {NAMESPACE}/{i['metadata']['name']}")
    for i in env.get("clusterroles,clusterrolebindings")["items"]:
        if FULLNAME in i["metadata"]["name"]:
            left.append(f"{i['kind']} {i['metadata']['name']}")
    return sorted(set(left))


def _bridge_addresses(env: E2E) -> set[str]:
    out = subprocess.run(["ip", "-o", "-4", "addr", "show", "dev", BRIDGE], capture_output=True, text=True).stdout
    return {ln.split()[3] for ln in out.splitlines()}


def _debug_node_cleanup(env: E2E, state_dir: str) -> str:
    """helm/README.md's recipe for an agent that could not restore (SIGKILL, OOM): ``qosmos sidecar
    cleanup`` in a ``kubectl debug node`` pod (the host at /host, root); returns its output."""
    custom = env.workdir / "debug-root.json"
    custom.write_text(json.dumps({"securityContext": {"runAsUser": 0, "runAsGroup": 0}}))
    p = env.kubectl("debug", f"node/{NODE}", "-n", "default", "--profile=sysadmin", f"--custom={custom}",
                    f"--image={env.images['qosmos']['ref']}", "--", "qosmos", "sidecar", "cleanup",
                    "--state-dir", f"/host{state_dir}")  # fmt: skip
    name = re.search(r"node-debugger-\S+", p.stdout + p.stderr)
    assert name, p.stdout + p.stderr
    pod = name.group(0)

    def finished() -> dict[str, Any] | None:
        j = env.get("pod", "-n", "default", pod)
        return j if j["status"].get("phase") in ("Succeeded", "Failed") else None

    done = wait_for(finished, 120, f"the debug pod {pod}", every=1)
    out = env.kubectl("logs", "-n", "default", pod).stdout
    env.kubectl("delete", "pod", "-n", "default", pod, "--wait=true", timeout=60)
    assert done["status"]["phase"] == "Succeeded", out
    return out


def _node_restored_byte_for_byte(env: E2E) -> None:
    """The uninstall's SIGTERM made the agent put back every byte it changed for the kept pod (cpusets,
    CFS quotas, the veth's qdiscs and classes) and empty its journal. Then the recipe for an agent that
    could not: its changes and its journal put back on the node as a SIGKILLed agent leaves them, undone
    by ``kubectl debug node ... qosmos sidecar cleanup``."""
    from qosmos.sidecar.journal import Journal

    assert RESTORE, "test_node_agent_throttles_a_pod_and_shapes_its_veth did not run"
    pod, dev, before, changed = RESTORE["pod"], RESTORE["dev"], RESTORE["before"], RESTORE["changed"]
    after = node_state(env, pod, dev)
    assert after == before, _differ(before, after)
    state_dir = agent_values(env)["stateDir"]
    state = Path(state_dir) / "state.json"
    assert Journal.load(state).empty(), state.read_text()
    # as a SIGKILLed agent leaves the node: narrower cpusets (children first, as the kernel wants), quotas, HTB
    diff = _differ(before, changed)
    for k in sorted((k for k in diff if k.endswith("cpuset.cpus")), key=lambda k: -len(Path(k).parts)):
        Path(k).write_bytes(changed[k])
    for k in (k for k in diff if k.endswith("cpu.cfs_quota_us")):
        Path(k).write_bytes(changed[k])
    subprocess.run(["tc", "qdisc", "replace", "dev", dev, "root", "handle", "50:", "htb"], check=True)
    state.write_text(json.dumps(RESTORE["journal"]))
    assert node_state(env, pod, dev) != before
    out = _debug_node_cleanup(env, state_dir)
    assert re.search(r"restored [1-9]\d*, not restored 0", out), out
    after = node_state(env, pod, dev)
    assert after == before, _differ(before, after)
    print(f"\nuninstall: {len(before)} cgroup files and tc outputs of {dev} byte-identical; kubectl debug node "
          f"cleanup after a simulated SIGKILL: {out.strip().splitlines()[-1]!r}")  # fmt: skip


def test_uninstall_leaves_nothing_behind(installed: E2E) -> None:
    env = installed
    # as helm/README.md says: DLJobs and VirtualClusters first (the operator takes its node labels back)
    for ns in ("e2e-examples", "e2e-upgrade"):
        env.kubectl("delete", "dljobs", "--all", "-n", ns, "--wait=true", timeout=120)
    env.kubectl("delete", "virtualclusters", "--all", "--wait=true", timeout=120)
    wait_for(lambda: not env.get("nodes", "-l", "qosmos.io/vc")["items"], 120, "qosmos.io/vc node labels removed")
    t = time.monotonic()
    env.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "5m")
    env.timings["helm_uninstall_s"] = time.monotonic() - t
    assert env.helm("list", "-A", "-q").stdout.strip() == ""
    wait_for(lambda: not env.get("pods", "-n", NAMESPACE)["items"], 120, "the chart's pods gone")
    _node_restored_byte_for_byte(env)  # the agent's SIGTERM; then the SIGKILL recipe (helm/README.md)
    env.kubectl("delete", "pod", "-n", RESTORE_NS, "keep", "--grace-period=0", "--force")
    env.kubectl("delete", "namespace", RESTORE_NS, "--wait=true", timeout=120)
    resources = env.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()
    assert not [r for r in resources if r.endswith((".qosmos.io", ".kopf.dev"))]  # the CRDs are gone
    namespaced = [r for r in env.kubectl("api-resources", "--verbs=list", "--namespaced=true", "-o", "name").stdout.split()
                  if r not in ("events", "events.events.k8s.io")]  # fmt: skip
    cluster = [r for r in resources if r not in namespaced and r not in ("events", "events.events.k8s.io")]
    last: list[list[str]] = []

    def clean() -> bool:  # the garbage collector removes ReplicaSets, EndpointSlices... a moment later
        last[:] = [_left(env, namespaced, cluster)]
        return not last[0]

    with contextlib.suppress(AssertionError):
        wait_for(clean, 60, "the release's objects gone", every=2)
    assert last[0] == [], last[0]
    # the node: no container of the chart in its containerd; no Service VIP of the chart on its bridge
    wait_for(lambda: not env.node.ctr("containers", "ls", "-q").stdout.strip(), 60, "the node's containers removed")
    want = {f"{GATEWAY_IP}/24", f"{SERVICE_IP}/32", f"{DNS_IP}/32"}  # the kubernetes Service and the DNS
    wait_for(lambda: _bridge_addresses(env) == want, 30, f"only {sorted(want)} on {BRIDGE}")
    print(f"\nhelm uninstall --wait: {env.timings['helm_uninstall_s']:.1f} s; left by design: "
          f"{sorted(n for _, n in BY_DESIGN)}, Events and the namespace")  # fmt: skip
