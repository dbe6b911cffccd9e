"""Embedding spaces as objects: the curvature, the dtype margins and the pairwise distance travel
together (geoopt's idea), behind one interface that heads, losses and evaluation share.

    space = make_space("lorentz", curvature=0.1)
    z = space.expmap0(v)                  # (N, D) tangent vectors at the origin -> points
    d = space.distance_matrix(z, z)       # (N, M), from one Gram product, never (N, M, D)
    space.similarity_form(z, z)           # the contrastive logit numerator, for the losses
    space_from_dict(space.to_dict())      # what checkpoints store

Spaces are ``nn.Module``s so that a learnable curvature (a softplus parameter, as HCL's head
always had) is trained, saved and moved with the model. ``curvature`` is c > 0 of the hyperbolic
spaces of curvature -c; the unit sphere has curvature 1 and Euclidean space 0.

Tangent convention: ``expmap0`` of both hyperbolic spaces takes the Poincare ball's tangent
vector v at the origin (coordinates of the ball's chart, Riemannian norm 2||v||: the conformal
factor at the origin is 2, HCL's Eq. 3). So ``make_space("lorentz", c).expmap0(v)`` is the
isometric image x_s / (1 + sqrt(c) x_0) of ``make_space("poincare", c).expmap0(v)``: the same
projector outputs give the same distances and the same loss in either model. (The one
difference is numerical: the ball keeps a margin from its boundary, ``ball_margin``; the
hyperboloid has none, so for sqrt(c) ||v|| beyond ~3 in float32 the ball's points stop moving
outward and the hyperboloid's do not.)
"""

from __future__ import annotations

import difflib
import math

import torch
import torch.nn.functional as F
from torch import nn

from solo_hyper.geometry.gram import LINEAR, SQRT, GramForm
from solo_hyper.geometry.lorentz import (
    lorentz_distance_form,
    lorentz_expmap0,
    lorentz_logmap0,
    lorentz_project,
    max_radius,
)
from solo_hyper.geometry.poincare import (
    Curvature,
    ball_margin,
    check_curvature,
    expmap0,
    hyperbolic_float32,
    logmap0,
    poincare_distance_form,
    project,
)

__all__ = [
    "CURVED",
    "Euclidean",
    "GEOMETRIES",
    "Lorentz",
    "Manifold",
    "PoincareBall",
    "Sphere",
    "check_geometry",
    "check_space",
    "make_space",
    "space_from_dict",
]


