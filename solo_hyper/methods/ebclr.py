"""EBCLR's framework glue (Kim & Ye, NeurIPS 2022): the objective of ``solo_hyper.objectives.ebclr``
takes each step's chain starts from the ``MSGLDReplayBuffer`` callback (Sec. 3.3; full of
augmented training images before the first step, floor(B rho) positions restarting from q0: fresh
augmented training images, independent of the batch), whose memory is checked before any work.
"""

from __future__ import annotations

from typing import Any

import torch

from solo_hyper import objectives
from solo_hyper.callbacks import MSGLDReplayBuffer, check_buffer_fits
from solo_hyper.config import crop_entries, training_processes
from solo_hyper.solo.common import PluginMethod


def check_buffer_memory(cfg: dict) -> None:
    """The replay buffer of a config fits: the check the callback runs again where the buffer
    is built, here before any work.

    Args:
        cfg: a complete ebclr config (the crop size is the first crop entry's).

    Raises:
        ValueError: the buffer needs more than its share of the free memory (the message gives
            a buffer_size that fits).
    """
    kw = cfg["method_kwargs"]
    if not cfg.get("augmentations"):
        return
    crop = int(crop_entries(cfg)[0]["crop_size"])
    shape = (len(cfg["data"].get("mean") or (0, 0, 0)), crop, crop)
    on_gpu = (
        kw["buffer_device"] == "device"
        and cfg.get("accelerator") in ("gpu", "cuda", "auto")
        and torch.cuda.is_available()
    )
    copies = 1 if on_gpu else training_processes(cfg.get("accelerator"), cfg.get("devices", 1))
    check_buffer_fits(kw["buffer_size"], shape, torch.device("cuda" if on_gpu else "cpu"), copies)


def replay_buffer_callbacks(args: objectives.EBCLRArgs) -> list:
    """The replay buffer that feeds the objective its chain starts.

    Args:
        args: EBCLR's arguments (buffer size, rho, proposal, device, seed, initial count).

    Returns:
        One ``MSGLDReplayBuffer``, in a list (a method's ``configure_callbacks``).
    """
    return [
        MSGLDReplayBuffer(
            args.buffer_size, args.rho, args.proposal, args.buffer_device, args.buffer_seed,
            args.buffer_init_count,
        )
    ]  # fmt: skip


def replay_buffer(module: Any) -> MSGLDReplayBuffer:
    """The trainer's MSGLDReplayBuffer (the method's ``configure_callbacks`` attaches one).

    Args:
        module: the ebclr LightningModule, attached to a Trainer.

    Raises:
        RuntimeError: no MSGLDReplayBuffer among the Trainer's callbacks.
    """
    callbacks = getattr(module._trainer, "callbacks", [])
    found = [c for c in callbacks if isinstance(c, MSGLDReplayBuffer)]
    if not found:
        raise RuntimeError(
            "ebclr takes its SGLD chain starts from the MSGLDReplayBuffer callback, which "
            "configure_callbacks attaches when a Trainer fits the model: train with "
            "Trainer.fit (or pass Trainer(callbacks=model.method_callbacks()))"
        )
    return found[0]


def chain_starts(module: Any, batch: list[Any]) -> dict[str, Any]:
    """The step's chain starts, drawn from the replay buffer (the crops give their number)."""
    return {"chains": replay_buffer(module).draw(batch[1][0].detach())}


EBCLR_GLUE = PluginMethod(
    objectives.EBCLR,
    check_config=check_buffer_memory,
    callbacks=replay_buffer_callbacks,
    step_inputs=chain_starts,
)

__all__ = ["EBCLR_GLUE", "check_buffer_memory", "replay_buffer", "replay_buffer_callbacks"]
