"""Which devices each pod holds, from the kubelet's PodResources API (``v1.PodResourcesLister/List``).

The kubelet serves it on ``<root dir>/pod-resources/kubelet.sock`` (GA since Kubernetes 1.20); the
chart mounts only that folder, read-only. The node agent uses it to measure a training pod's GPU
utilisation on the GPUs the kubelet gave that pod (NVML by UUID, :class:`~qosmos.sidecar.sources.NvmlGpuSource`)
instead of guessing them from the processes NVML sees on every GPU. Where it is not served (no socket,
an old kubelet, an error), :meth:`PodGpus.devices` answers None and the agent falls back to the
process matching, saying so in its log and in ``qosmos_sidecar_pod_resources``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
GPU_RESOURCE = "nvidia.com/gpu"

# pod key "namespace/name" -> container name -> resource name -> device IDs
PodDevices = dict[str, dict[str, dict[str, tuple[str, ...]]]]


def list_pod_resources(socket: Path, timeout_s: float = 2.0) -> PodDevices:
    """One ``List`` call on the kubelet's socket. Raises ``FileNotFoundError`` without the socket and
    ``grpc.RpcError`` when the kubelet does not answer it (UNAVAILABLE, UNIMPLEMENTED, DEADLINE_EXCEEDED)."""
    import grpc
    from qosmos.sidecar.proto import podresources_pb2, podresources_pb2_grpc

    if not socket.exists():
        raise FileNotFoundError(f"no PodResources socket at {socket}")
    # a fresh channel per call: the kubelet's restarts recreate the socket
    with grpc.insecure_channel(f"unix://{socket.resolve()}") as channel:
        stub = podresources_pb2_grpc.PodResourcesListerStub(channel)
        resp = stub.List(podresources_pb2.ListPodResourcesRequest(), timeout=timeout_s)
    out: PodDevices = {}
    for pod in resp.pod_resources:
        containers = out.setdefault(f"{pod.namespace}/{pod.name}", {})
        for c in pod.containers:
            held = containers.setdefault(c.name, {})
            for d in c.devices:
                held[d.resource_name] = (*held.get(d.resource_name, ()), *d.device_ids)
    return out


def pod_resource_ids(devices: Mapping[str, Mapping[str, tuple[str, ...]]], resource: str) -> tuple[str, ...]:
    """Every device ID of ``resource`` held by any of the pod's containers, in order, once each."""
    seen: dict[str, None] = {}
    for held in devices.values():
        for i in held.get(resource, ()):
            seen.setdefault(i, None)
    return tuple(seen)


@dataclass
class PodGpus:
    """The GPUs (device plugin IDs of ``resource``) of every pod on the node, read once per pass.

    ``served``: None before the first read, then whether the last read answered."""

    socket: Path = DEFAULT_SOCKET
    timeout_s: float = 2.0
    resource: str = GPU_RESOURCE
    served: bool | None = None
    _by_pod: dict[str, tuple[str, ...]] | None = field(default=None, repr=False)

    def refresh(self) -> dict[str, tuple[str, ...]]:
        """Read the kubelet's answer; on failure forget the last one (so :meth:`devices` says "unknown")
        and raise."""
        try:
            listed = list_pod_resources(self.socket, self.timeout_s)
        except Exception:
            self._by_pod, self.served = None, False
            raise
        self._by_pod = {key: pod_resource_ids(cs, self.resource) for key, cs in listed.items()}
        self.served = True
        return self._by_pod

    def devices(self, pod_key: str) -> tuple[str, ...] | None:
        """The pod's GPU IDs (``()``: the kubelet gave it none); None when the API is not served."""
        if self._by_pod is None:
            return None
        return self._by_pod.get(pod_key, ())
