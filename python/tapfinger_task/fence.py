"""Fenced writes: storage that refuses a stale copy of the task, and every other task.

Every start of a task carries an epoch (``TAPFINGER_EPOCH``) that no other start of it
carries; a copy left over from a network partition has a lower one. Epochs order the starts of
one task only: another task's epoch says nothing about this one's, so a fenced file also
records the task it belongs to (``TAPFINGER_TASK_ID``). The rule: a write by another task is
refused (:class:`OtherTask`); of this task's starts, keep the highest epoch that has written,
accept a write whose epoch is greater than or equal to it (and raise it), refuse one whose
epoch is lower (:class:`StaleEpoch`). :class:`FencedFile` keeps it for a file, with the owner
and its highest epoch beside it in ``<file>.epoch`` (JSON: ``{"task": 17, "epoch": 8589934593}``;
a bare number, as older kits wrote, is an epoch of an unknown task) and an advisory lock
(``fcntl.flock``) around the check and the write, so writers on one machine, or on a file
system whose locks every box shares, never interleave.
"""

import fcntl
import json
import os
from typing import Any, Optional, Tuple, Union

from .lifecycle import task_id


class FenceError(Exception):
    """A fenced write refused (:class:`StaleEpoch` or :class:`OtherTask`)."""


class StaleEpoch(FenceError):
    """A write refused: a later start of the task has written already."""

    def __init__(self, mine: int, highest: int, path: str) -> None:
        super().__init__(
            f"epoch {mine} is older than epoch {highest}, which has written {path}: "
            "a later start of this task runs elsewhere"
        )
        self.mine = mine
        self.highest = highest
        self.path = path


class OtherTask(FenceError):
    """A write refused: the file belongs to another task."""

    def __init__(self, mine: Optional[int], owner: int, path: str) -> None:
        who = "this process (no task: not run by an agent)" if mine is None else f"task {mine}"
        super().__init__(
            f"{path} belongs to task {owner}, not to {who}: each task writes its own files "
            "(tapfinger_task.checkpoint_dir() is a folder per task)"
        )
        self.mine = mine
        self.owner = owner
        self.path = path


def epoch() -> int:
    """This start's epoch (an unsigned 64-bit number), or 0 outside an agent."""
    return int(os.environ.get("TAPFINGER_EPOCH", "0"))


class FencedFile:
    """A file only its task's latest start may write (see the module doc). ``my_task``: the
    task writing (default: this start's, ``TAPFINGER_TASK_ID``; None outside an agent)."""

    _UNSET = object()

    def __init__(
        self,
        path: Union[str, "os.PathLike[str]"],
        my_epoch: Optional[int] = None,
        my_task: Any = _UNSET,
    ) -> None:
        self.path = os.fspath(path)
        self.epoch = epoch() if my_epoch is None else int(my_epoch)
        if not 0 <= self.epoch < 2**64:
            raise ValueError(f"an epoch is an unsigned 64-bit number, got {self.epoch}")
        self.task: Optional[int] = task_id() if my_task is FencedFile._UNSET else my_task

    def owner(self) -> Tuple[Optional[int], int]:
        """(task, highest epoch) recorded beside the file: (None, 0) if never written; the task
        is None where an older kit wrote a bare epoch."""
        try:
            with open(self.path + ".epoch", encoding="ascii") as f:
                text = f.read().strip()
        except FileNotFoundError:
            return None, 0
        if not text:
            return None, 0
        d = json.loads(text)
        if isinstance(d, int):
            return None, d
        return d.get("task"), int(d.get("epoch", 0))

    def write(self, data: Union[bytes, str]) -> None:
        """Write ``data`` (bytes or str) whole, unless another task owns the file (raise
        :class:`OtherTask`) or a later start of this one has written (raise
        :class:`StaleEpoch`); a refused write leaves the file as it is."""
        if isinstance(data, str):
            data = data.encode()
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            owner, highest = self.owner()
            if owner is not None and owner != self.task:
                raise OtherTask(self.task, owner, self.path)
            if self.epoch < highest:
                raise StaleEpoch(self.epoch, highest, self.path)
            tmp = self.path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            if self.epoch > highest or owner != self.task:
                with open(self.path + ".epoch.tmp", "w", encoding="ascii") as f:
                    json.dump({"task": self.task, "epoch": self.epoch}, f)
                os.replace(self.path + ".epoch.tmp", self.path + ".epoch")

    def read(self) -> Optional[bytes]:
        """The file's bytes (None if never written)."""
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
