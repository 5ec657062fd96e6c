"""Checkpoints, preemption and resume.

A task the agent preempts gets SIGTERM and its spec's ``grace_seconds`` to save and exit before
it is killed; a ``resumable`` task started again after such a stop (or after a move to new
devices) has ``TAPFINGER_RESUME=1`` and should pick up from the last checkpoint it finds.
"""

import os
import signal
import sys
from types import FrameType
from typing import Callable, Optional

from .report import checkpointed


def task_id() -> Optional[int]:
    """The task's id (``TAPFINGER_TASK_ID``), or None outside an agent."""
    v = os.environ.get("TAPFINGER_TASK_ID")
    return int(v) if v else None


def resuming() -> bool:
    """Whether this start should resume from a checkpoint (``TAPFINGER_RESUME=1``)."""
    return os.environ.get("TAPFINGER_RESUME") == "1"


def checkpoint_dir(base: Optional[str] = None) -> str:
    """The task's own checkpoint folder, created: ``<base>/task-<id>``, where the base is
    ``TAPFINGER_CHECKPOINT_DIR`` if set (the spec's ``env``: every submission of a spec shares
    it, each task gets its folder in it), else ``checkpoints`` in ``base`` (default: the working
    folder). Outside an agent (no task id) the folder is ``task-local``. A task keeps its id
    when it is requeued, so a start that resumes finds what an earlier start of it saved here;
    another task never does."""
    root = os.environ.get("TAPFINGER_CHECKPOINT_DIR") or os.path.join(base or os.getcwd(), "checkpoints")
    tid = task_id()
    d = os.path.join(root, f"task-{tid if tid is not None else 'local'}")
    os.makedirs(d, exist_ok=True)
    return d


def on_preempt(save: Callable[[], Optional[float]], exit_code: int = 143) -> None:
    """On SIGTERM (the agent's checkpoint signal): call ``save()``, report the checkpoint and
    exit. The checkpoint holds the progress ``save`` returns (the share of the work its saved
    state has done), or the last progress reported if it returns None. ``save`` runs in the
    main thread between two Python instructions, so keep it within the spec's
    ``grace_seconds``."""

    def handler(signum: int, frame: Optional[FrameType]) -> None:
        checkpointed(save())
        sys.stdout.flush()
        os._exit(exit_code)

    signal.signal(signal.SIGTERM, handler)
