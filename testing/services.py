"""Service VIPs and cluster DNS for the pods of a :class:`~qosmos.testing.node.Node` started with
``cluster_network=True``: what kube-proxy and CoreDNS do in a real cluster, in this process.

Why not the real ones: kube-proxy's iptables and IPVS modes DNAT a VIP to a pod on the same bridge,
which needs the host to forward (``net.ipv4.ip_forward=1``, host-wide, on a machine shared with other
work) and, for the ``kubernetes`` Service, an endpoint the test apiserver does not have (it listens on
127.0.0.1 only, and an EndpointSlice may not name a loopback address). CoreDNS has no image here and
no registry to pull one from. So, like kube-proxy's former userspace mode:

* every ClusterIP Service's VIP becomes a local /32 address on the node's bridge (pods route the
  service CIDR to the bridge's host address, so VIP packets are delivered to this host, never
  forwarded; the rest of the service CIDR stays blackholed);
* a TCP listener on each VIP and port relays each connection to a ready endpoint of the Service's
  EndpointSlices (round robin), ``default/kubernetes`` to the apiserver on loopback (its certificate
  names the VIP, so in-cluster clients verify it as usual);
* a DNS responder on ``DNS_IP`` (reserved by a selectorless ``kube-system/kube-dns`` Service) answers
  ``<service>.<namespace>.svc.<domain>`` with the ClusterIP, and as CoreDNS does for a headless
  Service (``clusterIP: None``) that name with an endpoint's address and
  ``<hostname>.<service>.<namespace>.svc.<domain>`` with the address of the endpoint of that
  hostname (a pod with ``hostname`` and ``subdomain``: the rendezvous names of a DLJob's gang);
  NXDOMAIN for any other name (there is no upstream: nothing leaves the machine).

A poll of Services and EndpointSlices every ``interval`` seconds keeps it current. ``connections``
counts relayed connections per Service (``namespace/name``).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import socket
import struct
import subprocess
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from qosmos.testing.node import BRIDGE, CLUSTER_DOMAIN, DNS_IP, Node

log = logging.getLogger("qosmos.testing.services")
TTL = 5
DNS_SERVICE = ("kube-system", "kube-dns")
Endpoint = tuple[str, int]


def dns_reply(query: bytes, lookup: Callable[[str], str | None]) -> bytes | None:
    """The answer to one DNS query (RFC 1035 §4): an A record from ``lookup(name)`` (an IPv4 address,
    or None for a name that does not exist: NXDOMAIN); other types of an existing name: no records.
    None for what is not a one-question standard query."""
    if len(query) < 12:
        return None
    qid, flags, qdcount = struct.unpack("!HHH", query[:6])
    if flags & 0x8000 or (flags >> 11) & 0xF or qdcount != 1:
        return None
    i, labels = 12, []
    while True:
        if i >= len(query):
            return None
        n = query[i]
        i += 1
        if n == 0:
            break
        if n & 0xC0 or i + n > len(query):
            return None  # no compression pointers in a question
        labels.append(query[i : i + n].decode("ascii", "replace").lower())
        i += n
    if i + 4 > len(query):
        return None
    qtype, qclass = struct.unpack("!HH", query[i : i + 4])
    question = query[12 : i + 4]
    ip = lookup(".".join(labels))
    answer = b""
    if ip is not None and qtype == 1 and qclass == 1:
        answer = struct.pack("!HHHIH", 0xC00C, 1, 1, TTL, 4) + socket.inet_aton(ip)
    # QR, the query's opcode and RD; AA (the cluster domain is ours), RA; NXDOMAIN (3) for unknown names
    rflags = 0x8000 | (flags & 0x0100) | 0x0400 | 0x0080 | (0 if ip is not None else 3)
    return struct.pack("!HHHHHH", qid, rflags, 1, 1 if answer else 0, 0, 0) + question + answer


def _live(endpoint_slice: dict[str, Any]) -> list[dict[str, Any]]:
    """The slice's endpoints not said to be unready (unset: unknown, taken as ready; a Service with
    publishNotReadyAddresses has the controller say ready for every pod)."""
    return [
        ep for ep in endpoint_slice.get("endpoints") or [] if (ep.get("conditions") or {}).get("ready") is not False
    ]


def headless_names(services: list[dict[str, Any]], slices: list[dict[str, Any]], domain: str) -> dict[str, str]:
    """CoreDNS's records of headless Services (``clusterIP: None``): ``<service>.<ns>.svc.<domain>`` ->
    an endpoint's address, and ``<hostname>.<service>.<ns>.svc.<domain>`` -> the address of the
    endpoint the EndpointSlice controller gave that hostname (a pod whose ``subdomain`` is the Service)."""
    headless = {
        (s["metadata"]["namespace"], s["metadata"]["name"]) for s in services if s["spec"].get("clusterIP") == "None"
    }
    names: dict[str, str] = {}
    for sl in slices:
        md = sl["metadata"]
        owner = (md.get("labels") or {}).get("kubernetes.io/service-name")
        if (md["namespace"], owner) not in headless:
            continue
        base = f"{owner}.{md['namespace']}.svc.{domain}"
        for ep in _live(sl):
            if not ep.get("addresses"):
                continue
            names.setdefault(base, ep["addresses"][0])
            if ep.get("hostname"):
                names[f"{ep['hostname']}.{base}"] = ep["addresses"][0]
    return names


class ServiceNetwork:
    """Use as a context manager after the node started (see the module docstring)."""

    def __init__(self, node: Node, interval: float = 0.5, domain: str = CLUSTER_DOMAIN) -> None:
        if not node.cluster_network:
            raise ValueError("the node needs cluster_network=True (a host address on its bridge)")
        self.node, self.interval, self.domain = node, interval, domain
        self.api_port = int(node.cp.server_url.rsplit(":", 1)[1])
        self.connections: Counter[str] = Counter()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._names: dict[str, str] = {}  # DNS name -> ClusterIP
        self._endpoints: dict[tuple[str, int], tuple[str, list[Endpoint]]] = {}  # (VIP, port) -> (svc, eps)
        self._listeners: dict[tuple[str, int], socket.socket] = {}
        self._vips: set[str] = set()
        self._conns: set[socket.socket] = set()
        self._rr = itertools.count()
        self._threads: list[threading.Thread] = []
        self._poller: threading.Thread | None = None
        self._dns: socket.socket | None = None
        self._api: Any = None

    def __enter__(self) -> ServiceNetwork:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        from kubernetes import client

        self._api = self.node.cp.api_client()
        core = client.CoreV1Api(self._api)
        ns, name = DNS_SERVICE
        body: Any = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": ns, "labels": {"k8s-app": "kube-dns"}},
            "spec": {
                "clusterIP": DNS_IP,
                "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53}],
            },
        }
        core.create_namespaced_service(ns, body)  # reserves DNS_IP; no selector: nothing to relay
        self._add_vip(DNS_IP)
        self._dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._dns.bind((DNS_IP, 53))
        self._spawn(self._serve_dns, "dns")
        self.sync()
        self._poller = self._spawn(self._poll, "sync")

    def stop(self) -> None:
        self._stop.set()
        if self._poller is not None:
            self._poller.join(30)  # no sync adds a listener or an address after this
        with self._lock:
            socks = [*self._listeners.values(), *self._conns, *([self._dns] if self._dns else [])]
            self._listeners.clear()
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        for t in self._threads:
            t.join(5)
        for vip in sorted(self._vips):
            subprocess.run(["ip", "addr", "del", f"{vip}/32", "dev", BRIDGE], capture_output=True)
        self._vips.clear()
        if self._api is not None:
            from kubernetes import client

            with contextlib.suppress(Exception):
                client.CoreV1Api(self._api).delete_namespaced_service(DNS_SERVICE[1], DNS_SERVICE[0])
            self._api.close()
            self._api = None

    # -- the Services -------------------------------------------------------------------------

    def _lists(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Every Service and EndpointSlice as plain JSON (no model objects: this runs every ``interval``)."""
        from kubernetes import client

        svcs: Any = client.CoreV1Api(self._api).list_service_for_all_namespaces(_preload_content=False)
        slices: Any = client.DiscoveryV1Api(self._api).list_endpoint_slice_for_all_namespaces(_preload_content=False)
        return json.loads(svcs.data)["items"], json.loads(slices.data)["items"]

    def sync(self) -> None:
        """Read Services and EndpointSlices once; add and remove VIPs, listeners and names."""
        services, slices = self._lists()
        ready: dict[tuple[str, str, str], list[Endpoint]] = {}
        for sl in slices:
            md = sl["metadata"]
            owner = (md.get("labels") or {}).get("kubernetes.io/service-name")
            if not owner:
                continue
            addrs = [a for ep in _live(sl) for a in ep["addresses"]]
            for port in sl.get("ports") or []:
                key = (md["namespace"], owner, port.get("name") or "")
                ready.setdefault(key, []).extend((a, int(port["port"])) for a in addrs)
        names = headless_names(services, slices, self.domain)
        wanted: dict[tuple[str, int], tuple[str, list[Endpoint]]] = {}
        for svc in services:
            ns, name, ip = svc["metadata"]["namespace"], svc["metadata"]["name"], svc["spec"].get("clusterIP")
            if not ip or ip == "None":
                continue
            names[f"{name}.{ns}.svc.{self.domain}"] = ip
            if (ns, name) == DNS_SERVICE:
                continue
            for port in svc["spec"].get("ports") or []:
                if port.get("protocol", "TCP") != "TCP":
                    continue
                if (ns, name) == ("default", "kubernetes"):
                    eps = [("127.0.0.1", self.api_port)]  # the apiserver listens on loopback only
                else:
                    eps = ready.get((ns, name, port.get("name") or ""), [])
                wanted[(ip, int(port["port"]))] = (f"{ns}/{name}", eps)
        with self._lock:
            self._names = names
            self._endpoints = wanted
            gone = [k for k in self._listeners if k not in wanted]
            new = [k for k in wanted if k not in self._listeners]
        for gone_key in gone:
            with self._lock:
                sock = self._listeners.pop(gone_key)
            with contextlib.suppress(OSError):
                sock.close()
        for vip in self._vips - {ip for ip, _ in wanted} - {DNS_IP}:
            subprocess.run(["ip", "addr", "del", f"{vip}/32", "dev", BRIDGE], capture_output=True)
            self._vips.discard(vip)
        for vip, port in new:
            self._add_vip(vip)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((vip, port))
            sock.listen(64)
            with self._lock:
                self._listeners[(vip, port)] = sock
            self._spawn(functools.partial(self._accept, sock, (vip, port)), f"listen {vip}:{port}")

    def _add_vip(self, vip: str) -> None:
        if vip not in self._vips:
            subprocess.run(["ip", "addr", "replace", f"{vip}/32", "dev", BRIDGE], check=True, capture_output=True)
            self._vips.add(vip)

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync()
            except Exception as e:  # the apiserver restarting, a Service racing its deletion: next poll
                log.warning("service sync: %s", e)

    def _spawn(self, fn: Callable[[], None], name: str) -> threading.Thread:
        t = threading.Thread(target=fn, name=f"svcnet {name}", daemon=True)
        t.start()
        self._threads.append(t)
        return t

    # -- relaying -----------------------------------------------------------------------------

    def _accept(self, sock: socket.socket, key: tuple[str, int]) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                return  # closed: the Service or this network is gone
            threading.Thread(target=self._relay, args=(conn, key), daemon=True).start()

    def _relay(self, conn: socket.socket, key: tuple[str, int]) -> None:
        with self._lock:
            svc, eps = self._endpoints.get(key, ("", []))
        upstream = None
        for i in range(len(eps)):
            ep = eps[(next(self._rr) + i) % len(eps)]
            try:
                upstream = socket.create_connection(ep, timeout=3)
                break
            except OSError:
                continue
        if upstream is None:  # no ready endpoint: refuse, as kube-proxy's REJECT does
            with contextlib.suppress(OSError):
                conn.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self.connections[svc] += 1
            self._conns.update((conn, upstream))
        t = threading.Thread(target=self._pump, args=(upstream, conn), daemon=True)
        t.start()
        self._pump(conn, upstream)
        t.join()
        with self._lock:
            self._conns.difference_update((conn, upstream))
        for s in (conn, upstream):
            with contextlib.suppress(OSError):
                s.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    # -- DNS ----------------------------------------------------------------------------------

    def lookup(self, name: str) -> str | None:
        with self._lock:
            return self._names.get(name.rstrip(".").lower())

    def _serve_dns(self) -> None:
        assert self._dns is not None
        while not self._stop.is_set():
            try:
                query, peer = self._dns.recvfrom(4096)
            except OSError:
                return
            reply = dns_reply(query, self.lookup)
            if reply is not None:
                with contextlib.suppress(OSError):
                    self._dns.sendto(reply, peer)
