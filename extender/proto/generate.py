"""Regenerate ``qosmos_pb2.py`` and ``qosmos_pb2_grpc.py`` from ``qosmos.proto`` with grpcio-tools
(``qosmos.protogen``). Run: ``python -m qosmos.extender.proto.generate`` (a unit test checks the
checked-in files are fresh).
"""

from __future__ import annotations

import sys
from pathlib import Path

from qosmos.protogen import compile_proto

HERE = Path(__file__).resolve().parent


def generate(out_dir: Path) -> list[Path]:
    """Compile the proto into ``out_dir``; returns the generated files."""
    return compile_proto(HERE / "qosmos.proto", "qosmos.extender.proto", out_dir)


if __name__ == "__main__":
    for p in generate(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(p)
