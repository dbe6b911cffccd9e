"""EBCLR (Kim & Ye, "Energy-Based Contrastive Learning of Visual Representations", NeurIPS 2022)
as a solo-learn method: InfoNCE plus an energy term whose negatives come from multi-stage SGLD.

The objective (``solo_hyper.objectives.ebclr``) takes each step's chain starts from the
``MSGLDReplayBuffer`` callback (Sec. 3.3; full of augmented training images before the first step,
floor(B rho) positions restarting from q0: fresh augmented training images, independent of the
batch), whose memory is checked before any work: that callback is this method's glue.
"""

from __future__ import annotations

from typing import Any

import torch

from solo_hyper import objectives
from solo_hyper.callbacks import MSGLDReplayBuffer, check_buffer_fits
from solo_hyper.config import crop_entries, training_processes
from solo_hyper.solo import adapter


class EBCLR(adapter.ObjectiveMethod):
    """EBCLR: ``METHODS["ebclr"]``, built from solo-learn's own arguments.

    - arguments (``method_kwargs``): ``objectives.EBCLRArgs``, the space's, the projector's, the
      loss weights (lambda1, lambda2), SGLD's (sgld_steps, sgld_step_size, sgld_grad_clamp,
      sigma_min, sigma_max, noise_decay_K, sgld_eval_mode) and the replay buffer's (rho,
      proposal, buffer_size, buffer_device, buffer_seed, buffer_init_count);
    - head: Linear - activation - Linear onto the space (``objectives.EBCLR.head``);
    - loss: ``objectives.EBCLR.loss``, MSGLD from the step's chain starts, then InfoNCE of the two
      crops plus lambda2 times the generative term on the SGLD samples;
    - glue: the replay buffer (``method_callbacks``), the step's chain starts drawn from it
      (``step_inputs``) and its memory checked before any work (``check_config``).
    """

    METHOD = "ebclr"
    OBJECTIVE = objectives.EBCLR

    @staticmethod
    def check_config(cfg: dict) -> None:
        """The replay buffer of a config fits: the check the callback runs again where the
        buffer is built, here before any work.

        Args:
            cfg: a complete ebclr config (the crop size is the first crop entry's).

        Raises:
            ValueError: the buffer needs more than its share of the free memory (the message
                gives a buffer_size that fits).
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
        device = torch.device("cuda" if on_gpu else "cpu")
        check_buffer_fits(kw["buffer_size"], shape, device, copies)

    def method_callbacks(self) -> list:
        """The replay buffer that feeds the objective its chain starts (buffer size, rho,
        proposal, device, seed and initial count from the method's arguments)."""
        a = self.args
        buffer = MSGLDReplayBuffer(
            a.buffer_size, a.rho, a.proposal, a.buffer_device, a.buffer_seed, a.buffer_init_count
        )
        return [buffer]

    def step_inputs(self, batch: list[Any]) -> dict[str, Any]:
        """The step's chain starts, drawn from the replay buffer (the crops give their number)."""
        return {"chains": self.replay_buffer().draw(batch[1][0].detach())}

    def replay_buffer(self) -> MSGLDReplayBuffer:
        """The trainer's MSGLDReplayBuffer (``configure_callbacks`` attaches one).

        Raises:
            RuntimeError: no MSGLDReplayBuffer among the Trainer's callbacks.
        """
        callbacks = getattr(self._trainer, "callbacks", [])
        found = [c for c in callbacks if isinstance(c, MSGLDReplayBuffer)]
        if not found:
            raise RuntimeError(
                "ebclr takes its SGLD chain starts from the MSGLDReplayBuffer callback, which "
                "configure_callbacks attaches when a Trainer fits the model: train with "
                "Trainer.fit (or pass Trainer(callbacks=model.method_callbacks()))"
            )
        return found[0]
