"""The kube-scheduler extender protocol over HTTP: parsing, serialisation, 400s, endpoints."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import orjson
import pytest
from qosmos.extender.cache import ClusterCache
from qosmos.extender.http_server import ExtenderHTTP, HTTPServer
from qosmos.extender.service import ExtenderService

from .conftest import make_pod


@pytest.fixture
def api(service: ExtenderService) -> ExtenderHTTP:
    return ExtenderHTTP(service, max_body=64 * 1024)


def post(api: ExtenderHTTP, verb: str, body: object) -> tuple[int, object]:
    status, payload, ctype = api.handle("POST", f"/{verb}", body if isinstance(body, bytes) else orjson.dumps(body))
    assert ctype.startswith("application/json")
    return status, orjson.loads(payload)


def test_filter_result_shape(api: ExtenderHTTP, names: list[str]) -> None:
    pod = make_pod("p", gpus=4, labels={"qosmos.io/vc": "vc-b"}, annotations={"qosmos.io/gpu-models": "T4"})
    status, res = post(api, "filter", {"Pod": pod, "NodeNames": [*names, "ghost"]})
    assert status == 200
    assert set(res) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert res["NodeNames"] == ["b3"] and res["Error"] == "" and res["Nodes"] is None
    assert "not in the extender's cache" in res["FailedNodes"]["ghost"]
    assert "virtual cluster 'vc-b'" in res["FailedAndUnresolvableNodes"]["a1"]
    assert "not one of T4" in res["FailedAndUnresolvableNodes"]["b1"]
    assert set(res["NodeNames"]) | set(res["FailedNodes"]) | set(res["FailedAndUnresolvableNodes"]) == {*names, "ghost"}


def test_filter_with_node_objects_when_not_cache_capable(api: ExtenderHTTP, names: list[str]) -> None:
    items = [{"metadata": {"name": n}} for n in names]
    status, res = post(api, "filter", {"Pod": make_pod(gpus=8), "Nodes": {"items": items}})
    assert status == 200 and res["NodeNames"] is None
    # the four 8-GPU nodes fit; the plan picks one and /filter passes on only that tier
    kept = [i["metadata"]["name"] for i in res["Nodes"]["items"]]
    assert len(kept) == 1 and kept[0] in {"a1", "a2", "b1", "b2"}
    wide = ExtenderHTTP(ExtenderService(api.service.cache, shortlist=0))
    status, res = post(wide, "filter", {"Pod": make_pod(gpus=8), "Nodes": {"items": items}})
    assert sorted(i["metadata"]["name"] for i in res["Nodes"]["items"]) == ["a1", "a2", "b1", "b2"]


def test_filter_shortlists_the_top_tier(cache: ClusterCache, names: list[str]) -> None:
    """Feasible nodes below the decision's top tier are left out, with no failure reason."""
    api = ExtenderHTTP(ExtenderService(cache, assume=False))
    status, res = post(api, "filter", {"Pod": make_pod("p", gpus=2), "NodeNames": names})
    assert status == 200
    _, prio = post(api, "prioritize", {"Pod": make_pod("p", gpus=2), "NodeNames": names})
    top = max(r["Score"] for r in prio)
    assert res["NodeNames"] == [r["Host"] for r in prio if r["Score"] == top]  # the planned node
    # a1, a2, a3, b1, b2, b3 also fit: neither kept nor failed, so they remain feasible
    dropped = set(names) - set(res["NodeNames"]) - set(res["FailedNodes"]) - set(res["FailedAndUnresolvableNodes"])
    assert dropped == {"a1", "a2", "a3", "a4", "b1", "b2", "b3"} - set(res["NodeNames"])
    assert "c1" in res["FailedAndUnresolvableNodes"]  # reasons for nodes that cannot fit still come back

    def count(outcome: str) -> float | None:
        return api.service.metrics.registry.get_sample_value(
            "qosmos_extender_decisions_total", {"verb": "filter", "outcome": outcome}
        )

    assert count("planned") == 1
    # a window without the planned node: the best of the rest, counted as a plain fit
    others = [n for n in names if n not in res["NodeNames"]]
    _, res2 = post(api, "filter", {"Pod": make_pod("p", gpus=2), "NodeNames": others})
    assert res2["NodeNames"] and not set(res2["NodeNames"]) & set(res["NodeNames"])
    assert count("fit") == 1


def test_lone_shortlisted_node_is_assumed(cache: ClusterCache, names: list[str]) -> None:
    """kube-scheduler skips /prioritize when one node is left, so /filter holds the GPUs itself."""
    api = ExtenderHTTP(ExtenderService(cache))
    _, res = post(api, "filter", {"Pod": make_pod("p", gpus=2), "NodeNames": names})
    assert len(res["NodeNames"]) == 1 and cache.stats()["assumed"] == 1
    node = res["NodeNames"][0]
    free = cache.state().free_gpus[cache.state().index[node]]
    _, again = post(api, "filter", {"Pod": make_pod("q", gpus=int(free) + 1), "NodeNames": [node]})
    assert again["NodeNames"] == [] and "GPUs free" in again["FailedNodes"][node]
    post(api, "filter", {"Pod": make_pod("p", gpus=2), "NodeNames": names})  # a retry replaces its own hold
    assert cache.stats()["assumed"] == 1  # q was held nowhere: nothing fitted


