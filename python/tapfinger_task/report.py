"""Progress and metrics to the agent: lines ``TAPFINGER progress=0.42 loss=1.7`` on stdout.

Progress is the share of the task's work done, in [0, 1]; other values are metrics (``loss``,
``accuracy``). ``checkpoint=P`` says a checkpoint holds the work up to progress P: a preemption
then loses only the work since.
"""

import math
import sys
import threading
from typing import Optional

from .share import apply_share

_lock = threading.Lock()
_last = [0.0]


def _number(name: str, value: float) -> float:
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return v


def report(progress: float, **metrics: float) -> None:
    """Tell the agent the task's progress (0 to 1) and any metrics (finite numbers). Where
    :func:`~tapfinger_task.follow_threads` follows the share, a new thread count is applied
    first, in the calling thread (:func:`~tapfinger_task.share.apply_share`)."""
    apply_share()
    p = min(max(_number("progress", progress), 0.0), 1.0)
    parts = [f"progress={p:g}"]
    for k, v in metrics.items():
        if not k.isidentifier():
            raise ValueError(f"a metric name must be a word, got {k!r}")
        parts.append(f"{k}={_number(k, v):g}")
    with _lock:
        _last[0] = p
        sys.stdout.write("TAPFINGER " + " ".join(parts) + "\n")
        sys.stdout.flush()


def checkpointed(progress: Optional[float] = None, **metrics: float) -> None:
    """Tell the agent a checkpoint now holds the work up to ``progress`` (default: the last
    progress reported); the progress line keeps the larger of the two, as work done since the
    checkpoint is still done."""
    c = _last[0] if progress is None else min(max(_number("progress", progress), 0.0), 1.0)
    report(max(_last[0], c), checkpoint=c, **metrics)


def done(**metrics: float) -> None:
    """Tell the agent the task's work is done (progress 1), before the results are written out
    and the process exits: from then on the task is no preemption victim, and a stop of its box
    lets it end by itself rather than give it the checkpoint signal (done is done: it will not
    run again from its last checkpoint)."""
    report(1.0, **metrics)


def last_progress() -> float:
    """The last progress reported by this process (0 before any)."""
    return _last[0]
