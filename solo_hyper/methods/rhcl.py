"""RHCL and RoCL: instance-wise adversarial contrastive learning (HCL paper, section 3.4).

Each training step (i) attacks the first crop (the anchor) with l_inf PGD that maximises the
self-supervised contrastive loss of [x_adv; x+] against the batch's negatives (Eq. 9), with
the encoder and projector in eval mode so that BatchNorm statistics never see the attack, then
(ii) minimises Eq. 11, L(x, {x+, x_adv}, {x-}) + lambda * L(x_adv, x+, {x-}).

One implementation, any geometry: RHCL uses HCL's Poincare head and distance, RoCL the sphere's
cosine similarity (NT-Xent) with its temperature 0.5. Defaults follow RoCL's code: eps 8/255,
step 0.007, 7 steps, random start, regulariser weight 1/256 (see losses/robust.py for how the
weight compares with RoCL's normalisation).

The budget lives in [0, 1] pixel space: the adapter hands this method un-normalised crops
(``pixel_space_crops``): made so by the on-device augmentation, or de-normalised from solo's
CPU pipeline with the statistics that pipeline used; they are normalised here after the attack.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import torch

from solo_hyper.attacks import eval_mode, pgd_linf
from solo_hyper.losses.robust import adversarial_view_loss, robust_contrastive_loss
from solo_hyper.methods.hcl import CONTRASTIVE_ARGS, ContrastiveHeadMixin, check_contrastive_args
from solo_hyper.solo import adapter

ATTACK_ARGS: dict[str, Any] = {
    "eps": 8 / 255,
    "alpha": 0.007,
    "steps": 7,
    "random_start": True,
    "lambda_adv": 1 / 256,
    "attack_temperature": None,  # None: the training temperature
}


def check_attack_args(args: SimpleNamespace) -> None:
    """The attack's arguments, checked before any work starts."""
    for key in ("eps", "alpha", "lambda_adv"):
        value = getattr(args, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ValueError(f"method_kwargs.{key} must be a number >= 0, got {value!r}")
        if math.isinf(value):
            raise ValueError(f"method_kwargs.{key} must be finite, got {value!r}")
    if isinstance(args.steps, bool) or not isinstance(args.steps, int) or args.steps < 0:
        raise ValueError(f"method_kwargs.steps must be an integer >= 0, got {args.steps!r}")
    if not isinstance(args.random_start, bool):
        raise ValueError(
            f"method_kwargs.random_start must be true or false, got {args.random_start!r}"
        )
    tau = args.attack_temperature
    if tau is not None and (isinstance(tau, bool) or not isinstance(tau, (int, float)) or tau <= 0):
        raise ValueError(f"method_kwargs.attack_temperature must be > 0 or null, got {tau!r}")


class RHCL(ContrastiveHeadMixin, adapter.MethodBase):
    """Robust hyperbolic contrastive learning (Eq. 11 with the Poincare distance)."""

    ARGS = {**CONTRASTIVE_ARGS, **ATTACK_ARGS}
    pixel_space_crops = True
    required_crops = 2

    @staticmethod
    def check_args(args: SimpleNamespace) -> None:
        check_contrastive_args(args)
        check_attack_args(args)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """[0, 1] pixels -> the backbone's input (the crops' statistics)."""
        return self.normalize_pixels(x)

    def instance_attack(
        self, anchor: torch.Tensor, positive: torch.Tensor, ids: torch.Tensor
    ) -> torch.Tensor:
        """Eq. 9: x_adv in the eps-ball (l_inf, [0, 1] pixels) around the anchor crop.

        anchor, positive: (B, C, H, W) crops in [0, 1]; ids: (B,) instance ids. The encoder and
        projector run in eval mode (BatchNorm running statistics untouched) and get their own
        training flags back afterwards; only the input is differentiated, so parameter
        ``.grad`` buffers are not written.
        """
        a = self.args
        temperature = a.attack_temperature if a.attack_temperature is not None else a.temperature
        with eval_mode(self.encoder, self.projector):
            with torch.no_grad():
                z_pos = self.project(self.encoder(self.normalize(positive)))

            def attack_loss(x: torch.Tensor) -> torch.Tensor:
                z_adv = self.project(self.encoder(self.normalize(x)))
                return adversarial_view_loss(
                    z_adv, z_pos, ids, temperature, self.embedding_space, chunk_size=a.chunk_size
                )

            return pgd_linf(attack_loss, anchor, a.eps, a.alpha, a.steps, a.random_start)

    def prepare_step(self, batch: list[Any]) -> tuple[list[Any], dict[str, Any]]:
        """Attack the anchor; solo's step (online classifier, kNN) then runs on the clean crops,
        normalised, and ``method_loss`` gets the normalised adversarial view."""
        indexes, (anchor, positive), targets = batch
        x_adv = self.instance_attack(anchor, positive, indexes)
        clean = [self.normalize(anchor), self.normalize(positive)]
        return [indexes, clean, targets], {"adversarial_view": self.normalize(x_adv)}

    def method_loss(self, batch, out: dict, z: list[torch.Tensor], adversarial_view: torch.Tensor):
        indexes = batch[0]
        z_adv = self.project(self.encoder(adversarial_view))
        loss, first, regulariser = robust_contrastive_loss(
            z[0], z[1], z_adv, indexes, self.args.temperature, self.args.lambda_adv,
            self.embedding_space, chunk_size=self.args.chunk_size,
        )  # fmt: skip
        metrics = {"nce_loss": first.detach(), "adv_reg_loss": regulariser.detach()}
        return loss, metrics


class RoCL(RHCL):
    """RoCL (Kim et al., NeurIPS 2020): the same objective with cosine similarity, tau 0.5."""

    ARGS = {**RHCL.ARGS, "geometry": "sphere", "temperature": 0.5}
