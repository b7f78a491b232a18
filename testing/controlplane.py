"""The test tier's control plane: the one in ``qosmos.dev.controlplane`` (``qosmos dev up`` runs
the same code), re-exported under the names the tests use.

Binaries come from ``hack/k8s/build.sh`` (``qosmos.dev.binaries``); environment knobs:
``QOSMOS_K8S_BIN_DIR`` (binaries from there), ``QOSMOS_K8S_NO_BUILD=1`` (never run build.sh),
``QOSMOS_K8S_KEEP=1`` (keep the temp dir of certs, kubeconfigs and logs).
"""

from __future__ import annotations

from qosmos.dev.binaries import (
    BINARIES,
    DEFAULT_K8S_VERSION,
    ControlPlaneError,
    binaries_present,
    build_script,
    k8s_bin_dir,
    k8s_version,
    repo_root,
)
from qosmos.dev.binaries import cache_bin_dir as _cache_bin_dir
from qosmos.dev.controlplane import (
    OWNER_FILE,
    SERVICE_CIDR,
    SERVICE_IP,
    WORKDIR_PREFIX,
    ControlPlane,
    _sweep_stale_workdirs,
)
from qosmos.dev.fakenodes import GPU_RESOURCE
from qosmos.dev.pki import PKI as _PKI
from qosmos.dev.pki import kubeconfig as _kubeconfig
from qosmos.dev.pki import pem_cert as _pem_cert
from qosmos.dev.pki import pem_key as _pem_key
from qosmos.dev.process import Component, _pdeathsig, free_port
from qosmos.dev.process import tail as _tail
from qosmos.extender.schedconfig import (  # the production scheduler profile
    EXTENDER_WEIGHT,
    PERCENTAGE_OF_NODES_TO_SCORE,
    ExtenderClientTLS,
    qosmos_scheduler_config,
    scheduler_config,
)

__all__ = [
    "BINARIES",
    "DEFAULT_K8S_VERSION",
    "EXTENDER_WEIGHT",
    "GPU_RESOURCE",
    "OWNER_FILE",
    "PERCENTAGE_OF_NODES_TO_SCORE",
    "SERVICE_CIDR",
    "SERVICE_IP",
    "WORKDIR_PREFIX",
    "_PKI",
    "Component",
    "ControlPlane",
    "ControlPlaneError",
    "ExtenderClientTLS",
    "_cache_bin_dir",
    "_kubeconfig",
    "_pdeathsig",
    "_pem_cert",
    "_pem_key",
    "_sweep_stale_workdirs",
    "_tail",
    "binaries_present",
    "build_script",
    "free_port",
    "k8s_bin_dir",
    "k8s_version",
    "qosmos_scheduler_config",
    "repo_root",
    "scheduler_config",
]
