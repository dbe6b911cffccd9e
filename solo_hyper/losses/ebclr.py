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

``distance="sq_euclidean"`` is the paper's D(a, b) = ||a/|a| - b/|b|||^2.  ``distance="poincare"``
(hyperbolic EBCLR) maps the normalised projections to the Poincare ball of curvature c with
expmap0 and uses the Poincare distance.  All energies are computed in float32 (autocast
disabled locally; float64 inputs stay float64) with max-subtracted logsumexp, so the loss is
finite for small temperatures and under bf16/fp16 autocast.
"""

from __future__ import annotations

import torch
from torch import Tensor

from solo_hyper.distributed import gather_with_grad, rank, world_size

__all__ = ["DISTANCES", "ebclr_distance_matrix", "ebclr_log_density", "ebclr_loss"]

DISTANCES = ("sq_euclidean", "poincare")

_NORM_EPS = 1e-12


def _check_distance(distance: str, c: float) -> None:
    """Validate the distance name and, for the Poincare ball, the curvature."""
    if distance not in DISTANCES:
        raise ValueError(f"distance must be one of {DISTANCES}, got {distance!r}")
    if distance == "poincare" and not c > 0:
        raise ValueError(f"curvature c must be > 0 for distance='poincare', got {c}")


def _check_temperature(temperature: float) -> None:
    """The temperature divides the energies: it must be strictly positive."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def _upcast(z: Tensor) -> Tensor:
    """Half-precision tensors go to float32; float32/float64 are kept (gradcheck uses float64)."""
    if not z.is_floating_point():
        raise TypeError(f"projections must be floating point, got {z.dtype}")
    return z.float() if z.dtype in (torch.float16, torch.bfloat16) else z


def _l2_normalize(z: Tensor) -> Tensor:
    """z / ||z|| (row-wise), with the norm clamped away from 0."""
    return z / z.norm(dim=-1, keepdim=True).clamp_min(_NORM_EPS)


def _to_ball(z: Tensor, c: float) -> Tensor:
    """Normalise, then expmap0 onto the Poincare ball of curvature c (and project for safety).

    A unit vector u maps to tanh(sqrt(c)) u / sqrt(c), i.e. every point sits at hyperbolic
    distance 2 from the origin, so pairwise distances lie in [0, 4] for any c.
    """
    from solo_hyper.geometry import expmap0, project

    return project(expmap0(_l2_normalize(z), c), c)


def _distance_matrix_f32(z: Tensor, z_ref: Tensor, distance: str, c: float) -> Tensor:
    """(N, M) distance matrix; inputs already upcast, autocast already disabled."""
    if distance == "sq_euclidean":
        a = _l2_normalize(z)
        b = _l2_normalize(z_ref)
        # ||a - b||^2 = ||a||^2 + ||b||^2 - 2 <a, b>: Gram form, no (N, M, D) intermediate;
        # clamp the fp rounding below 0 (no sqrt follows, so the clamp is harmless for grads).
        sq = a.pow(2).sum(-1, keepdim=True) + b.pow(2).sum(-1).unsqueeze(0) - 2.0 * (a @ b.T)
        return sq.clamp_min(0.0)
    from solo_hyper.geometry import poincare_distance_matrix

    return poincare_distance_matrix(_to_ball(z, c), _to_ball(z_ref, c), c)


def _check_2d(name: str, z: Tensor) -> None:
    """Projections are (batch, dim) matrices with at least one row."""
    if z.dim() != 2 or z.shape[0] < 1:
        raise ValueError(f"{name} must have shape (N >= 1, D), got {tuple(z.shape)}")


def ebclr_distance_matrix(
    z: Tensor, z_ref: Tensor, distance: str = "sq_euclidean", c: float = 0.1
) -> Tensor:
    """D(z_i, z_ref_j) as an (N, M) float32 (or float64) matrix, computed outside autocast."""
    _check_distance(distance, c)
    _check_2d("z", z)
    _check_2d("z_ref", z_ref)
    if z.shape[1] != z_ref.shape[1]:
        raise ValueError(f"dimension mismatch: z {tuple(z.shape)} vs z_ref {tuple(z_ref.shape)}")
    with torch.autocast(device_type=z.device.type, enabled=False):
        return _distance_matrix_f32(_upcast(z), _upcast(z_ref), distance, c)


