"""How the training step runs, not what it computes: channels-last memory and ``torch.compile``.

``channels_last``: the method's weights in channels-last memory, so its convolutions run in that
layout (PyTorch runs a convolution channels-last when its weight is, converting the crops at the
first one); the same values within float rounding. ``compile``: the backbone compiled in place
(``nn.Module.compile``: its parameter names, and so checkpoints, unchanged). Both are operational
config keys (``channels_last``, ``compile``): a run's identity does not include them.
benchmarks/step_limit.py measures both against the default; docs/performance.md has the numbers.
"""

from __future__ import annotations

import torch
from torch import nn

from solo_hyper.solo import adapter

pl = adapter.LIGHTNING


def backbone_of(module: nn.Module) -> nn.Module | None:
    """solo-learn 1.0.2's ``encoder``, solo main's ``backbone``."""
    for name in ("backbone", "encoder"):
        found = getattr(module, name, None)
        if isinstance(found, nn.Module):
            return found
    return None


class TrainingLayout(pl.Callback):
    """Puts the method in channels-last memory and/or compiles its backbone when fitting starts."""

    def __init__(self, channels_last: bool = False, compile: bool = False) -> None:
        self.channels_last, self.compile = channels_last, compile

    def on_fit_start(self, trainer, pl_module) -> None:
        if self.channels_last:
            pl_module.to(memory_format=torch.channels_last)
        backbone = backbone_of(pl_module)
        if self.compile and backbone is not None:
            backbone.compile()
