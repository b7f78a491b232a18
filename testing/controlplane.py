"""A throw-away Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler) running on free loopback ports, without kubelets.

Binaries come from ``hack/k8s/build.sh`` (cached under ``$QOSMOS_K8S_CACHE``,
default ``~/.cache/qosmos/k8s/<k8s-version>/bin``). Environment knobs:

* ``QOSMOS_K8S_BIN_DIR``: use binaries from this directory instead of the cache.
* ``QOSMOS_K8S_NO_BUILD=1``: never run build.sh; fail when binaries are missing.
* ``QOSMOS_K8S_KEEP=1``: keep the temp dir (certs, kubeconfigs, logs) on exit.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import datetime as dt
import ipaddress
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from qosmos.extender.schedconfig import (  # re-exported: the production scheduler profile
    EXTENDER_WEIGHT,  # noqa: F401
    PERCENTAGE_OF_NODES_TO_SCORE,  # noqa: F401
    ExtenderClientTLS,  # noqa: F401
    qosmos_scheduler_config,  # noqa: F401
    scheduler_config,
)

DEFAULT_K8S_VERSION = "v1.34.4"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"
GPU_RESOURCE = "nvidia.com/gpu"
WORKDIR_PREFIX = "qosmos-k8s-"
OWNER_FILE = "owner.pid"


class ControlPlaneError(RuntimeError):
    """A component failed to build, start or become ready."""


# --------------------------------------------------------------------------- binaries


def repo_root() -> Path | None:
    """The qosmos checkout holding ``hack/k8s/build.sh`` (env ``QOSMOS_REPO`` first)."""
    candidates = [Path(os.environ["QOSMOS_REPO"])] if os.environ.get("QOSMOS_REPO") else []
    candidates += list(Path(__file__).resolve().parents)
    for c in candidates:
        if (c / "hack" / "k8s" / "build.sh").is_file():
            return c
    return None


def build_script() -> Path | None:
    """Path of ``hack/k8s/build.sh`` or None outside a checkout."""
    root = repo_root()
    return root / "hack" / "k8s" / "build.sh" if root else None


def k8s_version() -> str:
    """The Kubernetes version pinned in build.sh."""
    script = build_script()
    if script:
        m = re.search(r"^K8S_VERSION=(\S+)", script.read_text(), re.M)
        if m:
            return m.group(1)
    return DEFAULT_K8S_VERSION


def _cache_bin_dir() -> Path:
    if os.environ.get("QOSMOS_K8S_BIN_DIR"):
        return Path(os.environ["QOSMOS_K8S_BIN_DIR"])
    cache = Path(os.environ.get("QOSMOS_K8S_CACHE", Path.home() / ".cache" / "qosmos" / "k8s"))
    return cache / k8s_version() / "bin"


def binaries_present(bin_dir: Path | None = None) -> bool:
    """True when every control-plane binary is in ``bin_dir`` (default: the cache)."""
    d = bin_dir or _cache_bin_dir()
    return all(os.access(d / b, os.X_OK) for b in BINARIES)


def k8s_bin_dir(build: bool = True) -> Path:
    """Directory with the control-plane binaries, running build.sh when they are missing.

    Building is skipped when ``build`` is false or ``QOSMOS_K8S_NO_BUILD=1``.
    """
    d = _cache_bin_dir()
    if binaries_present(d):
        return d
    script = build_script()
    if (
        os.environ.get("QOSMOS_K8S_BIN_DIR")
        or not build
        or os.environ.get("QOSMOS_K8S_NO_BUILD") == "1"
        or script is None
    ):
        raise ControlPlaneError(f"Kubernetes binaries missing in {d}; run hack/k8s/build.sh")
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    if proc.returncode != 0 or not binaries_present(d):
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise ControlPlaneError(f"hack/k8s/build.sh failed (rc={proc.returncode}):\n{tail}")
    return d


# --------------------------------------------------------------------------- PKI


def _pem_key(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pem_cert(cert: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


class _PKI:
    """A tiny CA issuing EC P-256 certificates."""

    def __init__(self) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._x509, self._hashes, self._ec, self._oid = x509, hashes, ec, NameOID
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "qosmos-test-ca")])
        now = dt.datetime.now(dt.UTC)
        self.ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
            .sign(self.ca_key, hashes.SHA256())
        )

    def issue(
        self, cn: str, orgs: Sequence[str] = (), dns: Sequence[str] = (), ips: Sequence[str] = ()
    ) -> tuple[bytes, bytes]:
        """Return (cert PEM, key PEM) for a client (no SANs) or server certificate."""
        x509, oid = self._x509, self._oid
        key = self._ec.generate_private_key(self._ec.SECP256R1())
        attrs = [x509.NameAttribute(oid.ORGANIZATION_NAME, o) for o in orgs]
        attrs.append(x509.NameAttribute(oid.COMMON_NAME, cn))
        now = dt.datetime.now(dt.UTC)
        server = bool(dns or ips)
        usage = x509.ExtendedKeyUsageOID.SERVER_AUTH if server else x509.ExtendedKeyUsageOID.CLIENT_AUTH
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self.ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
            sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return _pem_cert(b.sign(self.ca_key, self._hashes.SHA256())), _pem_key(key)


def _kubeconfig(server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str) -> str:
    def b64(b: bytes) -> str:
        return base64.b64encode(b).decode()

    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "qosmos", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)}}],
        "contexts": [{"name": "qosmos", "context": {"cluster": "qosmos", "user": user}}],
        "current-context": "qosmos",
    }
    return yaml.safe_dump(cfg, sort_keys=False)


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pdeathsig() -> None:  # pragma: no cover - runs in the child
    """Ask Linux to SIGKILL the child when its parent dies (no orphans on a hard crash)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


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


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "<no log>"


