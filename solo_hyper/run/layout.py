"""How the training step runs, not what it computes: memory layout, compilation, the device's
math modes.

``channels_last``: the method's weights in channels-last memory, so its convolutions run in that
layout (PyTorch runs a convolution channels-last when its weight is, converting the crops at the
first one); the same values within float rounding. Applied in the ``setup`` hook, before the
strategy moves the module to its device and DDP wraps it: DDP's gradient buckets then match the
gradients' strides (applied after the wrap, every bucket copy would convert layouts).
``compile``: the backbone compiled in place (``nn.Module.compile``: its parameter names, and so
checkpoints, unchanged). On CUDA, ``tf32`` lets float32 matmuls and convolutions use TF32 tensor
cores and ``cudnn_benchmark`` lets cuDNN time its convolution algorithms for the step's shapes
once (the same shapes every step). All four are operational config keys: a run's identity does
not include them. benchmarks/step_limit.py measures layout and compilation against the default;
docs/performance.md has the numbers.
"""

from __future__ import annotations

from typing import Any

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


def cuda_math_modes() -> dict[str, bool]:
    """The process-wide CUDA math switches this module sets (to restore them afterwards)."""
    return {
        "matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
    }


def set_cuda_math_modes(modes: dict[str, bool]) -> None:
    torch.backends.cuda.matmul.allow_tf32 = modes["matmul_tf32"]
    torch.backends.cudnn.allow_tf32 = modes["cudnn_tf32"]
    torch.backends.cudnn.benchmark = modes["cudnn_benchmark"]


class TrainingLayout(pl.Callback):
    """Puts the method in channels-last memory before the strategy wraps it, compiles its
    backbone when fitting starts, and sets the CUDA math modes for the run (restored at its end).

    Args:
        channels_last: the weights in channels-last memory.
        compile: the backbone compiled in place.
        tf32: TF32 matmuls and convolutions on CUDA.
        cudnn_benchmark: cuDNN's algorithm search on CUDA.
    """

    def __init__(self, channels_last: bool = False, compile: bool = False, tf32: bool = True,
                 cudnn_benchmark: bool = True) -> None:  # fmt: skip
        self.channels_last, self.compile = channels_last, compile
        self.tf32, self.cudnn_benchmark = tf32, cudnn_benchmark
        self._saved: dict[str, bool] | None = None

    def setup(self, trainer: Any, pl_module: nn.Module, stage: str | None = None) -> None:
        if self.channels_last:
            pl_module.to(memory_format=torch.channels_last)
        if trainer.strategy.root_device.type == "cuda" and self._saved is None:
            self._saved = cuda_math_modes()
            set_cuda_math_modes({"matmul_tf32": self.tf32, "cudnn_tf32": self.tf32,
                                 "cudnn_benchmark": self.cudnn_benchmark})  # fmt: skip

    def on_fit_start(self, trainer: Any, pl_module: nn.Module) -> None:
        backbone = backbone_of(pl_module)
        if self.compile and backbone is not None:
            backbone.compile()

    def teardown(self, trainer: Any, pl_module: nn.Module, stage: str | None = None) -> None:
        if self._saved is not None:
            set_cuda_math_modes(self._saved)
            self._saved = None


def training_layout(cfg: dict) -> TrainingLayout:
    """The run's ``TrainingLayout`` from its config's operational keys."""
    return TrainingLayout(bool(cfg["channels_last"]), bool(cfg["compile"]), bool(cfg["tf32"]),
                          bool(cfg["cudnn_benchmark"]))  # fmt: skip
