"""SHCL (Hyperbolic Contrastive Learning, section 3.3) as a solo-learn method: HCL with the
positives defined by the class labels (SupCon's form, Eq. 8)."""

from __future__ import annotations

from solo_hyper import objectives
from solo_hyper.solo import adapter


class SHCL(adapter.ObjectiveMethod):
    """SHCL: ``METHODS["shcl"]``, built from solo-learn's own arguments.

    - arguments (``method_kwargs``): ``objectives.SHCLArgs``, HCL's with ``supervised`` true;
    - head: HCL's (``objectives.contrastive.ContrastiveHead.head``);
    - loss: InfoNCE over every crop, the positives of a crop every crop of its class
      (``objectives.SHCL.loss``);
    - glue: none beyond the shared step (``ObjectiveMethodMixin.training_step``).
    """

    METHOD = "shcl"
    OBJECTIVE = objectives.SHCL
