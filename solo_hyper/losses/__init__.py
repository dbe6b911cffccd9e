"""Loss functions (pure torch): one function per loss."""

from solo_hyper.losses.contrastive import contrastive_loss

__all__ = ["contrastive_loss"]
