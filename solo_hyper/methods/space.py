"""What every method with an embedding space shares: the ``geometry`` arguments, their checks
and the space written into checkpoints (so evaluation reads it instead of guessing)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from solo_hyper.geometry import (
    GEOMETRIES,
    LEGACY_DISTANCES,
    Manifold,
    check_geometry,
    make_space,
)
from solo_hyper.losses.infonce import check_chunk_size

CHECKPOINT_KEY = "embedding_space"


def space_args(geometry: str) -> dict[str, Any]:
    """The arguments of a method whose embeddings live in ``geometry`` by default."""
    return {
        "geometry": geometry,  # one of GEOMETRIES
        # the earlier key, an alias kept so that old configs and checkpoints still load:
        # poincare | cosine (sphere) | sq_euclidean (sphere)
        "distance": None,
        "curvature": 0.1,  # c of the hyperbolic spaces (curvature -c)
        "learnable_curvature": False,
        "chunk_size": None,  # null: fused loss; K or auto: blocks of K anchors, O(K M) memory
    }


def geometry_of(args: SimpleNamespace | dict) -> str:
    """The configured geometry; the deprecated ``distance`` alias wins when it is set."""
    get = args.get if isinstance(args, dict) else lambda k, d=None: getattr(args, k, d)
    distance = get("distance")
    if distance is not None:
        return LEGACY_DISTANCES.get(distance, distance)
    return get("geometry")


def check_space_args(args: SimpleNamespace) -> None:
    """geometry/distance, curvature, learnable_curvature and chunk_size, before any work."""
    if args.distance is not None and args.distance not in LEGACY_DISTANCES:
        raise ValueError(
            f"method_kwargs.distance must be one of {tuple(LEGACY_DISTANCES)} or null, got "
            f"{args.distance!r} (deprecated: use method_kwargs.geometry, one of {GEOMETRIES})"
        )
    try:
        check_geometry(geometry_of(args), args.curvature)
    except ValueError as err:
        raise ValueError(f"method_kwargs.{err}") from None
    if not isinstance(args.learnable_curvature, bool):
        raise ValueError(
            "method_kwargs.learnable_curvature must be true or false, got "
            f"{args.learnable_curvature!r}"
        )
    try:
        check_chunk_size(args.chunk_size)
    except ValueError as err:
        raise ValueError(f"method_kwargs.{err}") from None


def space_from_args(args: SimpleNamespace) -> Manifold:
    return make_space(geometry_of(args), args.curvature, args.learnable_curvature)


class EmbeddingSpaceMixin:
    """``embedding_space`` = the projector's space, and stored in every checkpoint."""

    @property
    def embedding_space(self) -> Manifold:
        return self.projector.space

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint[CHECKPOINT_KEY] = self.embedding_space.to_dict()
