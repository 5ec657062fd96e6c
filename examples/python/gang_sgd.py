"""Data-parallel training across a gang's members, written with the task kit.

Each member (``kit.gang()``: rank, world size, the rendezvous the agent gives every member)
holds its own shard of a synthetic logistic-regression problem. Every step each computes its
gradient, the members average them (an all-reduce through rank 0 over TCP at
``MASTER_ADDR:MASTER_PORT``) and all apply the same average, so every member ends with the same
weights. With PyTorch one would write ``torch.distributed.init_process_group("gloo",
init_method=g.init_method, rank=g.rank, world_size=g.world_size)`` and ``all_reduce`` instead;
this example needs only NumPy.

Environment: STEPS (default 200), ROWS per member (20000), COLS (64), OUT (a folder: each member
writes ``<task>-<epoch>-<rank>.json`` there with a digest of its final weights, evidence that
the members agreed).
"""

import hashlib
import json
import os
import socket
import struct
import time

import numpy as np

import tapfinger_task as kit

STEPS = int(os.environ.get("STEPS", "200"))
ROWS = int(os.environ.get("ROWS", "20000"))
COLS = int(os.environ.get("COLS", "64"))

g = kit.gang()
if g is None:
    raise SystemExit("run me as a gang: the agent sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT")

truth = np.random.default_rng(0).standard_normal(COLS).astype(np.float32)
rng = np.random.default_rng(100 + g.rank)
X = rng.standard_normal((ROWS, COLS)).astype(np.float32)
y = (X @ truth > 0).astype(np.float32)
WIDTH = 4 * (COLS + 1)  # a gradient and a loss, float32


def exact(sock, n):
    buf = b""
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise ConnectionError("a member went away: the gang cannot go on")
        buf += part
    return buf


def connect():
    """Rank 0: every other member's socket, by rank. Others: the socket to rank 0."""
    deadline = time.time() + 60
    if g.rank == 0:
        server = socket.create_server(("", g.master_port), reuse_port=True)
        server.settimeout(60)
        peers = {}
        while len(peers) < g.world_size - 1:
            s, _ = server.accept()
            s.settimeout(60)
            peers[struct.unpack("!I", exact(s, 4))[0]] = s
        return peers
    while True:
        try:
            s = socket.create_connection((g.master_addr, g.master_port), timeout=5)
            s.settimeout(60)
            s.sendall(struct.pack("!I", g.rank))
            return s
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)


def all_reduce(link, vec):
    """The members' mean of `vec` (float32), the same on every member."""
    if g.rank == 0:
        total = vec.copy()
        for s in link.values():
            total += np.frombuffer(exact(s, WIDTH), dtype=np.float32)
        mean = (total / g.world_size).astype(np.float32)
        for s in link.values():
            s.sendall(mean.tobytes())
        return mean
    link.sendall(vec.astype(np.float32).tobytes())
    return np.frombuffer(exact(link, WIDTH), dtype=np.float32)


link = connect()
w = np.zeros(COLS, dtype=np.float32)
for step in range(1, STEPS + 1):
    p = 1.0 / (1.0 + np.exp(-(X @ w)))
    grad = X.T @ (p - y) / ROWS
    loss = -np.mean(y * np.log(p + 1e-7) + (1 - y) * np.log(1 - p + 1e-7))
    mean = all_reduce(link, np.append(grad, loss).astype(np.float32))
    w = w - 1.0 * mean[:COLS]
    if g.rank == 0:
        kit.report(step / STEPS, loss=float(mean[COLS]))

digest = hashlib.sha256(w.tobytes()).hexdigest()
out = os.environ.get("OUT")
if out:
    name = f"{kit.task_id()}-{kit.epoch()}-{g.rank}.json"
    with open(os.path.join(out, "." + name + ".tmp"), "w") as f:
        json.dump({"rank": g.rank, "world": g.world_size, "role": g.role, "weights": digest,
                   "node": os.environ.get("TAPFINGER_NODE", "")}, f)
    os.replace(os.path.join(out, "." + name + ".tmp"), os.path.join(out, name))
print(f"rank {g.rank} of {g.world_size}: weights {digest[:16]}", flush=True)
