"""InfoNCE / SupCon loss whose logits are the embedding space's similarity over a temperature.

One function covers the four losses of the HCL paper: instance ids as targets give the
self-supervised loss (Eq. 4 / Eq. 6), class labels give the supervised loss (Eq. 7 / Eq. 8),
in SupCon's mean-over-positives form. The space decides the logit: -d(z_i, z_a)/tau on the
Poincare ball (HCL, Eq. 2) and on the hyperboloid, -||z_i - z_a||/tau in Euclidean space and
cos(z_i, z_a)/tau on the sphere, where it equals solo-learn 1.0.2's ``simclr_loss_func`` (with
or without ``extra_pos_mask``). The (N, M) part runs in ``losses.infonce``: fused (one pass,
O(N M) memory) or in blocks of ``chunk_size`` anchors (O(K M) memory).
"""

from __future__ import annotations

from typing import Literal

import torch

from solo_hyper.distributed import gather_with_grad, rank
from solo_hyper.geometry import Manifold, check_space, upcast_half
from solo_hyper.losses.infonce import (
    check_chunk_size,
    check_temperature,
    info_nce,
    info_nce_reference,
    resolve_chunk_size,
)

__all__ = ["contrastive_loss"]


def contrastive_loss(
    z: torch.Tensor,
    targets: torch.Tensor,
    temperature: float | torch.Tensor,
    space: Manifold,
    *,
    fused: bool = True,
    chunk_size: int | Literal["auto"] | None = "auto",
    gather_distributed: bool = True,
) -> torch.Tensor:
    """Mean over anchors i with at least one positive of

        -1/|P(i)| sum_{p in P(i)} log( exp(s_ip) / sum_{a != i} exp(s_ia) )        (Eq. 6-8)

    with s = ``space.similarity``(z_i, z_a) / temperature (see the module docstring) and
    P(i) = {p != i : targets_p = targets_i}. Anchors without positives are left out. The math
    runs in float32 even under autocast (float64 stays float64).

    Args:
        z: (M, P) all views stacked: points of ``space`` (the head's output; the sphere accepts
            any non-zero vectors and normalises them).
        targets: (M,) integer ids; rows sharing an id are positives of each other (instance
            ids for the self-supervised loss, class labels for the supervised one).
        temperature: tau (> 0).
        space: the embedding space (``geometry.make_space``; the head's own, a learnt
            curvature included).
        fused: False: the plain autograd reference on the whole logit matrix.
        chunk_size: "auto" (the default): the fastest path measured for the device and size
            (``infonce.resolve_chunk_size``); None: the fused path; an integer K: blocks of K
            anchors, the same values and gradients in O(K M) memory.
        gather_distributed: under torch.distributed, the local rows are the anchors and every
            rank's rows (gathered with gradients) are the candidates, so all ranks must pass
            the same M (the gather rule of every loss here); False: each rank's rows only.

    Returns:
        The scalar loss; 0, still attached to the graph, when no anchor has a positive.

    Raises:
        ValueError: z that is not a 2-D floating tensor, targets of another length or not
            integer ids, a temperature <= 0, or a bad chunk_size.
    """
    check_space(space)
    _validate(z, targets, temperature)
    check_chunk_size(chunk_size)

    with torch.autocast(device_type=z.device.type, enabled=False):
        z = upcast_half(z)
        gather = gather_with_grad if gather_distributed else (lambda t: t)
        z_all, targets_all = gather(z), gather(targets)
        offset = rank() * z.shape[0] if gather_distributed else 0
        form = space.similarity_form(z, z_all).scaled(1 / temperature)
        if not fused:
            return info_nce_reference(form, targets, targets_all, offset)
        chunk = resolve_chunk_size(chunk_size, z.shape[0], z_all.shape[0], z.device, z.dtype)
        return info_nce(form, targets, targets_all, offset, chunk)


def _validate(z: torch.Tensor, targets: torch.Tensor, temperature: float | torch.Tensor) -> None:
    check_temperature(temperature)
    if z.dim() != 2 or not z.is_floating_point():
        raise ValueError(f"z must be a 2-D floating tensor (M, D), got {z.dtype} {tuple(z.shape)}")
    if targets.dim() != 1 or targets.shape[0] != z.shape[0]:
        raise ValueError(
            f"targets must have shape ({z.shape[0]},) to match z, got {tuple(targets.shape)}"
        )
    if targets.is_floating_point() or targets.is_complex():
        raise ValueError(f"targets must be integer ids, got {targets.dtype}")
