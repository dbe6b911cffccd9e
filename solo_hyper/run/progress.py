"""The training progress bar: training steps, the method's loss, no host read between logging steps.

Lightning's own bar counts validation batches into the epoch's total, shows the running mean of
the returned loss (the method's loss plus the online classifier's) and reads it back from the
device after every step. This one counts training steps only, shows the method's own loss (the
step's loss less solo-learn's ``train_class_loss``) and refreshes only on logging steps (every
``log_every_n_steps``), where Lightning reads the logged values anyway.
"""

from __future__ import annotations

from typing import Any

from solo_hyper.solo import adapter

pl = adapter.LIGHTNING
CLASSIFIER_LOSS = "train_class_loss"  # solo-learn's online classifier, added to every step's loss


def is_logging_step(trainer: Any) -> bool:
    """Whether the step that ends now is one Lightning logs (and so reads the device on); asked
    in ``on_train_batch_end``, before Lightning counts the step."""
    return bool(trainer._logger_connector.should_update_logs)


def method_loss(trainer: Any, outputs: Any) -> float | None:
    """The step's loss without the online classifier's (None: no loss returned). Host reads."""
    loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
    if loss is None:
        return None
    metrics = trainer.callback_metrics
    classifier = metrics.get(f"{CLASSIFIER_LOSS}_step", metrics.get(CLASSIFIER_LOSS))
    value = float(loss.detach())
    return value - float(classifier) if classifier is not None else value


class StepProgressBar(pl.callbacks.TQDMProgressBar):
    """Lightning's tqdm bar over training steps only, refreshed on logging steps (see the module
    docstring); validation keeps its own bar."""

    def __init__(self) -> None:
        super().__init__()
        self._shown: dict[str, Any] = {}

    @property
    def bar(self) -> Any:
        """The training bar (Lightning 2: ``train_progress_bar``, 1.9: ``main_progress_bar``)."""
        if hasattr(type(self), "train_progress_bar"):
            return self.train_progress_bar
        return self.main_progress_bar

    def on_train_epoch_start(self, trainer, *args: Any) -> None:
        total = self.total_train_batches
        if trainer.max_steps and trainer.max_steps > 0:
            total = min(total, trainer.max_steps - trainer.global_step)
        self.bar.reset(total if total != float("inf") else None)
        self.bar.initial = 0
        self.bar.set_description(f"Epoch {trainer.current_epoch}")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, *args: Any) -> None:
        steps = batch_idx + 1
        if not self.is_enabled or not (is_logging_step(trainer) or steps == self.bar.total):
            return
        loss = method_loss(trainer, outputs)
        if loss is not None:
            self._shown["loss"] = f"{loss:.3g}"
        self.bar.n = steps
        self.bar.set_postfix(self.get_metrics(trainer, pl_module))

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if not self.bar.disable:
            self.bar.set_postfix(self.get_metrics(trainer, pl_module))

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, *args) -> None:
        if self._should_update(batch_idx + 1, self.val_progress_bar.total):
            self.val_progress_bar.n = batch_idx + 1
            self.val_progress_bar.refresh()

    def get_metrics(self, trainer, pl_module) -> dict[str, Any]:
        """The method's loss as last shown and the values logged to the bar (no running loss)."""
        items = {**self._shown, **trainer.progress_bar_metrics}
        items.pop("v_num", None)
        return items