def test_prioritize_host_priority_list(api: ExtenderHTTP, names: list[str]) -> None:
    status, res = post(api, "prioritize", {"Pod": make_pod(gpus=2), "NodeNames": names})
    assert status == 200 and isinstance(res, list)
    assert [r["Host"] for r in res] == names
    assert all(set(r) == {"Host", "Score"} and 0 <= r["Score"] <= 10 for r in res)
    assert max(r["Score"] for r in res) == 10
    assert next(r for r in res if r["Host"] == "c1")["Score"] == 0  # no GPUs


@pytest.mark.parametrize("resource", ["cpu", "memory"])
def test_the_largest_quantities_are_a_pod_that_fits_nowhere_not_an_error(
    api: ExtenderHTTP, names: list[str], resource: str
) -> None:
    """Two containers of 2^62 cores (or bytes: ~4 EiB) each: the parser's limit, past int64 in milli-CPU once
    summed. A pod no node holds: a 200 on every verb, never an internal error (found by the fuzz test)."""
    pod = make_pod("huge", gpus=2)
    big = str(2**62)
    pod["spec"]["containers"][0]["resources"]["requests"][resource] = big
    pod["spec"]["containers"].append({"name": "side", "resources": {"requests": {resource: big}}})
    status, res = post(api, "filter", {"Pod": pod, "NodeNames": names})
    assert status == 200 and res["Error"] == "" and res["NodeNames"] == []
    status, prio = post(api, "prioritize", {"Pod": pod, "NodeNames": names})
    assert status == 200 and isinstance(prio, list) and [r["Host"] for r in prio] == names
    assert api.service.metrics.registry.get_sample_value(
        "qosmos_extender_decisions_total", {"verb": "prioritize", "outcome": "error"}
    ) in (None, 0.0)


def test_prioritize_json_escapes_names(cache: ClusterCache) -> None:
    api = ExtenderHTTP(ExtenderService(cache))
    status, payload, _ = api.handle(
        "POST", "/prioritize", orjson.dumps({"Pod": make_pod(), "NodeNames": ['we"ird\\', "a1"]})
    )
    assert status == 200 and json.loads(payload)[0] == {"Host": 'we"ird\\', "Score": 0}


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"", "not valid JSON"),
        (b"{", "not valid JSON"),
        (b"[]", "expected a JSON object"),
        (b'{"NodeNames": []}', "pod object is required"),
        (b'{"Pod": 3, "NodeNames": []}', "expected an object"),
        (b'{"Pod": {"metadata": {"name": 1}}, "NodeNames": []}', "Pod.metadata.name"),
        (b'{"Pod": {"metadata": {"name": "x"}}, "NodeNames": "a1"}', "NodeNames"),
        (b'{"Pod": {"metadata": {"name": "x"}}, "NodeNames": [1, 2]}', "NodeNames"),
        (
            b'{"Pod": {"metadata": {"name": "x"}, "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "x"}}}]}}}',
            "nvidia.com/gpu",
        ),
        (
            b'{"Pod": {"metadata": {"name": "x", "annotations": {"qosmos.io/placement": "banana"}}}, "NodeNames": ["a1"]}',
            "placement",
        ),
        (b'{"Pod": {"metadata": {"name": "x", "labels": {"qosmos.io/vc": 5}}}}', "labels"),
        (b'{"Pod": {"metadata": {"name": "x"}}, "Nodes": {"items": [{"metadata": {}}]}}', "Nodes.items"),
        (b"\xff\xfe", "not valid JSON"),
    ],
)
def test_malformed_requests_get_400(api: ExtenderHTTP, body: bytes, needle: str) -> None:
    for verb in ("filter", "prioritize"):
        status, res = post(api, verb, body)
        assert status == 400, res
        assert needle in res["Error"]  # type: ignore[index]


def test_oversized_body_gets_400(api: ExtenderHTTP) -> None:
    status, res = post(api, "filter", b" " * (64 * 1024 + 1))
    assert status == 400 and "exceeds the limit" in res["Error"]  # type: ignore[index]


def test_deeply_nested_json_gets_400(api: ExtenderHTTP) -> None:
    status, _ = post(api, "filter", b"[" * 5000 + b"]" * 5000)
    assert status == 400


def test_unknown_verbs_and_methods(api: ExtenderHTTP) -> None:
    assert api.handle("POST", "/preempt", b"{}")[0] == 404
    assert api.handle("PUT", "/filter", b"{}")[0] == 405
    assert api.handle("GET", "/nothing", b"")[0] == 404
    assert api.handle("POST", "/scheduler/filter", orjson.dumps({"Pod": make_pod(), "NodeNames": []}))[0] == 200


