"""Fenced writes: storage that refuses a stale copy of the task.

Every start of a task carries an epoch (``TAPFINGER_EPOCH``) that no other start of it
carries; a copy left over from a network partition has a lower one. The rule: keep, per task,
the highest epoch that has written; accept a write whose epoch is greater than or equal to it
(and raise it), refuse one whose epoch is lower. :class:`FencedFile` keeps it for a file, with
the highest epoch beside it in ``<file>.epoch`` and an advisory lock (``fcntl.flock``) around
the check and the write, so writers on one machine, or on a file system whose locks every box
shares, never interleave.
"""

import fcntl
import os


class StaleEpoch(Exception):
    """A write refused: a later start of the task has written already."""

    def __init__(self, mine, highest, path):
        super().__init__(
            f"epoch {mine} is older than epoch {highest}, which has written {path}: "
            "a later start of this task runs elsewhere"
        )
        self.mine = mine
        self.highest = highest
        self.path = path


def epoch():
    """This start's epoch (an unsigned 64-bit number), or 0 outside an agent."""
    return int(os.environ.get("TAPFINGER_EPOCH", "0"))


class FencedFile:
    """A file only this task's latest start may write (see the module doc)."""

    def __init__(self, path, my_epoch=None):
        self.path = os.fspath(path)
        self.epoch = epoch() if my_epoch is None else int(my_epoch)
        if not 0 <= self.epoch < 2**64:
            raise ValueError(f"an epoch is an unsigned 64-bit number, got {self.epoch}")

    def _highest(self):
        try:
            with open(self.path + ".epoch", encoding="ascii") as f:
                return int(f.read().strip() or 0)
        except FileNotFoundError:
            return 0

    def write(self, data):
        """Write ``data`` (bytes or str) whole, unless a later epoch has written: then raise
        :class:`StaleEpoch` and leave the file as it is."""
        if isinstance(data, str):
            data = data.encode()
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            highest = self._highest()
            if self.epoch < highest:
                raise StaleEpoch(self.epoch, highest, self.path)
            tmp = self.path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            if self.epoch > highest:
                with open(self.path + ".epoch.tmp", "w", encoding="ascii") as f:
                    f.write(str(self.epoch))
                os.replace(self.path + ".epoch.tmp", self.path + ".epoch")

    def read(self):
        """The file's bytes (None if never written)."""
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
