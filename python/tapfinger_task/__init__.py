"""For code running as a tapfinger task: what the agent tells it and what it tells the agent.

A few lines in an existing training script::

    import tapfinger_task as kit

    kit.follow_threads()      # thread pools follow the CPU share: call it in the training
                              # thread, which applies a re-share at its next report
    state = load(kit.checkpoint_dir()) if kit.resuming() else fresh()
    kit.on_preempt(lambda: save(state, kit.checkpoint_dir()))
    for step in range(steps):
        ...
        kit.report(step / steps, loss=loss)

(``kit``, not ``tf``: that one is TensorFlow's.) Standard library only; PyTorch and
threadpoolctl are used where they are importable. The
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
