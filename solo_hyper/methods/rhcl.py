"""RHCL (Hyperbolic Contrastive Learning, section 3.4) as a solo-learn method: HCL with RoCL's
instance-wise l_inf PGD on the anchor crop (Eq. 9-11)."""

from __future__ import annotations

from solo_hyper import objectives
from solo_hyper.solo import adapter


class RHCL(adapter.ObjectiveMethod):
    """RHCL: ``METHODS["rhcl"]``, built from solo-learn's own arguments.

    - arguments (``method_kwargs``): ``objectives.RHCLArgs``, HCL's (without ``supervised``) and
      the attack's budget (eps, alpha, steps, random_start, lambda_adv, attack_temperature);
    - head: HCL's (``objectives.contrastive.ContrastiveHead.head``);
    - loss: ``objectives.RHCL.prepare`` attacks the first crop (exactly two, taken as [0, 1]
      pixels), ``objectives.RHCL.loss`` is Eq. 11 on the clean pair and the adversarial view;
    - glue: none beyond the shared step (``ObjectiveMethodMixin.training_step``).
    """

    METHOD = "rhcl"
    OBJECTIVE = objectives.RHCL
