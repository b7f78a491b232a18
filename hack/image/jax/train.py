"""A small data-parallel JAX training program: what every pod of a test DLJob's gang runs.

Each process joins ``jax.distributed`` (coordinator ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``
processes, this one ``JAX_PROCESS_ID``), CPU collectives over gloo (TCP). It trains a two-layer MLP
(a fixed random "teacher" MLP gives the targets) by SGD: every process makes its own data shard from
(seed, process id), computes its gradient, and ``lax.pmean`` under ``shard_map`` over all processes'
devices averages them in one all-reduce per step. The parameters start equal (one init seed) and stay
bit-identical on every rank, so the final ``checksum`` is the same on all of them.

Environment: TRAIN_STEPS (300), TRAIN_SEED (0), TRAIN_STEP_SLEEP (seconds per step, 0),
TRAIN_CHECKPOINT_DIR (unset: no checkpoints), TRAIN_CHECKPOINT_EVERY (steps, 0: only on SIGTERM),
TRAIN_INIT_TIMEOUT (seconds for the rendezvous, 300), TRAIN_BATCH (examples per process, 256),
TRAIN_PEER_LOSS_WAIT (seconds to wait for a SIGTERM after a collective failed, 5), TRAIN_READY_FILE
(unset: none; written once the rendezvous is done, for a readiness probe).

Log lines (stdout, one each, flushed):
    gloo hostname=<hostname> addr=<address gloo binds>   (or: gloo hostname=<h> does not resolve (...))
    rendezvous ok process=<i>/<n> devices=<global device count>
    resumed from step=<k>
    step=<k> loss=<float>                      (step 1 and every 50th)
    checkpoint saved step=<k>
    collective failed after step=<k>: <error's first line>
    final loss=<float> first_loss=<float> checksum=<16 hex>

SIGTERM: the C-level handler wakes a watcher thread at once (``signal.set_wakeup_fd``), even while the
main thread waits inside a collective whose peer already left. Process 0 then writes the checkpoint of
the last completed step (a host copy kept every step, equal on all ranks) atomically, and every process
exits with 143 without entering another collective. A collective that fails (a peer gone) without a
SIGTERM following within TRAIN_PEER_LOSS_WAIT: process 0 saves the last completed step, all exit 1.
"""

from __future__ import annotations

import hashlib
import io
import os
import signal
import socket
import sys
import threading
import time

import numpy as np

IN, HIDDEN, OUT = 8, 32, 1
LR = 0.1
LOG_EVERY = 50
NAMES = ("w1", "b1", "w2", "b2")
_WAKEUP: list[socket.socket] = []


def log(msg: str) -> None:
    print(msg, flush=True)


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def init_params(rng: np.random.Generator, scale: float = 1.0) -> dict[str, np.ndarray]:
    return {
        "w1": (rng.standard_normal((IN, HIDDEN)) * scale / np.sqrt(IN)).astype(np.float32),
        "b1": np.zeros((HIDDEN,), np.float32),
        "w2": (rng.standard_normal((HIDDEN, OUT)) * scale / np.sqrt(HIDDEN)).astype(np.float32),
        "b2": np.zeros((OUT,), np.float32),
    }


