"""Embedding geometry: manifold objects (``manifolds``) over small pure functions per model
(``poincare``, ``lorentz``) and the Gram-product kernels every pairwise distance uses (``gram``).

The pure Poincare functions stay importable from here (``from solo_hyper.geometry import
expmap0, poincare_distance_matrix, ...``). Torch only.
"""

# Each submodule lists its public names once (its ``__all__``); the package re-exports those.
from solo_hyper.geometry import gram, lorentz, manifolds, poincare
from solo_hyper.geometry.gram import *  # noqa: F403
from solo_hyper.geometry.lorentz import *  # noqa: F403
from solo_hyper.geometry.manifolds import *  # noqa: F403
from solo_hyper.geometry.poincare import *  # noqa: F403

__all__ = sorted({*gram.__all__, *lorentz.__all__, *manifolds.__all__, *poincare.__all__})
