"""Compile one of qosmos' .proto files with grpcio-tools into ``<name>_pb2.py``, its type stub ``<name>_pb2.pyi``
(protoc's own, so that mypy sees the messages' fields) and ``<name>_pb2_grpc.py``.

The proto is compiled under its package path (e.g. ``qosmos/extender/proto/qosmos.proto``) so that the
generated gRPC stub imports ``qosmos.extender.proto.qosmos_pb2`` (a package import, not a top-level
one). Each proto folder's ``generate.py`` calls this; a unit test checks the checked-in files are fresh.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path


def compile_proto(proto: Path, package: str, out_dir: Path) -> list[Path]:
    """Compile ``proto`` as a file of ``package`` (dotted) into ``out_dir``; returns the generated files."""
    from grpc_tools import protoc

    rel = Path(*package.split(".")) / proto.name
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        (src / rel.parent).mkdir(parents=True)
        shutil.copy(proto, src / rel)
        gen = Path(tmp) / "gen"
        gen.mkdir()
        rc = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{src}",
                f"--python_out={gen}",
                f"--pyi_out={gen}",
                f"--grpc_python_out={gen}",
                str(rel),
            ]
        )
        if rc != 0:
            raise RuntimeError(f"protoc failed with code {rc}")
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for name in (f"{proto.stem}_pb2.py", f"{proto.stem}_pb2.pyi", f"{proto.stem}_pb2_grpc.py"):
            dst = out_dir / name
            shutil.copy(gen / rel.parent / name, dst)
            written.append(dst)
        return written
