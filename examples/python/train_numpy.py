"""A NumPy training job written for tapfinger with the task kit (`pip install ./python`).

A one-hidden-layer network (tanh, logistic output) trained by full-batch gradient descent on a
synthetic classification problem, its gradient computed in shards by a pool of worker threads
(NumPy's matrix products release the GIL, so the shards run in parallel). With the kit it:

- keeps its worker count at the share's whole cores, growing and shrinking the pool as the
  agent re-shares (``FOLLOW=0`` keeps the count it started with, for comparison);
- reports progress and loss, and a checkpoint every ``CKPT_EVERY`` steps;
- on SIGTERM (a preemption) saves its weights and step and reports the checkpoint;
- started again with ``TAPFINGER_RESUME=1``, loads them and goes on from that step;
- writes its result through a fenced file: a stale copy of the task cannot overwrite it.

Environment: STEPS (default 300), ROWS (20000), COLS (100), HIDDEN (256), CKPT_EVERY (25),
FOLLOW (1),
RESULTS (results.json in the task's own checkpoint folder by default). Run it outside an agent too:
``python3 train_numpy.py`` uses the machine's CPUs.
"""

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import tapfinger_task as kit

STEPS = int(os.environ.get("STEPS", "300"))
ROWS = int(os.environ.get("ROWS", "20000"))
COLS = int(os.environ.get("COLS", "100"))
HIDDEN = int(os.environ.get("HIDDEN", "256"))
CKPT_EVERY = int(os.environ.get("CKPT_EVERY", "25"))
FOLLOW = os.environ.get("FOLLOW", "1") != "0"

rng = np.random.default_rng(7)
X = rng.standard_normal((ROWS, COLS)).astype(np.float32)
truth = rng.standard_normal(COLS).astype(np.float32)
y = (X @ truth + 0.5 * rng.standard_normal(ROWS).astype(np.float32) > 0).astype(np.float32)

ckpt = os.path.join(kit.checkpoint_dir(), "state.npz")
# The weights: the hidden layer's, then the output's, as one vector.
w = np.concatenate([
    (rng.standard_normal(COLS * HIDDEN) / np.sqrt(COLS)).astype(np.float32),
    np.zeros(HIDDEN, dtype=np.float32),
])
step = 0
if kit.resuming() and os.path.exists(ckpt):
    saved = np.load(ckpt)
    w, step = saved["w"], int(saved["step"])
    print(f"resumed at step {step}", flush=True)
else:
    print("fresh start", flush=True)


# The weights and the step they are at, replaced in one assignment: a SIGTERM runs its handler
# between two Python instructions, and must never see weights of one step with another's count.
state = (w, step)


def save():
    """Save the state; the share of the work it has done."""
    w_saved, step_saved = state
    tmp = ckpt + ".tmp.npz"
    np.savez(tmp, w=w_saved, step=step_saved)
    os.replace(tmp, ckpt)
    return step_saved / STEPS


kit.on_preempt(save)

workers = [kit.threads()]
if FOLLOW:
    # Our own pool is the parallelism (one BLAS thread per shard, the spec's env), so only its
    # size follows the share; `kit.follow_threads()` would size BLAS's pools instead.
    kit.watch(lambda s: workers.__setitem__(0, s.threads), interval=0.2)
pool, pool_size = ThreadPoolExecutor(workers[0]), workers[0]
print(f"workers={pool_size}", flush=True)


def shard_grad(rows):
    """The gradient of the summed log loss over `rows`, and that loss."""
    w1, w2 = w[: COLS * HIDDEN].reshape(COLS, HIDDEN), w[COLS * HIDDEN :]
    xs, ys = X[rows], y[rows]
    h = np.tanh(xs @ w1)
    p = 1.0 / (1.0 + np.exp(-(h @ w2)))
    d = p - ys
    g2 = h.T @ d
    g1 = xs.T @ (np.outer(d, w2) * (1.0 - h * h))
    loss = -np.sum(ys * np.log(p + 1e-7) + (1 - ys) * np.log(1 - p + 1e-7))
    return np.concatenate([g1.ravel(), g2]), float(loss)


t0 = time.time()
while step < STEPS:
    if workers[0] != pool_size:
        pool.shutdown()
        pool, pool_size = ThreadPoolExecutor(workers[0]), workers[0]
        print(f"workers={pool_size}", flush=True)
    shards = np.array_split(np.arange(ROWS), pool_size * 4)
    parts = list(pool.map(shard_grad, [slice(s[0], s[-1] + 1) for s in shards]))
    grad = sum(p[0] for p in parts) / ROWS
    loss = sum(p[1] for p in parts) / ROWS
    state = (w - 0.2 * grad, step + 1)
    w, step = state
    if step % CKPT_EVERY == 0:
        save()
        kit.checkpointed(step / STEPS, loss=loss)
    else:
        kit.report(step / STEPS, loss=loss)

w1, w2 = w[: COLS * HIDDEN].reshape(COLS, HIDDEN), w[COLS * HIDDEN :]
accuracy = float(np.mean(((np.tanh(X @ w1) @ w2) > 0) == (y > 0.5)))
result = {"steps": step, "loss": loss, "accuracy": accuracy, "seconds": time.time() - t0,
          "epoch": kit.epoch()}
path = os.environ.get("RESULTS") or os.path.join(kit.checkpoint_dir(), "results.json")
kit.FencedFile(path).write(json.dumps(result))
print(json.dumps(result), flush=True)