class Component:
    """One control-plane process in its own process group, logging to a file."""

    def __init__(self, name: str, argv: list[str], log_path: Path, health_url: str | None) -> None:
        self.name, self.argv, self.log_path, self.health_url = name, argv, log_path, health_url
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        in_main = threading.current_thread() is threading.main_thread()
        self.proc = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_pdeathsig if in_main and os.name == "posix" else None,
        )

    @property
    def running(self) -> bool:
        """True while the process has not exited."""
        return self.proc.poll() is None

    def log_tail(self, n: int = 40) -> str:
        """The last ``n`` lines of the component's log."""
        return _tail(self.log_path, n)

    def wait_ready(self, ctx: ssl.SSLContext | None, timeout: float = 60.0) -> None:
        """Poll ``health_url`` until it answers 200; raise with the log tail otherwise."""
        if not self.health_url:
            return
        deadline, last = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            if not self.running:
                raise ControlPlaneError(
                    f"{self.name} exited with code {self.proc.returncode}; last log lines:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.health_url, timeout=2, context=ctx) as r:
                    if r.status == 200:
                        return
                    last = f"HTTP {r.status}"
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}"
            except (OSError, urllib.error.URLError) as e:
                last = str(e)
            time.sleep(0.25)
        raise ControlPlaneError(
            f"{self.name} not ready after {timeout:.0f}s at {self.health_url} ({last}); "
            f"last log lines:\n{self.log_tail()}"
        )

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``timeout`` seconds."""
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # stray children, if any
        self._log.close()


# --------------------------------------------------------------------------- scheduler configs


# The production profile (scheduler_config, qosmos_scheduler_config, EXTENDER_WEIGHT,
# PERCENTAGE_OF_NODES_TO_SCORE) lives in qosmos.extender.schedconfig, since production code
# never imports qosmos.testing; it is re-exported here (see the imports) for the tests.


# --------------------------------------------------------------------------- control plane


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler on loopback.

    Use as a context manager; ``kubeconfig_path`` gives cluster-admin access.
    """

    def __init__(
        self,
        bin_dir: Path | None = None,
        workdir: Path | None = None,
        start_timeout: float = 90.0,
        extra_apiserver_args: Sequence[str] = (),
        disable_admission_plugins: Sequence[str] = ("TaintNodesByCondition",),
        start_default_scheduler: bool = True,
    ) -> None:
        self.bin_dir = Path(bin_dir) if bin_dir else None
        self._workdir_arg = workdir
        self.start_timeout = start_timeout
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.disable_admission_plugins = list(disable_admission_plugins)
        self.start_default_scheduler = start_default_scheduler
        self.components: list[Component] = []
        self.schedulers: dict[str, Component] = {}
        self.workdir = Path()
        self.logs_dir = Path()
        self.kubeconfig_path = Path()
        self.server_url = ""
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
        atexit.register(self.stop)
        try:
            self._write_pki()
            self._start_etcd()
            self._start_apiserver()
            self._start_controller_manager()
            if self.start_default_scheduler:
                self.start_scheduler("default-scheduler", scheduler_config())
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

    def api_client(self) -> Any:
        """A new ``kubernetes.client.ApiClient`` with cluster-admin credentials."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig_path))

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster."""
        return subprocess.run(
            [self.bin("kubectl"), "--kubeconfig", str(self.kubeconfig_path), *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=timeout,
        )

    def start_scheduler(self, name: str, config_yaml: str, timeout: float | None = None) -> Component:
        """Start a kube-scheduler named ``name`` from a KubeSchedulerConfiguration YAML.

        ``clientConnection.kubeconfig`` is filled in when absent. Returns a handle with ``stop()``.
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
        comp = self._spawn(
            f"kube-scheduler-{safe}",
            [
                self.bin("kube-scheduler"),
                f"--config={cfg_path}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={cert_dir}",
                "--v=2",
            ],
            f"https://127.0.0.1:{port}/readyz",
        )
        comp.wait_ready(self._insecure_ctx(), timeout or self.start_timeout)
        self.schedulers[name] = comp
        return comp

    # -- internals --------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str], health_url: str | None) -> Component:
        comp = Component(name, argv, self.logs_dir / f"{name}.log", health_url)
        self.components.append(comp)
        return comp

    @staticmethod
    def _insecure_ctx() -> ssl.SSLContext:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def _write_pki(self) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        w = self.workdir
        pki = _PKI()
        ca_pem = _pem_cert(pki.ca_cert)
        (w / "ca.crt").write_bytes(ca_pem)
        (w / "ca.key").write_bytes(_pem_key(pki.ca_key))
        crt, key = pki.issue(
            "kube-apiserver",
            dns=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ips=["127.0.0.1", SERVICE_IP],
        )
        (w / "apiserver.crt").write_bytes(crt)
        (w / "apiserver.key").write_bytes(key)
        sa = ec.generate_private_key(ec.SECP256R1())
        (w / "sa.key").write_bytes(_pem_key(sa))
        (w / "sa.pub").write_bytes(
            sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        fp = _PKI()  # front-proxy (aggregation layer) CA, so requestheader auth is configured
        (w / "front-proxy-ca.crt").write_bytes(_pem_cert(fp.ca_cert))
        c, k = fp.issue("front-proxy-client")
        (w / "front-proxy-client.crt").write_bytes(c)
        (w / "front-proxy-client.key").write_bytes(k)
        self.api_port = free_port()
        self.server_url = f"https://127.0.0.1:{self.api_port}"
        users = {
            "admin": ("kubernetes-admin", ["system:masters"]),
            "scheduler": ("system:kube-scheduler", []),
            "controller-manager": ("system:kube-controller-manager", []),
        }
        for fname, (cn, orgs) in users.items():
            c, k = pki.issue(cn, orgs=orgs)
            if fname == "admin":
                (w / "admin.crt").write_bytes(c)
                (w / "admin.key").write_bytes(k)
            (w / f"{fname}.kubeconfig").write_text(_kubeconfig(self.server_url, ca_pem, c, k, cn))
        self.kubeconfig_path = w / "admin.kubeconfig"
        ctx = ssl.create_default_context(cafile=str(w / "ca.crt"))
        ctx.load_cert_chain(str(w / "admin.crt"), str(w / "admin.key"))
        self._ssl = ctx

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        comp = self._spawn(
            "etcd",
            [
                self.bin("etcd"),
                "--name=qosmos",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=qosmos=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            f"{self.etcd_url}/health",
        )
        comp.wait_ready(None, self.start_timeout)

    def _start_apiserver(self) -> None:
        w = self.workdir
        args = [
            self.bin("kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            f"--secure-port={self.api_port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
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
        comp = self._spawn("kube-apiserver", args + self.extra_apiserver_args, f"{self.server_url}/readyz")
        comp.wait_ready(self._ssl, self.start_timeout)

    def _start_controller_manager(self) -> None:
        w = self.workdir
        kc = str(w / "controller-manager.kubeconfig")
        port = free_port()
        comp = self._spawn(
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
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={w / 'kcm-certs'}",
            ],
            f"https://127.0.0.1:{port}/healthz",
        )
        comp.wait_ready(self._insecure_ctx(), self.start_timeout)
