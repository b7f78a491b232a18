"""The checked-in gRPC stubs are what grpcio-tools generates from qosmos.proto today."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_generated_stubs_are_fresh(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools")
    from qosmos.extender.proto import generate

    fresh = generate.generate(tmp_path)
    for path in fresh:
        checked_in = generate.HERE / path.name
        assert checked_in.exists(), f"{checked_in} missing: run python -m qosmos.extender.proto.generate"
        assert path.read_bytes() == checked_in.read_bytes(), (
            f"{checked_in.name} is stale: run python -m qosmos.extender.proto.generate"
        )


def test_package_and_services() -> None:
    from qosmos.extender.proto import qosmos_pb2

    assert qosmos_pb2.DESCRIPTOR.package == "qosmos.v1alpha1"
    methods = {m.name for m in qosmos_pb2.DESCRIPTOR.services_by_name["Extender"].methods}
    assert methods == {"Score", "Rank", "Explain", "Admit", "ExplainQueue"}
