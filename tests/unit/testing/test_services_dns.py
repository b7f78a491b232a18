"""The cluster DNS stand-in's wire format (qosmos.testing.services.dns_reply): the e2e tier's
kube-scheduler (Go's resolver) finds the extender Service through it."""

from __future__ import annotations

import socket
import struct

from qosmos.testing.services import dns_reply

NAMES = {"qs-qosmos-extender.qosmos-system.svc.cluster.local": "10.0.0.57"}


def query(name: str, qtype: int = 1, qid: int = 0x1234, rd: bool = True, extra: bytes = b"") -> bytes:
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    arcount = 1 if extra else 0
    return (
        struct.pack("!HHHHHH", qid, 0x0100 if rd else 0, 1, 0, 0, arcount)
        + qname
        + struct.pack("!HH", qtype, 1)
        + extra
    )


def parse(reply: bytes) -> tuple[int, int, int, list[str]]:
    """(id, flags, rcode, A addresses) of a reply to a one-question query."""
    qid, flags, qd, an, _, _ = struct.unpack("!HHHHHH", reply[:12])
    i = 12
    while reply[i]:
        i += reply[i] + 1
    i += 5  # the root label, qtype, qclass
    addrs = []
    for _ in range(an):
        ptr, rtype, rclass, ttl, rdlen = struct.unpack("!HHHIH", reply[i : i + 12])
        assert ptr == 0xC00C and rclass == 1 and ttl > 0
        data = reply[i + 12 : i + 12 + rdlen]
        if rtype == 1:
            addrs.append(socket.inet_ntoa(data))
        i += 12 + rdlen
    assert qd == 1 and i == len(reply)
    return qid, flags, flags & 0xF, addrs


def test_a_record_of_a_service_name_case_insensitive_and_with_edns() -> None:
    opt = b"\0" + struct.pack("!HHIH", 41, 1232, 0, 0)  # an EDNS0 OPT record, as Go's resolver sends
    reply = dns_reply(query("QS-qosmos-extender.qosmos-system.svc.cluster.local", extra=opt), NAMES.get)
    assert reply is not None
    qid, flags, rcode, addrs = parse(reply)
    assert (qid, rcode, addrs) == (0x1234, 0, ["10.0.0.57"])
    assert flags & 0x8000 and flags & 0x0400 and flags & 0x0100  # a response, authoritative, RD echoed


def test_other_types_of_a_known_name_have_no_records_and_unknown_names_do_not_exist() -> None:
    aaaa = dns_reply(query("qs-qosmos-extender.qosmos-system.svc.cluster.local", qtype=28), NAMES.get)
    assert aaaa is not None and parse(aaaa)[2:] == (0, [])  # NOERROR, no data: Go then uses the A answer
    # a search-path candidate (ndots:5 tries <name>.<ns>.svc.cluster.local first) and a name outside
    for name in ("qs-qosmos-extender.qosmos-system.svc.qosmos-system.svc.cluster.local", "registry.qosmos.invalid"):
        r = dns_reply(query(name), NAMES.get)
        assert r is not None and parse(r)[2:] == (3, [])


def test_what_is_not_a_query_gets_no_reply() -> None:
    q = query("x.cluster.local")
    assert dns_reply(q[:11], NAMES.get) is None  # short
    assert dns_reply(struct.pack("!H", 1) + struct.pack("!H", 0x8000) + q[4:], NAMES.get) is None  # a response
    assert dns_reply(q[:-3], NAMES.get) is None  # truncated question


def test_headless_service_names_are_its_endpoints_and_their_hostnames() -> None:
    """A DLJob's rendezvous names (issue 20 §1): ``<dljob>-0.<dljob>.<ns>.svc.cluster.local`` is rank 0's
    pod address, as CoreDNS answers from the EndpointSlice's hostnames; a ClusterIP Service's slices
    and unready endpoints give none."""
    from qosmos.testing.services import headless_names

    def svc(name: str, ip: str) -> dict[str, object]:
        return {"metadata": {"namespace": "team", "name": name}, "spec": {"clusterIP": ip}}

    def ep(addr: str, host: str | None = None, ready: bool | None = True) -> dict[str, object]:
        out: dict[str, object] = {"addresses": [addr], "conditions": {} if ready is None else {"ready": ready}}
        return {**out, "hostname": host} if host else out

    def eps(owner: str, *endpoints: dict[str, object]) -> dict[str, object]:
        md = {"namespace": "team", "name": f"{owner}-x", "labels": {"kubernetes.io/service-name": owner}}
        return {"metadata": md, "endpoints": list(endpoints)}

    services = [svc("train", "None"), svc("web", "10.0.0.9")]
    slices = [
        eps(
            "train", ep("10.244.0.7", "train-0"), ep("10.244.0.8", "train-1", None), ep("10.244.0.9", "train-2", False)
        ),
        eps("web", ep("10.244.0.20", "web-0")),
    ]
    names = headless_names(services, slices, "cluster.local")  # type: ignore[arg-type]
    assert names == {
        "train.team.svc.cluster.local": "10.244.0.7",
        "train-0.train.team.svc.cluster.local": "10.244.0.7",
        "train-1.train.team.svc.cluster.local": "10.244.0.8",
    }
