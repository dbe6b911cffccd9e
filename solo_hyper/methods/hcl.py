"""HCL and SHCL as solo-learn methods: the objectives of ``solo_hyper.objectives.contrastive``
(Hyperbolic Contrastive Learning, sections 3.2-3.3) behind the adapter's method base."""

from __future__ import annotations

from solo_hyper import objectives
from solo_hyper.methods.space import EmbeddingSpaceMixin
from solo_hyper.solo import adapter


class HCL(EmbeddingSpaceMixin, adapter.MethodBase):
    """Self-supervised hyperbolic contrastive learning (positives: other crops of the image)."""

    OBJECTIVE = objectives.HCL


class SHCL(HCL):
    """Supervised hyperbolic contrastive learning (positives: every sample of the same class)."""

    OBJECTIVE = objectives.SHCL
