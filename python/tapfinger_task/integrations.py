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
from types import FrameType
from typing import Any, Dict, Mapping, Optional

from .lifecycle import checkpoint_dir
from .report import checkpointed, report


def _metrics(values: Optional[Mapping[str, Any]]) -> Dict[str, float]:
    out: Dict[str, float] = {}
    for k, v in (values or {}).items():
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        name = k.replace("/", "_").replace("-", "_")
        if name.isidentifier() and f == f and abs(f) != float("inf"):
            out[name] = f
    return out


def lightning_callback(path: Optional[str] = None) -> Any:
    """A Lightning ``Callback`` (see the module doc); ``path``: where the preemption checkpoint
    goes (default ``checkpoint_dir()/preempted.ckpt``)."""
    try:
        from lightning.pytorch.callbacks import Callback  # type: ignore[import-not-found,import-untyped,unused-ignore]  # noqa: PLC0415
    except ImportError:
        from pytorch_lightning.callbacks import Callback  # type: ignore[import-not-found,import-untyped,unused-ignore]  # noqa: PLC0415

    class Tapfinger(Callback):  # type: ignore[misc,unused-ignore]
        def __init__(self) -> None:
            super().__init__()
            self.path = path or os.path.join(checkpoint_dir(), "preempted.ckpt")

        @staticmethod
        def _done(trainer: Any) -> float:
            total = getattr(trainer, "estimated_stepping_batches", None) or trainer.max_steps
            return float(min(trainer.global_step / total, 1.0)) if total and total > 0 else 0.0

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            def save(signum: int, frame: Optional[FrameType]) -> None:
                trainer.save_checkpoint(self.path)
                checkpointed(self._done(trainer))
                os._exit(143)

            signal.signal(signal.SIGTERM, save)

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            report(self._done(trainer), **_metrics(getattr(trainer, "callback_metrics", {})))

    return Tapfinger()


def hf_callback() -> Any:
    """A ``transformers.TrainerCallback`` (see the module doc)."""
    from transformers import TrainerCallback  # type: ignore[import-not-found,import-untyped,unused-ignore]  # noqa: PLC0415

    class Tapfinger(TrainerCallback):  # type: ignore[misc,unused-ignore]
        def __init__(self) -> None:
            self.stopping = False

        @staticmethod
        def _done(state: Any) -> float:
            return float(min(state.global_step / state.max_steps, 1.0)) if state.max_steps else 0.0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            def asked(signum: int, frame: Optional[FrameType]) -> None:
                self.stopping = True

            signal.signal(signal.SIGTERM, asked)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if self.stopping:
                control.should_save = True
                control.should_training_stop = True
            return control

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if self.stopping:
                checkpointed(self._done(state))
                os._exit(143)
            return control

        def on_log(
            self, args: Any, state: Any, control: Any, logs: Optional[Mapping[str, Any]] = None, **kwargs: Any
        ) -> Any:
            report(self._done(state), **_metrics(logs))
            return control

    return Tapfinger()
