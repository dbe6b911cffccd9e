"""The instance-wise adversarial contrastive objective of RoCL / RHCL (HCL paper, Eq. 9-11).

Both terms are :func:`contrastive_loss` (SupCon's mean-over-positives InfoNCE) on stacked views
with instance ids, so one code path serves every space: the Poincare ball (RHCL), the sphere's
cosine (RoCL). Pure torch.

Relation to RoCL's code: its main term sums the six positive pairs of the 3B batch and divides
by 3B, i.e. twice the mean-over-positives form used here; with the same ``lambda_adv`` the
regulariser would weigh twice as much here as in RoCL, so RoCL's 1/256 is 1/512 here (the
default of ``RHCLArgs``), and the whole loss is then exactly half RoCL's. RoCL also detaches one side of its similarity matrix; here gradients flow through
both sides, as in the paper's Eq. 11.
"""

from __future__ import annotations

import torch

from solo_hyper.geometry import Manifold
from solo_hyper.losses.contrastive import contrastive_loss

__all__ = ["adversarial_view_loss", "robust_contrastive_loss"]


def adversarial_view_loss(
    z_adv: torch.Tensor,
    z_pos: torch.Tensor,
    ids: torch.Tensor,
    temperature: float | torch.Tensor,
    space: Manifold,
    *,
    chunk_size: int | str | None = "auto",
) -> torch.Tensor:
    """L(x_adv, x+, {x-}): the InfoNCE of the 2B batch [x_adv; x+] with instance ids.

    The objective the instance-wise attack maximises (Eq. 9, RoCL's ``attack_to='other'``) and
    the regulariser of Eq. 11.

    Args:
        z_adv: (B, D) projections of the adversarial views, points of ``space``.
        z_pos: (B, D) projections of the positive views.
        ids: (B,) instance ids.
        temperature: tau of the logits.
        space: the space whose similarity makes the logits.
        chunk_size: "auto", None (fused) or K anchors per block.

    Returns:
        The scalar loss.
    """
    return contrastive_loss(
        torch.cat([z_adv, z_pos]), ids.repeat(2), temperature,
        space=space, chunk_size=chunk_size,
    )  # fmt: skip


def robust_contrastive_loss(
    z: torch.Tensor,
    z_pos: torch.Tensor,
    z_adv: torch.Tensor,
    ids: torch.Tensor,
    temperature: float | torch.Tensor,
    lambda_adv: float,
    space: Manifold,
    *,
    chunk_size: int | str | None = "auto",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eq. 11: L(x, {x+, x_adv}, {x-}) + lambda_adv * L(x_adv, x+, {x-}).

    The first term is the InfoNCE of the 3B batch [x; x+; x_adv] with instance ids: every view
    is an anchor whose two positives are the other two views of its image (x_adv is an extra
    positive of x and of x+).

    With x_adv = x (eps = 0) the regulariser is the HCL / SimCLR loss of the pair (Eq. 6) and
    the first term is, per anchor, -1/2 (s_p1 + s_p2) + log sum_{a != anchor} exp(s_a) over
    the 3B views, where x's duplicate is one of the positives (s = -d/tau = 0 for the Poincare
    distance, 1/tau for cosine).

    Args:
        z: (B, D) projections of the anchors' clean views, points of ``space``.
        z_pos: (B, D) projections of the positive views.
        z_adv: (B, D) projections of the adversarial views.
        ids: (B,) instance ids.
        temperature: tau of the logits.
        lambda_adv: weight of the regulariser.
        space: the space whose similarity makes the logits.
        chunk_size: "auto", None (fused) or K anchors per block.

    Returns:
        (total, first term, regulariser).
    """
    first = contrastive_loss(
        torch.cat([z, z_pos, z_adv]), ids.repeat(3), temperature, space=space,
        chunk_size=chunk_size,
    )  # fmt: skip
    regulariser = adversarial_view_loss(
        z_adv, z_pos, ids, temperature, space, chunk_size=chunk_size
    )
    return first + lambda_adv * regulariser, first, regulariser