class Manifold(nn.Module):
    """An embedding space: maps from the tangent space at the origin, pairwise distances and
    the contrastive similarity, with its curvature (fixed, or learnable through a softplus).

    Args:
        curvature: c > 0 of a hyperbolic space (curvature -c): a number, or a tensor shared
            with another module; the flat and spherical spaces take none.
        learnable: train c as a softplus parameter, starting from ``curvature``.

    Raises:
        ValueError: a hyperbolic space without a curvature > 0.
    """

    name = "manifold"
    curved = False  # whether ``curvature`` is a free parameter (the hyperbolic models)

    def __init__(self, curvature: Curvature | None = None, learnable: bool = False) -> None:
        super().__init__()
        self.learnable = bool(learnable)
        self._fixed: Curvature | None = None
        if not self.curved:
            return
        check_curvature(curvature)
        if not learnable:
            # a python float (exact in float64 maths, no device sync), or a tensor owned
            # elsewhere (e.g. another module's learnable curvature, shared)
            self._fixed = curvature if isinstance(curvature, torch.Tensor) else float(curvature)
            return
        c = float(curvature)
        # inverse softplus, so that softplus(raw) == c at initialisation
        self.raw_curvature = nn.Parameter(
            torch.tensor(c + math.log(-math.expm1(-c)), dtype=torch.float32)
        )

    @property
    def curvature(self) -> Curvature:
        """c > 0 for hyperbolic spaces (a 0-dim tensor when learnt); a fixed float otherwise."""
        if self._fixed is not None:
            return self._fixed
        return F.softplus(self.raw_curvature)

    def curvature_for(self, x: torch.Tensor) -> Curvature:
        """The curvature in x's dtype (a float32 parameter must not round float64 maths)."""
        c = self.curvature
        return c.to(x.dtype) if isinstance(c, torch.Tensor) else c

    # ------------------------------------------------------------------ maps
    def expmap0(self, v: torch.Tensor) -> torch.Tensor:
        """Tangent vectors at the origin (N, D) -> points (the head's last step)."""
        raise NotImplementedError

    def logmap0(self, x: torch.Tensor) -> torch.Tensor:
        """Points -> tangent vectors at the origin (N, D), inverse of :meth:`expmap0`."""
        raise NotImplementedError

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """Points that rounding moved off the space, back onto it (identity on the space)."""
        return x

    def point_dim(self, tangent_dim: int) -> int:
        """Coordinates of a point whose tangent vectors have ``tangent_dim`` components."""
        return tangent_dim

    @torch.no_grad()
    def check_point(self, z: torch.Tensor, name: str = "z") -> None:
        """ValueError unless ``z`` is (N, P) finite points of this space (geoopt's
        ``_check_point_on_manifold``); each space adds what lying in it means."""
        if not isinstance(z, torch.Tensor) or z.dim() != 2:
            shape = tuple(z.shape) if isinstance(z, torch.Tensor) else type(z).__name__
            raise ValueError(f"{name} must be a (N, P) tensor of points, got {shape}")
        if not bool(torch.isfinite(z).all()):
            what = "NaN" if bool(torch.isnan(z).any()) else "Inf"
            raise ValueError(f"{name} holds {what} values ({int((~torch.isfinite(z)).sum())} of "
                             f"{z.numel()}): the inputs or the network gave non-finite points")  # fmt: skip

    # ------------------------------------------------------------------ pairwise
    def distance_form(self, x: torch.Tensor, y: torch.Tensor) -> GramForm:
        """The geodesic distance as scale * kernel(a @ b.T)."""
        raise NotImplementedError

    def similarity_form(self, x: torch.Tensor, y: torch.Tensor) -> GramForm:
        """The contrastive score whose 1/temperature multiple is a logit: -distance here."""
        return self.distance_form(x, y).scaled(-1.0)

    def energy_form(self, x: torch.Tensor, y: torch.Tensor) -> GramForm:
        """The energy D(x, y) of an energy-based model on the space (EBCLR's -log q(x, y) up to
        tau): the geodesic distance here; the flat spaces declare the squared one."""
        return self.distance_form(x, y)

    def distance_matrix(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """All pairwise geodesic distances (N, M) of x (N, P), y (M, P), in float32 or float64."""
        _check_pairs(x, y)
        return _upcast_call(lambda a, b: self.distance_form(a, b).matrix(), x, y)

    def similarity_matrix(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The (N, M) contrastive scores by plain autograd (the loss's reference path)."""
        _check_pairs(x, y)
        return _upcast_call(lambda a, b: self.similarity_form(a, b).matrix(), x, y)

    # ------------------------------------------------------------------ description
    def to_dict(self) -> dict:
        """A plain, YAML/JSON-serialisable description (``space_from_dict`` rebuilds it)."""
        out: dict = {"name": self.name}
        if self.curved:
            out["curvature"] = float(self.curvature)
            out["learnable_curvature"] = self.learnable
        return out

    def extra_repr(self) -> str:
        if self.curved:
            return f"curvature={float(self.curvature):.4g}, learnable={self.learnable}"
        return ""


def _check_pairs(x: torch.Tensor, y: torch.Tensor) -> None:
    if x.dim() != 2 or y.dim() != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(
            f"expected x (N, P) and y (M, P), got {tuple(x.shape)} and {tuple(y.shape)}"
        )


@hyperbolic_float32
def _upcast_call(fn, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return fn(x, y)


class Euclidean(Manifold):
    """R^D: maps are the identity, the distance ||x - y||."""

    name = "euclidean"

    @property
    def curvature(self) -> float:
        return 0.0

    def expmap0(self, v: torch.Tensor) -> torch.Tensor:
        return v

    def logmap0(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def distance_form(self, x: torch.Tensor, y: torch.Tensor) -> GramForm:
        # ||x - y||^2 = a . b with a = (x, |x|^2, 1), b = (-2y, 1, |y|^2)
        x_sq = (x * x).sum(1, keepdim=True)
        y_sq = (y * y).sum(1, keepdim=True)
        a = torch.cat([x, x_sq, torch.ones_like(x_sq)], dim=1)
        b = torch.cat([-2 * y, torch.ones_like(y_sq), y_sq], dim=1)
        return GramForm(a, b, SQRT, 1.0)

    def energy_form(self, x: torch.Tensor, y: torch.Tensor) -> GramForm:
        """||x - y||^2: the distance form without its square root."""
        form = self.distance_form(x, y)
        return GramForm(form.a, form.b, LINEAR, form.scale)


class Sphere(Manifold):
    """The unit sphere S^{D-1} in R^D: the space of cosine-similarity losses (SimCLR, SupCon).

    The sphere has no origin; ``expmap0`` is the retraction v -> v/||v|| (HCL's normalisation)
    and ``logmap0`` the identity on unit vectors. Its contrastive score is the cosine (of any
    non-zero vectors: inputs are normalised, as SimCLR's loss does), its distance the angle.
    """

    name = "sphere"

    @property
    def curvature(self) -> float:
        return 1.0

    def expmap0(self, v: torch.Tensor) -> torch.Tensor:
        return F.normalize(v, dim=-1)

    def logmap0(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def project(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(x, dim=-1)

    def similarity_form(self, x: torch.Tensor, y: torch.Tensor) -> GramForm:
        return GramForm(F.normalize(x, dim=1), F.normalize(y, dim=1), LINEAR, 1.0)

    def energy_form(self, x: torch.Tensor, y: torch.Tensor) -> GramForm:
        """The squared chordal distance ||x/|x| - y/|y|||^2 = 2 - 2 cos, as a = (x^, 1),
        b = (-2 y^, 2) (EBCLR's D; raw projections are normalised, as the paper does)."""
        a, b = F.normalize(x, dim=1), F.normalize(y, dim=1)
        a = torch.cat([a, torch.ones_like(a[:, :1])], dim=1)
        b = torch.cat([-2 * b, torch.full_like(b[:, :1], 2.0)], dim=1)
        return GramForm(a, b, LINEAR, 1.0)

    def distance_matrix(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The angle arccos(cos) (the geodesic of the unit sphere), in [0, pi]."""
        cos = self.similarity_matrix(x, y)
        # arccos' is infinite at +-1: keep the argument inside by one ulp
        one = 1 - torch.finfo(cos.dtype).eps
        return torch.arccos(cos.clamp(-one, one))


class PoincareBall(Manifold):
    """The Poincare ball of curvature -c (radius 1/sqrt c), points (N, D) (HCL, Sec. 3.1).

    ``expmap0`` ends with ``project`` (a relative margin ``ball_margin(dtype)`` from the boundary,
    geoopt's values), so points always satisfy c ||x||^2 < 1.
    """

    name = "poincare"
    curved = True

    def expmap0(self, v: torch.Tensor) -> torch.Tensor:
        c = self.curvature_for(v)
        return project(expmap0(v, c), c)

    def logmap0(self, x: torch.Tensor) -> torch.Tensor:
        return logmap0(x, self.curvature_for(x))

    def project(self, x: torch.Tensor) -> torch.Tensor:
        return project(x, self.curvature_for(x))

    def boundary_margin(self, dtype: torch.dtype) -> float:
        """The relative margin ``project`` keeps from the boundary in ``dtype``."""
        return ball_margin(dtype)

    def distance_form(self, x: torch.Tensor, y: torch.Tensor) -> GramForm:
        """``poincare_distance_form``: the one Poincare distance, in training and evaluation."""
        return poincare_distance_form(x, y, self.curvature_for(x))

    @torch.no_grad()
    def check_point(self, z: torch.Tensor, name: str = "z") -> None:
        """Inside the ball of this curvature: norm < 1/sqrt c (to a relative 1e-6)."""
        super().check_point(z, name)
        if z.shape[0] == 0:
            return
        c = float(self.curvature)
        radius, largest = c**-0.5, float(z.detach().double().norm(dim=1).max())
        if not largest < radius * (1 + 1e-6):
            raise ValueError(
                f"{name} is not in the Poincare ball of curvature -{c:.4g}: a point of norm "
                f"{largest:.4g} >= its radius 1/sqrt(c) = {radius:.4g} (Lorentz points (N, D+1), "
                f"or a ball of another curvature?); {_MAP_HINT}"
            )


class Lorentz(Manifold):
    """The hyperboloid of curvature -c: points (N, D+1), time coordinate first (see
    ``geometry.lorentz``), the same space as ``PoincareBall`` in another model.

    ``expmap0`` takes the ball's tangent vector v (the module's convention): the hyperboloid's
    own tangent vector is 2v, so v lands at distance 2||v|| from the origin, as on the ball.
    Distances need no boundary margin; the radius cap of ``expmap0`` (``max_radius(dtype)`` on
    sqrt(c) * distance, i.e. sqrt(c) ||v|| <= 16 in float32) keeps cosh finite."""

    name = "lorentz"
    curved = True

    def expmap0(self, v: torch.Tensor) -> torch.Tensor:
        return lorentz_expmap0(_BALL_TO_HYPERBOLOID * v, self.curvature_for(v))

    def logmap0(self, x: torch.Tensor) -> torch.Tensor:
        return lorentz_logmap0(x, self.curvature_for(x)) / _BALL_TO_HYPERBOLOID

    def project(self, x: torch.Tensor) -> torch.Tensor:
        return lorentz_project(x, self.curvature_for(x))

    def point_dim(self, tangent_dim: int) -> int:
        return tangent_dim + 1

    def max_radius(self, dtype: torch.dtype) -> float:
        """The cap of ``expmap0`` on sqrt(c) * (distance to the origin) in ``dtype``."""
        return max_radius(dtype)

    def distance_form(self, x: torch.Tensor, y: torch.Tensor) -> GramForm:
        return lorentz_distance_form(x, y, self.curvature_for(x))

    @torch.no_grad()
    def check_point(self, z: torch.Tensor, name: str = "z") -> None:
        """On the upper sheet of the hyperboloid of this curvature: <x, x>_L = -1/c (to a
        relative 1e-3), time coordinate first and positive."""
        super().check_point(z, name)
        if z.shape[0] == 0:
            return
        c, x = float(self.curvature), z.detach().double()
        inner = x[:, 1:].pow(2).sum(dim=1) - x[:, 0].pow(2)
        off = float(((inner + 1 / c).abs() / (x.pow(2).sum(dim=1) + 1 / c)).max())
        if not off < 1e-3 or not bool((x[:, 0] > 0).all()):
            raise ValueError(
                f"{name} is not on the hyperboloid of curvature -{c:.4g} (time coordinate first, "
                f"<x, x>_L = -1/c = {-1 / c:.4g}; Poincare points (N, D), or another curvature?); "
                f"{_MAP_HINT}"
            )


# the conformal factor of the ball at its origin: the differential of the isometry ball ->
# hyperboloid there, which turns the ball's tangent vector v into the hyperboloid's 2v
_BALL_TO_HYPERBOLOID = 2.0
_MAP_HINT = "map them with the space's expmap0 (heads.SpaceProjector) and use that space"


_SPACES: dict[str, type[Manifold]] = {
    cls.name: cls for cls in (PoincareBall, Lorentz, Euclidean, Sphere)
}
GEOMETRIES: tuple[str, ...] = tuple(_SPACES)  # the one list of geometry names
CURVED: tuple[str, ...] = tuple(n for n, cls in _SPACES.items() if cls.curved)


def check_geometry(name: str, curvature: Curvature | None = None) -> None:
    """The only place the geometry name and its curvature are checked.

    Args:
        name: the geometry, one of ``GEOMETRIES``.
        curvature: its curvature's magnitude c (used by the hyperbolic ones).

    Raises:
        ValueError: an unknown geometry (naming the choices and the closest one), or a
            hyperbolic one whose curvature is not a number > 0.
    """
    if name not in _SPACES:
        match = difflib.get_close_matches(str(name), GEOMETRIES, n=1, cutoff=0.4)
        hint = f" (did you mean {match[0]!r}?)" if match else ""
        raise ValueError(f"geometry must be one of {GEOMETRIES}, got {name!r}{hint}")
    if _SPACES[name].curved:
        if isinstance(curvature, torch.Tensor):
            check_curvature(curvature)
        elif isinstance(curvature, bool) or not isinstance(curvature, (int, float)):
            raise ValueError(
                f"curvature must be a number > 0 for geometry {name!r}, got {curvature!r}"
            )
        elif not curvature > 0:  # also rejects NaN
            raise ValueError(
                f"curvature must be > 0 for geometry {name!r} (curvature -c), got {curvature!r}"
            )


def make_space(
    name: str, curvature: Curvature | None = None, learnable_curvature: bool = False
) -> Manifold:
    """A space by name.

    Args:
        name: one of ``GEOMETRIES``.
        curvature: c > 0 of the hyperbolic spaces (curvature -c); ignored by the flat and
            spherical ones.
        learnable_curvature: the hyperbolic space trains c (a softplus parameter), from
            ``curvature``.

    Returns:
        The space, an ``nn.Module``.

    Raises:
        ValueError: as ``check_geometry``.
    """
    check_geometry(name, curvature)
    cls = _SPACES[name]
    if cls.curved:
        return cls(curvature, learnable_curvature)
    return cls()


def check_space(space: object, where: str = "space") -> Manifold:
    """An argument that must be a space.

    Args:
        space: the argument.
        where: its name in the message.

    Returns:
        ``space``, when it is a ``Manifold``.

    Raises:
        ValueError: anything else, with how to build one.
    """
    if not isinstance(space, Manifold):
        raise ValueError(
            f"{where} must be a Manifold, e.g. geometry.make_space('poincare', 0.1) (one of "
            f"{GEOMETRIES}), got {space!r}"
        )
    return space


def space_from_dict(description: dict) -> Manifold:
    """Inverse of ``Manifold.to_dict``.

    Args:
        description: ``{"name": ..., "curvature": ..., "learnable_curvature": ...}``.

    Returns:
        The space it describes (a learnable curvature starts at the stored value).

    Raises:
        ValueError: no name, or what ``make_space`` refuses.
    """
    if not isinstance(description, dict) or "name" not in description:
        raise ValueError(f"a space description needs a 'name', got {description!r}")
    return make_space(
        description["name"],
        description.get("curvature"),
        bool(description.get("learnable_curvature", False)),
    )
