"""Embedding geometry: manifold objects (``manifolds``) over small pure functions per model
(``poincare``, ``lorentz``) and the Gram-product kernels every pairwise distance uses (``gram``).

The pure Poincare functions stay importable from here (``from solo_hyper.geometry import
expmap0, poincare_distance_matrix, ...``). Torch only.
"""

from solo_hyper.geometry.gram import ASINH_SQRT, LINEAR, SQRT, GramForm, Kernel, sq_floor
from solo_hyper.geometry.lorentz import (
    lorentz_distance_matrix,
    lorentz_expmap0,
    lorentz_inner,
    lorentz_logmap0,
    lorentz_project,
    lorentz_to_poincare,
    poincare_to_lorentz,
)
from solo_hyper.geometry.manifolds import (
    CURVED,
    GEOMETRIES,
    Euclidean,
    Lorentz,
    Manifold,
    PoincareBall,
    Sphere,
    check_geometry,
    check_space,
    make_space,
    space_from_dict,
)
from solo_hyper.geometry.poincare import (
    Curvature,
    ball_margin,
    check_curvature,
    clip_features,
    expmap0,
    hyperbolic_float32,
    logmap0,
    mobius_add,
    poincare_distance,
    poincare_distance_factors,
    poincare_distance_matrix,
    project,
    sqrt_curvature,
    upcast_half,
)

__all__ = [
    "ASINH_SQRT",
    "CURVED",
    "Curvature",
    "Euclidean",
    "GEOMETRIES",
    "GramForm",
    "Kernel",
    "LINEAR",
    "Lorentz",
    "Manifold",
    "PoincareBall",
    "SQRT",
    "Sphere",
    "ball_margin",
    "check_curvature",
    "check_geometry",
    "check_space",
    "clip_features",
    "expmap0",
    "hyperbolic_float32",
    "logmap0",
    "lorentz_distance_matrix",
    "lorentz_expmap0",
    "lorentz_inner",
    "lorentz_logmap0",
    "lorentz_project",
    "lorentz_to_poincare",
    "make_space",
    "mobius_add",
    "poincare_distance",
    "poincare_distance_factors",
    "poincare_distance_matrix",
    "poincare_to_lorentz",
    "project",
    "space_from_dict",
    "sq_floor",
    "sqrt_curvature",
    "upcast_half",
]