def test_bind_validates_and_reports(api: ExtenderHTTP) -> None:
    status, res = post(api, "bind", {"PodName": "p", "PodNamespace": "ns", "PodUID": "u"})
    assert status == 400 and "Node" in res["Error"]  # type: ignore[index]
    status, res = post(api, "bind", {"PodName": "p", "PodNamespace": "ns", "PodUID": "u", "Node": "a1"})
    assert status == 200 and "does not bind" in res["Error"]  # type: ignore[index]


def test_bind_holds_gpus_then_calls_binder(cache: ClusterCache, names: list[str]) -> None:
    calls = []
    svc = ExtenderService(cache, assume=False, binder=lambda *a: calls.append(a))
    pod = make_pod("b", gpus=2, annotations={"qosmos.io/gpu-models": "T4"}, labels={"qosmos.io/vc": "vc-a"})
    assert svc.filter({"Pod": pod, "NodeNames": names})["NodeNames"] == ["a4"]
    assert svc.bind({"PodName": "b", "PodNamespace": "ns", "PodUID": "uid-b", "Node": "a4"}) == {"Error": ""}
    assert calls == [("ns", "b", "uid-b", "a4")]
    assert cache.stats()["assumed"] == 1


def test_health_ready_metrics(service: ExtenderService, names: list[str]) -> None:
    ready = [False]
    api = ExtenderHTTP(service, ready=lambda: ready[0])
    assert api.handle("GET", "/healthz", b"")[0] == 200
    assert api.handle("GET", "/readyz", b"")[0] == 503
    ready[0] = True
    assert api.handle("GET", "/readyz", b"")[0] == 200
    api.handle("POST", "/filter", orjson.dumps({"Pod": make_pod(), "NodeNames": names}))
    api.handle("POST", "/filter", b"nope")
    status, payload, _ = api.handle("GET", "/metrics", b"")
    text = payload.decode()
    assert status == 200
    assert 'qosmos_extender_request_seconds_bucket{le="0.005",verb="filter"}' in text
    assert 'qosmos_extender_decisions_total{outcome="invalid",verb="filter"} 1.0' in text
    assert 'qosmos_extender_cache_objects{kind="nodes"} 8.0' in text


@pytest.fixture
def server(service: ExtenderService) -> Iterator[HTTPServer]:
    srv = HTTPServer(ExtenderHTTP(service, max_body=1024 * 1024)).start_in_thread()
    yield srv
    srv.stop()


def test_real_server_round_trip_and_limits(server: HTTPServer, names: list[str]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("POST", "/filter", orjson.dumps({"Pod": make_pod(gpus=8), "NodeNames": names}))
    r = conn.getresponse()
    assert r.status == 200 and orjson.loads(r.read())["NodeNames"] in (["a1"], ["a2"], ["b1"], ["b2"])
    conn.request("GET", "/healthz")
    r = conn.getresponse()
    assert r.status == 200 and r.read() == b"ok"
    conn.close()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("POST", "/filter", b"x" * (1024 * 1024 + 10))
    r = conn.getresponse()
    assert r.status == 400 and b"exceeds the limit" in r.read()
    conn.close()
    # chunked body over the limit, without a Content-Length
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    conn.request("POST", "/filter", iter([b"y" * 600_000, b"y" * 600_000]), encode_chunked=True)
    r = conn.getresponse()
    assert r.status == 400
    conn.close()


def test_get_on_a_verb_is_405_with_allow(server: HTTPServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    for method, path, allow in (("GET", "/filter", "POST"), ("GET", "/prioritize", "POST"), ("POST", "/readyz", "GET")):
        conn.request(method, path, b"" if method == "GET" else b"{}")
        r = conn.getresponse()
        body = orjson.loads(r.read())
        assert (r.status, r.getheader("Allow")) == (405, allow), path
        assert allow in body["Error"]
    conn.request("GET", "/nothing")
    r = conn.getresponse()
    r.read()
    assert r.status == 404
    conn.close()


def test_bind_errors_carry_the_api_message_not_raw_headers(cache: ClusterCache) -> None:
    from kubernetes.client.exceptions import ApiException
    from urllib3 import HTTPResponse

    def refuse(*_: str) -> None:
        raw = HTTPResponse(
            body=b'{"kind":"Status","message":"pods \\"b\\" not found","reason":"NotFound","code":404}',
            headers={"Audit-Id": "0f1e2d", "Content-Type": "application/json", "X-Kubernetes-Pf-Flowschema-Uid": "z"},
            status=404,
            reason="Not Found",
            preload_content=True,
        )
        raise ApiException(http_resp=raw)

    svc = ExtenderService(cache, assume=False, binder=refuse)
    out = svc.bind({"PodName": "b", "PodNamespace": "ns", "PodUID": "uid-b", "Node": "a4"})
    assert out == {"Error": 'API server answered 404 Not Found: pods "b" not found'}
    assert "Audit-Id" not in out["Error"] and "\n" not in out["Error"]
