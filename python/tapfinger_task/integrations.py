"""Callbacks for training frameworks, imported only when asked for (the kit needs neither):

- :func:`lightning_callback` for PyTorch Lightning (``lightning`` or ``pytorch_lightning``):
  progress and the logged loss after every training batch, and on SIGTERM a checkpoint written
  with ``trainer.save_checkpoint`` into :func:`~tapfinger_task.checkpoint_dir`, reported, then
  the process exits.
- :func:`hf_callback` for Hugging Face ``transformers.Trainer``: progress and the logged loss at
  every log, and on SIGTERM the trainer asked to save at the end of the step it is in (its own
  checkpoint format, under ``args.output_dir``) and to stop; once saved, the checkpoint is
  reported and the process exits. Resume with ``trainer.train(resume_from_checkpoint=True)``
  where :func:`~tapfinger_task.resuming` says so.
"""

import os
import signal

from .lifecycle import checkpoint_dir
from .report import checkpointed, report


def _metrics(values):
    out = {}
    for k, v in (values or {}).items():
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        name = k.replace("/", "_").replace("-", "_")
        if name.isidentifier() and f == f and abs(f) != float("inf"):
            out[name] = f
    return out


def lightning_callback(path=None):
    """A Lightning ``Callback`` (see the module doc); ``path``: where the preemption checkpoint
    goes (default ``checkpoint_dir()/preempted.ckpt``)."""
    try:
        from lightning.pytorch.callbacks import Callback  # noqa: PLC0415
    except ImportError:
        from pytorch_lightning.callbacks import Callback  # noqa: PLC0415

    class Tapfinger(Callback):
        def __init__(self):
            super().__init__()
            self.path = path or os.path.join(checkpoint_dir(), "preempted.ckpt")

        @staticmethod
        def _done(trainer):
            total = getattr(trainer, "estimated_stepping_batches", None) or trainer.max_steps
            return min(trainer.global_step / total, 1.0) if total and total > 0 else 0.0

        def on_train_start(self, trainer, pl_module):
            def save(signum, frame):
                trainer.save_checkpoint(self.path)
                checkpointed(self._done(trainer))
                os._exit(143)

            signal.signal(signal.SIGTERM, save)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            report(self._done(trainer), **_metrics(getattr(trainer, "callback_metrics", {})))

    return Tapfinger()


def hf_callback():
    """A ``transformers.TrainerCallback`` (see the module doc)."""
    from transformers import TrainerCallback  # noqa: PLC0415

    class Tapfinger(TrainerCallback):
        def __init__(self):
            self.stopping = False

        @staticmethod
        def _done(state):
            return min(state.global_step / state.max_steps, 1.0) if state.max_steps else 0.0

        def on_train_begin(self, args, state, control, **kwargs):
            def asked(signum, frame):
                self.stopping = True

            signal.signal(signal.SIGTERM, asked)

        def on_step_end(self, args, state, control, **kwargs):
            if self.stopping:
                control.should_save = True
                control.should_training_stop = True
            return control

        def on_save(self, args, state, control, **kwargs):
            if self.stopping:
                checkpointed(self._done(state))
                os._exit(143)
            return control

        def on_log(self, args, state, control, logs=None, **kwargs):
            report(self._done(state), **_metrics(logs))
            return control

    return Tapfinger()
