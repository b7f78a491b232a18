"""Fuzzing the HTTP extender in-process: whatever arrives, the answer is a 200 or a 400, never a 5xx or a crash.

10,800 generated inputs in all: raw bytes, arbitrary JSON, structurally plausible
ExtenderArgs with hostile field values, and a few hundred through the real aiohttp server.
"""

from __future__ import annotations

import http.client
import json

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qosmos.extender.cache import ClusterCache
from qosmos.extender.http_server import ExtenderHTTP, HTTPServer
from qosmos.extender.service import ExtenderService

from .conftest import small_nodes

pytestmark = pytest.mark.slow

NAMES = [n.name for n in small_nodes()]
VERBS = st.sampled_from(["/filter", "/prioritize", "/bind", "/x/filter", "/prioritize/"])
EXAMPLES = {"raw": 2000, "json": 3000, "args": 5500, "http": 300}


def fuzz(n: int) -> settings:
    return settings(
        max_examples=n, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True
    )


def _api() -> ExtenderHTTP:
    cache = ClusterCache(assume_ttl=0.5)
    cache.replace_nodes(small_nodes())
    cache.replace_pods([])
    return ExtenderHTTP(ExtenderService(cache), max_body=256 * 1024)


API = _api()


def check(path: str, body: bytes) -> None:
    status, payload, _ = API.handle("POST", path, body)
    assert status in (200, 400), (status, payload[:300])
    out = orjson.loads(payload)
    if status == 200 and isinstance(out, dict):
        assert "internal error" not in (out.get("Error") or ""), out["Error"]
    if status == 200 and path.rstrip("/").endswith("prioritize"):
        assert all(0 <= h["Score"] <= 10 for h in out)
    errors = API.service.metrics.decisions.labels(path.rstrip("/").rsplit("/", 1)[-1], "error")._value.get()
    assert errors == 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=30,
)

quantities = st.one_of(
    st.sampled_from(
        ["1", "0", "2", "8", "500m", "1Gi", "16Gi", "1e3", "-1", "1.5", "1e400", "", "abc", "2k", "9" * 70, str(2**62)]
    ),
    st.integers(-5, 2000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.none(),
    st.lists(st.integers(), max_size=2),
)
annotations = st.dictionaries(
    st.sampled_from(["qosmos.io/placement", "qosmos.io/nodes", "qosmos.io/gpu-models", "other"]),
    st.one_of(
        st.sampled_from(["2x4", "1x1", "3x8", "0x1", "x", "1x2000", "a1,a2", "T4|V100M32", "V100M16", "", "|||"]),
        st.text(max_size=12),
        st.integers(),
    ),
    max_size=3,
)
labels = st.dictionaries(
    st.sampled_from(["qosmos.io/vc", "qosmos.io/job", "app"]),
    st.one_of(st.sampled_from(["vc-a", "vc-b", "nope", "", "train"]), st.text(max_size=6), st.integers()),
    max_size=3,
)


@st.composite
def pods(draw: st.DrawFn) -> object:
    if draw(st.integers(0, 30)) == 0:
        return draw(json_values)
    res = {
        k: draw(quantities)
        for k in draw(st.lists(st.sampled_from(["nvidia.com/gpu", "cpu", "memory", "pods"]), max_size=3, unique=True))
    }
    container = {"name": "c", "resources": {draw(st.sampled_from(["requests", "limits"])): res}}
    spec: dict = {"containers": draw(st.sampled_from([[container], [container, container], [], None, "x"]))}
    if draw(st.booleans()):
        spec["initContainers"] = [container]
    if draw(st.integers(0, 5)) == 0:
        spec["nodeName"] = draw(st.sampled_from([*NAMES, 3]))
    meta = {
        "name": draw(st.one_of(st.text(max_size=8), st.integers())),
        "namespace": "ns",
        "uid": draw(st.sampled_from(["u1", "u2", "u3", ""])),
        "labels": draw(st.one_of(labels, st.none(), st.integers())),
        "annotations": draw(st.one_of(annotations, st.none())),
    }
    return {"metadata": meta, "spec": spec, "status": draw(st.sampled_from([{}, {"phase": "Running"}, None, 1]))}


node_names = st.one_of(
    st.lists(st.sampled_from([*NAMES, "ghost", ""]), max_size=12),
    st.lists(st.one_of(st.text(max_size=5), st.integers()), max_size=4),
    st.none(),
    st.text(max_size=5),
)


@fuzz(EXAMPLES["raw"])
@given(path=VERBS, body=st.binary(max_size=300))
def test_fuzz_raw_bytes(path: str, body: bytes) -> None:
    check(path, body)


@fuzz(EXAMPLES["json"])
@given(path=VERBS, value=json_values)
def test_fuzz_any_json(path: str, value: object) -> None:
    check(path, json.dumps(value).encode())


@fuzz(EXAMPLES["args"])
@given(
    path=VERBS,
    pod=pods(),
    names=node_names,
    use_items=st.booleans(),
    bind=st.dictionaries(
        st.sampled_from(["PodName", "PodNamespace", "PodUID", "Node"]),
        st.one_of(st.text(max_size=4), st.integers()),
        max_size=4,
    ),
)
def test_fuzz_extender_args(path: str, pod: object, names: object, use_items: bool, bind: dict) -> None:
    args: dict = {"Pod": pod}
    if use_items and isinstance(names, list):
        args["Nodes"] = {"items": [{"metadata": {"name": n}} for n in names]}
    else:
        args["NodeNames"] = names
    args.update(bind)
    check(path, json.dumps(args).encode())


def test_total_examples_at_least_10000() -> None:
    assert sum(EXAMPLES.values()) >= 10_000


@fuzz(EXAMPLES["http"])
@given(path=VERBS, body=st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode())))
def test_fuzz_over_real_http(path: str, body: bytes) -> None:
    """The aiohttp transport itself: no 5xx, the connection survives."""
    conn = _conn()
    conn.request("POST", path, body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    assert resp.status in (200, 400), (resp.status, data[:200])


_SERVER: list = []


def _conn() -> http.client.HTTPConnection:
    if not _SERVER:
        srv = HTTPServer(API).start_in_thread()
        _SERVER.append((srv, http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)))
    return _SERVER[0][1]


def teardown_module() -> None:
    for srv, conn in _SERVER:
        conn.close()
        srv.stop()
