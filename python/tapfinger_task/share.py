"""The share the task holds, as the agent enforces it, and a watcher for its changes.

The agent writes the share to the file named by ``TAPFINGER_SHARE_FILE`` when the task starts
and again at every re-share (elastic sharing gives a running task more or fewer CPUs), whole
each time. Outside an agent (no such file) the share is the machine's: every CPU, no memory
limit, the GPUs ``CUDA_VISIBLE_DEVICES`` names.
"""

import json
import math
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

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
    def threads(self) -> int:
        """Worker threads that use the CPU share without oversubscribing it: the whole cores,
        at least one."""
        return max(1, int(math.floor(self.cpus + 1e-9)))


def _machine() -> Share:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    gpus = [int(x) for x in visible.split(",") if x.strip().isdigit()]
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return Share(cpus=float(n or 1), gpus=gpus)


def share(path: Optional[str] = None) -> Share:
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


def cpus() -> float:
    """CPU cores the task holds now."""
    return share().cpus


def threads() -> int:
    """Worker threads for the CPU share held now (its whole cores, at least one)."""
    return share().threads


def memory() -> Optional[int]:
    """The task's memory limit in bytes, or None."""
    return share().memory_bytes


def gpus() -> Tuple[List[int], Optional[float]]:
    """(devices, fraction): the GPU devices the task sees and the share of its one device it
    holds (None: whole devices)."""
    s = share()
    return s.gpus, s.gpu_share


class Watcher:
    """Calls back with the new share whenever the agent rewrites it (a daemon thread polling
    the file's modification; ``stop()`` ends it)."""

    def __init__(
        self,
        callback: Callable[[Share], None],
        interval: float = 0.5,
        path: Optional[str] = None,
    ) -> None:
        self._callback = callback
        self._interval = interval
        self._path = path or os.environ.get(ENV)
        self._stop = threading.Event()
        self._seen: Optional[Tuple[int, int, int]] = None
        self._thread = threading.Thread(target=self._run, name="tapfinger-share", daemon=True)

    def _stamp(self) -> Optional[Tuple[int, int, int]]:
        if not self._path:
            return None
        try:
            st = os.stat(self._path)
            return (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            return None

    def _run(self) -> None:
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

    def start(self) -> "Watcher":
        if self._path:
            self._seen = self._stamp()
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()


def watch(callback: Callable[[Share], None], interval: float = 0.5) -> Watcher:
    """Call ``callback(share)`` whenever the share changes; returns the running watcher. Outside
    an agent nothing changes and no thread starts."""
    return Watcher(callback, interval).start()


class _Following:
    """What :func:`follow_threads` keeps the libraries at: the share's whole cores (None: not
    following), the count the callbacks were last told, the callbacks, and per thread what was
    applied there last (the count, and whether PyTorch was imported then)."""

    def __init__(self) -> None:
        self.want: Optional[int] = None
        self.told: Optional[int] = None
        self.callbacks: List[Callable[[int], None]] = []
        self.applied: Dict[int, Tuple[int, bool]] = {}


_apply_lock = threading.Lock()
_follow = _Following()


def _openmp_libraries() -> List[str]:
    """Paths of the OpenMP runtimes loaded in this process (GNU, LLVM, Intel), from the
    process's own memory map: a library an extension module loaded privately is not in the
    global symbol namespace, so it is found by its file."""
    names = ("libgomp", "libomp", "libiomp5")
    found = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                path = line.rsplit(None, 1)[-1] if "/" in line else ""
                base = os.path.basename(path)
                if base.startswith(names) and ".so" in base and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def _set_threads(n: int) -> None:
    """Size, in the calling thread, the thread pools of the libraries loaded in this process to
    ``n``: PyTorch's (where the job imported it), and through threadpoolctl (where installed:
    ``pip install tapfinger-task[threads]``) OpenBLAS's, MKL's, BLIS's and OpenMP's; without
    threadpoolctl, OpenMP's directly. OpenMP's count is a property of the thread that sets it
    (and PyTorch's too, where it runs on OpenMP), so this must run in the thread that computes."""
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "set_num_threads"):
        torch.set_num_threads(n)
    try:
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped,import-not-found,unused-ignore]  # noqa: PLC0415

        threadpool_limits(limits=n)
        return
    except ImportError:
        pass
    import ctypes  # noqa: PLC0415

    for path in _openmp_libraries():
        try:
            ctypes.CDLL(path).omp_set_num_threads(ctypes.c_int(n))
        except (OSError, AttributeError):
            continue


def apply_share() -> Optional[int]:
    """Apply the share's thread count in the calling thread now, if :func:`follow_threads`
    follows it and it changed since this thread last applied it (or PyTorch was imported
    since); :func:`~tapfinger_task.report` calls it, so a loop that reports follows the share
    from its own thread. Returns the count in force here (None where nothing is followed)."""
    with _apply_lock:
        want = _follow.want
        if want is None:
            return None
        me = threading.get_ident()
        key = (want, "torch" in sys.modules)
        if _follow.applied.get(me) == key:
            return want
        _set_threads(want)
        _follow.applied[me] = key
        tell = _follow.told != want
        _follow.told = want
        callbacks = list(_follow.callbacks)
    if tell:
        for cb in callbacks:
            cb(want)
    return want


def follow_threads(
    callback: Optional[Callable[[int], None]] = None, interval: float = 0.5
) -> Watcher:
    """Keep PyTorch's, the BLAS libraries' and OpenMP's thread counts at the share's whole
    cores, now and at every re-share; ``callback(threads)`` too, for pools of your own. Call it
    from the thread that computes (the training loop's): the count is applied there now and,
    after a re-share, at that thread's next :func:`~tapfinger_task.report` (or
    :func:`apply_share`), never from the watcher's thread, where OpenMP's and PyTorch's counts
    would change for the watcher alone. Returns the watcher."""

    def changed(s: Share) -> None:
        with _apply_lock:
            _follow.want = s.threads

    with _apply_lock:
        if callback is not None:
            _follow.callbacks.append(callback)
        _follow.want = share().threads
        _follow.told = None
        _follow.applied.clear()
    apply_share()
    return watch(changed, interval)
