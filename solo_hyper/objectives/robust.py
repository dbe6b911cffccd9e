"""RHCL and RoCL: instance-wise adversarial contrastive learning (HCL paper, section 3.4).

Each training step (i) attacks the first crop (the anchor) with l_inf PGD that maximises the
self-supervised contrastive loss of [x_adv; x+] against the batch's negatives (Eq. 9), with
the encoder and projector in eval mode so that BatchNorm statistics never see the attack, then
(ii) minimises Eq. 11, L(x, {x+, x_adv}, {x-}) + lambda * L(x_adv, x+, {x-}).

One implementation, any geometry: RHCL uses HCL's Poincare head and distance, RoCL the sphere's
cosine similarity (NT-Xent) with its temperature 0.5. Defaults follow RoCL's code: eps 8/255,
step 0.007, 7 steps, random start, regulariser weight 1/512: RoCL's 1/256 relative to its main
term, which sums two positives per anchor where this loss averages them (losses/robust.py).

The budget lives in [0, 1] pixel space: the objective takes un-normalised crops
(``pixel_space_crops``) and normalises them with its ``crop_stats`` after the attack.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn, no_grad

from solo_hyper.attacks import eval_mode, pgd_linf
from solo_hyper.losses.robust import adversarial_view_loss, robust_contrastive_loss
from solo_hyper.objectives.base import Batch, check_bool, is_int, is_number
from solo_hyper.objectives.contrastive import ContrastiveArgs, ContrastiveHead


@dataclass(frozen=True)
class RHCLArgs(ContrastiveArgs):
    """RHCL's arguments: HCL's head and the instance-wise attack's budget (RoCL's defaults).

    Attributes:
        eps: l_inf radius of the attack on [0, 1] pixels (8/255).
        alpha: PGD step size on [0, 1] pixels.
        steps: PGD steps per training step (0: no attack).
        random_start: start PGD from a uniform point of the eps-ball.
        lambda_adv: weight of the adversarial view's own term in Eq. 11 (1/512: RoCL's 1/256
            under this loss's normalisation, which averages the two positives).
        attack_temperature: tau of the attack's loss; None: the training temperature.
    """

    eps: float = 8 / 255
    alpha: float = 0.007
    steps: int = 7
    random_start: bool = True
    lambda_adv: float = 1 / 512
    attack_temperature: float | None = None

    def check(self) -> None:
        super().check()
        for key in ("eps", "alpha", "lambda_adv"):
            value = getattr(self, key)
            if not is_number(value) or not value >= 0:
                raise ValueError(f"{key} must be a number >= 0, got {value!r}")
            if math.isinf(value):
                raise ValueError(f"{key} must be finite, got {value!r}")
        if not is_int(self.steps) or self.steps < 0:
            raise ValueError(f"steps must be an integer >= 0, got {self.steps!r}")
        check_bool("random_start", self.random_start)
        tau = self.attack_temperature
        if tau is not None and (not is_number(tau) or tau <= 0):
            raise ValueError(f"attack_temperature must be > 0 or null, got {tau!r}")


@dataclass(frozen=True)
class RoCLArgs(RHCLArgs):
    """RoCL's arguments: RHCL's on the sphere (cosine similarity, NT-Xent) at temperature 0.5."""

    geometry: str = "sphere"
    temperature: float = 0.5


class RHCL(ContrastiveHead):
    """Robust hyperbolic contrastive learning (Eq. 11 with the Poincare distance)."""

    Args = RHCLArgs
    args: RHCLArgs
    required_crops = 2
    pixel_space_crops = True

    def instance_attack(
        self, net: nn.Module, anchor: Tensor, positive: Tensor, ids: Tensor
    ) -> Tensor:
        """Eq. 9: x_adv in the eps-ball (l_inf, [0, 1] pixels) around the anchor crop.

        anchor, positive: (B, C, H, W) crops in [0, 1]; ids: (B,) instance ids. The encoder and
        projector run in eval mode (BatchNorm running statistics untouched) and get their own
        training flags back afterwards; only the input is differentiated, so parameter
        ``.grad`` buffers are not written.
        """
        a, normalize = self.args, self.crop_stats.normalize
        temperature = a.attack_temperature if a.attack_temperature is not None else a.temperature
        with eval_mode(net.encoder, net.projector):
            with no_grad():
                z_pos = net.projector(net.encoder(normalize(positive)))

            def attack_loss(x: Tensor) -> Tensor:
                z_adv = net.projector(net.encoder(normalize(x)))
                return adversarial_view_loss(
                    z_adv, z_pos, ids, temperature, net.projector.space, chunk_size=a.chunk_size
                )

            return pgd_linf(attack_loss, anchor, a.eps, a.alpha, a.steps, a.random_start)

    def prepare(self, net: nn.Module, batch: Batch, **inputs: Any) -> tuple[Batch, dict[str, Any]]:
        """Attack the anchor; the step then runs on the clean crops, normalised, and ``loss``
        gets the normalised adversarial view."""
        indexes, (anchor, positive), targets = batch
        x_adv = self.instance_attack(net, anchor, positive, indexes)
        normalize = self.crop_stats.normalize
        clean = [normalize(anchor), normalize(positive)]
        return [indexes, clean, targets], {"adversarial_view": normalize(x_adv)}

    def loss(
        self, net: nn.Module, batch: Batch, feats: list[Tensor], z: list[Tensor],
        adversarial_view: Tensor | None = None, **extras: Any,
    ) -> tuple[Tensor, dict[str, Tensor]]:  # fmt: skip
        if adversarial_view is None:
            raise ValueError("RHCL's loss needs the adversarial view that prepare() makes")
        a = self.args
        z_adv = net.projector(net.encoder(adversarial_view))
        loss, first, regulariser = robust_contrastive_loss(
            z[0], z[1], z_adv, batch[0], a.temperature, a.lambda_adv, net.projector.space,
            chunk_size=a.chunk_size,
        )  # fmt: skip
        return loss, {"nce_loss": first.detach(), "adv_reg_loss": regulariser.detach()}


class RoCL(RHCL):
    """RoCL (Kim et al., NeurIPS 2020): the same objective with cosine similarity, tau 0.5."""

    Args = RoCLArgs
