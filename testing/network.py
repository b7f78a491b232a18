"""A private network for a test whose programs bind every address: torchrun's rendezvous store and a
Ray head's GCS, raylet and client server listen on ``*`` (torch has no option to bind the store; Ray
binds what it detects as the node's address, and probes a public resolver to find it, whatever
``--node-ip-address`` says). Inside :func:`private_network` the calling thread, and every process it
starts, is in a network namespace of its own whose only interface is ``lo``: what they bind is
loopback by construction and nothing they send can leave. The thread goes back to its own namespace
on exit; the host's network is not changed. Needs CAP_SYS_ADMIN (root)."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import socket
import struct
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000  # <sched.h>
SIOCSIFFLAGS = 0x8914  # <linux/sockios.h>
IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x1, 0x8, 0x40  # <net/if.h>


class PrivateNetworkUnavailable(OSError):
    pass


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise PrivateNetworkUnavailable(err, f"{what}: {os.strerror(err)}")


@contextlib.contextmanager
def private_network() -> Iterator[None]:
    """Run the body (this thread and the processes it starts) in a new network namespace with only
    ``lo``, up. Processes started inside keep that namespace after the body; stop them in it."""
    libc = _libc()
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        _check(libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # a socket of the new namespace
                fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING))
            yield
        finally:
            _check(libc.setns(home, CLONE_NEWNET), "setns back to the thread's network namespace")
    finally:
        os.close(home)
