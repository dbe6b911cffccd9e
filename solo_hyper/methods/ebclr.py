"""EBCLR as a solo-learn method: the objective of ``solo_hyper.objectives.ebclr`` (Kim & Ye,
NeurIPS 2022) behind the adapter's method base, fed its chain starts by the ``MSGLDReplayBuffer``
callback (Sec. 3.3; full of augmented training images before the first step, a fraction rho
restarting from q0: fresh augmented training images, independent of the batch).
"""

from __future__ import annotations

from typing import Any

import torch

from solo_hyper import objectives
from solo_hyper.callbacks import MSGLDReplayBuffer
from solo_hyper.config import crop_entries, training_processes
from solo_hyper.losses.infonce import free_memory_bytes
from solo_hyper.methods.space import EmbeddingSpaceMixin
from solo_hyper.sgld import ReplayBuffer
from solo_hyper.solo import adapter

MEMORY_SHARE = 0.5  # the buffer may take half the free memory: resuming holds a second copy


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


class EBCLR(EmbeddingSpaceMixin, adapter.MethodBase):
    """Energy-based contrastive learning; negatives from MSGLD chains kept by a replay buffer."""

    OBJECTIVE = objectives.EBCLR

    @staticmethod
    def check_config(cfg: dict) -> None:
        """Checks that need more than method_kwargs: the buffer's memory (full from the first step;
        the crop size is the first crop entry's)."""
        kw = cfg["method_kwargs"]
        if not cfg.get("augmentations"):
            return
        crop = int(crop_entries(cfg)[0]["crop_size"])
        channels = len(cfg["data"].get("mean") or (0, 0, 0))
        need = ReplayBuffer.bytes_needed(kw["buffer_size"], (channels, crop, crop))
        on_gpu = (
            kw["buffer_device"] == "device"
            and cfg.get("accelerator") in ("gpu", "cuda", "auto")
            and torch.cuda.is_available()
        )
        copies = 1 if on_gpu else training_processes(cfg.get("accelerator"), cfg.get("devices", 1))
        free = free_memory_bytes(torch.device("cuda" if on_gpu else "cpu"))
        if free is None:
            return
        if copies * need > MEMORY_SHARE * free:
            where = "GPU" if on_gpu else "host"
            fits = int(MEMORY_SHARE * free / copies / (need / kw["buffer_size"]))
            procs = f" x {copies} processes" if copies > 1 else ""
            hint = (
                " or keep it on the GPU with method_kwargs.buffer_device=device"
                if not on_gpu and torch.cuda.is_available()
                else ""
            )
            raise ValueError(
                f"method_kwargs.buffer_size={kw['buffer_size']} needs {_gib(need)}{procs} for "
                f"{channels}x{crop}x{crop} float32 chains, but only {_gib(free)} of {where} memory "
                f"is available and the buffer may take at most half of it (resuming from a "
                f"checkpoint holds a second copy): lower method_kwargs.buffer_size to at most "
                f"about {fits}{hint}"
            )

    def extra_callbacks(self) -> list:
        """The replay buffer that feeds this method its chain starts (attached under every
        launcher by the adapter's ``configure_callbacks``)."""
        a = self.args
        return [
            MSGLDReplayBuffer(
                a.buffer_size,
                a.rho,
                a.proposal,
                a.buffer_device,
                a.buffer_seed,
                a.buffer_init_count,
            )
        ]

    def replay_buffer(self) -> MSGLDReplayBuffer:
        """The trainer's MSGLDReplayBuffer (``configure_callbacks`` attaches one)."""
        trainer = self._trainer
        found = [c for c in getattr(trainer, "callbacks", []) if isinstance(c, MSGLDReplayBuffer)]
        if not found:
            raise RuntimeError(
                "ebclr takes its SGLD chain starts from the MSGLDReplayBuffer callback, which "
                "configure_callbacks attaches when a Trainer fits the model: train with "
                "Trainer.fit (or pass Trainer(callbacks=model.extra_callbacks()))"
            )
        return found[0]

    def step_inputs(self, batch: list[Any]) -> dict[str, Any]:
        """The step's chain starts, drawn from the replay buffer (the crops give their number)."""
        return {"chains": self.replay_buffer().draw(batch[1][0].detach())}


__all__ = ["EBCLR"]
