"""Regenerate ``qosmos_pb2.py`` and ``qosmos_pb2_grpc.py`` from ``qosmos.proto`` with grpcio-tools.

The proto is compiled as ``qosmos/extender/proto/qosmos.proto`` so the generated stub
imports ``qosmos.extender.proto.qosmos_pb2`` (a package import, not a top-level one).
Run: ``python -m qosmos.extender.proto.generate`` (a unit test checks the checked-in files are fresh).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUTPUTS = ("qosmos_pb2.py", "qosmos_pb2_grpc.py")


def generate(out_dir: Path) -> list[Path]:
    """Compile the proto into ``out_dir``; returns the generated files."""
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src" / "qosmos" / "extender" / "proto"
        src.mkdir(parents=True)
        shutil.copy(HERE / "qosmos.proto", src / "qosmos.proto")
        gen = Path(tmp) / "gen"
        gen.mkdir()
        rc = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{Path(tmp) / 'src'}",
                f"--python_out={gen}",
                f"--grpc_python_out={gen}",
                "qosmos/extender/proto/qosmos.proto",
            ]
        )
        if rc != 0:
            raise RuntimeError(f"protoc failed with code {rc}")
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for name in OUTPUTS:
            dst = out_dir / name
            shutil.copy(gen / "qosmos" / "extender" / "proto" / name, dst)
            written.append(dst)
        return written


if __name__ == "__main__":
    for p in generate(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(p)
