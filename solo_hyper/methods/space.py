"""What every method with an embedding space shares: the space written into checkpoints (so
evaluation reads it instead of guessing)."""

from __future__ import annotations

from types import SimpleNamespace

from solo_hyper.geometry import Manifold

CHECKPOINT_KEY = "embedding_space"


def geometry_of(args: SimpleNamespace | dict) -> str | None:
    """The configured geometry (None for methods that declare none)."""
    return args.get("geometry") if isinstance(args, dict) else getattr(args, "geometry", None)


class EmbeddingSpaceMixin:
    """``embedding_space`` = the projector's space, and stored in every checkpoint."""

    @property
    def embedding_space(self) -> Manifold:
        return self.projector.space

    @property
    def curvature(self):
        """The space's curvature c (a tensor when learnable)."""
        return self.embedding_space.curvature

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint[CHECKPOINT_KEY] = self.embedding_space.to_dict()
