"""What every method with an embedding space shares: the ``geometry`` arguments, their checks
and the space written into checkpoints (so evaluation reads it instead of guessing)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from solo_hyper.geometry import Manifold, check_geometry, make_space
from solo_hyper.losses.infonce import check_chunk_size

CHECKPOINT_KEY = "embedding_space"


def space_args(geometry: str) -> dict[str, Any]:
    """The arguments of a method whose embeddings live in ``geometry`` by default."""
    return {
        "geometry": geometry,  # one of GEOMETRIES
        "curvature": 0.1,  # c of the hyperbolic spaces (curvature -c)
        "learnable_curvature": False,
        "chunk_size": None,  # null: fused loss; K or auto: blocks of K anchors, O(K M) memory
    }


def geometry_of(args: SimpleNamespace | dict) -> str | None:
    """The configured geometry (None for methods that declare none)."""
    return args.get("geometry") if isinstance(args, dict) else getattr(args, "geometry", None)


def check_space_args(args: SimpleNamespace) -> None:
    """geometry, curvature, learnable_curvature and chunk_size, before any work."""
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
