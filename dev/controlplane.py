"""A Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
on loopback ports, without kubelets: the one implementation behind ``qosmos dev up`` and the
integration tests (``qosmos.testing`` re-exports it).

Binaries come from ``hack/k8s/build.sh`` (see ``qosmos.dev.binaries``). Environment knob for a
throw-away control plane (no ``workdir`` given): ``QOSMOS_K8S_KEEP=1`` keeps its temp dir
(certs, kubeconfigs, logs) on exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import ssl
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from qosmos.dev.binaries import ControlPlaneError, k8s_bin_dir
from qosmos.dev.pki import PKI, kubeconfig, pem_cert, pem_key, write_private
from qosmos.dev.process import LOOPBACK, Component, free_port
from qosmos.extender.schedconfig import scheduler_config

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"
WORKDIR_PREFIX = "qosmos-k8s-"
OWNER_FILE = "owner.pid"


def new_api_client(config_file: str) -> ApiClient:
    """The client of the kubeconfig ``config_file`` (``kubernetes.config.new_client_from_config``)."""
    from kubernetes import config

    api: ApiClient = config.new_client_from_config(config_file=config_file)
    return api


def _sweep_stale_workdirs() -> None:
    """Remove temp dirs left by control planes whose Python process was SIGKILLed."""
    for d in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        try:
            pid = int((d / OWNER_FILE).read_text())
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except (OSError, ValueError):
            continue


def insecure_ctx() -> ssl.SSLContext:
    """TLS without verification: only for loopback health probes of self-signed servers."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler on loopback.

    Use as a context manager; ``kubeconfig_path`` gives cluster-admin access. With
    ``detached=True`` the processes outlive this Python process (nothing is stopped at exit);
    ``on_spawn`` is called with each component right after it starts (to record its pid),
    ``on_ready`` once ``wait_ready`` saw it healthy.
    """

    def __init__(
        self,
        bin_dir: Path | None = None,
        workdir: Path | None = None,
        start_timeout: float = 90.0,
        extra_apiserver_args: Sequence[str] = (),
        disable_admission_plugins: Sequence[str] = ("TaintNodesByCondition",),
        start_default_scheduler: bool = True,
        *,
        api_port: int = 0,
        detached: bool = False,
        on_spawn: Callable[[Component], None] | None = None,
        on_ready: Callable[[Component], None] | None = None,
    ) -> None:
        self.bin_dir = Path(bin_dir) if bin_dir else None
        self._workdir_arg = workdir
        self.start_timeout = start_timeout
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.disable_admission_plugins = list(disable_admission_plugins)
        self.start_default_scheduler = start_default_scheduler
        self.api_port = api_port
        self.detached = detached
        self.on_spawn = on_spawn
        self.on_ready = on_ready
        self.components: list[Component] = []
        self.schedulers: dict[str, Component] = {}
        self.workdir = Path()
        self.logs_dir = Path()
        self.kubeconfig_path = Path()
        self.server_url = ""
        self.etcd_url = ""
        self._ssl: ssl.SSLContext | None = None
        self._started = False

    # -- public API -------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def bin(self, name: str) -> str:
        """Absolute path of a cached binary."""
        assert self.bin_dir is not None
        return str(self.bin_dir / name)

    @property
    def admin_ssl(self) -> ssl.SSLContext:
        """An SSLContext trusting the cluster CA and presenting the admin client certificate."""
        assert self._ssl is not None
        return self._ssl

    def start(self) -> None:
        """Generate PKI and kubeconfigs, then start and wait for every component."""
        self.bin_dir = self.bin_dir or k8s_bin_dir()
        if self._workdir_arg:
            self.workdir = Path(self._workdir_arg)
            self.workdir.mkdir(parents=True, exist_ok=True)
        else:
            _sweep_stale_workdirs()
            self.workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
            (self.workdir / OWNER_FILE).write_text(str(os.getpid()))
        self.logs_dir = self.workdir / "logs"
        self.logs_dir.mkdir(exist_ok=True)
        self._started = True
        if not self.detached:
            atexit.register(self.stop)
        try:
            self._write_pki()
            self._start_etcd()
            self._start_apiserver()
            self._start_controller_manager()
            if self.start_default_scheduler:
                self.start_scheduler("default-scheduler", scheduler_config(), component="kube-scheduler")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every component (newest first) and remove the temp dir unless QOSMOS_K8S_KEEP=1."""
        if not self._started:
            return
        self._started = False
        for c in reversed(self.components):
            with contextlib.suppress(Exception):
                c.stop()
        self.components.clear()
        self.schedulers.clear()
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if self._workdir_arg:
            return
        if os.environ.get("QOSMOS_K8S_KEEP") == "1":
            (self.workdir / OWNER_FILE).unlink(missing_ok=True)  # kept on purpose: never swept
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def api_client(self) -> ApiClient:
        """A new ``kubernetes.client.ApiClient`` with cluster-admin credentials."""
        return new_api_client(str(self.kubeconfig_path))

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster."""
        return subprocess.run(
            [self.bin("kubectl"), "--kubeconfig", str(self.kubeconfig_path), *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    def spawn(
        self, name: str, argv: list[str], health_url: str | None, env: Mapping[str, str] | None = None
    ) -> Component:
        """Start a process of this cluster (logging to ``logs/<name>.log``); stopped with the cluster."""
        comp = Component(name, argv, self.logs_dir / f"{name}.log", health_url, detached=self.detached, env=env)
        self.components.append(comp)
        if self.on_spawn is not None:
            self.on_spawn(comp)
        return comp

    def wait_ready(self, comp: Component, ctx: ssl.SSLContext | None, timeout: float | None = None) -> None:
        """Wait until ``comp`` answers its health URL (``start_timeout`` by default), then call ``on_ready``."""
        comp.wait_ready(ctx, timeout or self.start_timeout)
        if self.on_ready is not None:
            self.on_ready(comp)

    def start_scheduler(
        self, name: str, config_yaml: str, timeout: float | None = None, component: str | None = None
    ) -> Component:
        """Start a kube-scheduler named ``name`` from a KubeSchedulerConfiguration YAML.

        ``clientConnection.kubeconfig`` is filled in when absent. The process is called
        ``component`` (default ``kube-scheduler-<name>``). Returns a handle with ``stop()``.
        """
        if name in self.schedulers and self.schedulers[name].running:
            raise ControlPlaneError(f"scheduler {name!r} is already running")
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        cfg = yaml.safe_load(config_yaml)
        cfg.setdefault("clientConnection", {}).setdefault("kubeconfig", str(self.workdir / "scheduler.kubeconfig"))
        cfg.setdefault("leaderElection", {"leaderElect": False})
        cfg_path = self.workdir / f"scheduler-{safe}.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        port = free_port()
        cert_dir = self.workdir / f"scheduler-{safe}-certs"
        kc = str(self.workdir / "scheduler.kubeconfig")
        comp = self.spawn(
            component or f"kube-scheduler-{safe}",
            [
                self.bin("kube-scheduler"),
                f"--config={cfg_path}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={port}",
                f"--cert-dir={cert_dir}",
                "--v=2",
            ],
            f"https://{LOOPBACK}:{port}/readyz",
        )
        self.wait_ready(comp, insecure_ctx(), timeout)
        self.schedulers[name] = comp
        return comp

    # -- internals --------------------------------------------------------------------------

    def _write_pki(self) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        w = self.workdir
        pki = PKI()
        ca_pem = pki.ca_pem
        (w / "ca.crt").write_bytes(ca_pem)
        write_private(w / "ca.key", pem_key(pki.ca_key))
        crt, key = pki.issue(
            "kube-apiserver",
            dns=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ips=[LOOPBACK, SERVICE_IP],
        )
        (w / "apiserver.crt").write_bytes(crt)
        write_private(w / "apiserver.key", key)
        sa = ec.generate_private_key(ec.SECP256R1())
        write_private(w / "sa.key", pem_key(sa))
        (w / "sa.pub").write_bytes(
            sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        fp = PKI("qosmos-front-proxy-ca")  # aggregation layer CA, so requestheader auth is configured
        (w / "front-proxy-ca.crt").write_bytes(pem_cert(fp.ca_cert))
        c, k = fp.issue("front-proxy-client")
        (w / "front-proxy-client.crt").write_bytes(c)
        write_private(w / "front-proxy-client.key", k)
        self.api_port = self.api_port or free_port()
        self.server_url = f"https://{LOOPBACK}:{self.api_port}"
        users = {
            "admin": ("kubernetes-admin", ["system:masters"]),
            "scheduler": ("system:kube-scheduler", []),
            "controller-manager": ("system:kube-controller-manager", []),
        }
        for fname, (cn, orgs) in users.items():
            c, k = pki.issue(cn, orgs=orgs)
            if fname == "admin":
                (w / "admin.crt").write_bytes(c)
                write_private(w / "admin.key", k)
            write_private(w / f"{fname}.kubeconfig", kubeconfig(self.server_url, ca_pem, c, k, cn).encode())
        self.kubeconfig_path = w / "admin.kubeconfig"
        ctx = ssl.create_default_context(cafile=str(w / "ca.crt"))
        ctx.load_cert_chain(str(w / "admin.crt"), str(w / "admin.key"))
        self._ssl = ctx

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://{LOOPBACK}:{client}"
        comp = self.spawn(
            "etcd",
            [
                self.bin("etcd"),
                "--name=qosmos",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://{LOOPBACK}:{peer}",
                f"--initial-advertise-peer-urls=http://{LOOPBACK}:{peer}",
                f"--initial-cluster=qosmos=http://{LOOPBACK}:{peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            f"{self.etcd_url}/health",
        )
        self.wait_ready(comp, None)

    def _start_apiserver(self) -> None:
        w = self.workdir
        args = [
            self.bin("kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            f"--secure-port={self.api_port}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            "--endpoint-reconciler-type=none",
            "--authorization-mode=Node,RBAC",
            f"--client-ca-file={w / 'ca.crt'}",
            f"--tls-cert-file={w / 'apiserver.crt'}",
            f"--tls-private-key-file={w / 'apiserver.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={w / 'sa.pub'}",
            f"--service-account-signing-key-file={w / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--cert-dir={w / 'apiserver-certs'}",
            f"--requestheader-client-ca-file={w / 'front-proxy-ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={w / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={w / 'front-proxy-client.key'}",
            "--allow-privileged=true",
            "--profiling=false",
        ]
        if self.disable_admission_plugins:
            args.append(f"--disable-admission-plugins={','.join(self.disable_admission_plugins)}")
        comp = self.spawn("kube-apiserver", args + self.extra_apiserver_args, f"{self.server_url}/readyz")
        self.wait_ready(comp, self._ssl)

    def _start_controller_manager(self) -> None:
        w = self.workdir
        kc = str(w / "controller-manager.kubeconfig")
        port = free_port()
        comp = self.spawn(
            "kube-controller-manager",
            [
                self.bin("kube-controller-manager"),
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                # No kubelets: never taint/evict the fake nodes.
                "--controllers=*,-node-lifecycle-controller",
                f"--service-account-private-key-file={w / 'sa.key'}",
                f"--root-ca-file={w / 'ca.crt'}",
                f"--cluster-signing-cert-file={w / 'ca.crt'}",
                f"--cluster-signing-key-file={w / 'ca.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={port}",
                f"--cert-dir={w / 'kcm-certs'}",
            ],
            f"https://{LOOPBACK}:{port}/healthz",
        )
        self.wait_ready(comp, insecure_ctx())