def make_shard(seed: int, process_id: int, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """This process's examples: its own inputs, targets from the one teacher all processes share."""
    teacher = init_params(np.random.default_rng([seed, 1]), scale=2.0)
    rng = np.random.default_rng([seed, 2, process_id])
    x = rng.standard_normal((batch, IN)).astype(np.float32)
    h = np.tanh(x @ teacher["w1"] + teacher["b1"])
    y = h @ teacher["w2"] + teacher["b2"] + 0.01 * rng.standard_normal((batch, OUT)).astype(np.float32)
    return x, y.astype(np.float32)


def checksum(params: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in NAMES:
        h.update(np.ascontiguousarray(params[name], dtype="<f4").tobytes())
    return h.hexdigest()[:16]


class Checkpoint:
    """``<dir>/ckpt.npz``: the parameters, the step they are after and the first step's loss."""

    def __init__(self, directory: str | None) -> None:
        self.path = os.path.join(directory, "ckpt.npz") if directory else None
        self.lock = threading.Lock()

    def load(self) -> tuple[dict[str, np.ndarray], int, float] | None:
        if not self.path or not os.path.exists(self.path):
            return None
        with np.load(self.path) as z:
            return {n: z[n] for n in NAMES}, int(z["step"]), float(z["first_loss"])

    def save(self, params: dict[str, np.ndarray], step: int, first_loss: float) -> None:
        if not self.path:
            return
        with self.lock:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            buf = io.BytesIO()
            np.savez(buf, step=np.int64(step), first_loss=np.float64(first_loss), **params)
            tmp = f"{self.path}.tmp-{os.getpid()}"
            with open(tmp, "wb") as f:
                f.write(buf.getvalue())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        log(f"checkpoint saved step={step}")


class State:
    """The last completed step's host copy, replaced whole (one reference) by the training loop."""

    def __init__(self) -> None:
        self.current: tuple[dict[str, np.ndarray], int, float] | None = None  # None: no step done yet


def install_sigterm_handler(stop: threading.Event) -> None:
    """(Re)install the Python-level handler, whose C part also writes the wakeup fd."""
    signal.signal(signal.SIGTERM, lambda *_: stop.set())


def watch_sigterm(process_id: int, ckpt: Checkpoint, state: State, stop: threading.Event) -> None:
    """On SIGTERM: process 0 saves the last completed step, then every process exits with 143.

    The Python-level handler would run only when the main thread returns to the interpreter, which it
    never does while it waits in a collective for a peer that has gone; the wakeup fd is written by
    the C-level handler, so this thread sees the signal at once.
    """
    r, w = socket.socketpair()
    w.setblocking(False)
    _WAKEUP.extend((r, w))  # held for the process's life: a collected socket closes its fd
    install_sigterm_handler(stop)
    signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)

    def run() -> None:
        while True:
            data = r.recv(64)
            if not data:  # closed: no more signals to wait for
                return
            if signal.SIGTERM in data:
                break
        stop.set()
        try:
            current = state.current
            if process_id == 0 and current is not None:
                params, step, first_loss = current
                ckpt.save(params, step, first_loss)
        finally:
            sys.stdout.flush()
            os._exit(143)

    threading.Thread(target=run, name="sigterm-watcher", daemon=True).start()


def main() -> int:
    coordinator = os.environ["JAX_COORDINATOR_ADDRESS"]
    num_processes = int(os.environ["JAX_NUM_PROCESSES"])
    process_id = int(os.environ["JAX_PROCESS_ID"])
    steps = env_int("TRAIN_STEPS", 300)
    seed = env_int("TRAIN_SEED", 0)
    batch = env_int("TRAIN_BATCH", 256)
    every = env_int("TRAIN_CHECKPOINT_EVERY", 0)
    sleep = float(os.environ.get("TRAIN_STEP_SLEEP", "0"))
    ckpt = Checkpoint(os.environ.get("TRAIN_CHECKPOINT_DIR") or None)
    state, stop = State(), threading.Event()
    watch_sigterm(process_id, ckpt, state, stop)

    # gloo's TCP transport binds (and announces to its peers) the first address this process's hostname
    # resolves to: in a pod, the kubelet's /etc/hosts maps it to the pod IP. Say which, or why not.
    host = socket.gethostname()
    try:
        addr = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]
    except OSError as e:
        log(f"gloo hostname={host} does not resolve ({e}): gloo cannot bind")
        return 1
    log(f"gloo hostname={host} addr={addr}")

    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # jax's preemption service installs its own SIGTERM handler (it only logs "SIGTERM caught" and
    # waits for reached_preemption_sync_point, which would keep the process running): off
    jax.config.update("jax_enable_preemption_service", False)
    # all three given and cluster detection off: in a pod (KUBERNETES_SERVICE_HOST set) jax would
    # otherwise try its k8s cluster detection (the `kubernetes` package, the API) for the device ids
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=num_processes,
        process_id=process_id,
        cluster_detection_method="deactivate",
        initialization_timeout=env_int("TRAIN_INIT_TIMEOUT", 300),
    )
    devices = jax.devices()  # the CPU client's global topology exchange, gloo's rendezvous
    install_sigterm_handler(stop)  # again, should anything in there have replaced it
    log(f"rendezvous ok process={jax.process_index()}/{jax.process_count()} devices={len(devices)}")
    ready = os.environ.get("TRAIN_READY_FILE")
    if ready:  # a readiness probe tests it: the pod is Ready only once its process joined the rendezvous
        with open(ready, "w") as f:
            f.write("ok\n")

    mesh = jax.sharding.Mesh(np.array(devices), ("p",))
    replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("p"))

    def loss_fn(params, x, y):
        h = jnp.tanh(x @ params["w1"] + params["b1"])
        return jnp.mean((h @ params["w2"] + params["b2"] - y) ** 2)

    def local_step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads = jax.lax.pmean(grads, "p")  # the all-reduce: every rank gets the same mean gradient
        loss = jax.lax.pmean(loss, "p")
        return jax.tree.map(lambda p, g: p - LR * g, params, grads), loss

    def local_loss(params, x, y):
        return jax.lax.pmean(loss_fn(params, x, y), "p")

    specs = dict(mesh=mesh, in_specs=(P(), P("p"), P("p")))
    step_fn = jax.jit(jax.shard_map(local_step, out_specs=(P(), P()), **specs))
    eval_fn = jax.jit(jax.shard_map(local_loss, out_specs=P(), **specs))

    def to_global(a: np.ndarray, sharding: NamedSharding):
        return jax.make_array_from_process_local_data(sharding, a)

    def to_host(tree) -> dict[str, np.ndarray]:
        return {n: np.array(tree[n].addressable_data(0)) for n in NAMES}

    x_local, y_local = make_shard(seed, process_id, batch)
    x, y = to_global(x_local, sharded), to_global(y_local, sharded)

    start, first_loss = 0, float("nan")
    resumed = ckpt.load()
    if resumed is not None:
        host_params, start, first_loss = resumed
        log(f"resumed from step={start}")
    else:
        host_params = init_params(np.random.default_rng([seed, 0]))
    params = {n: to_global(host_params[n], replicated) for n in NAMES}

    try:
        for k in range(start + 1, steps + 1):
            if stop.is_set():  # SIGTERM: the watcher saves and exits; no further collective here
                time.sleep(3600)
            params, loss = step_fn(params, x, y)
            loss = float(loss.addressable_data(0))  # waits for the step (and its all-reduce)
            if k == 1:
                first_loss = loss
            state.current = (to_host(params), k, first_loss)
            if k == 1 or k % LOG_EVERY == 0:
                log(f"step={k} loss={loss:.6f}")
            if every and k % every == 0 and process_id == 0:
                ckpt.save(*state.current)
            if sleep:
                time.sleep(sleep)
        final = float(eval_fn(params, x, y).addressable_data(0))
    except Exception as e:  # a collective failed: a peer has gone (its pod deleted, crashed)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        done = state.current[1] if state.current else start
        log(f"collective failed after step={done}: {type(e).__name__}: {first}")
        # a gang being deleted: our own SIGTERM is likely on its way; the watcher then saves, exits 143
        if stop.wait(env_int("TRAIN_PEER_LOSS_WAIT", 5)):
            time.sleep(3600)
        if process_id == 0 and state.current is not None:
            ckpt.save(*state.current)
        sys.stdout.flush()
        os._exit(1)  # not sys.exit: jax's atexit shutdown would wait for the gone peer
    log(f"final loss={final:.6f} first_loss={first_loss:.6f} checksum={checksum(to_host(params))}")
    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
