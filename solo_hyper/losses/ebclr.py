"""Energy-Based Contrastive Learning (EBCLR) loss, framework-free (torch only).

Kim & Ye, "Energy-Based Contrastive Learning of Visual Representations" (NeurIPS 2022).
With projections z = f(v) normalised to unit norm and a distance D, the joint model is
q(v, v') ∝ exp(-D(z, z') / tau).  The loss is

    L = L_disc + lambda2 * L_gen

* L_disc: NT-Xent over the 2B views with logits -D/tau (self-pairs removed, positive = the other
  view of the same image, mean over the 2B anchors) -- the "discriminative" term -log q(v'|v).
* L_gen: -mean_i log q(v1_i) + mean_k log q(x~_k) + lambda1 * (sum ||z1||^2 + sum ||z_sgld||^2),
  with the marginal log q(v) = logsumexp_j(-D(z_v, z2_j)/tau) taken against the batch's second
  views (paper eq. 17/19/20, constant log B dropped) and x~ the SGLD samples.  By the paper's
  Theorem 2 its gradient is the contrastive-divergence gradient of the marginal EBM; the
  L2 term on the RAW (unnormalised) projections is the official code's regulariser.

The space decides D (points arrive from the method's head, already on the space): on the
sphere it is the paper's D(a, b) = ||a/|a| - b/|b|||^2 = 2 - 2 cos (so raw projections may be
passed too: they are normalised); in Euclidean space ||a - b||^2; on the Poincare ball and the
hyperboloid (hyperbolic EBCLR) the geodesic distance. The L2 term takes the raw projections
(``regularised``; default: z1 and z_sgld themselves). All energies are computed in float32
(autocast disabled locally; float64 inputs stay float64) with max-subtracted logsumexp, so the
loss is finite for small temperatures and under bf16/fp16 autocast. Both terms run in
``losses.infonce``: the NT-Xent and log q fused or in blocks of ``chunk_size`` anchors ("auto",
the default: ``infonce.resolve_chunk_size``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from solo_hyper.distributed import gather_with_grad, rank, world_size
from solo_hyper.geometry import GramForm, Manifold, Sphere, check_space, upcast_half
from solo_hyper.losses.infonce import (
    check_chunk_size,
    check_temperature,
    info_nce,
    resolve_chunk_size,
    row_logsumexp,
)

__all__ = ["ebclr_distance_matrix", "ebclr_energy_form", "ebclr_log_density", "ebclr_loss"]


def ebclr_energy_form(space: Manifold, z: Tensor, z_ref: Tensor) -> GramForm:
    """D(z_i, z_ref_j) as a Gram form: the space's declared ``energy_form`` (the module
    docstring gives D per space).

    Args:
        space: the space of the projections.
        z: (N, P) projections.
        z_ref: (M, P) reference projections.

    Returns:
        The (N, M) energies as a ``GramForm``, not yet evaluated.
    """
    return space.energy_form(z, z_ref)


def _space_or_sphere(space: Manifold | None) -> Manifold:
    """The given space, or the unit sphere (the paper's D) when there is none."""
    return Sphere() if space is None else check_space(space)


def _upcast(z: Tensor) -> Tensor:
    """Floating projections in float32 or float64 (``upcast_half``); integer ones are an error."""
    if not z.is_floating_point():
        raise TypeError(f"projections must be floating point, got {z.dtype}")
    return upcast_half(z)


def _check_2d(name: str, z: Tensor) -> None:
    """Projections are (batch, dim) matrices with at least one row."""
    if z.dim() != 2 or z.shape[0] < 1:
        raise ValueError(f"{name} must have shape (N >= 1, D), got {tuple(z.shape)}")


def ebclr_distance_matrix(z: Tensor, z_ref: Tensor, space: Manifold | None = None) -> Tensor:
    """D(z_i, z_ref_j) as a matrix, computed outside autocast.

    Args:
        z: (N, P) projections, points of ``space``.
        z_ref: (M, P) reference projections.
        space: the space of D (None: the sphere).

    Returns:
        The (N, M) energies, float32 (float64 for float64 inputs).

    Raises:
        ValueError: inputs that are not (rows >= 1, P) matrices of one dimension P.
    """
    space = _space_or_sphere(space)
    _check_2d("z", z)
    _check_2d("z_ref", z_ref)
    if z.shape[1] != z_ref.shape[1]:
        raise ValueError(f"dimension mismatch: z {tuple(z.shape)} vs z_ref {tuple(z_ref.shape)}")
    with torch.autocast(device_type=z.device.type, enabled=False):
        return ebclr_energy_form(space, _upcast(z), _upcast(z_ref)).matrix()


def ebclr_log_density(
    z: Tensor,
    z_ref: Tensor,
    temperature: float,
    space: Manifold | None = None,
    *,
    chunk_size: int | str | None = "auto",
) -> Tensor:
    """Unnormalised marginal log-density log q(v_i) = logsumexp_j(-D(z_i, z_ref_j) / tau).

    This is also the SGLD target (pass z_ref detached). Local rows only (a density, not a
    loss: no gather).

    Args:
        z: (N, P) projections (points of ``space``) of the views whose density is evaluated.
        z_ref: (M, P) projections of the batch's second views (all M are used, nothing is
            masked).
        temperature: tau (> 0).
        space: the space of D (None: the sphere).
        chunk_size: "auto", None (fused) or K rows per block.

    Returns:
        (N,) log-densities, float32 (float64 for float64 inputs).
    """
    check_temperature(temperature)
    space = _space_or_sphere(space)
    _check_2d("z", z)
    _check_2d("z_ref", z_ref)
    with torch.autocast(device_type=z.device.type, enabled=False):
        z, z_ref = _upcast(z), _upcast(z_ref)
        chunk = resolve_chunk_size(chunk_size, z.shape[0], z_ref.shape[0], z.device, z.dtype)
        form = ebclr_energy_form(space, z, z_ref).scaled(-1 / temperature)
        return row_logsumexp(form, chunk)


def ebclr_loss(
    z1: Tensor,
    z2: Tensor,
    z_sgld: Tensor,
    temperature: float = 0.1,
    lambda1: float = 1e-3,
    lambda2: float = 0.1,
    space: Manifold | None = None,
    *,
    regularised: Sequence[Tensor] | None = None,
    chunk_size: int | str | None = "auto",
    gather_distributed: bool = True,
) -> tuple[Tensor, dict[str, Tensor]]:
    """EBCLR objective L = L_disc + lambda2 * L_gen (official defaults tau=0.1, l1=1e-3, l2=0.1).

    Gradients flow into all inputs (z2 through both terms, as in the official code). Under
    torch.distributed with ``gather_distributed`` the local views are anchors against the
    gathered views of all ranks (negatives and log q references), and the lambda1 sum counts the
    local rows world_size times, so that the ranks' mean loss equals the single-process loss on
    the whole batch.

    Args:
        z1: (B, P) projections of the first views, points of ``space``.
        z2: (B, P) projections of the second views.
        z_sgld: (B', P) projections of the SGLD samples.
        temperature: tau of the energies -D/tau (> 0).
        lambda1: weight of the L2 term (>= 0).
        lambda2: weight of the generative term L_gen (>= 0).
        space: the space of D (None: the sphere, the paper's D = ||a/|a| - b/|b|||^2).
        regularised: the tensors whose squared sum is the L2 term, i.e. the raw
            (pre-normalisation) projections of the first views and of the SGLD samples
            (None: z1 and z_sgld).
        chunk_size: the path of the log-sum-exps: "auto", None (fused) or K anchors per block
            (``infonce.resolve_chunk_size``).
        gather_distributed: under torch.distributed, gather the candidates from every rank (the
            rule of ``contrastive_loss`` too); False: each rank's views only.

    Returns:
        (loss, parts): parts holds detached scalars: "disc", "gen" (includes lambda1 * l2),
        "l2" (unweighted), "logq_data" (mean log q(v1)) and "logq_sgld" (mean log q(x~)).

    Raises:
        ValueError: inputs that are not 2-D, z1 and z2 of different shapes, z_sgld of another
            dimension, a temperature <= 0, a negative lambda, or a bad chunk_size.
    """
    check_temperature(temperature)
    space = _space_or_sphere(space)
    for name, z in (("z1", z1), ("z2", z2), ("z_sgld", z_sgld)):
        _check_2d(name, z)
    if z1.shape != z2.shape:
        raise ValueError(
            f"z1 and z2 must have the same shape, got {tuple(z1.shape)} and {tuple(z2.shape)}"
        )
    if z_sgld.shape[1] != z1.shape[1]:
        raise ValueError(f"z_sgld must have dim {z1.shape[1]}, got {tuple(z_sgld.shape)}")
    if lambda1 < 0 or lambda2 < 0:
        raise ValueError(f"lambda1 and lambda2 must be >= 0, got {lambda1}, {lambda2}")
    check_chunk_size(chunk_size)
    if regularised is None:
        regularised = (z1, z_sgld)

    with torch.autocast(device_type=z1.device.type, enabled=False):
        z1f, z2f, zsf = _upcast(z1), _upcast(z2), _upcast(z_sgld)
        b, dim = z1.shape
        world = world_size() if gather_distributed else 1
        views = torch.cat([z1f, z2f])
        ids = torch.arange(b, device=z1.device).repeat(2)
        if world > 1:
            # instance ids unique across ranks; columns rank-major [z1_r; z2_r] blocks
            ids = ids + rank() * b
            columns, ids_all = gather_with_grad(views), gather_with_grad(ids)
            z2_all = columns.view(world, 2, b, dim)[:, 1].reshape(world * b, dim)
            offset = rank() * 2 * b
        else:
            columns, ids_all, z2_all, offset = views, ids, z2f, 0
        chunk = resolve_chunk_size(chunk_size, 2 * b, columns.shape[0], z1f.device, z1f.dtype)
        # NT-Xent: each view's positive is the other view of its image (mean over 2B anchors)
        disc_form = ebclr_energy_form(space, views, columns).scaled(-1 / temperature)
        disc = info_nce(disc_form, ids, ids_all, offset, chunk)
        # Marginal densities of data views and SGLD samples against the (non-detached) 2nd views.
        logq_form = ebclr_energy_form(space, torch.cat([z1f, zsf]), z2_all)
        logq = row_logsumexp(logq_form.scaled(-1 / temperature), chunk)
        logq_data = logq[:b].mean()
        logq_sgld = logq[b:].mean()
        l2 = world * sum(_upcast(t).pow(2).sum() for t in regularised)
        gen = -logq_data + logq_sgld + lambda1 * l2
        loss = disc + lambda2 * gen
    parts = {
        "disc": disc.detach(),
        "gen": gen.detach(),
        "l2": l2.detach(),
        "logq_data": logq_data.detach(),
        "logq_sgld": logq_sgld.detach(),
    }
    return loss, parts
