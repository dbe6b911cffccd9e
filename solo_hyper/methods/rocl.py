"""RoCL (Kim et al., NeurIPS 2020) as a solo-learn method: RHCL's objective on the sphere (cosine
similarity, NT-Xent), RHCL's Euclidean baseline."""

from __future__ import annotations

from solo_hyper import objectives
from solo_hyper.solo import adapter


class RoCL(adapter.ObjectiveMethod):
    """RoCL: ``METHODS["rocl"]``, built from solo-learn's own arguments.

    - arguments (``method_kwargs``): ``objectives.RoCLArgs``, RHCL's with ``geometry: sphere``
      and temperature 0.5;
    - head: HCL's, onto the sphere (``objectives.contrastive.ContrastiveHead.head``);
    - loss: RHCL's (``objectives.RoCL``: the attack in ``prepare``, Eq. 11 in ``loss``);
    - glue: none beyond the shared step (``ObjectiveMethodMixin.training_step``).
    """

    METHOD = "rocl"
    OBJECTIVE = objectives.RoCL
