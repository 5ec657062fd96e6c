"""For code running as a tapfinger task: what the agent tells it and what it tells the agent.

A few lines in an existing training script::

    import tapfinger_task as tf

    tf.follow_threads()                      # thread pools follow the CPU share (from here,
                                             # at each report: call it in the training thread)
    state = load(tf.checkpoint_dir()) if tf.resuming() else fresh()
    tf.on_preempt(lambda: save(state, tf.checkpoint_dir()))
    for step in range(steps):
        ...
        tf.report(step / steps, loss=loss)

Standard library only; PyTorch and threadpoolctl are used where they are importable. The
agent's HTTP API from Python: :mod:`tapfinger_task.client`.
"""

from .fence import FenceError, FencedFile, OtherTask, StaleEpoch, epoch
from .gang import Gang, gang
from .lifecycle import checkpoint_dir, on_preempt, resuming, task_id
from .report import checkpointed, done, report
from .share import Share, apply_share, cpus, follow_threads, gpus, memory, share, threads, watch

__all__ = [
    "FenceError",
    "FencedFile",
    "Gang",
    "OtherTask",
    "Share",
    "apply_share",
    "StaleEpoch",
    "checkpoint_dir",
    "checkpointed",
    "cpus",
    "done",
    "epoch",
    "follow_threads",
    "gang",
    "gpus",
    "memory",
    "on_preempt",
    "report",
    "resuming",
    "share",
    "task_id",
    "threads",
    "watch",
]
