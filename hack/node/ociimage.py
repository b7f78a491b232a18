#!/usr/bin/env python3
"""Write a one-layer OCI image archive (an OCI image layout in a tar) for ``ctr images import``.

The layer is an uncompressed tar of either a root filesystem directory (``--rootfs``) or single
files (``--file SRC:DEST``). No registry is involved: hack/node/build.sh uses this for the
pause image (a static binary in a scratch image) and for the debootstrap Debian image.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import tarfile
import tempfile
from pathlib import Path

SKIP_UNDER = ("dev", "proc", "sys", "run", "tmp")  # runtime mounts: keep the directories, not their contents
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _reset(ti: tarfile.TarInfo) -> tarfile.TarInfo:
    ti.mtime = 0
    return ti


def write_layer(out: Path, rootfs: Path | None, files: list[tuple[Path, str]]) -> None:
    """An uncompressed layer tar from a rootfs directory or (source, destination) files."""
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        if rootfs is not None:
            for entry in sorted(os.listdir(rootfs)):
                src = rootfs / entry
                if entry in SKIP_UNDER and src.is_dir() and not src.is_symlink():
                    tar.add(src, arcname=entry, recursive=False, filter=_reset)
                else:
                    tar.add(src, arcname=entry, recursive=True, filter=_reset)
        for src, dest in files:
            ti = tar.gettarinfo(str(src), arcname=dest.lstrip("/"))
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = "root"
            ti.mtime = 0
            with open(src, "rb") as f:
                tar.addfile(ti, f)


def write_image(name: str, entrypoint: list[str], layer: Path, out: Path) -> None:
    """The OCI layout archive holding ``layer``, its config, manifest and an index naming ``name``."""
    layer_digest, layer_size = _sha256_file(layer), layer.stat().st_size
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": entrypoint, "Env": [PATH_ENV], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
        "history": [{"created_by": "qosmos hack/node/ociimage.py"}],
    }
    config_b = json.dumps(config, sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": f"sha256:{hashlib.sha256(config_b).hexdigest()}",
            "size": len(config_b),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": f"sha256:{layer_digest}",
                "size": layer_size,
            }
        ],
    }
    manifest_b = json.dumps(manifest, sort_keys=True).encode()
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": f"sha256:{hashlib.sha256(manifest_b).hexdigest()}",
                "size": len(manifest_b),
                "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name},
            }
        ],
    }

    def add_bytes(tar: tarfile.TarFile, arcname: str, data: bytes) -> None:
        ti = tarfile.TarInfo(arcname)
        ti.size, ti.mode = len(data), 0o644
        tar.addfile(ti, io.BytesIO(data))

    tmp = out.with_suffix(out.suffix + ".tmp")
    with tarfile.open(tmp, "w") as tar:
        add_bytes(tar, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        add_bytes(tar, "index.json", json.dumps(index).encode())
        for blob in (config_b, manifest_b):
            add_bytes(tar, f"blobs/sha256/{hashlib.sha256(blob).hexdigest()}", blob)
        tar.add(layer, arcname=f"blobs/sha256/{layer_digest}")
    tmp.replace(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--name", required=True, help="image reference, e.g. qosmos.local/pause:3.10")
    p.add_argument("--entrypoint", required=True, help="command, split on spaces")
    p.add_argument("--rootfs", type=Path, help="root filesystem directory for the layer")
    p.add_argument("--file", action="append", default=[], help="SRC:DEST file to add (repeatable)")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    files = [(Path(s), d) for s, d in (f.split(":", 1) for f in a.file)]
    if a.rootfs is None and not files:
        p.error("give --rootfs or at least one --file")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=a.out.parent) as d:
        layer = Path(d) / "layer.tar"
        write_layer(layer, a.rootfs, files)
        write_image(a.name, a.entrypoint.split(), layer, a.out)


if __name__ == "__main__":
    main()
