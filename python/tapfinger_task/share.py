"""The share the task holds, as the agent enforces it, and a watcher for its changes.

The agent writes the share to the file named by ``TAPFINGER_SHARE_FILE`` when the task starts
and again at every re-share (elastic sharing gives a running task more or fewer CPUs), whole
each time. Outside an agent (no such file) the share is the machine's: every CPU, no memory
limit, the GPUs ``CUDA_VISIBLE_DEVICES`` names.
"""

import json
import math
import os
import threading
from dataclasses import dataclass, field
from typing import List, Optional

ENV = "TAPFINGER_SHARE_FILE"


@dataclass(frozen=True)
class Share:
    """What the task holds: CPU cores (may be fractional), a memory limit in bytes (None: not
    limited), GPU devices, the fraction of its one device an MPS client holds (None: whole
    devices), how the CPU share is enforced (``cgroup``, ``affinity``, ``none``), and how many
    shares the agent has written (0 outside an agent)."""

    cpus: float
    memory_bytes: Optional[int] = None
    gpus: List[int] = field(default_factory=list)
    gpu_share: Optional[float] = None
    enforced: str = "none"
    generation: int = 0

    @property
    def threads(self):
        """Worker threads that use the CPU share without oversubscribing it: the whole cores,
        at least one."""
        return max(1, int(math.floor(self.cpus + 1e-9)))


def _machine():
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    gpus = [int(x) for x in visible.split(",") if x.strip().isdigit()]
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return Share(cpus=float(n or 1), gpus=gpus)


def share(path=None):
    """The share in force now (read from the share file each call)."""
    path = path or os.environ.get(ENV)
    if not path:
        return _machine()
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    return Share(
        cpus=float(d["cpus"]),
        memory_bytes=d.get("memory_bytes"),
        gpus=list(d.get("gpus") or []),
        gpu_share=d.get("gpu_share"),
        enforced=d.get("enforced", "none"),
        generation=int(d.get("generation", 0)),
    )


def cpus():
    """CPU cores the task holds now."""
    return share().cpus


def threads():
    """Worker threads for the CPU share held now (its whole cores, at least one)."""
    return share().threads


def memory():
    """The task's memory limit in bytes, or None."""
    return share().memory_bytes


def gpus():
    """(devices, fraction): the GPU devices the task sees and the share of its one device it
    holds (None: whole devices)."""
    s = share()
    return s.gpus, s.gpu_share


class Watcher:
    """Calls back with the new share whenever the agent rewrites it (a daemon thread polling
    the file's modification; ``stop()`` ends it)."""

    def __init__(self, callback, interval=0.5, path=None):
        self._callback = callback
        self._interval = interval
        self._path = path or os.environ.get(ENV)
        self._stop = threading.Event()
        self._seen = None
        self._thread = threading.Thread(target=self._run, name="tapfinger-share", daemon=True)

    def _stamp(self):
        try:
            st = os.stat(self._path)
            return (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            return None

    def _run(self):
        while not self._stop.wait(self._interval):
            stamp = self._stamp()
            if stamp is None or stamp == self._seen:
                continue
            self._seen = stamp
            try:
                s = share(self._path)
            except (OSError, ValueError, KeyError):
                continue
            self._callback(s)

    def start(self):
        if self._path:
            self._seen = self._stamp()
            self._thread.start()
        return self

    def stop(self):
        self._stop.set()


def watch(callback, interval=0.5):
    """Call ``callback(share)`` whenever the share changes; returns the running watcher. Outside
    an agent nothing changes and no thread starts."""
    return Watcher(callback, interval).start()


def _set_threads(n):
    """Size the thread pools of the libraries loaded in this process to ``n``."""
    try:
        import torch  # noqa: PLC0415 (optional: only if installed)

        torch.set_num_threads(n)
    except ImportError:
        pass
    try:
        from threadpoolctl import threadpool_limits  # noqa: PLC0415

        threadpool_limits(limits=n)
    except ImportError:
        pass


def follow_threads(callback=None, interval=0.5):
    """Keep PyTorch's and the BLAS libraries' thread counts (where importable) at the share's
    whole cores, now and at every re-share; ``callback(threads)`` too, for pools of your own.
    Returns the watcher."""

    def apply(s):
        _set_threads(s.threads)
        if callback is not None:
            callback(s.threads)

    apply(share())
    return watch(apply, interval)
