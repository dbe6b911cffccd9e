"""HCL (Hyperbolic Contrastive Learning, section 3.2) as a solo-learn method: SimCLR's InfoNCE with
the Poincare distance -d_c(z_i, z_a)/tau as logit."""

from __future__ import annotations

from solo_hyper import objectives
from solo_hyper.solo import adapter


class HCL(adapter.ObjectiveMethod):
    """HCL: ``METHODS["hcl"]``, built from solo-learn's own arguments.

    - arguments (``method_kwargs``): ``objectives.HCLArgs``, the space's (temperature, geometry,
      curvature, learnable_curvature, chunk_size) and the projector's (proj_hidden_dim,
      proj_output_dim, normalize, clip_radius), and ``supervised`` (false; true is SHCL);
    - head: solo's MLP projector, its output normalised and mapped onto the space
      (``objectives.contrastive.ContrastiveHead.head``);
    - loss: InfoNCE over every crop, the positives of a crop the other crops of its image
      (``objectives.HCL.loss``);
    - glue: none beyond the shared step (``ObjectiveMethodMixin.training_step``).
    """

    METHOD = "hcl"
    OBJECTIVE = objectives.HCL
