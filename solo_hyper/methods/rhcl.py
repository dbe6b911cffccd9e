"""RHCL and RoCL as solo-learn methods: the objectives of ``solo_hyper.objectives.robust``
(instance-wise adversarial contrastive learning, HCL paper section 3.4).

The objectives take [0, 1] crops (``pixel_space_crops``): the adapter hands them un-normalised
crops, made so by the on-device augmentation, or de-normalised from solo's CPU pipeline with the
statistics that pipeline used (the objective's ``crop_stats``)."""

from __future__ import annotations

from solo_hyper import objectives
from solo_hyper.methods.space import EmbeddingSpaceMixin
from solo_hyper.solo import adapter


class RHCL(EmbeddingSpaceMixin, adapter.MethodBase):
    """Robust hyperbolic contrastive learning (Eq. 11 with the Poincare distance)."""

    OBJECTIVE = objectives.RHCL


class RoCL(RHCL):
    """RoCL (Kim et al., NeurIPS 2020): the same objective with cosine similarity, tau 0.5."""

    OBJECTIVE = objectives.RoCL
