"""Pairwise quantities from one Gram product: s_ij = scale * phi(<a_i, b_j>).

Every distance or similarity a contrastive loss needs is an elementwise function phi of one
matrix product of augmented rows a (N, K), b (M, K) (see each manifold's ``distance_form``), so
pairwise work costs one (N, M) matmul plus a few elementwise passes and never an (N, M, D)
tensor. A kernel gives phi in two forms: out of place for autograd (reference paths, evaluation)
and in place with its derivative for the hand-written backward of the fused and chunked losses.

Kernels (phi >= 0 for distances, identity for similarities):
- ``LINEAR``: phi(P) = P (cosine similarity of unit rows, squared chordal distances);
- ``SQRT``: phi(P) = sqrt(max(P, floor)) (Euclidean distance from P = ||x - y||^2);
- ``ASINH_SQRT``: phi(q) = asinh(sqrt(max(q, floor))), the hyperbolic distance in units of
  2/sqrt(c) from q = (cosh(sqrt(c) d) - 1) / 2 (Poincare ball and hyperboloid alike).
The floor eps(dtype)^2 keeps sqrt'(0) = inf away: derivatives are 0 where P was floored, so
identical points get a zero (finite) gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["ASINH_SQRT", "GramForm", "Kernel", "LINEAR", "SQRT", "sq_floor"]


def sq_floor(dtype: torch.dtype) -> float:
    """Floor for the argument of a square root: eps(dtype)^2 (below rounding of any distance).

    Args:
        dtype: the argument's dtype.
    """
    return torch.finfo(dtype).eps ** 2


class Kernel:
    """phi of a Gram product; ``name`` identifies it in docs and reprs."""

    name = "kernel"

    def __call__(self, p: torch.Tensor) -> torch.Tensor:
        """phi(P), out of place and differentiable by autograd."""
        raise NotImplementedError

    def apply_(self, p: torch.Tensor, need_derivative: bool):
        """(phi(P), phi'(P) or None for phi' = 1), overwriting P's buffer where it can."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.name


class _Linear(Kernel):
    name = "linear"

    def __call__(self, p: torch.Tensor) -> torch.Tensor:
        return p

    def apply_(self, p: torch.Tensor, need_derivative: bool):
        return p, None


class _Sqrt(Kernel):
    name = "sqrt"

    def __call__(self, p: torch.Tensor) -> torch.Tensor:
        return p.clamp_min(sq_floor(p.dtype)).sqrt()

    def apply_(self, p: torch.Tensor, need_derivative: bool):
        floor = sq_floor(p.dtype)
        p.clamp_min_(floor)
        phi = p.sqrt()
        dphi = None
        if need_derivative:
            # d sqrt(P)/dP = 1 / (2 sqrt P); threshold sends floored entries to inf -> 0
            dphi = torch.threshold_(p, floor, float("inf")).rsqrt_().mul_(0.5)
        return phi, dphi


class _AsinhSqrt(Kernel):
    name = "asinh_sqrt"

    def __call__(self, q: torch.Tensor) -> torch.Tensor:
        q = q.clamp_min(sq_floor(q.dtype))
        # asinh(sqrt q) = log1p(r + q / (1 + sqrt(1 + q))), r = sqrt q: exact for small q, and
        # vectorised on CPU (torch.asinh is not, ~50x a log)
        return torch.log1p(q.sqrt() + q / (1 + (1 + q).sqrt()))

    def apply_(self, q: torch.Tensor, need_derivative: bool):
        floor = sq_floor(q.dtype)
        q.clamp_min_(floor)
        # asinh(r) = log(r + sqrt(1 + r^2)): for small r this loses relative (not absolute)
        # accuracy, far below the rounding of the Gram product
        phi = q.sqrt()
        phi.add_(q.add(1).sqrt_()).log_()
        dphi = None
        if need_derivative:
            # d asinh(sqrt q)/dq = 1 / (2 sqrt(q + q^2)), written over q; 0 where q was floored
            dphi = torch.threshold_(q, floor, float("inf"))
            dphi.addcmul_(dphi, dphi).rsqrt_().mul_(0.5)
        return phi, dphi


LINEAR: Kernel = _Linear()
SQRT: Kernel = _Sqrt()
ASINH_SQRT: Kernel = _AsinhSqrt()


@dataclass(frozen=True)
class GramForm:
    """s_ij = scale * kernel(<a_i, b_j>) for rows a (N, K), b (M, K).

    Attributes:
        a: the (N, K) row factors.
        b: the (M, K) column factors.
        kernel: phi, applied to each Gram entry.
        scale: a python float or a 0-dim tensor (a learnable curvature reaches it, and a, b,
            through autograd: only their O((N + M) K) construction is differentiated that way).
    """

    a: torch.Tensor
    b: torch.Tensor
    kernel: Kernel
    scale: float | torch.Tensor

    def matrix(self) -> torch.Tensor:
        """The (N, M) matrix by plain autograd (reference and evaluation path)."""
        return self.scale * self.kernel(self.a @ self.b.T)

    def scaled(self, factor: float | torch.Tensor) -> GramForm:
        """The same form with scale multiplied by ``factor`` (e.g. -1/temperature)."""
        return GramForm(self.a, self.b, self.kernel, self.scale * factor)
