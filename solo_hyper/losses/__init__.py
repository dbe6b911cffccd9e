"""Loss functions (pure torch): one function per loss, and the same losses as nn.Modules."""

from solo_hyper.losses.contrastive import contrastive_loss
from solo_hyper.losses.ebclr import ebclr_loss
from solo_hyper.losses.modules import EBCLRLoss, HyperbolicInfoNCELoss, InfoNCELoss

__all__ = ["EBCLRLoss", "HyperbolicInfoNCELoss", "InfoNCELoss", "contrastive_loss", "ebclr_loss"]