def ebclr_log_density(
    z: Tensor,
    z_ref: Tensor,
    temperature: float,
    distance: str = "sq_euclidean",
    c: float = 0.1,
) -> Tensor:
    """Unnormalised marginal log-density log q(v_i) = logsumexp_j(-D(z_i, z_ref_j) / tau).

    z: (N, D) raw projections of the views whose density is evaluated; z_ref: (M, D) raw
    projections of the batch's second views (all M are used, nothing is masked).  Returns (N,),
    float32 (float64 for float64 inputs).  This is also the SGLD target (pass z_ref detached).
    """
    _check_temperature(temperature)
    d = ebclr_distance_matrix(z, z_ref, distance, c)
    return torch.logsumexp(-d / temperature, dim=1)  # max-subtracted internally


def _nt_xent(
    z1: Tensor, z2: Tensor, temperature: float, distance: str, c: float,
    columns: Tensor | None = None, offset: int = 0,
) -> Tensor:  # fmt: skip
    """NT-Xent over 2B views with logits -D/tau: mean_i [logsumexp_{j != i} l_ij - l_{i, p(i)}].

    Under DDP the anchors are the local views and ``columns`` the gathered [z1_all; z2_all]
    (local rows at ``offset`` in each half); without it the columns are the local views.
    """
    b = z1.shape[0]
    z = torch.cat([z1, z2], dim=0)
    if columns is None:
        columns, offset, world_b = z, 0, b
    else:
        world_b = columns.shape[0] // 2
    logits = -_distance_matrix_f32(z, columns, distance, c) / temperature
    rows = torch.arange(2 * b, device=z.device)
    local = torch.arange(b, device=z.device) + offset
    self_col = torch.cat([local, local + world_b])
    partner = torch.cat([local + world_b, local])
    pos = logits[rows, partner]
    # Self-pairs get -inf: excluded from the logsumexp and receive exactly zero gradient.
    masked = logits.index_put((rows, self_col), logits.new_tensor(float("-inf")))
    denom = torch.logsumexp(masked, dim=1)
    return (denom - pos).mean()


def ebclr_loss(
    z1: Tensor,
    z2: Tensor,
    z_sgld: Tensor,
    temperature: float = 0.1,
    lambda1: float = 1e-3,
    lambda2: float = 0.1,
    distance: str = "sq_euclidean",
    c: float = 0.1,
    gather: bool = True,
) -> tuple[Tensor, dict[str, Tensor]]:
    """EBCLR objective L = L_disc + lambda2 * L_gen (official defaults tau=0.1, l1=1e-3, l2=0.1).

    z1, z2: (B, D) raw projector outputs of the first and second views; z_sgld: (B', D) raw
    projections of the SGLD samples.  Returns (loss, parts) where parts holds detached scalars:
    "disc", "gen" (includes lambda1 * l2), "l2" (unweighted sum ||z1||^2 + sum ||z_sgld||^2),
    "logq_data" (mean log q(v1)) and "logq_sgld" (mean log q(x~)).  Gradients flow into all
    three inputs (z2 through both terms, as in the official code).

    Under DDP (``gather``) the local views are anchors against the gathered views of all ranks
    (negatives and log q references), and the lambda1 sum counts the local rows world_size
    times, so that the ranks' mean loss equals the single-process loss on the whole batch.
    """
    _check_temperature(temperature)
    _check_distance(distance, c)
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

    with torch.autocast(device_type=z1.device.type, enabled=False):
        z1f, z2f, zsf = _upcast(z1), _upcast(z2), _upcast(z_sgld)
        world = world_size() if gather else 1
        if world > 1:
            z1_all, z2_all = gather_with_grad(z1f), gather_with_grad(z2f)
            columns, offset = torch.cat([z1_all, z2_all]), rank() * z1.shape[0]
        else:
            z2_all, columns, offset = z2f, None, 0
        disc = _nt_xent(z1f, z2f, temperature, distance, c, columns, offset)
        # Marginal densities of data views and SGLD samples against the (non-detached) second views.
        logq = torch.logsumexp(
            -_distance_matrix_f32(torch.cat([z1f, zsf], 0), z2_all, distance, c) / temperature,
            dim=1,
        )
        logq_data = logq[: z1.shape[0]].mean()
        logq_sgld = logq[z1.shape[0] :].mean()
        l2 = world * (z1f.pow(2).sum() + zsf.pow(2).sum())
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
